"""The engine contract (twisted_stalk/testing/engine_contract.py) on the
project's engines: the in-memory one on a ``twisted.internet.task.Clock``, and
the PostgreSQL one on a throwaway cluster (``tests/pgcluster.py``), in
process, stepping Twisted's reactor until its Deferreds fire
(``reactor.iterate``: pytest runs no reactor).  Time: the in-memory engine
takes an injected clock, so its TTR, delay and timeout tests advance it; the
PostgreSQL engine keeps its own timers on the reactor and the database's
clock, so there they take the real second they describe.
"""
from __future__ import annotations

import time

import pytest
from twisted.internet.task import Clock

from twisted_stalk.core import MemoryEngine
from twisted_stalk.testing.engine_contract import *  # noqa: F401,F403  (the suite)
from twisted_stalk.testing.engine_contract import Harness, Requirements, clock_harness

ENGINES = ["memory", "pg"]


def _memory() -> Harness:
    clock = Clock()
    clock.advance(1000)
    return clock_harness(MemoryEngine(clock, max_job_size=1000), clock)


def _pg(dsn: str):
    from twisted.internet import reactor

    from twisted_stalk.pg import open_node

    def settle(seconds: float) -> None:
        reactor.iterate(seconds)

    def advance(seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            settle(0.01)
    engine = open_node(dsn, reactor=reactor, max_job_size=1000, start=False)
    engine.notify = lambda: None
    # The bodies are the database's: neither counted nor limited here.
    h = Harness(engine, settle, advance, Requirements(stored_bytes=False, memory_limit=False))
    h(engine.start())
    return h, lambda: h(engine.stop())


@pytest.fixture(params=ENGINES)
def engine_harness(request):
    if request.param == "memory":
        yield _memory()
        return
    harness, stop = _pg(request.getfixturevalue("pg_engine"))
    try:
        yield harness
    finally:
        stop()


def test_the_postgresql_engine_takes_jobs_in_the_order_script(pg_engine):
    """The order test above runs through the PostgreSQL engine's take: its
    reserves were answered from jobs a delete took, and some taken jobs went
    back because something that could beat them became ready; with
    ``stalk_take_hold=0`` nothing is taken and the answers are the same."""
    from twisted_stalk.testing.engine_contract import take_order_script
    answers = []
    schema = pg_engine.split("stalk_schema=")[1].split()[0]
    for setting, took in (("", True), (f" stalk_take_hold=0 stalk_schema={schema}_0", False)):
        harness, stop = _pg(pg_engine + setting)
        try:
            answers.append(take_order_script(harness))
            taking = harness.engine.taking
            if took:
                assert taking.handed >= 5 and taking.returned >= 2, vars(taking)
            else:
                assert taking.taken == taking.handed == 0
        finally:
            stop()
    assert answers[0] == answers[1]


def test_a_take_the_node_lost_track_of_is_given_back(pg_engine):
    """A take whose answer was lost (its connection broke as it committed)
    leaves jobs reserved by the node's take that the node does not know of:
    after such a failure, ``heal`` (the next heartbeat) gives them back, and
    keeps those it knows of, taken or handed out."""
    from twisted_stalk.core import outcomes as o
    from twisted_stalk.core.job import JobRecord
    h, stop = _pg(pg_engine)
    try:
        e = h.engine
        worker, other = h.open(), h.open()
        for n in range(5):
            h(e.put(other, 0, 0, 60, b"%d\r\n" % n))
        job = h(e.reserve(worker))
        for _ in range(3):
            h(e.delete(worker, job.id))
            job = h(e.reserve(worker))
        assert e.taking.handed == 1  # the fourth reserve came from the take
        assert h(e.delete(worker, job.id)) is o.DELETED  # and took the fourth job
        lost = [item[1] for entry in e.taking.by_tube.values() for item in entry.heap]
        assert len(lost) == 1
        e.taking.by_tube.clear()  # as if the statement's answer had not come
        assert h(e.reserve_with_timeout(other, 0)) is o.TIMED_OUT  # hidden
        e.taking.unsure = True
        h(e.taking.heal())
        again = h(e.reserve_with_timeout(other, 0))
        assert isinstance(again, JobRecord) and again.id == lost[0]
        assert h(e.delete(other, again.id)) is o.DELETED
    finally:
        stop()
