# -*- test-case-name: tests.test_pg_wire -*-
"""A few pipelined connections per node, reconnected when lost.

:class:`Connections` sends each statement on the least busy connection that is up.
While none is up (the database restarts, a failover is under way) statements
wait, up to ``wait`` seconds, for one to come back; then they fail with
:class:`~.driver.PgConnectionLost`, which the engine answers as
``INTERNAL_ERROR``.  A statement that was sent and whose connection was lost
before it answered also fails: it may or may not have committed, so its
client is told ``INTERNAL_ERROR`` (nothing is acknowledged that is not
committed).  Deadlocks and serialization failures (which roll the statement
back) are retried.

Lost connections are reopened with a growing pause (0.05 s doubling to 1 s);
with a multi-host connection string libpq tries each host in turn, so the
connections follow a failover to whichever server accepts writes.
"""
from __future__ import annotations

from collections import deque
from typing import Any, Callable, Deque, Dict, List, Optional, Sequence, Tuple

from twisted.internet import defer
from twisted.logger import Logger

from .driver import PgConnectionLost, PgConnection, PgError

log = Logger(namespace="twisted_stalk.pg")

#: SQLSTATEs of failures that rolled the statement back and may be retried.
RETRYABLE = {"40P01", "40001"}
_RETRIES = 5

_Waiting = Tuple[defer.Deferred, str, Sequence[Any], Optional[Sequence[int]], float]


class Connections:
    """``size`` connections to one database; see the module docstring."""

    def __init__(self, reactor: Any, conninfo: str, statements: Dict[str, str],
                 size: int = 4, wait: float = 10.0,
                 on_up: Optional[Callable[[], None]] = None,
                 settings: Optional[Dict[str, str]] = None) -> None:
        self.reactor = reactor
        self.conninfo = conninfo
        self.statements = statements
        #: Session settings of each connection (:class:`~.driver.PgConnection`).
        self.settings = settings
        self.size = size
        self.wait = wait
        #: Called when a connection comes up after none was.
        self.on_up = on_up
        self.up: List[PgConnection] = []
        self._waiting: Deque[_Waiting] = deque()
        self._expiry = None
        self._backoff: Dict[int, float] = {}
        self._stopped = False
        self.connects = 0
        self.losses = 0
        #: Statements that must commit before any later one is sent, and the
        #: statements held until they have (see :meth:`first`).
        self._barriers = 0
        self._held: Deque[Tuple[defer.Deferred, str, Sequence[Any], Optional[Sequence[int]]]] = deque()

    # ------------------------------------------------------------ life cycle

    def start(self) -> defer.Deferred:
        """Open the connections; fires once the first is up (fails if none can be)."""
        first: defer.Deferred = defer.Deferred()
        attempts = [self._open(i) for i in range(self.size)]

        def one_up(_: Any) -> None:
            if not first.called:
                first.callback(self)

        def all_failed(results: List[Tuple[bool, Any]]) -> None:
            if not first.called:
                failure = next(r for ok, r in results if not ok)
                first.errback(failure)

        for d in attempts:
            d.addCallback(one_up)
        defer.DeferredList(attempts, consumeErrors=True).addCallback(all_failed)
        return first

    def _open(self, slot: int) -> defer.Deferred:
        conn = PgConnection(self.reactor, self.conninfo, self.statements,
                            on_lost=lambda c: self._lost(slot, c), settings=self.settings)
        d = conn.connect()

        def up(_: Any) -> PgConnection:
            self._backoff.pop(slot, None)
            was_down = not self.up
            self.up.append(conn)
            self.connects += 1
            self._send_waiting()
            if was_down and self.on_up is not None and self.connects > 1:
                self.on_up()
            return conn

        def failed(failure: Any) -> Any:
            self._retry(slot, failure.getErrorMessage())
            return failure

        return d.addCallbacks(up, failed)

    def _lost(self, slot: int, conn: PgConnection) -> None:
        if conn in self.up:
            self.up.remove(conn)
        self.losses += 1
        log.warn("database connection lost; reconnecting")
        self._retry(slot, "lost")

    def _retry(self, slot: int, why: str) -> None:
        if self._stopped:
            return
        pause = self._backoff.get(slot, 0.025) * 2
        self._backoff[slot] = min(pause, 1.0)
        self.reactor.callLater(self._backoff[slot], self._reopen, slot)

    def _reopen(self, slot: int) -> None:
        if not self._stopped:
            self._open(slot).addErrback(lambda f: None)

    def stop(self) -> None:
        self._stopped = True
        for conn in list(self.up):
            conn.close()
        self.up = []
        waiting, self._waiting = self._waiting, deque()
        for d, *_ in waiting:
            d.errback(PgConnectionLost("stopped"))

    # ------------------------------------------------------------ statements

    def first(self, name: str, params: Sequence[Any] = ()) -> defer.Deferred:
        """Run a statement that every statement sent after it must follow (a
        closed client's give-back: the next command of anyone sees its jobs
        back): later statements are held until it has answered."""
        self._barriers += 1
        d = self._send(name, params, None)

        def done(result: Any) -> Any:
            self._barriers -= 1
            if not self._barriers:
                held, self._held = self._held, deque()
                for waiting, n, p, f in held:
                    self.execute(n, p, f).chainDeferred(waiting)
            return result
        return d.addBoth(done)

    def execute(self, name: str, params: Sequence[Any] = (),
                formats: Optional[Sequence[int]] = None) -> defer.Deferred:
        """Run a prepared statement on a connection that is up (or wait for one)."""
        if self._barriers:
            d: defer.Deferred = defer.Deferred()
            self._held.append((d, name, params, formats))
            return d
        return self._send(name, params, formats)

    def _send(self, name: str, params: Sequence[Any],
              formats: Optional[Sequence[int]]) -> defer.Deferred:
        up = self.up
        if up:
            conn = up[0]
            if len(up) > 1:
                for other in up:
                    if other.load < conn.load:
                        conn = other
            return self._run(conn, name, params, formats, 0)
        if self._stopped:
            return defer.fail(PgConnectionLost("stopped"))
        d = defer.Deferred()
        self._waiting.append((d, name, params, formats, self.reactor.seconds() + self.wait))
        if self._expiry is None:
            self._expiry = self.reactor.callLater(self.wait, self._expire)
        return d

    def _run(self, conn: PgConnection, name: str, params: Sequence[Any],
             formats: Optional[Sequence[int]], tries: int) -> defer.Deferred:
        d = conn.execute(name, params, formats)
        if tries < _RETRIES:
            def again(failure: Any) -> Any:
                error = failure.value
                if isinstance(error, PgError) and error.sqlstate in RETRYABLE:
                    return self._retry_statement(name, params, formats, tries + 1)
                return failure
            d.addErrback(again)
        return d

    def _retry_statement(self, name: str, params: Sequence[Any],
                         formats: Optional[Sequence[int]], tries: int) -> defer.Deferred:
        if not self.up:
            return self._send(name, params, formats)
        return self._run(self.up[0], name, params, formats, tries)

    def _send_waiting(self) -> None:
        waiting, self._waiting = self._waiting, deque()
        for d, name, params, formats, _ in waiting:
            self._send(name, params, formats).chainDeferred(d)

    def _expire(self) -> None:
        self._expiry = None
        now = self.reactor.seconds()
        waiting = self._waiting
        while waiting and waiting[0][4] <= now:
            d = waiting.popleft()[0]
            d.errback(PgConnectionLost("the database is unreachable"))
        if waiting:
            self._expiry = self.reactor.callLater(max(0.0, waiting[0][4] - now), self._expire)


__all__ = ["Connections", "RETRYABLE"]
