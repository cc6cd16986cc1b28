"""A tube: its ready heap, delayed heap, buried list, waiters and counters."""
from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING, Dict, List, Tuple

if TYPE_CHECKING:  # pragma: no cover
    from .job import Job
    from .session import Session


class Tube:
    """A named queue.  The heaps are lazy: entries of jobs that left are
    skipped when they reach the top and purged when they outnumber live ones.
    """

    __slots__ = (
        "name", "index", "ready", "ready_pris", "ready_entries", "ready_count",
        "urgent_count", "delayed",
        "delayed_count", "buried", "reserved_count", "total_jobs", "using_count",
        "watching_count", "waiting", "cmd_delete", "cmd_pause", "pause",
        "unpause_at",
    )

    def __init__(self, name: bytes) -> None:
        self.name = name
        #: Position in the server's tube list (for O(1) swap-removal).
        self.index = -1
        #: Ready jobs by priority: each bucket is a heap of job ids (the id
        #: objects the jobs already hold, so an entry costs one pointer).
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
        self.buried: "OrderedDict[int, Job]" = OrderedDict()
        self.reserved_count = 0
        self.total_jobs = 0
        self.using_count = 0
        self.watching_count = 0
        #: Sessions waiting in reserve on this tube, in arrival order.
        self.waiting: "OrderedDict[Session, None]" = OrderedDict()
        self.cmd_delete = 0
        self.cmd_pause = 0
        #: Pause length in seconds (0: not paused) and when it ends.
        self.pause = 0
        self.unpause_at = 0.0

    @property
    def job_count(self) -> int:
        return self.ready_count + self.delayed_count + len(self.buried) + self.reserved_count

    @property
    def unused(self) -> bool:
        """True when nothing refers to the tube any more."""
        return (self.using_count == 0 and self.watching_count == 0
                and self.job_count == 0)

    def __repr__(self) -> str:  # pragma: no cover
        return f"<Tube {self.name!r}>"
