# -*- test-case-name: tests.test_core -*-
"""What ``stats`` reports about the process that serves the queue.

The core knows nothing of processes: the server supplies a
:class:`Facts` that reads them (``twisted_stalk.server.facts``).  This base
class reports fixed values, for tests and for embedding the engine.
"""
from __future__ import annotations

TYPE_CHECKING = False  # typing costs stalkd's first reply (server/_early.py)
if TYPE_CHECKING:  # pragma: no cover
    from typing import Tuple


class Facts:
    """Process figures for ``stats``: identity, pid, CPU time, start time."""

    version = "0"
    #: The server's random instance id (``id`` in stats), 16 hex digits.
    instance_id = "0" * 16
    hostname = ""
    os = ""
    platform = ""

    def __init__(self, started_at: float = 0.0) -> None:
        #: When the server started (the clock's seconds), for ``uptime``.
        self.started_at = started_at

    def pid(self) -> int:
        return 0

    def rusage(self) -> Tuple[float, float]:
        """User and system CPU seconds used so far."""
        return 0.0, 0.0
