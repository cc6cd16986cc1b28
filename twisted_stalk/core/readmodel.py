# -*- test-case-name: tests.test_engine_contract,tests.test_ops_metrics -*-
"""What front ends read without being a client, as values.

Metrics, the console and ``stats-tube`` read an engine through these
values, never through its records: :class:`TubeFigures` (one tube's
numbers), :class:`MemoryUse` (stored bytes and ``--max-memory``) and
:class:`~.journal.JournalHealth` (the journal's state).  An engine builds
them from whatever it keeps (the in-memory engine from its tubes; the
PostgreSQL engine from its node's records and the other nodes' figures), so
no front end depends on an engine's layout.
"""
from __future__ import annotations

TYPE_CHECKING = False  # typing costs stalkd's first reply (server/_early.py)
if TYPE_CHECKING:  # pragma: no cover
    from typing import Any

    from ..protocol.yaml import StatPairs

#: The ``stats-tube`` keys, in beanstalkd's order: one per field of
#: :class:`TubeFigures`, in the same order.
TUBE_STAT_KEYS = (
    "name", "current-jobs-urgent", "current-jobs-ready", "current-jobs-reserved",
    "current-jobs-delayed", "current-jobs-buried", "total-jobs", "current-using",
    "current-watching", "current-waiting", "cmd-delete", "cmd-pause-tube", "pause",
    "pause-time-left",
)


def _define() -> None:
    """Define :class:`TubeFigures` and :class:`MemoryUse`, on first use: a
    named tuple needs :mod:`typing`, whose import ``stalkd``'s first reply
    cannot afford (server/_early.py), and the first reply reads neither."""
    from typing import NamedTuple, Optional  # noqa: F401  (the annotations')

    class TubeFigures(NamedTuple):
        """One tube's figures at one moment, in ``stats-tube`` order.

        A named tuple rather than a frozen dataclass: equally immutable, and five
        times cheaper to build, which a metrics scrape at 10,000 tubes notices.
        """

        name: bytes
        urgent: int
        ready: int
        reserved: int
        delayed: int
        buried: int
        #: Jobs ever put in the tube.
        total_jobs: int
        using: int
        watching: int
        #: Sessions waiting in a reserve on the tube.
        waiting: int
        #: ``cmd-delete`` and ``cmd-pause-tube``.
        deletes: int
        pauses: int
        #: The current pause's length, and the whole seconds left of it (0: none).
        pause: int
        pause_left: int

        @property
        def jobs(self) -> int:
            """Jobs the tube holds, in any state."""
            return self.ready + self.reserved + self.delayed + self.buried

        def stat_pairs(self) -> StatPairs:
            """The ``stats-tube`` pairs, in beanstalkd's order."""
            return list(zip(TUBE_STAT_KEYS, self))  # type: ignore[return-value]


    class MemoryUse(NamedTuple):
        """Stored job bodies against the ``--max-memory`` ceiling."""

        #: Bytes of stored bodies, each with its CRLF (None: this engine does
        #: not hold the bodies, a database does).
        used: Optional[int]
        #: The ceiling a put may not pass (0: none, or not applied by this engine).
        limit: int

    for cls in (TubeFigures, MemoryUse):
        cls.__qualname__ = cls.__name__
        cls.__module__ = __name__
        globals().setdefault(cls.__name__, cls)  # (two threads at once: the first stays)


def __getattr__(name: str) -> Any:
    """:class:`TubeFigures` and :class:`MemoryUse`, defined on first use."""
    if name in ("TubeFigures", "MemoryUse"):
        _define()
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["MemoryUse", "TUBE_STAT_KEYS", "TubeFigures"]
