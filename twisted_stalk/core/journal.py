"""The interface between the queue and a persistence layer (the binlog)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Dict

try:
    from typing import Protocol
except ImportError:  # pragma: no cover
    Protocol = object  # type: ignore

if TYPE_CHECKING:  # pragma: no cover
    from .job import Job


class JournalError(Exception):
    """A change could not be made durable; the command must not be acknowledged."""


class Journal(Protocol):
    """Receives every change that must survive a restart, before it is acknowledged.

    Each method may raise :class:`JournalError`; the queue then leaves its
    state unchanged and the server answers with an error reply.
    """

    def job_put(self, job: "Job") -> None:
        """A new job exists (any state)."""

    def job_updated(self, job: "Job") -> None:
        """A job changed state, priority or delay (release, bury, kick, timeout)."""

    def job_deleted(self, job: "Job") -> None:
        """A job is gone for good."""

    def stats(self) -> Dict[str, int]:
        """binlog-* figures for the stats command."""


class NullJournal:
    """No persistence: every change is in memory only."""

    def job_put(self, job: "Job") -> None:
        pass

    def job_updated(self, job: "Job") -> None:
        pass

    def job_deleted(self, job: "Job") -> None:
        pass

    def stats(self) -> Dict[str, int]:
        return {"oldest": 0, "current": 0, "migrated": 0, "written": 0, "max_size": 10485760}
