# -*- test-case-name: tests.test_core -*-
"""The engine, free of I/O: tubes, jobs, their state machine, counters, deadlines.

:class:`~twisted_stalk.core.engine.Engine` is the seam every front end uses;
:class:`~twisted_stalk.core.memory.MemoryEngine` implements it in memory.
"""
from .engine import Engine
from .facts import Facts
from .job import BURIED, DELAYED, READY, RESERVED, JobRecord
from .journal import Journal, JournalError, NullJournal
from .memory import MemoryEngine
from .outcomes import DEADLINE_SOON, NOT_FOUND, TIMED_OUT, WAITING, Outcome
from .session import Session, FrontEnd
from .tube import MemoryTube

__all__ = [
    "BURIED", "DELAYED", "READY", "RESERVED", "JobRecord", "Journal", "JournalError",
    "NullJournal", "DEADLINE_SOON", "NOT_FOUND", "TIMED_OUT", "WAITING", "Outcome",
    "Engine", "Facts", "MemoryEngine", "Session", "FrontEnd", "MemoryTube",
]
