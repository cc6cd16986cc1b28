# -*- test-case-name: tests.test_ops_shutdown -*-
"""Graceful shutdown on SIGTERM / SIGINT.

:meth:`GracefulShutdown.start`:

1. stops accepting connections (the listening ports close at once, so new
   clients get "connection refused" rather than a silent backlog);
2. enters drain mode (``put`` answers ``DRAINING``, as after SIGUSR1) and
   tells the engine to hand out no further job (``Engine.hold``);
3. closes each connection as soon as it is quiet: a reserve waiting for a job
   is withdrawn and its connection closed cleanly (a FIN after any reply
   already due, never a reset); a connection in the middle of a command gets
   it answered first; a worker holding reserved jobs may still ``delete``,
   ``release``, ``bury`` or ``touch`` them until it holds none;
4. after ``grace`` seconds, aborts whatever is still open (a client that
   does not read its replies, a worker still busy) -- their reserved jobs go
   back to ready, as on any disconnect -- so shutdown time is bounded;
5. fires its Deferred; the caller then stops the reactor, which flushes,
   syncs and closes the binlog (its ``before shutdown`` trigger), and the
   process exits 0.

A second SIGTERM/SIGINT during the drain skips the rest of the grace period.
All timing uses the reactor's clock (``callLater``), so tests drive it with
``twisted.internet.task.Clock``.
"""
from __future__ import annotations

import signal
from typing import Any, Callable, List, Optional

from twisted.internet import defer
from twisted.logger import Logger

from ..wording import counted


log = Logger(namespace="twisted_stalk.shutdown")

#: Default seconds a graceful shutdown waits for busy connections.
DEFAULT_GRACE = 10.0
#: How often the drain looks for connections that became quiet.
POLL_SECONDS = 0.05


class GracefulShutdown:
    """Drains one server factory; see the module docstring."""

    def __init__(self, factory, clock, stop_listening: Callable[[], Any],
                 grace: float = DEFAULT_GRACE, poll: float = POLL_SECONDS) -> None:
        self.factory = factory
        self.clock = clock
        self.stop_listening = stop_listening
        self.grace = grace
        self.poll = poll
        self.started = False
        self.finished = False
        self.closed_cleanly = 0
        self.aborted = 0
        self._deadline = 0.0
        self._call = None
        self._waiters: List[defer.Deferred] = []

    # ----------------------------------------------------------------- public

    def start(self) -> defer.Deferred:
        """Begin the drain (idempotent); the Deferred fires when it is over."""
        d: defer.Deferred = defer.Deferred()
        if self.finished:
            d.callback(None)
            return d
        self._waiters.append(d)
        if self.started:
            return d
        self.started = True
        self._deadline = self.clock.seconds() + self.grace
        n = len(self.factory.connections)
        log.info("shutting down: no longer accepting connections; draining {open} "
                 "for at most {grace:g} s",
                 open=counted(n, "connection"), n=n, grace=self.grace)
        try:
            d_stop = defer.maybeDeferred(self.stop_listening)
            d_stop.addErrback(lambda f: log.failure("stopping the listening ports", f))
        except Exception:  # pragma: no cover - maybeDeferred catches
            log.failure("stopping the listening ports")
        engine = self.factory.engine
        engine.drain()
        engine.hold()
        self._step()
        return d

    def hurry(self) -> None:
        """Skip the rest of the grace period (a second signal)."""
        if self.started and not self.finished:
            log.info("second signal: closing the remaining connections now")
            self._deadline = self.clock.seconds()
            self._step()

    # -------------------------------------------------------------- internals

    def _step(self) -> None:
        self._call = None
        if self.finished:
            return
        now = self.clock.seconds()
        late = now >= self._deadline
        busy = 0
        for proto in list(self.factory.connections):
            if proto.closing:
                # Done once everything is written (a TLS connection may still
                # wait for the peer's close_notify, which the shutdown need not).
                if proto.unsent:
                    if late:
                        self._abort(proto)
                    busy += 1
                continue
            busy += 1
            if proto.withdraw_wait():
                # A waiting reserve: withdrawn; close cleanly.
                self._close(proto)
            elif proto.idle:
                self._close(proto)
            elif late:
                self._abort(proto)
        if not busy:
            self._finish()
        elif late:
            # Aborted transports report connectionLost on the next turn.
            self._call = self.clock.callLater(0, self._finish)
        else:
            self._call = self.clock.callLater(
                min(self.poll, max(0.0, self._deadline - now)), self._step)

    def _close(self, proto) -> None:
        self.closed_cleanly += 1
        proto.close()  # after any replies held for the binlog

    def _abort(self, proto) -> None:
        self.aborted += 1
        proto.abort()

    def _finish(self) -> None:
        if self.finished:
            return
        if self._call is not None and self._call.active():
            self._call.cancel()
        self._call = None
        self.finished = True
        log.info("shutdown: {closed} closed cleanly, {aborted} aborted at the end of the "
                 "grace period", closed=counted(self.closed_cleanly, "connection"),
                 clean=self.closed_cleanly, aborted=self.aborted)
        waiters, self._waiters = self._waiters, []
        for d in waiters:
            d.callback(None)


def install_signal_handlers(reactor, shutdown: GracefulShutdown,
                            stop: Optional[Callable[[], None]] = None,
                            asked: Optional[Callable[[], int]] = None) -> None:
    """SIGTERM and SIGINT start ``shutdown``, then stop the reactor; a second
    signal hurries it.  Call once the reactor runs (``callWhenRunning``), so
    these replace Twisted's own handlers, which would stop at once.
    If ``asked()`` gives a signal (not 0), it came before these were in
    (boot.py's ``EarlySignals``): the shutdown starts now, as for that signal."""
    stop = stop or reactor.stop

    def stop_reactor(_=None) -> None:
        try:
            stop()
        except Exception:  # ReactorNotRunning: already stopping
            pass

    def on_signal(signum, frame) -> None:
        if shutdown.started:
            reactor.callFromThread(shutdown.hurry)
        else:
            log.info("{name}: graceful shutdown", name=signal.Signals(signum).name)
            reactor.callFromThread(lambda: shutdown.start().addBoth(stop_reactor))

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    early = asked() if asked is not None else 0
    if early:
        on_signal(early, None)


__all__ = ["DEFAULT_GRACE", "GracefulShutdown", "install_signal_handlers"]
