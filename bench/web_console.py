"""Response times of the web console with a large queue, and how long the
server stalls other clients meanwhile.

Starts ``stalkd --web`` (credentials from a generated file), fills one tube
with ``--jobs`` jobs and ``--tubes`` more tubes with a few jobs each over the
wire, then times each API request ``--repeat`` times while a separate wire
client sends ``stats-tube`` round trips back to back and records the worst
round trip (a stall of the reactor shows there).  Prints a Markdown table.

    python bench/web_console.py --jobs 100000 --tubes 1000
"""
from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

TOKEN = "bench-token-0123456789abcdef"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int) -> None:
    deadline = time.monotonic() + 20
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def pipeline(sock: socket.socket, commands: list, chunk: int = 2000) -> None:
    """Send commands in chunks and read their one-line replies."""
    buf = b""
    for i in range(0, len(commands), chunk):
        part = commands[i:i + chunk]
        sock.sendall(b"".join(part))
        want = len(part)
        while want:
            while b"\r\n" not in buf:
                buf += sock.recv(65536)
            line, _, buf = buf.partition(b"\r\n")
            want -= 1


class Pinger(threading.Thread):
    """Back-to-back ``stats-tube default`` round trips; keeps the worst."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.worst = 0.0
        self.samples = []
        self.running = True

    def run(self) -> None:
        while self.running:
            start = time.perf_counter()
            self.sock.sendall(b"stats-tube default\r\n")
            data = b""
            while not data.endswith(b"\n\r\n") or data.count(b"\r\n") < 2:
                data += self.sock.recv(65536)
            took = time.perf_counter() - start
            self.samples.append(took)
            self.worst = max(self.worst, took)
            time.sleep(0.001)

    def reset(self) -> None:
        self.worst = 0.0
        self.samples = []


def request(base: str, path: str, method: str = "GET", body=None) -> dict:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(base + path, data=data, method=method, headers={
        "Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())


def timed(base: str, path: str, repeat: int, pinger: Pinger, method="GET", body=None):
    times = []
    pinger.reset()
    for _ in range(repeat):
        start = time.perf_counter()
        request(base, path, method, body)
        times.append(time.perf_counter() - start)
    return statistics.median(times), max(times), pinger.worst


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=100000)
    parser.add_argument("--tubes", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args()
    port, web = free_port(), free_port()
    tmp = tempfile.mkdtemp()
    auth = os.path.join(tmp, "auth")
    with open(auth, "w") as f:
        f.write(f"token bench admin sha256${hashlib.sha256(TOKEN.encode()).hexdigest()}\n")
    proc = subprocess.Popen([sys.executable, "-m", "twisted_stalk_cli.stalkd", "-l", "127.0.0.1",
                             "-p", str(port), "--web", f"tcp:{web}:interface=127.0.0.1",
                             "--web-auth", auth], stderr=subprocess.DEVNULL)
    try:
        wait_port(port)
        wait_port(web)
        base = f"http://127.0.0.1:{web}/api/v1/"
        sock = socket.create_connection(("127.0.0.1", port))
        started = time.perf_counter()
        pipeline(sock, [b"use big\r\n"] + [
            b"put %d %d 120 100\r\n%s\r\n" % (i % 5000, 0 if i % 10 else 3600,
                                             (b"job %08d " % i).ljust(100, b"x"))
            for i in range(args.jobs)])
        for t in range(args.tubes):
            pipeline(sock, [b"use tube-%04d\r\n" % t] + [b"put 0 0 60 5\r\nhello\r\n"] * 3)
        fill = time.perf_counter() - started
        ids = request(base, "tubes/big/jobs?limit=1")["jobs"]
        pinger = Pinger(port)
        pinger.start()
        time.sleep(3)  # a few sampler ticks
        quiet = statistics.median(pinger.samples)
        rows = []
        for label, path in (
            (f"overview (1 of {args.tubes + 2} tubes pages, 50 rows)", "overview"),
            ("overview sorted by ready, descending", "overview?sort=ready&order=desc"),
            ("overview filtered (tube-09)", "overview?filter=tube-09"),
            ("tube page: ready jobs by id, first page", "tubes/big/jobs?state=ready&sort=id"),
            ("tube page: ready jobs by id, page at offset 45,000",
             "tubes/big/jobs?state=ready&sort=id&offset=45000"),
            ("tube page: queue order, first page", "tubes/big/jobs?state=ready&sort=queue"),
            ("tube page: queue order, offset 45,000",
             "tubes/big/jobs?state=ready&sort=queue&offset=45000"),
            ("tube page: by priority, descending", "tubes/big/jobs?sort=pri&order=desc"),
            ("tube page: by age (newest first)", "tubes/big/jobs?sort=age"),
            ("tube page: delayed by time left", "tubes/big/jobs?state=delayed&sort=time-left"),
            ("tube page: delayed by priority (a scan)", "tubes/big/jobs?state=delayed&sort=pri"),
            ("one job", f"jobs/{ids[0]['id']}"),
            ("connections", "connections"),
        ):
            median, worst, stall = timed(base, path, args.repeat, pinger)
            rows.append((label, median, worst, stall))
        median, worst, stall = timed(base, "tubes/big/search?q=no-such-text&seconds=30", 1,
                                     pinger)
        rows.append((f"search all {args.jobs:,} bodies (no match)", median, worst, stall))
        # Flush the delayed jobs (a tenth) in slices; poll the task.
        pinger.reset()
        start = time.perf_counter()
        task = request(base, "tubes/big/flush", "POST", {"state": "delayed", "confirm": "big"})
        task = task["task"]
        while task["state"] == "running" or not task["finished"]:
            time.sleep(0.05)
            task = request(base, f"tasks/{task['id']}")["task"]
        took = time.perf_counter() - start
        rows.append((f"flush {task['done']:,} delayed jobs (task, until done)", took, took,
                     pinger.worst))
        pinger.running = False
        print(f"{args.jobs:,} jobs in one tube, {args.tubes:,} more tubes "
              f"(filled in {fill:.1f}s); {args.repeat} requests each\n")
        print("| request | median | slowest | worst wire round trip meanwhile |")
        print("| --- | ---: | ---: | ---: |")
        for label, median, worst, stall in rows:
            print(f"| {label} | {median * 1000:.1f} ms | {worst * 1000:.1f} ms "
                  f"| {stall * 1000:.1f} ms |")
        print(f"\nA wire round trip with nothing else happening: {quiet * 1000:.2f} ms (median).")
    finally:
        proc.terminate()
        proc.wait(10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
