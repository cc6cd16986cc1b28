"""Two and three nodes on one PostgreSQL queue: what one does, the others see.

Real ``stalkd --engine`` processes on one schema of the session's cluster,
real sockets.  The wake-up latency test prints its p50/p99 (``-s`` shows
them; docs/ha.md records them).
"""
from __future__ import annotations

import signal
import statistics
import time
from typing import List

import pytest

from servers import RunningServer, start_server
from wire import Wire

FAST = " stalk_heartbeat=0.2 stalk_dead_after=1"


@pytest.fixture
def nodes(pg_engine):
    """A function starting nodes on one fresh schema; all stopped after the test."""
    started: List[RunningServer] = []

    def start(n: int = 2, extra: str = FAST) -> List[RunningServer]:
        for _ in range(n):
            started.append(start_server("ours", "--engine", pg_engine + extra))
        return started[-n:]
    yield start
    for server in started:
        server.stop(signal.SIGKILL if server.proc.poll() is None else signal.SIGTERM)


def wires(*servers: RunningServer) -> List[Wire]:
    return [Wire(s.connect()) for s in servers]


def stats_of(w: Wire, command: bytes = b"stats\r\n") -> dict:
    reply = w.ask(command)
    out = {}
    for line in reply.split(b"\r\n", 1)[1].decode().splitlines():
        key, sep, value = line.partition(": ")
        if sep:
            out[key] = value.strip('"')
    return out


def test_a_job_put_through_one_node_is_reserved_through_another(nodes):
    a, b = wires(*nodes(2))
    assert a.ask(b"use work\r\n") == b"USING work\r\n"
    assert a.ask(b"put 5 0 60 5\r\nhello\r\n") == b"INSERTED 1\r\n"
    assert b.ask(b"put 0 0 60 3\r\nbye\r\n") == b"INSERTED 2\r\n"  # ids are global
    assert b.ask(b"watch work\r\n") == b"WATCHING 2\r\n"
    assert b.ask(b"reserve-with-timeout 0\r\n") == b"RESERVED 2 3\r\nbye\r\n"
    assert b.ask(b"reserve-with-timeout 0\r\n") == b"RESERVED 1 5\r\nhello\r\n"
    # Only the holder, through its own node, may act on a reservation.
    assert a.ask(b"delete 1\r\n") == b"NOT_FOUND\r\n"
    assert a.ask(b"peek 1\r\n") == b"FOUND 1 5\r\nhello\r\n"
    assert b.ask(b"delete 1\r\n") == b"DELETED\r\n"
    assert a.ask(b"peek 1\r\n") == b"NOT_FOUND\r\n"


def test_priorities_are_global(nodes):
    a, b, c = wires(*nodes(3))
    pris = [(a, 7), (b, 3), (c, 9), (a, 3), (b, 0), (c, 2**32 - 1), (a, 1024), (b, 3)]
    for i, (w, pri) in enumerate(pris, 1):
        assert w.ask(b"put %d 0 60 1\r\nx\r\n" % pri) == b"INSERTED %d\r\n" % i
    order = sorted(range(1, len(pris) + 1), key=lambda i: (pris[i - 1][1], i))
    got = []
    for i in range(len(pris)):
        reply = (a, b, c)[i % 3].ask(b"reserve-with-timeout 0\r\n")
        got.append(int(reply.split()[1]))
    assert got == order


def test_a_reserve_on_one_node_wakes_when_another_node_makes_a_job_ready(nodes):
    """Put on A, a waiting reserve on B: the wake-up's latency (LISTEN/NOTIFY)."""
    a, b = wires(*nodes(2))
    latencies = []
    for i in range(1, 201):
        b.send(b"reserve\r\n")
        assert b.nothing_within(0.002)
        t0 = time.perf_counter()
        assert a.ask(b"put 0 0 60 1\r\nx\r\n") == b"INSERTED %d\r\n" % i
        assert b.reply() == b"RESERVED %d 1\r\nx\r\n" % i
        latencies.append((time.perf_counter() - t0) * 1000)
        assert b.ask(b"delete %d\r\n" % i) == b"DELETED\r\n"
    latencies.sort()
    p50 = statistics.median(latencies)
    p99 = latencies[int(len(latencies) * 0.99) - 1]
    print(f"\nwake-up across nodes (put on A -> RESERVED on B): p50 {p50:.2f} ms, "
          f"p99 {p99:.2f} ms, max {latencies[-1]:.2f} ms over {len(latencies)}")
    assert p50 < 50 and p99 < 250, latencies


def test_a_node_that_was_alone_wakes_a_newcomers_reserve_at_once(nodes, pg_engine):
    """A node that knows of no other sends no notices; a node that comes says
    so, and the first notifies again at once, not after its next heartbeat
    (5 s here, as is the newcomer's own look at ready jobs).  The newcomer
    says so once its LISTEN connection is up (it may come after the node
    serves clients, on a loaded machine), so the put waits for that."""
    slow = " stalk_heartbeat=5 stalk_dead_after=12"
    a = wires(nodes(1, slow)[0])[0]
    assert stats_of(a)["current-connections"] == "1"  # it has read the nodes: none
    b_server = nodes(1, slow)[0]
    b, watcher = wires(b_server, b_server)
    b.send(b"reserve\r\n")
    deadline = time.monotonic() + 5
    while stats_of(watcher)["current-waiting"] != "1":
        assert time.monotonic() < deadline
        time.sleep(0.01)
    listening = ("SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'LISTEN %%'"
                 " AND query LIKE '%%' || '{s}' || '%%'")
    while _jobs_sql(pg_engine, listening)[0][0] != 2:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    t0 = time.monotonic()
    assert a.ask(b"put 0 0 60 1\r\nx\r\n") == b"INSERTED 1\r\n"
    assert b.reply() == b"RESERVED 1 1\r\nx\r\n"
    assert time.monotonic() - t0 < 1.0


def test_other_ways_jobs_become_ready_wake_other_nodes(nodes):
    a, b = wires(*nodes(2))
    a.ask(b"put 0 0 60 1\r\nx\r\n")
    assert a.ask(b"reserve\r\n").startswith(b"RESERVED 1")
    b.send(b"reserve\r\n")
    assert b.nothing_within(0.1)
    assert a.ask(b"release 1 0 0\r\n") == b"RELEASED\r\n"          # release
    assert b.reply().startswith(b"RESERVED 1 1")
    assert b.ask(b"bury 1 0\r\n") == b"BURIED\r\n"
    a.send(b"reserve\r\n")
    assert a.nothing_within(0.1)
    assert b.ask(b"kick 1\r\n") == b"KICKED 1\r\n"                  # kick
    assert a.reply().startswith(b"RESERVED 1 1")
    b.send(b"reserve\r\n")
    assert b.nothing_within(0.1)
    a.close()                                                      # disconnect
    assert b.reply().startswith(b"RESERVED 1 1")
    c = wires(nodes(1)[0])[0]
    c.send(b"reserve\r\n")
    t0 = time.monotonic()  # after the new node's start (slower on PyPy)
    assert b.ask(b"release 1 0 1\r\n") == b"RELEASED\r\n"          # a delay ends
    assert c.reply().startswith(b"RESERVED 1 1")
    assert 0.9 < time.monotonic() - t0 < 2.5


def test_a_ready_job_no_node_was_told_of_still_reaches_a_waiting_reserve(nodes, pg_engine):
    """A wake-up lost on the way (here: a job made ready behind the nodes'
    backs, so no notification is sent) is made up for at the next heartbeat."""
    import psycopg

    from twisted_stalk.pg.config import parse
    a, b = wires(*nodes(2))
    assert a.ask(b"put 0 3600 60 1\r\nx\r\n") == b"INSERTED 1\r\n"
    b.send(b"reserve\r\n")
    assert b.nothing_within(0.3)
    config = parse(pg_engine)
    with psycopg.connect(config.conninfo, autocommit=True) as conn:
        conn.execute(f"UPDATE {config.schema}.jobs SET state = 0 WHERE id = 1")
    t0 = time.monotonic()
    assert b.reply() == b"RESERVED 1 1\r\nx\r\n"
    assert time.monotonic() - t0 < 2.0  # heartbeats every 0.2 s here


def _jobs_sql(pg_engine: str, sql: str) -> list:
    """Run ``sql`` on the queue's schema (``{s}``) behind the nodes' backs."""
    import psycopg

    from twisted_stalk.pg.config import parse
    config = parse(pg_engine)
    with psycopg.connect(config.conninfo, autocommit=True) as conn:
        cur = conn.execute(sql.replace("{s}", config.schema))
        return cur.fetchall() if cur.description else []


def test_a_put_hands_its_job_to_a_reserve_waiting_on_its_node(nodes, pg_engine):
    """The put's own statement inserts the job already reserved by the
    waiting (node, connection): the row is written once (no reserve
    statement updates it after), and the worker holds it."""
    (a,) = nodes(1)
    worker, producer = wires(a, a)
    for w in (worker, producer):
        assert w.ask(b"use hand\r\n") == b"USING hand\r\n"
    assert worker.ask(b"watch hand\r\n") == b"WATCHING 2\r\n"
    assert worker.ask(b"ignore default\r\n") == b"WATCHING 1\r\n"
    worker.send(b"reserve\r\n")
    assert worker.nothing_within(0.1)
    assert producer.ask(b"put 7 0 60 2\r\nhi\r\n") == b"INSERTED 1\r\n"
    assert worker.reply() == b"RESERVED 1 2\r\nhi\r\n"
    # ctid (0,1): the inserted tuple, never updated; reserved at once.
    assert _jobs_sql(pg_engine, "SELECT ctid::text, state, reserves, owner_conn IS NOT NULL "
                                "FROM {s}.jobs WHERE id = 1") == [("(0,1)", 1, 1, True)]
    assert producer.ask(b"delete 1\r\n") == b"NOT_FOUND\r\n"  # the worker's
    assert worker.ask(b"delete 1\r\n") == b"DELETED\r\n"


@pytest.mark.parametrize("ready_pri, handed", [(3, False), (5, False), (9, True)])
def test_a_better_ready_job_goes_before_a_hand_off(nodes, pg_engine, ready_pri, handed):
    """Priorities stay global: a job made ready on another node that this
    node was not told of (here behind both nodes' backs, so no notification)
    is taken before the put's own job when it is as good or better.  The
    heartbeat is long enough not to come between the update and the put: if
    it did, its look at ready jobs would rightly hand job 1 over first."""
    a, b = nodes(2, extra=" stalk_heartbeat=30 stalk_dead_after=90")
    worker, producer, other = wires(a, a, b)
    assert other.ask(b"put %d 3600 60 1\r\nx\r\n" % ready_pri) == b"INSERTED 1\r\n"
    worker.send(b"reserve\r\n")
    assert worker.nothing_within(0.05)
    _jobs_sql(pg_engine, "UPDATE {s}.jobs SET state = 0 WHERE id = 1")
    assert producer.ask(b"put 5 0 60 1\r\ny\r\n") == b"INSERTED 2\r\n"
    want = 2 if handed else 1
    assert worker.reply() == b"RESERVED %d 1\r\n%s\r\n" % (want, b"y" if handed else b"x")
    assert _jobs_sql(pg_engine, "SELECT id FROM {s}.jobs WHERE state = 0") == [(3 - want,)]


def test_a_reserve_on_a_tube_known_empty_still_gets_every_ready_job(nodes, pg_engine):
    """A reserve that would wait on a tube where a reserve statement found
    nothing (and nothing since made a job ready) waits without asking the
    database; jobs made ready elsewhere still reach it: by notification, or
    at the next heartbeat when nobody told (here: behind the nodes' backs)."""
    a, b = nodes(2, extra=" stalk_heartbeat=0.5 stalk_dead_after=5")
    worker, other = wires(a, b)
    assert worker.ask(b"reserve-with-timeout 0\r\n") == b"TIMED_OUT\r\n"  # found empty
    assert other.ask(b"put 0 3600 60 1\r\nx\r\n") == b"INSERTED 1\r\n"
    _jobs_sql(pg_engine, "UPDATE {s}.jobs SET state = 0 WHERE id = 1")
    assert worker.ask(b"reserve-with-timeout 0\r\n") == b"RESERVED 1 1\r\nx\r\n"  # asks
    assert worker.ask(b"delete 1\r\n") == b"DELETED\r\n"
    assert worker.ask(b"reserve-with-timeout 0\r\n") == b"TIMED_OUT\r\n"
    assert other.ask(b"put 0 3600 60 1\r\ny\r\n") == b"INSERTED 2\r\n"
    _jobs_sql(pg_engine, "UPDATE {s}.jobs SET state = 0 WHERE id = 2")
    t0 = time.monotonic()
    worker.send(b"reserve\r\n")
    assert worker.reply() == b"RESERVED 2 1\r\ny\r\n"  # the heartbeat's ready_among
    assert time.monotonic() - t0 < 2.0
    assert worker.ask(b"delete 2\r\n") == b"DELETED\r\n"
    worker.send(b"reserve\r\n")
    assert worker.nothing_within(0.1)
    assert other.ask(b"put 0 0 60 1\r\nz\r\n") == b"INSERTED 3\r\n"
    assert worker.reply() == b"RESERVED 3 1\r\nz\r\n"  # the notification


def test_a_pause_on_one_node_holds_reserves_on_another(nodes):
    a, b = wires(*nodes(2))
    a.ask(b"put 0 0 60 1\r\nx\r\n")
    assert a.ask(b"pause-tube default 2\r\n") == b"PAUSED\r\n"
    assert b.ask(b"reserve-with-timeout 0\r\n") == b"TIMED_OUT\r\n"
    tube = stats_of(b, b"stats-tube default\r\n")
    assert tube["pause"] == "2" and tube["current-jobs-ready"] == "1"
    t0 = time.monotonic()
    b.send(b"reserve\r\n")
    assert b.reply().startswith(b"RESERVED 1 1")
    assert 1.0 < time.monotonic() - t0 < 3.0


def test_a_ttr_runs_out_once_whichever_node_sees_it(nodes):
    a, b, c = wires(*nodes(3))
    a.ask(b"put 0 0 1 1\r\nx\r\n")
    assert a.ask(b"reserve\r\n").startswith(b"RESERVED 1")
    b.send(b"reserve\r\n")
    assert b.reply(), "the job came back after its TTR"
    job = stats_of(c, b"stats-job 1\r\n")
    assert job["timeouts"] == "1" and job["reserves"] == "2" and job["state"] == "reserved"
    assert a.ask(b"delete 1\r\n") == b"NOT_FOUND\r\n"  # a's reservation ended with its TTR
    time.sleep(0.5)  # a heartbeat: the nodes' figures meet
    assert stats_of(c)["job-timeouts"] == "1"


def test_stats_sum_over_nodes(nodes):
    a, b = wires(*nodes(2))
    a.ask(b"put 0 0 60 1\r\nx\r\n")
    b.ask(b"put 0 0 60 1\r\nx\r\n")
    b.ask(b"use other\r\n")
    time.sleep(0.5)  # a heartbeat
    for w in (a, b):
        s = stats_of(w)
        assert s["cmd-put"] == "2" and s["total-jobs"] == "2"
        assert s["current-connections"] == "2" and s["current-producers"] == "2"
        assert s["current-jobs-ready"] == "2" and s["current-tubes"] == "2"
    assert a.ask(b"list-tubes\r\n") == b"OK 22\r\n---\n- default\n- other\n\r\n"


def test_a_killed_nodes_reservations_come_back_through_another_node(nodes):
    a_node, b_node = nodes(2)
    a, b = wires(a_node, b_node)
    for i in range(1, 6):
        a.ask(b"put 0 0 300 1\r\nx\r\n")
    held = [int(a.ask(b"reserve\r\n").split()[1]) for _ in range(5)]
    t0 = time.monotonic()
    a_node.proc.send_signal(signal.SIGKILL)
    got = []
    for _ in range(5):
        b.send(b"reserve-with-timeout 10\r\n")
        reply = b.reply()
        assert reply.startswith(b"RESERVED"), reply
        got.append(int(reply.split()[1]))
    took = time.monotonic() - t0
    assert sorted(got) == sorted(held)
    assert took < 1 + 0.2 * 2 + 1.0, took  # dead_after + a heartbeat or two + slack
    assert b.ask(b"reserve-with-timeout 0\r\n") == b"TIMED_OUT\r\n"  # none twice
