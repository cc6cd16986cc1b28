#!/usr/bin/env python3
"""Does holding many delayed jobs change the cost of put/reserve/delete?

Starts our server (stalkd) twice: once empty, once after loading --delayed
jobs with a one-hour delay into another tube.  Each time it runs the same
unpipelined put/reserve/delete loop (bench/server_bench.py's "mixed" mode)
and prints jobs/s, latency percentiles and the server's CPU time per job, so
the two runs can be compared.

    python bench/delayed_hold.py --delayed 1000000
"""
from __future__ import annotations

import argparse
import os
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from server_bench import percentile, run, start_server  # noqa: E402


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def load_delayed(port: int, count: int, size: int) -> None:
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(b"use held\r\n")
    body = b"d" * size
    cmd = b"put 100 3600 120 %d\r\n%s\r\n" % (size, body)
    batch = 1000
    pending = 0
    buf = b""
    sent = 0
    while sent < count or pending:
        if sent < count and pending < 20 * batch:
            n = min(batch, count - sent)
            sock.sendall(cmd * n)
            sent += n
            pending += n
            continue
        buf += sock.recv(1 << 20)
        cut = buf.rfind(b"\r\n") + 2
        pending -= buf[:cut].count(b"INSERTED")
        buf = buf[cut:]
    sock.close()


def measure(label: str, delayed: int, port: int, jobs: int, size: int) -> None:
    proc = start_server("ours", port)
    try:
        t0 = time.perf_counter()
        if delayed:
            load_delayed(port, delayed, size)
        loaded = time.perf_counter() - t0
        before = cpu_seconds(proc.pid)
        r = run(port, "mixed", 20, 1, jobs, size, 30.0)
        cpu = cpu_seconds(proc.pid) - before
        lat = r["lat"]
        print(f"{label:>22}: {r['jobs'] / r['seconds']:>8,.0f} jobs/s  "
              f"server CPU {cpu / max(1, r['jobs']) * 1e6:6.1f} us/job  "
              f"reserve p50 {percentile(lat['reserve'], 50) * 1e6:5.0f}us "
              f"p99 {percentile(lat['reserve'], 99) * 1e6:6.0f}us  "
              f"RSS {rss_kb(proc.pid) / 1024:,.0f} MiB"
              + (f"  (loaded in {loaded:.1f}s)" if delayed else ""))
    finally:
        proc.terminate()
        proc.wait(30)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--delayed", type=int, default=1_000_000)
    ap.add_argument("--jobs", type=int, default=20000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--port", type=int, default=11433)
    args = ap.parse_args()
    try:
        os.sched_setaffinity(0, {1})
    except (AttributeError, OSError):
        pass
    measure("empty server", 0, args.port, args.jobs, args.size)
    measure(f"{args.delayed:,} delayed held", args.delayed, args.port, args.jobs, args.size)


if __name__ == "__main__":
    main()
