#!/usr/bin/env python3
"""The PostgreSQL engine against the in-memory engine and beanstalkd -b -f 0.

Drives each server with the shared C load generator (``bstalk_load``, the
one ``../shared/bench/run_compare.py`` builds; ``BSTALK_LOAD`` names another
build) over loopback, one scenario after the other:

* ``memory``: ``stalkd`` (in-memory engine, no binlog);
* ``beanstalkd``: Debian's ``beanstalkd -b DIR -f 0`` (fsync on every change:
  the nearest durable reference);
* ``pg-1``: one ``stalkd --engine`` node on a throwaway local PostgreSQL
  (fsync on, ``synchronous_commit=on``: every acknowledged change is on disk);
* ``pg-2``: two nodes on that database; the scenario's connections are split
  between them (one generator per node, run at the same time; ops/s are
  added, the latency shown is the worse of the two).

Then ``--sweep`` runs mixed put/reserve/delete on pg-2 at growing client
counts, for throughput against latency.

    python bench/pg_bench.py                       # all targets, all scenarios
    python bench/pg_bench.py --targets pg-2 --sweep 2,4,8,16,32,64

Bounded in time (each run is capped by ``--cap`` seconds) and in jobs; all
servers listen on 127.0.0.1 only and are stopped at the end.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests"))

from pgcluster import Cluster, unavailable  # noqa: E402

# name: (mode, connections, pipeline, jobs)
SCENARIOS: Dict[str, Tuple[str, int, int, int]] = {
    "put-seq": ("put", 1, 1, 5000),
    "mixed-50c": ("mixed", 50, 1, 20000),
    "wake-20": ("wait-wake", 20, 1, 5000),
    "prd": ("put-reserve-delete", 10, 16, 20000),
}


def generator() -> str:
    found = os.environ.get("BSTALK_LOAD") or os.path.join(ROOT, "..", "shared", "bench",
                                                          "bstalk_load")
    if not os.path.exists(found):
        source = found + ".c"
        if not os.path.exists(source):
            raise SystemExit("no bstalk_load: set BSTALK_LOAD to the shared load generator")
        subprocess.run(["gcc", "-O2", "-o", found, source], check=True)
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_listening(port: int, proc: subprocess.Popen, wait: float = 30.0) -> None:
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server on {port} exited: {proc.stderr.read().decode()[-2000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                s.sendall(b"list-tube-used\r\n")
                if s.recv(64).startswith(b"USING"):
                    return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"server on {port} did not start")


class Target:
    """One or more servers the generator is pointed at."""

    def __init__(self, name: str, argvs: List[List[str]]) -> None:
        self.name = name
        self.ports = [free_port() for _ in argvs]
        self.procs = []
        for argv, port in zip(argvs, self.ports):
            argv = [a.replace("{port}", str(port)) for a in argv]
            proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            self.procs.append(proc)
            wait_listening(port, proc)

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


def run(gen: str, target: Target, scenario: str, conns: Optional[int], cap: float
        ) -> Dict[str, Dict[str, float]]:
    """One figure row per measured phase of the generator(s)."""
    mode, default_conns, pipeline, jobs = SCENARIOS[scenario]
    conns = conns or default_conns
    ports = target.ports if conns > 1 else target.ports[:1]
    share = max(1, conns // len(ports))
    procs = []
    for i, port in enumerate(ports):
        argv = [gen, "--addr", f"127.0.0.1:{port}", "--mode", mode, "--conns", str(share),
                "--pipeline", str(pipeline), "--ops", str(jobs // len(ports)),
                "--duration", str(cap), "--timeout", str(cap + 60), "--quiet",
                "--tube", f"b{os.getpid()}x{i}"]
        procs.append(subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=cap + 90)
        line = out.decode().strip().splitlines()[-1] if out.strip() else "{}"
        results.append(json.loads(line))
    out: Dict[str, Dict[str, float]] = {}
    for r in results:
        for p in r.get("phases", []):
            if not p.get("measured") or p["name"] == "cleanup":
                continue
            row = out.setdefault(p["name"], {"ops": 0.0, "p50": 0.0, "p99": 0.0, "errors": 0,
                                              "conns": share * len(ports), "runs": 0})
            row["ops"] += p["ops_per_sec"]
            row["p50"] = max(row["p50"], p["lat_us"]["p50"] / 1000)
            row["p99"] = max(row["p99"], p["lat_us"]["p99"] / 1000)
            row["errors"] += p["errors"]
            row["runs"] += 1
    for row in out.values():
        if row["runs"] != len(procs):
            row["ops"] = 0.0  # a generator failed: no figure
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--targets", default="memory,beanstalkd,pg-1,pg-2")
    ap.add_argument("--scenarios", default=",".join(SCENARIOS))
    ap.add_argument("--sweep", default="", help="client counts for mixed on pg-2, e.g. 2,4,8")
    ap.add_argument("--cap", type=float, default=10.0, help="seconds per run at most")
    ap.add_argument("--pool", type=int, default=4, help="stalk_pool of each node")
    args = ap.parse_args()
    why = unavailable()
    if why:
        raise SystemExit(why)
    gen = generator()
    python = sys.executable
    ours = [python, "-m", "twisted_stalk_cli.stalkd", "-l", "127.0.0.1", "-p", "{port}"]
    cluster = Cluster(settings=["shared_buffers=256MB", "max_wal_size=2GB"]).init().start()
    binlog = tempfile.mkdtemp(prefix="stalk-bench-binlog-")
    targets = args.targets.split(",")
    print(f"# PostgreSQL {cluster.sql('SHOW server_version')[0][0]}, fsync on, "
          f"synchronous_commit on; stalk_pool={args.pool}")
    print("| target | scenario | clients | jobs/s | p50 ms | p99 ms |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    try:
        for name in targets:
            for scenario in args.scenarios.split(","):
                target = make_target(name, ours, cluster, binlog, args.pool)
                try:
                    rows = run(gen, target, scenario, None, args.cap)
                finally:
                    target.stop()
                for phase, r in rows.items():
                    label = scenario if len(rows) == 1 else f"{scenario}/{phase}"
                    print(f"| {name} | {label} | {r['conns']} | {r['ops']:,.0f} | "
                          f"{r['p50']:.2f} | {r['p99']:.2f} |", flush=True)
        if args.sweep:
            print("\n| pg-2 mixed, clients | jobs/s | p50 ms | p99 ms |")
            print("| ---: | ---: | ---: | ---: |")
            for conns in [int(c) for c in args.sweep.split(",")]:
                target = make_target("pg-2", ours, cluster, binlog, args.pool)
                try:
                    r = run(gen, target, "mixed-50c", conns, args.cap)["mixed"]
                finally:
                    target.stop()
                print(f"| {conns} | {r['ops']:,.0f} | {r['p50']:.2f} | {r['p99']:.2f} |",
                      flush=True)
    finally:
        cluster.destroy()
        shutil.rmtree(binlog, ignore_errors=True)


_SCHEMAS = iter(range(1, 10 ** 6))


def make_target(name: str, ours: List[str], cluster: Cluster, binlog: str, pool: int) -> Target:
    if name == "memory":
        return Target(name, [ours])
    if name == "beanstalkd":
        if not shutil.which("beanstalkd"):
            raise SystemExit("beanstalkd is not installed (apt-get install beanstalkd)")
        shutil.rmtree(binlog, ignore_errors=True)
        os.makedirs(binlog)
        return Target(name, [["beanstalkd", "-l", "127.0.0.1", "-p", "{port}", "-b", binlog,
                              "-f", "0"]])
    engine = cluster.dsn() + f" stalk_schema=bench{next(_SCHEMAS)} stalk_pool={pool}"
    count = 2 if name == "pg-2" else 1
    return Target(name, [ours + ["--engine", engine] for _ in range(count)])


if __name__ == "__main__":
    main()
