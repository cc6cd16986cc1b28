"""The work queue, free of I/O: tubes, jobs, state machine, counters, deadlines."""
from .job import BURIED, DELAYED, READY, RESERVED, Job
from .journal import Journal, JournalError, NullJournal
from .facts import Facts
from .queue import DEADLINE_SOON, TIMED_OUT, WorkQueue
from .session import Session, SessionListener
from .tube import Tube

__all__ = [
    "BURIED", "DELAYED", "READY", "RESERVED", "Job", "Journal", "JournalError",
    "NullJournal", "DEADLINE_SOON", "TIMED_OUT", "Facts", "WorkQueue",
    "Session", "SessionListener", "Tube",
]
