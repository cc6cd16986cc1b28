# -*- test-case-name: tests.test_core -*-
"""A client's state inside the engine: tubes used and watched, reservations, its wait."""
from __future__ import annotations

import heapq

TYPE_CHECKING = False  # typing costs stalkd's first reply (server/_early.py)
if TYPE_CHECKING:  # pragma: no cover
    from typing import Dict, List, Optional, Tuple

from ..protocol.constants import SAFETY_MARGIN

#: Stale deadline entries a heap may hold beyond twice its live ones before
#: they are dropped (a touch, a release or a delete leaves its entry behind).
STALE_SLACK = 32

if TYPE_CHECKING:  # pragma: no cover
    from typing import Protocol
else:  # interfaces, for the type checker and the reader
    Protocol = object

if TYPE_CHECKING:  # pragma: no cover
    from .job import JobRecord
    from .tube import MemoryTube


class FrontEnd(Protocol):
    """The front end behind a session: it hears the session's wake-ups."""

    def wake(self, outcome: object) -> None:
        """The result of the session's waiting reserve arrived: a
        :class:`~twisted_stalk.core.job.JobRecord`, ``TIMED_OUT`` or ``DEADLINE_SOON``
        (:mod:`twisted_stalk.core.outcomes`).  Called by the front end that
        delivers the engine's wake-ups, never while another command runs."""


class Session:
    """One client of the engine (a connection, a console user, a test)."""

    __slots__ = (
        "frontend", "use", "watch", "reserved", "ttr_heap", "waiting",
        "wait_deadline", "wait_token", "is_producer", "is_worker", "closed",
        "__weakref__",
    )

    def __init__(self, frontend: FrontEnd, default: "MemoryTube") -> None:
        self.frontend = frontend
        self.use = default
        #: Watched tubes, in beanstalkd's order (append; swap-remove on ignore).
        self.watch: List["MemoryTube"] = [default]
        #: Jobs this session has reserved, by id.
        self.reserved: Dict[int, "JobRecord"] = {}
        #: Lazy heap of (deadline_at, id) of reserved jobs, for DEADLINE_SOON;
        #: kept only while the session holds two or more.
        self.ttr_heap: List[Tuple[float, int]] = []
        #: True while a reserve is waiting for a job.
        self.waiting = False
        #: When a waiting reserve-with-timeout gives up (None: never).
        self.wait_deadline: Optional[float] = None
        #: Bumped on every wait so stale timer entries can be told apart.
        self.wait_token = 0
        self.is_producer = False
        self.is_worker = False
        self.closed = False

    def __lt__(self, other: "Session") -> bool:
        # Only to break ties between identical (deadline, id) heap entries.
        return id(self) < id(other)

    def wait_wake_time(self) -> Optional[float]:
        """When this waiting session must be looked at again: its reserve's
        timeout, or a second before its soonest TTR deadline (DEADLINE_SOON),
        whichever comes first; None if neither."""
        wake = self.wait_deadline
        if self.reserved:
            soonest = self.soonest_deadline()
            if soonest is not None:
                margin = soonest - SAFETY_MARGIN
                if wake is None or margin < wake:
                    wake = margin
        return wake

    def move_deadline(self, job_id: int, deadline: float) -> None:
        """A job this session holds has a new deadline (a touch; a TTR sweep
        that could not end it): the heap learns it, if the session holds
        more than one job (else the job's own deadline is the soonest), and
        drops its stale entries once they outnumber the live ones."""
        if len(self.reserved) > 1:
            heapq.heappush(self.ttr_heap, (deadline, job_id))
            if len(self.ttr_heap) > 2 * len(self.reserved) + STALE_SLACK:
                self.drop_stale_deadlines()

    def drop_stale_deadlines(self) -> None:
        """Keep in :attr:`ttr_heap` only the entries of jobs this session
        holds with that deadline (a touch or a job given back leaves the old
        entry behind; engines call this once stale entries outnumber live ones)."""
        reserved = self.reserved
        live = [e for e in self.ttr_heap if e[1] in reserved and reserved[e[1]].deadline_at == e[0]]
        heapq.heapify(live)
        self.ttr_heap = live

    def soonest_deadline(self) -> Optional[float]:
        """The earliest TTR deadline among this session's reservations."""
        reserved = self.reserved
        if len(reserved) == 1:
            # One job: the heap is kept only for two or more (MemoryEngine._make_reserved).
            for job in reserved.values():
                return job.deadline_at
        heap = self.ttr_heap
        while heap:
            deadline, job_id = heap[0]
            job = reserved.get(job_id)
            if job is not None and job.deadline_at == deadline:
                return deadline
            heapq.heappop(heap)
        return None
