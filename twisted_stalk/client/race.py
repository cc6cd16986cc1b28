# -*- test-case-name: tests.test_client_pool -*-
"""One pool reserve waiting on every server at once.

When no server had a job for ``reserve-with-timeout 0``,
:class:`~twisted_stalk.client.BeanstalkPool` waits on every usable server at
once, one reserve connection each.  The first job handed out wins; the other
waits are cancelled, which closes their connections, so a server that was
handing out a job on one of them in the same instant puts it back (priority
unchanged, no delay, no ``release`` counted).  A server that comes back while
the race runs is added to it; one whose reserve failed otherwise is asked
again after a second.
"""
from __future__ import annotations

import math
from typing import Any, Dict, Optional, Sequence, Tuple
from typing import Protocol as _Interface

from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from .errors import ResponseTimeout, TimedOut
from .job import Job
from .members import PoolServer


class RaceHost(_Interface):
    """What a :class:`Race` reports to (its pool)."""

    clock: IReactorTime
    reserve_grace: float
    log: Logger

    def suspect(self, server: PoolServer, reason: str) -> None:
        """``server`` stopped answering: drop its main connection."""

    def give_back(self, server: PoolServer, job: Job) -> None:
        """``job`` came for a race already over: make the server put it back."""

    def race_over(self, race: "Race") -> None:
        """``race`` is over (won, timed out, cancelled or aborted)."""


class Race:
    """One pool reserve waiting on every usable server at once."""

    def __init__(self, pool: RaceHost, servers: Sequence[PoolServer],
                 deadline: Optional[float], tubes: Tuple[bytes, ...]) -> None:
        self.pool = pool
        self.servers = servers
        self.deadline = deadline
        self.tubes = tubes
        self.pending: Dict[PoolServer, Deferred] = {}
        #: Servers to wait on again after a failure other than a closed connection.
        self.retries: Dict[PoolServer, Any] = {}
        self.done = False
        self.result: Deferred = Deferred(self._cancelled)
        self.timer: Any = None

    def start(self) -> "Deferred[Job]":
        for member in self.servers:
            if member.state == "up":
                self.add(member)
        if self.deadline is not None:
            self._arm(self.deadline + self.pool.reserve_grace)
        self._check()
        return self.result

    def _arm(self, at: float) -> None:
        """Time out at ``at`` (clock time)."""
        if self.done:
            return
        timer, clock = self.timer, self.pool.clock
        if timer is not None and timer.active():
            timer.cancel()
        self.timer = clock.callLater(max(0.0, at - clock.seconds()), self._finish, None)

    def add(self, member: PoolServer) -> None:
        """Wait on ``member`` too (it is up, or just came back)."""
        retry = self.retries.pop(member, None)
        if retry is not None and retry.active():
            retry.cancel()
        if self.done or member in self.pending or member.state != "up":
            return
        left: Optional[int] = None
        if self.deadline is not None:
            # Rounded up, as the client does: never a shorter wait than asked.
            left = math.ceil(self.deadline - self.pool.clock.seconds())
            if left < 1:
                return
        d = member.client.reserve(left, self.tubes)
        self.pending[member] = d
        if self.deadline is not None:  # (if nothing was pending, the timer was at the deadline)
            self._arm(self.deadline + self.pool.reserve_grace)
        d.addBoth(self._answered, member)

    def _answered(self, result: Any, member: PoolServer) -> None:
        if self.pending.get(member) is not None:
            del self.pending[member]
        if isinstance(result, Job):
            member.reserved += 1
            if self.done:
                self.pool.give_back(member, result)
            else:
                self._finish(result)
            return
        if isinstance(result, Failure) and not result.check(CancelledError, TimedOut):
            pool = self.pool
            if result.check(ResponseTimeout):
                pool.suspect(member, f"no answer to a reserve: {result.value}")
            pool.log.debug("reserve on {server} failed: {error}", server=member.name,
                           error=result.getErrorMessage())
            if not self.done:  # (a server that went down is added back when it is up)
                self.retries[member] = pool.clock.callLater(1.0, self.add, member)
        self._check()

    def _check(self) -> None:
        """Nothing pending: time out when the deadline has passed (else wait
        for the timer, or for servers to come back)."""
        if self.done or self.pending or self.deadline is None:
            return
        if self.pool.clock.seconds() >= self.deadline - 1.0:
            self._finish(None)
        else:
            self._arm(self.deadline)

    def _finish(self, job: Optional[Job]) -> None:
        if self.done:
            return
        self.done = True
        self._stop()
        if job is None:
            self.result.errback(TimedOut("reserve", b"TIMED_OUT (no server had a job in time)"))
        else:
            self.result.callback(job)

    def abort(self, error: Exception) -> None:
        """End the race now with ``error`` (its pool is closing)."""
        if not self.done:
            self.done = True
            self._stop()
            self.result.errback(error)

    def _stop(self) -> None:
        self.pool.race_over(self)
        timers = [self.timer] + list(self.retries.values())
        self.timer = None
        self.retries.clear()
        for timer in timers:
            if timer is not None and timer.active():
                timer.cancel()
        pending = list(self.pending.values())
        self.pending.clear()
        for d in pending:  # closes those reserve connections
            d.cancel()

    def _cancelled(self, _: Deferred) -> None:
        self.done = True
        self._stop()


__all__ = ["Race", "RaceHost"]
