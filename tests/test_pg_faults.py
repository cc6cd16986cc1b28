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
import time
from typing import List

import pytest

from pgcluster import Cluster, unavailable
from pgload import Load
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
