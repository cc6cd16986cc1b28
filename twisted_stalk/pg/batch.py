# -*- test-case-name: tests.test_pg_wire -*-
"""Puts and deletes of one reactor turn share one statement, and so one commit.

Each command that changes jobs is a transaction, and a transaction costs a
commit (a WAL flush, on the standby too when it is synchronous): the commit
rate, not the work, bounds a node.  Puts and deletes are the commands that
come in crowds and never wait on each other's rows (a put makes new rows; a
delete of a reserved job is its holder's alone), so the ones issued during
one reactor turn go to the database as one statement over arrays
(``put_many``, ``delete_many``): one commit for all of them.  Each client
still gets its own answer, and only once the shared statement has
committed.  A batch that fails fails each of its commands (INTERNAL_ERROR),
as a single statement would.

Under load the batches grow by themselves (group commit): while a batch's
statement is out, the items that arrive wait for it to answer and then go
out together, at the end of that reactor turn (and the replies of the
batch that answered, if it had ``HOLD_AT`` commands or more, follow that
statement: replyhold.py).  So a node has one statement of each kind out
(more only when a batch fills up), and each carries what the clients asked
for meanwhile: nothing is asked of the database before a client asks
(reserves stay demand-driven), and nothing waits when the database is idle.
"""
from __future__ import annotations

from typing import Any, Callable, List, Optional

from twisted.internet import defer
from twisted.logger import Logger

log = Logger(namespace="twisted_stalk.pg")

#: Commands in one statement at most.
LIMIT = 256

#: Replies of an answered batch worth holding until the next batch left
#: (replyhold.py): fewer are written sooner than the hold would gain.
HOLD_AT = 4


class Batcher:
    """Collects items during a reactor turn and runs them together.

    Each item comes with its ``answer`` callback, called once with that
    item's result: a plain call, not a Deferred per item (core/later.py)."""

    def __init__(self, reactor: Any, run: Callable[[List[Any]], defer.Deferred],
                 failed: Callable[[Any], Any], limit: int = LIMIT,
                 after: Optional[Callable[[], None]] = None, hold: Any = None) -> None:
        self.reactor = reactor
        #: A :class:`~.replyhold.ReplyHold`: when a batch of ``HOLD_AT`` or
        #: more answers while items wait, the replies of that turn go after
        #: the statement that carries those items.
        self.hold = hold
        self._holding = False
        #: ``run(items)`` fires with one result per item, in order.
        self.run = run
        #: ``failed(failure)``: what every item of a failed batch is answered.
        self.failed = failed
        #: Called once every item has been answered (their replies are out).
        self.after = after
        self.limit = limit
        #: Batches out (one, or more when full batches went out meanwhile).
        self._out = 0
        self._items: List[Any] = []
        self._answers: List[Callable[[Any], None]] = []
        self._call: Any = None

    def add(self, item: Any, answer: Callable[[Any], None]) -> None:
        """Run ``item`` with the next batch; ``answer(result)`` once it has run."""
        self._items.append(item)
        self._answers.append(answer)
        if len(self._items) >= self.limit:
            self._flush()
        else:
            self._schedule()

    def _schedule(self) -> None:
        """Flush at the end of this turn, unless a batch is out (then when it answers)."""
        if self._call is None and not self._out:
            self._call = self.reactor.callLater(0, self._flush)

    def _answered(self) -> None:
        """A batch answered: what came meanwhile goes out at the end of this turn."""
        self._out -= 1
        if self._items:
            self._schedule()

    def _flush(self) -> None:
        if self._call is not None and self._call.active():
            self._call.cancel()
        self._call = None
        items, self._items = self._items, []
        answers, self._answers = self._answers, []
        if not items:
            return
        self._out += 1

        def done(results: List[Any]) -> None:
            self._answered()
            if (self._call is not None and self.hold is not None and not self._holding
                    and len(answers) >= HOLD_AT):
                # Items wait and leave at the end of this turn: the replies after them.
                self.hold.begin()
                self._holding = True
            _answer_each(answers, results)
            if self.after is not None:
                try:
                    self.after()
                except Exception:
                    log.failure("after a batch's answers")

        def failed(failure: Any) -> None:
            self._answered()
            result = self.failed(failure)
            _answer_each(answers, [result] * len(answers))
        # An exception while building the statement fails the batch (and so
        # leaves no batch counted as out for ever).
        defer.maybeDeferred(self.run, items).addCallbacks(done, failed)
        if self._holding:
            self._holding = False
            self.hold.release()


def _answer_each(answers: List[Callable[[Any], None]], results: List[Any]) -> None:
    """Each item's answer; one that raises is logged and the others still
    get theirs (and the batch is not failed after its answers went out)."""
    for answer, result in zip(answers, results):
        try:
            answer(result)
        except Exception:
            log.failure("answering a batched command")


def text_array(values: List[bytes]) -> bytes:
    """A text[] literal of tube names (no quote, backslash, brace or comma in them)."""
    return b"{" + b",".join(b'"' + v + b'"' for v in values) + b"}"


def int_array(values: List[int]) -> bytes:
    return b"{" + b",".join(b"%d" % v for v in values) + b"}"


def bytea_array(values: List[bytes]) -> bytes:
    """A bytea[] literal: each value in hex (``\\x...``), quoted."""
    return b"{" + b",".join(b'"\\\\x' + v.hex().encode() + b'"' for v in values) + b"}"


__all__ = ["Batcher", "LIMIT", "bytea_array", "int_array", "text_array"]
