#!/usr/bin/env python3
"""What one ``reserve_many`` costs PostgreSQL, and how a drain changes it.

On a throwaway cluster (tests/pgcluster.py), the engine's schema with one tube
of ``--jobs`` ready jobs, then a drain with no server in between: ``--batch``
reserves per ``reserve_many`` (as many workers), each batch then deleted by
``delete_many``, one connection, each statement its own transaction as in the
engine.  Printed along the way: the client-side time per reserved job (commit
included) per stretch of the drain, and at a few points the statement under
``EXPLAIN (ANALYZE, BUFFERS)``: its execution time and the buffers it touched
(dead index entries of drained jobs at the head of ``jobs_ready`` show there).

    python bench/pg_reserve_cost.py
    python bench/pg_reserve_cost.py --jobs 20000 --batch 10 --plan
"""
from __future__ import annotations

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, ROOT)

from pgcluster import Cluster, unavailable  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=20000, help="ready jobs at the start")
    ap.add_argument("--batch", type=int, default=10, help="reserves per statement")
    ap.add_argument("--stretch", type=int, default=300, help="statements per printed line")
    ap.add_argument("--plan", action="store_true", help="print the first plan in full")
    args = ap.parse_args()
    why = unavailable()
    if why:
        raise SystemExit(why)
    import psycopg

    from twisted_stalk.pg.schema import migrate
    from twisted_stalk.pg.sql import statements

    cluster = Cluster().init().start()
    try:
        dsn = cluster.dsn()
        migrate(dsn, "cost")
        sql = statements("cost")
        k = args.batch
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("PREPARE rm(text[], bigint[], bigint) AS " + sql["reserve_many"])
            conn.execute("PREPARE dm(bigint[], bigint[], bigint, text[]) AS "
                         + sql["delete_many"])
            conn.execute(
                "INSERT INTO cost.jobs (id, tube, state, pri, delay, ttr, created_at, body) "
                "SELECT nextval('cost.job_ids'), 't', 0, 1024, 0, 60, 0, '\\x00' "
                "FROM generate_series(1, %s)", (args.jobs,))
            conn.execute("VACUUM ANALYZE cost.jobs")
            tubes = "{" + ",".join(["t"] * k) + "}"
            conns = "{" + ",".join(str(i) for i in range(1, k + 1)) + "}"
            reserve = f"EXECUTE rm('{tubes}', '{conns}', 1)"
            statements_left = args.jobs // k
            explain_at = {0, statements_left // 4, statements_left // 2,
                          3 * statements_left // 4, statements_left - 1}
            spent, timed = 0.0, 0
            for i in range(statements_left):
                if i in explain_at:
                    plan = conn.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + reserve
                                        ).fetchone()[0][0]
                    top = plan["Plan"]
                    buffers = top.get("Shared Hit Blocks", 0) + top.get("Shared Read Blocks", 0)
                    print(f"statement {i}: EXPLAIN ANALYZE {plan['Execution Time']:.3f} ms, "
                          f"planning {plan.get('Planning Time', 0.0):.3f} ms, "
                          f"{buffers} buffers", flush=True)
                    if args.plan and i == 0:
                        for line in conn.execute("EXPLAIN (ANALYZE, BUFFERS) " + reserve):
                            print("   ", line[0])
                    taken = [(n, job_id) for job_id, n in conn.execute(
                        "SELECT id, owner_conn FROM cost.jobs WHERE state = 1")]
                else:
                    started = time.perf_counter()
                    taken = [(row[0], row[1]) for row in conn.execute(reserve).fetchall()]
                    spent += time.perf_counter() - started
                    timed += 1
                ids = "{" + ",".join(str(job_id) for _, job_id in taken) + "}"
                owners = "{" + ",".join(str(n) for n, _ in taken) + "}"
                conn.execute(f"EXECUTE dm('{ids}', '{owners}', 1, '{{t}}')")
                if (i + 1) % args.stretch == 0 and timed:
                    print(f"statements {i + 1 - args.stretch}-{i}: "
                          f"{1e6 * spent / timed / k:.1f} µs per reserved job "
                          "(client side, commit included)", flush=True)
                    spent, timed = 0.0, 0
    finally:
        cluster.destroy()


if __name__ == "__main__":
    main()
