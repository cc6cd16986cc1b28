# -*- test-case-name: tests.test_engine -*-
"""What an engine command returns: outcomes as values.

A command that succeeds with data returns the data itself (a new job's id,
a :class:`~twisted_stalk.core.job.JobRecord`, a count, a tube name, stats pairs);
every other result is one of the :class:`Outcome` constants below, compared
with ``is``.  Each constant is named after the beanstalk reply word a wire
front end sends for it (``WAITING`` has none: the reply comes later, as a
wake-up), so the reply words stay written down once, in the command table
(tests/test_engine.py checks that every name is one of its reply words).

Which command returns what is listed on :class:`~twisted_stalk.core.engine.Engine`.
"""
from __future__ import annotations

TYPE_CHECKING = False  # typing costs stalkd's first reply (server/_early.py)
if TYPE_CHECKING:  # pragma: no cover
    from typing import Dict


class Outcome:
    """A result without data: one instance per kind, compared with ``is``."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        #: The beanstalk reply word for this outcome (``"NOT_FOUND"`` ...).
        self.name = name

    def __repr__(self) -> str:
        return self.name

    def __reduce__(self) -> str:
        return self.name  # pickles as the module constant of that name


DELETED = Outcome("DELETED")
RELEASED = Outcome("RELEASED")
BURIED = Outcome("BURIED")
TOUCHED = Outcome("TOUCHED")
KICKED = Outcome("KICKED")
PAUSED = Outcome("PAUSED")
NOT_FOUND = Outcome("NOT_FOUND")
NOT_IGNORED = Outcome("NOT_IGNORED")
#: A reserve found nothing within its timeout.
TIMED_OUT = Outcome("TIMED_OUT")
#: A reserve was issued (or is waiting) in the last second of a job's TTR.
DEADLINE_SOON = Outcome("DEADLINE_SOON")
#: A reserve is waiting; its result arrives later as a wake-up.
WAITING = Outcome("WAITING")
DRAINING = Outcome("DRAINING")
EXPECTED_CRLF = Outcome("EXPECTED_CRLF")
JOB_TOO_BIG = Outcome("JOB_TOO_BIG")
OUT_OF_MEMORY = Outcome("OUT_OF_MEMORY")
BAD_FORMAT = Outcome("BAD_FORMAT")
#: The journal (binlog) could not record the change; nothing changed.
INTERNAL_ERROR = Outcome("INTERNAL_ERROR")

#: Every outcome constant by name.
OUTCOMES: Dict[str, Outcome] = {
    o.name: o for o in (
        DELETED, RELEASED, BURIED, TOUCHED, KICKED, PAUSED, NOT_FOUND, NOT_IGNORED,
        TIMED_OUT, DEADLINE_SOON, WAITING, DRAINING, EXPECTED_CRLF, JOB_TOO_BIG,
        OUT_OF_MEMORY, BAD_FORMAT, INTERNAL_ERROR,
    )
}

__all__ = ["Outcome", "OUTCOMES"] + list(OUTCOMES)
