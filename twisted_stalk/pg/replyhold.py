# -*- test-case-name: tests.test_pg_units,tests.test_pg_wire -*-
"""A speed trick, fenced: a batch's replies go out after the next batch's statement.

Contract: every connection receives exactly the replies, in the same order,
that it would receive without the hold; a reply is held at most until the
end of the reactor turn in which it was written (the next batch leaves
then), and no reply is held while nothing waits for a statement, nor the
replies of a batch of fewer than ``batch.HOLD_AT`` commands (written at
once, they cost less than the hold would gain).  The wire
tests compare a node with the hold and one without it
(``TWISTED_STALK_REPLY_HOLD=0``), byte for byte.

Why: a node has one statement of each kind out at a time (batch.py), and
what arrives meanwhile waits for its answer.  When the answer comes, the
node used to send the answered batch's replies, one socket write per
connection, and only then, at the end of the turn, the statement of the
batch that waited: the database sat idle while the node wrote.  With the
hold, the replies written while a batch waits are kept, the waiting
batch's statement leaves at the end of the turn as before (carrying all it
carried before), and the kept replies follow it, joined into one write per
connection.  Measured in docs/performance.md ("A batch's replies after the
next batch's statement").

The front end already holds replies while its journal is ``pending`` (the
binlog's way of not acknowledging what is not yet on disk:
``server/output.py``), so the hold is the PostgreSQL engine's journal: a
:class:`~twisted_stalk.core.journal.NullJournal` that is pending while a
batcher holds (:meth:`ReplyHold.begin`, :meth:`ReplyHold.release`).
"""
from __future__ import annotations

import os
from typing import Callable, List

from ..core.journal import NullJournal

#: The switch: ``TWISTED_STALK_REPLY_HOLD=0`` in the environment turns the
#: trick off for every node in the process.
ENABLED = os.environ.get("TWISTED_STALK_REPLY_HOLD", "1") != "0"


class ReplyHold(NullJournal):
    """Replies are held between :meth:`begin` and the matching :meth:`release`
    (nested holds count: the replies go when the last one is released)."""

    def __init__(self) -> None:
        super().__init__()
        self._depth = 0
        #: The holding connections' callbacks that send what they hold, in
        #: the order their first held reply was written.
        self._waiting: List[Callable[[], None]] = []

    def begin(self) -> None:
        """Hold every reply written from now until :meth:`release`."""
        self._depth += 1
        self.pending = True

    def release(self) -> None:
        """Send what was held (when no other hold is open)."""
        self._depth -= 1
        if self._depth:
            return
        self.pending = False
        waiting, self._waiting = self._waiting, []
        for send in waiting:
            send()

    def when_settled(self, callback: Callable[[], None]) -> None:
        if self.pending:
            self._waiting.append(callback)
        else:
            callback()


__all__ = ["ENABLED", "ReplyHold"]
