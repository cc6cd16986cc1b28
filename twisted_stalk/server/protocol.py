# -*- test-case-name: tests.test_wire,tests.test_differential,tests.test_fastpath -*-
"""The wire front end: frame bytes into commands, call the engine, write replies.

All rules of a command live in the engine (:mod:`twisted_stalk.core`); this
module turns bytes into one engine call per command and the outcome into
reply bytes (:mod:`.render`).  Framing follows beanstalkd exactly (see
docs/compat.md): a command line is at most 224 bytes with its CRLF (a longer
one is answered ``BAD_FORMAT`` and discarded up to its CRLF, and the
connection stays); ``put``'s body is read raw as ``<bytes>`` + 2 (a body
over the size limit is discarded, not parsed as commands, and answered
``JOB_TOO_BIG``); pipelined commands are answered in order.

``LineReceiver`` supplies the interface (``delimiter``, ``MAX_LENGTH``,
``lineReceived``); its ``dataReceived`` is replaced because it splits the
buffer once per line, copying the rest each time (quadratic for pipelined
input), and closes the connection on long lines where beanstalkd answers
BAD_FORMAT.  Writes live in :mod:`.output`, holds (a waiting reserve, an
engine answering later, a client not reading) in :mod:`.flow`, and the
speed tricks in :mod:`._fastio` (socket I/O) and :mod:`._fastpath` (hot
command lines), each with its contract.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Tuple

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IHalfCloseableProtocol, IPushProducer
from twisted.protocols.basic import LineReceiver
from zope.interface import implementer

from ..core.engine import Engine
from ..core.job import JobRecord
from ..core.outcomes import BAD_FORMAT as BAD_FORMAT_OUTCOME
from ..core.outcomes import WAITING
from ..protocol.commands import (
    COMMANDS,
    EXTENSION_COMMANDS,
    CommandError,
    identify,
    identify_extension,
    parse_args,
)
from ..protocol.constants import BAD_FORMAT, MAX_LINE, MAX_LINE_CONTENT, TIMED_OUT, UNKNOWN_COMMAND
from . import _fastio
from ._fastpath import FastPaths
from .flow import MAX_BUFFERED_WHILE_WAITING, TURN_COMMANDS, FlowControl
from .output import FLUSH_EVERY, FLUSH_SIZE, MAX_UNSENT, ReplyOutput
from .render import LINES, render_table

if TYPE_CHECKING:  # pragma: no cover
    from .factory import BeanstalkServerFactory

# Framer states.
_LINE, _BODY, _DISCARD, _SKIP_LINE = range(4)

#: Unread input up to this size is split with ``bytes.partition`` (which
#: copies the rest); above it, with ``find`` by offset (see dataReceived).
_SMALL_REST = 1024


@implementer(IHalfCloseableProtocol, IPushProducer)
class BeanstalkServerProtocol(ReplyOutput, FlowControl, LineReceiver):
    """One client connection of the beanstalk server: framing and dispatch
    here, writes in :class:`.output.ReplyOutput`, holds in :class:`.flow.FlowControl`."""

    delimiter = b"\r\n"
    MAX_LENGTH = MAX_LINE_CONTENT

    factory: "BeanstalkServerFactory"

    def __init__(self) -> None:
        self._buf = b""
        self._mode = _LINE
        self._need = 0
        #: A body that spans reads, collected in pieces and joined once.
        self._chunks: List[bytes] = []
        self._have = 0
        #: The header (pri, delay, ttr, bytes) of the put whose body is next.
        self._put: Optional[Tuple[int, int, int, int]] = None
        self._after_discard = b""
        self._init_output()
        self._init_flow()
        self._direct: Optional[_fastio.DirectIO] = None
        self.session = None

    # ---------------------------------------------------------- connection

    def connectionMade(self) -> None:
        factory = self.factory
        self.engine: Engine = factory.engine
        self._journal = self.engine.journal
        self._render = factory.render
        #: The engine answers puts later and lets a connection's puts overlap.
        self._pipelined_puts = self.engine.pipelined_puts
        if self.session is None:  # (a connection handed over brings its own: _handover)
            self.session = self.engine.open_session(self)
        factory.connection_opened(self)
        transport = self.transport
        if _fastio.eligible(transport):
            transport.setTcpNoDelay(True)  # small replies, latency matters
            # Twisted pauses us (pauseProducing) when its queue for this
            # client passes bufferSize, which is also its read size: the
            # unsent-replies bound where DirectIO reads, 16 KiB reads otherwise.
            if factory.direct_io:
                self._direct = _fastio.DirectIO.install(self)
                transport.bufferSize = MAX_UNSENT
            else:
                transport.bufferSize = _fastio.READ_SIZE
        transport.registerProducer(self, True)

    def connectionLost(self, reason=None) -> None:
        if self._direct is not None:
            self._direct.uninstall()
        if self.session is not None:
            self.engine.close_session(self.session)
            self.factory.connection_closed(self)
            self.factory.after_input()

    def readConnectionLost(self) -> None:
        """The client half-closed: a waiting reserve times out, then we close."""
        self._eof = True
        if self._blocked:
            if self.engine.cancel_wait(self.session):
                self._write(TIMED_OUT)
                self._unblock()  # runs what the client sent before, then closes
        elif not self._yielding:  # (yielding: the next turns run the rest, then close)
            self._close()
        self.factory.after_input()

    def writeConnectionLost(self) -> None:
        self._close()

    def _close(self) -> None:
        self._closing = self._halt = True
        if self._direct is not None:
            self._direct.uninstall()
        if self._out:
            # Send this read's replies first: a TLS transport drops writes
            # made after loseConnection (pipelined ``...\r\nquit\r\n``).
            self._flush()
        if self._held is not None:
            self._close_when_sent = True  # after the held replies
            return
        self._lose()

    # --------------------------------------------------- public (shutdown)

    @property
    def idle(self) -> bool:
        """True between commands: nothing half-read, nothing buffered, no jobs held."""
        return (self._mode == _LINE and not self._buf and not self._blocked
                and not self.session.reserved)

    @property
    def closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        """Close after any replies due (a FIN, never a reset)."""
        self._close()

    def abort(self) -> None:
        """Drop the connection now (its reserved jobs go back to ready)."""
        self._closing = self._halt = True
        if self.transport is not None:
            self.transport.abortConnection()

    # ------------------------------------------------------------- framing

    def dataReceived(self, data: bytes) -> None:
        """Split the input (buffered bytes first) into commands and bodies and
        run them; the replies to one read go out in one write, then the
        wake-ups they caused (the factory delivers them)."""
        if self._halt:
            if not self._closing:
                self._buffer_while_held(data)
            return
        if self._chunks:
            data = self._collect_body(data)
            if not data:
                return
        buf = self._buf
        if buf:
            buf += data
            self._buf = b""
        else:
            buf = data
        # Input is consumed from ``buf[pos:]``.  A small remainder is kept
        # at pos 0 and split with ``partition`` (one cheap call that also
        # hands back the rest, often exactly a put body); a large one is
        # scanned by offset with ``find``, so pipelined input is not copied
        # once per command.  Both give the same lines (tests/test_wire.py).
        pos = 0
        end = len(buf)
        out = self._out
        lines = _LINES
        ran = 0
        self._reading = True
        try:
            while pos < end:
                if pos and end - pos <= _SMALL_REST:
                    buf = buf[pos:]
                    end -= pos
                    pos = 0
                if self._mode:  # not _LINE: a body, a discard, an over-long line
                    moved = self._frame_raw(buf, pos, end)
                    if moved == pos:
                        break  # needs more input
                    pos = moved
                    continue
                if pos:
                    i = buf.find(b"\r\n", pos)
                    if i >= 0:
                        line = buf[pos:i]
                        pos = i + 2
                elif end <= _SMALL_REST:
                    line, crlf, rest = buf.partition(b"\r\n")
                    if crlf:
                        i = len(line)
                        buf = rest
                        end = len(rest)
                    else:
                        i = -1
                else:
                    i = buf.find(b"\r\n")
                    if i >= 0:
                        line = buf[:i]
                        pos = i + 2
                if i < 0:
                    if end - pos >= MAX_LINE:
                        # Too long: discard through its CRLF, then answer.
                        self._mode = _SKIP_LINE
                        continue
                    break
                if self._blocked:  # chained puts are out (flow.py): only a put joins
                    entry = lines.get(line) or (line[:4] == b"put " and _put_header(line))
                    if entry.__class__ is not tuple or entry[3] > self.engine.max_job_size:
                        buf, pos = line + b"\r\n" + buf[pos:], 0
                        end = len(buf)
                        self._halt = True
                        break
                if len(line) > MAX_LINE_CONTENT:
                    out.append(BAD_FORMAT)
                    continue
                entry = lines.get(line)
                if entry is None:
                    entry = _route(self, line)  # True: it ran the command
                    if entry is False:
                        self.lineReceived(line)
                        entry = True
                if entry.__class__ is tuple:
                    # A put line (entry is its header): its body follows.
                    need = self._put_started(entry)
                    if need:
                        if end - pos >= need:
                            if end == need:  # the body is all that is left (pos is 0)
                                self._put_body(buf)
                                pos = end
                            else:
                                self._put_body(buf[pos:pos + need])
                                pos += need
                        else:
                            self._mode = _BODY
                            self._need = need
                elif entry is not True:
                    entry(self)  # a command without arguments
                if self._halt:
                    break
                if self._chain is None:  # (a chain's puts only join a batch: MAX_CHAIN)
                    ran += 1
                    if ran >= TURN_COMMANDS and pos < end:
                        self._yield_turn()  # the rest on the reactor's next turn
                        break
        finally:
            self._reading = False
            if self._chain is not None:
                self._halt = True  # a chain is one read's puts: one batch, ids in order
            if pos < end:
                self._keep(buf[pos:])
            if out:
                data = out[0] if len(out) == 1 else b"".join(out)
                out.clear()
                self._send(data)
        engine = self.engine
        if engine.wakeups or engine.wake_changed:
            self.factory.after_input()

    def _keep(self, rest: bytes) -> None:
        """Keep input not consumed by a read: the start of a body that spans
        reads (see :meth:`_collect_body`), or the rest of the input for later."""
        if self._mode == _BODY and not self._halt:
            self._chunks.append(rest)
            self._have = len(rest)
        else:
            self._buf = rest

    def _collect_body(self, data: bytes) -> bytes:
        """Add a read to a put body that spans reads: b"" until the body is
        complete, then all of it and what followed, joined once (so a large
        body costs time linear in its size), for the framing loop to take."""
        chunks = self._chunks
        chunks.append(data)
        self._have += len(data)
        if self._have < self._need:
            return b""
        joined = b"".join(chunks)
        chunks.clear()
        self._have = 0
        return joined

    def _frame_raw(self, buf: bytes, pos: int, end: int) -> int:
        """Consume input in the non-line modes; return the new position
        (unchanged when nothing more can be done until more input comes)."""
        mode = self._mode
        if mode == _BODY:
            need = self._need
            if end - pos < need:
                return pos  # wait for the rest
            self._mode = _LINE
            self._put_body(buf[pos:pos + need])
            return pos + need
        if mode == _DISCARD:
            take = min(self._need, end - pos)
            pos += take
            self._need -= take
            if self._need == 0:
                self._mode = _LINE
                self._write(self._after_discard)
            return pos
        # _SKIP_LINE: drop the rest of an over-long line
        i = buf.find(b"\r\n", pos)
        if i < 0:
            # Keep a trailing CR: its LF may come in the next read.
            return end - 1 if buf[end - 1:end] == b"\r" else end
        self._mode = _LINE
        self._write(BAD_FORMAT)
        return i + 2

    # ------------------------------------------------------------ dispatch

    def lineReceived(self, line: bytes) -> None:
        """Run one command line (without its CRLF) through the exact parser.

        :meth:`dataReceived` runs the hot commands' fast paths itself and sends
        everything else here: unusual arguments, rare commands, errors and
        extension verbs.
        """
        if b"\0" in line:
            self._write(BAD_FORMAT)
            return
        spec, text = identify(line)
        if spec is None:
            # Extension verbs (--extensions) are looked up only here, so stock
            # commands never pay for them; off, this is UNKNOWN_COMMAND as before.
            extensions = self.factory.extensions
            spec, text = identify_extension(line) if extensions is not None else (None, b"")
            if spec is None:
                self._write(UNKNOWN_COMMAND)
                return
            extensions.count(spec.name)
        try:
            args = parse_args(spec, text)
        except CommandError as e:
            self._write(e.reply)
            return
        _HANDLERS[spec.name](self, *args)

    def _answer(self, name: str, outcome: Any) -> None:
        render = self._render[name]
        if outcome.__class__ is Deferred:
            self._later(outcome, render)
        elif self._reading:
            self._append(render(outcome))
        else:
            self._send(render(outcome))

    # ------------------------------------------------------------ commands
    #
    # One engine call per command.  Commands whose handler only calls the
    # engine method of the same name and renders its outcome get a handler
    # made from the command table (_plain_handler, below); these are the
    # rest.  The hot ones (put, reserve, delete) append their replies to the
    # read's reply list directly: commands run only inside dataReceived.

    def do_put(self, pri: int, delay: int, ttr: int, nbytes: int, trailing_ok: bool = True) -> None:
        need = self._put_started((pri, delay, ttr, nbytes), trailing_ok)
        if need:
            self._mode = _BODY
            self._need = need

    def _put_started(self, header: Tuple[int, int, int, int], trailing_ok: bool = True) -> int:
        """A put line was read: the body bytes (with CRLF) to read next, or 0."""
        if header[3] > self.engine.max_job_size:
            # Framing must know at once whether to read or discard the body;
            # the refusal itself is the engine's one size rule.
            self._mode = _DISCARD
            self._need = header[3] + 2
            self._after_discard = self._render["put"](
                self.engine.refuse_oversized(self.session, header[3]))
            return 0
        if not trailing_ok:
            self._answer("put", self.engine.reject_put(self.session, BAD_FORMAT_OUTCOME))
            return 0
        self._put = header
        return header[3] + 2

    def _put_body(self, body: bytes) -> None:
        """The body of the pending put arrived (with what should be its CRLF)."""
        pri, delay, ttr, _ = self._put
        self._put = None
        if self._pipelined_puts:
            self._chain_put(pri, delay, ttr, body)
            return
        outcome = self.engine.put(self.session, pri, delay, ttr, body)
        if outcome.__class__ is int:
            self._out.append(b"INSERTED %d\r\n" % outcome)
        else:
            self._answer("put", outcome)

    def do_reserve(self) -> None:
        if self._pipelined_puts:
            self._reserve_then(None)
        else:
            self._reserve_result(self.engine.reserve(self.session))

    def do_reserve_with_timeout(self, timeout: int) -> None:
        if self._pipelined_puts:
            self._reserve_then(timeout)
        else:
            self._reserve_result(self.engine.reserve_with_timeout(self.session, timeout))

    def _reserve_result(self, outcome: Any) -> None:
        if outcome.__class__ is JobRecord:
            # _append, inline: pipelined reserves are a hot path.
            out = self._out
            body = outcome.body
            out.append(b"RESERVED %d %d\r\n%s" % (outcome.id, len(body) - 2, body))
            if len(out) >= FLUSH_EVERY or len(body) > FLUSH_SIZE:
                self._flush()
        elif outcome is WAITING:
            if not self._cannot_wait():
                self._block()
        else:
            self._answer("reserve", outcome)

    def do_delete(self, job_id: int) -> None:
        if self._pipelined_puts:
            self._delete_later(job_id)
            return
        outcome = self.engine.delete(self.session, job_id)
        line = LINES.get(outcome)
        if line is None:
            self._answer("delete", outcome)
        else:
            self._out.append(line)

    def do_list_jobs(self, name: bytes, state: bytes, limit: int) -> None:
        self._answer("list-jobs", self.engine.list_jobs(self.session, name, state.decode(), limit))

    def do_flush_tube(self, name: bytes, state: Optional[bytes] = None) -> None:
        engine = self.engine
        self._answer("flush-tube", engine.flush_tube(self.session, name) if state is None
                     else engine.flush_tube(self.session, name, (state.decode(),)))

    def do_capabilities(self) -> None:
        self._answer("capabilities", self.factory.extensions.verbs)

    def do_quit(self) -> None:
        self._close()


# ---------------------------------------------------------------- dispatch tables

def _plain_handler(name: str, method: str) -> Callable:
    """The handler of a command that calls the engine method ``method`` with
    the session and the parsed arguments, and renders the outcome."""
    def handler(proto: BeanstalkServerProtocol, *args: Any) -> None:
        proto._answer(name, getattr(proto.engine, method)(proto.session, *args))
    handler.__name__ = "do_" + method
    return handler


#: The handler of each stock command and extension verb, by name.
_HANDLERS: Dict[str, Callable] = {
    spec.name: getattr(BeanstalkServerProtocol, "do_" + spec.method, None)
    or _plain_handler(spec.name, spec.method)
    for spec in COMMANDS + EXTENSION_COMMANDS}
#: The fast paths every connection shares (see _fastpath).
FAST_PATHS = FastPaths(_HANDLERS)
_LINES = FAST_PATHS.lines
_route = FAST_PATHS.route
_put_header = FAST_PATHS.put_header
#: Outcomes as replies with beanstalkd 1.13's stats shape (see render).
RENDER = render_table()

__all__ = ["BeanstalkServerProtocol", "FAST_PATHS", "MAX_BUFFERED_WHILE_WAITING", "MAX_UNSENT",
           "RENDER"]
