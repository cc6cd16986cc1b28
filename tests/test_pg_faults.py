"""Faults under load on the PostgreSQL engine: a node killed, the database
restarted, the primary lost and its synchronous standby promoted.

Producers and workers (tests/pgload.py) keep the queue busy through each
fault; afterwards the queue is drained and every acknowledged job must have
been delivered (``lost`` 0), and no job may have been taken from a worker
that still held it (``stolen`` 0).  Duplicates are allowed: a put whose
answer was cut off by the fault is put again by its producer.

The short versions (one fault each) run in the normal suite.  The long ones
are marked ``slow`` and run only when asked::

    python -m pytest tests/test_pg_faults.py -m slow -s -n 0

(-s prints the figures that docs/ha.md records.)
"""
from __future__ import annotations

import signal
import threading
import time
from typing import List

import pytest

from pgcluster import Cluster, unavailable
from pgload import Conn, Load
from servers import RunningServer, start_server

NODE = " stalk_heartbeat=0.2 stalk_dead_after=1.5 stalk_wait=30"


@pytest.fixture
def own_cluster():
    """A cluster of the test's own (it is restarted or killed)."""
    why = unavailable()
    if why:
        pytest.skip(f"PostgreSQL engine tests: {why}")
    cluster = Cluster().init().start()
    yield cluster
    cluster.destroy()


@pytest.fixture
def started():
    servers: List[RunningServer] = []
    yield servers
    for s in servers:
        s.stop(signal.SIGKILL)


def node(servers: List[RunningServer], engine: str) -> RunningServer:
    server = start_server("ours", "--engine", engine + NODE, wait=30)
    servers.append(server)
    return server


def where_are(load: Load, engine: str) -> list:
    """The rows of the lost jobs, if the database has them (for the failure message)."""
    import psycopg

    from twisted_stalk.pg.config import parse
    config = parse(engine)
    lost = sorted(load.lost)[:20]
    if not lost:
        return []
    with psycopg.connect(config.conninfo) as conn:
        return conn.execute(
            f"SELECT id, state, owner_node, owner_conn, body FROM {config.schema}.jobs "
            f"WHERE body = ANY(%s)", (lost,)).fetchall() + [("lost", lost)]


def report(name: str, figures: dict, **extra: object) -> None:
    shown = ", ".join(f"{k} {v}" for k, v in {**figures, **extra}.items())
    print(f"\n{name}: {shown}")


# ---------------------------------------------------------------- a node killed

def kill_nodes(pg_engine: str, started: List[RunningServer], kills: int) -> dict:
    nodes = [node(started, pg_engine) for _ in range(3)]
    load = Load([n.address for n in nodes], producers=2, workers=6).start()
    back = []
    for i in range(kills):
        time.sleep(1.0)
        victim = nodes[i % len(nodes)]
        victim.proc.send_signal(signal.SIGKILL)
        victim.proc.wait()
        t0 = time.monotonic()
        time.sleep(2.5)  # the dead node's jobs come back after stalk_dead_after
        back.append(time.monotonic() - t0)
        nodes[i % len(nodes)] = node(started, pg_engine)
        load.addresses[:] = [n.address for n in nodes]
    time.sleep(1.0)
    figures = load.verdict(nodes[-1].address)
    figures["where"] = where_are(load, pg_engine)
    return figures


def test_kill_9_a_node_under_load(pg_engine, started):
    figures = kill_nodes(pg_engine, started, 1)
    where = figures.pop("where")
    report("kill -9 of one node of three under load", figures)
    assert not where, where
    assert figures["lost"] == 0 and figures["stolen"] == 0
    assert figures["acknowledged"] > 50


@pytest.mark.slow
def test_kill_9_nodes_again_and_again(slow_only, pg_engine, started):
    figures = kill_nodes(pg_engine, started, 10)
    where = figures.pop("where")
    report("10 kills -9 (a node of three each time) under load", figures)
    assert not where, where
    assert figures["lost"] == 0 and figures["stolen"] == 0


# ---------------------------------------------------------------- the database restarted

def restart_database(cluster: Cluster, started: List[RunningServer], restarts: int,
                     mode: str) -> dict:
    engine = cluster.dsn()
    nodes = [node(started, engine) for _ in range(2)]
    load = Load([n.address for n in nodes], producers=2, workers=4).start()
    outages = []
    for _ in range(restarts):
        time.sleep(1.5)
        t0 = time.monotonic()
        cluster.stop(mode)
        cluster.start()
        outages.append(time.monotonic() - t0)
    time.sleep(2.0)
    figures = load.verdict(nodes[0].address)
    figures["outage_s"] = round(max(outages), 2)
    return figures


def test_restart_postgresql_under_load(own_cluster, started):
    figures = restart_database(own_cluster, started, 1, "immediate")
    report("PostgreSQL crash-restarted under load", figures)
    assert figures["lost"] == 0 and figures["stolen"] == 0
    assert figures["acknowledged"] > 50


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["fast", "immediate", "kill"])
def test_restart_postgresql_again_and_again(slow_only, own_cluster, started, mode):
    figures = restart_database(own_cluster, started, 5, mode)
    report(f"PostgreSQL stopped ({mode}) and started 5 times under load", figures)
    assert figures["lost"] == 0 and figures["stolen"] == 0


# ---------------------------------------------------------------- failover to a standby

SYNC = ["synchronous_standby_names=*", "synchronous_commit=on", "wal_sender_timeout=5s",
        "wal_retrieve_retry_interval=200ms"]


class Pair:
    """A primary and a synchronous streaming standby, and the multi-host string of both."""

    def __init__(self) -> None:
        self.primary = Cluster(settings=SYNC).init().start()
        self.standby = self.primary.standby()
        self.standby.settings = SYNC
        self.standby.start()
        self.wait_streaming()

    def conninfo(self) -> str:
        a, b = self.primary, self.standby
        return (f"host={a.sockets},{b.sockets} port={a.port},{b.port} user=postgres "
                f"dbname=postgres target_session_attrs=read-write connect_timeout=2")

    def wait_streaming(self, wait: float = 30.0) -> None:
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            rows = self.primary.sql("SELECT sync_state FROM pg_stat_replication")
            if rows and rows[0][0] in ("sync", "quorum"):
                return
            time.sleep(0.05)
        raise AssertionError("the standby did not become synchronous")

    def fail_over(self) -> float:
        """Kill the primary, promote the standby, rebuild the old primary as the
        new standby; the seconds until the new primary took writes."""
        t0 = time.monotonic()
        self.primary.stop("kill")
        self.standby.promote()
        took = time.monotonic() - t0
        old = self.primary
        old.follow(self.standby)
        old.start()
        self.primary, self.standby = self.standby, old
        self.wait_streaming()
        return took

    def destroy(self) -> None:
        self.primary.destroy()
        self.standby.destroy()


@pytest.fixture
def pair():
    why = unavailable()
    if why:
        pytest.skip(f"PostgreSQL engine tests: {why}")
    p = Pair()
    yield p
    p.destroy()


def fail_over(pair: Pair, started: List[RunningServer], failovers: int) -> dict:
    engine = pair.conninfo()  # the same string before and after: libpq finds the primary
    nodes = [node(started, engine) for _ in range(2)]
    load = Load([n.address for n in nodes], producers=2, workers=4).start()
    promotions = []
    for _ in range(failovers):
        time.sleep(1.5)
        promotions.append(pair.fail_over())
    time.sleep(2.0)
    figures = load.verdict(nodes[0].address)
    figures["failovers"] = failovers
    figures["promote_s_max"] = round(max(promotions), 2)
    return figures


def test_failover_to_a_synchronous_standby_loses_nothing(pair, started):
    figures = fail_over(pair, started, 1)
    report("failover to a synchronous standby under load", figures)
    assert figures["lost"] == 0 and figures["stolen"] == 0
    assert figures["acknowledged"] > 50


@pytest.mark.slow
def test_twenty_failovers_lose_nothing(slow_only, pair, started):
    figures = fail_over(pair, started, 20)
    report("20 failovers to a synchronous standby under load", figures)
    assert figures["lost"] == 0 and figures["stolen"] == 0


# ---------------------------------------------------------------- a node stopped

#: A tube with a long name: each put batch's notice is ~230 bytes, so a
#: stopped listener's socket buffers fill soon and the queue starts to grow.
STALLED_TUBE = b"stalled-" + b"x" * 190
#: pg_notification_queue_usage() of a queue whose listeners all read: it is
#: counted in 8 kB pages of 2**20, and a page or two are in use at any time.
HEALTHY_QUEUE = 4 / 2**20


class Producer:
    """A thread putting pipelined batches into :data:`STALLED_TUBE` through one node."""

    def __init__(self, address) -> None:
        self.conn = Conn(address, timeout=10)
        assert self.conn.ask(b"use " + STALLED_TUBE + b"\r\n")[0].startswith(b"USING")
        self.inserted = 0
        self.failed: List[bytes] = []
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        batch = b"put 0 0 60 1\r\nx\r\n" * 20
        try:
            while not self.stopping.is_set():
                self.conn.sock.sendall(batch)
                for _ in range(20):
                    while b"\r\n" not in self.conn.buf:
                        self.conn._fill()
                    line, _, self.conn.buf = self.conn.buf.partition(b"\r\n")
                    if line.startswith(b"INSERTED"):
                        self.inserted += 1
                    else:
                        self.failed.append(line)
        except OSError as e:
            self.failed.append(repr(e).encode())

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(15)
        self.conn.close()


def test_a_stopped_node_is_cut_off_and_cannot_fill_the_notification_queue(pg_engine, started):
    """Puts notify the other nodes from inside their statement, and a stopped
    node's LISTEN session stops reading: PostgreSQL keeps every notification
    since for it, the queue grows, and once full every node's puts would
    fail.  When the others give the node up they end its database sessions
    (found by application_name): the queue empties and stays small while
    puts go on through the other nodes; the node, continued, comes back as
    a new node under a new name."""
    import psycopg

    from twisted_stalk.pg.config import parse
    from twisted_stalk.pg.sql import channel, session_name
    config = parse(pg_engine)
    engine = pg_engine + " stalk_heartbeat=0.2 stalk_dead_after=2"
    a, b, c = (start_server("ours", "--engine", engine, wait=30) for _ in range(3))
    started.extend([a, b, c])
    db = psycopg.connect(config.conninfo, autocommit=True)

    def one(sql: str, *params):
        return db.execute(sql, params).fetchone()[0]

    def sessions(node: int) -> int:
        return one("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
                   session_name(config.schema, node))

    def node_of(server: RunningServer) -> int:
        return one(f"SELECT id FROM {config.schema}.nodes WHERE pid = %s", server.proc.pid)

    def until(check, wait: float, what: str):
        deadline = time.monotonic() + wait
        while not check():
            assert time.monotonic() < deadline, (what, names())
            time.sleep(0.05)

    def names():
        return db.execute("SELECT application_name, state FROM pg_stat_activity "
                          "WHERE application_name LIKE 'stalk-node-%' ORDER BY 1").fetchall()

    b_id = node_of(b)
    until(lambda: sessions(b_id) == 5, 10, "the node's 4 statement connections and its LISTEN")
    producers = [Producer(a.address), Producer(c.address)]
    try:
        until(lambda: all(p.inserted > 200 for p in producers), 20, "puts going")
        baseline = one("SELECT pg_notification_queue_usage()")
        b.proc.send_signal(signal.SIGSTOP)
        t0 = time.monotonic()
        # The puts' own notices fill the stopped node's socket, then the
        # queue, as fast as the producers go (under PyPy in CI, not past the
        # healthy size before the cut-off): 120 notices of 7.9 kB on the
        # channel, which every node reads as no notice of its own and drops,
        # make the stopped listener's hold on the queue show whatever the
        # put rate.
        told = [f"{n} " + "x" * 7900 for n in range(120)]
        db.execute("SELECT count(pg_notify(%s, x)) FROM unnest(%s::text[]) AS x",
                   (channel(config.schema), told))
        peak = 0.0
        while sessions(b_id):
            peak = max(peak, one("SELECT pg_notification_queue_usage()"))
            assert time.monotonic() - t0 < 10, "the stopped node's sessions were not ended"
            time.sleep(0.05)
        cut_off = time.monotonic() - t0
        inserted = [p.inserted for p in producers]
        after = []
        for _ in range(30):  # 3 s of puts through the other two nodes
            time.sleep(0.1)
            after.append(one("SELECT pg_notification_queue_usage()"))
        report("a node stopped (SIGSTOP) under puts through two others",
               {"cut_off_s": round(cut_off, 2), "queue_pages_before": baseline * 2**20,
                "peak_while_stopped": peak * 2**20, "max_after": max(after[5:]) * 2**20,
                "last": after[-1] * 2**20})
        assert 2 - 0.5 < cut_off < 2 + 3, cut_off  # stalk_dead_after, a heartbeat or two
        # The stopped listener held the queue; cut off, it holds it no more:
        # the queue is as small as with every listener reading (a few pages).
        assert peak > HEALTHY_QUEUE, peak
        assert max(after[5:]) <= HEALTHY_QUEUE, after
        assert all(p.inserted > n + 100 for p, n in zip(producers, inserted)), "puts went on"
        assert all(not p.failed for p in producers), [p.failed[:3] for p in producers]
    finally:
        for p in producers:
            p.stop()
    b.proc.send_signal(signal.SIGCONT)
    until(lambda: one(f"SELECT count(*) FROM {config.schema}.nodes WHERE pid = %s",
                      b.proc.pid) == 1, 10, "the continued node registers anew")
    b_new = node_of(b)
    assert b_new != b_id
    until(lambda: sessions(b_new) == 5, 10, "its sessions under its new name")
    assert sessions(b_id) == 0
    w = Conn(b.address)
    assert w.ask(b"put 0 0 60 1\r\ny\r\n")[0].startswith(b"INSERTED")
    w.close()
    db.close()
