# -*- test-case-name: tests.test_wire -*-
"""A speed trick, fenced: a leaner main loop for Twisted's epoll reactor.

Contract: :class:`LeanEPollReactor` behaves as Twisted's ``EPollReactor``
(timed calls, ``callFromThread``, shutdown, error logging: an exception from
``doRead`` is logged and disconnects that descriptor) and differs only in
how much work each turn of its loop does (and, when ``busy_poll`` is set, in
polling a little before it sleeps: :mod:`._busypoll`).  The wire tests run on it and on
Twisted's own reactor (``TWISTED_STALK_REACTOR=twisted``).

Why: Twisted's ``mainLoop`` runs ``runUntilCurrent`` and ``timeout`` (each
re-checking the thread-call queue, the new and pending timed calls and the
clock) and a context manager on every turn, and its ``doPoll`` wraps every
ready descriptor's event in ``log.callWithLogger`` (three nested context
calls that only set the prefix of legacy log messages).  On a server doing
one read per command that is a noticeable share of the CPU per command (see
docs/performance.md).  ``LeanEPollReactor.mainLoop`` checks those few
attributes inline, calls ``runUntilCurrent`` only when there is something
for it to do, and dispatches a plain read event directly; everything else
(writes, hang-ups, errors) goes to Twisted's own ``_doReadOrWrite``.

The loop reads private members of ``EPollReactor`` (:data:`_RELIES_ON`).
Where a Twisted release lacks any of them, :func:`install` installs
Twisted's own ``EPollReactor`` instead and :func:`upgrade` leaves the
running reactor alone, so the server keeps working, only slower.
"""
from __future__ import annotations

import os
import sys
from select import EPOLLIN
from typing import Any

from twisted.internet.epollreactor import EPollReactor
from twisted.logger import Logger
from twisted.python import log

from ._busypoll import spin

_log = Logger()

#: epoll_wait's timeout is a C int of milliseconds (as Twisted's ``timeout``).
_LONGEST_WAIT = 2147483

#: The members of Twisted's EPollReactor that the lean loop relies on.
_RELIES_ON = (
    "_poller", "_selectables", "_pendingTimedCalls", "_newTimedCalls", "threadCallQueue",
    "_justStopped", "_started", "running", "_doReadOrWrite", "_insertNewDelayedCalls",
    "_disconnectSelectable", "runUntilCurrent", "seconds",
)

#: ``TWISTED_STALK_REACTOR=twisted`` in the environment: always Twisted's own loop.
ENABLED = os.environ.get("TWISTED_STALK_REACTOR", "lean") != "twisted"


class LeanEPollReactor(EPollReactor):
    """``EPollReactor`` with a main loop that does only what each turn needs."""

    #: Seconds to poll without blocking before each wait (``--busy-poll``;
    #: see :mod:`._busypoll`); 0: off.  Read when the loop starts.
    busy_poll = 0.0

    def mainLoop(self) -> None:
        poll = self._poller.poll
        window = self.busy_poll
        selectables = self._selectables
        seconds = self.seconds
        slow = self._doReadOrWrite
        readable = EPOLLIN
        while self._started:
            try:
                pending = self._pendingTimedCalls
                timeout = pending[0].time - seconds() if pending else -1
                if (timeout <= 0 and pending) or self._newTimedCalls or self.threadCallQueue \
                        or self._justStopped:
                    self.runUntilCurrent()
                    # Calls scheduled by what just ran count for the wait below.
                    self._insertNewDelayedCalls()
                    pending = self._pendingTimedCalls
                    timeout = pending[0].time - seconds() if pending else -1
                    if timeout < 0 and pending:
                        timeout = 0.0
                if not self.running:
                    timeout = 0.0
                elif timeout > _LONGEST_WAIT:
                    timeout = _LONGEST_WAIT
                try:
                    if window and (timeout < 0 or timeout > window):
                        events = spin(poll, window, len(selectables)) or poll(
                            timeout if timeout < 0 else timeout - window, len(selectables))
                    else:
                        events = poll(timeout, len(selectables))
                except InterruptedError:
                    continue
                for fd, event in events:
                    try:
                        selectable = selectables[fd]
                    except KeyError:  # removed by an earlier event of this batch
                        continue
                    if event == readable:
                        try:
                            why = selectable.doRead()
                        except BaseException:
                            why = sys.exc_info()[1]
                            log.err()
                        if why:
                            self._disconnectSelectable(selectable, why, True)
                    else:
                        slow(selectable, fd, event)
            except BaseException:
                _log.failure("Unexpected error in main loop")
        _log.info("Main loop terminated.")


def compatible(reactor: Any) -> bool:
    """True when ``reactor`` is an EPollReactor with every member the lean loop reads."""
    return (ENABLED and isinstance(reactor, EPollReactor)
            and all(hasattr(reactor, name) for name in _RELIES_ON))


def install() -> EPollReactor:
    """Install :class:`LeanEPollReactor` as the global reactor (Twisted's own
    ``EPollReactor`` where the lean loop cannot run)."""
    from twisted.internet.main import installReactor

    reactor: EPollReactor = LeanEPollReactor()
    if not compatible(reactor):
        reactor = EPollReactor()
    installReactor(reactor)
    return reactor


def upgrade(reactor: Any) -> bool:
    """Give an already installed, not yet running ``EPollReactor`` the lean
    main loop (``twistd`` installs the reactor before any plugin code runs);
    True if it did.  The subclass adds no state, only the loop."""
    if type(reactor) is EPollReactor and not reactor.running and compatible(reactor):
        reactor.__class__ = LeanEPollReactor
        return True
    return False


def enable_busy_poll(reactor: Any, window: float) -> bool:
    """Give ``reactor`` a busy-poll window of ``window`` seconds (see
    :mod:`._busypoll`); True if its main loop will use it (only the lean loop
    does; Twisted's own reactor, or a test's ``Clock``, is left as it is)."""
    if not isinstance(reactor, LeanEPollReactor):
        return False
    reactor.busy_poll = window
    return bool(window)


__all__ = ["ENABLED", "LeanEPollReactor", "compatible", "enable_busy_poll", "install", "upgrade"]
