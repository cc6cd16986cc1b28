#!/usr/bin/env python3
"""What a job costs on the PostgreSQL engine: statements, commits, CPU.

Runs ``bstalk_load`` scenarios (the rows of ``bench/pg_bench.py``) against
one or two ``stalkd --engine`` nodes on a throwaway cluster with
``pg_stat_statements`` loaded, and prints per job: statements (their calls),
commits (``pg_stat_database.xact_commit``), node CPU and PostgreSQL CPU (all
of the cluster's processes, from ``/proc``), and the top statements by time.
CPU per job is the figure to compare on a shared, noisy machine.

    BSTALK_LOAD=/tmp/bstalk_load python bench/pg_costs.py --nodes 1 --scenarios wake-20,mixed-50c
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))

import pg_bench  # noqa: E402
from pgcluster import Cluster, _children  # noqa: E402

_TICK = os.sysconf("SC_CLK_TCK")


def cpu(pids: List[int]) -> float:
    """User + system seconds of ``pids`` so far."""
    total = 0.0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / _TICK
        except OSError:
            pass
    return total


def cpu_by_kind(postmaster: int) -> Dict[str, float]:
    """PostgreSQL's CPU seconds so far by process kind (backends, walwriter,
    autovacuum ...); ``exited`` is what the postmaster has reaped."""
    out: Dict[str, float] = {}
    for pid in [postmaster] + _children(postmaster):
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                title = f.read().split(b"\0")[0].decode("utf-8", "replace")
        except OSError:
            continue
        kind = title.split(":", 1)[1].strip() if ":" in title else "postmaster"
        if kind.startswith(("autovacuum worker", "autovacuum launcher")):
            kind = kind.split(" ")[0] + " " + kind.split(" ")[1]
        elif pid != postmaster and not kind.startswith(("walwriter", "checkpointer",
                                                         "background writer", "logical",
                                                         "archiver")):
            kind = "backends"
        out[kind] = out.get(kind, 0.0) + (int(fields[11]) + int(fields[12])) / _TICK
        if pid == postmaster:
            out["exited"] = (int(fields[13]) + int(fields[14])) / _TICK
    return out


def counters(cluster: Cluster) -> Dict[str, float]:
    rows = cluster.sql("SELECT xact_commit FROM pg_stat_database WHERE datname = 'postgres'")
    calls = cluster.sql("SELECT coalesce(sum(calls), 0) FROM pg_stat_statements "
                        "WHERE query NOT LIKE '%pg_stat%'")
    return {"commits": float(rows[0][0]), "calls": float(calls[0][0])}


def run(gen: str, target: "pg_bench.Target", scenario: str, cap: float, depth: int = 0):
    """(jobs/s, jobs) of the scenario's measured phases, all generators
    together; ``depth``: commands in flight per connection (0: the scenario's)."""
    mode, conns, pipeline, jobs = pg_bench.SCENARIOS[scenario]
    pipeline = depth or pipeline
    ports = target.ports if conns > 1 else target.ports[:1]
    procs = [subprocess.Popen([gen, "--addr", f"127.0.0.1:{port}", "--mode", mode,
                               "--conns", str(max(1, conns // len(ports))),
                               "--pipeline", str(pipeline), "--ops", str(jobs // len(ports)),
                               "--duration", str(cap), "--timeout", str(cap + 60), "--quiet",
                               "--tube", f"c{os.getpid()}x{i}"], stdout=subprocess.PIPE)
             for i, port in enumerate(ports)]
    rate = done = 0.0
    for proc in procs:
        out, _ = proc.communicate(timeout=cap + 90)
        for p in json.loads(out.decode().strip().splitlines()[-1]).get("phases", []):
            if p.get("measured") and p["name"] != "cleanup":
                rate += p["ops_per_sec"]
                done += p["ops_per_sec"] * p["secs"]
    return rate, done


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=1)
    ap.add_argument("--scenarios", default="wake-20,mixed-50c")
    ap.add_argument("--cap", type=float, default=10.0)
    ap.add_argument("--pool", type=int, default=4)
    ap.add_argument("--top", type=int, default=6)
    ap.add_argument("--pipeline", type=int, default=0,
                    help="commands in flight per connection (wake-20: the producer's)")
    args = ap.parse_args()
    gen = pg_bench.generator()
    ours = [sys.executable, "-m", "twisted_stalk_cli.stalkd", "-l", "127.0.0.1", "-p", "{port}"]
    cluster = Cluster(settings=["shared_buffers=256MB", "max_wal_size=2GB",
                                "shared_preload_libraries=pg_stat_statements",
                                "pg_stat_statements.track=all"]).init().start()
    try:
        cluster.sql("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        print("| nodes | scenario | jobs/s | stmts/job | commits/job | node us/job "
              "| pg us/job |")
        print("| ---: | --- | ---: | ---: | ---: | ---: | ---: |")
        for scenario in args.scenarios.split(","):
            target = pg_bench.make_target(f"pg-{args.nodes}", ours, cluster, "", args.pool)
            try:
                time.sleep(0.5)
                cluster.sql("SELECT pg_stat_statements_reset()")
                nodes = [p.pid for p in target.procs]
                pg = [cluster.proc.pid] + _children(cluster.proc.pid)
                before = counters(cluster)
                k0 = cpu_by_kind(cluster.proc.pid)
                c0, p0, t0 = cpu(nodes), cpu(pg), time.monotonic()
                rows, jobs = run(gen, target, scenario, args.cap, args.pipeline)
                c1, p1 = cpu(nodes), cpu(sorted(set(pg + _children(cluster.proc.pid))))
                k1 = cpu_by_kind(cluster.proc.pid)
                after = counters(cluster)
                top = cluster.sql(
                    "SELECT calls, round(total_exec_time::numeric, 1), "
                    "left(regexp_replace(query, '\\s+', ' ', 'g'), 70) FROM pg_stat_statements "
                    f"ORDER BY total_exec_time DESC LIMIT {args.top}")
            finally:
                target.stop()
            span = time.monotonic() - t0
            jobs = max(jobs, 1.0)
            print(f"| {args.nodes} | {scenario}{'/p%d' % args.pipeline if args.pipeline else ''} | {rows:,.0f} | "
                  f"{(after['calls'] - before['calls']) / jobs:.2f} | "
                  f"{(after['commits'] - before['commits']) / jobs:.2f} | "
                  f"{(c1 - c0) * 1e6 / jobs:.0f} | {(p1 - p0) * 1e6 / jobs:.0f} |  "
                  f"({span:.1f} s)", flush=True)
            kinds = {k: (v - k0.get(k, 0.0)) * 1e6 / jobs for k, v in k1.items()}
            print("    PostgreSQL us/job by process: " + ", ".join(
                f"{k} {v:.0f}" for k, v in sorted(kinds.items(), key=lambda kv: -kv[1])
                if v >= 1))
            for calls, ms, query in top:
                print(f"    {calls:>7} {ms:>9} ms  {query}")
    finally:
        cluster.destroy()


if __name__ == "__main__":
    main()
