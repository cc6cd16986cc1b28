# -*- test-case-name: tests.test_engine,tests.test_web_engine -*-
"""Looking at a :class:`~twisted_stalk.core.memory.MemoryEngine` without
being a client: stats as data, jobs and tubes by name, listings for consoles.

Nothing here counts as a command or changes anything.
"""
from __future__ import annotations

TYPE_CHECKING = False  # typing costs stalkd's first reply (server/_early.py)
if TYPE_CHECKING:  # pragma: no cover
    from typing import Any, List, Optional

    from ..protocol.yaml import StatPairs
    from .readmodel import MemoryUse, TubeFigures

from . import listing
from .engine import JOB_SORTS
from .job import BURIES, DELAYED, KICKS, RELEASES, RESERVED, RESERVES, STATE_BY_NAME, STATE_NAMES, TIMEOUTS
from .outcomes import NOT_FOUND
from . import readmodel
from .session import Session


class Inspection:
    """A part of :class:`~twisted_stalk.core.memory.MemoryEngine`."""

    __slots__ = ()

    def job(self, job_id: int):
        """The job with this id, or NOT_FOUND (``peek`` without counting)."""
        return self.jobs.get(job_id) or NOT_FOUND

    def tube_names(self) -> List[bytes]:
        """The names of all tubes, in ``list-tubes`` order."""
        return [t.name for t in self.tube_list]

    def job_stats(self, job_id: int):
        """A job's ``stats-job`` pairs, or NOT_FOUND."""
        job = self.jobs.get(job_id)
        if job is None:
            return NOT_FOUND
        now = self._now()
        if job.state in (RESERVED, DELAYED):
            time_left = max(0, int(job.deadline_at - now))
        else:
            time_left = 0
        counts = job.counts or (0, 0, 0, 0, 0)
        return [
            ("id", job.id),
            ("tube", job.tube.name),
            ("state", STATE_NAMES[job.state]),
            ("pri", job.pri),
            ("age", int(now - job.created_at)),
            ("delay", job.delay),
            ("ttr", job.ttr),
            ("time-left", time_left),
            ("file", job.binlog_file),
            ("reserves", counts[RESERVES]),
            ("timeouts", counts[TIMEOUTS]),
            ("releases", counts[RELEASES]),
            ("buries", counts[BURIES]),
            ("kicks", counts[KICKS]),
        ]

    def tube_stats(self, name: bytes):
        """A tube's ``stats-tube`` pairs, or NOT_FOUND."""
        t = self.tubes.get(name)
        if t is None:
            return NOT_FOUND
        return _figures(t, self._now()).stat_pairs()

    def tube_figures(self) -> List[TubeFigures]:
        """Every tube's figures, in ``list-tubes`` order."""
        now = self._now()
        # _figures inline, built with tuple.__new__ (no Python frame per
        # tube): a metrics scrape asks this for every tube.
        return [_new(readmodel.TubeFigures, (
            t.name, t.urgent_count, t.ready_count, t.reserved_count, t.delayed_count,
            len(t.buried), t.total_jobs, t.using_count, t.watching_count, len(t.waiting),
            t.cmd_delete, t.cmd_pause, t.pause,
            max(0, int(t.unpause_at - now)) if t.pause else 0)) for t in self.tube_list]

    def memory(self) -> MemoryUse:
        """Stored body bytes and the ``--max-memory`` ceiling."""
        return readmodel.MemoryUse(self.job_bytes, self.max_memory)

    def server_stats(self) -> StatPairs:
        """The server's ``stats`` pairs."""
        counts = (self.urgent_count, self.ready_count, self.reserved_count,
                  self.delayed_count, self.buried_count)
        return self._server_stat_pairs(counts, self._journal.stats())

    # Listings for consoles.

    def jobs_page(self, name: bytes, state: str, sort: str = "queue", offset: int = 0,
                  limit: int = 50, descending: bool = False):
        """``(total, jobs)``: one page of tube ``name``'s jobs in ``state``
        sorted by ``sort`` (see ``Engine.jobs_page``), or NOT_FOUND.  Taking
        order costs O((offset + limit) log); other orders scan the tube's jobs
        in that state once."""
        t = self.tubes.get(name)
        if t is None:
            return NOT_FOUND
        if sort not in JOB_SORTS:
            raise ValueError(f"unknown sort {sort!r}")
        return listing.jobs_page(self, t, STATE_BY_NAME[state], sort, max(0, offset),
                                 limit, descending)

    def job_holder(self, job_id: int) -> Optional[Session]:
        """The session that holds reserved job ``job_id``, or None."""
        job = self.jobs.get(job_id)
        if job is None or job.state != RESERVED:
            return None
        for s in self.sessions:
            if s.reserved.get(job_id) is job:
                return s
        return None

    def search_bodies(self, name: bytes, needle: bytes, after_id: int, span: int):
        """``(jobs, next_after)``: tube ``name``'s jobs with ids in
        ``(after_id, after_id + span]`` whose body contains ``needle`` (see
        ``Engine.search_bodies``), or NOT_FOUND.  O(span)."""
        t = self.tubes.get(name)
        if t is None:
            return NOT_FOUND
        return listing.search_bodies(self, t, needle, after_id, span)


_new = tuple.__new__


def _figures(t: Any, now: float) -> TubeFigures:
    return readmodel.TubeFigures(t.name, t.urgent_count, t.ready_count, t.reserved_count,
                       t.delayed_count, len(t.buried), t.total_jobs, t.using_count,
                       t.watching_count, len(t.waiting), t.cmd_delete, t.cmd_pause, t.pause,
                       max(0, int(t.unpause_at - now)) if t.pause else 0)


__all__ = ["Inspection"]
