# -*- test-case-name: tests.test_core -*-
"""A tube: its ready buckets, delayed heap, buried list, waiters and counters.

The tube owns the order in which its ready jobs are taken: lowest priority
first, then lowest id.  Ready jobs sit in one bucket per priority (a heap of
job ids: the id objects the jobs already hold, so an entry costs one
pointer), under a heap of the priorities present; taking the best job is
O(log n).  The buckets are lazy: a job that leaves the ready state keeps its
entry until the entry reaches the top (it is then dropped) or until entries
outnumber live jobs twice (the tube is then compacted: amortised O(1)).
"""
from __future__ import annotations

import heapq

TYPE_CHECKING = False  # typing costs stalkd's first reply (server/_early.py)
if TYPE_CHECKING:  # pragma: no cover
    from typing import Dict, List, Optional, Tuple

from ..protocol.constants import URGENT_THRESHOLD
from .job import READY

if TYPE_CHECKING:  # pragma: no cover
    from .job import JobRecord
    from .session import Session

heappush = heapq.heappush
heappop = heapq.heappop


class MemoryTube:
    """A named queue; its counters are kept exact by the engine after each step."""

    __slots__ = (
        "name", "jobs", "index", "ready", "ready_pris", "ready_entries", "ready_count",
        "urgent_count", "delayed",
        "delayed_count", "buried", "reserved_count", "total_jobs", "using_count",
        "watching_count", "waiting", "cmd_delete", "cmd_pause", "pause",
        "unpause_at",
    )

    def __init__(self, name: bytes, jobs: Dict[int, "JobRecord"]) -> None:
        self.name = name
        #: Every job of the engine by id (to tell live bucket entries from stale ones).
        self.jobs = jobs
        #: Position in the engine's tube list (for O(1) swap-removal).
        self.index = -1
        #: Ready job ids by priority: each bucket is a heap.
        self.ready: Dict[int, List[int]] = {}
        #: Heap of the priorities that have a bucket.
        self.ready_pris: List[int] = []
        #: Entries in all buckets, live and stale (for compaction).
        self.ready_entries = 0
        self.ready_count = 0
        self.urgent_count = 0
        #: Heap of ``(deadline_at, id)`` for delayed jobs.
        self.delayed: List[Tuple[float, int]] = []
        self.delayed_count = 0
        #: Buried jobs in burial order.
        self.buried: Dict[int, JobRecord] = {}  # (dicts keep their order)
        self.reserved_count = 0
        self.total_jobs = 0
        self.using_count = 0
        self.watching_count = 0
        #: Sessions waiting in reserve on this tube, in arrival order.
        self.waiting: Dict[Session, None] = {}
        self.cmd_delete = 0
        self.cmd_pause = 0
        #: Pause length in seconds (0: not paused) and when it ends.
        self.pause = 0
        self.unpause_at = 0.0

    # ------------------------------------------------------------ ready jobs

    def push_ready(self, job: "JobRecord") -> None:
        """Count ``job`` (already marked READY) as ready here and give it a
        bucket entry unless its bucket still holds one."""
        pri = job.pri
        if job.heap_key != pri:
            bucket = self.ready.get(pri)
            if bucket is None:
                bucket = self.ready[pri] = []
                heappush(self.ready_pris, pri)
            heappush(bucket, job.id)
            job.heap_key = pri
            self.ready_entries += 1
            if self.ready_entries > 2 * self.ready_count + 64:
                self.compact_ready()
        self.ready_count += 1
        if pri < URGENT_THRESHOLD:
            self.urgent_count += 1

    def ready_top(self, take: bool = False) -> Optional["JobRecord"]:
        """The best ready job (lowest priority, then id), dropping stale
        entries on the way; with ``take``, also remove it from the ready
        counts here (the caller changes its state).

        An entry is live when its job is ready and still marks that bucket
        as holding its entry (``heap_key``); anything else is stale.
        """
        pris = self.ready_pris
        buckets = self.ready
        jobs = self.jobs
        while pris:
            pri = pris[0]
            bucket = buckets.get(pri)
            while bucket:
                job = jobs.get(bucket[0])
                if job is not None and job.heap_key == pri:
                    if job.state == READY:
                        if take:
                            heappop(bucket)
                            self.ready_entries -= 1
                            job.heap_key = None
                            self.ready_count -= 1
                            if pri < URGENT_THRESHOLD:
                                self.urgent_count -= 1
                        return job
                    job.heap_key = None
                heappop(bucket)
                self.ready_entries -= 1
            buckets.pop(pri, None)
            heappop(pris)
        return None

    def compact_ready(self) -> None:
        """Drop every stale bucket entry."""
        jobs = self.jobs
        entries = 0
        for pri, bucket in list(self.ready.items()):
            live = []
            for job_id in bucket:
                job = jobs.get(job_id)
                if job is None or job.heap_key != pri:
                    continue
                if job.state == READY:
                    live.append(job_id)
                else:
                    job.heap_key = None
            if live:
                heapq.heapify(live)
                self.ready[pri] = live
                entries += len(live)
            else:
                del self.ready[pri]
        self.ready_pris = sorted(self.ready)
        self.ready_entries = entries

    # ---------------------------------------------------------------- facts

    def paused_at(self, now: float) -> bool:
        """True while a pause holds back reserves from this tube."""
        return bool(self.pause) and self.unpause_at > now

    @property
    def job_count(self) -> int:
        return self.ready_count + self.delayed_count + len(self.buried) + self.reserved_count

    @property
    def unused(self) -> bool:
        """True when nothing refers to the tube any more."""
        return (self.using_count == 0 and self.watching_count == 0
                and self.job_count == 0)

    def __repr__(self) -> str:  # pragma: no cover
        return f"<MemoryTube {self.name!r}>"
