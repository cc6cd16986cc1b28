# -*- test-case-name: tests.test_core -*-
"""A job and its states."""
from __future__ import annotations

TYPE_CHECKING = False  # typing costs stalkd's first reply (server/_early.py)
if TYPE_CHECKING:  # pragma: no cover
    from typing import Dict, List, Optional

from ..protocol.constants import JOB_STATES

if TYPE_CHECKING:  # pragma: no cover
    from .tube import MemoryTube

# State codes: stored in the binlog, so they never change.
READY = 0
RESERVED = 1
DELAYED = 2
BURIED = 3
#: A job that has been deleted (kept only while a reply still refers to it).
INVALID = 4

#: The name of each state code (``stats-job``'s ``state``).
STATE_NAMES = (b"ready", b"reserved", b"delayed", b"buried", b"invalid")
#: The code of each state name of :data:`~twisted_stalk.protocol.constants.JOB_STATES`.
STATE_BY_NAME: Dict[str, int] = {name: STATE_NAMES.index(name.encode()) for name in JOB_STATES}

# Indexes into JobRecord.counts.
RESERVES, TIMEOUTS, RELEASES, BURIES, KICKS = range(5)


class JobRecord:
    """One job: its body, scheduling fields and counters.

    ``body`` holds the data *with* its trailing CRLF, exactly as it goes back
    on the wire, so replies need no concatenation with ``b"\\r\\n"``.
    """

    # Twelve slots: with the GC header the object is 128 bytes, one
    # allocator size class below what a thirteenth slot costs.  The session
    # holding a reservation is kept in the TTR heap entry, not here.
    __slots__ = (
        "id", "pri", "delay", "ttr", "body", "tube", "state", "created_at",
        "deadline_at", "counts", "heap_key", "binlog_file",
    )

    def __init__(self, id: int, pri: int, delay: int, ttr: int, body: bytes,
                 tube: "MemoryTube", created_at: float) -> None:
        self.id = id
        self.pri = pri
        self.delay = delay
        self.ttr = ttr
        self.body = body
        self.tube = tube
        self.state = READY
        self.created_at = created_at
        #: When a delayed job becomes ready or a reserved job times out.
        self.deadline_at = 0.0
        #: [reserves, timeouts, releases, buries, kicks], created on first use
        #: so a stored job that was never touched costs no list.
        self.counts: Optional[List[int]] = None
        #: The priority of the tube's ready bucket that still holds an entry
        #: for this job (None: no entry), so the job is never pushed twice.
        self.heap_key: Optional[int] = None
        #: Binlog file sequence number holding this job's put record (0: none).
        self.binlog_file = 0

    def count(self, which: int) -> None:
        counts = self.counts
        if counts is None:
            counts = self.counts = [0, 0, 0, 0, 0]
        counts[which] += 1

    def counter(self, which: int) -> int:
        return 0 if self.counts is None else self.counts[which]

    @property
    def size(self) -> int:
        """Body length in bytes, without the CRLF."""
        return len(self.body) - 2

    @property
    def state_name(self) -> str:
        return STATE_NAMES[self.state].decode()

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return f"<JobRecord {self.id} {self.state_name} pri={self.pri} tube={self.tube.name!r}>"
