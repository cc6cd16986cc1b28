"""The Twisted side of the server: frame bytes, dispatch commands, write replies.

All queue logic lives in :mod:`twisted_stalk.core`; this module only turns
bytes into calls on the :class:`~twisted_stalk.core.WorkQueue` and results into
bytes.  Framing follows beanstalkd exactly (see docs/compat.md):

* a command line is at most 224 bytes with its CRLF; a longer one is answered
  ``BAD_FORMAT`` and discarded up to its CRLF, and the connection stays;
* ``put``'s body is read raw (any bytes, CRLF included) as ``<bytes>`` + 2;
  a body over the size limit is discarded without being parsed as commands
  and answered ``JOB_TOO_BIG``;
* pipelined commands are answered in order; while a reserve waits, further
  input is buffered (up to :data:`MAX_BUFFERED_WHILE_WAITING`, then reading
  pauses) but a disconnect or half-close is still noticed.

``LineReceiver`` supplies the interface (``delimiter``, ``MAX_LENGTH``,
``lineReceived``/``rawDataReceived``-style modes); its ``dataReceived`` is
replaced because it splits the buffer once per line, copying the rest each
time, which is quadratic for pipelined input, and because it closes the
connection on long lines where beanstalkd answers BAD_FORMAT.
"""
from __future__ import annotations

from errno import EWOULDBLOCK
from os import read as _os_read
from os import write as _os_write
from typing import TYPE_CHECKING, Callable, Dict, List, Optional, Tuple

from twisted.internet import main, tcp
from twisted.internet.interfaces import IHalfCloseableProtocol
from twisted.protocols.basic import LineReceiver
from zope.interface import implementer

from ..core import DEADLINE_SOON as _DEADLINE_SOON_RESULT
from ..core import TIMED_OUT as _TIMED_OUT_RESULT
from ..core import Job, JournalError
from ..protocol import yaml
from ..protocol.commands import BY_NAME, CommandError, identify, parse_args, valid_tube_name
from ..protocol.constants import (
    BAD_FORMAT,
    BURIED,
    DEADLINE_SOON,
    DELETED,
    DRAINING,
    EXPECTED_CRLF,
    INTERNAL_ERROR,
    JOB_TOO_BIG,
    KICKED,
    MAX_LINE,
    MAX_LINE_CONTENT,
    NOT_FOUND,
    NOT_IGNORED,
    PAUSED,
    RELEASED,
    TIMED_OUT,
    TOUCHED,
    U32_MAX,
    U64_MAX,
    UNKNOWN_COMMAND,
)

if TYPE_CHECKING:  # pragma: no cover
    from .factory import BeanstalkServerFactory

#: Transports whose socket we may write to directly (plain TCP and unix).
_DIRECT_WRITE_TRANSPORTS = (tcp.Server,)

#: Bytes read per recv: Twisted's 64 KiB allocates and shrinks a 64 KiB
#: buffer on every read, while a command is usually tens of bytes.
_READ_SIZE = 16384

#: Bytes a client may send ahead while its reserve waits before reading pauses.
MAX_BUFFERED_WHILE_WAITING = 256 * 1024

# Framer states.
_LINE, _BODY, _DISCARD, _SKIP_LINE = range(4)

#: Unread input up to this size is split with ``bytes.partition`` (which
#: copies the rest); above it, with ``find`` by offset (see dataReceived).
_SMALL_REST = 1024


def _job_reply(word: bytes, job: Job) -> bytes:
    body = job.body
    return b"%s %d %d\r\n%s" % (word, job.id, len(body) - 2, body)


@implementer(IHalfCloseableProtocol)
class BeanstalkServerProtocol(LineReceiver):
    """One client connection of the beanstalk server."""

    delimiter = b"\r\n"
    MAX_LENGTH = MAX_LINE_CONTENT

    factory: "BeanstalkServerFactory"

    def __init__(self) -> None:
        self._buf = b""
        self._mode = _LINE
        self._need = 0
        #: The header (pri, delay, ttr, bytes) and id of the put whose body is next.
        self._put: Optional[Tuple[int, int, int, int]] = None
        self._put_id = 0
        self._after_discard = b""
        #: Replies gathered while processing one read, written together.
        self._out: List[bytes] = []
        #: True while dataReceived runs: replies go to _out, written at its end.
        self._reading = False
        #: True while a reserve waits; input is buffered, not dispatched.
        self._blocked = False
        self._paused_reading = False
        self._eof = False
        self._closing = False
        self._direct = False
        #: True while replies may go straight to the socket: a plain TCP or
        #: unix transport with nothing queued in Twisted (see _send).
        self._direct_now = False
        #: Replies held until the journal has written what they acknowledge.
        self._held: Optional[List[bytes]] = None
        self._close_when_sent = False
        self.session = None

    # ---------------------------------------------------------- connection

    def connectionMade(self) -> None:
        self.queue = self.factory.queue
        self._journal = self.queue.journal
        self.session = self.queue.open_session(self)
        self.factory.connection_opened(self)
        transport = self.transport
        if isinstance(transport, _DIRECT_WRITE_TRANSPORTS):
            # Replies are small and latency matters: no Nagle delay, and
            # write straight to the socket when nothing is queued (_send).
            transport.setTcpNoDelay(True)
            transport.bufferSize = _READ_SIZE
            self._direct = self._direct_now = True
            # os.read/os.write on the descriptor: the same syscalls as
            # recv/send without their tuple-parsed arguments (measured).
            self._fd = transport.socket.fileno()
            # The reactor calls the transport's doRead for every readable
            # event; ours goes from recv straight to dataReceived (one frame
            # less per command) and reports EOF and errors as Twisted's does.
            transport.doRead = self._read_socket

    def _read_socket(self):
        """``doRead`` of a plain TCP or unix transport: recv, then dataReceived."""
        try:
            data = _os_read(self._fd, _READ_SIZE)
        except OSError as e:
            return None if e.args[0] == EWOULDBLOCK else main.CONNECTION_LOST
        if not data:
            return main.CONNECTION_DONE
        self.dataReceived(data)
        return None

    def connectionLost(self, reason=None) -> None:
        self._direct_now = False
        if self.session is not None:
            self.queue.close_session(self.session)
            self.factory.connection_closed(self)
            self.factory.after_input()

    def readConnectionLost(self) -> None:
        """The client half-closed: a waiting reserve times out, then we close."""
        self._eof = True
        if self.withdraw_wait():
            self._write(TIMED_OUT)
        if not self._blocked:
            self._close()
        self.factory.after_input()

    def writeConnectionLost(self) -> None:
        self._close()

    def _close(self) -> None:
        self._closing = True
        self._direct_now = False
        out = self._out
        if out:
            # Send this read's replies first: a TLS transport drops writes
            # made after loseConnection (pipelined ``...\r\nquit\r\n``).
            data = out[0] if len(out) == 1 else b"".join(out)
            del out[:]
            self._send(data)
        if self._held is not None:
            self._close_when_sent = True  # after the held replies
            return
        self.transport.loseConnection()

    def _write(self, data: bytes) -> None:
        if self._reading:
            self._out.append(data)
        else:
            self._send(data)

    def _send(self, data: bytes) -> None:
        """Write ``data`` now if the socket takes it, else queue it in Twisted.

        ``FileDescriptor.write`` always buffers and asks the reactor for a
        writable event, costing two epoll_ctl calls and a loop turn per reply;
        like beanstalkd, we first try the write directly.

        While the journal (binlog) has records not yet written (or, with
        ``-f 0``, not yet synced), replies are held and sent, in order, when
        it settles: no reply can acknowledge a change that is not durable,
        and the records of a whole reactor turn share one write and one fsync.
        """
        if self._direct_now and self._held is None and not self._journal.pending:
            try:
                sent = _os_write(self._fd, data)
            except OSError:
                sent = 0  # EAGAIN, or an error Twisted will report on its own write
            if sent == len(data):
                return
            # Twisted queues the rest; later replies go after it (_send_slow).
            self._direct_now = False
            self.transport.write(data[sent:])
        else:
            self._send_slow(data)

    def _send_slow(self, data: bytes) -> None:
        """:meth:`_send` when replies are held, or Twisted has output queued."""
        held = self._held
        if held is not None:
            held.append(data)
            return
        if self._journal.pending:
            self._held = [data]
            self._journal.when_settled(self._send_held)
            return
        t = self.transport
        if self._direct and not (t.dataBuffer or t._tempDataLen or t.disconnecting
                                 or self._closing) and t.connected:
            self._direct_now = True  # Twisted's queue has drained
            self._send(data)
        else:
            t.write(data)

    def _send_held(self) -> None:
        """The journal settled: send the replies held meanwhile."""
        held, self._held = self._held, None
        if held:
            self._send(held[0] if len(held) == 1 else b"".join(held))
        if self._close_when_sent:
            self._close_when_sent = False
            self.transport.loseConnection()

    # ------------------------------------------------------------- framing

    def dataReceived(self, data: bytes) -> None:
        """Split the input (buffered bytes first) into commands and bodies and
        run them; the replies to one read go out in one write.

        The hot commands take short paths here: lines seen before (commands
        without arguments, and put lines, whose parsed header is memoised by
        the exact line) are one dict lookup, and a put whose body is already
        in this read is stored without a mode change.
        """
        if self._closing:
            return
        if self._blocked:
            self._buffer_while_waiting(data)
            return
        buf = self._buf
        if buf:
            buf += data
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
                if len(line) > MAX_LINE_CONTENT:
                    out.append(BAD_FORMAT)
                    continue
                entry = _LINES.get(line)
                if entry is None:
                    if line[:7] == b"delete ":
                        text = line[7:]
                        if text.isdigit() and len(text) < 20:  # 19 digits fit a u64
                            self.do_delete(int(text))
                            continue
                    entry = self._uncommon_line(line)
                    if entry is None:
                        if self._blocked or self._closing:
                            break
                        continue
                elif entry.__class__ is not tuple:
                    entry(self)  # a command without arguments
                    if self._blocked or self._closing:
                        break
                    continue
                # A put line (entry is its header).
                need = self._put_started(entry)
                if need:
                    if end - pos >= need:
                        if end == need:  # the body is all that is left (pos is 0)
                            self._store_put(buf)
                            pos = end
                        else:
                            self._store_put(buf[pos:pos + need])
                            pos += need
                    else:
                        self._mode = _BODY
                        self._need = need
        finally:
            self._reading = False
            self._buf = buf[pos:] if pos < end else b""
            if out:
                data = out[0] if len(out) == 1 else b"".join(out)
                out.clear()
                self._send(data)
        factory = self.factory
        if factory.resume_queue or self.queue.wake_changed:
            factory.after_input()

    def _uncommon_line(self, line: bytes) -> Optional[Tuple[int, int, int, int]]:
        """Run a line that is not in :data:`_LINES`; a well-formed put line is
        not run but memoised, and its header returned."""
        sp = line.find(b" ")
        if sp > 0:
            word = line[:sp]
            if word == b"put":
                header = _put_header(line)
                if header is not None:
                    return header
            else:
                fast = _FAST.get(word)
                if fast is not None and fast(self, line[sp + 1:]):
                    return None
        self.lineReceived(line)
        return None

    def _buffer_while_waiting(self, data: bytes) -> None:
        """Input that arrives while a reserve waits: keep it, within bounds."""
        self._buf += data
        if len(self._buf) > MAX_BUFFERED_WHILE_WAITING:
            if not self._paused_reading:
                self._paused_reading = True
                self.transport.pauseProducing()
            elif len(self._buf) > 4 * MAX_BUFFERED_WHILE_WAITING:
                # A transport that ignores pauseProducing: give up on
                # this client rather than grow without bound.
                self._buf = b""
                self.transport.abortConnection()

    def _frame_raw(self, buf: bytes, pos: int, end: int) -> int:
        """Consume input in the non-line modes; return the new position
        (unchanged when nothing more can be done until more input comes)."""
        mode = self._mode
        if mode == _BODY:
            need = self._need
            if end - pos < need:
                return pos  # wait for the rest
            self._mode = _LINE
            self._store_put(buf[pos:pos + need])
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

    def withdraw_wait(self) -> bool:
        """Withdraw a waiting reserve without replying; True if one was waiting."""
        if not self._blocked:
            return False
        self.queue.cancel_wait(self.session)
        self._unblock()
        return True

    def _unblock(self) -> None:
        self._blocked = False
        if self._paused_reading:
            self._paused_reading = False
            self.transport.resumeProducing()
        if self._buf or self._eof:
            self.factory.resume_later(self)

    def resume(self) -> None:
        """Process input that arrived while a reserve was waiting."""
        if self._blocked or self._closing:
            return
        if self._buf:
            buf, self._buf = self._buf, b""
            self.dataReceived(buf)
        if self._eof and not self._blocked:
            self._close()

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
            extensions = getattr(self.factory, "extensions", None)
            if extensions is None or not extensions.dispatch(self, line):
                self._write(UNKNOWN_COMMAND)
            return
        try:
            args = parse_args(spec, text)
        except CommandError as e:
            self._write(e.reply)
            return
        _HANDLERS[spec.name](self, *args)

    def _count(self, name: str) -> None:
        self.queue.cmd_counts[name] += 1

    # ------------------------------------------------------------ commands
    #
    # Commands run only inside dataReceived, so the hot replies (INSERTED,
    # RESERVED, DELETED) go straight onto the read's reply list: what _write
    # does while reading, without the call.

    def do_put(self, pri: int, delay: int, ttr: int, nbytes: int, trailing_ok: bool = True) -> None:
        need = self._put_started((pri, delay, ttr, nbytes), trailing_ok)
        if need:
            self._mode = _BODY
            self._need = need

    def _put_started(self, header: Tuple[int, int, int, int], trailing_ok: bool = True) -> int:
        """A put line (``pri delay ttr bytes``) was read: count it, take its
        job id, and return the body bytes (with CRLF) to read next, or 0 when
        no body follows."""
        pri, delay, ttr, nbytes = header
        q = self.queue
        q.cmd_counts["put"] += 1
        if nbytes > q.max_job_size:
            self._mode = _DISCARD
            self._need = nbytes + 2
            self._after_discard = JOB_TOO_BIG
            return 0
        if not trailing_ok:
            self._write(BAD_FORMAT)
            return 0
        if not self.session.is_producer:
            q.set_producer(self.session)
        job_id = q.next_id
        q.next_id = job_id + 1
        self._put = header
        self._put_id = job_id
        return nbytes + 2

    def _store_put(self, body: bytes) -> None:
        """The body of the pending put arrived (with what should be its CRLF)."""
        pri, delay, ttr, _ = self._put
        job_id = self._put_id
        self._put = None
        q = self.queue
        if body[-2:] != b"\r\n":
            self._write(EXPECTED_CRLF)
        elif q.draining:
            self._write(DRAINING)
        else:
            try:
                q.put(self.session, job_id, pri, delay, ttr, body)
            except JournalError:
                self._write(INTERNAL_ERROR)
                return
            self._out.append(b"INSERTED %d\r\n" % job_id)

    def do_use(self, name: bytes) -> None:
        self._count("use")
        self.queue.use(self.session, name)
        self._write(b"USING %s\r\n" % name)

    def do_reserve(self) -> None:
        q = self.queue
        q.cmd_counts["reserve"] += 1
        self._reserve_result(q.reserve(self.session, None))

    def do_reserve_with_timeout(self, timeout: int) -> None:
        self._count("reserve-with-timeout")
        self._reserve_result(self.queue.reserve(self.session, None if timeout < 0 else timeout))

    def _reserve_result(self, result) -> None:
        if result.__class__ is Job:
            self._out.append(_job_reply(b"RESERVED", result))
        elif result is None:
            if self._eof:  # a half-closed client cannot wait
                self.queue.cancel_wait(self.session)
                self._write(TIMED_OUT)
                return
            self._blocked = True
        elif result is _TIMED_OUT_RESULT:
            self._write(TIMED_OUT)
        elif result is _DEADLINE_SOON_RESULT:
            self._write(DEADLINE_SOON)

    def do_reserve_job(self, job_id: int) -> None:
        try:
            job = self.queue.reserve_job(self.session, job_id)
        except JournalError:
            self._write(INTERNAL_ERROR)
            return
        self._write(NOT_FOUND if job is None else _job_reply(b"RESERVED", job))

    def do_delete(self, job_id: int) -> None:
        q = self.queue
        q.cmd_counts["delete"] += 1
        try:
            ok = q.delete(self.session, job_id)
        except JournalError:
            self._write(INTERNAL_ERROR)
            return
        self._out.append(DELETED if ok else NOT_FOUND)

    def do_release(self, job_id: int, pri: int, delay: int) -> None:
        self._count("release")
        try:
            ok = self.queue.release(self.session, job_id, pri, delay)
        except JournalError:
            self._write(INTERNAL_ERROR)
            return
        self._write(RELEASED if ok else NOT_FOUND)

    def do_bury(self, job_id: int, pri: int) -> None:
        self._count("bury")
        try:
            ok = self.queue.bury(self.session, job_id, pri)
        except JournalError:
            self._write(INTERNAL_ERROR)
            return
        self._write(BURIED if ok else NOT_FOUND)

    def do_touch(self, job_id: int) -> None:
        self._count("touch")
        self._write(TOUCHED if self.queue.touch(self.session, job_id) else NOT_FOUND)

    def do_watch(self, name: bytes) -> None:
        self._count("watch")
        self._write(b"WATCHING %d\r\n" % self.queue.watch(self.session, name))

    def do_ignore(self, name: bytes) -> None:
        self._count("ignore")
        count = self.queue.ignore(self.session, name)
        self._write(NOT_IGNORED if count is None else b"WATCHING %d\r\n" % count)

    def _found(self, job: Optional[Job]) -> None:
        self._write(NOT_FOUND if job is None else _job_reply(b"FOUND", job))

    def do_peek(self, job_id: int) -> None:
        self._count("peek")
        self._found(self.queue.peek(job_id))

    def do_peek_ready(self) -> None:
        self._count("peek-ready")
        self._found(self.queue.peek_ready(self.session))

    def do_peek_delayed(self) -> None:
        self._count("peek-delayed")
        self._found(self.queue.peek_delayed(self.session))

    def do_peek_buried(self) -> None:
        self._count("peek-buried")
        self._found(self.queue.peek_buried(self.session))

    def do_kick(self, bound: int) -> None:
        self._count("kick")
        try:
            n = self.queue.kick(self.session, bound)
        except JournalError:
            self._write(INTERNAL_ERROR)
            return
        self._write(b"KICKED %d\r\n" % n)

    def do_kick_job(self, job_id: int) -> None:
        # beanstalkd has no counter for kick-job, and it does not count in cmd-kick.
        try:
            ok = self.queue.kick_job(job_id)
        except JournalError:
            self._write(INTERNAL_ERROR)
            return
        self._write(KICKED if ok else NOT_FOUND)

    def _stats_reply(self, pairs) -> None:
        if pairs is None:
            self._write(NOT_FOUND)
        else:
            self._write(yaml.ok_reply(yaml.render_mapping(pairs, self.factory.stats_quoted)))

    def do_stats_job(self, job_id: int) -> None:
        self._count("stats-job")
        self._stats_reply(self.queue.stats_job(job_id))

    def do_stats_tube(self, name: bytes) -> None:
        self._count("stats-tube")
        self._stats_reply(self.queue.stats_tube(name))

    def do_stats(self) -> None:
        self._count("stats")
        self._stats_reply(self.queue.stats())

    def do_list_tubes(self) -> None:
        self._count("list-tubes")
        self._write(yaml.ok_reply(yaml.sequence(self.queue.list_tubes())))

    def do_list_tube_used(self) -> None:
        self._count("list-tube-used")
        self._write(b"USING %s\r\n" % self.session.use.name)

    def do_list_tubes_watched(self) -> None:
        self._count("list-tubes-watched")
        self._write(yaml.ok_reply(yaml.sequence(self.queue.list_tubes_watched(self.session))))

    def do_pause_tube(self, name: bytes, delay: int) -> None:
        self._count("pause-tube")
        if not valid_tube_name(name):
            self._write(BAD_FORMAT)
            return
        self._write(PAUSED if self.queue.pause_tube(name, delay) else NOT_FOUND)

    def do_quit(self) -> None:
        self._close()

    # ------------------------------------------- SessionListener (async replies)

    def reserved(self, job: Job) -> None:
        self._write(_job_reply(b"RESERVED", job))
        self._unblock()

    def timed_out(self) -> None:
        self._write(TIMED_OUT)
        self._unblock()

    def deadline_soon(self) -> None:
        self._write(DEADLINE_SOON)
        self._unblock()


# ---------------------------------------------------------------- dispatch tables

def _handler_name(command: str) -> str:
    return "do_" + command.replace("-", "_")


_HANDLERS: Dict[str, Callable] = {
    name: getattr(BeanstalkServerProtocol, _handler_name(name)) for name in BY_NAME
}

#: Commands without arguments, by their exact line.
_NO_ARGS: Dict[bytes, Callable] = {
    name.encode(): _HANDLERS[name] for name, spec in BY_NAME.items()
    if not spec.args
}


# Fast paths: parse a well-formed argument text of a hot command and run it,
# returning True; return False for anything unusual, which then goes through
# the exact parser (protocol.commands) and gets the same values or error.

def _fast_id_command(handler: Callable) -> Callable[[BeanstalkServerProtocol, bytes], bool]:
    def fast(proto: BeanstalkServerProtocol, text: bytes) -> bool:
        if text.isdigit():
            value = int(text)
            if value <= U64_MAX:
                handler(proto, value)
                return True
        return False
    return fast


#: Exact lines: the commands without arguments (-> handler) and memoised put
#: lines (``b"put 1024 0 120 100"`` -> its four values).  Producers repeat the
#: same few put lines, and one dict lookup of the whole line costs a fraction
#: of splitting it and converting four numbers; the put entries are dropped
#: when they reach :data:`_PUT_HEADERS_MAX`, so the table stays small.
_LINES: Dict[bytes, object] = dict(_NO_ARGS)
_PUT_HEADERS_MAX = 1024


def _put_header(line: bytes) -> Optional[Tuple[int, int, int, int]]:
    """Parse and memoise ``pri delay ttr bytes`` of a well-formed ``put`` line
    not yet in :data:`_LINES` (the caller looked); None if malformed."""
    parts = line.split(b" ")
    if len(parts) == 5:
        _, a, b, c, d = parts
        if a.isdigit() and b.isdigit() and c.isdigit() and d.isdigit():
            header = int(a), int(b), int(c), int(d)
            if max(header) <= U32_MAX:
                if len(_LINES) >= len(_NO_ARGS) + _PUT_HEADERS_MAX:
                    _LINES.clear()
                    _LINES.update(_NO_ARGS)
                _LINES[line] = header
                return header
    return None


def _fast_release(proto: BeanstalkServerProtocol, text: bytes) -> bool:
    parts = text.split(b" ")
    if len(parts) == 3 and all(p.isdigit() for p in parts):
        job_id, pri, delay = int(parts[0]), int(parts[1]), int(parts[2])
        if job_id <= U64_MAX and pri <= U32_MAX and delay <= U32_MAX:
            proto.do_release(job_id, pri, delay)
            return True
    return False


def _fast_timeout(proto: BeanstalkServerProtocol, text: bytes) -> bool:
    if text.isdigit() and len(text) < 10:
        proto.do_reserve_with_timeout(int(text))
        return True
    return False


_FAST: Dict[bytes, Callable[[BeanstalkServerProtocol, bytes], bool]] = {
    b"release": _fast_release,
    b"reserve-with-timeout": _fast_timeout,
}
for _name in ("delete", "touch", "peek", "stats-job", "reserve-job", "kick-job"):
    _FAST[_name.encode()] = _fast_id_command(_HANDLERS[_name])


__all__ = ["BeanstalkServerProtocol", "MAX_BUFFERED_WHILE_WAITING"]
