"""Server memory while one client pipelines commands and never reads the replies.

    python bench/unread_replies.py [--server CMD]     # CMD with {port}; default: ours

Two runs on a fresh server each: ``peek`` of a 60 KB job 8,000 times (480 MB
of replies if they were all made), and ``stats`` 100,000 times.  Prints the
server's RSS before, while the client holds its connection open, and after
it closed, and the server CPU time the flood took.
"""
from __future__ import annotations

import argparse
import shlex
import socket
import subprocess
import sys
import threading
import time

from big_bodies import cpu_seconds, free_port

OURS = f"{sys.executable} -m twisted_stalk_cli.stalkd -l 127.0.0.1 -p {{port}}"


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def run(server: str, setup: bytes, flood: bytes, count: int) -> None:
    port = free_port()
    proc = subprocess.Popen(shlex.split(server.format(port=port)),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(200):
            try:
                c = socket.create_connection(("127.0.0.1", port), timeout=10)
                break
            except OSError:
                time.sleep(0.05)
        c.sendall(setup)
        c.recv(100)
        time.sleep(0.2)
        before, cpu0 = rss_mib(proc.pid), cpu_seconds(proc.pid)
        abuser = socket.create_connection(("127.0.0.1", port))
        sender = threading.Thread(target=_send, args=(abuser, flood * count), daemon=True)
        sender.start()
        time.sleep(3)
        during, cpu = rss_mib(proc.pid), cpu_seconds(proc.pid) - cpu0
        abuser.close()
        time.sleep(1)
        after = rss_mib(proc.pid)
        print(f"{flood.strip().decode():>8} x {count:>7,}: RSS {before:6.1f} -> {during:6.1f} MiB "
              f"while connected, {after:6.1f} MiB after it closed; server CPU {cpu:.2f} s")
    finally:
        proc.terminate()
        proc.wait()


def _send(sock: socket.socket, data: bytes) -> None:
    try:
        sock.sendall(data)
    except OSError:
        pass


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--server", default=OURS)
    args = ap.parse_args()
    body = b"b" * 60000
    run(args.server, b"put 0 0 60 %d\r\n%s\r\n" % (len(body), body), b"peek 1\r\n", 8000)
    run(args.server, b"list-tube-used\r\n", b"stats\r\n", 100000)
    return 0


if __name__ == "__main__":
    sys.exit(main())
