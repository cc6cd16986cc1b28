"""The engine contract: what every engine behind the seam (core/engine.py) must do.

Each test runs on every engine: the in-memory one on a
``twisted.internet.task.Clock``, and the PostgreSQL one on a throwaway
cluster (``tests/pgcluster.py``), in process, stepping Twisted's reactor
until its Deferreds fire (``reactor.iterate``: pytest runs no reactor).  A
third engine starts by being added to :data:`ENGINES` and passing this
module.  Time: the in-memory engine takes an injected clock, so its TTR,
delay and timeout tests advance it; the PostgreSQL engine keeps its own
timers on the reactor and the database's clock, so there they take the
real second they describe.
"""
from __future__ import annotations

import inspect
import time
from typing import Any, Callable, List

import pytest
from twisted.internet import defer
from twisted.internet.task import Clock

from servers import RecordingFrontEnd
from twisted_stalk.core import MemoryEngine
from twisted_stalk.core import outcomes as o
from twisted_stalk.core.engine import Engine
from twisted_stalk.core.job import Job
from twisted_stalk.core.readmodel import TUBE_STAT_KEYS, MemoryUse, TubeFigures
from twisted_stalk.protocol.commands import COMMANDS, COUNTED_COMMANDS, EXTENSION_COMMANDS

ENGINES = ["memory", "pg"]


class Harness:
    """One engine under test, with the means to wait for it."""

    def __init__(self, engine: Any, settle: Callable[[float], None],
                 advance: Callable[[float], None]) -> None:
        self.engine = engine
        self._settle = settle
        self._advance = advance

    def open(self) -> Any:
        return self.engine.open_session(RecordingFrontEnd())

    def __call__(self, result: Any) -> Any:
        """The outcome of a command (waiting for a Deferred to fire)."""
        if not isinstance(result, defer.Deferred):
            return result
        box: List[Any] = []
        result.addBoth(box.append)
        deadline = time.monotonic() + 10
        while not box:
            assert time.monotonic() < deadline, "the engine did not answer"
            self._settle(0.002)
        return box[0]

    def advance(self, seconds: float) -> None:
        """Let ``seconds`` pass for the engine's timers."""
        self._advance(seconds)

    def wakeups(self, n: int, within: float = 5.0) -> List[Any]:
        """Wait until ``n`` wake-ups are queued (or ``within`` seconds passed)."""
        deadline = time.monotonic() + within
        while len(self.engine.wakeups) < n and time.monotonic() < deadline:
            self._settle(0.005)
        return self.engine.take_wakeups()


def _memory() -> Harness:
    clock = Clock()
    clock.advance(1000)
    engine = MemoryEngine(clock, max_job_size=1000)

    def advance(seconds: float) -> None:
        end = clock.seconds() + seconds
        while True:
            at = engine.next_deadline()
            if at is None or at > end:
                break
            clock.advance(max(0.0, at - clock.seconds()))
            engine.tick()
        clock.advance(end - clock.seconds())
        engine.tick()
    return Harness(engine, lambda _: None, advance)


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
    h = Harness(engine, settle, advance)
    h(engine.start())
    return h, lambda: h(engine.stop())


@pytest.fixture(params=ENGINES)
def h(request):
    if request.param == "memory":
        yield _memory()
        return
    harness, stop = _pg(request.getfixturevalue("pg_engine"))
    try:
        yield harness
    finally:
        stop()


# ------------------------------------------------------------ the seam itself

def _members(cls) -> dict:
    return {name: value for name, value in vars(cls).items()
            if not name.startswith("_") and callable(value)}


@pytest.mark.parametrize("which", ENGINES)
def test_each_engine_defines_every_member_of_the_seam_with_its_signature(which):
    if which == "memory":
        cls = MemoryEngine
    else:
        pytest.importorskip("psycopg")
        from twisted_stalk.pg.engine import PgEngine as cls
    for name, declared in _members(Engine).items():
        ours = getattr(cls, name, None)
        assert callable(ours), f"{cls.__name__} lacks {name}"
        want = [(p.name, p.kind, p.default is inspect.Parameter.empty)
                for p in inspect.signature(declared).parameters.values()]
        have = [(p.name, p.kind, p.default is inspect.Parameter.empty)
                for p in inspect.signature(ours).parameters.values()]
        assert have == want, f"{cls.__name__}.{name}{inspect.signature(ours)}"


def test_each_engine_holds_every_attribute_of_the_seam(h):
    for name in Engine.__annotations__:
        assert hasattr(h.engine, name), name


def test_the_seam_has_a_method_for_every_command():
    served_by_front_end = {"quit", "capabilities"}
    members = _members(Engine)
    for spec in COMMANDS + EXTENSION_COMMANDS:
        if spec.name not in served_by_front_end:
            assert spec.method in members, spec.name


# ------------------------------------------------------------ commands' outcomes

def test_put_peek_reserve_delete(h):
    e, s = h.engine, h.open()
    job_id = h(e.put(s, 5, 0, 60, b"hello\r\n"))
    assert isinstance(job_id, int)
    for found in (h(e.peek(s, job_id)), h(e.peek_ready(s))):
        assert isinstance(found, Job) and (found.id, found.body) == (job_id, b"hello\r\n")
    assert h(e.peek_delayed(s)) is o.NOT_FOUND and h(e.peek_buried(s)) is o.NOT_FOUND
    job = h(e.reserve(s))
    assert isinstance(job, Job) and job.id == job_id and job.body == b"hello\r\n"
    assert h(e.peek_ready(s)) is o.NOT_FOUND
    assert h(e.delete(s, job_id)) is o.DELETED
    assert h(e.delete(s, job_id)) is o.NOT_FOUND
    assert h(e.peek(s, job_id)) is o.NOT_FOUND
    assert h(e.put(s, 0, 0, 60, b"no crlf")) is o.EXPECTED_CRLF


def test_deletes_of_one_job_asked_together_go_to_its_reserver(h):
    """Asked in one turn (the PostgreSQL engine sends them in one statement):
    a reserved job is deleted by its reserver wherever that delete stands,
    a ready one by the first to ask; every other delete finds nothing."""
    e = h.engine
    owner, other = h.open(), h.open()
    job_id = h(e.put(owner, 0, 0, 60, b"x\r\n"))
    assert h(e.reserve(owner)).id == job_id
    asked = [e.delete(other, job_id), e.delete(owner, job_id), e.delete(other, job_id)]
    assert [h(a) for a in asked] == [o.NOT_FOUND, o.DELETED, o.NOT_FOUND]
    ready = h(e.put(owner, 0, 0, 60, b"y\r\n"))
    asked = [e.delete(other, ready), e.delete(owner, ready)]
    assert [h(a) for a in asked] == [o.DELETED, o.NOT_FOUND]


def test_refusals_before_a_job_exists(h):
    e, s = h.engine, h.open()
    assert e.refuse_oversized(s, 1000) is None
    assert e.refuse_oversized(s, 1001) is o.JOB_TOO_BIG
    assert e.reject_put(s, o.BAD_FORMAT) is o.BAD_FORMAT
    e.drain()
    assert h(e.put(s, 0, 0, 60, b"x\r\n")) is o.DRAINING
    assert e.cmd_counts["put"] == 3


def test_tubes_used_and_watched(h):
    e, s = h.engine, h.open()
    assert h(e.list_tube_used(s)) == b"default"
    assert h(e.use(s, b"a")) == b"a" and h(e.list_tube_used(s)) == b"a"
    assert h(e.watch(s, b"b")) == 2 and h(e.watch(s, b"b")) == 2
    assert h(e.list_tubes_watched(s)) == [b"default", b"b"]
    assert h(e.ignore(s, b"default")) == 1
    assert h(e.ignore(s, b"b")) is o.NOT_IGNORED
    assert h(e.ignore(s, b"nothing")) == 1
    assert sorted(h(e.list_tubes(s))) == [b"a", b"b", b"default"]
    e.close_session(s)
    assert h(e.list_tubes(h.open())) == [b"default"]


def test_release_bury_kick_touch(h):
    e, s = h.engine, h.open()
    other = h.open()
    job_id = h(e.put(s, 0, 0, 60, b"x\r\n"))
    assert h(e.reserve(s)).id == job_id
    assert h(e.release(other, job_id, 0, 0)) is o.NOT_FOUND
    assert h(e.touch(other, job_id)) is o.NOT_FOUND
    assert h(e.touch(s, job_id)) is o.TOUCHED
    assert h(e.release(s, job_id, 7, 0)) is o.RELEASED
    assert h(e.reserve(s)).id == job_id
    assert h(e.bury(s, job_id, 3)) is o.BURIED
    assert h(e.bury(s, job_id, 3)) is o.NOT_FOUND
    assert h(e.peek_buried(s)).id == job_id
    assert h(e.kick(s, 10)) == 1
    assert h(e.kick(s, 10)) == 0
    assert h(e.kick_job(s, job_id)) is o.NOT_FOUND  # ready now
    assert h(e.reserve_job(s, job_id)).id == job_id
    assert h(e.reserve_job(s, job_id)) is o.NOT_FOUND  # already reserved
    assert h(e.bury(s, job_id, 0)) is o.BURIED
    assert h(e.kick_job(s, job_id)) is o.KICKED
    assert h(e.reserve_with_timeout(s, 0)).id == job_id
    assert h(e.reserve_with_timeout(s, 0)) is o.TIMED_OUT


def test_stats_pause_and_the_read_model(h):
    e, s = h.engine, h.open()
    h(e.use(s, b"t"))
    job_id = h(e.put(s, 0, 0, 60, b"x\r\n"))
    assert h(e.stats_tube(s, b"missing")) is o.NOT_FOUND
    pairs = h(e.stats_tube(s, b"t"))
    assert [k for k, _ in pairs] == list(TUBE_STAT_KEYS)
    assert dict(pairs)["current-jobs-ready"] == 1 and dict(pairs)["total-jobs"] == 1
    job_pairs = dict(h(e.stats_job(s, job_id)))
    assert (job_pairs["id"], job_pairs["tube"], job_pairs["state"]) == (job_id, b"t", b"ready")
    assert h(e.stats_job(s, job_id + 1000)) is o.NOT_FOUND
    stats = dict(h(e.stats(s)))
    assert all("cmd-" + name in stats for name in COUNTED_COMMANDS)
    assert h(e.pause_tube(s, b"missing", 1)) is o.NOT_FOUND
    assert h(e.pause_tube(s, b"bad name!", 1)) is o.BAD_FORMAT
    assert h(e.pause_tube(s, b"t", 100)) is o.PAUSED
    assert e.tube_names() == [b"default", b"t"]
    figures = {f.name: f for f in e.tube_figures()}
    assert isinstance(figures[b"t"], TubeFigures) and figures[b"t"].pauses == 1
    assert figures[b"t"].using == 1 and figures[b"t"].total_jobs == 1
    assert dict(e.tube_stats(b"t"))["name"] == b"t"
    assert isinstance(e.memory(), MemoryUse)
    assert e.journal.health().problem is None


def test_each_command_counts_itself_under_its_table_name(h):
    e, s = h.engine, h.open()
    job_id = h(e.put(s, 0, 0, 60, b"x\r\n"))
    steps = [
        ("use", lambda: e.use(s, b"default")),
        ("watch", lambda: e.watch(s, b"w")),
        ("ignore", lambda: e.ignore(s, b"w")),
        ("peek", lambda: e.peek(s, job_id)),
        ("peek-ready", lambda: e.peek_ready(s)),
        ("peek-delayed", lambda: e.peek_delayed(s)),
        ("peek-buried", lambda: e.peek_buried(s)),
        ("reserve-with-timeout", lambda: e.reserve_with_timeout(s, 0)),
        ("touch", lambda: e.touch(s, job_id)),
        ("release", lambda: e.release(s, job_id, 0, 0)),
        ("reserve", lambda: e.reserve(s)),
        ("bury", lambda: e.bury(s, job_id, 0)),
        ("kick", lambda: e.kick(s, 1)),
        ("delete", lambda: e.delete(s, job_id)),
        ("stats-job", lambda: e.stats_job(s, job_id)),
        ("stats-tube", lambda: e.stats_tube(s, b"default")),
        ("stats", lambda: e.stats(s)),
        ("list-tubes", lambda: e.list_tubes(s)),
        ("list-tube-used", lambda: e.list_tube_used(s)),
        ("list-tubes-watched", lambda: e.list_tubes_watched(s)),
        ("pause-tube", lambda: e.pause_tube(s, b"default", 0)),
        ("put", lambda: e.put(s, 0, 0, 60, b"y\r\n")),
    ]
    assert set(e.cmd_counts) == set(COUNTED_COMMANDS)
    assert {name for name, _ in steps} == set(COUNTED_COMMANDS)
    for name, step in steps:
        before = dict(e.cmd_counts)
        h(step())
        before[name] += 1
        assert e.cmd_counts == before, name


# ------------------------------------------------------------ wake-ups and time

def test_waiting_reserves_wake_in_arrival_order_after_the_put(h):
    e = h.engine
    first, second, producer = h.open(), h.open(), h.open()
    assert h(e.reserve(first)) is o.WAITING
    assert h(e.reserve_with_timeout(second, 30)) is o.WAITING
    a = h(e.put(producer, 0, 0, 60, b"a\r\n"))
    assert isinstance(a, int)  # the producer's answer needs no worker
    woken = h.wakeups(1)
    assert [(s, job.id) for s, job in woken] == [(first, a)]
    b = h(e.put(producer, 0, 0, 60, b"b\r\n"))
    assert [(s, job.id) for s, job in h.wakeups(1)] == [(second, b)]
    assert not first.frontend.events and not second.frontend.events  # nothing called back


def test_a_cancelled_or_closed_wait_gets_nothing(h):
    e = h.engine
    w, closing, producer = h.open(), h.open(), h.open()
    assert h(e.reserve(w)) is o.WAITING
    assert e.cancel_wait(w) is True and e.cancel_wait(w) is False
    assert h(e.reserve(closing)) is o.WAITING
    e.close_session(closing)
    job_id = h(e.put(producer, 0, 0, 60, b"x\r\n"))
    assert h.wakeups(1, within=0.3) == []
    assert h(e.peek_ready(producer)).id == job_id


def test_a_reserve_with_timeout_times_out(h):
    e, s = h.engine, h.open()
    assert h(e.reserve_with_timeout(s, 1)) is o.WAITING
    h.advance(0.5)
    assert e.take_wakeups() == []
    h.advance(0.7)
    assert h.wakeups(1) == [(s, o.TIMED_OUT)]


def test_deadline_soon_ends_a_wait_a_second_before_the_ttr(h):
    e, s = h.engine, h.open()
    job_id = h(e.put(s, 0, 0, 2, b"x\r\n"))
    assert h(e.reserve(s)).id == job_id
    assert h(e.reserve(s)) is o.WAITING
    h.advance(1.2)
    assert h.wakeups(1) == [(s, o.DEADLINE_SOON)]


@pytest.mark.parametrize("held_by", ["ttr", "delay"])
def test_a_job_is_ready_again_once_its_ttr_or_delay_has_passed(h, held_by):
    e, s = h.engine, h.open()
    if held_by == "ttr":
        job_id = h(e.put(s, 0, 0, 1, b"x\r\n"))
        assert h(e.reserve(s)).id == job_id
    else:
        job_id = h(e.put(s, 0, 1, 60, b"x\r\n"))
        assert h(e.peek_delayed(s)).id == job_id
    assert h(e.peek_ready(s)) is o.NOT_FOUND
    h.advance(1.3)
    assert h(e.peek_ready(s)).id == job_id
    assert h(e.delete(s, job_id)) is o.DELETED  # ready: anyone may delete it
