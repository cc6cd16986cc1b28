# -*- test-case-name: tests.test_client_pool,tests.test_client_pool_wire -*-
"""Many servers: one client over N independent beanstalkd-compatible servers.

beanstalkd has no clustering; its users run independent servers and spread
jobs from the client.  :class:`BeanstalkPool` keeps one
:class:`~twisted_stalk.client.BeanstalkClient` per server (each reconnecting
with backoff and replaying ``use``/``watch``) and offers the client's calls:

* **put** goes to one usable server, chosen by a
  :mod:`~twisted_stalk.client.policy` (round-robin by default, weighted, or
  by the caller's ``key``); a put refused with ``DRAINING`` or
  ``OUT_OF_MEMORY``, or whose server is unreachable, is tried on the next
  server.  A put whose connection broke *after* it was written may or may
  not have been stored: it is tried again elsewhere only with
  ``retry_written`` (the default), which can duplicate the job.
* **reserve** first asks the servers one by one, starting at the next in
  rotation, with ``reserve-with-timeout 0`` (a job that is ready anywhere is
  taken at once, and a server with a stream of jobs cannot starve the
  others: each server is asked first once every N reserves).  When none has
  a job, it waits on every usable server at once (a *race*, one reserve
  connection per server); the first job to arrive wins and the other waits
  are cancelled by closing their connections, which also gives back, with
  its priority unchanged and no delay, a job a second server handed out in
  the same instant.  So a pool reserve never keeps more than one job, and a
  job put on any idle server is picked up as soon as the server hands it out.
* **Every job remembers its server** (:attr:`Job.server`): ``delete``,
  ``release``, ``bury``, ``touch`` and ``stats`` go there.
* A server that is down or stops answering is skipped; its client
  reconnects with backoff, and the pool uses it again (waiting reserves
  included) once it answers.  :meth:`BeanstalkPool.servers` reports each
  server's state; every change is logged and passed to ``on_server_change``.
* ``stats()``/``stats_tube()`` add up the servers' figures
  (:mod:`~twisted_stalk.client.aggregate`), each server's own kept.
"""
from __future__ import annotations

from typing import Any, Callable, Collection, Dict, List, Optional, Sequence, Set, Tuple, Union

from twisted.internet.defer import (CancelledError, Deferred, DeferredList, TimeoutError, fail,
                                    succeed)
from twisted.internet.interfaces import IReactorTime, IStreamClientEndpoint
from twisted.internet.task import LoopingCall
from twisted.logger import Logger
from twisted.python.failure import Failure

from ..protocol.constants import DEFAULT_TUBE, MAX_RESERVE_TIMEOUT
from . import _validate as v
from .aggregate import PoolStats
from .client import BeanstalkClient
from .defaults import TubeDefaults
from .errors import (
    BeanstalkConnectionError,
    NoServerAvailable,
    BeanstalkError,
    ClientClosed,
    ConnectTimeout,
    Draining,
    InvalidArgument,
    NotFound,
    OutOfMemory,
    ResponseTimeout,
    TimedOut,
)
from .job import DEFAULT_PRIORITY, DEFAULT_TTR, Job
from .members import JobId, PoolServer, ServerInfo, follow
from .policy import KeyHash, Policy, RoundRobin
from .race import Race
from .tubes import PoolTube, TubeSet

TubeName = Union[str, bytes]
Endpoint = Union[str, IStreamClientEndpoint]


class BeanstalkPool:
    """A client of several beanstalkd-compatible servers (see the module doc).

    :param endpoints: endpoint strings (``"tcp:host:port"`` ...) or
        endpoint objects, one per server.
    :param reactor: the reactor (or a ``Clock`` with endpoint objects).
    :param policy: where puts go (:class:`~twisted_stalk.client.policy.RoundRobin`
        by default; :class:`~twisted_stalk.client.policy.Weighted`); a put
        with ``key=`` uses :class:`~twisted_stalk.client.policy.KeyHash`.
    :param retry_written: try a put again on another server when its
        connection broke after it was written (it may have been stored:
        the job can then exist twice).  False raises the error instead.
    :param stall_timeout: seconds a command may wait for its reply before
        the server is passed over for new puts and first reserves.
    :param health_interval: seconds between checks of idle servers (a
        ``list-tube-used``; a server that does not answer within
        ``timeout`` is dropped and reconnected); None: no checks.
    :param on_server_change: called with a :class:`ServerInfo` whenever a
        server goes up or down.
    :param settings: :class:`BeanstalkClient` settings for every server
        (``use``, ``watch``, ``timeout`` (default 5 s here),
        ``reserve_grace`` (default 2 s here), ``connect_timeout``,
        ``retry_policy``, ``codec``, ``max_job_size``,
        ``max_reserve_connections``).
    """

    log = Logger()

    def __init__(self, endpoints: Sequence[Endpoint], *,
                 reactor: Optional[IReactorTime] = None,
                 policy: Optional[Policy] = None, retry_written: bool = True,
                 stall_timeout: float = 2.0, health_interval: Optional[float] = 5.0,
                 on_server_change: Optional[Callable[[ServerInfo], Any]] = None,
                 **settings: Any) -> None:
        if isinstance(endpoints, (str, bytes)) or not endpoints:
            raise InvalidArgument("a pool needs a list of one or more endpoints")
        if {"on_connect", "on_disconnect", "name", "defaults"} & set(settings):
            raise InvalidArgument("the pool sets each server's on_connect, on_disconnect, name "
                                  "and defaults: use on_server_change, use= and watch=")
        if reactor is None:
            from twisted.internet import reactor as _reactor
            reactor = _reactor  # type: ignore[assignment]
        self.clock: IReactorTime = reactor  # type: ignore[assignment]
        settings.setdefault("timeout", 5.0)
        settings.setdefault("reserve_grace", 2.0)
        self.reserve_grace: float = settings["reserve_grace"]
        self.connect_timeout: Optional[float] = settings.get("connect_timeout", 10.0)
        self.policy: Policy = policy or RoundRobin()
        self._by_key = KeyHash()
        self.retry_written = retry_written
        self.stall_timeout = stall_timeout
        self.on_server_change = on_server_change
        #: The tubes every server's calls use when they name none (one set).
        self._defaults = TubeDefaults(settings.pop("use", DEFAULT_TUBE),
                                      settings.pop("watch", (DEFAULT_TUBE,)))
        self._host = _Host(self)
        self._members = [PoolServer(self._host, i, BeanstalkClient(e, reactor=reactor,
                                                             defaults=self._defaults, **settings))
                         for i, e in enumerate(endpoints)]
        names = [m.name for m in self._members]
        if len(set(names)) != len(names):
            raise InvalidArgument(f"a server is listed twice: {names}")
        self._names = names
        self._rotation = 0
        self._races: Set[Race] = set()
        self._up_waiters: List[Deferred] = []
        self._closed = False
        self._started = False
        self._health: Optional[LoopingCall] = None
        self._health_interval = health_interval

    def __repr__(self) -> str:
        return f"<BeanstalkPool {', '.join(self._names)}>"

    # ------------------------------------------------------------ lifecycle

    @property
    def clients(self) -> Dict[str, BeanstalkClient]:
        """Each server's :class:`BeanstalkClient`, by name (for calls on one server)."""
        return {m.name: m.client for m in self._members}

    def servers(self) -> List[ServerInfo]:
        """Each server's state and counters, in the pool's order."""
        return [m.info for m in self._members]

    @property
    def used(self) -> str:
        """The default tube of puts."""
        return self._members[0].client.used

    @property
    def watched(self) -> Tuple[str, ...]:
        """The default watch list of reserves."""
        return self._members[0].client.watched

    def start(self) -> None:
        """Start connecting to every server (calls do this by themselves)."""
        if self._closed:
            raise ClientClosed("the pool is closed")
        if self._started:
            return
        self._started = True
        for m in self._members:
            m.start()
        if self._health_interval:
            self._health = LoopingCall(self._check_health)
            self._health.clock = self.clock
            self._health.start(self._health_interval, now=False)

    def connect(self) -> "Deferred[BeanstalkPool]":
        """Start; fire with the pool once at least one server is up and every
        other one is up too or failed a first attempt (or ``stall_timeout``
        has passed); :class:`ConnectTimeout` when none is up within
        ``connect_timeout``."""
        return Deferred.fromCoroutine(self._connect())

    async def _connect(self) -> "BeanstalkPool":
        await self._settled()
        await self._when_any_up()
        return self

    def _settled(self) -> Deferred:
        """Fires once every server is up or failed a first attempt, or after
        ``stall_timeout`` at most, so that the first puts spread over all the
        servers that answer at once, not the first one up."""
        self.start()
        waiting = [follow(m.settled) for m in self._members if not m.settled.called]
        if not waiting:
            return succeed(None)
        # consumeErrors: the timeout cancels the waits still pending, and
        # their CancelledErrors would be logged as unhandled when collected.
        d = DeferredList(waiting, consumeErrors=True)
        d.addTimeout(self.stall_timeout, self.clock)
        return d.addErrback(lambda f: f.trap(TimeoutError) and None)

    def close(self) -> "Deferred[None]":
        """Close every connection; pending calls fail with :class:`ClientClosed`."""
        self._closed = True
        if self._health is not None and self._health.running:
            self._health.stop()
        for race in list(self._races):
            race.abort(ClientClosed("the pool was closed"))
        waiters, self._up_waiters = self._up_waiters, []
        for d in waiters:
            d.errback(ClientClosed("the pool was closed"))
        return DeferredList([m.client.close() for m in self._members],
                            consumeErrors=True).addCallback(lambda _: None)

    def _server_changed(self, member: PoolServer) -> None:
        if self.on_server_change is not None:
            try:
                self.on_server_change(member.info)
            except Exception:
                self.log.failure("the on_server_change hook failed")

    def _server_up(self, member: PoolServer) -> None:
        self._server_changed(member)
        for race in list(self._races):
            race.add(member)
        waiters, self._up_waiters = self._up_waiters, []
        for d in waiters:
            d.callback(member)

    def _when_any_up(self) -> "Deferred[PoolServer]":
        if self._closed:
            return fail(ClientClosed("the pool is closed"))
        self.start()
        for m in self._members:
            if m.usable:
                return succeed(m)
        d: Deferred = Deferred(lambda d: self._up_waiters.remove(d))
        self._up_waiters.append(d)
        if self.connect_timeout is not None:
            d.addTimeout(self.connect_timeout, self.clock)

        def failed(f: Failure) -> Failure:
            if f.check(TimeoutError):
                return Failure(ConnectTimeout(
                    f"no server of the pool answered within {self.connect_timeout:g} s"))
            return f
        return d.addErrback(failed)

    def _check_health(self) -> None:
        for m in self._members:
            proto = m.client.protocol
            if m.state == "up" and proto is not None and proto.connected:
                if not proto.pending:  # idle: ask something (its response timer runs)
                    proto.list_tube_used().addErrback(lambda f: None)

    def _usable(self) -> List[int]:
        """Indices of the servers up and answering (:attr:`PoolServer.usable`)."""
        return [m.index for m in self._members if m.usable]

    # ------------------------------------------------------------ producing

    def put(self, body: Any, priority: int = DEFAULT_PRIORITY, delay: int = 0,
            ttr: int = DEFAULT_TTR, tube: Optional[TubeName] = None, *,
            key: Optional[Any] = None,
            retry_written: Optional[bool] = None) -> "Deferred[JobId]":
        """Put a job on one server; fires with its :class:`JobId` (an int
        with ``.server``).

        The pool's policy picks the server (with ``key``: the key's server,
        see :class:`~twisted_stalk.client.policy.KeyHash`).  ``DRAINING``,
        ``OUT_OF_MEMORY`` and an unreachable server move the put to the next
        server.  A connection that broke after the put was written moves it
        too when ``retry_written`` (default: the pool's), at the risk of a
        duplicate; otherwise that error is raised.  Errors:
        :class:`NoServerAvailable` (every server refused), the put's own
        errors (:class:`InvalidArgument`, :class:`JobTooBig`, :class:`Buried`).
        """
        if self._closed:
            return fail(ClientClosed("the pool is closed"))
        written = self.retry_written if retry_written is None else retry_written
        if self._started:
            # The usual case, without a coroutine: the first usable server.
            usable = self._usable()
            if usable:
                policy = self._by_key if key is not None else self.policy
                first = getattr(policy, "first", None)
                index = (first(self._names, usable, key) if first is not None
                         else policy.order(self._names, usable, key)[0])
                member = self._members[index]
                d = member.client.put_now(body, priority, delay, ttr, tube)
                return d.addCallbacks(member.stored, self._put_failed, errbackArgs=(
                    member, body, priority, delay, ttr, tube, key, written))
        return Deferred.fromCoroutine(
            self._put(body, priority, delay, ttr, tube, key, written))

    def _put_failed(self, failure: Failure, member: PoolServer, *put: Any) -> Any:
        """The first server did not take the put: go on with the others (see
        :meth:`_put`) when that is allowed, else the error."""
        error = failure.value
        retry_written = put[-1]
        if isinstance(error, (Draining, OutOfMemory)) or (
                retry_written and isinstance(error, BeanstalkConnectionError)
                and not isinstance(error, ClientClosed)):
            self._log_retry(member, error)
            return Deferred.fromCoroutine(self._put(
                *put, tried={member.index}, errors={member.name: error}))
        return failure

    def _log_retry(self, member: PoolServer, error: BaseException) -> None:
        if isinstance(error, BeanstalkConnectionError):
            self.log.info("put to {server} failed after it was sent ({error}); "
                          "trying another server (the job may now exist twice)",
                          server=member.name, error=error)

    def _put_order(self, key: Optional[Any], tried: Collection[int]) -> List[int]:
        usable = [i for i in self._usable() if i not in tried]
        if not usable:
            return []
        if key is not None:
            return self._by_key.order(self._names, usable, key)
        return self.policy.order(self._names, usable, None)

    async def _put(self, body: Any, priority: int, delay: int, ttr: int,
                   tube: Optional[TubeName], key: Optional[Any], retry_written: bool,
                   tried: Optional[Set[int]] = None,
                   errors: Optional[Dict[str, BaseException]] = None) -> JobId:
        self.start()
        tried = set() if tried is None else tried
        errors = {} if errors is None else errors
        while True:
            order = self._put_order(key, tried)
            if not order:
                if errors:
                    raise NoServerAvailable(
                        "no server took the put: " + "; ".join(
                            f"{name}: {e}" for name, e in errors.items()), errors)
                if not all(m.settled.called for m in self._members):
                    await self._settled()
                else:
                    await self._when_any_up()
                continue
            member = self._members[order[0]]
            tried.add(member.index)
            try:
                job_id = await member.client.put_now(body, priority, delay, ttr, tube)
            except (Draining, OutOfMemory) as e:  # not stored: the next server
                errors[member.name] = e
                continue
            except ClientClosed:
                raise
            except BeanstalkConnectionError as e:
                if not retry_written:
                    raise
                self._log_retry(member, e)
                errors[member.name] = e
                continue
            return member.stored(job_id)

    # ------------------------------------------------------------ consuming

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

    def watching(self, *names: TubeName) -> TubeSet:
        """Reserves from these tubes (``pool.watching("a", "b").reserve()``)."""
        return TubeSet(self, names)

    def tube(self, name: TubeName) -> "PoolTube":
        """Commands targeting tube ``name`` (``pool.tube("emails").put(...)``)."""
        return PoolTube(self, name)

    # ---------------------------------------------------- jobs and servers

    def delete(self, job: Union[Job, JobId]) -> "Deferred[None]":
        """Delete a job on its server (a :class:`Job`, or a :class:`JobId`)."""
        if isinstance(job, Job):
            return job.delete()
        return self._on_server(job, lambda c, i: c.delete(i))

    def release(self, job: Union[Job, JobId], priority: int = DEFAULT_PRIORITY,
                delay: int = 0) -> "Deferred[None]":
        """Release a job this pool reserved, on its server."""
        if isinstance(job, Job):
            return job.release(priority, delay)
        return self._on_server(job, lambda c, i: c.release(i, priority, delay))

    def bury(self, job: Union[Job, JobId], priority: int = DEFAULT_PRIORITY) -> "Deferred[None]":
        """Bury a job this pool reserved, on its server."""
        if isinstance(job, Job):
            return job.bury(priority)
        return self._on_server(job, lambda c, i: c.bury(i, priority))

    def touch(self, job: Union[Job, JobId]) -> "Deferred[None]":
        """Touch a job this pool reserved, on its server."""
        if isinstance(job, Job):
            return job.touch()
        return self._on_server(job, lambda c, i: c.touch(i))

    def kick_job(self, job: Union[Job, JobId]) -> "Deferred[None]":
        """Kick a buried or delayed job on its server."""
        if isinstance(job, Job):
            return job.kick()
        return self._on_server(job, lambda c, i: c.kick_job(i))

    def _on_server(self, job_id: Any, call: Callable[[BeanstalkClient, int], Deferred]
                   ) -> Deferred:
        try:
            client = self._client_of(job_id)
        except InvalidArgument as e:
            return fail(e)
        return call(client, int(job_id))

    def stats_job(self, job: Union[Job, JobId]) -> "Deferred[Dict[str, Any]]":
        """A job's statistics, from its server (a :class:`Job` or a :class:`JobId`)."""
        if isinstance(job, Job):
            return job.stats()
        return self._on_server(job, lambda c, i: c.stats_job(i))

    def peek(self, job_id: JobId) -> "Deferred[Job]":
        """The job with this :class:`JobId`, from its server."""
        return self._on_server(job_id, lambda c, i: c.peek(i))

    def _client_of(self, job_id: Any) -> BeanstalkClient:
        server = getattr(job_id, "server", None)
        for m in self._members:
            if m.name == server:
                return m.client
        raise InvalidArgument(f"job ids are per server: give a JobId from put() "
                              f"(with .server), not {job_id!r}")

    # ------------------------------------------------- every server at once

    def _each(self, call: Callable[[BeanstalkClient], Deferred]
              ) -> "Deferred[Tuple[Dict[str, Any], Dict[str, BaseException]]]":
        """``call`` on every usable server; (results, errors) by name."""
        self.start()
        members = self._members
        ds = []
        for m in members:
            if m.usable:
                ds.append(call(m.client))
            else:
                ds.append(fail(NoServerAvailable(f"{m.name} is {m.state}")))

        def split(results: List[Tuple[bool, Any]]):
            values: Dict[str, Any] = {}
            errors: Dict[str, BaseException] = {}
            for m, (ok, value) in zip(members, results):
                if ok:
                    values[m.name] = value
                else:
                    errors[m.name] = value.value
            return values, errors
        return DeferredList(ds, consumeErrors=True).addCallback(split)

    def stats(self) -> "Deferred[PoolStats]":
        """Server statistics summed over the servers that answered
        (``.servers``: each one's; ``.errors``: those that did not)."""
        def combine(r: Tuple[Dict[str, Any], Dict[str, BaseException]]) -> PoolStats:
            if not r[0]:
                raise NoServerAvailable("no server answered stats", r[1])
            return PoolStats(*r)
        return self._each(lambda c: c.stats()).addCallback(combine)

    def stats_tube(self, tube: TubeName) -> "Deferred[PoolStats]":
        """A tube's statistics summed over the servers that have it.
        Errors: :class:`NotFound` when none has it."""
        return self._each(lambda c: c.stats_tube(tube)).addCallback(
            lambda r: self._found(r, lambda values: PoolStats(values, r[1])))

    def list_tubes(self) -> "Deferred[List[str]]":
        """The tubes that exist on any server, sorted."""
        return self._each(lambda c: c.list_tubes()).addCallback(
            lambda r: sorted(set().union(*r[0].values())))

    def kick(self, bound: int, tube: Optional[TubeName] = None) -> "Deferred[int]":
        """Kick up to ``bound`` jobs on *each* server; fires with the total kicked."""
        return self._each(lambda c: c.kick(bound, tube)).addCallback(
            lambda r: sum(r[0].values()))

    def list_jobs(self, tube: TubeName, state: str, limit: int) -> "Deferred[List[JobId]]":
        """Ids (:class:`JobId`) of up to ``limit`` jobs of ``tube`` in ``state``
        on *each* server, server after server (see
        :meth:`BeanstalkClient.list_jobs`).  Errors: :class:`NotFound` when no
        server has the tube."""
        return self._each(lambda c: c.list_jobs(tube, state, limit)).addCallback(
            self._found, lambda r: [JobId(i, name) for name, ids in r.items() for i in ids])

    def flush_tube(self, tube: TubeName, state: Optional[str] = None) -> "Deferred[int]":
        """Delete the jobs of ``tube`` in ``state`` on every server (see
        :meth:`BeanstalkClient.flush_tube`); fires with the total deleted."""
        return self._each(lambda c: c.flush_tube(tube, state)).addCallback(
            self._found, lambda r: sum(r.values()))

    @staticmethod
    def _found(r: Tuple[Dict[str, Any], Dict[str, BaseException]],
               combine: Callable[[Dict[str, Any]], Any]) -> Any:
        """``combine`` the servers' answers; NotFound when none had the tube."""
        values, errors = r
        if not values:
            found = [e for e in errors.values() if isinstance(e, NotFound)]
            if found:
                raise found[0]
            raise NoServerAvailable("no server answered", errors)
        return combine(values)

    def pause_tube(self, tube: TubeName, delay: int) -> "Deferred[None]":
        """Pause ``tube`` on every server that has it."""
        return self._each(lambda c: c.pause_tube(tube, delay)).addCallback(lambda r: None)

    def peek_ready(self, tube: Optional[TubeName] = None) -> "Deferred[Job]":
        """A ready job of ``tube`` from the first server (in the pool's
        order) that has one: not the best across servers."""
        return self._first(lambda c: c.peek_ready(tube))

    def peek_delayed(self, tube: Optional[TubeName] = None) -> "Deferred[Job]":
        """A delayed job of ``tube`` from the first server that has one."""
        return self._first(lambda c: c.peek_delayed(tube))

    def peek_buried(self, tube: Optional[TubeName] = None) -> "Deferred[Job]":
        """A buried job of ``tube`` from the first server that has one."""
        return self._first(lambda c: c.peek_buried(tube))

    def _first(self, call: Callable[[BeanstalkClient], Deferred]) -> "Deferred[Job]":
        def pick(r: Tuple[Dict[str, Any], Dict[str, BaseException]]) -> Job:
            for m in self._members:
                if m.name in r[0]:
                    return r[0][m.name]
            raise NotFound("peek", b"NOT_FOUND (on every server)")
        return self._each(call).addCallback(pick)

    # --------------------------------------------------------- default state

    def use(self, tube: TubeName) -> "Deferred[str]":
        """Make ``tube`` the default for puts on every server (kept across
        reconnects); fires with its name."""
        try:
            raw = v.tube_name(tube)
        except InvalidArgument as e:
            return fail(e)
        self._defaults.set_use(raw)
        return self._each(lambda c: c.use(raw)).addCallback(lambda r: raw.decode("ascii"))

    def watch(self, tube: TubeName) -> "Deferred[int]":
        """Add ``tube`` to the default watch list of reserves; fires with its length."""
        try:
            self._defaults.add_watch(tube)
        except InvalidArgument as e:
            return fail(e)
        return succeed(len(self._defaults.watch))

    def ignore(self, tube: TubeName) -> "Deferred[int]":
        """Remove ``tube`` from the default watch list (not the last one)."""
        try:
            self._defaults.remove_watch(tube)
        except InvalidArgument as e:
            return fail(e)
        return succeed(len(self._defaults.watch))


class _Host:
    """The pool as its servers and races see it
    (:class:`~twisted_stalk.client.members.ServerHost`,
    :class:`~twisted_stalk.client.race.RaceHost`)."""

    def __init__(self, pool: BeanstalkPool) -> None:
        self._pool = pool
        self.clock = pool.clock
        self.log = pool.log

    stall_timeout = property(lambda self: self._pool.stall_timeout)
    reserve_grace = property(lambda self: self._pool.reserve_grace)

    def server_up(self, server: PoolServer) -> None:
        self._pool._server_up(server)

    def server_changed(self, server: PoolServer) -> None:
        self._pool._server_changed(server)

    def suspect(self, server: PoolServer, reason: str) -> None:
        self._pool._suspect(server, reason)

    def give_back(self, server: PoolServer, job: Job) -> None:
        self._pool._give_back(server, job)

    def race_over(self, race: Race) -> None:
        self._pool._races.discard(race)


__all__ = ["BeanstalkPool", "JobId", "NoServerAvailable", "PoolTube", "ServerInfo"]
