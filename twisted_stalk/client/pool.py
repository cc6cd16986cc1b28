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

The pool is written by idea: its servers' life cycle and the jobs each
server holds here, where a put goes in :mod:`.pool_put`, the reserve races
in :mod:`.pool_reserve`, and the commands on every server at once (stats
among them) in :mod:`.pool_servers`.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple, Union

from twisted.internet.defer import Deferred, DeferredList, TimeoutError, fail, succeed
from twisted.internet.interfaces import IReactorTime, IStreamClientEndpoint
from twisted.internet.task import LoopingCall
from twisted.logger import Logger
from twisted.python.failure import Failure

from ..protocol.constants import DEFAULT_TUBE
from . import _validate as v
from .client import BeanstalkClient
from .defaults import TubeDefaults
from .errors import NoServerAvailable, ClientClosed, ConnectTimeout, InvalidArgument
from .job import DEFAULT_PRIORITY, Job
from .members import JobId, PoolServer, ServerInfo, follow
from .policy import KeyHash, Policy, RoundRobin
from .pool_put import PutRouting
from .pool_reserve import ReserveRaces
from .pool_servers import ServersAndStats
from .race import Race
from .tubes import PoolTube, TubeSet

TubeName = Union[str, bytes]
Endpoint = Union[str, IStreamClientEndpoint]


class BeanstalkPool(PutRouting, ReserveRaces, ServersAndStats):
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
