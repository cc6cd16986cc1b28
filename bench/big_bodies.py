"""Server CPU time to receive one put body of 1 to 64 MiB (sent in 16 KiB writes).

    python bench/big_bodies.py [--server CMD]      # CMD with {port}; default: ours

Prints, per size, the server's CPU seconds (user + system, from /proc) between
the put line and its INSERTED.  The server is started with -z 64 MiB.
"""
from __future__ import annotations

import argparse
import os
import shlex
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
OURS = f"{sys.executable} -m twisted_stalk_cli.stalkd -l 127.0.0.1 -p {{port}} -z 67108864"


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--server", default=OURS)
    ap.add_argument("--sizes", default="1,2,4,8,16,32,64", help="MiB, comma-separated")
    args = ap.parse_args()
    port = free_port()
    proc = subprocess.Popen(shlex.split(args.server.format(port=port)),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(200):
            try:
                s = socket.create_connection(("127.0.0.1", port), timeout=60)
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                break
            except OSError:
                time.sleep(0.05)
        chunk = b"z" * 16384
        print(f"{'MiB':>4} {'server CPU s':>12} {'wall s':>7}")
        for mib in (int(x) for x in args.sizes.split(",")):
            size = mib * 1024 * 1024
            cpu0, t0 = cpu_seconds(proc.pid), time.perf_counter()
            s.sendall(b"put 0 0 60 %d\r\n" % size)
            for _ in range(size // len(chunk)):
                s.sendall(chunk)
            s.sendall(b"\r\n")
            reply = s.recv(64)
            assert reply.startswith(b"INSERTED"), reply
            job_id = int(reply.split()[1])
            cpu = cpu_seconds(proc.pid) - cpu0
            print(f"{mib:>4} {cpu:>12.2f} {time.perf_counter() - t0:>7.2f}")
            s.sendall(b"delete %d\r\n" % job_id)
            assert s.recv(64) == b"DELETED\r\n"
    finally:
        proc.terminate()
        proc.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
