# -*- test-case-name: tests.test_pg_units,tests.test_pg_wire -*-
"""A speed trick, fenced: the put and delete batches of one turn share one commit.

Contract: each client gets the reply it would get without the trick, and
only once its statement has committed; statements of one reactor turn's
batches (deletes first, then puts: batch.py) go to the database as one
transaction, one Sync after them (:meth:`.Connections.send_gathered`), so
they cost one commit instead of one each.  A batch whose partner is out (its
statement not answered yet) goes alone, as before: nothing waits for a
partner.  If the shared transaction fails, nothing of it committed and each
statement runs again on its own (so a put is never failed by a delete's
error); if its connection is lost, each fails as a lone statement would
(it may have committed: ``INTERNAL_ERROR``).  The wire tests compare a node
with the trick and one without it (``TWISTED_STALK_TOGETHER=0``), byte for
byte.

Why: a closed loop of clients (put, reserve, delete) keeps a put batch and a
delete batch out at once, each its own transaction, and each commit costs
the database a WAL flush and the statement's set-up whatever the batch's
size; a producer's put and a worker's delete of wake-20 likewise.  Once two
batches answer in the same turn (they committed together), what waited for
each leaves together again at the end of that turn.  Measured in
docs/performance.md ("A turn's puts and deletes in one transaction").

The deletes go first: a delete's statement may take jobs for workers about
to reserve (taking.py), and a put answered after it that makes a better job
ready then invalidates that take, as a put on another statement would.
"""
from __future__ import annotations

import os
from typing import Any, List

#: The switch: ``TWISTED_STALK_TOGETHER=0`` in the environment turns the
#: trick off for every node in the process.
ENABLED = os.environ.get("TWISTED_STALK_TOGETHER", "1") != "0"


class Together:
    """Batchers (:class:`~.batch.Batcher`, in statement order) whose
    end-of-turn flushes share one transaction of ``db``
    (:class:`~.connections.Connections`)."""

    def __init__(self, db: Any, batchers: List[Any], hold: Any = None) -> None:
        self.db = db
        self.batchers = batchers
        #: The engine's :class:`~.replyhold.ReplyHold`, if any: replies
        #: written while the batches flush follow their statements.
        self.hold = hold
        for batcher in batchers:
            batcher.together = self

    def flush(self, origin: Any) -> None:
        """``origin``'s turn ended: flush it with every batcher of the set
        whose items also wait for this turn's end."""
        due = [b for b in self.batchers if b is origin or b.due]
        if len(due) < 2:
            origin.flush()
            return
        hold = self.hold
        if hold is not None:
            hold.begin()
        self.db.gather()
        try:
            for batcher in due:
                batcher.flush()
        finally:
            self.db.send_gathered()
            if hold is not None:
                hold.release()


__all__ = ["ENABLED", "Together"]
