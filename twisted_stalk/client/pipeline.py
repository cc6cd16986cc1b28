# -*- test-case-name: tests.test_client_protocol -*-
"""The machinery of one beanstalk connection: a FIFO of Deferreds and one timer.

Modelled on Twisted's ``twisted.protocols.memcache``: a queue of pending
commands, each with a :class:`~twisted.internet.defer.Deferred`; replies are
matched strictly in order; one timer enforces the response timeout; losing
the connection fails every pending Deferred.  :class:`Pipeline` knows nothing
of particular commands (:mod:`twisted_stalk.client.protocol` has them):

* replies are read by the sans-IO :class:`twisted_stalk.protocol.reader.ReplyReader`,
  which decodes each against the command it answers (reply words are
  ambiguous on their own); this class only matches the decoded replies to
  their Deferreds;
* a reply that fits no reply of the head command drops the connection
  (:class:`~twisted_stalk.client.errors.UnexpectedReply`) instead of
  mismatching every later reply;
* a blocking call (a reserve) has no response timeout of its own beyond what
  its sender gives it; calls made while it is in flight are *held* (not
  written) until it is answered, since the server would not read them earlier.
  Cancelling a held call removes it; cancelling a call already written
  closes the connection (the protocol has no way to take a command back) once
  the calls written before it have their replies, and fails the calls after
  it with a :class:`ConnectionLost` that says so;
* per-call tube targeting: the ``use``/``watch``/``ignore`` needed to get the
  connection into a state are sent ahead of a call (tracked as the state the
  pipelined commands will leave it in), so callers sharing a connection
  never race.
"""
from __future__ import annotations

from collections import deque
from typing import Any, Callable, Deque, Iterable, List, Optional, Sequence, Tuple, Union

from twisted.internet.defer import Deferred, fail
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.internet.protocol import Protocol
from twisted.logger import Logger
from twisted.python.failure import Failure

from ..protocol.commands import encode_command
from ..protocol.constants import DEFAULT_TUBE
from ..protocol.reader import ReplyReader
from ..protocol.replies import Reply
from ..protocol.replies import ReplyOutOfStep
from . import _validate as v
from .errors import (
    ClientClosed,
    ConnectionLost,
    InvalidArgument,
    ResponseTimeout,
    UnexpectedReply,
)

TubeName = Union[str, bytes]

#: Default response timeout, in seconds.
DEFAULT_TIMEOUT = 30.0

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


# Reply converters: ``convert(proto, reply)`` makes a success reply's result.

def _job_id(proto: Any, reply: Reply) -> Optional[int]:
    return reply.job_id


def _none(proto: Any, reply: Reply) -> None:
    return None


def _value(proto: Any, reply: Reply) -> Any:
    return reply.value


def _reply(proto: Any, reply: Reply) -> Reply:
    return reply


class Pipeline(Protocol):
    """A beanstalk connection's FIFO of calls, response timer and tube state.

    :param clock: the reactor (or a ``Clock``) for the response timer.
    :param timeout: seconds the call at the head of the pipeline may wait
        for its reply (None: forever); a call may carry its own (a reserve).
    """

    log = Logger()

    def __init__(self, clock: Optional[IReactorTime] = None, *,
                 timeout: Optional[float] = DEFAULT_TIMEOUT) -> None:
        if clock is None:
            from twisted.internet import reactor as clock  # type: ignore[no-redef]
        self.clock: IReactorTime = clock  # type: ignore[assignment]
        self.timeout = timeout
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
        self._cancel_cb = self._cancel
        #: Set when a command was cancelled after it was written: the
        #: connection closes once the commands before it are answered.
        self._closing_after_cancel = False

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
    def closed_reason(self) -> Optional[str]:
        """Why the connection closed (or is closing), None while it is open."""
        return self._closed_reason

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
        self._connection_failed(reason)
        first = True
        for call in calls:
            d = call.deferred
            if d is not None and d is not exclude and not d.called:
                if first and head_error is not None:
                    d.errback(head_error)
                else:
                    d.errback(error(reason))
            first = False

    def _connection_failed(self, reason: str) -> None:
        """Every pending call is about to fail with ``reason`` (a hook: the
        commands mark the jobs reserved here lost)."""

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

    def _out_of_step(self, e: ReplyOutOfStep) -> None:
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

    def _reserve_target(self, watching: Optional[Sequence[TubeName]]) -> None:
        if watching is not None:
            if isinstance(watching, (str, bytes)):
                watching = (watching,)
            self._ensure_watching(watching)


    def _ready(self) -> bool:
        return bool(self.connected) and self._quit is None

    def _command(self, name: str, args: Sequence[Any], convert: Optional[Callable[..., Any]],
                 tube: Optional[TubeName] = None, *,
                 watching: Optional[Sequence[TubeName]] = None,
                 send: Optional[Callable[..., Deferred]] = None,
                 replies: bool = False) -> Deferred:
        """Send command ``name`` with ``args`` checked by the kinds the command
        table gives them (:func:`~twisted_stalk.client._validate.command_args`),
        after the ``use`` (``tube``) or ``watch``/``ignore`` (``watching``) it
        needs; a bad argument fails the Deferred with :class:`InvalidArgument`
        and sends nothing.  ``send(*checked args)``, when given, sends instead
        of the plain command (reserves, extension verbs)."""
        if not self._ready():
            return self._closed()
        try:
            values = v.command_args(name, args)
            if tube is not None:
                self._ensure_use(tube)
            elif watching is not None:
                self._reserve_target(watching)
        except InvalidArgument as e:
            return fail(e)
        if send is not None:
            return send(*values)
        return self._send(name, encode_command(name, *values), convert, self.timeout,
                          replies=replies)


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

