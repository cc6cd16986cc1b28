"""A leaner epoll reactor for the server process.

Twisted's ``mainLoop`` runs ``runUntilCurrent`` and ``timeout`` (each
re-checking the thread-call queue, the new and pending timed calls and the
clock) and a context manager on every turn, and its ``doPoll`` wraps every
ready descriptor's event in ``log.callWithLogger`` (three nested context calls
that only set the prefix of legacy log messages).  On a server doing one read
per command that is a noticeable share of the CPU per command (see
docs/performance.md).  ``LeanEPollReactor.mainLoop`` checks those few
attributes inline, calls ``runUntilCurrent`` only when there is something for
it to do, and dispatches a plain read event directly; everything else
(writes, hang-ups, errors) goes to Twisted's own ``_doReadOrWrite``.  Timed
calls, ``callFromThread``, shutdown and error logging behave as in Twisted:
an exception from ``doRead`` is logged and disconnects that descriptor.
``doPoll`` (used by ``iterate()``) is Twisted's own.
"""
from __future__ import annotations

import sys
from select import EPOLLIN

from twisted.internet.epollreactor import EPollReactor
from twisted.logger import Logger
from twisted.python import log

_log = Logger()

#: epoll_wait's timeout is a C int of milliseconds (as Twisted's ``timeout``).
_LONGEST_WAIT = 2147483


class LeanEPollReactor(EPollReactor):
    """``EPollReactor`` with a main loop that does only what each turn needs."""

    def mainLoop(self) -> None:
        poll = self._poller.poll
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


def install() -> LeanEPollReactor:
    """Install :class:`LeanEPollReactor` as the global reactor."""
    from twisted.internet.main import installReactor

    reactor = LeanEPollReactor()
    installReactor(reactor)
    return reactor
