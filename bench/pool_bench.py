"""BeanstalkPool figures: put and reserve throughput over 1, 2 and 3 servers,
and how soon a job on an idle server is picked up while the others are busy.

    python bench/pool_bench.py                    # three beanstalkd 1.12 servers
    python bench/pool_bench.py --kind ours        # three of ours (stalkd)

Starts the servers itself (127.0.0.1, free ports) and stops them at the end.
One client process; 100-byte bodies.

* put: ``pool.put`` pipelined in windows of ``--window`` (gatherResults per
  window), ``--puts`` puts per round, best and median of ``--rounds``;
  the same with a plain ``BeanstalkClient`` on one server for comparison.
* reserve: ``--jobs`` jobs spread over the servers, then a ``Worker`` with
  ``--concurrency`` loops and a handler that returns at once drains them
  (reserve + delete per job); jobs/s from start to empty.
* issue cost: CPU µs to issue one put (no network: in-memory servers of
  ``twisted_stalk.testing``, warm, garbage collection off), pool and client;
* pick-up: every server but the last holds a backlog the worker is
  draining (so every worker loop is busy); every 20 ms a job is put on the
  last, idle server by another client; its pick-up latency is the time from
  sending its put to its handler call (so it includes the put's own trip to
  the server, about one round trip).
"""
from __future__ import annotations

import argparse
import functools
import gc
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
from typing import List

from twisted.internet import defer, task

from twisted_stalk.client import BeanstalkClient, BeanstalkPool, Worker

BODY = b"x" * 100
print = functools.partial(print, flush=True)  # noqa: A001 (progress as it comes)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(kind: str) -> "tuple[subprocess.Popen, int]":
    port = free_port()
    if kind == "reference":
        cmd = [shutil.which("beanstalkd") or "beanstalkd", "-l", "127.0.0.1", "-p", str(port)]
    else:
        cmd = [sys.executable, "-m", "twisted_stalk_cli.stalkd", "-l", "127.0.0.1",
               "-p", str(port)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as probe:
                probe.sendall(b"\r\n")
                if probe.recv(64).startswith(b"UNKNOWN_COMMAND"):
                    return proc, port
        except OSError:
            pass
        if time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"{kind} did not start")
        time.sleep(0.02)


def issue_cost(n: int = 20000, repeat: int = 3) -> "tuple[float, float]":
    """CPU µs to issue one put through a pool of 3 in-memory servers, and
    through a plain client of one (best of ``repeat``)."""
    from twisted_stalk.testing import MemoryCluster
    cluster = MemoryCluster(3)
    pool, client = cluster.pool(), cluster.servers[0].client()

    def once(put) -> float:
        gc.disable()
        try:
            t0 = time.process_time()
            for _ in range(n):
                put(BODY, 1024, 0, 60)
            cost = (time.process_time() - t0) / n * 1e6
        finally:
            gc.enable()
        cluster.flush()
        return cost
    costs = [(once(pool.put), once(client.put)) for _ in range(repeat)]
    cluster.close()
    return min(c[0] for c in costs), min(c[1] for c in costs)


def load() -> str:
    return "%.1f" % os.getloadavg()[0]


async def put_rate(reactor, target, count: int, window: int, tube: str):
    """(puts/s, client CPU µs per put) for ``count`` puts through ``target``."""
    t0, c0 = time.perf_counter(), time.process_time()
    for start in range(0, count, window):
        await defer.gatherResults([target.put(BODY, 1024, 0, 60, tube)
                                   for _ in range(min(window, count - start))])
    return (count / (time.perf_counter() - t0), (time.process_time() - c0) / count * 1e6)


async def drain_rate(reactor, pool, jobs: int, concurrency: int, tube: str):
    """Put ``jobs`` jobs, then time a Worker (on a pool or a client) draining
    them: (jobs/s, client CPU µs per job)."""
    for start in range(0, jobs, 1000):
        await defer.gatherResults([pool.put(BODY, 1024, 0, 60, tube)
                                   for _ in range(min(1000, jobs - start))])
    done: defer.Deferred = defer.Deferred()
    count = [0]

    def handler(job):
        count[0] += 1
        if count[0] == jobs:
            done.callback(None)
    worker = Worker(pool, handler, tubes=[tube], concurrency=concurrency)
    t0, c0 = time.perf_counter(), time.process_time()
    worker.start()
    await done
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
    await worker.stop()
    return jobs / elapsed, cpu / jobs * 1e6


async def pickup(reactor, ports: List[int], concurrency: int, samples: int,
                 tube: str) -> List[float]:
    pool = BeanstalkPool([f"tcp:127.0.0.1:{p}" for p in ports], reactor=reactor,
                         watch=[tube])
    await pool.connect()
    busy = [BeanstalkClient(f"tcp:127.0.0.1:{p}", reactor=reactor) for p in ports[:-1]]
    idle = BeanstalkClient(f"tcp:127.0.0.1:{ports[-1]}", reactor=reactor)
    for c in busy:  # a backlog the worker cannot finish during the run
        for _ in range(40):
            await defer.gatherResults([c.put(BODY, 1024, 0, 60, tube) for _ in range(1000)])
    put_at = {}
    waits: List[float] = []

    def handler(job):
        if job.server == idle.name:
            waits.append(time.perf_counter() - put_at.pop(job.body))
    worker = Worker(pool, handler, tubes=[tube], concurrency=concurrency)
    worker.start()
    await task.deferLater(reactor, 0.2, lambda: None)
    for i in range(samples):
        body = b"probe %d" % i
        put_at[body] = time.perf_counter()
        await idle.put(body, 1024, 0, 60, tube)
        await task.deferLater(reactor, 0.02, lambda: None)
    while len(waits) < samples:
        await task.deferLater(reactor, 0.01, lambda: None)
    backlog = sum([(await c.stats_tube(tube))["current-jobs-ready"] for c in busy])
    await worker.stop()
    for c in busy + [idle]:
        await c.close()
    await pool.close()
    print(f"    (busy servers' backlog at the end: {backlog} jobs)")
    return waits


async def measure(label: str, unit: str, rounds: int, run) -> None:
    """Print the best and median rate of ``rounds`` runs of ``run()``, and the
    median client CPU per operation."""
    results = [await run() for _ in range(rounds)]
    rates = [r for r, _ in results]
    cpu = statistics.median(c for _, c in results)
    print(f"  {label}: {max(rates):,.0f} / {statistics.median(rates):,.0f} {unit} "
          f"(best / median), client CPU {cpu:.1f} µs each, load {load()}")


async def main(reactor, args) -> None:
    pooled, plain = issue_cost()
    print(f"issuing a put, no network: pool {pooled:.2f} µs, client {plain:.2f} µs")
    procs = [start(args.kind) for _ in range(3)]
    ports = [p for _, p in procs]
    print(f"{args.kind} x3, load {load()}, {args.puts} puts/round, window {args.window}, "
          f"{args.jobs} jobs/round")
    workers = f"Worker(concurrency={args.concurrency}) reserve+delete"
    try:
        for n in (1, 2, 3):
            tube = f"bench-{n}"
            pool = BeanstalkPool([f"tcp:127.0.0.1:{p}" for p in ports[:n]], reactor=reactor,
                                 timeout=60)
            await pool.connect()
            await measure(f"{n} server(s), pool.put", "puts/s", args.rounds,
                          lambda: put_rate(reactor, pool, args.puts, args.window, tube))
            await defer.gatherResults([c.flush_tube(tube) for c in pool.clients.values()])
            await measure(f"{n} server(s), {workers}", "jobs/s", args.rounds,
                          lambda: drain_rate(reactor, pool, args.jobs, args.concurrency, tube))
            await pool.close()
            if n == 1:  # the single-server client, for comparison
                client = BeanstalkClient(f"tcp:127.0.0.1:{ports[0]}", reactor=reactor,
                                         timeout=60)
                await measure("1 server, BeanstalkClient.put", "puts/s", args.rounds,
                              lambda: put_rate(reactor, client, args.puts, args.window, tube))
                await client.flush_tube(tube)
                await measure(f"1 server, BeanstalkClient {workers}", "jobs/s", args.rounds,
                              lambda: drain_rate(reactor, client, args.jobs, args.concurrency,
                                                 tube))
                await client.close()
        for n in (2, 3):
            waits = await pickup(reactor, ports[:n], args.concurrency, args.samples,
                                 f"pickup-{n}")
            waits.sort()
            print(f"  pick-up on the idle server, {n - 1} busy: median "
                  f"{statistics.median(waits) * 1000:.2f} ms, p90 "
                  f"{waits[int(len(waits) * 0.9)] * 1000:.2f} ms, max {waits[-1] * 1000:.2f} ms"
                  f" ({len(waits)} jobs), load {load()}")
    finally:
        for proc, _ in procs:
            proc.send_signal(signal.SIGTERM)
            proc.wait()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kind", choices=("reference", "ours"), default="reference")
    ap.add_argument("--puts", type=int, default=30000)
    ap.add_argument("--window", type=int, default=1000)
    ap.add_argument("--jobs", type=int, default=10000)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--samples", type=int, default=100)
    arguments = ap.parse_args()
    task.react(lambda reactor: defer.ensureDeferred(main(reactor, arguments)))
