# -*- test-case-name: tests.test_wire -*-
"""The process facts ``stats`` reports (pid, hostname, CPU time), read from the OS."""
from __future__ import annotations

import os

TYPE_CHECKING = False  # typing costs stalkd's first reply (server/_early.py)
if TYPE_CHECKING:  # pragma: no cover
    from typing import Tuple

from ..core.facts import Facts


class ProcessFacts(Facts):
    """:class:`~twisted_stalk.core.facts.Facts` of this process."""

    def __init__(self, version: str, started_at: float) -> None:
        super().__init__(started_at)
        self.version = version
        self.instance_id = os.urandom(8).hex()
        uname = os.uname()
        self.hostname = uname.nodename
        self.os = uname.version
        self.platform = uname.machine

    def pid(self) -> int:
        return os.getpid()

    def rusage(self) -> Tuple[float, float]:
        import resource  # (here: an extension stalkd's first reply need not load)
        ru = resource.getrusage(resource.RUSAGE_SELF)
        return ru.ru_utime, ru.ru_stime
