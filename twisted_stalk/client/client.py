"""The reconnecting client: one connection for commands, a pool for blocking reserves.

:class:`BeanstalkClient` keeps a *main* connection (a Twisted
:class:`~twisted.application.internet.ClientService`, so it reconnects with
backoff) for every command except reserves, and a pool of *reserve*
connections so that a ``reserve`` waiting for a job never holds up puts or
stats.  A reserved :class:`~twisted_stalk.client.job.Job` is bound to the pool
connection that reserved it; that connection is not used for another reserve
until the job is deleted, released or buried (otherwise its ``delete`` would
wait behind the new reserve).

Every connection, on every (re)connect, is brought to the client's default
state (``use`` tube, ``watch``/``ignore`` list) before any call is sent on it;
calls made while disconnected wait (up to ``connect_timeout``) and are sent in
order once connected.  Per-call tube targeting (``client.tube("x").put``,
``client.watching("a", "b").reserve``) sends only the ``use``/``watch``/
``ignore`` needed on the connection the call goes to.
"""
from __future__ import annotations

from collections import deque
from typing import (
    Any,
    Callable,
    Deque,
    Dict,
    FrozenSet,
    List,
    Optional,
    Sequence,
    Tuple,
    TypeVar,
    Union,
)

from twisted.application.internet import ClientService, backoffPolicy
from twisted.internet.defer import (
    CancelledError,
    Deferred,
    DeferredList,
    TimeoutError,
    fail,
    gatherResults,
    succeed,
)
from twisted.internet.endpoints import clientFromString
from twisted.internet.task import deferLater
from twisted.internet.interfaces import IReactorTime, IStreamClientEndpoint
from twisted.logger import Logger
from twisted.python.failure import Failure

from ..protocol.constants import DEFAULT_MAX_JOB_SIZE, DEFAULT_TUBE
from ..protocol.yaml import StatValue
from . import _validate as v
from .errors import ClientClosed, ConnectTimeout, InvalidArgument
from .job import DEFAULT_PRIORITY, DEFAULT_TTR, Codec, Job
from .protocol import (
    DEFAULT_RESERVE_GRACE,
    DEFAULT_TIMEOUT,
    MAX_RESERVE_TIMEOUT,
    BeanstalkClientFactory,
    BeanstalkProtocol,
)

T = TypeVar("T")
TubeName = Union[str, bytes]
Stats = Dict[str, StatValue]

#: Default reconnect policy: 0.1 s, growing 1.5x per failure, at most 10 s, plus jitter.
DEFAULT_RETRY_POLICY = backoffPolicy(initialDelay=0.1, maxDelay=10.0, factor=1.5,
                                     jitter=lambda: 0.0)


class _Link:
    """One connection managed by a ClientService (the main one or a reserve one)."""

    def __init__(self, client: "BeanstalkClient", role: str) -> None:
        self.client = client
        self.role = role
        self.proto: Optional[BeanstalkProtocol] = None
        #: A reserve (or reserve-job) call is using this link.
        self.busy = False
        self.factory = BeanstalkClientFactory(
            client.clock, timeout=client.timeout, reserve_grace=client.reserve_grace,
            max_job_size=client.max_job_size, codec=client.codec, client=client)
        self.service = ClientService(client.endpoint, self.factory,
                                     retryPolicy=client.retry_policy, clock=client.clock,
                                     prepareConnection=self._prepare)
        self.connections = 0

    def start(self) -> None:
        if not self.service.running:
            self.service.startService()

    def stop(self) -> Deferred:
        proto, self.proto = self.proto, None
        if proto is not None:
            proto.close()
        if not self.service.running:
            return succeed(None)
        return self.service.stopService()

    def _prepare(self, connected: Any) -> Deferred:
        proto: BeanstalkProtocol = getattr(connected, "_protocol", connected)
        proto.on_jobs_done = self._jobs_done
        d = self.client._replay(proto)

        def ready(_: Any) -> None:
            if proto.connected:
                self.proto = proto
                self.connections += 1
                proto.when_lost().addCallback(self._lost, proto)
        return d.addCallback(ready)

    def _lost(self, _: Any, proto: BeanstalkProtocol) -> None:
        if self.proto is proto:
            self.proto = None
        self.client._pool._wake()

    def _jobs_done(self) -> None:
        self.client._pool._wake()

    @property
    def free(self) -> bool:
        """Usable for a new reserve: none in progress and no job held."""
        proto = self.proto
        return not self.busy and (proto is None or not proto._jobs)

    def call(self, fn: Callable[[BeanstalkProtocol], "Deferred[T]"]) -> "Deferred[T]":
        """Run ``fn`` with the connected protocol, now or once connected."""
        proto = self.proto
        if proto is not None and proto.connected:
            return fn(proto)
        return self.later(fn)

    def _when_connected(self) -> "Deferred[BeanstalkProtocol]":
        def check(proto: Any) -> Any:
            if proto.connected:
                return proto
            # The connection just closed and the service has not noticed yet
            # (we are inside the protocol's connectionLost): ask again later.
            later = deferLater(self.client.clock, 0, lambda: None)
            return later.addCallback(lambda _: self._when_connected())
        return self.service.whenConnected().addCallback(check)

    def later(self, fn: Callable[[BeanstalkProtocol], "Deferred[T]"]) -> "Deferred[T]":
        client = self.client
        if client._closed:
            return fail(ClientClosed("the client is closed"))
        self.start()
        d = self._when_connected()
        if client.connect_timeout is not None:
            d.addTimeout(client.connect_timeout, client.clock)

        def failed(f: Failure) -> Failure:
            if f.check(TimeoutError):
                return Failure(ConnectTimeout(
                    f"no connection to {client.endpoint_description} within "
                    f"{client.connect_timeout:g} s"))
            if f.check(CancelledError) and client._closed:
                return Failure(ClientClosed("the client was closed"))
            return f
        d.addErrback(failed)
        return d.addCallback(fn)


class _ReservePool:
    """Connections for reserves: a free one, a new one, or wait for one."""

    def __init__(self, client: "BeanstalkClient", limit: int) -> None:
        self.client = client
        self.limit = limit
        self.links: List[_Link] = []
        self.waiters: Deque[Deferred] = deque()

    def acquire(self) -> "Deferred[_Link]":
        for link in self.links:
            if link.free:
                link.busy = True
                return succeed(link)
        if len(self.links) < self.limit:
            link = _Link(self.client, "reserve")
            self.links.append(link)
            link.busy = True
            link.start()
            return succeed(link)
        d: Deferred = Deferred(self.waiters.remove)
        self.waiters.append(d)
        return d

    def release(self, link: _Link) -> None:
        link.busy = False
        self._wake()

    def _wake(self) -> None:
        while self.waiters:
            for link in self.links:
                if link.free:
                    break
            else:
                return
            link.busy = True
            self.waiters.popleft().callback(link)

    def link_of(self, job_id: int) -> Optional[BeanstalkProtocol]:
        for link in self.links:
            proto = link.proto
            if proto is not None and job_id in proto._jobs:
                return proto
        return None


class Tube:
    """A tube of a client: commands that target it without changing the client's
    default tube (``client.tube("emails").put(body)``)."""

    def __init__(self, client: "BeanstalkClient", name: TubeName) -> None:
        self.client = client
        self._raw = v.tube_name(name)
        self.name = self._raw.decode("ascii")

    def __repr__(self) -> str:
        return f"<Tube {self.name!r}>"

    def put(self, body: Any, priority: int = DEFAULT_PRIORITY, delay: int = 0,
            ttr: int = DEFAULT_TTR) -> "Deferred[int]":
        """Put a job into this tube; fires with its id."""
        return self.client.put(body, priority, delay, ttr, tube=self._raw)

    def peek_ready(self) -> "Deferred[Job]":
        """The next ready job of this tube."""
        return self.client.peek_ready(tube=self._raw)

    def peek_delayed(self) -> "Deferred[Job]":
        """The delayed job of this tube with the shortest delay left."""
        return self.client.peek_delayed(tube=self._raw)

    def peek_buried(self) -> "Deferred[Job]":
        """The next buried job of this tube."""
        return self.client.peek_buried(tube=self._raw)

    def kick(self, bound: int) -> "Deferred[int]":
        """Kick up to ``bound`` jobs of this tube; fires with the number kicked."""
        return self.client.kick(bound, tube=self._raw)

    def stats(self) -> "Deferred[Stats]":
        """This tube's statistics."""
        return self.client.stats_tube(self._raw)

    def pause(self, delay: int) -> "Deferred[None]":
        """Pause reserves from this tube for ``delay`` seconds."""
        return self.client.pause_tube(self._raw, delay)

    def list_jobs(self, state: str, limit: int) -> "Deferred[List[int]]":
        """Ids of up to ``limit`` jobs of this tube in ``state`` (see
        :meth:`BeanstalkClient.list_jobs`)."""
        return self.client.list_jobs(self._raw, state, limit)

    def flush(self, state: Optional[str] = None) -> "Deferred[int]":
        """Delete this tube's jobs in ``state`` (None: ready, delayed and buried);
        fires with the number deleted (see :meth:`BeanstalkClient.flush_tube`)."""
        return self.client.flush_tube(self._raw, state)


class TubeSet:
    """A set of tubes to reserve from (``client.watching("a", "b").reserve()``)."""

    def __init__(self, client: "BeanstalkClient", names: Sequence[TubeName]) -> None:
        if not names:
            raise InvalidArgument("watching() needs at least one tube")
        self.client = client
        self._raw = tuple(dict.fromkeys(v.tube_name(n) for n in names))
        self.names = tuple(n.decode("ascii") for n in self._raw)

    def __repr__(self) -> str:
        return f"<TubeSet {self.names!r}>"

    def reserve(self, timeout: Optional[int] = None) -> "Deferred[Job]":
        """Reserve a job from these tubes (``timeout`` None waits forever)."""
        return self.client.reserve(timeout, tubes=self._raw)


class BeanstalkClient:
    """A Deferred-based beanstalk client that reconnects.

    :param endpoint: an endpoint string (``"tcp:host:port"``,
        ``"unix:/path"``, ``"tls:host:port"``, see
        :func:`~twisted.internet.endpoints.clientFromString`) or an
        :class:`~twisted.internet.interfaces.IStreamClientEndpoint`.
    :param reactor: the reactor (default: the global one); a ``Clock`` is
        enough when ``endpoint`` is an endpoint object (see
        :mod:`twisted_stalk.testing`).
    :param use: the default tube for puts, peeks and kicks.
    :param watch: the default tubes reserves take jobs from.
    :param timeout: response timeout in seconds for every command but
        reserves (None: none).
    :param reserve_grace: extra seconds a ``reserve-with-timeout N`` may take.
    :param connect_timeout: seconds a call waits for a connection before
        failing with :class:`ConnectTimeout` (None: forever).
    :param retry_policy: seconds to wait before reconnect attempt *n*
        (default: exponential backoff from 0.1 s to 10 s).
    :param max_job_size: largest body ``put`` sends (None: no client check).
    :param codec: encodes non-bytes bodies, decodes ``Job.value``.
    :param max_reserve_connections: most connections used for reserves at once;
        more concurrent reserves wait for one to be free.

    The connections are opened on first use (or by :meth:`connect`); close
    them with :meth:`close`.
    """

    log = Logger()

    def __init__(self, endpoint: Union[str, IStreamClientEndpoint], *,
                 reactor: Optional[IReactorTime] = None,
                 use: TubeName = DEFAULT_TUBE, watch: Sequence[TubeName] = (DEFAULT_TUBE,),
                 timeout: Optional[float] = DEFAULT_TIMEOUT,
                 reserve_grace: float = DEFAULT_RESERVE_GRACE,
                 connect_timeout: Optional[float] = 10.0,
                 retry_policy: Optional[Callable[[int], float]] = None,
                 max_job_size: Optional[int] = DEFAULT_MAX_JOB_SIZE,
                 codec: Optional[Codec] = None,
                 max_reserve_connections: int = 64) -> None:
        if reactor is None:
            from twisted.internet import reactor as _reactor
            reactor = _reactor  # type: ignore[assignment]
        self.clock: IReactorTime = reactor  # type: ignore[assignment]
        if isinstance(endpoint, str):
            self.endpoint_description = endpoint
            self.endpoint: IStreamClientEndpoint = clientFromString(reactor, endpoint)
        else:
            self.endpoint_description = repr(endpoint)
            self.endpoint = endpoint
        self.timeout = timeout
        self.reserve_grace = reserve_grace
        self.connect_timeout = connect_timeout
        self.retry_policy = retry_policy or DEFAULT_RETRY_POLICY
        self.max_job_size = max_job_size
        self.codec = codec
        if isinstance(watch, (str, bytes)):
            watch = (watch,)
        self._use: bytes = v.tube_name(use)
        self._watch: List[bytes] = list(dict.fromkeys(v.tube_name(t) for t in watch))
        if not self._watch:
            raise InvalidArgument("watch must name at least one tube")
        self._closed = False
        self._main = _Link(self, "main")
        self._pool = _ReservePool(self, max_reserve_connections)

    def __repr__(self) -> str:
        return f"<BeanstalkClient {self.endpoint_description}>"

    # ------------------------------------------------------------ lifecycle

    @property
    def used(self) -> str:
        """The default tube of puts, peeks and kicks."""
        return self._use.decode("ascii")

    @property
    def watched(self) -> Tuple[str, ...]:
        """The default watch list of reserves."""
        return tuple(t.decode("ascii") for t in self._watch)

    @property
    def connected(self) -> bool:
        """True while the main connection is up."""
        proto = self._main.proto
        return proto is not None and bool(proto.connected)

    @property
    def protocol(self) -> Optional[BeanstalkProtocol]:
        """The main connection's protocol, when connected."""
        return self._main.proto

    def start(self) -> None:
        """Start connecting (calls do this by themselves)."""
        if self._closed:
            raise ClientClosed("the client is closed")
        self._main.start()

    def connect(self) -> "Deferred[BeanstalkClient]":
        """Start, and fire with this client once the main connection is ready."""
        return self._main.later(lambda proto: succeed(self))

    def close(self) -> "Deferred[None]":
        """Close every connection.  Pending calls fail with :class:`ClientClosed`;
        reserved jobs go back to the server's ready queue."""
        self._closed = True
        waiters, self._pool.waiters = self._pool.waiters, deque()
        for w in waiters:
            w.errback(ClientClosed("the client was closed"))
        links = [self._main] + self._pool.links
        return DeferredList([link.stop() for link in links],
                            consumeErrors=True).addCallback(lambda _: None)

    def _replay(self, proto: BeanstalkProtocol) -> Deferred:
        """Bring a fresh connection to the client's default use/watch state."""
        ds: List[Deferred] = []
        if self._use != proto._using:
            ds.append(proto.use(self._use))
        for tube in self._watch:
            if tube not in proto._watching:
                ds.append(proto.watch(tube))
        for tube in list(proto._watching):
            if tube not in self._watch:
                ds.append(proto.ignore(tube))
        if not ds:
            return succeed(None)
        return gatherResults(ds, consumeErrors=True)

    # --------------------------------------------------------- default state

    def use(self, tube: TubeName) -> "Deferred[str]":
        """Make ``tube`` the default for puts, peeks and kicks (kept across
        reconnects); fires with its name."""
        try:
            raw = v.tube_name(tube)
        except InvalidArgument as e:
            return fail(e)
        self._use = raw
        return self._main.call(lambda p: p.use(raw))

    def watch(self, tube: TubeName) -> "Deferred[int]":
        """Add ``tube`` to the default watch list (kept across reconnects);
        fires with the list's length."""
        try:
            raw = v.tube_name(tube)
        except InvalidArgument as e:
            return fail(e)
        if raw not in self._watch:
            self._watch.append(raw)
        return self._main.call(lambda p: p.watch(raw))

    def ignore(self, tube: TubeName) -> "Deferred[int]":
        """Remove ``tube`` from the default watch list; fires with its length.
        Errors: :class:`NotIgnored` if it is the only tube watched."""
        try:
            raw = v.tube_name(tube)
        except InvalidArgument as e:
            return fail(e)
        if raw in self._watch and len(self._watch) > 1:
            self._watch.remove(raw)
        return self._main.call(lambda p: p.ignore(raw))

    def tube(self, name: TubeName) -> Tube:
        """Commands targeting tube ``name`` (``client.tube("emails").put(...)``)."""
        return Tube(self, name)

    def watching(self, *names: TubeName) -> TubeSet:
        """Reserves from these tubes (``client.watching("a", "b").reserve()``)."""
        return TubeSet(self, names)

    # ------------------------------------------------------------- producing

    def put(self, body: Any, priority: int = DEFAULT_PRIORITY, delay: int = 0,
            ttr: int = DEFAULT_TTR, tube: Optional[TubeName] = None) -> "Deferred[int]":
        """Put a job into ``tube`` (default: the client's tube); fires with its id.

        ``body``: bytes, str (UTF-8) or anything the codec encodes.
        Errors: :class:`Buried` (``.job_id``), :class:`JobTooBig`,
        :class:`Draining`, :class:`InvalidArgument`.
        """
        target = self._use if tube is None else tube
        proto = self._main.proto
        if proto is not None and proto.connected:
            return proto.put(body, priority, delay, ttr, target)
        return self._main.later(lambda p: p.put(body, priority, delay, ttr, target))

    def peek(self, job_id: int) -> "Deferred[Job]":
        """The job with this id. Errors: :class:`NotFound`."""
        return self._main.call(lambda p: p.peek(job_id))

    def peek_ready(self, tube: Optional[TubeName] = None) -> "Deferred[Job]":
        """The next ready job of ``tube`` (default: the client's tube)."""
        target = self._use if tube is None else tube
        return self._main.call(lambda p: p.peek_ready(target))

    def peek_delayed(self, tube: Optional[TubeName] = None) -> "Deferred[Job]":
        """The delayed job with the shortest delay left in ``tube``."""
        target = self._use if tube is None else tube
        return self._main.call(lambda p: p.peek_delayed(target))

    def peek_buried(self, tube: Optional[TubeName] = None) -> "Deferred[Job]":
        """The next buried job of ``tube``."""
        target = self._use if tube is None else tube
        return self._main.call(lambda p: p.peek_buried(target))

    def kick(self, bound: int, tube: Optional[TubeName] = None) -> "Deferred[int]":
        """Kick up to ``bound`` buried (else delayed) jobs of ``tube``."""
        target = self._use if tube is None else tube
        return self._main.call(lambda p: p.kick(bound, target))

    def kick_job(self, job_id: Union[int, Job]) -> "Deferred[None]":
        """Kick one buried or delayed job. Errors: :class:`NotFound`."""
        jid = job_id.id if isinstance(job_id, Job) else job_id
        return self._main.call(lambda p: p.kick_job(jid))

    # ------------------------------------------------------------- consuming

    def reserve(self, timeout: Optional[int] = None,
                tubes: Optional[Sequence[TubeName]] = None) -> "Deferred[Job]":
        """Reserve a job from ``tubes`` (default: the client's watch list).

        Runs on a connection of the reserve pool, so it never delays other
        calls.  ``timeout`` None waits forever; N sends
        ``reserve-with-timeout N``.  Errors: :class:`TimedOut`,
        :class:`DeadlineSoon`.  Cancelling the Deferred while the reserve is
        in flight closes that pool connection.
        """
        try:
            if timeout is not None:
                timeout = v.uint(timeout, "reserve timeout", MAX_RESERVE_TIMEOUT)
            if tubes is None:
                watching: Tuple[bytes, ...] = tuple(self._watch)
            else:
                if isinstance(tubes, (str, bytes)):
                    tubes = (tubes,)
                watching = tuple(v.tube_name(t) for t in tubes)
                if not watching:
                    raise InvalidArgument("a reserve must watch at least one tube")
        except InvalidArgument as e:
            return fail(e)
        return self._on_pool(lambda p: p.reserve(timeout, watching))

    def reserve_with_timeout(self, timeout: int,
                             tubes: Optional[Sequence[TubeName]] = None) -> "Deferred[Job]":
        """``reserve-with-timeout``: :meth:`reserve` with a timeout (0 answers at once)."""
        return self.reserve(timeout if timeout is not None else 0, tubes)

    def reserve_job(self, job_id: int) -> "Deferred[Job]":
        """Reserve the job with this id. Errors: :class:`NotFound`."""
        return self._on_pool(lambda p: p.reserve_job(job_id))

    def _on_pool(self, fn: Callable[[BeanstalkProtocol], "Deferred[Job]"]) -> "Deferred[Job]":
        if self._closed:
            return fail(ClientClosed("the client is closed"))
        pool = self._pool

        def run(link: _Link) -> "Deferred[Job]":
            def done(result: Any) -> Any:
                pool.release(link)
                return result
            return link.call(fn).addBoth(done)
        return pool.acquire().addCallback(run)

    def _job_target(self, job_id: Union[int, Job]) -> Tuple[Any, Optional[Job]]:
        if isinstance(job_id, Job):
            return job_id.id, job_id
        return job_id, None

    def delete(self, job: Union[int, Job]) -> "Deferred[None]":
        """Delete a job (a :class:`Job`, or an id: sent on the connection that
        reserved it if this client did). Errors: :class:`NotFound`."""
        jid, obj = self._job_target(job)
        if obj is not None:
            return obj.delete()
        proto = self._pool.link_of(jid) if isinstance(jid, int) else None
        if proto is not None:
            return proto.delete(jid)
        return self._main.call(lambda p: p.delete(jid))

    def release(self, job: Union[int, Job], priority: int = DEFAULT_PRIORITY,
                delay: int = 0) -> "Deferred[None]":
        """Release a job this client reserved. Errors: :class:`NotFound`, :class:`Buried`."""
        jid, obj = self._job_target(job)
        if obj is not None:
            return obj.release(priority, delay)
        proto = self._pool.link_of(jid) if isinstance(jid, int) else None
        if proto is not None:
            return proto.release(jid, priority, delay)
        return self._main.call(lambda p: p.release(jid, priority, delay))

    def bury(self, job: Union[int, Job], priority: int = DEFAULT_PRIORITY) -> "Deferred[None]":
        """Bury a job this client reserved. Errors: :class:`NotFound`."""
        jid, obj = self._job_target(job)
        if obj is not None:
            return obj.bury(priority)
        proto = self._pool.link_of(jid) if isinstance(jid, int) else None
        if proto is not None:
            return proto.bury(jid, priority)
        return self._main.call(lambda p: p.bury(jid, priority))

    def touch(self, job: Union[int, Job]) -> "Deferred[None]":
        """Restart the TTR of a job this client reserved. Errors: :class:`NotFound`."""
        jid, obj = self._job_target(job)
        if obj is not None:
            return obj.touch()
        proto = self._pool.link_of(jid) if isinstance(jid, int) else None
        if proto is not None:
            return proto.touch(jid)
        return self._main.call(lambda p: p.touch(jid))

    # ------------------------------------------------------------ inspecting

    def stats(self) -> "Deferred[Stats]":
        """The server's statistics (ints for numbers)."""
        return self._main.call(lambda p: p.stats())

    def stats_job(self, job_id: Union[int, Job]) -> "Deferred[Stats]":
        """A job's statistics. Errors: :class:`NotFound`."""
        jid = job_id.id if isinstance(job_id, Job) else job_id
        return self._main.call(lambda p: p.stats_job(jid))

    def stats_tube(self, tube: TubeName) -> "Deferred[Stats]":
        """A tube's statistics. Errors: :class:`NotFound`."""
        return self._main.call(lambda p: p.stats_tube(tube))

    def list_tubes(self) -> "Deferred[List[str]]":
        """All existing tubes."""
        return self._main.call(lambda p: p.list_tubes())

    def list_tube_used(self) -> "Deferred[str]":
        """The client's tube, as the server reports it for the main connection."""
        return self._main.call(lambda p: p.list_tube_used(self._use))

    def list_tubes_watched(self) -> "Deferred[List[str]]":
        """The client's watch list, as the server reports it for the main connection."""
        return self._main.call(lambda p: p.list_tubes_watched(tuple(self._watch)))

    def pause_tube(self, tube: TubeName, delay: int) -> "Deferred[None]":
        """Pause reserves from ``tube`` for ``delay`` seconds. Errors: :class:`NotFound`."""
        return self._main.call(lambda p: p.pause_tube(tube, delay))

    # ------------------------------------------- extension verbs (our server)

    def capabilities(self) -> "Deferred[FrozenSet[str]]":
        """The extension verbs the server serves (``{"list-jobs", "flush-tube",
        "capabilities"}`` from ours with ``--extensions``; the empty set from a
        stock beanstalkd, which answers ``UNKNOWN_COMMAND``).  Asked once per
        connection: after a reconnect it is asked again."""
        return self._main.call(lambda p: p.capabilities())

    def list_jobs(self, tube: TubeName, state: str, limit: int) -> "Deferred[List[int]]":
        """Ids of up to ``limit`` jobs of ``tube`` in ``state`` (``"ready"``,
        ``"delayed"``, ``"buried"`` or ``"reserved"``), without reserving any.

        Uses ``list-jobs`` when the server advertises it.  Otherwise (a stock
        server) it falls back on ``peek-<state>``, which gives **at most the
        first job** of that state, and cannot list reserved jobs
        (:class:`UnknownCommand`).  Errors: :class:`NotFound` (no such tube).
        """
        return self._main.call(lambda p: p.list_jobs(tube, state, limit))

    def flush_tube(self, tube: TubeName, state: Optional[str] = None) -> "Deferred[int]":
        """Delete the jobs of ``tube`` in ``state`` (None: ready, delayed and
        buried; never reserved ones); fires with the number deleted.

        Uses ``flush-tube`` when the server advertises it (one command,
        atomic).  Otherwise it peeks and deletes job by job (ready, then
        delayed, then buried), at most as many of each as the tube held at the
        start; ``"reserved"`` then fails with :class:`UnknownCommand`.
        Errors: :class:`NotFound` (no such tube).
        """
        return self._main.call(lambda p: p.flush_tube(tube, state))


def connect(endpoint: Union[str, IStreamClientEndpoint], *,
            reactor: Optional[IReactorTime] = None, **settings: Any
            ) -> "Deferred[BeanstalkProtocol]":
    """Open one plain connection (no reconnect, no pool); fires with its protocol.

    ``settings`` are :class:`BeanstalkClientFactory` keyword arguments
    (``timeout``, ``reserve_grace``, ``max_job_size``, ``codec``).
    """
    if reactor is None:
        from twisted.internet import reactor as _reactor
        reactor = _reactor  # type: ignore[assignment]
    target = clientFromString(reactor, endpoint) if isinstance(endpoint, str) else endpoint
    factory = BeanstalkClientFactory(reactor, **settings)
    return target.connect(factory)  # type: ignore[return-value]
