"""What the reserve statements lock, against a real PostgreSQL.

A reserve holds its row locks until it commits, and every other reserve
passes locked jobs over (``FOR UPDATE SKIP LOCKED``).  So a reserve must
lock only the job it takes: a lock on a job it leaves makes a concurrent
reserve take a worse job, or find none and take the tube for empty.  Each
test holds one statement's transaction open and runs another beside it."""
from __future__ import annotations

from typing import Any, Iterator, List, Tuple

import pytest

psycopg = pytest.importorskip("psycopg")

NODE = 7


@pytest.fixture
def queue(pg_cluster) -> Iterator[Tuple[Any, Any]]:
    """(a connection for transactions, an autocommit connection) on a fresh
    schema, each with the engine's session settings and its statements
    ``put``, ``reserve`` and ``reserve_many`` prepared."""
    from twisted_stalk.pg.schema import migrate
    from twisted_stalk.pg.sql import SESSION, statements
    migrate(pg_cluster.dsn(), "locks")
    sql = statements("locks")
    held = psycopg.connect(pg_cluster.dsn(), cursor_factory=psycopg.ClientCursor)
    other = psycopg.connect(pg_cluster.dsn(), autocommit=True, cursor_factory=psycopg.ClientCursor)
    for conn in (held, other):
        for name, value in SESSION.items():
            conn.execute(f"SET {name} = '{value}'")
        for name in ("put", "reserve", "reserve_many"):
            conn.execute(f"PREPARE {name} AS {sql[name]}")
    held.commit()
    try:
        yield held, other
    finally:
        held.close()
        other.close()
        with psycopg.connect(pg_cluster.dsn(), autocommit=True) as conn:
            conn.execute("DROP SCHEMA locks CASCADE")


def _put(conn: Any, tube: str, pri: int) -> int:
    row = conn.execute("EXECUTE put(%s::text, %s::bigint, 0, 60, '\\x00'::bytea)", (tube, pri))
    return row.fetchone()[0]


def _reserve(conn: Any, tubes: List[str], conn_id: int) -> Tuple[int, int]:
    """A reserve over ``tubes`` by connection ``conn_id``: (job id, priority)."""
    row = conn.execute("EXECUTE reserve(%s::text[], %s::bigint, %s::bigint)",
                       (tubes, NODE, conn_id)).fetchone()
    return row[0], row[3]


def _take(conn: Any, tubes: List[str], conn_ids: List[int]) -> List[Tuple[int, int]]:
    """One-tube reserves as the node batches them, one per (tube, connection):
    [(job id, priority)]."""
    rows = conn.execute("EXECUTE reserve_many(%s::text[], %s::bigint[], %s::bigint)",
                        (tubes, conn_ids, NODE)).fetchall()
    return [(row[1], row[4]) for row in rows]


def test_a_reserve_over_several_tubes_leaves_the_other_tubes_jobs_unlocked(queue):
    """A worker watching a and b takes a's job; while its statement has not
    committed, a worker of b takes b's best job, not the next one (the
    statement used to lock each tube's best and keep the lock to the end)."""
    held, other = queue
    first = _put(other, "a", 0)
    best_of_b = _put(other, "b", 10)
    _put(other, "b", 20)
    assert _reserve(held, ["a", "b"], 1) == (first, 0)
    assert _take(other, ["b"], [2]) == [(best_of_b, 10)]
    held.rollback()


def test_a_tubes_only_job_stays_for_its_worker_while_another_tube_is_reserved_from(queue):
    """The same with one job in b: b's worker gets it (it found none before,
    and the node took b for empty until something happened in b)."""
    held, other = queue
    _put(other, "a", 0)
    only = _put(other, "b", 10)
    _reserve(held, ["a", "b"], 1)
    assert _take(other, ["b"], [2]) == [(only, 10)]
    held.rollback()


@pytest.mark.parametrize("b_pri, expected", [(10, "b"), (40, "a")])
def test_a_job_being_taken_is_passed_over_for_the_best_of_the_rest(queue, b_pri, expected):
    """While another statement takes a's best job, a reserve over a and b
    takes the best of what is left: b's job if it comes before a's second,
    else a's second (beanstalkd's order, with the first job already gone)."""
    held, other = queue
    _put(other, "a", 0)
    second_of_a = _put(other, "a", 30)
    of_b = _put(other, "b", b_pri)
    _take(held, ["a"], [1])  # a's first job
    want = (of_b, b_pri) if expected == "b" else (second_of_a, 30)
    assert _reserve(other, ["a", "b"], 2) == want
    held.rollback()


def test_a_job_is_found_behind_jobs_being_taken_in_every_tube(queue):
    """Both tubes' best jobs are being taken, and a's second comes after
    b's first: the reserve still finds a's second (a first pass, bounded by
    b's best, finds nothing)."""
    held, other = queue
    _put(other, "a", 0)
    second_of_a = _put(other, "a", 10)
    _put(other, "b", 5)
    _take(held, ["a", "b"], [1, 2])
    assert _reserve(other, ["a", "b"], 3) == (second_of_a, 10)
    held.rollback()


def test_a_reserve_over_several_tubes_takes_the_best_job_of_all(queue):
    """Without anything else running: the lowest priority, then the oldest,
    across the watched tubes, and nothing from a paused tube."""
    held, other = queue
    _put(other, "a", 5)
    oldest_of_two = _put(other, "b", 3)
    _put(other, "c", 3)
    _put(other, "d", 1)
    other.execute("INSERT INTO locks.tubes (name, pause, unpause_at)"
                  " VALUES ('d', 60, extract(epoch FROM clock_timestamp()) + 60)")
    assert _reserve(other, ["a", "b", "c", "d"], 1) == (oldest_of_two, 3)
    held.rollback()
