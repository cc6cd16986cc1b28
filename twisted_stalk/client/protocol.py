# -*- test-case-name: tests.test_client_protocol -*-
"""One beanstalk connection: a Deferred per command, replies matched in FIFO order.

Modelled on Twisted's ``twisted.protocols.memcache``: a queue of pending
commands, each with a :class:`~twisted.internet.defer.Deferred`; replies are
matched strictly in order; a data block (job body, YAML) is read raw by the
length its reply line announced; one timer enforces the response timeout;
losing the connection fails every pending Deferred.  Beanstalk needs more:

* commands are encoded from the command table
  (:func:`twisted_stalk.protocol.commands.encode_command`) and replies are
  read by the sans-IO :class:`twisted_stalk.protocol.reader.ReplyReader`,
  which decodes each against the command it answers, because reply words
  are ambiguous on their own (``BURIED <id>`` after ``put`` is an error,
  ``BURIED`` after ``bury`` is success); this class only matches the
  decoded replies to their Deferreds;
* a reply that fits no reply of the head command drops the connection
  (:class:`~twisted_stalk.client.errors.UnexpectedReply`) instead of
  mismatching every later reply;
* ``reserve`` may wait forever, so it has no response timeout, and
  ``reserve-with-timeout N`` gets ``N + reserve_grace`` seconds;
* commands issued while a reserve is in flight are *held* (not written) until
  it is answered, since the server would not read them earlier anyway.
  Cancelling a held command removes it; cancelling a command already written
  closes the connection (the protocol has no way to take a command back) once
  the commands written before it have their replies, and fails the commands
  after it with a :class:`ConnectionLost` that says so;
* per-call tube targeting: ``put(..., tube=b"x")`` and ``reserve(...,
  watching=(b"a", b"b"))`` send only the ``use``/``watch``/``ignore`` needed to
  get the connection into that state (tracked as the state the pipelined
  commands will leave it in), so callers sharing a connection never race;
* our server's extension verbs (``--extensions``): :meth:`~BeanstalkProtocol.
  capabilities` asks once per connection which it serves, and
  :meth:`~BeanstalkProtocol.list_jobs` / :meth:`~BeanstalkProtocol.flush_tube`
  use them when advertised and fall back on stock commands otherwise (the
  flush fallback is :class:`twisted_stalk.protocol.flush.PeekDeleteFlush`,
  the shell's too).
"""
from __future__ import annotations

from collections import deque
from typing import (
    Any,
    Callable,
    Deque,
    Dict,
    FrozenSet,
    Iterable,
    List,
    Optional,
    Sequence,
    Tuple,
    Union,
)

from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.internet.protocol import Factory, Protocol
from twisted.logger import Logger
from twisted.python.failure import Failure

from ..protocol.commands import command_format, encode_command, validate_command_args
from ..protocol.constants import DEFAULT_MAX_JOB_SIZE, DEFAULT_TUBE, U32_MAX
from ..protocol.flush import PeekDeleteFlush, flush_budgets
from ..protocol.reader import ReplyReader
from ..protocol.replies import BadFormat, NotFound, Reply, UnknownCommand
from ..protocol.replies import UnexpectedReply as _OutOfStep
from ..protocol.yaml import StatValue
from . import _validate as v
from .errors import (
    ClientClosed,
    ConnectionLost,
    InvalidArgument,
    ResponseTimeout,
    UnexpectedReply,
)
from .job import DEFAULT_PRIORITY, DEFAULT_TTR, Codec, Job

TubeName = Union[str, bytes]
Stats = Dict[str, StatValue]

#: Default response timeout, in seconds.
DEFAULT_TIMEOUT = 30.0
#: Largest ``reserve-with-timeout`` the server takes as such (a C int).
MAX_RESERVE_TIMEOUT = 2**31 - 1
#: Extra seconds a ``reserve-with-timeout N`` may take beyond N.
DEFAULT_RESERVE_GRACE = 5.0

# put is the hot path: its format from the table, filled in place.
_PUT = command_format("put")


class _Call:
    """A command waiting for its reply.

    ``convert(proto, reply)`` makes the result of a success reply; an error
    reply fails the Deferred with its exception, or with ``replies`` set is
    the result too (the flush fallback reads replies, not exceptions)."""

    __slots__ = ("name", "data", "deferred", "timeout", "convert", "blocking", "replies",
                 "cancelled")

    def __init__(self, name: str, data: bytes, deferred: Optional[Deferred],
                 timeout: Optional[float], convert: Optional[Callable[..., Any]],
                 blocking: bool = False, replies: bool = False) -> None:
        self.name = name
        self.data = data
        self.deferred = deferred
        self.timeout = timeout
        self.convert = convert
        self.blocking = blocking
        self.replies = replies
        #: Set when the call was cancelled after it was written: why the
        #: connection closes once the calls written before it are answered.
        self.cancelled: Optional[str] = None


def _job_id(proto: "BeanstalkProtocol", reply: Reply) -> Optional[int]:
    return reply.job_id


def _none(proto: "BeanstalkProtocol", reply: Reply) -> None:
    return None


def _reserved(proto: "BeanstalkProtocol", reply: Reply, tube: Optional[str] = None) -> Job:
    job_id = reply.job_id
    assert job_id is not None and reply.body is not None
    job = Job(job_id, reply.body, reserved=True, proto=proto, client=proto.client,
              codec=proto.codec, tube=tube)
    job._granted_at = proto.clock.seconds()
    jobs = proto._jobs
    old = jobs.get(job_id)
    if old is not None:  # reserved again here: the first reservation's TTR ran out
        old._expire("its TTR ran out: the server took it back, and this connection "
                    "reserved it again (as another Job)")
    jobs[job_id] = job
    return job


def _reserved_in(tube: bytes) -> Callable[["BeanstalkProtocol", Reply], Job]:
    """``_reserved`` for a reserve watching ``tube`` only: the job's tube is known."""
    name = tube.decode("ascii")
    return lambda proto, reply: _reserved(proto, reply, name)


def _found(proto: "BeanstalkProtocol", reply: Reply) -> Job:
    assert reply.job_id is not None and reply.body is not None
    return Job(reply.job_id, reply.body, reserved=False, proto=proto, client=proto.client,
               codec=proto.codec)


def _value(proto: "BeanstalkProtocol", reply: Reply) -> Any:
    return reply.value


def _reply(proto: "BeanstalkProtocol", reply: Reply) -> Reply:
    return reply


class BeanstalkProtocol(Protocol):
    """A beanstalk client connection.

    Every method sends one command (plus any ``use``/``watch``/``ignore`` its
    tube arguments need) and returns a Deferred of its typed result, or fails
    it with the :mod:`~twisted_stalk.client.errors` class of the error reply.
    Any number of calls may be outstanding; they are answered in order.

    :param clock: the reactor (or a ``Clock``) for the response timer.
    :param timeout: seconds the command at the head of the pipeline may wait
        for its reply (None: forever); ``reserve`` never times out and
        ``reserve-with-timeout N`` gets ``N + reserve_grace``.
    :param max_job_size: largest body ``put`` sends (None: no check).
    :param codec: encodes non-bytes bodies and decodes ``Job.value``.
    """

    log = Logger()

    #: The client this connection belongs to, if any (jobs use it for commands
    #: that need no particular connection).
    client: Any = None
    #: Called with no argument when the last job reserved on this connection
    #: is disposed of (the reserve pool uses it).
    on_jobs_done: Optional[Callable[[], None]] = None

    def __init__(self, clock: Optional[IReactorTime] = None, *,
                 timeout: Optional[float] = DEFAULT_TIMEOUT,
                 reserve_grace: float = DEFAULT_RESERVE_GRACE,
                 max_job_size: Optional[int] = DEFAULT_MAX_JOB_SIZE,
                 codec: Optional[Codec] = None) -> None:
        if clock is None:
            from twisted.internet import reactor as clock  # type: ignore[no-redef]
        self.clock: IReactorTime = clock  # type: ignore[assignment]
        self.timeout = timeout
        self.reserve_grace = reserve_grace
        self.max_job_size = max_job_size
        self.codec = codec
        self.connected = False
        self._inflight: Deque[_Call] = deque()
        self._held: Deque[_Call] = deque()
        self._blocked = False
        #: Decodes the replies, against a FIFO of the names of _inflight.
        self._reader = ReplyReader()
        self._expect = self._reader.expect
        self._timer: Optional[IDelayedCall] = None
        self._timer_at = 0.0
        self._head_since = 0.0
        self._closed_reason: Optional[str] = None
        self._quit: Optional[Deferred] = None
        self._did_quit = False
        self._conn_lost = False
        self._lost_waiters: List[Deferred] = []
        #: The tube the connection uses / watches once every sent command is served.
        self._using: bytes = DEFAULT_TUBE
        self._watching: List[bytes] = [DEFAULT_TUBE]
        #: Jobs reserved on this connection and not yet deleted/released/buried.
        self._jobs: Dict[int, Job] = {}
        self._cancel_cb = self._cancel
        #: Set when a command was cancelled after it was written: the
        #: connection closes once the commands before it are answered.
        self._closing_after_cancel = False
        #: The extension verbs the server advertised (None: not asked yet).
        self._capabilities: Optional[FrozenSet[str]] = None
        self._capabilities_waiting: Optional[List[Deferred]] = None

    # ---------------------------------------------------------------- overridable

    def callLater(self, delay: float, f: Callable[..., Any], *args: Any) -> IDelayedCall:
        """Schedule the response timer (override in tests, as memcache allows)."""
        return self.clock.callLater(delay, f, *args)

    # ------------------------------------------------------------------ state

    @property
    def using(self) -> str:
        """The tube this connection will be using once its sent commands are served."""
        return self._using.decode("ascii")

    @property
    def watching(self) -> Tuple[str, ...]:
        """The watch list the connection will have once its sent commands are served."""
        return tuple(t.decode("ascii") for t in self._watching)

    @property
    def pending(self) -> int:
        """Calls sent (or held) and not yet answered."""
        return len(self._inflight) + len(self._held)

    @property
    def usable(self) -> bool:
        """Connected and not about to close (no cancelled command in flight)."""
        return bool(self.connected) and not self._closing_after_cancel

    @property
    def blocked(self) -> bool:
        """True while a reserve is in flight (later commands are held)."""
        return self._blocked

    @property
    def head_wait(self) -> float:
        """Seconds the oldest call still waiting for a reply has waited (0 when
        none is; a blocking reserve does not count)."""
        inflight = self._inflight
        if not inflight or inflight[0].blocking:
            return 0.0
        return self.clock.seconds() - self._head_since

    @property
    def reserved_jobs(self) -> Tuple[Job, ...]:
        """Jobs reserved on this connection and not yet disposed of."""
        return tuple(self._jobs.values())

    def when_lost(self) -> "Deferred[None]":
        """A Deferred that fires (with None) once the connection has closed."""
        d: Deferred = Deferred()
        if self._conn_lost:
            d.callback(None)
        else:
            self._lost_waiters.append(d)
        return d

    # ------------------------------------------------------------- connection

    def connectionMade(self) -> None:
        self.connected = True

    def connectionLost(self, reason: Failure = None) -> None:  # type: ignore[assignment]
        self.connected = False
        self._conn_lost = True
        why = reason.getErrorMessage() if reason is not None else "connection closed"
        if self._closed_reason is None:
            self._closed_reason = f"connection lost: {why}"
        self._fail_all(self._closed_reason)
        if self._quit is not None:
            d, self._quit = self._quit, None
            d.callback(None)
        waiters, self._lost_waiters = self._lost_waiters, []
        for d in waiters:
            d.callback(None)

    def _fail_all(self, reason: str, head_error: Optional[Exception] = None,
                  exclude: Optional[Deferred] = None,
                  error: Callable[[str], Exception] = ConnectionLost) -> None:
        timer = self._timer
        if timer is not None:
            self._timer = None
            if timer.active():
                timer.cancel()
        calls = list(self._inflight)
        calls.extend(self._held)
        self._inflight.clear()
        self._held.clear()
        self._blocked = False
        self._reader.reset()
        jobs = list(self._jobs.values())
        self._jobs.clear()
        for job in jobs:
            job._mark_lost(reason)
        first = True
        for call in calls:
            d = call.deferred
            if d is not None and d is not exclude and not d.called:
                if first and head_error is not None:
                    d.errback(head_error)
                else:
                    d.errback(error(reason))
            first = False

    def drop(self, reason: str, head_error: Optional[Exception] = None,
             exclude: Optional[Deferred] = None) -> None:
        """Close the connection now, failing every pending call.

        The head call gets ``head_error`` if given; all others get
        :class:`ConnectionLost` with ``reason``.
        """
        if self._closed_reason is not None and not self.connected:
            return
        self.connected = False
        self._closed_reason = reason
        self._fail_all(reason, head_error, exclude)
        transport = self.transport
        if transport is not None:
            abort = getattr(transport, "abortConnection", None)
            (abort or transport.loseConnection)()

    def close(self, reason: str = "the client was closed") -> "Deferred[None]":
        """Close the connection: pending calls fail with :class:`ClientClosed`,
        data already written is still sent; fires once the connection is closed."""
        d = self.when_lost()
        if self.connected:
            self.connected = False
            self._did_quit = True
            self._closed_reason = reason
            self._fail_all(reason, error=ClientClosed)
            if self.transport is not None:
                self.transport.loseConnection()
        return d

    # ---------------------------------------------------------------- sending

    def _closed(self) -> Deferred:
        if self._did_quit:
            return fail(ClientClosed("the connection was closed with quit"))
        return fail(ConnectionLost(self._closed_reason or "not connected"))

    def _send(self, name: str, data: bytes, convert: Optional[Callable[..., Any]],
              timeout: Optional[float], blocking: bool = False,
              internal: bool = False, replies: bool = False) -> Deferred:
        d: Optional[Deferred] = None if internal else Deferred(self._cancel_cb)
        call = _Call(name, data, d, timeout, convert, blocking, replies)
        if self._blocked or self._held:
            self._held.append(call)
        else:
            self._write_call(call)
        return d  # type: ignore[return-value]

    def _write_call(self, call: _Call) -> None:
        if call.name == "quit":  # no reply: the server closes the connection
            self.transport.write(call.data)  # type: ignore[union-attr]
            return
        inflight = self._inflight
        if not inflight:
            self._head_changed(call.timeout)
        inflight.append(call)
        self._expect(call.name)
        if call.blocking:
            self._blocked = True
        self.transport.write(call.data)  # type: ignore[union-attr]

    def _cancel(self, d: Deferred) -> None:
        for call in self._held:
            if call.deferred is d:
                self._held.remove(call)
                return
        inflight = self._inflight
        for i, call in enumerate(inflight):
            if call.deferred is d:
                reason = (f"connection dropped: {call.name!r} was cancelled while in flight "
                          "(a sent command cannot be taken back)")
                if i == 0:
                    self.drop(reason, exclude=d)
                else:
                    # The commands written before it (a job's delete, say) are
                    # owed their replies: close once they have them (_complete).
                    call.deferred = None
                    call.cancelled = reason
                    self._closing_after_cancel = True
                return

    # ------------------------------------------------------------------ timer

    def _head_changed(self, timeout: Optional[float]) -> None:
        """A call just became the head of the pipeline: its timeout starts now.

        The timer is only moved earlier, never later: when it fires it
        re-arms itself for the head's deadline (so a stream of replies costs
        no timer operations)."""
        now = self._head_since = self.clock.seconds()
        if timeout is not None:
            timer = self._timer
            if timer is None:
                self._arm(now + timeout)
            elif self._timer_at > now + timeout:
                timer.cancel()
                self._arm(now + timeout)

    def _arm(self, at: float) -> None:
        self._timer_at = at
        self._timer = self.callLater(max(0.0, at - self.clock.seconds()), self._timer_fired)

    def _timer_fired(self) -> None:
        self._timer = None
        if not self._inflight:
            return
        head = self._inflight[0]
        if head.timeout is None:
            return
        deadline = self._head_since + head.timeout
        if self.clock.seconds() >= deadline:
            reason = (f"no reply to {head.name!r} within {head.timeout:g} s; "
                      "connection dropped")
            self.drop(f"connection dropped: {reason}", ResponseTimeout(reason))
        else:
            self._arm(deadline)

    # --------------------------------------------------------------- receiving

    def dataReceived(self, data: bytes) -> None:
        # One reply at a time: answering a reserve sends the commands held
        # behind it, whose replies the reader must then expect.
        reader = self._reader
        reader.receive(data)
        next_reply = reader.next_reply
        reply = next_reply()
        while reply is not None:
            if type(reply) is not Reply:
                self._out_of_step(reply)  # type: ignore[arg-type]
                return
            self._complete(reply)
            if self._closed_reason is not None:
                return
            reply = next_reply()

    def _out_of_step(self, e: _OutOfStep) -> None:
        error = UnexpectedReply(e.command, e.line, e.why)
        self.drop(f"connection dropped after an unexpected reply: {error}", error)
        self._reader.reset()  # (already closed: drop did nothing) bytes still arriving

    def _complete(self, reply: Reply) -> None:
        inflight = self._inflight
        call = inflight.popleft()
        if inflight:
            self._head_changed(inflight[0].timeout)
        if call.blocking:
            self._blocked = False
            held = self._held
            while held and not self._blocked:
                self._write_call(held.popleft())
        d = call.deferred
        if d is None:  # an internal use/watch/ignore
            if not reply.ok:
                self.drop(f"connection dropped: the {call.name!r} sent to target a tube "
                          f"failed: {reply.line!r}")
        elif reply.ok:
            d.callback(call.convert(self, reply) if call.convert else None)
        elif call.replies:
            d.callback(reply)
        else:
            d.errback(reply.error())
        if self._closing_after_cancel and inflight and inflight[0].cancelled is not None:
            self.drop(inflight[0].cancelled)  # its turn: see _cancel

    # ------------------------------------------------------------- targeting

    def _ensure_use(self, tube: TubeName) -> None:
        raw = tube if type(tube) is bytes else v.tube_name(tube)
        if raw != self._using:
            if type(tube) is bytes:
                v.tube_name(raw)
            self._using = raw
            self._send("use", encode_command("use", raw), None, self.timeout, internal=True)

    def _ensure_watching(self, tubes: Iterable[TubeName]) -> None:
        wanted: List[bytes] = []
        for t in tubes:
            raw = v.tube_name(t)
            if raw not in wanted:
                wanted.append(raw)
        if not wanted:
            raise InvalidArgument("a reserve must watch at least one tube")
        current = self._watching
        if len(wanted) == len(current) and set(wanted) == set(current):
            return
        for raw in wanted:
            if raw not in current:
                self._send("watch", encode_command("watch", raw), None, self.timeout,
                           internal=True)
        for raw in current:
            if raw not in wanted:
                self._send("ignore", encode_command("ignore", raw), None, self.timeout,
                           internal=True)
        self._watching = wanted

    # --------------------------------------------------------------- commands

    def _ready(self) -> bool:
        return bool(self.connected) and self._quit is None

    def _job_done(self, job_id: Any) -> None:
        jobs = self._jobs
        job = jobs.pop(job_id.id if isinstance(job_id, Job) else job_id, None)
        if job is not None and not jobs and self.on_jobs_done is not None:
            self.on_jobs_done()

    def put(self, body: Union[bytes, str, Any], priority: int = DEFAULT_PRIORITY,
            delay: int = 0, ttr: int = DEFAULT_TTR,
            tube: Optional[TubeName] = None) -> "Deferred[int]":
        """Insert a job; fires with its id.

        ``body`` is bytes, or a str (UTF-8) or any value the codec encodes.
        ``tube`` (default: the tube in use) is selected with ``use`` first if needed.
        Errors: :class:`Buried` (with ``job_id``), :class:`JobTooBig`,
        :class:`Draining`, :class:`ExpectedCRLF`, :class:`InvalidArgument`.
        """
        if not self._ready():
            return self._closed()
        try:
            if type(body) is not bytes or (self.max_job_size is not None
                                            and len(body) > self.max_job_size):
                body = v.body(body, self.codec, self.max_job_size)
            if not (type(priority) is int and 0 <= priority <= U32_MAX):
                priority = v.uint(priority, "priority")
            if not (type(delay) is int and 0 <= delay <= U32_MAX):
                delay = v.uint(delay, "delay")
            if not (type(ttr) is int and 0 <= ttr <= U32_MAX):
                ttr = v.uint(ttr, "ttr")
            if tube is not None:
                self._ensure_use(tube)
        except InvalidArgument as e:
            return fail(e)
        return self._send("put", _PUT % (priority, delay, ttr, len(body), body), _job_id,
                          self.timeout)

    def use(self, tube: TubeName) -> "Deferred[str]":
        """Use ``tube`` for later puts, peeks and kicks; fires with its name."""
        if not self._ready():
            return self._closed()
        try:
            raw = v.tube_name(tube)
        except InvalidArgument as e:
            return fail(e)
        self._using = raw
        return self._send("use", encode_command("use", raw), _value, self.timeout)

    def _reserve_target(self, watching: Optional[Sequence[TubeName]]) -> None:
        if watching is not None:
            if isinstance(watching, (str, bytes)):
                watching = (watching,)
            self._ensure_watching(watching)

    def reserve(self, timeout: Optional[int] = None,
                watching: Optional[Sequence[TubeName]] = None) -> "Deferred[Job]":
        """Reserve a job from the watched tubes (or from ``watching``, which
        becomes the connection's watch list).

        ``timeout`` None sends ``reserve`` (waits forever, no response
        timeout); a number sends ``reserve-with-timeout`` (0 answers at once).
        Errors: :class:`TimedOut`, :class:`DeadlineSoon`.
        """
        if not self._ready():
            return self._closed()
        try:
            if timeout is not None:
                # beanstalkd keeps the timeout in a C int: 2**31 and up would wrap.
                timeout = v.uint(timeout, "reserve timeout", MAX_RESERVE_TIMEOUT)
            self._reserve_target(watching)
        except InvalidArgument as e:
            return fail(e)
        watched = self._watching
        convert = _reserved_in(watched[0]) if len(watched) == 1 else _reserved
        if timeout is None:
            return self._send("reserve", encode_command("reserve"), convert, None,
                              blocking=True)
        return self._send("reserve-with-timeout", encode_command("reserve-with-timeout", timeout),
                          convert, timeout + self.reserve_grace, blocking=True)

    def reserve_with_timeout(self, timeout: int,
                             watching: Optional[Sequence[TubeName]] = None) -> "Deferred[Job]":
        """``reserve-with-timeout``: like :meth:`reserve` with a timeout."""
        return self.reserve(timeout if timeout is not None else 0, watching)

    def reserve_job(self, job_id: int) -> "Deferred[Job]":
        """Reserve the job with this id (ready, delayed or buried). Errors: :class:`NotFound`."""
        return self._id_command("reserve-job", job_id, _reserved)

    def _id_command(self, name: str, job_id: Any, convert: Callable[..., Any],
                    *extra: int) -> Deferred:
        if not self._ready():
            return self._closed()
        if not (type(job_id) is int and 0 <= job_id < 2**64):
            try:
                job_id = v.job_id(job_id.id if isinstance(job_id, Job) else job_id)
            except InvalidArgument as e:
                return fail(e)
        return self._send(name, encode_command(name, job_id, *extra), convert, self.timeout)

    def delete(self, job_id: int) -> "Deferred[None]":
        """Delete a job. Errors: :class:`NotFound`."""
        d = self._id_command("delete", job_id, _none)
        self._job_done(job_id)
        return d

    def release(self, job_id: int, priority: int = DEFAULT_PRIORITY,
                delay: int = 0) -> "Deferred[None]":
        """Release a job reserved on this connection.

        Errors: :class:`NotFound`, :class:`Buried` (server out of memory).
        """
        try:
            priority = v.uint(priority, "priority")
            delay = v.uint(delay, "delay")
        except InvalidArgument as e:
            return fail(e)
        d = self._id_command("release", job_id, _none, priority, delay)
        self._job_done(job_id)
        return d

    def bury(self, job_id: int, priority: int = DEFAULT_PRIORITY) -> "Deferred[None]":
        """Bury a job reserved on this connection. Errors: :class:`NotFound`."""
        try:
            priority = v.uint(priority, "priority")
        except InvalidArgument as e:
            return fail(e)
        d = self._id_command("bury", job_id, _none, priority)
        self._job_done(job_id)
        return d

    def touch(self, job_id: int) -> "Deferred[None]":
        """Restart the TTR of a job reserved on this connection. Errors: :class:`NotFound`."""
        return self._id_command("touch", job_id, _none)

    def watch(self, tube: TubeName) -> "Deferred[int]":
        """Add ``tube`` to the watch list; fires with the list's length."""
        if not self._ready():
            return self._closed()
        try:
            raw = v.tube_name(tube)
        except InvalidArgument as e:
            return fail(e)
        if raw not in self._watching:
            self._watching = self._watching + [raw]
        return self._send("watch", encode_command("watch", raw), _value, self.timeout)

    def ignore(self, tube: TubeName) -> "Deferred[int]":
        """Remove ``tube`` from the watch list; fires with the list's length.

        Errors: :class:`NotIgnored` (it is the only tube watched).
        """
        if not self._ready():
            return self._closed()
        try:
            raw = v.tube_name(tube)
        except InvalidArgument as e:
            return fail(e)
        if raw in self._watching and len(self._watching) > 1:
            self._watching = [t for t in self._watching if t != raw]
        return self._send("ignore", encode_command("ignore", raw), _value, self.timeout)

    def peek(self, job_id: int) -> "Deferred[Job]":
        """The job with this id. Errors: :class:`NotFound`."""
        return self._id_command("peek", job_id, _found)

    def _tube_command(self, name: str, tube: Optional[TubeName],
                      convert: Callable[..., Any], *args: Union[int, bytes],
                      replies: bool = False) -> Deferred:
        if not self._ready():
            return self._closed()
        if tube is not None:
            try:
                self._ensure_use(tube)
            except InvalidArgument as e:
                return fail(e)
        return self._send(name, encode_command(name, *args), convert, self.timeout,
                          replies=replies)

    def peek_ready(self, tube: Optional[TubeName] = None) -> "Deferred[Job]":
        """The next ready job of the tube in use (or ``tube``). Errors: :class:`NotFound`."""
        return self._tube_command("peek-ready", tube, _found)

    def peek_delayed(self, tube: Optional[TubeName] = None) -> "Deferred[Job]":
        """The delayed job with the shortest delay left. Errors: :class:`NotFound`."""
        return self._tube_command("peek-delayed", tube, _found)

    def peek_buried(self, tube: Optional[TubeName] = None) -> "Deferred[Job]":
        """The next buried job. Errors: :class:`NotFound`."""
        return self._tube_command("peek-buried", tube, _found)

    def kick(self, bound: int, tube: Optional[TubeName] = None) -> "Deferred[int]":
        """Kick up to ``bound`` buried (or else delayed) jobs; fires with the number kicked."""
        try:
            bound = v.uint(bound, "kick bound")
        except InvalidArgument as e:
            return fail(e)
        return self._tube_command("kick", tube, _value, bound)

    def kick_job(self, job_id: int) -> "Deferred[None]":
        """Kick one buried or delayed job. Errors: :class:`NotFound`."""
        return self._id_command("kick-job", job_id, _none)

    def stats_job(self, job_id: int) -> "Deferred[Stats]":
        """The job's statistics. Errors: :class:`NotFound`."""
        return self._id_command("stats-job", job_id, _value)

    def stats_tube(self, tube: TubeName) -> "Deferred[Stats]":
        """The tube's statistics. Errors: :class:`NotFound`."""
        if not self._ready():
            return self._closed()
        try:
            raw = v.tube_name(tube)
        except InvalidArgument as e:
            return fail(e)
        return self._send("stats-tube", encode_command("stats-tube", raw), _value, self.timeout)

    def stats(self) -> "Deferred[Stats]":
        """The server's statistics."""
        return self._tube_command("stats", None, _value)

    def list_tubes(self) -> "Deferred[List[str]]":
        """All existing tubes."""
        return self._tube_command("list-tubes", None, _value)

    def list_tube_used(self, tube: Optional[TubeName] = None) -> "Deferred[str]":
        """The tube in use (after switching to ``tube`` if given)."""
        return self._tube_command("list-tube-used", tube, _value)

    def list_tubes_watched(self, watching: Optional[Sequence[TubeName]] = None
                           ) -> "Deferred[List[str]]":
        """The watch list (after switching to ``watching`` if given)."""
        if not self._ready():
            return self._closed()
        try:
            self._reserve_target(watching)
        except InvalidArgument as e:
            return fail(e)
        return self._send("list-tubes-watched", encode_command("list-tubes-watched"), _value,
                          self.timeout)

    def pause_tube(self, tube: TubeName, delay: int) -> "Deferred[None]":
        """Hold back reserves from ``tube`` for ``delay`` seconds. Errors: :class:`NotFound`."""
        if not self._ready():
            return self._closed()
        try:
            raw = v.tube_name(tube)
            delay = v.uint(delay, "delay")
        except InvalidArgument as e:
            return fail(e)
        return self._send("pause-tube", encode_command("pause-tube", raw, delay), _none,
                          self.timeout)

    # ------------------------------------------------- extension verbs (ours)

    @property
    def known_capabilities(self) -> Optional[FrozenSet[str]]:
        """The extension verbs the server advertised, once :meth:`capabilities`
        has been answered on this connection (None before)."""
        return self._capabilities

    def capabilities(self) -> "Deferred[FrozenSet[str]]":
        """The extension verbs the server serves (``capabilities``).

        Asked once per connection, then cached (concurrent callers share the
        one request).  A stock beanstalkd, or our server without
        ``--extensions``, answers ``UNKNOWN_COMMAND``: that is the empty set.
        """
        caps = self._capabilities
        if caps is not None:
            return succeed(caps)
        if not self._ready():
            return self._closed()
        d: Deferred = Deferred()
        waiting = self._capabilities_waiting
        if waiting is None:
            self._capabilities_waiting = waiting = []
            sent = self._send("capabilities", encode_command("capabilities"), _value,
                              self.timeout)
            sent.addBoth(self._capabilities_answered)
        waiting.append(d)
        return d

    def _capabilities_answered(self, result: Any) -> None:
        waiting, self._capabilities_waiting = self._capabilities_waiting or [], None
        if isinstance(result, Failure):
            if result.check(UnknownCommand, BadFormat):
                result = frozenset()
        else:
            result = frozenset(result)
        if not isinstance(result, Failure):
            self._capabilities = result
        for d in waiting:
            if not d.called:  # a waiter may have been cancelled
                if isinstance(result, Failure):
                    d.errback(result)
                else:
                    d.callback(result)

    def _extension(self, verb: str, direct: Callable[[], Deferred],
                   fallback: Callable[[], Deferred]) -> Deferred:
        caps = self._capabilities
        if caps is not None:
            return direct() if verb in caps else fallback()
        return self.capabilities().addCallback(
            lambda known: direct() if verb in known else fallback())

    def list_jobs(self, tube: TubeName, state: str, limit: int) -> "Deferred[List[int]]":
        """Ids of up to ``limit`` jobs of ``tube`` in ``state`` (``"ready"``,
        ``"delayed"``, ``"buried"``, ``"reserved"``), without reserving any, in
        the order the queue takes them.  Errors: :class:`NotFound` (no such tube).

        With ``list-jobs`` advertised this is one command.  On a stock server it
        falls back on ``stats-tube`` (for :class:`NotFound`) and
        ``peek-<state>``, which shows at most the *first* job of the state: the
        list has at most one id.  Reserved jobs cannot be listed that way:
        :class:`UnknownCommand`.
        """
        if not self._ready():
            return self._closed()
        try:
            raw = v.tube_name(tube)
            name = v.job_state(state)
            limit = v.uint(limit, "limit")
        except InvalidArgument as e:
            return fail(e)
        line = encode_command("list-jobs", raw, name.encode(), limit)
        return self._extension(
            "list-jobs",
            lambda: self._send("list-jobs", line, _value, self.timeout),
            lambda: Deferred.fromCoroutine(self._list_jobs_fallback(raw, name, limit)))

    async def _list_jobs_fallback(self, raw: bytes, state: str, limit: int) -> List[int]:
        if state == "reserved":
            raise UnknownCommand("list-jobs", b"UNKNOWN_COMMAND (a stock server cannot "
                                 b"list reserved jobs)")
        stats = self.stats_tube(raw)
        peek = self._tube_command("peek-" + state, raw, _job_id) if limit else None
        try:
            await stats
        except BaseException:
            if peek is not None:
                peek.addErrback(lambda _: None)
            raise
        if peek is None:
            return []
        try:
            return [await peek]
        except NotFound:
            return []

    def flush_tube(self, tube: TubeName, state: Optional[str] = None) -> "Deferred[int]":
        """Delete the jobs of ``tube`` in ``state`` (None: ready, delayed and
        buried, never reserved ones); fires with how many were deleted.
        Errors: :class:`NotFound` (no such tube).

        With ``flush-tube`` advertised this is one command, done at once on the
        server (and each deletion binlogged).  On a stock server it falls back
        on ``peek-<state>`` then ``delete`` until ``NOT_FOUND``, for ready, then
        delayed, then buried jobs, under the give-up rule of
        :class:`~twisted_stalk.protocol.flush.PeekDeleteFlush` (at most as many
        of each state as ``stats-tube`` counted at the start, so producers
        still putting cannot keep it going; a state is given up when its
        deletes keep failing); that is not atomic.  ``"reserved"`` needs the
        extension: :class:`UnknownCommand` otherwise.
        """
        if not self._ready():
            return self._closed()
        try:
            raw = v.tube_name(tube)
            name = None if state is None else v.job_state(state)
        except InvalidArgument as e:
            return fail(e)
        line = (encode_command("flush-tube", raw) if name is None
                else encode_command("flush-tube", raw, name.encode()))
        states = ("ready", "delayed", "buried") if name is None else (name,)
        return self._extension(
            "flush-tube",
            lambda: self._send("flush-tube", line, _value, self.timeout),
            lambda: Deferred.fromCoroutine(self._flush_tube_fallback(raw, states)))

    async def _flush_tube_fallback(self, raw: bytes, states: Tuple[str, ...]) -> int:
        if "reserved" in states:
            raise UnknownCommand("flush-tube", b"UNKNOWN_COMMAND (a stock server cannot "
                                 b"delete jobs other connections reserved)")
        stats = await self.stats_tube(raw)
        flush = PeekDeleteFlush(states, flush_budgets(stats, states))
        steps = flush.steps()
        try:
            batch = next(steps)
            while True:
                # A batch (a delete and the next peek) goes out together.
                sent = [self._tube_command(c[0], raw, _reply, *c[1:], replies=True)  # type: ignore
                        for c in batch]
                replies: List[Reply] = []
                try:
                    for d in sent:
                        replies.append(await d)
                except BaseException:
                    for d in sent[len(replies) + 1:]:
                        d.addErrback(lambda _: None)
                    raise
                batch = steps.send(replies)
        except StopIteration:
            pass
        return flush.total

    # ------------------------------------------------------------ any command

    def command(self, name: str, *args: Union[int, str, bytes],
                body: Optional[bytes] = None) -> "Deferred[Reply]":
        """Send any command of the command table (stock or extension verb) with
        these arguments and fire with its decoded
        :class:`~twisted_stalk.protocol.replies.Reply`, error replies included
        (``reply.ok``; ``reply.error()`` is the exception; ``reply.value`` the
        typed value).  The arguments are checked as the shell checks them
        (:class:`InvalidArgument`); ``use``/``watch``/``ignore`` keep this
        connection's tracked state right.  A ``reserve`` sent this way holds
        later calls until it is answered, and its job is not tracked (no
        :class:`Job`): dispose of it with ``command("delete", id)`` here.
        """
        if not self._ready():
            return self._closed()
        if name == "quit":
            return fail(InvalidArgument("send quit with quit()"))
        texts = [a.decode("ascii", "replace") if isinstance(a, bytes) else str(a)
                 for a in args]
        problem = validate_command_args(name, texts)
        if problem is None and (body is None) == (name == "put"):
            problem = "put takes a body" if name == "put" else f"{name} takes no body"
        if problem is not None:
            return fail(InvalidArgument(problem))
        data = encode_command(name, *args, body=body)
        raw = args[0] if args and isinstance(args[0], bytes) else texts[0].encode() if texts else b""
        if name == "use":
            self._using = raw
        elif name == "watch" and raw not in self._watching:
            self._watching = self._watching + [raw]
        elif name == "ignore" and raw in self._watching and len(self._watching) > 1:
            self._watching = [t for t in self._watching if t != raw]
        timeout = self.timeout
        if name == "reserve":
            timeout = None
        elif name == "reserve-with-timeout":
            timeout = int(texts[0]) + self.reserve_grace
        return self._send(name, data, _reply, timeout,
                          blocking=name in ("reserve", "reserve-with-timeout"), replies=True)

    def quit(self) -> "Deferred[None]":
        """Send ``quit``: pending calls are still answered, then the server closes
        the connection; fires when it has.  Later calls fail with :class:`ClientClosed`."""
        if not self.connected:
            return self.when_lost()
        if self._quit is None:
            self._quit = Deferred()
            self._did_quit = True
            if self._blocked or self._held:
                # The server would read quit only after the reserve: hold it too.
                self._held.append(_Call("quit", encode_command("quit"), None, None, None))
            else:
                self.transport.write(encode_command("quit"))  # type: ignore[union-attr]
        return self.when_lost()


class BeanstalkClientFactory(Factory):
    """Builds :class:`BeanstalkProtocol` connections with shared settings.

    Quiet: Twisted's "Starting factory" / "Stopping factory" lines would be
    logged on every (re)connection."""

    protocol = BeanstalkProtocol  # type: ignore[assignment]
    noisy = False

    def __init__(self, clock: Optional[IReactorTime] = None, *,
                 timeout: Optional[float] = DEFAULT_TIMEOUT,
                 reserve_grace: float = DEFAULT_RESERVE_GRACE,
                 max_job_size: Optional[int] = DEFAULT_MAX_JOB_SIZE,
                 codec: Optional[Codec] = None, client: Any = None,
                 on_connection: Optional[Callable[[BeanstalkProtocol], None]] = None) -> None:
        if clock is None:
            from twisted.internet import reactor as clock  # type: ignore[no-redef]
        self.clock = clock
        self.timeout = timeout
        self.reserve_grace = reserve_grace
        self.max_job_size = max_job_size
        self.codec = codec
        self.client = client
        self.on_connection = on_connection

    def buildProtocol(self, addr: Any) -> BeanstalkProtocol:
        proto = self.protocol(self.clock, timeout=self.timeout,  # type: ignore[call-arg]
                              reserve_grace=self.reserve_grace,
                              max_job_size=self.max_job_size, codec=self.codec)
        proto.factory = self
        proto.client = self.client
        if self.on_connection is not None:
            self.on_connection(proto)
        return proto
