# -*- test-case-name: tests.test_client_memory,tests.test_client_reserve -*-
"""The reconnecting client: one connection for commands, more for blocking reserves.

:class:`BeanstalkClient` keeps a *main* connection (a Twisted
:class:`~twisted.application.internet.ClientService`, so it reconnects with
backoff) for every command except reserves, and separate *reserve*
connections (:class:`~twisted_stalk.client.reserve.ReserveConnections`) so
that a ``reserve`` waiting for a job never holds up puts or stats.  A reserved
:class:`~twisted_stalk.client.job.Job` is bound to the connection that
reserved it; that connection is not used for another reserve until the job is
deleted, released or buried, or its TTR has certainly run out.

Every connection, on every (re)connect, is brought to the client's default
state (``use`` tube, ``watch``/``ignore`` list) before any call is sent on it;
calls made while disconnected wait (up to ``connect_timeout``) and are sent in
order once connected.  Per-call tube targeting (``client.tube("x").put``,
``client.watching("a", "b").reserve``) sends only the ``use``/``watch``/
``ignore`` needed on the connection the call goes to.
"""
from __future__ import annotations

import math
from typing import (
    Any,
    Callable,
    Dict,
    FrozenSet,
    List,
    Optional,
    Sequence,
    Tuple,
    TypeVar,
    Union,
)

from twisted.internet.defer import Deferred, DeferredList, fail, succeed
from twisted.internet.endpoints import clientFromString
from twisted.internet.interfaces import IReactorTime, IStreamClientEndpoint
from twisted.logger import Logger

from ..protocol.commands import command_spec
from ..protocol.constants import DEFAULT_MAX_JOB_SIZE, DEFAULT_TUBE
from ..protocol.replies import Reply
from ..protocol.yaml import StatValue
from . import _validate as v
from .defaults import TubeDefaults
from .errors import ClientClosed, ConnectionLost, InvalidArgument
from .job import DEFAULT_PRIORITY, DEFAULT_TTR, Codec, Job
from .link import DEFAULT_RETRY_POLICY, MainLink
from .protocol import (
    DEFAULT_RESERVE_GRACE,
    DEFAULT_TIMEOUT,
    MAX_RESERVE_TIMEOUT,
    BeanstalkClientFactory,
    BeanstalkProtocol,
)
from .reserve import ReserveConnections
from .tubes import Tube, TubeSet

T = TypeVar("T")
TubeName = Union[str, bytes]
Stats = Dict[str, StatValue]


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
    :param on_connect: called as ``on_connect(client, reconnected)`` each time
        the main connection is ready (``reconnected`` False the first time).
    :param on_disconnect: called as ``on_disconnect(client, reason)`` each
        time the main connection closes (not after :meth:`close`).
    :param name: how logs and jobs (:attr:`Job.server`) name the server
        (default: the endpoint string).
    :param defaults: a :class:`~twisted_stalk.client.defaults.TubeDefaults`
        to share with other clients (a pool's servers share one); when given,
        ``use`` and ``watch`` are ignored.

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
                 max_reserve_connections: int = 64,
                 on_connect: Optional[Callable[["BeanstalkClient", bool], Any]] = None,
                 on_disconnect: Optional[Callable[["BeanstalkClient", str], Any]] = None,
                 name: Optional[str] = None,
                 defaults: Optional[TubeDefaults] = None) -> None:
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
        #: The server's name in logs, errors and :attr:`Job.server`.
        self.name: str = name or self.endpoint_description
        self.on_connect = on_connect
        self.on_disconnect = on_disconnect
        self.timeout = timeout
        self.reserve_grace = reserve_grace
        self.connect_timeout = connect_timeout
        self.retry_policy = retry_policy or DEFAULT_RETRY_POLICY
        self.max_job_size = max_job_size
        self.codec = codec
        #: The default tube and watch list of calls that name none (kept
        #: across reconnects; shared by the servers of a pool).
        self.defaults: TubeDefaults = defaults or TubeDefaults(use, watch)
        self._closed = False
        self._main = MainLink(self)
        self._reserves = ReserveConnections(self, max_reserve_connections)

    def __repr__(self) -> str:
        return f"<BeanstalkClient {self.name}>"

    # ------------------------------------------------------------ lifecycle

    @property
    def used(self) -> str:
        """The default tube of puts, peeks and kicks."""
        return self.defaults.used

    @property
    def watched(self) -> Tuple[str, ...]:
        """The default watch list of reserves."""
        return self.defaults.watched

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called."""
        return self._closed

    @property
    def connected(self) -> bool:
        """True while the main connection is up."""
        proto = self._main.proto
        return proto is not None and bool(proto.connected)

    @property
    def protocol(self) -> Optional[BeanstalkProtocol]:
        """The main connection's protocol, when connected."""
        return self._main.proto

    @property
    def main_wait(self) -> float:
        """Seconds the oldest command on the main connection has waited for
        its reply (0.0 when none waits or it is not connected): a server that
        keeps this growing is stalled (the pool passes it over)."""
        proto = self._main.proto
        return proto.head_wait if proto is not None else 0.0

    def first_attempt(self) -> "Deferred[None]":
        """Start connecting; fires when the main connection is made, or fails
        at the first attempt that does (later attempts go on)."""
        d = self._main.service.whenConnected(failAfterFailures=1)
        self.start()
        return d.addCallback(lambda _: None)

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
        closing = self._reserves.close() + [self._main.stop()]
        return DeferredList(closing, consumeErrors=True).addCallback(lambda _: None)

    def _connection_made(self, reconnected: bool) -> None:
        if reconnected:
            self.log.info("reconnected to {server}", server=self.name)
        if self.on_connect is not None:
            self._hook(self.on_connect, self, reconnected)

    def _connection_lost(self, reason: str) -> None:
        self._reserves.wake()
        if self._closed:
            return
        self.log.info("connection to {server} lost: {reason}", server=self.name, reason=reason)
        if self.on_disconnect is not None:
            self._hook(self.on_disconnect, self, reason)

    def _hook(self, hook: Callable[..., Any], *args: Any) -> None:
        try:
            hook(*args)
        except Exception:
            self.log.failure("the {hook!r} hook failed", hook=hook)

    # --------------------------------------------------------- default state

    def use(self, tube: TubeName) -> "Deferred[str]":
        """Make ``tube`` the default for puts, peeks and kicks (kept across
        reconnects); fires with its name."""
        try:
            raw = self.defaults.set_use(tube)
        except InvalidArgument as e:
            return fail(e)
        return self._main.call(lambda p: p.use(raw))

    def watch(self, tube: TubeName) -> "Deferred[int]":
        """Add ``tube`` to the default watch list (kept across reconnects);
        fires with the list's length."""
        try:
            raw = self.defaults.add_watch(tube)
        except InvalidArgument as e:
            return fail(e)
        return self._main.call(lambda p: p.watch(raw))

    def ignore(self, tube: TubeName) -> "Deferred[int]":
        """Remove ``tube`` from the default watch list; fires with its length.
        Errors: :class:`NotIgnored` if it is the only tube watched."""
        try:
            raw = self.defaults.remove_watch(tube)
        except InvalidArgument as e:
            return fail(e)
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
        target = self.defaults.use if tube is None else tube
        proto = self._main.proto
        if proto is not None and proto.connected:
            return proto.put(body, priority, delay, ttr, target)
        return self._main.later(lambda p: p.put(body, priority, delay, ttr, target))

    def put_now(self, body: Any, priority: int = DEFAULT_PRIORITY, delay: int = 0,
                ttr: int = DEFAULT_TTR, tube: Optional[TubeName] = None) -> "Deferred[int]":
        """:meth:`put` on the main connection as it is now: fails at once with
        :class:`ConnectionLost` when it is not connected, instead of waiting
        for a reconnect (a pool then tries another server)."""
        proto = self._main.proto
        if proto is None:
            return fail(ConnectionLost(f"not connected to {self.name}"))
        return proto.put(body, priority, delay, ttr, self.defaults.use if tube is None else tube)

    def peek(self, job_id: int) -> "Deferred[Job]":
        """The job with this id. Errors: :class:`NotFound`."""
        return self._main.call(lambda p: p.peek(job_id))

    def peek_ready(self, tube: Optional[TubeName] = None) -> "Deferred[Job]":
        """The next ready job of ``tube`` (default: the client's tube)."""
        target = self.defaults.use if tube is None else tube
        return self._main.call(lambda p: p.peek_ready(target))

    def peek_delayed(self, tube: Optional[TubeName] = None) -> "Deferred[Job]":
        """The delayed job with the shortest delay left in ``tube``."""
        target = self.defaults.use if tube is None else tube
        return self._main.call(lambda p: p.peek_delayed(target))

    def peek_buried(self, tube: Optional[TubeName] = None) -> "Deferred[Job]":
        """The next buried job of ``tube``."""
        target = self.defaults.use if tube is None else tube
        return self._main.call(lambda p: p.peek_buried(target))

    def kick(self, bound: int, tube: Optional[TubeName] = None) -> "Deferred[int]":
        """Kick up to ``bound`` buried (else delayed) jobs of ``tube``."""
        target = self.defaults.use if tube is None else tube
        return self._main.call(lambda p: p.kick(bound, target))

    def kick_job(self, job_id: Union[int, Job]) -> "Deferred[None]":
        """Kick one buried or delayed job. Errors: :class:`NotFound`."""
        jid = job_id.id if isinstance(job_id, Job) else job_id
        return self._main.call(lambda p: p.kick_job(jid))

    # ------------------------------------------------------------- consuming

    def reserve(self, timeout: Optional[int] = None,
                tubes: Optional[Sequence[TubeName]] = None) -> "Deferred[Job]":
        """Reserve a job from ``tubes`` (default: the client's watch list).

        Runs on a reserve connection, so it never delays other calls.
        ``timeout`` None waits forever; N sends ``reserve-with-timeout`` and
        the N seconds also cover waiting for a free reserve connection (all
        ``max_reserve_connections`` in use): the wait and the reserve end
        within N seconds with :class:`TimedOut`.  Opening a new reserve
        connection is bounded by ``connect_timeout`` (:class:`ConnectTimeout`).
        Cancelling the Deferred while the reserve is in flight closes that
        reserve connection (the server puts back a job it was just giving).
        Never :class:`DeadlineSoon`: the client reserves only on connections
        that hold no job.
        """
        try:
            if timeout is not None:
                timeout = v.uint(timeout, "reserve timeout", MAX_RESERVE_TIMEOUT)
            if tubes is None:
                watching: Tuple[bytes, ...] = self.defaults.watch
            else:
                if isinstance(tubes, (str, bytes)):
                    tubes = (tubes,)
                watching = tuple(v.tube_name(t) for t in tubes)
                if not watching:
                    raise InvalidArgument("a reserve must watch at least one tube")
        except InvalidArgument as e:
            return fail(e)
        if timeout is None:
            return self._on_pool(lambda p, left: p.reserve(None, watching), None)
        return self._on_pool(lambda p, left: p.reserve(left, watching), timeout)

    def reserve_with_timeout(self, timeout: int,
                             tubes: Optional[Sequence[TubeName]] = None) -> "Deferred[Job]":
        """``reserve-with-timeout``: :meth:`reserve` with a timeout (0 answers at once)."""
        return self.reserve(timeout if timeout is not None else 0, tubes)

    def reserve_job(self, job_id: int) -> "Deferred[Job]":
        """Reserve the job with this id. Errors: :class:`NotFound`."""
        return self._on_pool(lambda p, left: p.reserve_job(job_id), None)

    def _on_pool(self, fn: Callable[[BeanstalkProtocol, int], "Deferred[Job]"],
                 timeout: Optional[int]) -> "Deferred[Job]":
        """Run ``fn(connection, seconds left)`` on a free reserve connection.

        The wait for the connection comes out of ``timeout``; what is left is
        rounded *up* to whole seconds (and never exceeds ``timeout``), so the
        server's wait is never shorter than asked: a ``reserve(timeout=1)``
        that got its connection after a millisecond still waits a second."""
        if self._closed:
            return fail(ClientClosed("the client is closed"))
        reserves = self._reserves
        deadline = None if timeout is None else self.clock.seconds() + timeout

        def run(proto: BeanstalkProtocol) -> "Deferred[Job]":
            left = 0
            if timeout is not None and deadline is not None:
                left = min(timeout, max(0, math.ceil(deadline - self.clock.seconds())))

            def done(result: Any) -> Any:
                reserves.release(proto)
                if isinstance(result, Job):
                    reserves.reserved(proto, result)
                return result
            return fn(proto, left).addBoth(done)
        return reserves.acquire(deadline).addCallback(run)

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
        proto = self._reserves.holding(jid) if isinstance(jid, int) else None
        if proto is not None:
            return proto.delete(jid)
        return self._main.call(lambda p: p.delete(jid))

    def release(self, job: Union[int, Job], priority: int = DEFAULT_PRIORITY,
                delay: int = 0) -> "Deferred[None]":
        """Release a job this client reserved. Errors: :class:`NotFound`, :class:`Buried`."""
        jid, obj = self._job_target(job)
        if obj is not None:
            return obj.release(priority, delay)
        proto = self._reserves.holding(jid) if isinstance(jid, int) else None
        if proto is not None:
            return proto.release(jid, priority, delay)
        return self._main.call(lambda p: p.release(jid, priority, delay))

    def bury(self, job: Union[int, Job], priority: int = DEFAULT_PRIORITY) -> "Deferred[None]":
        """Bury a job this client reserved. Errors: :class:`NotFound`."""
        jid, obj = self._job_target(job)
        if obj is not None:
            return obj.bury(priority)
        proto = self._reserves.holding(jid) if isinstance(jid, int) else None
        if proto is not None:
            return proto.bury(jid, priority)
        return self._main.call(lambda p: p.bury(jid, priority))

    def touch(self, job: Union[int, Job]) -> "Deferred[None]":
        """Restart the TTR of a job this client reserved. Errors: :class:`NotFound`."""
        jid, obj = self._job_target(job)
        if obj is not None:
            return obj.touch()
        proto = self._reserves.holding(jid) if isinstance(jid, int) else None
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
        """The tube the server says the main connection uses (the default tube,
        unless a per-call target such as ``client.tube("x").put`` switched it
        since; :attr:`used` is the client's default)."""
        return self._main.call(lambda p: p.list_tube_used())

    def list_tubes_watched(self) -> "Deferred[List[str]]":
        """The tubes the server says the main connection watches (the client's
        default watch list, replayed on every connection; :attr:`watched`
        is the client's own idea of it)."""
        return self._main.call(lambda p: p.list_tubes_watched())

    def pause_tube(self, tube: TubeName, delay: int) -> "Deferred[None]":
        """Pause reserves from ``tube`` for ``delay`` seconds. Errors: :class:`NotFound`."""
        return self._main.call(lambda p: p.pause_tube(tube, delay))

    def command(self, name: str, *args: Union[int, str, bytes],
                body: Optional[bytes] = None) -> "Deferred[Reply]":
        """Send any command of the table on the main connection and fire with
        its decoded :class:`~twisted_stalk.protocol.replies.Reply`, error
        replies included (see :meth:`BeanstalkProtocol.command`)::

            reply = await client.command("stats-tube", "emails")
            reply.ok, reply.word, reply.value     # True, "OK", {...}

        Reserves and ``quit`` are refused (:class:`InvalidArgument`): use
        :meth:`reserve`, which keeps the main connection free.  A ``use``,
        ``watch`` or ``ignore`` sent this way changes the main connection
        only, not the client's defaults.
        """
        spec = command_spec(name)
        if spec is not None and (spec.reserves or name == "quit"):
            return fail(InvalidArgument(f"{name} is not sent with command(): use "
                                        f"{'close()' if name == 'quit' else 'reserve()'}"))
        return self._main.call(lambda p: p.command(name, *args, body=body))

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
