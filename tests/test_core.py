"""The I/O-free work queue, driven by a Clock: no sockets, no sleeps."""
from __future__ import annotations

import subprocess
import sys

import pytest

from servers import RecordingFrontEnd
from twisted_stalk.core import BURIED, DELAYED, READY, RESERVED, MemoryEngine
from twisted_stalk.core.outcomes import (
    BURIED as BURIED_OUTCOME,
    DEADLINE_SOON,
    DELETED,
    KICKED,
    NOT_FOUND,
    NOT_IGNORED,
    PAUSED,
    RELEASED,
    TIMED_OUT,
    TOUCHED,
    WAITING,
)
from twisted_stalk.protocol.yaml import parse_mapping, render_mapping


class FakeClock:
    """The smallest IReactorTime the core needs (no Twisted import)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def seconds(self) -> float:
        return self.now




@pytest.fixture
def clock():
    return FakeClock()


@pytest.fixture
def q(clock):
    return MemoryEngine(clock)


def deliver(q: MemoryEngine) -> None:
    """Deliver the engine's wake-ups, as the server does after each command."""
    for s, outcome in q.take_wakeups():
        s.frontend.wake(outcome)


def advance(q: MemoryEngine, clock: FakeClock, seconds: float) -> None:
    """Move time on, firing every deadline on the way as the server's timer would."""
    target = clock.now + seconds
    while True:
        at = q.next_deadline()
        if at is None or at > target:
            break
        clock.now = max(clock.now, at)
        q.tick()
        deliver(q)
    clock.now = target


def session(q: MemoryEngine):
    frontend = RecordingFrontEnd()
    return q.open_session(frontend), frontend.events


def put(q, s, pri=0, delay=0, ttr=10, body=b"x"):
    job_id = q.put(s, pri, delay, ttr, body + b"\r\n")
    deliver(q)
    return q.jobs[job_id]


def test_core_does_not_import_twisted():
    code = ("import sys, twisted_stalk.core, twisted_stalk.protocol;"
            "sys.exit(1 if 'twisted' in sys.modules else 0)")
    assert subprocess.call([sys.executable, "-c", code]) == 0


def test_priority_then_fifo(q):
    s, _ = session(q)
    ids = [put(q, s, pri).id for pri in (5, 1, 5, 1, 0)]
    got = [q.reserve_with_timeout(s, 0).id for _ in ids]
    assert got == [ids[4], ids[1], ids[3], ids[0], ids[2]]
    assert q.reserve_with_timeout(s, 0) is TIMED_OUT


def test_ttr_zero_becomes_one(q):
    s, _ = session(q)
    assert put(q, s, ttr=0).ttr == 1


def test_delay_then_ready(q, clock):
    s, _ = session(q)
    job = put(q, s, delay=5)
    assert job.state == DELAYED and q.reserve_with_timeout(s, 0) is TIMED_OUT
    assert q.next_deadline() == clock.now + 5
    advance(q, clock, 4.9)
    assert job.state == DELAYED
    advance(q, clock, 0.1)
    assert job.state == READY
    assert q.reserve_with_timeout(s, 0) is job


def test_ttr_expiry_returns_job_and_counts_timeout(q, clock):
    s, _ = session(q)
    job = put(q, s, ttr=3)
    assert q.reserve_with_timeout(s, 0) is job
    advance(q, clock, 2.99)
    assert job.state == RESERVED
    advance(q, clock, 0.02)
    assert job.state == READY and q.job_timeouts == 1
    stats = parse_mapping(render_mapping(q.stats_job(s, job.id)))
    assert stats["timeouts"] == 1 and stats["reserves"] == 1


def test_touch_restarts_ttr(q, clock):
    s, _ = session(q)
    job = put(q, s, ttr=3)
    q.reserve_with_timeout(s, 0)
    advance(q, clock, 2)
    assert q.touch(s, job.id) is TOUCHED
    advance(q, clock, 2)
    assert job.state == RESERVED
    advance(q, clock, 1.01)
    assert job.state == READY


def test_deadline_soon_for_reserve_issued_in_safety_margin(q, clock):
    s, _ = session(q)
    put(q, s, ttr=3)
    q.reserve_with_timeout(s, 0)
    advance(q, clock, 1.5)
    assert q.reserve_with_timeout(s, 0) is TIMED_OUT  # not yet in the margin
    advance(q, clock, 0.6)
    assert q.reserve_with_timeout(s, 0) is DEADLINE_SOON


def test_deadline_soon_to_waiting_reserve_when_margin_starts(q, clock):
    s, events = session(q)
    put(q, s, ttr=5)
    q.reserve_with_timeout(s, 0)
    assert q.reserve(s) is WAITING  # waits
    assert q.waiting_count == 1
    advance(q, clock, 3.99)
    assert events == []
    advance(q, clock, 0.02)
    assert events == ["DEADLINE_SOON"]
    assert q.waiting_count == 0


def test_reserve_with_timeout(q, clock):
    s, events = session(q)
    assert q.reserve_with_timeout(s, 0) is TIMED_OUT
    assert q.reserve_with_timeout(s, 2) is WAITING
    advance(q, clock, 1.9)
    assert events == []
    advance(q, clock, 0.2)
    assert events == ["TIMED_OUT"]


def test_waiting_reserves_served_in_arrival_order(q):
    producer, _ = session(q)
    waiters = [session(q) for _ in range(3)]
    for s, _ in waiters:
        assert q.reserve(s) is WAITING
    jobs = [put(q, producer) for _ in range(3)]
    assert [ev for _, events in waiters for ev in events] == [("RESERVED", j.id) for j in jobs]


def test_waiter_on_several_tubes_gets_job_from_any(q):
    producer, _ = session(q)
    worker, events = session(q)
    q.watch(worker, b"a")
    q.watch(worker, b"b")
    assert q.reserve(worker) is WAITING
    assert len(q.tubes[b"a"].waiting) == 1 and len(q.tubes[b"b"].waiting) == 1
    q.use(producer, b"b")
    job = put(q, producer)
    assert events == [("RESERVED", job.id)]
    assert not q.tubes[b"a"].waiting and not q.tubes[b"b"].waiting


def test_best_job_across_watched_tubes(q):
    producer, _ = session(q)
    worker, _ = session(q)
    q.watch(worker, b"a")
    q.use(producer, b"a")
    low = put(q, producer, pri=10)
    q.use(producer, b"default")
    high = put(q, producer, pri=1)
    assert q.reserve_with_timeout(worker, 0) is high
    assert q.reserve_with_timeout(worker, 0) is low


def test_pause_tube_holds_reserves_until_pause_ends(q, clock):
    s, events = session(q)
    job = put(q, s)
    assert q.pause_tube(s, b"default", 3) is PAUSED
    assert q.reserve_with_timeout(s, 0) is TIMED_OUT
    assert q.reserve(s) is WAITING
    advance(q, clock, 2.9)
    assert events == []
    advance(q, clock, 0.2)
    assert events == [("RESERVED", job.id)]
    assert parse_mapping(render_mapping(q.stats_tube(s, b"default")))["pause"] == 0


def test_release_bury_kick(q, clock):
    s, _ = session(q)
    job = put(q, s, pri=5)
    q.reserve_with_timeout(s, 0)
    assert q.release(s, job.id, 7, 2) is RELEASED
    assert job.state == DELAYED and job.pri == 7
    assert q.kick(s, 10) == 1 and job.state == READY
    q.reserve_with_timeout(s, 0)
    assert q.bury(s, job.id, 9) is BURIED_OUTCOME
    assert job.state == BURIED and q.peek_buried(s) is job
    other = put(q, s, delay=100)
    # kick prefers buried jobs
    assert q.kick(s, 10) == 1 and job.state == READY and other.state == DELAYED
    assert q.kick_job(s, other.id) is KICKED and other.state == READY
    assert q.kick_job(s, other.id) is NOT_FOUND
    counts = parse_mapping(render_mapping(q.stats_job(s, job.id)))
    assert (counts["releases"], counts["buries"], counts["kicks"], counts["pri"]) == (1, 1, 2, 9)


def test_delete_rules(q):
    a, _ = session(q)
    b, _ = session(q)
    job = put(q, a)
    q.reserve_with_timeout(a, 0)
    assert q.delete(b, job.id) is NOT_FOUND  # reserved by another client
    assert q.delete(a, job.id) is DELETED
    assert q.delete(a, job.id) is NOT_FOUND
    assert q.peek(a, job.id) is NOT_FOUND


def test_close_session_returns_reserved_jobs(q):
    a, _ = session(q)
    job = put(q, a)
    q.reserve_with_timeout(a, 0)
    q.close_session(a)
    assert job.state == READY and q.reserved_count == 0 and q.ready_count == 1


def test_tubes_created_on_use_and_dropped_when_unused(q):
    s, _ = session(q)
    q.use(s, b"t1")
    q.watch(s, b"t2")
    assert q.list_tubes(s) == [b"default", b"t1", b"t2"]
    job = put(q, s)
    q.use(s, b"default")
    assert b"t1" in q.tubes  # holds a job
    q.delete(s, job.id)
    # beanstalkd removes by swapping the last tube into the hole
    assert q.list_tubes(s) == [b"default", b"t2"]
    assert q.ignore(s, b"t2") == 1
    assert q.list_tubes(s) == [b"default"]
    assert q.ignore(s, b"default") is NOT_IGNORED


def test_reserve_job_from_every_state(q):
    s, _ = session(q)
    ready = put(q, s)
    delayed = put(q, s, delay=50)
    assert q.reserve_job(s, delayed.id) is delayed and delayed.state == RESERVED
    assert q.reserve_job(s, delayed.id) is NOT_FOUND
    assert q.reserve_job(s, ready.id) is ready
    assert q.reserve_with_timeout(s, 0) is TIMED_OUT


def test_stale_heap_entries_are_compacted(q, clock):
    """Reserve/release/delete churn leaves the lazy heaps bounded."""
    s, _ = session(q)
    keep = [put(q, s) for _ in range(10)]
    for _ in range(5000):
        job = put(q, s, pri=0)
        q.reserve_job(s, job.id)
        q.release(s, job.id, 1, 0)
        q.delete(s, job.id)
    t = q.default_tube
    assert t.ready_count == 10
    assert t.ready_entries <= 2 * t.ready_count + 65
    assert len(q.ttr_heap) <= 2 * q.reserved_count + 33
    assert [q.reserve_with_timeout(s, 0) for _ in keep] == keep


def test_a_sessions_own_deadline_heap_stays_bounded_and_right(q, clock):
    """A session holding jobs while it reserves and releases others: its
    DEADLINE_SOON heap is compacted and still gives the soonest deadline."""
    s, _ = session(q)
    held = [put(q, s, ttr=100 + i) for i in range(3)]
    for job in held:
        q.reserve_job(s, job.id)
    for i in range(2000):
        job = put(q, s, ttr=50 + i % 7)
        q.reserve_job(s, job.id)
        q.release(s, job.id, 0, 0)
        q.delete(s, job.id)
    assert len(s.ttr_heap) <= 2 * len(s.reserved) + 33
    assert s.soonest_deadline() == held[0].deadline_at


def test_touches_leave_the_deadline_heaps_bounded_and_right(q, clock):
    """A worker holding two jobs and touching one of them: each touch made
    an entry in the engine's and the session's deadline heaps that only the
    old deadline's passing (or a new reservation) removed; they stay bounded,
    and the soonest deadline and the TTR timer are still right."""
    s, _ = session(q)
    kept, touched = put(q, s, ttr=100), put(q, s, ttr=120)
    q.reserve_job(s, kept.id)
    q.reserve_job(s, touched.id)
    for n in range(1, 2001):
        clock.now = 1000.0 + n / 100
        assert q.touch(s, touched.id) is TOUCHED
    assert len(q.ttr_heap) <= 2 * q.reserved_count + 33
    assert len(s.ttr_heap) <= 2 * len(s.reserved) + 33
    assert s.soonest_deadline() == kept.deadline_at == 1100.0
    assert q.next_deadline() == kept.deadline_at
    advance(q, clock, 1100.0 - clock.now)
    assert kept.state == READY and touched.state == RESERVED
    assert s.soonest_deadline() == touched.deadline_at == 1000.0 + 20 + 120


def test_million_delayed_jobs_keep_put_reserve_cheap(q, clock):
    """Delayed jobs sit in heaps: a reserve does not scan them."""
    s, _ = session(q)
    q.use(s, b"later")
    for i in range(200_000):
        q.put(s, 0, 1000 + i % 7, 10, b"x\r\n")
    q.use(s, b"default")
    import time
    t0 = time.perf_counter()
    for _ in range(2000):
        job = put(q, s)
        assert q.reserve_with_timeout(s, 0) is job
        q.delete(s, job.id)
    elapsed = time.perf_counter() - t0
    assert elapsed < 1.0, elapsed


def test_stats_shape(q):
    s, _ = session(q)
    put(q, s, pri=5)
    body = render_mapping(q.stats(s))
    assert body.startswith(b"---\ncurrent-jobs-urgent: 1\ncurrent-jobs-ready: 1\n")
    keys = [line.split(b":")[0] for line in body.splitlines()[1:]]
    assert keys[-5:] == [b"draining", b"id", b"hostname", b"os", b"platform"]
    assert b'\nversion: "' in body and b'\nhostname: "' in body
    tube = render_mapping(q.stats_tube(s, b"default"))
    assert tube.startswith(b'---\nname: "default"\ncurrent-jobs-urgent: 1\n')


def test_put_builds_the_same_job_as_the_job_class(q, clock):
    """MemoryEngine.put builds jobs without calling JobRecord.__init__; both must agree."""
    from twisted_stalk.core.job import JobRecord

    s, _ = session(q)
    job = q.jobs[q.put(s, 5, 0, 0, b"body\r\n")]
    expected = JobRecord(job.id, 5, 0, 1, b"body\r\n", s.use, job.created_at)
    expected.heap_key = job.heap_key  # set by the ready heap, not the constructor
    for name in JobRecord.__slots__:
        assert getattr(job, name) == getattr(expected, name), name


def test_put_hands_job_to_lone_waiter_with_counters_right(q):
    producer, _ = session(q)
    worker, events = session(q)
    assert q.reserve(worker) is WAITING
    job = put(q, producer)
    assert events == [("RESERVED", job.id)]
    assert job.state == RESERVED and job.counter(0) == 1
    assert (q.ready_count, q.reserved_count, q.waiting_count) == (0, 1, 0)
    t = q.default_tube
    assert (t.ready_count, t.reserved_count, len(t.waiting)) == (0, 1, 0)
    assert q.delete(worker, job.id) is DELETED
    assert q.reserved_count == 0 and t.reserved_count == 0
    # Released later, the job goes through the ready heap as usual.
    job2 = put(q, producer)
    assert q.reserve_with_timeout(worker, 0) is job2
    assert q.release(worker, job2.id, 0, 0) is RELEASED
    assert q.ready_count == 1 and q.reserve_with_timeout(worker, 0) is job2


def test_no_hand_off_past_a_better_job_or_a_pause(q, clock):
    producer, _ = session(q)
    worker, events = session(q)
    urgent = put(q, producer, pri=1)
    q.pause_tube(producer, b"default", 10)
    assert q.reserve(worker) is WAITING  # paused: waits
    later = put(q, producer, pri=0)
    assert events == []  # a paused tube serves no one
    advance(q, clock, 11)
    assert events == [("RESERVED", later.id)]  # pri 0 beats pri 1
    assert urgent.state == READY and q.ready_count == 1


def test_deadline_soon_tracks_the_soonest_of_several_reservations(q, clock):
    """The session's deadline heap starts with its second job: the first
    job's deadline (touched before) must still count."""
    s, events = session(q)
    short = put(q, s, ttr=3)
    long = put(q, s, ttr=100)
    assert q.reserve_with_timeout(s, 0) is short
    advance(q, clock, 1)
    assert q.touch(s, short.id) is TOUCHED  # deadline now 4 s from the start
    assert q.reserve_with_timeout(s, 0) is long
    assert q.reserve(s) is WAITING
    advance(q, clock, 1.9)
    assert events == []
    advance(q, clock, 0.2)  # 3.1 s: short's margin began at 3 s
    assert events == ["DEADLINE_SOON"]
    assert q.delete(s, short.id) is DELETED
    assert q.reserve_with_timeout(s, 0) is TIMED_OUT  # long alone: far from its margin
    advance(q, clock, 96.8)  # 99.9 s: long's margin begins at 100 s
    assert q.reserve_with_timeout(s, 0) is TIMED_OUT
    advance(q, clock, 0.2)
    assert q.reserve_with_timeout(s, 0) is DEADLINE_SOON


def test_counters_are_named_by_constants_from_the_command_table():
    """core/counters.py has one constant per counted command, generated from
    the table, and the library counts through them: no ``cmd_counts["..."]``
    with a string written out (a misspelt constant fails at import)."""
    import ast
    import os

    from twisted_stalk.core import counters
    from twisted_stalk.protocol.commands import COUNTED_COMMANDS

    assert sorted(counters.COUNTERS.values()) == sorted(COUNTED_COMMANDS)
    assert counters.PUT == "put" and counters.RESERVE_WITH_TIMEOUT == "reserve-with-timeout"
    root = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "twisted_stalk")
    literal = []
    for top, _, files in os.walk(root):
        for name in (n for n in files if n.endswith(".py")):
            path = os.path.join(top, name)
            with open(path, encoding="utf-8") as f:
                tree = ast.parse(f.read(), path)
            literal += [f"{path}:{node.lineno}" for node in ast.walk(tree)
                        if isinstance(node, ast.Subscript)
                        and isinstance(node.value, ast.Attribute)
                        and node.value.attr == "cmd_counts"
                        and isinstance(node.slice, ast.Constant)]
    assert literal == []
