"""The PostgreSQL schema's versions: the index entries a put and a reserve
write, and the rolling upgrade from version 1 (additive at once, the old
indexes dropped once no version 1 node is registered)."""
from __future__ import annotations

import re
import subprocess
import sys
import time
from typing import Dict, List

import pytest

from twisted_stalk.core import outcomes as o

psycopg = pytest.importorskip("psycopg")

#: The indexes of ``jobs`` in each version.
V1_INDEXES = {"jobs_pkey", "jobs_ready", "jobs_tube", "jobs_delayed", "jobs_reserved",
              "jobs_owner", "jobs_buried"}
V2_INDEXES = {"jobs_pkey", "jobs_ready", "jobs_delayed", "jobs_delayed_tube", "jobs_reserved",
              "jobs_buried"}


def _indexes(conn, schema: str) -> set:
    return {r[0] for r in conn.execute(
        "SELECT indexname FROM pg_indexes WHERE schemaname = %s AND tablename = 'jobs'",
        (schema,))}


def _entries_written(conn, schema: str, calls: List[str]) -> Dict[str, int]:
    """Index entries (B-tree leaf inserts in the WAL, pg_walinspect) that
    running ``calls`` wrote, per index of ``jobs``."""
    names = {str(r[1]): r[0] for r in conn.execute(
        "SELECT c.relname, c.relfilenode FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
        " WHERE i.indrelid = %s::regclass", (f"{schema}.jobs",))}
    start = conn.execute("SELECT pg_current_wal_insert_lsn()").fetchone()[0]
    for call in calls:
        conn.execute(call)
    conn.execute("SELECT pg_switch_wal()")  # (a flushed end to read up to)
    end = conn.execute("SELECT pg_current_wal_flush_lsn()").fetchone()[0]
    counts: Dict[str, int] = {}
    for (refs,) in conn.execute(
            "SELECT block_ref FROM pg_get_wal_records_info(%s, %s)"
            " WHERE resource_manager = 'Btree' AND record_type = 'INSERT_LEAF'", (start, end)):
        found = re.search(r"rel \d+/\d+/(\d+)", refs or "")
        if found and found.group(1) in names:
            name = names[found.group(1)]
            counts[name] = counts.get(name, 0) + 1
    return counts


@pytest.mark.parametrize("version", [1, 2])
def test_a_put_and_a_reserve_write_two_index_entries_each(pg_cluster, version):
    """Version 2 keeps one index per state besides the primary key: ten
    ready puts write twenty index entries and ten reserves twenty (version
    1: thirty and forty, jobs_tube with each and jobs_owner with a reserve)."""
    from twisted_stalk.pg.schema import migrate
    from twisted_stalk.pg.sql import statements
    schema = f"entries_v{version}"
    migrate(pg_cluster.dsn(), schema, upto=version)
    sql = statements(schema)
    with psycopg.connect(pg_cluster.dsn(), autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
        conn.execute(f"PREPARE put AS {sql['put']}")
        conn.execute(f"PREPARE reserve AS {sql['reserve']}")
        puts = _entries_written(conn, schema, [
            f"EXECUTE put('t', {n}, 0, 60, '\\x00'::bytea)" for n in range(10)])
        reserves = _entries_written(conn, schema, ["EXECUTE reserve('{t}', 7, 3)"] * 10)
        delayed = _entries_written(conn, schema, ["EXECUTE put('t', 0, 100, 60, '\\x00'::bytea)"])
    if version == 2:
        assert puts == {"jobs_pkey": 10, "jobs_ready": 10}
        assert reserves == {"jobs_pkey": 10, "jobs_reserved": 10}
        assert delayed == {"jobs_pkey": 1, "jobs_delayed": 1, "jobs_delayed_tube": 1}
    else:
        assert puts == {"jobs_pkey": 10, "jobs_ready": 10, "jobs_tube": 10}
        assert reserves == {"jobs_pkey": 10, "jobs_reserved": 10, "jobs_tube": 10,
                            "jobs_owner": 10}
        assert delayed == {"jobs_pkey": 1, "jobs_delayed": 1, "jobs_tube": 1}


def _stalkd(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "twisted_stalk_cli.stalkd", *args],
                          capture_output=True, text=True, timeout=60)


def _version_1_queue(conn, schema: str) -> int:
    """A version 1 node's row and its jobs, in every state, as version 1
    writes them; the node's id."""
    s = schema
    node = conn.execute(
        f"INSERT INTO {s}.nodes (id, started_at, heartbeat_at, hostname, pid)"
        f" SELECT nextval('{s}.node_ids'), e, e, 'old-host', 4242"
        f" FROM (SELECT extract(epoch FROM clock_timestamp())::float8 AS e) c RETURNING id").fetchone()[0]
    # (tube, state, pri, ttr, deadline from now, owner connection, buried, body)
    jobs = [("up", 0, 5, 60, 0, None, False, "five"),
            ("up", 0, 1, 60, 0, None, False, "one"),
            ("up", 0, 9, 60, 0, None, False, "nine"),
            ("up", 2, 3, 60, 1, None, False, "later"),
            ("up", 1, 2, 1, 1, 3, False, "held"),           # its TTR ends in a second
            ("up", 1, 0, 100, 100, 4, False, "held long"),  # back when its node is given up
            ("up", 3, 7, 60, 0, None, True, "buried")]
    for tube, state, pri, ttr, after, conn_id, buried, body in jobs:
        conn.execute(
            f"INSERT INTO {s}.jobs (id, tube, state, pri, delay, ttr, created_at, deadline_at,"
            f" buried_seq, owner_node, owner_conn, reserves, body)"
            f" SELECT nextval('{s}.job_ids'), %s, %s, %s, %s, %s, e, e + %s,"
            f" CASE WHEN %s THEN nextval('{s}.bury_seq') END, %s, %s, %s, %s"
            f" FROM (SELECT extract(epoch FROM clock_timestamp())::float8 AS e) c",
            (tube, state, pri, after if state == 2 else 0, ttr, after, buried,
             node if conn_id else None, conn_id, 1 if conn_id else 0, body.encode()))
    return node


def test_a_version_1_queue_upgrades_while_its_node_runs_and_drops_the_old_indexes_after(
        pg_cluster, pg_engine):
    """A version 1 database with jobs in every state and a registered version
    1 node: --engine-init adds version 2 at once and says that the old
    indexes stay while that node is registered; a version 2 node serves the
    jobs (priority order, kick, the delayed job, a held job back after its
    TTR and the other when its node is given up); then --engine-init drops
    the old indexes, leaving the index set of a new version 2 schema."""
    from test_engine_contract import _pg

    from twisted_stalk.pg.schema import migrate
    dsn = pg_cluster.dsn()
    schema = pg_engine.split("stalk_schema=")[1].split()[0]
    assert migrate(dsn, schema, upto=1)[:2] == (0, 1)
    with psycopg.connect(dsn, autocommit=True) as conn:
        old = _version_1_queue(conn, schema)
        assert _indexes(conn, schema) == V1_INDEXES

    first = _stalkd("--engine", pg_engine, "--engine-init")
    assert first.returncode == 0, first.stderr
    lines = first.stdout.strip().splitlines()
    assert lines[0] == f"schema {schema}: version 1 -> 2"
    assert len(lines) == 2 and f"while node {old} (old-host, pid 4242, version 1," in lines[1]
    assert lines[1].endswith("run --engine-init again once every node runs version 2")
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert _indexes(conn, schema) == V1_INDEXES | V2_INDEXES  # additive only
        assert conn.execute(f"SELECT version, finished FROM {schema}.schema_version"
                            f" ORDER BY version").fetchall() == [(1, True), (2, False)]

    h, stop = _pg(pg_engine + " stalk_heartbeat=0.3 stalk_dead_after=1.5")
    try:
        e = h.engine
        s = h.open()
        h(e.use(s, b"up"))
        h(e.watch(s, b"up"))
        h(e.ignore(s, b"default"))
        job = h(e.reserve_with_timeout(s, 0))
        assert job.body == b"one\r\n"
        assert h(e.delete(s, job.id)) is o.DELETED
        assert h(e.kick(s, 10)) == 1  # the buried job
        with psycopg.connect(dsn, autocommit=True) as conn:
            deadline = time.monotonic() + 20
            while conn.execute(f"SELECT count(*) FROM {schema}.nodes WHERE id = %s",
                               (old,)).fetchone()[0]:
                assert time.monotonic() < deadline, "the version 1 node was not given up"
                h.advance(0.2)
            h.advance(0.5)  # (the delayed job's second is over by now)
            timeouts = dict(conn.execute(f"SELECT body, timeouts FROM {schema}.jobs").fetchall())
        bodies = []
        for _ in range(6):
            job = h(e.reserve_with_timeout(s, 0))
            bodies.append(job.body)
            assert h(e.delete(s, job.id)) is o.DELETED
        assert bodies == [b"held long\r\n", b"held\r\n", b"later\r\n", b"five\r\n",
                          b"buried\r\n", b"nine\r\n"]
        assert timeouts[b"held"] == 1 and timeouts[b"held long"] == 0
        assert h(e.reserve_with_timeout(s, 0)) is o.TIMED_OUT
    finally:
        stop()

    again = _stalkd("--engine", pg_engine, "--engine-init")
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip().splitlines() == [
        f"schema {schema} is at version 2",
        f"schema {schema}: version 2 finished: what only older versions used is dropped"]
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert _indexes(conn, schema) == V2_INDEXES
        assert conn.execute(f"SELECT version, finished FROM {schema}.schema_version"
                            f" ORDER BY version").fetchall() == [(1, True), (2, True)]
    assert _stalkd("--engine", pg_engine, "--engine-init").stdout.strip() == (
        f"schema {schema} is at version 2")
    migrate(dsn, schema + "_new")
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert _indexes(conn, schema + "_new") == V2_INDEXES


def test_a_version_2_node_starting_beside_a_version_1_node_keeps_the_old_indexes(pg_engine):
    """A node's start applies the additive part, logs the line naming the
    older node, and leaves the old indexes; once the older node has gone, the
    next start drops them."""
    from twisted.logger import globalLogPublisher

    from twisted_stalk.pg.config import parse
    from twisted_stalk.pg.schema import migrate
    from test_engine_contract import _pg
    config = parse(pg_engine)
    migrate(config.conninfo, config.schema, upto=1)
    with psycopg.connect(config.conninfo, autocommit=True) as conn:
        old = _version_1_queue(conn, config.schema)
    said: List[str] = []

    def observe(event):
        if "line" in event:
            said.append(event["line"])
    globalLogPublisher.addObserver(observe)
    try:
        h, stop = _pg(pg_engine)
        stop()
        with psycopg.connect(config.conninfo, autocommit=True) as conn:
            assert _indexes(conn, config.schema) == V1_INDEXES | V2_INDEXES
            conn.execute(f"DELETE FROM {config.schema}.nodes WHERE id = %s", (old,))
        h, stop = _pg(pg_engine)
        stop()
    finally:
        globalLogPublisher.removeObserver(observe)
    assert len(said) == 2 and f"while node {old} (old-host" in said[0], said
    assert said[1].endswith("version 2 finished: what only older versions used is dropped")
    with psycopg.connect(config.conninfo, autocommit=True) as conn:
        assert _indexes(conn, config.schema) == V2_INDEXES


def test_the_drop_waits_no_longer_than_a_moment_for_a_busy_jobs_table(pg_cluster, monkeypatch):
    """Dropping an index waits for every statement on the table and holds up
    the later ones: behind a long transaction it gives up after
    RETIRE_LOCK_WAIT, says so, and the next --engine-init does it."""
    from twisted_stalk.pg import schema as versions
    monkeypatch.setattr(versions, "RETIRE_LOCK_WAIT", 0.2)
    dsn = pg_cluster.dsn()
    versions.migrate(dsn, "busy", upto=1)
    with psycopg.connect(dsn) as reader:
        reader.execute("SELECT count(*) FROM busy.jobs")  # a transaction left open
        started = time.monotonic()
        done = versions.migrate(dsn, "busy")
        assert time.monotonic() - started < 5
        assert done.finished == () and done.waiting == (
            "schema busy: version 2 keeps the indexes of version 1: the jobs table stayed "
            "in use for 0.2 s (a long transaction?): run --engine-init again")
        reader.rollback()
        with psycopg.connect(dsn, autocommit=True) as conn:
            assert _indexes(conn, "busy") == V1_INDEXES | V2_INDEXES
    assert versions.migrate(dsn, "busy") == (2, 2, None, (2,))
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert _indexes(conn, "busy") == V2_INDEXES


#: Statements that read many rows by design (a tube's jobs of a state, every
#: held job, every job): bench/pg_plans.py's table has 800 of a tube's jobs
#: in a state and 200 held jobs.
READS_MANY = {"kick", "give_back", "reclaim", "orphans", "return_lost_takes", "leave",
              "tubes_with_jobs", "counts_all", "tube_counts", "counts_tube", "list_jobs",
              "page_total"}


def _plans(*flags: str) -> dict:
    """bench/pg_plans.py's lines: name -> (buffers touched, a sequential scan)."""
    import os
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    done = subprocess.run([sys.executable, os.path.join(root, "bench", "pg_plans.py"), *flags],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    seen = {}
    for line in done.stdout.splitlines():
        name = line.split()[0]
        found = re.search(r"hit=(\d+)", line)
        seen[name] = (int(found.group(1)) if found else 0, " seq " in line)
    return seen


def test_every_other_statement_reads_a_few_pages_in_a_plan_made_while_the_table_was_tiny(
        pg_cluster):
    """bench/pg_plans.py makes each statement's generic plan on 30 jobs and
    runs it on 40,000: the statements that find jobs by id, by deadline or as
    a tube's first touch a few buffers (release, touch, expire, put_many's
    hand-off check each read every held or ready job before), and only the
    inspection counts read the table from end to end."""
    seen = _plans()
    assert {"release", "touch", "expire", "put_many", "put_many_telling", "put_one",
            "delete_many", "delete_many_taking", "delete_many_kept",
            "delete_many_kept_taking", "delete_one_kept", "reserve", "reserve_many"} <= set(seen)
    heavy = {name: buffers for name, (buffers, _) in seen.items()
             if buffers > 40 and name not in READS_MANY and not name.startswith("page_")}
    assert heavy == {}
    assert {name for name, (_, seq) in seen.items() if seq} == {"counts_all", "tube_counts"}


def test_a_plan_made_on_a_drained_table_still_takes_jobs_through_the_key(pg_cluster):
    """The same with the plans made just after a drain (``--drained``): 40,000
    jobs put and deleted, the table analyzed with no live row, as autovacuum
    does after a drain.  Each ``UPDATE`` that takes the jobs it found
    (``_taking`` deletes, the reserves, kick, promote, expire) was planned as
    a join with the whole table on the outer side, finding its jobs again for
    every row: 200,000 buffers and 150 ms a delete at 40,000 jobs, the drain's
    stalls (docs/performance.md).  They now find their rows by key
    (``sqlparts.among``), and so does the console's ``flush``, which read
    80,000 buffers to delete a tube's jobs of a state when it had none."""
    seen = _plans("--drained")
    takers = {name: seen[name][0] for name in seen
              if name.endswith("_taking") or name in (
                  "reserve", "reserve_many", "kick", "promote", "expire")}
    assert len(takers) == 9, takers
    assert {name: n for name, n in takers.items() if n > 200} == {}
    heavy = {name: buffers for name, (buffers, _) in seen.items()
             if buffers > 60 and name not in READS_MANY and not name.startswith("page_")}
    assert heavy == {}


def test_a_plan_made_on_a_full_busy_tube_still_finds_jobs_through_the_key(pg_cluster):
    """The same with the plans made on 40,000 analyzed jobs in two tubes
    (``--busy``): the statistics promise thousands of rows per tube, and
    ``delete_many_taking`` joined the jobs it takes with the whole table by
    hashing it (807 buffers, 42 ms) until the sessions turned hash and merge
    joins off.  ``flush`` then deletes a tube's 2,000 buried jobs (by
    design), and ``peek_delayed`` reads every delayed job of the other tube
    through the deadline index when its own has none: the statistics cannot
    tell that the delayed jobs are all in one tube (left as is: not a command
    of the hot path)."""
    seen = _plans("--busy")
    heavy = {name: buffers for name, (buffers, _) in seen.items()
             if buffers > 60 and name not in READS_MANY | {"flush", "peek_delayed"}
             and not name.startswith("page_")}
    assert heavy == {}
    assert 0 < seen["delete_many_taking"][0] <= 60
