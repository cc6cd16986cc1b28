# -*- test-case-name: tests.test_client_pool,tests.test_client_pool_wire -*-
"""A pool's reserve: a part of :class:`~twisted_stalk.client.pool.BeanstalkPool`.

The servers are asked one by one, from the next in rotation, with
``reserve-with-timeout 0``; when none has a job, every usable server is
waited on at once (a :class:`~twisted_stalk.client.race.Race`): the first
job wins, and a job another server handed out in the same instant is given
back by closing its connection.
"""
from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

from twisted.internet.defer import CancelledError, Deferred, fail
from twisted.python.failure import Failure

from ..protocol.constants import MAX_RESERVE_TIMEOUT
from . import _validate as v
from .errors import BeanstalkError, ClientClosed, InvalidArgument, ResponseTimeout, TimedOut
from .job import Job
from .members import PoolServer
from .race import Race
from ._validate import TubeName


class ReserveRaces:
    """The reserves of :class:`~twisted_stalk.client.pool.BeanstalkPool` (a part of it)."""

    def reserve(self, timeout: Optional[int] = None,
                tubes: Optional[Sequence[TubeName]] = None) -> "Deferred[Job]":
        """Reserve one job from any server (``tubes``: default the watch list).

        ``timeout`` None waits forever; N seconds end with :class:`TimedOut`.
        The job is bound to its server (:attr:`Job.server`).  Cancelling the
        Deferred cancels the waits on every server.
        """
        if self._closed:
            return fail(ClientClosed("the pool is closed"))
        try:
            if timeout is not None:
                timeout = v.uint(timeout, "reserve timeout", MAX_RESERVE_TIMEOUT)
            if tubes is None:
                watching = self._defaults.watch
            else:
                if isinstance(tubes, (str, bytes)):
                    tubes = (tubes,)
                watching = tuple(dict.fromkeys(v.tube_name(t) for t in tubes))
                if not watching:
                    raise InvalidArgument("a reserve must watch at least one tube")
        except InvalidArgument as e:
            return fail(e)
        self.start()
        deadline = None if timeout is None else self.clock.seconds() + timeout
        return self._reserve(self._rotated(), deadline, watching)

    def reserve_with_timeout(self, timeout: int,
                             tubes: Optional[Sequence[TubeName]] = None) -> "Deferred[Job]":
        """:meth:`reserve` with a timeout (0: ask each server once)."""
        return self.reserve(timeout if timeout is not None else 0, tubes)

    def _rotated(self) -> List[PoolServer]:
        members = self._members
        start = self._rotation % len(members)
        self._rotation = start + 1
        return members[start:] + members[:start]

    def _reserve(self, order: List[PoolServer], deadline: Optional[float],
                 tubes: Tuple[bytes, ...]) -> "Deferred[Job]":
        """Ask the usable servers of ``order`` in turn (``reserve-with-timeout
        0``); when none has a job, wait on every server at once.  Chained
        Deferreds rather than a coroutine: this runs once per job."""
        while order:
            member = order.pop(0)
            if member.usable:
                return member.client.reserve(0, tubes).addCallbacks(
                    self._polled, self._poll_failed, callbackArgs=(member,),
                    errbackArgs=(member, order, deadline, tubes))
        if deadline is not None and self.clock.seconds() >= deadline:
            return fail(TimedOut("reserve", b"TIMED_OUT (no server had a job)"))
        # Nothing ready anywhere: wait on every server at once.
        race = Race(self._host, self._members, deadline, tubes)
        self._races.add(race)
        return race.start()

    @staticmethod
    def _polled(job: Job, member: PoolServer) -> Job:
        member.reserved += 1
        return job

    def _poll_failed(self, failure: Failure, member: PoolServer, order: List[PoolServer],
                     deadline: Optional[float], tubes: Tuple[bytes, ...]) -> Any:
        if failure.check(CancelledError, ClientClosed) or not failure.check(BeanstalkError):
            return failure
        if failure.check(ResponseTimeout):
            self._suspect(member, f"no answer to reserve-with-timeout 0: {failure.value}")
        elif not failure.check(TimedOut):
            self.log.debug("reserve on {server} failed: {error}", server=member.name,
                           error=failure.getErrorMessage())
        return self._reserve(order, deadline, tubes)

    def _suspect(self, member: PoolServer, reason: str) -> None:
        """``member`` stopped answering: drop its main connection, so that it
        is down until it answers on a new one."""
        proto = member.client.protocol
        if proto is not None and proto.connected:
            proto.drop(f"connection dropped: {reason}")

    def _give_back(self, member: PoolServer, job: Job) -> None:
        """A job for a race already over (a safety net: cancelling the other
        waits closes their connections as soon as one answers, so the server
        puts back what it was sending on them): close its connection too, so
        the server puts it back (priority unchanged, no delay, no release
        counted)."""
        self.log.info("giving back job {id} of {server}: the reserve had a job already",
                      id=job.id, server=member.name)
        proto = job.connection
        if proto is not None:
            proto.drop("connection closed to give back a job the pool did not need")


__all__ = ["ReserveRaces"]
