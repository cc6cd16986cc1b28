"""A leaner epoll reactor for the server process.

Twisted's ``EPollReactor.doPoll`` wraps every ready descriptor's event in
``log.callWithLogger`` (three nested context calls that only set the prefix of
legacy log messages) and re-checks ``fileno()``.  On a server doing one read
per command, that wrapping is about a tenth of the CPU per command (measured
with cProfile on the mixed-50c benchmark; see docs/performance.md).  This
subclass handles the common case, a plain read event, directly, and hands
everything else (writes, hang-ups, errors) to Twisted's own
``_doReadOrWrite``; error handling is unchanged: an exception from
``doRead`` is logged and disconnects that descriptor.
"""
from __future__ import annotations

import errno
import sys
from select import EPOLLIN

from twisted.internet.epollreactor import EPollReactor
from twisted.python import log


class LeanEPollReactor(EPollReactor):
    """``EPollReactor`` without per-event log-context wrapping."""

    def doPoll(self, timeout):
        if timeout is None:
            timeout = -1
        try:
            events = self._poller.poll(timeout, len(self._selectables))
        except OSError as err:
            if err.errno == errno.EINTR:
                return
            raise
        selectables = self._selectables
        slow = self._doReadOrWrite
        for fd, event in events:
            selectable = selectables.get(fd)
            if selectable is None:
                continue
            if event == EPOLLIN:
                try:
                    why = selectable.doRead()
                except BaseException:
                    why = sys.exc_info()[1]
                    log.err()
                if why:
                    self._disconnectSelectable(selectable, why, True)
            else:
                slow(selectable, fd, event)

    doIteration = doPoll


def install() -> LeanEPollReactor:
    """Install :class:`LeanEPollReactor` as the global reactor."""
    from twisted.internet.main import installReactor

    reactor = LeanEPollReactor()
    installReactor(reactor)
    return reactor
