# -*- test-case-name: tests.test_web_engine -*-
"""Listing a tube's jobs without changing anything: the in-memory engine's
side of :meth:`Engine.jobs_page <twisted_stalk.core.engine.Engine.jobs_page>`,
:meth:`~twisted_stalk.core.engine.Engine.search_bodies` and ``list-jobs``.

The tube's structures are lazy heaps (a job that left a state may keep a
stale entry), so every walk here checks each entry against its job.  A walk
in *taking order* visits a binary heap in sorted order without popping it
(a frontier heap of indexes), so the first ``k`` jobs cost O(k log k) rather
than a scan of the tube.  Other orders scan the tube's jobs in that state
once and select the page with a bounded heap.

These functions run synchronously inside one engine call: the heaps must not
change while a walk is in progress.
"""
from __future__ import annotations

import heapq
from itertools import islice

TYPE_CHECKING = False  # typing costs stalkd's first reply (server/_early.py)
if TYPE_CHECKING:  # pragma: no cover
    from typing import Callable, Dict, Iterable, Iterator, List, Optional, Tuple

from .engine import JOB_SORTS
from .job import BURIED, DELAYED, READY, RESERVED, JobRecord

if TYPE_CHECKING:  # pragma: no cover
    from .memory import MemoryEngine
    from .tube import MemoryTube


def heap_in_order(heap: list) -> Iterator:
    """The entries of a binary heap in ascending order, without changing it:
    O(log k) per entry taken, so taking the first ``k`` is O(k log k)."""
    n = len(heap)
    if not n:
        return
    frontier = [(heap[0], 0)]
    pop, push = heapq.heappop, heapq.heappush
    while frontier:
        entry, i = pop(frontier)
        yield entry
        child = 2 * i + 1
        if child < n:
            push(frontier, (heap[child], child))
            if child + 1 < n:
                push(frontier, (heap[child + 1], child + 1))


def _sorted_heap(heap: list, want: Optional[int]) -> Iterable:
    """A heap's entries in order: walked for a few, sorted (in C) for many."""
    if want is not None and want * 16 < len(heap):
        return heap_in_order(heap)
    return sorted(heap)


def in_taking_order(engine: "MemoryEngine", t: "MemoryTube", state: int,
                    want: Optional[int] = None) -> Iterator[JobRecord]:
    """The live jobs of ``t`` in ``state``, in the order the engine takes them:
    ready by priority then id, delayed and reserved by deadline, buried in
    kick order.  ``want``: about how many the caller will take (None: all)."""
    jobs = engine.jobs
    if state == BURIED:
        yield from t.buried.values()
    elif state == READY:
        for pri in sorted(t.ready):
            for job_id in _sorted_heap(t.ready[pri], want):
                job = jobs.get(job_id)
                if job is not None and job.state == READY and job.heap_key == pri:
                    yield job
    else:
        heap = t.delayed if state == DELAYED else engine.ttr_heap
        seen = set()
        for entry in _sorted_heap(heap, want):
            job = jobs.get(entry[1])
            if (job is not None and job.state == state and job.tube is t
                    and job.deadline_at == entry[0] and job.id not in seen):
                seen.add(job.id)
                yield job


def all_in_state(engine: "MemoryEngine", t: "MemoryTube", state: int) -> List[JobRecord]:
    """Every live job of ``t`` in ``state``, in no particular order: one scan."""
    jobs = engine.jobs
    if state == BURIED:
        return list(t.buried.values())
    if state == READY:
        out = []
        append = out.append
        for pri, bucket in t.ready.items():
            for job_id in bucket:
                job = jobs.get(job_id)
                if job is not None and job.heap_key == pri and job.state == READY:
                    append(job)
        return out
    heap = t.delayed if state == DELAYED else engine.ttr_heap
    live: Dict[int, JobRecord] = {}
    for entry in heap:
        job = jobs.get(entry[1])
        if (job is not None and job.state == state and job.tube is t
                and job.deadline_at == entry[0]):
            live[job.id] = job
    return list(live.values())


def count_in_state(t: "MemoryTube", state: int) -> int:
    if state == READY:
        return t.ready_count
    if state == DELAYED:
        return t.delayed_count
    if state == BURIED:
        return len(t.buried)
    return t.reserved_count


def _sort_key(sort: str, state: int) -> Callable[[JobRecord], object]:
    if sort == "pri":
        return lambda job: (job.pri, job.id)
    if sort == "queue" and state in (RESERVED, DELAYED):
        return lambda job: (job.deadline_at, job.id)
    return lambda job: job.id


def _normal_sort(sort: str, state: int) -> str:
    """The sort as this engine runs it: orders that coincide are one."""
    if sort == "time-left":
        # Ready and buried jobs have no time left (all 0: then by id); for
        # delayed and reserved jobs the deadline is their taking order.
        return "queue" if state in (RESERVED, DELAYED) else "id"
    if sort == "pri" and state == READY:
        return "queue"
    return sort


def _walk_ids(engine: "MemoryEngine", t: "MemoryTube", state: int, want: int, descending: bool,
              by_age: bool) -> Optional[List[JobRecord]]:
    """The first ``want`` jobs of ``t`` in ``state`` by id, walking the
    engine's job table (kept in insertion order, which is id order for jobs
    put in this run), or None if that order turns out not to hold (jobs
    restored from a binlog) so that the caller scans instead."""
    jobs = engine.jobs
    out: List[JobRecord] = []
    last_id = None
    last_created = None
    for job in (reversed(jobs.values()) if descending else iter(jobs.values())):
        job_id = job.id
        if last_id is not None and (job_id < last_id) != descending:
            return None
        if by_age:
            created = job.created_at
            if last_created is not None and (created < last_created) != descending \
                    and created != last_created:
                return None
            last_created = created
        last_id = job_id
        if job.tube is t and job.state == state:
            out.append(job)
            if len(out) >= want:
                break
    return out


def _heap_largest(engine: "MemoryEngine", t: "MemoryTube", state: int, want: int) -> List[JobRecord]:
    """The last ``want`` jobs in taking order (ready or delayed), last first,
    picked from the raw heap entries (C comparisons), stale ones dropped."""
    jobs = engine.jobs
    k = want
    while True:
        out: List[JobRecord] = []
        if state == READY:
            for pri in sorted(t.ready, reverse=True):
                bucket = t.ready[pri]
                for job_id in heapq.nlargest(k, bucket):
                    job = jobs.get(job_id)
                    if job is not None and job.state == READY and job.heap_key == pri:
                        out.append(job)
                if len(out) >= want:
                    break
            entries = t.ready_entries
        else:
            heap = t.delayed if state == DELAYED else engine.ttr_heap
            seen = set()
            for entry in heapq.nlargest(k, heap):
                job = jobs.get(entry[1])
                if (job is not None and job.state == state and job.tube is t
                        and job.deadline_at == entry[0] and job.id not in seen):
                    seen.add(job.id)
                    out.append(job)
            entries = len(heap)
        if len(out) >= want or k >= entries:
            return out[:want]
        k *= 2


def jobs_page(engine: "MemoryEngine", t: "MemoryTube", state: int, sort: str, offset: int,
              limit: int, descending: bool) -> Tuple[int, List[JobRecord]]:
    """``(how many jobs t has in state, the page)``; see ``Engine.jobs_page``.

    Cost: taking order (either way) and id order cost about the page's end
    (``offset + limit``); age order too for jobs put since the start; other
    orders (priority of non-ready jobs) scan the tube's jobs in that state.
    """
    total = count_in_state(t, state)
    if limit <= 0 or offset >= total:
        return total, []
    end = offset + limit
    sort = _normal_sort(sort, state)
    chosen: Optional[List[JobRecord]] = None
    if sort == "queue":
        if state == BURIED:
            order = reversed(t.buried.values()) if descending else iter(t.buried.values())
            chosen = list(islice(order, end))
        elif descending and state != RESERVED:
            chosen = _heap_largest(engine, t, state, end)
        elif not descending:
            chosen = list(islice(in_taking_order(engine, t, state, end), end))
    elif sort in ("id", "age"):
        # Ascending age is the newest job first: descending ids.
        newest_first = descending if sort == "id" else not descending
        if end * len(engine.jobs) <= 4 * total * max(total, 256):
            chosen = _walk_ids(engine, t, state, end, newest_first, sort == "age")
        if chosen is None and sort == "age":
            key = lambda job: (job.created_at, job.id)  # noqa: E731
            everything = all_in_state(engine, t, state)
            pick = heapq.nlargest if newest_first else heapq.nsmallest
            chosen = pick(end, everything, key=key)
        elif chosen is None:
            descending = newest_first
    if chosen is None:
        key = _sort_key(sort, state)
        everything = all_in_state(engine, t, state)
        pick = heapq.nlargest if descending else heapq.nsmallest
        chosen = pick(end, everything, key=key)
    return total, chosen[offset:end]


def job_ids(engine: "MemoryEngine", t: "MemoryTube", state: int, limit: int) -> List[int]:
    """Ids of up to ``limit`` jobs of ``t`` in ``state``, in taking order."""
    if limit <= 0:
        return []
    return [job.id for job in islice(in_taking_order(engine, t, state, limit), limit)]


def search_bodies(engine: "MemoryEngine", t: "MemoryTube", needle: bytes, after_id: int,
                  span: int) -> Tuple[List[JobRecord], Optional[int]]:
    """Jobs of ``t`` whose id is in ``(after_id, after_id + span]`` and whose
    body (without its CRLF) contains ``needle``, in id order, and where to
    go on (None: no job has a higher id)."""
    jobs = engine.jobs
    last_given = engine.next_id - 1
    start = max(after_id, 0) + 1
    stop = min(after_id + max(span, 1), last_given)
    found: List[JobRecord] = []
    for job in map(jobs.get, range(start, stop + 1)):
        if job is not None and job.tube is t:
            body = job.body
            if body.find(needle, 0, len(body) - 2) >= 0:
                found.append(job)
    return found, (stop if stop < last_given else None)


__all__ = ["JOB_SORTS", "all_in_state", "count_in_state", "heap_in_order", "in_taking_order",
           "job_ids", "jobs_page", "search_bodies"]
