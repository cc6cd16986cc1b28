# -*- test-case-name: tests.test_engine_contract,tests.test_engine_toy -*-
"""The engine contract: what every engine behind the seam (core/engine.py) must
do, as a pytest suite that any engine's tests can run.

The suite is this module's ``test_*`` functions.  An engine's test module
imports them and provides one fixture, ``engine_harness``, yielding a
:class:`Harness` around a fresh engine (and stopping it after)::

    import pytest
    from twisted_stalk.testing.engine_contract import *  # noqa: F401,F403  (the suite)
    from twisted_stalk.testing.engine_contract import Harness, Requirements, clock_harness

    @pytest.fixture
    def engine_harness():
        clock = Clock()
        yield clock_harness(MyEngine(clock), clock, Requirements(memory_limit=False))

A :class:`Harness` knows how to wait for the engine's answers (an engine may
answer with Deferreds: ``settle`` lets them fire) and how to let time pass
for its timers (``advance``); :func:`clock_harness` builds one for an engine
on a ``twisted.internet.task.Clock``.  :class:`Requirements` says what the
engine may leave out, as SQLAlchemy's compliance suite asks a dialect: a test
of something left out is skipped, not failed.

The suite runs every command's outcomes, the counters per command, the
wake-up order, reserve timeouts, TTR, DEADLINE_SOON and delays, and checks
that the engine's class defines every member of ``Engine`` with the same
parameters.  The project's engines run it from ``tests/test_engine_contract.py``
(the in-memory one on a Clock, the PostgreSQL one on a throwaway cluster);
``tests/test_engine_toy.py`` runs it on a toy third engine found through the
``twisted_stalk.engines`` entry point (docs/architecture.md, "Adding a third
engine").  Importing this module needs pytest.
"""
from __future__ import annotations

import inspect
import time
from dataclasses import dataclass
from typing import Any, Callable, List

import pytest
from twisted.internet import defer

from ..core import outcomes as o
from ..core.counters import PUT, RESERVE, RESERVE_WITH_TIMEOUT
from ..core.engine import Engine
from ..core.job import JobRecord
from ..core.later import LATER
from ..core.readmodel import TUBE_STAT_KEYS, MemoryUse, TubeFigures
from ..protocol.commands import COMMANDS, COUNTED_COMMANDS, EXTENSION_COMMANDS


@dataclass(frozen=True)
class Requirements:
    """What an engine provides of what the suite checks (True) or leaves out
    (False: the tests of it are skipped)."""

    #: ``memory().used`` counts the stored bodies (False: None, a database
    #: holds them).
    stored_bytes: bool = True
    #: ``limit_memory`` makes a put over the ceiling answer OUT_OF_MEMORY
    #: (False: the ceiling is reported, not applied).
    memory_limit: bool = True
    #: The extension verbs ``list_jobs`` and ``flush_tube``.
    extension_verbs: bool = True


class RecordingFrontEnd:
    """A core FrontEnd that records the wake-ups delivered to it."""

    def __init__(self) -> None:
        self.events: List[object] = []

    def wake(self, outcome: Any) -> None:
        job_id = getattr(outcome, "id", None)
        self.events.append(("RESERVED", job_id) if job_id is not None else outcome.name)


class Harness:
    """One engine under test, with the means to wait for it."""

    def __init__(self, engine: Engine, settle: Callable[[float], None],
                 advance: Callable[[float], None],
                 requirements: Requirements = Requirements()) -> None:
        self.engine = engine
        self._settle = settle
        self._advance = advance
        self.requirements = requirements

    def require(self, what: str) -> None:
        """Skip the running test unless the engine provides ``what`` (a
        field of :class:`Requirements`)."""
        if not getattr(self.requirements, what):
            pytest.skip(f"the engine leaves out {what}")

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

    def settle(self) -> None:
        """Let the engine's pending work run a little (no time passes on a Clock)."""
        self._settle(0.002)

    def advance(self, seconds: float) -> None:
        """Let ``seconds`` pass for the engine's timers."""
        self._advance(seconds)

    def wakeups(self, n: int, within: float = 5.0) -> List[Any]:
        """Wait until ``n`` wake-ups are queued (or ``within`` seconds passed)."""
        deadline = time.monotonic() + within
        while len(self.engine.wakeups) < n and time.monotonic() < deadline:
            self._settle(0.005)
        return self.engine.take_wakeups()


def clock_harness(engine: Engine, clock: Any,
                  requirements: Requirements = Requirements()) -> Harness:
    """A :class:`Harness` for an engine whose time is ``clock`` (a
    ``twisted.internet.task.Clock``) and whose owner calls its ``tick`` at
    ``next_deadline()``, as the server factory does.  Its Deferreds, if any,
    fire from ``clock.callLater`` calls: settling advances the clock by 0."""
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
    return Harness(engine, lambda _: clock.advance(0), advance, requirements)


@pytest.fixture
def h(engine_harness: Harness) -> Harness:
    """The engine under test: the ``engine_harness`` its test module provides."""
    return engine_harness


# ------------------------------------------------------------ the seam itself

def _members(cls: Any) -> dict:
    return {name: value for name, value in vars(cls).items()
            if not name.startswith("_") and callable(value)}


def test_the_engine_defines_every_member_of_the_seam_with_its_signature(h):
    cls = type(h.engine)
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
        assert isinstance(found, JobRecord) and (found.id, found.body) == (job_id, b"hello\r\n")
    assert h(e.peek_delayed(s)) is o.NOT_FOUND and h(e.peek_buried(s)) is o.NOT_FOUND
    job = h(e.reserve(s))
    assert isinstance(job, JobRecord) and job.id == job_id and job.body == b"hello\r\n"
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


def test_the_callback_forms_answer_as_put_reserve_and_delete(h):
    """The callback forms a wire front end uses on an engine that answers
    later (core/later.py): the answer now, or LATER and the answer once,
    the same as the plain command's, counted the same."""
    e, s = h.engine, h.open()
    answers: List[Any] = []

    def then(result: Any) -> Any:
        if result is not LATER:
            return result
        deadline = time.monotonic() + 10
        while not answers:
            assert time.monotonic() < deadline, "the engine did not answer"
            h.settle()
        assert len(answers) == 1
        return answers.pop()
    job_id = then(e.put_then(s, 5, 0, 60, b"hello\r\n", answers.append))
    assert isinstance(job_id, int) and h(e.peek(s, job_id)).body == b"hello\r\n"
    assert then(e.put_then(s, 0, 0, 60, b"no crlf", answers.append)) is o.EXPECTED_CRLF
    counts = dict(e.cmd_counts)
    job = then(e.reserve_then(s, None, answers.append))
    assert isinstance(job, JobRecord) and (job.id, job.body) == (job_id, b"hello\r\n")
    assert then(e.reserve_then(s, 0, answers.append)) is o.TIMED_OUT
    assert (e.cmd_counts[RESERVE] - counts[RESERVE],
            e.cmd_counts[RESERVE_WITH_TIMEOUT] - counts[RESERVE_WITH_TIMEOUT]) == (1, 1)
    assert then(e.delete_then(s, job_id, answers.append)) is o.DELETED
    assert then(e.delete_then(s, job_id, answers.append)) is o.NOT_FOUND
    assert then(e.delete_then(s, 2 ** 63, answers.append)) is o.NOT_FOUND
    h.settle()
    assert answers == []  # each answered once


def test_refusals_before_a_job_exists(h):
    e, s = h.engine, h.open()
    assert e.refuse_oversized(s, 1000) is None
    assert e.refuse_oversized(s, 1001) is o.JOB_TOO_BIG
    assert e.reject_put(s, o.BAD_FORMAT) is o.BAD_FORMAT
    e.drain()
    assert h(e.put(s, 0, 0, 60, b"x\r\n")) is o.DRAINING
    assert e.cmd_counts[PUT] == 3


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
    if h.requirements.stored_bytes:
        assert e.memory().used == 3
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


# ------------------------------------------------------------ taking order and fencing

def take_order_script(h: Harness) -> List[Any]:
    """A worker deleting then reserving, with puts, releases, buries and
    kicks, a pause, a delay, a delete of a ready job and other sessions'
    reserves (one of them watching two tubes) coming between its delete and
    its next reserve; then a client putting then reserving on its own tube,
    with other sessions' puts and reserves and a pause between: what each
    command answered, jobs named by their bodies.  (An engine that takes a
    worker's next job with its delete or a client's put for its own reserve,
    as the PostgreSQL one does, must answer as one that does not.)"""
    e = h.engine
    w, other, both, producer = h.open(), h.open(), h.open(), h.open()
    for s in (w, other, both):
        h(e.watch(s, b"ord"))
        h(e.ignore(s, b"default"))
    h(e.watch(both, b"side"))
    h(e.use(producer, b"ord"))
    log: List[Any] = []
    ids = {}

    def put(pri: int, body: bytes, delay: int = 0) -> None:
        ids[body] = h(e.put(producer, pri, delay, 60, body + b"\r\n"))

    def said(outcome: Any) -> Any:
        return outcome.body if isinstance(outcome, JobRecord) else outcome

    def reserve(s: Any) -> Any:
        job = h(e.reserve_with_timeout(s, 0))
        log.append(said(job))
        if s is other and isinstance(job, JobRecord):
            ids[b"other's"] = job.id
        return job

    for n in range(14):
        put(100 + n % 3, b"j%d" % n)
    between = [
        lambda: None, lambda: None, lambda: None,
        lambda: put(5, b"urgent"),
        lambda: reserve(other),
        lambda: log.append(h(e.release(other, ids[b"other's"], 1, 0))),
        lambda: None,
        lambda: put(100, b"late"),
        lambda: log.append(h(e.bury(w, h(e.reserve_with_timeout(w, 0)).id, 0))),
        lambda: log.append(h(e.kick(producer, 1))),
        lambda: log.append(h(e.pause_tube(producer, b"ord", 1))),
        lambda: log.append(h(e.pause_tube(producer, b"ord", 0))),
        lambda: put(0, b"delayed", 1),
        lambda: h.advance(1.3),
        lambda: log.append(h(e.delete(other, ids[b"j6"]))),
        lambda: reserve(both),
        lambda: log.append(said(h(e.reserve_job(other, ids[b"j9"])))),
        lambda: None, lambda: None,
    ]
    for step in between:
        job = reserve(w)
        if isinstance(job, JobRecord):
            log.append(h(e.delete(w, job.id)))
        step()
    while isinstance(reserve(w), JobRecord):
        log.append(h(e.delete(w, ids[log[-1][:-2]])))
    # A client that puts then reserves on its own tube (a closed loop), with
    # other sessions' puts and reserves, a pause and a worse put between.
    loop = h.open()
    h(e.use(loop, b"loop"))
    h(e.watch(loop, b"loop"))
    h(e.ignore(loop, b"default"))
    h(e.use(producer, b"loop"))
    h(e.watch(other, b"loop"))
    between = [
        lambda: None, lambda: None, lambda: None,
        lambda: put(0, b"better"),
        lambda: put(500, b"worse"),
        lambda: None,
        lambda: reserve(other),
        lambda: log.append(h(e.release(other, ids[b"other's"], 50, 0))),
        lambda: log.append(h(e.pause_tube(producer, b"loop", 1))),
        lambda: log.append(h(e.pause_tube(producer, b"loop", 0))),
        lambda: None, lambda: None,
    ]
    for n, step in enumerate(between):
        ids[b"l%d" % n] = h(e.put(loop, 100, 0, 60, b"l%d\r\n" % n))
        step()
        job = reserve(loop)
        if isinstance(job, JobRecord):
            log.append(h(e.delete(loop, job.id)))
    while isinstance(reserve(loop), JobRecord):
        log.append(h(e.delete(loop, ids[log[-1][:-2]])))
    return log


def test_taking_order_matches_the_in_memory_engine(h):
    from twisted.internet.task import Clock

    from ..core import MemoryEngine
    clock = Clock()
    clock.advance(1000)
    expected = take_order_script(clock_harness(MemoryEngine(clock), clock))
    assert take_order_script(h) == expected


def test_a_holder_whose_reservation_ended_is_fenced(h):
    """A job re-taken after its TTR, by a worker that deletes then reserves,
    cannot be released, buried, touched or deleted by its old holder; its new
    holder can."""
    e = h.engine
    old, new = h.open(), h.open()
    job_id = h(e.put(old, 0, 0, 1, b"x\r\n"))
    assert h(e.reserve(old)).id == job_id
    for body in (b"a", b"b", b"c"):
        h(e.put(old, 10, 0, 60, body + b"\r\n"))
    job = h(e.reserve(new))
    for _ in range(2):
        assert h(e.delete(new, job.id)) is o.DELETED
        job = h(e.reserve(new))
    assert job.body == b"c\r\n"
    deadline = time.monotonic() + 10
    while getattr(h(e.peek_ready(old)), "id", None) != job_id:  # its TTR ran out
        assert time.monotonic() < deadline
        h.advance(0.3)
    assert h(e.delete(new, job.id)) is o.DELETED
    assert h(e.reserve(new)).id == job_id
    assert h(e.release(old, job_id, 0, 0)) is o.NOT_FOUND
    assert h(e.bury(old, job_id, 0)) is o.NOT_FOUND
    assert h(e.touch(old, job_id)) is o.NOT_FOUND
    assert h(e.delete(old, job_id)) is o.NOT_FOUND
    assert h(e.touch(new, job_id)) is o.TOUCHED
    assert h(e.delete(new, job_id)) is o.DELETED


# ------------------------------------------------------------ what an engine may leave out

def test_the_memory_ceiling_refuses_a_put_over_it(h):
    h.require("memory_limit")
    e, s = h.engine, h.open()
    e.limit_memory(10)
    assert e.memory().limit == 10
    assert isinstance(h(e.put(s, 0, 0, 60, b"12345678\r\n")), int)
    assert h(e.put(s, 0, 0, 60, b"x\r\n")) is o.OUT_OF_MEMORY
    e.limit_memory(0)
    assert isinstance(h(e.put(s, 0, 0, 60, b"x\r\n")), int)


def test_list_jobs_and_flush_tube(h):
    h.require("extension_verbs")
    e, s = h.engine, h.open()
    h(e.use(s, b"x"))
    first = h(e.put(s, 5, 0, 60, b"a\r\n"))
    second = h(e.put(s, 1, 0, 60, b"b\r\n"))
    assert h(e.list_jobs(s, b"x", "ready", 10)) == [second, first]  # taking order
    assert h(e.list_jobs(s, b"missing", "ready", 10)) is o.NOT_FOUND
    assert h(e.flush_tube(s, b"x")) == 2
    assert h(e.peek_ready(s)) is o.NOT_FOUND
