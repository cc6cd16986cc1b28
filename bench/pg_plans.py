#!/usr/bin/env python3
"""Every engine statement's plan, made while the jobs table was tiny, run on a grown one.

PostgreSQL keeps a prepared statement's generic plan (the engine's sessions
force generic plans: twisted_stalk/pg/sql.py, SESSION).  On a throwaway
cluster (tests/pgcluster.py) this prepares every statement of a tree with
its session settings while the jobs table holds 30 ready jobs (analyzed),
makes each plan, then grows the table to 40,000 jobs (50 tubes; 1 in 200
held, 1 in 10 delayed, 1 in 10 buried, the rest ready) and runs each
statement once under ``EXPLAIN (ANALYZE, BUFFERS)`` (in a transaction
rolled back), printing its time, the indexes its plan reads, a sequential
scan of the jobs table if any, and the buffers it touched::

    python bench/pg_plans.py                       # this tree
    python bench/pg_plans.py --tree /other/checkout
    python bench/pg_plans.py --rolling   # a version 1 database upgraded while a version 1
                                         # node is registered: both versions' indexes
    python bench/pg_plans.py --verbose             # the plans themselves

``--busy``: the plans are made on the full table instead, analyzed, with
every job in one of two tubes (``t1``, ``t2``), as in a queue whose work
goes through one busy tube: the statistics then say that a tube's probe
may return thousands of rows, and a plan that joins those rows with the
jobs table by hashing it reads the whole table at every execution.
"""
from __future__ import annotations

import argparse
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

#: Parameters of each statement (the console's pages share theirs).
ARGS = {
    "put": "('t1', 5, 0, 60, '\\x00'::bytea)",
    "put_many": "('{t1,t2}', '{1,2}', '{0,5}', '{60,60}', '{\"\\\\x00\",\"\\\\x00\"}', '{0,3}',"
                " 7)",
    "put_many_telling": "('{t1,t2}', '{1,2}', '{0,5}', '{60,60}',"
                        " '{\"\\\\x00\",\"\\\\x00\"}', '{0,3}', 7, 'ch')",
    "put_one": "('t1', 1, 0, 60, '\\x00'::bytea, 3, 7)",
    "put_one_telling": "('t1', 1, 0, 60, '\\x00'::bytea, 3, 7, 'ch')",
    "delete_many": "('{2,3}', '{0,0}', 7, '{t9}', '{0,0}')",
    "delete_many_taking": "('{2,3}', '{0,0}', 7, '{t9}', '{0,0}', '{t2}', '{2}')",
    "delete_one": "(2, 0, 7, '{t9}', 0)",
    "delete_one_taking": "(2, 0, 7, '{t9}', 0, '{t2}', '{2}')",
    "delete_many_kept": "('{2,3}', '{0,0}', 7, '{0,0}')",
    "delete_many_kept_taking": "('{2,3}', '{0,0}', 7, '{0,0}', '{t2}', '{2}')",
    "delete_one_kept": "(2, 0, 7, 0)", "delete_one_kept_taking": "(2, 0, 7, 0, '{t2}', '{2}')",
    "return_lost_takes": "(7, '{1}')", "return_taken": "('{1}', '{1}', 7)", "take_id": "",
    "reserve": "('{t1,t2}', 7, 3)", "reserve_many": "('{t1,t2}', '{3,4}', 7)",
    "reserve_job": "(5, 7, 3)", "delete": "(5, 7, 3)", "release": "(5, 7, 3, 10, 0, 1)",
    "bury": "(5, 7, 3, 10, 1)", "touch": "(5, 7, 3, 1)", "unreserve": "(5, 7, 3)",
    "give_back": "(7, 3, '{1}', '{1}')", "kick": "('t1', 10)", "kick_job": "(5)",
    "peek": "(5)", "peek_ready": "('t1')", "peek_delayed": "('t1')", "peek_buried": "('t1')",
    "stats_job": "(5)", "job": "(5)", "counts_tube": "('t1')", "counts_all": "",
    "tube_counts": "", "tubes_with_jobs": "", "tube_has_jobs": "('t1')",
    "ready_among": "('{t1,t2}')", "others": "(7)", "retired": "", "pause": "('t1', 0)",
    "paused": "", "forget_tube": "('t1', 7)", "promote": "", "expire": "",
    "still_held": "('{1,2}', 7)", "next_delayed": "", "register": "('h', 1)",
    "heartbeat": "(7, '{}', '{}')", "reclaim": "(5.0, 7, 'x')", "leave": "(7)", "orphans": "",
    "notify": "('ch', '{}')", "list_jobs": "('t1', 2, 10)", "flush": "('t1', '{3}')",
    "page_total": "('t1', 2)", "search": "('t1', 0, 100, '\\x00'::bytea)", "last_id": "",
}
PAGE_ARGS = "('t1', 2, 0, 10)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tree", default=ROOT, help="the checkout whose statements to plan")
    ap.add_argument("--rolling", action="store_true",
                    help="keep version 1's indexes beside version 2's (a version 1 node "
                         "registered during the upgrade)")
    ap.add_argument("--busy", action="store_true",
                    help="make the plans on the full, analyzed table, every job in t1 or t2")
    ap.add_argument("--drained", action="store_true",
                    help="make the plans on a drained table: 40,000 jobs put and deleted, "
                         "analyzed with none left")
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args()
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    sys.path.insert(0, args.tree)
    import psycopg
    from pgcluster import Cluster, unavailable

    from twisted_stalk.pg.schema import migrate
    from twisted_stalk.pg.sql import SESSION, statements
    why = unavailable()
    if why:
        sys.exit(f"pg_plans: {why}")
    schema = "plans"
    cluster = Cluster().init().start()
    try:
        if args.rolling:
            migrate(cluster.dsn(), schema, upto=1)
            with psycopg.connect(cluster.dsn(), autocommit=True) as conn:
                conn.execute(f"INSERT INTO {schema}.nodes (id, started_at, heartbeat_at)"
                             " VALUES (99, 0, 0)")
        migrate(cluster.dsn(), schema)
        sql = statements(schema)
        tubes = 2 if args.busy else 50  # t1, t2; or t0 ... t49
        insert = (f"INSERT INTO {schema}.jobs (id, tube, state, pri, delay, ttr, created_at,"
                  " deadline_at, buried_seq, owner_node, owner_conn, body)"
                  f" SELECT g, 't' || g %% {tubes} + {int(args.busy)},"
                  " CASE WHEN g %% 200 = 0 THEN 1"
                  " WHEN g %% 10 = 1 THEN 2 WHEN g %% 10 = 2 THEN 3 ELSE 0 END,"
                  " g %% 2000, 0, 60, 0, 1e10 + g, g, 7, g %% 100, ''"
                  " FROM generate_series(%s::int, %s::int) g")
        missing = [n for n in sql if n not in ARGS and not n.startswith("page_")]
        if missing:  # every statement is planned: a new one needs its parameters here
            sys.exit(f"pg_plans: no parameters in ARGS for {', '.join(missing)}")
        names = list(sql)
        with psycopg.connect(cluster.dsn(), autocommit=True) as conn:
            for name, value in SESSION.items():
                conn.execute(f"SELECT set_config('{name}', '{value}', false)")
            conn.execute("SET plan_cache_mode = force_generic_plan")
            conn.execute(f"INSERT INTO {schema}.nodes (id, started_at, heartbeat_at)"
                         " VALUES (7, 0, 0)")
            conn.execute(insert, (1, 40000 if args.busy else 30))
            if args.drained:
                conn.execute(insert, (100001, 140000))  # ids the later jobs do not use
                conn.execute(f"DELETE FROM {schema}.jobs")
            conn.execute(f"ANALYZE {schema}.jobs")
            for name in names:
                conn.execute(f'PREPARE "{name}" AS {sql[name]}')
            for name in names:  # the plans, made now
                with conn.transaction(force_rollback=True):
                    conn.execute(f'EXPLAIN EXECUTE "{name}"{ARGS.get(name, PAGE_ARGS)}')
            if args.drained:
                conn.execute(insert, (1, 40000))
            elif not args.busy:
                conn.execute(insert, (31, 40000))
            conn.execute(f"SELECT setval('{schema}.job_ids', 200000)")
            for name in names:
                with conn.transaction(force_rollback=True):
                    plan = [r[0] for r in conn.execute(
                        f'EXPLAIN (ANALYZE, BUFFERS) EXECUTE "{name}"'
                        f'{ARGS.get(name, PAGE_ARGS)}')]
                text = "\n".join(plan)
                indexes = sorted({w for line in plan for w in line.replace("(", " ").split()
                                  if re.match(r"^jobs_[a-z_]+$", w)})
                took = plan[-1].split()[-2] if "Execution" in plan[-1] else "?"
                seq = "seq" if "Seq Scan on jobs" in text else ""
                buffers = next((line.strip() for line in plan if "Buffers" in line), "")
                print(f"{name:22s} {took:>8s} ms {seq:3s} {' '.join(indexes)}  {buffers}")
                if args.verbose:
                    print(text)
    finally:
        cluster.destroy()


if __name__ == "__main__":
    main()
