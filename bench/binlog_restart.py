"""How long a restart takes with N jobs in the binlog.

    python bench/binlog_restart.py --jobs 1000000 [--dir /tmp/bl-restart] [--size 100]

1. Fills DIR (emptied first) with N jobs through the real writer (in-process,
   with a Clock): 1/10 of them are then released with a delay, 1/20 buried and
   1/10 deleted and re-put, so replay sees every record type; default 10 MiB files.
2. Times ``read_directory`` + ``attach`` in-process (replay only).
3. Starts ``stalkd -b DIR`` and times launch -> the first ``stats`` reply that
   shows all N jobs (Python start-up, replay, restore: what an operator waits).
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import socket
import subprocess
import sys
import time

from twisted.internet.task import Clock

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from twisted_stalk.binlog import BinlogJournal  # noqa: E402
from twisted_stalk.core import MemoryEngine  # noqa: E402


class _L:
    def wake(self, outcome):
        pass


def fill(directory: str, jobs: int, size: int) -> int:
    clock = Clock()
    clock.advance(time.time())
    journal = BinlogJournal(directory, clock).open()
    queue = MemoryEngine(clock, journal=journal)
    journal.attach(queue)
    s = queue.open_session(_L())
    body = b"b" * size + b"\r\n"
    live = 0
    for i in range(jobs):
        job_id = queue.put(s, i % 1000, 0, 120, body)
        live += 1
        if i % 10 == 3:
            assert queue.reserve_job(s, job_id).id == job_id
            queue.release(s, job_id, 5, 3600)
        elif i % 20 == 7:
            assert queue.reserve_job(s, job_id).id == job_id
            queue.bury(s, job_id, 6)
        elif i % 10 == 9:
            queue.delete(s, job_id)
            queue.put(s, 1, 0, 60, body)
        if i % 256 == 0:
            clock.advance(0)
    clock.advance(0)
    journal.close()
    return len(queue.jobs)


def replay_in_process(directory: str) -> float:
    clock = Clock()
    clock.advance(time.time())
    t0 = time.perf_counter()
    journal = BinlogJournal(directory, clock).open()
    queue = MemoryEngine(clock, journal=journal)
    journal.attach(queue)
    elapsed = time.perf_counter() - t0
    n = len(queue.jobs)
    journal.close()
    return elapsed, n


def server_start(directory: str, expect: int, port: int) -> float:
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "twisted_stalk_cli.stalkd", "-l", "127.0.0.1",
                             "-p", str(port), "-b", directory], stderr=subprocess.PIPE)
    try:
        while True:
            try:
                sock = socket.create_connection(("127.0.0.1", port), timeout=60)
                break
            except OSError:
                time.sleep(0.005)
        sock.sendall(b"stats\r\n")
        data = b""
        while b"\nplatform" not in data:
            chunk = sock.recv(65536)
            if not chunk:
                raise SystemExit("server closed the connection: "
                                 + proc.stderr.read().decode())
            data += chunk
        elapsed = time.perf_counter() - t0
        text = data.decode()
        total = sum(int(x) for x in re.findall(
            r"current-jobs-(?:ready|delayed|buried|reserved): (\d+)", text))
        assert total == expect, (total, expect)
        sock.close()
        return elapsed
    finally:
        proc.terminate()
        proc.wait(30)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=1_000_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--dir", default="/tmp/bl-restart")
    ap.add_argument("--port", type=int, default=11499)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    shutil.rmtree(args.dir, ignore_errors=True)
    os.makedirs(args.dir)
    t0 = time.perf_counter()
    n = fill(args.dir, args.jobs, args.size)
    files = [f for f in os.listdir(args.dir) if f.startswith("binlog.")]
    total = sum(os.path.getsize(os.path.join(args.dir, f)) for f in files)
    print(f"filled {args.dir}: {n} live jobs, {len(files)} files, {total / 1e6:.1f} MB "
          f"in {time.perf_counter() - t0:.1f} s")
    for run in range(args.runs):
        secs, m = replay_in_process(args.dir)
        print(f"replay in-process (read + restore into the queue): {secs:.2f} s for {m} jobs")
    for run in range(args.runs):
        secs = server_start(args.dir, n, args.port)
        print(f"stalkd -b: launch -> stats shows all {n} jobs: {secs:.2f} s")


if __name__ == "__main__":
    main()
