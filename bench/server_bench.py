#!/usr/bin/env python3
"""Benchmark a beanstalk server over real loopback sockets.

Starts the server (ours by default, or the reference ``beanstalkd``, or any
command with ``{port}``), pins it to CPU 0 and this load generator to CPU 1,
runs each scenario and prints ops/s and latency percentiles per command.

    python bench/server_bench.py                      # our stalkd
    python bench/server_bench.py --server reference   # Debian's beanstalkd
    python bench/server_bench.py --server 'twistd -n --pidfile= beanstalk --port tcp:{port}'

The generator is Python (selectors, pipelined, no per-reply allocation beyond
parsing), so on pipelined scenarios it may saturate before a fast server does;
for side-by-side figures against the reference use bench/compare/run_compare.sh,
which drives both servers with a C generator.  This script is separate from
the tests and bounded in time and job count.
"""
from __future__ import annotations

import argparse
import os
import selectors
import shlex
import signal
import socket
import subprocess
import sys
import time
from typing import Dict, List

SCENARIOS = {
    # name: (mode, connections, pipeline depth, jobs)
    "put-seq": ("put", 1, 1, 20000),
    "put-pipe": ("put", 20, 16, 100000),
    "prd": ("reserve-delete", 10, 16, 100000),
    "mixed": ("mixed", 20, 1, 30000),
}


def percentile(values: List[float], p: float) -> float:
    if not values:
        return 0.0
    values = sorted(values)
    return values[min(len(values) - 1, int(p / 100 * len(values)))]


class Conn:
    __slots__ = ("sock", "buf", "sent_at", "pending", "out")

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""
        self.sent_at: List[tuple] = []  # (kind, time) per command in flight
        self.pending = 0
        self.out = b""


def run(port: int, mode: str, nconns: int, depth: int, jobs: int, size: int,
        cap: float) -> Dict[str, object]:
    body = b"x" * size
    put = b"put 1024 0 120 %d\r\n%s\r\n" % (size, body)
    conns = [Conn(port) for _ in range(nconns)]
    tube = b"bench%d" % os.getpid()
    for c in conns:
        c.sock.sendall(b"use %s\r\nwatch %s\r\nignore default\r\n" % (tube, tube))
        got = b""
        while got.count(b"\r\n") < 3:
            got += c.sock.recv(4096)
    lat: Dict[str, List[float]] = {"put": [], "reserve": [], "delete": []}
    issued = 0
    done = 0
    # Phase 1 of reserve-delete fills the tube with puts.
    phases = ["put", "reserve-delete"] if mode == "reserve-delete" else [mode]
    started = time.perf_counter()
    elapsed = 0.0
    for phase in phases:
        issued = done = 0
        sel = selectors.DefaultSelector()
        for c in conns:
            c.sock.setblocking(False)
            sel.register(c.sock, selectors.EVENT_READ, c)
        t0 = time.perf_counter()

        def issue(c: Conn) -> None:
            nonlocal issued
            parts = []
            now = time.perf_counter()
            while c.pending < depth and issued < jobs and now - t0 < cap:
                issued += 1
                c.pending += 1
                if phase == "put":
                    parts.append(put)
                    c.sent_at.append(("put", now))
                elif phase == "reserve-delete":
                    parts.append(b"reserve-with-timeout 1\r\n")
                    c.sent_at.append(("reserve", now))
                else:  # mixed: put, then reserve, then delete, one at a time
                    parts.append(put)
                    c.sent_at.append(("put", now))
            if parts:
                c.sock.send(b"".join(parts))

        for c in conns:
            issue(c)
        while done < issued:
            for key, _ in sel.select(5):
                c = key.data
                data = c.sock.recv(262144)
                if not data:
                    raise SystemExit("server closed a connection")
                c.buf += data
                more = []
                while True:
                    i = c.buf.find(b"\r\n")
                    if i < 0:
                        break
                    line = c.buf[:i]
                    if line.startswith(b"RESERVED"):
                        n = int(line.rsplit(b" ", 1)[1])
                        if len(c.buf) < i + 2 + n + 2:
                            break
                        c.buf = c.buf[i + 2 + n + 2:]
                    else:
                        c.buf = c.buf[i + 2:]
                    kind, sent = c.sent_at.pop(0)
                    now = time.perf_counter()
                    lat[kind].append(now - sent)
                    if kind == "reserve" and line.startswith(b"RESERVED"):
                        more.append(b"delete %s\r\n" % line.split(b" ")[1])
                        c.sent_at.append(("delete", now))
                    elif kind == "put" and phase == "mixed":
                        more.append(b"reserve\r\n")
                        c.sent_at.append(("reserve", now))
                    else:
                        c.pending -= 1
                        done += 1
                if more:
                    c.sock.send(b"".join(more))
                issue(c)
        elapsed += time.perf_counter() - t0
        sel.close()
        for c in conns:
            c.sock.setblocking(True)
    for c in conns:
        c.sock.close()
    ops = sum(len(v) for v in lat.values())
    return {"jobs": done, "ops": ops, "seconds": elapsed, "lat": lat,
            "wall": time.perf_counter() - started}


def start_server(spec: str, port: int) -> subprocess.Popen:
    if spec == "ours":
        cmd = [sys.executable, "-m", "twisted_stalk_cli.stalkd", "-l", "127.0.0.1", "-p", str(port)]
    elif spec == "reference":
        cmd = ["beanstalkd", "-l", "127.0.0.1", "-p", str(port)]
    else:
        cmd = shlex.split(spec.format(port=port))
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
    try:
        os.sched_setaffinity(proc.pid, {0})
    except (AttributeError, OSError):
        pass
    for _ in range(500):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc
        except OSError:
            time.sleep(0.01)
    proc.kill()
    raise SystemExit("server did not start")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--server", default="ours", help="ours | reference | a command with {port}")
    ap.add_argument("--port", type=int, default=11431)
    ap.add_argument("--scenarios", default=",".join(SCENARIOS))
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--cap", type=float, default=10.0, help="seconds per phase at most")
    args = ap.parse_args()
    try:
        os.sched_setaffinity(0, {1})
    except (AttributeError, OSError):
        pass
    proc = start_server(args.server, args.port)
    try:
        print(f"server: {args.server}   body: {args.size} B")
        print(f"{'scenario':10} {'c x p':>7} {'jobs/s':>10} {'ops/s':>10}   "
              f"{'cmd':8} {'p50':>9} {'p99':>9} {'p99.9':>9}")
        for name in args.scenarios.split(","):
            mode, nconns, depth, jobs = SCENARIOS[name]
            r = run(args.port, mode, nconns, depth, int(jobs * args.scale), args.size, args.cap)
            first = True
            for cmd, values in r["lat"].items():
                if not values:
                    continue
                head = (f"{name:10} {nconns:>3}x{depth:<3} {r['jobs'] / r['seconds']:>10,.0f} "
                        f"{r['ops'] / r['seconds']:>10,.0f}" if first else " " * 43)
                first = False
                print(f"{head}   {cmd:8} {percentile(values, 50) * 1e6:>7.0f}us "
                      f"{percentile(values, 99) * 1e6:>7.0f}us {percentile(values, 99.9) * 1e6:>7.0f}us")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(10)


if __name__ == "__main__":
    main()
