# -*- test-case-name: tests.test_binlog -*-
"""The interface between the queue and a persistence layer (the binlog)."""
from __future__ import annotations

TYPE_CHECKING = False  # typing costs stalkd's first reply (server/_early.py)
if TYPE_CHECKING:  # pragma: no cover
    from typing import Any, Dict, List

if TYPE_CHECKING:  # pragma: no cover
    from typing import Protocol
else:  # interfaces, for the type checker and the reader
    Protocol = object

if TYPE_CHECKING:  # pragma: no cover
    from .job import JobRecord
    from .tube import MemoryTube


class JournalError(Exception):
    """A change could not be made durable; the command must not be acknowledged."""


# What a ``job_updated(job, op)`` call records.  The queue calls it before the
# job changes, so the journal derives the new state from ``op``:
#: release: ready, or delayed when ``job.delay`` (pri and delay already set).
UPDATE_RELEASE = 1
#: bury: buried (``job.pri`` already set).
UPDATE_BURY = 2
#: kick or kick-job: ready.
UPDATE_KICK = 3
#: the TTR ran out: ready.
UPDATE_TIMEOUT = 4
#: reserve-job took a delayed or buried job (ready again after a restart).
UPDATE_RESERVE = 5


def _define_health() -> None:
    """Define :class:`JournalHealth` and :data:`NO_JOURNAL`, on first use: a
    named tuple needs :mod:`typing`, whose import ``stalkd``'s first reply
    cannot afford (server/_early.py); nothing on that path reads them."""
    from typing import NamedTuple, Optional  # noqa: F401  (the annotations')

    class JournalHealth(NamedTuple):
        """What metrics and the console show of a journal (:meth:`Journal.health`)."""

        #: A directory is in use (False: changes live in memory only, or the
        #: engine's storage is durable by itself).
        enabled: bool
        directory: Optional[str] = None
        #: Why the journal cannot take writes now (None: it can).
        problem: Optional[str] = None
        #: How many files it keeps and their size on disk.
        files: int = 0
        bytes: int = 0

    JournalHealth.__qualname__ = "JournalHealth"
    JournalHealth.__module__ = __name__
    # (Two threads at once: the first class stays, and NO_JOURNAL is of it.)
    cls = globals().setdefault("JournalHealth", JournalHealth)
    #: The health of a journal that keeps nothing.
    globals().setdefault("NO_JOURNAL", cls(enabled=False))


def __getattr__(name: str) -> Any:
    """:class:`JournalHealth` and :data:`NO_JOURNAL`, defined on first use."""
    if name in ("JournalHealth", "NO_JOURNAL"):
        _define_health()
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class Journal(Protocol):
    """Receives every change that must survive a restart, before it is acknowledged.

    Each method may raise :class:`JournalError`; the queue then leaves its
    state unchanged and the server answers with an error reply.
    """

    def job_put(self, job: "JobRecord") -> None:
        """A new job exists (any state)."""

    def job_updated(self, job: "JobRecord", op: int) -> None:
        """A job is about to change state, priority or delay; ``op`` is one of
        the ``UPDATE_*`` constants (release, bury, kick, timeout, reserve-job)."""

    def job_deleted(self, job: "JobRecord") -> None:
        """A job is gone for good."""

    def stats(self) -> Dict[str, int]:
        """binlog-* figures for the stats command."""

    #: True while recorded changes are not yet safe to acknowledge; the server
    #: then holds replies until :meth:`when_settled` calls back.
    pending: bool

    def when_settled(self, callback) -> None:
        """Call ``callback`` once everything recorded so far is durable."""

    def health(self) -> JournalHealth:
        """Whether it is on, can write, and what it keeps on disk."""


class JournaledEngine(Protocol):
    """What a journal reads of the engine it records (the binlog): its jobs
    and tubes to compact and restore, and the clock.  The in-memory engine
    is one; an engine whose storage is durable by itself has no journal."""

    #: Live jobs by id.
    jobs: Dict[int, "JobRecord"]
    #: The next job id to give out (raised past every id a restore saw).
    next_id: int
    #: Tubes in ``list-tubes`` order.
    tube_list: List["MemoryTube"]
    #: Anything with ``seconds()``.
    clock: Any

    def tube(self, name: bytes) -> "MemoryTube":
        """The tube called ``name``, created if it does not exist."""

    def restore(self, job: "JobRecord", state: int, deadline_at: float = 0.0) -> None:
        """Put a recovered job back in place (no journaling)."""


class NullJournal:
    """No persistence: every change is in memory only."""

    pending = False  # (for subclasses that do not call __init__)

    def __init__(self) -> None:
        # An instance attribute: the wire front end reads it for every reply,
        # and CPython 3.11 specialises that read only for instance values.
        self.pending = False

    def job_put(self, job: "JobRecord") -> None:
        pass

    def job_updated(self, job: "JobRecord", op: int = 0) -> None:
        pass

    def job_deleted(self, job: "JobRecord") -> None:
        pass

    def stats(self) -> Dict[str, int]:
        return {"oldest": 0, "current": 0, "migrated": 0, "written": 0, "max_size": 10485760}

    def when_settled(self, callback) -> None:
        callback()

    def health(self) -> JournalHealth:
        return __getattr__("NO_JOURNAL")
