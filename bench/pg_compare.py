#!/usr/bin/env python3
"""Two builds of the PostgreSQL engine, A and B, through the side-by-side
driver (``bench/compare/run_compare.py``), on one throwaway cluster: the
A/B pair every claimed gain of the engine stands on.

The driver starts both servers pinned to one CPU, runs each scenario A, B,
A, B ... and prints medians, the B/A ratio and server CPU per job.  Here
each side is ``stalkd --engine`` from its own source tree (``--a`` and
``--b``, this checkout by default), each in its own schema on the same
cluster (fsync on, ``synchronous_commit=on``, as in bench/pg_bench.py), so
the pair shares the database's machine and differs only in the node.
``--a-engine memory`` puts the in-memory engine on side A instead, for the
engine's cost against no database at all.  The server CPU the driver reports
is the node's alone (PostgreSQL's backends are not pinned or counted).

    python bench/pg_compare.py --a /work/wt-before --rounds 5 --scenarios mixed-50c,wake-20
    python bench/pg_compare.py --a-engine memory --scenarios prd,mixed-50c

Every other argument goes to the driver (``--rounds``, ``--scenarios``,
``--scale``, ``--cap``, ``--json`` ...); its memory scenario is left out
(a node's resident size says nothing of a queue kept in PostgreSQL).
``BSTALK_LOAD`` names a prebuilt generator; the servers' logs go to
``BENCH_LOGDIR`` (by default ``pg_compare-logs`` in the temporary folder).
"""
from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from typing import List

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, HERE)


#: The side-by-side driver (bench/compare/README.md).
DRIVER = os.path.join(HERE, "compare", "run_compare.py")


def server_command(tree: str, python: str, engine: str) -> str:
    """The driver's server template (``{port}`` left for it) for ``stalkd``
    from ``tree``; ``engine`` is a conninfo, or "" for the in-memory engine."""
    argv = [python, "-m", "twisted_stalk_cli.stalkd", "-l", "127.0.0.1", "-p", "{port}"]
    if engine:
        argv += ["--engine", engine]
    quoted = " ".join(a if a == "{port}" else shlex.quote(a) for a in argv)
    return f"env PYTHONPATH={shlex.quote(os.path.abspath(tree))} {quoted}"


def main(argv: List[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", default=ROOT, help="side A's source tree [this checkout]")
    ap.add_argument("--b", default=ROOT, help="side B's source tree [this checkout]")
    ap.add_argument("--a-engine", choices=("pg", "memory"), default="pg")
    ap.add_argument("--python", default=sys.executable, help="the servers' interpreter")
    args, rest = ap.parse_known_args(argv)
    import pg_bench
    from pgcluster import Cluster
    import twisted_stalk.pg.driver  # noqa: F401 (on PyPy it fits psycopg's ctypes binding)
    cluster = Cluster(settings=["shared_buffers=256MB", "max_wal_size=2GB", "fsync=on",
                                "synchronous_commit=on"]).init().start()
    try:
        dsn = cluster.dsn()
        env = dict(os.environ, BSTALK_LOAD=pg_bench.generator(), SERVER_B_LABEL="B",
                   BENCH_LOGDIR=os.environ.get("BENCH_LOGDIR") or os.path.join(
                       tempfile.gettempdir(), "pg_compare-logs"),
                   SERVER_A_CMD=server_command(
                       args.a, args.python,
                       "" if args.a_engine == "memory" else dsn + " stalk_schema=side_a"),
                   SERVER_B_CMD=server_command(args.b, args.python, dsn + " stalk_schema=side_b"))
        print(f"A: {env['SERVER_A_CMD']}\nB: {env['SERVER_B_CMD']}", flush=True)
        # The driver is CPython's (its run_compare.sh runs python3; PyPy has no
        # os.sched_getaffinity); the nodes run on --python.
        return subprocess.run([shutil.which("python3") or sys.executable, DRIVER,
                               "--no-memory", *rest],
                              env=env).returncode
    finally:
        cluster.stop()
        cluster.destroy()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
