"""The engine methods the console lists with: jobs_page, job_holder, search_bodies.

Every page is checked against a brute-force answer computed from the jobs
themselves (random states, priorities, delays; stale heap entries from jobs
that moved), in every sort, both directions, at several offsets.
"""
from __future__ import annotations

import random

import pytest
from twisted.internet.task import Clock

from servers import RecordingFrontEnd
from twisted_stalk.core import MemoryEngine
from twisted_stalk.core import outcomes as o
from twisted_stalk.core.engine import JOB_SORTS
from twisted_stalk.core.job import STATE_BY_NAME
from twisted_stalk.protocol.constants import JOB_STATES


def _busy_engine(seed: int = 7, n: int = 600):
    rng = random.Random(seed)
    clock = Clock()
    clock.advance(1000)
    engine = MemoryEngine(clock)
    producer = engine.open_session(RecordingFrontEnd())
    worker = engine.open_session(RecordingFrontEnd())
    engine.use(producer, b"work")
    engine.watch(worker, b"work")
    engine.ignore(worker, b"default")
    for i in range(n):
        if i % 50 == 0:
            clock.advance(rng.choice((0, 0.0005, 1, 3)))
        engine.put(producer, rng.choice((0, 5, 1024, 2000)), rng.choice((0, 0, 0, 30, 90)),
                   rng.choice((10, 60, 300)), b"job %d\r\n" % i)
        if i % 7 == 0:
            engine.use(producer, b"other")
            engine.put(producer, 1, 0, 10, b"elsewhere\r\n")
            engine.use(producer, b"work")
    # Reserve some, bury some of those, release some with a new priority
    # (stale bucket entries), kick a few, delete a few.
    for _ in range(150):
        job = engine.reserve_with_timeout(worker, 0)
        if job is o.TIMED_OUT:
            break
        r = rng.random()
        if r < 0.3:
            engine.bury(worker, job.id, rng.choice((3, 9)))
        elif r < 0.5:
            engine.release(worker, job.id, rng.choice((1, 7)), rng.choice((0, 40)))
        elif r < 0.6:
            engine.delete(worker, job.id)
    engine.use(producer, b"work")
    engine.kick(producer, 10)
    return engine, clock, worker


def _expected(engine, state: str, sort: str, descending: bool):
    code = STATE_BY_NAME[state]
    jobs = [j for j in engine.jobs.values() if j.tube.name == b"work" and j.state == code]
    if sort == "queue":
        if state == "buried":
            order = list(engine.tubes[b"work"].buried.values())
            return order[::-1] if descending else order
        if state == "ready":
            key = lambda j: (j.pri, j.id)  # noqa: E731
        else:
            key = lambda j: (j.deadline_at, j.id)  # noqa: E731
    elif sort == "id":
        key = lambda j: j.id  # noqa: E731
    elif sort == "pri":
        key = lambda j: (j.pri, j.id)  # noqa: E731
    elif sort == "age":
        key = lambda j: (-j.created_at, -j.id)  # noqa: E731
    else:  # time-left
        if state in ("reserved", "delayed"):
            key = lambda j: (j.deadline_at, j.id)  # noqa: E731
        else:
            key = lambda j: j.id  # noqa: E731
    return sorted(jobs, key=key, reverse=descending)


@pytest.mark.parametrize("state", JOB_STATES)
@pytest.mark.parametrize("sort", JOB_SORTS)
def test_jobs_page_matches_a_brute_force_sort(state, sort):
    engine, _, _ = _busy_engine()
    for descending in (False, True):
        expected = [j.id for j in _expected(engine, state, sort, descending)]
        for offset, limit in ((0, 10), (0, 1000), (5, 7), (len(expected) - 3, 10),
                              (len(expected) + 5, 10)):
            total, page = engine.jobs_page(b"work", state, sort, max(offset, 0), limit,
                                           descending)
            assert total == len(expected)
            assert [j.id for j in page] == expected[max(offset, 0):max(offset, 0) + limit], \
                (state, sort, descending, offset)


def test_jobs_page_counts_nothing_and_knows_missing_tubes():
    engine, _, _ = _busy_engine(n=50)
    before = dict(engine.cmd_counts)
    assert engine.jobs_page(b"nope", "ready") is o.NOT_FOUND
    assert engine.jobs_page(b"work", "ready", "id", 0, 0) == (engine.tubes[b"work"].ready_count,
                                                              [])
    assert engine.cmd_counts == before
    with pytest.raises(ValueError):
        engine.jobs_page(b"work", "ready", "colour")


def test_id_and_age_orders_hold_for_jobs_restored_out_of_order():
    """Jobs restored from a binlog may sit in the job table out of id order:
    the id walk notices and the page is still right."""
    clock = Clock()
    engine = MemoryEngine(clock)
    s = engine.open_session(RecordingFrontEnd())
    ids = [engine.put(s, 0, 0, 10, b"x\r\n") for _ in range(40)]
    jobs = [engine.jobs.pop(i) for i in ids]
    for job in reversed(jobs):
        engine.jobs[job.id] = job
    for sort in ("id", "age"):
        for descending in (False, True):
            expected = _expected_ids(ids, sort, descending)
            assert [j.id for j in engine.jobs_page(b"default", "ready", sort, 3, 5,
                                                   descending)[1]] == expected[3:8]


def _expected_ids(ids, sort, descending):
    ordered = sorted(ids, reverse=descending)
    return ordered[::-1] if sort == "age" else ordered


def test_job_holder_names_the_reserving_session():
    engine, _, worker = _busy_engine(n=40)
    reserved = [j for j in engine.jobs.values() if j.state == STATE_BY_NAME["reserved"]]
    assert reserved
    for job in reserved:
        assert engine.job_holder(job.id) is worker
    ready = next(j for j in engine.jobs.values() if j.state == STATE_BY_NAME["ready"])
    assert engine.job_holder(ready.id) is None
    assert engine.job_holder(10 ** 9) is None


def test_search_bodies_steps_cover_every_id_once():
    engine, _, _ = _busy_engine(n=300)
    expected = sorted(j.id for j in engine.jobs.values()
                      if j.tube.name == b"work" and b"1" in j.body[:-2])
    found, after, steps = [], 0, 0
    while after is not None:
        page, after = engine.search_bodies(b"work", b"1", after, 37)
        found += [j.id for j in page]
        steps += 1
    assert found == expected
    assert steps == -(-(engine.next_id - 1) // 37)
    assert engine.search_bodies(b"nope", b"x", 0, 10) is o.NOT_FOUND
    # The CRLF is not part of the body searched.
    assert engine.search_bodies(b"work", b"\r\n", 0, 10 ** 6) == ([], None)


def test_list_jobs_keeps_its_order_after_the_walk_change():
    engine, _, worker = _busy_engine()
    for state in JOB_STATES:
        expected = [j.id for j in _expected(engine, state, "queue", False)]
        assert engine.list_jobs(worker, b"work", state, 25) == expected[:25]
        assert engine.list_jobs(worker, b"work", state, 10 ** 6) == expected
