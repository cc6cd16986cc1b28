# -*- test-case-name: tests.test_client_reserve -*-
"""The connections a client reserves on.

A ``reserve`` blocks its connection until a job comes, so a client keeps
separate connections for reserves (at most ``limit``).  A connection that
holds a reserved job is not used for another reserve while it holds it: the
job's ``delete`` would otherwise wait behind the new reserve.  It becomes free
again when its jobs are disposed of, or when their TTR has certainly run out
(the server has then taken them back).

The TTR is not in the ``RESERVED`` reply, so the client learns it only when it
needs to: when a reserve finds every connection busy or holding jobs, it asks
``stats-job`` for the held jobs whose TTR it does not know yet (on the
connection that holds each), and frees each connection once the last grant of
its jobs (the reply to the reserve or to the last ``touch``) is more than
``TTR + EXPIRY_MARGIN`` seconds old.  Such jobs become :attr:`Job.expired`;
their methods fail with :class:`~twisted_stalk.client.errors.JobExpired`.

Unlike the main connection, these are plain connections: one whose reserve
was cancelled is closed and forgotten (the server puts back any job it had
just reserved on it), and a new one is opened when a reserve needs it, without
the reconnect backoff of the main connection.  Opening one waits for the main
connection first (up to ``connect_timeout``), so reserves made while the
server is down wait for it as other calls do.
"""
from __future__ import annotations

from collections import deque
from typing import Any, Deque, Dict, List, Optional, Set
from typing import Protocol as _Interface

from twisted.internet.defer import (
    CancelledError,
    Deferred,
    TimeoutError,
    fail,
    succeed,
)
from twisted.internet.interfaces import IDelayedCall, IReactorTime, IStreamClientEndpoint
from twisted.python.failure import Failure

from ..protocol.replies import NotFound
from .errors import ClientClosed, ConnectionLost, ConnectTimeout, InvalidArgument, TimedOut
from .job import Job
from .defaults import TubeDefaults
from .protocol import BeanstalkClientFactory, BeanstalkProtocol


class ReserveOwner(_Interface):
    """What the reserve connections need of their client (a
    :class:`~twisted_stalk.client.BeanstalkClient`): its settings, its
    default tubes, whether it is connected or closed, and a way to wait for
    its main connection."""

    clock: IReactorTime
    endpoint: IStreamClientEndpoint
    name: str
    timeout: Optional[float]
    reserve_grace: float
    connect_timeout: Optional[float]
    max_job_size: Optional[int]
    codec: Any
    defaults: TubeDefaults

    @property
    def connected(self) -> bool: ...

    @property
    def closed(self) -> bool: ...

    def connect(self) -> Deferred: ...

#: Seconds past a job's TTR after which the client treats the reservation as
#: over (the server's deadline is earlier: it started the TTR before the
#: client saw the reply; the margin covers a server that expires jobs late).
EXPIRY_MARGIN = 1.0


class _Waiter:
    __slots__ = ("deferred", "timer", "opener")

    def __init__(self) -> None:
        self.deferred: Deferred = Deferred()
        self.timer: Optional[IDelayedCall] = None
        #: A connection is being opened for this waiter.
        self.opener = False


class ReserveConnections:
    """Up to ``limit`` connections of ``client`` for reserves.

    :meth:`acquire` gives a free connection (marked busy) and :meth:`release`
    gives it back; :meth:`reserved` tells it which job a reserve got.
    """

    def __init__(self, client: ReserveOwner, limit: int) -> None:
        if limit < 1:
            raise InvalidArgument("max_reserve_connections must be at least 1")
        self.client = client
        self.limit = limit
        #: Open connections, oldest first.
        self.protos: List[BeanstalkProtocol] = []
        self.busy: Set[BeanstalkProtocol] = set()
        self.opening = 0
        #: Connections being opened (so that close can wait for them).
        self._openings: Set[Deferred] = set()
        self.waiters: Deque[_Waiter] = deque()
        self._timer: Optional[IDelayedCall] = None
        self._asking: Set[int] = set()
        self._closed = False

    # ------------------------------------------------------------- acquiring

    def _free(self) -> Optional[BeanstalkProtocol]:
        busy = self.busy
        for proto in self.protos:
            if proto not in busy and not proto.reserved_jobs and proto.usable:
                return proto
        return None

    def acquire(self, deadline: Optional[float] = None) -> "Deferred[BeanstalkProtocol]":
        """A free connection, now or once there is one.

        With every connection in use and ``limit`` of them open, the wait
        ends at ``deadline`` (client clock) with :class:`TimedOut`.  Opening
        a new connection is bounded by the client's ``connect_timeout``
        instead (:class:`ConnectTimeout`).
        """
        if self._closed:
            return fail(ClientClosed("the client is closed"))
        proto = self._free()
        if proto is not None:
            self.busy.add(proto)
            return succeed(proto)
        waiter = _Waiter()
        waiter.deferred = Deferred(lambda d: self._forget(waiter))
        self.waiters.append(waiter)
        if proto is None and len(self.protos) + self.opening < self.limit:
            waiter.opener = True
            self._open(waiter)
        else:
            if deadline is not None:
                clock = self.client.clock
                waiter.timer = clock.callLater(max(0.0, deadline - clock.seconds()),
                                               self._too_late, waiter)
            self.wake()
            if not waiter.deferred.called:
                self._check_expiry()
        return waiter.deferred

    def _forget(self, waiter: _Waiter) -> None:
        if waiter in self.waiters:
            self.waiters.remove(waiter)
        timer, waiter.timer = waiter.timer, None
        if timer is not None and timer.active():
            timer.cancel()

    def _too_late(self, waiter: _Waiter) -> None:
        waiter.timer = None
        self._forget(waiter)
        held = sum(len(p.reserved_jobs) for p in self.protos)
        waiter.deferred.errback(TimedOut("reserve", (
            f"TIMED_OUT (client side: all {self.limit} reserve connections were in use, "
            f"{held} of them holding jobs, until the reserve's timeout)").encode()))

    def _give(self, waiter: _Waiter, proto: BeanstalkProtocol) -> None:
        self._forget(waiter)
        self.busy.add(proto)
        waiter.deferred.callback(proto)

    def wake(self, *_: Any) -> None:
        """Serve waiters with free connections (or new ones, while allowed)."""
        waiters = self.waiters
        while waiters:
            proto = self._free()
            if proto is None:
                break
            self._give(waiters[0], proto)
        for waiter in list(waiters):
            if len(self.protos) + self.opening >= self.limit:
                break
            if not waiter.opener:
                waiter.opener = True
                self._open(waiter)

    def release(self, proto: BeanstalkProtocol) -> None:
        """The reserve on ``proto`` is over (whatever its outcome)."""
        self.busy.discard(proto)
        if not proto.connected and proto in self.protos:
            self.protos.remove(proto)
        self.wake()

    # --------------------------------------------------------------- opening

    def _open(self, waiter: _Waiter) -> None:
        self.opening += 1
        d = Deferred.fromCoroutine(self._connect())
        d.addBoth(self._opened, waiter)
        self._openings.add(d)
        d.addBoth(self._opening_done, d)

    def _opening_done(self, result: Any, d: Deferred) -> Any:
        self._openings.discard(d)
        return result

    async def _connect(self) -> BeanstalkProtocol:
        client = self.client
        if not client.connected:
            # The server is down or not connected yet: wait for the main
            # connection (reconnecting with backoff, up to connect_timeout).
            await client.connect()
        factory = BeanstalkClientFactory(
            client.clock, timeout=client.timeout, reserve_grace=client.reserve_grace,
            max_job_size=client.max_job_size, codec=client.codec, client=client)
        connecting = client.endpoint.connect(factory)
        if client.connect_timeout is not None:
            connecting.addTimeout(client.connect_timeout, client.clock)
        try:
            proto: BeanstalkProtocol = await connecting
        except TimeoutError:
            raise ConnectTimeout(f"no reserve connection to {client.name} within "
                                 f"{client.connect_timeout:g} s") from None
        except (CancelledError, ClientClosed):
            raise
        except Exception as e:
            raise ConnectionLost(f"could not open a reserve connection to {client.name}: "
                                 f"{e}") from None
        await client.defaults.apply(proto)
        return proto

    def _opened(self, result: Any, waiter: _Waiter) -> None:
        self.opening -= 1
        waiter.opener = False
        if isinstance(result, Failure):
            target = waiter if waiter in self.waiters else (
                self.waiters[0] if self.waiters else None)
            if target is not None:
                self._forget(target)
                target.deferred.errback(result)
            return  # (with nobody waiting, the failure is dropped)
        proto: BeanstalkProtocol = result
        if self._closed or self.client.closed:
            return proto.close()  # (close waits for this)
        proto.on_jobs_done = self.wake
        self.protos.append(proto)
        proto.when_lost().addCallback(self._lost, proto)
        if waiter in self.waiters:
            self._give(waiter, proto)
        else:
            self.wake()

    def _lost(self, _: Any, proto: BeanstalkProtocol) -> None:
        if proto in self.protos and proto not in self.busy:
            self.protos.remove(proto)
        self.wake()

    # ---------------------------------------------------------------- jobs

    def reserved(self, proto: BeanstalkProtocol, job: Job) -> None:
        """A reserve on ``proto`` got ``job``.  If another connection still
        holds a Job with the same id, its reservation certainly ended (the
        TTR ran out and the server handed the job out again): expire it."""
        job_id = job.id
        for other in self.protos:
            if other is not proto:
                old = other.held(job_id)
                if old is not None and old.expire(
                        "its TTR ran out: the server took it back, and this client "
                        "reserved it again (as another Job)"):
                    self.wake()

    def holding(self, job_id: int) -> Optional[BeanstalkProtocol]:
        """The connection holding the reserved job ``job_id``, if any."""
        for proto in self.protos:
            if proto.held(job_id) is not None:
                return proto
        return None

    def _check_expiry(self, *_: Any) -> None:
        """Free connections whose jobs' TTR has certainly run out; learn the
        TTRs not known yet; check again at the next deadline."""
        self._timer = None
        if not self.waiters or self._closed:
            return
        clock = self.client.clock
        now = clock.seconds()
        soonest: Optional[float] = None
        freed = False
        for proto in list(self.protos):
            if proto in self.busy or not proto.connected:
                continue
            for job in proto.reserved_jobs:
                if job.ttr is None:
                    self._ask_ttr(proto, job)
                    continue
                due = job.granted_at + job.ttr + EXPIRY_MARGIN
                if due <= now:
                    freed = job.expire(f"its TTR of {job.ttr} s ran out (the client has held "
                                        f"it {now - job.granted_at:.1f} s without touching "
                                        "it): the server took it back") or freed
                elif soonest is None or due < soonest:
                    soonest = due
        if freed:
            self.wake()
        if soonest is not None and self.waiters:
            self._timer = clock.callLater(soonest - now, self._check_expiry)

    def _ask_ttr(self, proto: BeanstalkProtocol, job: Job) -> None:
        if job.id in self._asking:
            return
        self._asking.add(job.id)

        def learnt(stats: Dict[str, Any]) -> None:
            job.learn(stats)
            if stats.get("state") != "reserved":
                # Reserved by nobody: the reservation ended.
                if job.expire("its TTR ran out: the server took it back (stats-job says "
                               f"{stats.get('state')})"):
                    self.wake()

        def failed(f: Failure) -> None:
            if f.check(NotFound) and job.expire("its TTR ran out and the job is gone "
                                                 "(stats-job: NOT_FOUND)"):
                self.wake()

        def done(_: Any) -> None:
            self._asking.discard(job.id)
            timer = self._timer
            if timer is not None and timer.active():
                timer.cancel()
            self._check_expiry()

        proto.stats_job(job.id).addCallbacks(learnt, failed).addBoth(done)

    # -------------------------------------------------------------- closing

    def close(self) -> List[Deferred]:
        """Fail the waiters with :class:`ClientClosed`, close every connection."""
        self._closed = True
        timer, self._timer = self._timer, None
        if timer is not None and timer.active():
            timer.cancel()
        waiters, self.waiters = self.waiters, deque()
        for waiter in waiters:
            self._forget(waiter)
            waiter.deferred.errback(ClientClosed("the client was closed"))
        closing = [proto.close() for proto in self.protos] + list(self._openings)
        self.protos = []
        self.busy.clear()
        return closing
