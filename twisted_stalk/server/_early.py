# -*- test-case-name: tests.test_early -*-
"""A speed trick, fenced: serve the first connections while Twisted loads.

``stalkd`` binds its port at once, but importing Twisted takes a few hundred
milliseconds on a slow machine, and test suites written for beanstalkd talk
to the server 0.1 s after they start it.  :class:`EarlyServer` answers from
the moment the memory engine is loaded: a thread runs a small ``poll``
loop over the bound socket and the connections it accepts, with the engine
(:mod:`twisted_stalk.core`) and the wire codec (:mod:`twisted_stalk.protocol`),
neither of which imports Twisted, while the main thread imports Twisted.
Then :meth:`EarlyServer.stop` ends the loop and :mod:`._handover` gives the
engine, its sessions, their sockets and their unread input and unsent
replies to the reactor.  Nothing here imports Twisted.

Nor anything else the first reply cannot afford (docs/operations.md,
"Startup time"): the path to it, from ``stalkd``'s command line through this
module, the engine and the command table, imports no :mod:`typing` (its names
are for the type checker, under ``TYPE_CHECKING = False``; the core's named
tuples and yaml's type aliases are built on first use: ``stalkd`` has its main
thread build them beside the loop), :mod:`re`,
:mod:`enum`, :mod:`socket`, :mod:`selectors`, :mod:`threading` or
:mod:`collections`: the port is a :class:`_socket.socket` (``stalkd`` wraps
it in a :class:`socket.socket` once Twisted is in; the connections the loop
accepts are handed over as descriptors), the loop polls with
:func:`select.poll` (:class:`Poller`: the calls and events of
:class:`selectors.PollSelector`) and runs on a bare :mod:`_thread` (which,
like a daemon thread, does not hold up the interpreter's exit).  None of
this changes a reply; the contract below holds as it did.

Contract: a connection served here gets exactly the replies, in the same
order, that :class:`~twisted_stalk.server.protocol.BeanstalkServerProtocol`
gives for the same bytes, whatever reads they arrive in: the same framing
(a line of at most ``MAX_LINE`` bytes with its CRLF, a longer one answered
BAD_FORMAT once its CRLF comes; a put body read raw; an oversized body
discarded and answered JOB_TOO_BIG), the same exact parser
(:func:`~twisted_stalk.protocol.commands.parse_args`), the same engine calls
and the same replies (:func:`~twisted_stalk.server.render.render_table`); a
waiting reserve holds the connection's later commands until it is answered;
a half-closed client's waiting reserve times out; the same bounds on unsent
replies and on input read ahead.  tests/test_early.py checks this with
hypothesis against the protocol, and the hand-over over real sockets.

The engine's deadlines (delays, TTRs, reserve timeouts, pauses) set the
selector's timeout, so they fire on time here too; the hand-over arms the
reactor's timer at the next one.

Where it is not used (:func:`eligible`): flags whose work needs Twisted or
must happen before the first reply (TLS, ``-b``, whose replay must come
first, ``--engine``, ``-u``, ``--extensions``, ``--metrics``, ``--web``,
``--shutdown-grace``, ``--busy-poll``, ``--metrics-tube*``).  There the
connections wait in the listen backlog until the reactor runs, as before.
"""
from __future__ import annotations

import _socket
import _thread
import os
import select
import sys
import time

from ..core.engine import Engine
from ..core.facts import Facts
from ..core.job import JobRecord
from ..core.outcomes import BAD_FORMAT as BAD_FORMAT_OUTCOME
from ..core.outcomes import WAITING
from ..protocol.commands import CommandError, identify, parse_args
from ..protocol.constants import BAD_FORMAT, MAX_LINE, MAX_LINE_CONTENT, TIMED_OUT, UNKNOWN_COMMAND
from .output import MAX_BUFFERED_WHILE_WAITING, MAX_UNSENT
from .render import LINES, job_reply, render_table

TYPE_CHECKING = False  # (typing's own costs the first reply a few ms)
if TYPE_CHECKING:  # pragma: no cover
    from typing import Any, Callable, Dict, List, Optional

# Framer states (the protocol's, same meaning).
LINE, DISCARD, SKIP_LINE = range(3)

#: Flags (as :func:`twisted_stalk.stalkd.parse_argv` names them) any of which,
#: given, leaves the port to the reactor (see the module docstring).
NOT_EARLY = ("tls-cert", "tls-key", "tls-ca", "b", "engine", "u", "extensions", "metrics",
             "web", "web-auth", "busy-poll", "metrics-tube-pattern", "shutdown-grace")
#: Listeners the early loop serves: TCP and unix sockets.
_FAMILIES = (_socket.AF_INET, _socket.AF_INET6, getattr(_socket, "AF_UNIX", _socket.AF_INET))
#: ``--stats-yaml`` values: stats strings quoted (1.13) or bare (1.12).
STATS_YAML = {None: True, "1.13": True, "1.12": False}
#: Descriptors kept back from the connection cap derived from the open-file
#: limit (the reactor's own derivation keeps back as many:
#: ``limits.RESERVED_FDS``, checked by tests/test_early.py).
RESERVED_FDS = 64
#: Bytes read per recv.
READ_SIZE = 16384
#: The thread switch interval while the loop runs: the main thread is
#: importing Twisted, and a reply should not wait 5 ms (the default) for it
#: to let go of the interpreter.
SWITCH_INTERVAL = 0.0005


#: The loop's thread, by name in Python and in the kernel (``top -H``,
#: ``/proc/PID/task/*/comm``: tests/servers.py waits for it to end).
THREAD_NAME = "stalkd-early"


def _name_thread(name: str) -> None:
    """Give the calling thread ``name`` in the kernel too (Linux; else nothing)."""
    try:
        with open(f"/proc/self/task/{_thread.get_native_id()}/comm", "w") as comm:
            comm.write(name)
    except OSError:
        pass


def eligible(opts: Dict[str, object], family: int) -> bool:
    """True when ``stalkd`` with these flags may serve before Twisted is loaded."""
    if family not in _FAMILIES:
        return False
    if os.environ.get("TWISTED_STALK_EARLY", "1") == "0":  # the switch, for comparisons
        return False
    if opts.get("stats-yaml") not in STATS_YAML:
        return False  # refused later, with status 5
    return not any(opts.get(name) for name in NOT_EARLY)


def serve_early(listener: Any, family: int, opts: Dict[str, object],
                max_job_size: int, drain_requested: Callable[[], bool]) -> Optional["EarlyServer"]:
    """Start serving ``listener`` now if ``opts`` allow (:func:`eligible`), else None."""
    if not eligible(opts, family):
        return None
    from .. import PROTOCOL_VERSION
    return EarlyServer(listener, max_job_size, STATS_YAML[opts.get("stats-yaml")],  # type: ignore[index]
                       int(opts.get("max-connections") or 0),  # type: ignore[arg-type]
                       int(opts.get("max-memory") or 0),  # type: ignore[arg-type]
                       drain_requested, PROTOCOL_VERSION).start()


class Clock:
    """The engine's clock until the reactor's takes over (the same time base)."""

    seconds = staticmethod(time.time)


class EarlyConnection:
    """One client, served by the early loop: framing, dispatch and its replies.

    The framing keeps every byte of a command it has not run yet in
    :attr:`buf` (a put line stays there until its whole body has come), so the
    hand-over gives the protocol exactly the input it has not seen; only the
    over-long line being skipped and the oversized body being discarded are
    states of their own (:attr:`mode`).
    """

    __slots__ = ("sock", "engine", "render", "session", "buf", "out", "mode", "need", "after",
                 "blocked", "eof", "closing", "events")

    def __init__(self, sock: Any, engine: Engine, render: Dict[str, Callable[[Any], bytes]]) -> None:
        self.sock = sock
        self.engine = engine
        self.render = render
        #: Input not yet run: the start of the next command and what follows.
        self.buf = bytearray()
        #: Replies not yet written.
        self.out = bytearray()
        self.mode = LINE
        #: Bytes still to discard (DISCARD), and the reply to send after them.
        self.need = 0
        self.after = b""
        #: True while a reserve waits (its result comes as a wake-up).
        self.blocked = False
        #: The client half-closed (or went); closing: close once replies are out.
        self.eof = False
        self.closing = False
        #: The selector events registered for it (0: none).
        self.events = 0
        self.session = engine.open_session(self)

    # ------------------------------------------------------------- engine

    def wake(self, outcome: Any) -> None:
        """The waiting reserve's result (a JobRecord, TIMED_OUT or DEADLINE_SOON)."""
        if self.closing:
            return
        self.out += job_reply(b"RESERVED", outcome) if outcome.__class__ is JobRecord else LINES[outcome]
        self.blocked = False
        self.run()

    # ------------------------------------------------------------- input

    def received(self, data: bytes) -> None:
        """Bytes read from the client: run the commands they complete."""
        self.buf += data
        self.run()

    def ended(self) -> None:
        """The client half-closed: a waiting reserve times out (then what it
        sent before runs); the connection closes once its replies are out."""
        self.eof = True
        if self.blocked and self.engine.cancel_wait(self.session):
            self.out += TIMED_OUT
            self.blocked = False
            self.run()
        if not self.blocked:
            self.closing = True

    @property
    def wants_read(self) -> bool:
        return not (self.eof or self.closing or len(self.out) > MAX_UNSENT
                    or (self.blocked and len(self.buf) > MAX_BUFFERED_WHILE_WAITING))

    def run(self) -> None:
        """Run the complete commands in :attr:`buf`, in order, until one
        blocks, the connection closes or too many replies are unsent."""
        buf = self.buf
        out = self.out
        pos = 0
        end = len(buf)
        while pos < end and not (self.blocked or self.closing) and len(out) <= MAX_UNSENT:
            mode = self.mode
            if mode == DISCARD:
                take = min(self.need, end - pos)
                pos += take
                self.need -= take
                if not self.need:
                    self.mode = LINE
                    out += self.after
                continue
            i = buf.find(b"\r\n", pos)
            if mode == SKIP_LINE:
                if i < 0:
                    # Keep a trailing CR: its LF may come in the next read.
                    pos = end - 1 if buf[end - 1] == 13 else end
                    break
                self.mode = LINE
                out += BAD_FORMAT
                pos = i + 2
                continue
            if i < 0:
                if end - pos >= MAX_LINE:
                    self.mode = SKIP_LINE  # too long: discard through its CRLF
                    continue
                break
            moved = self._command(bytes(buf[pos:i]), i + 2)
            if moved < 0:
                break  # a put whose body has not all come
            pos = moved
        if pos:
            del buf[:pos]

    def _command(self, line: bytes, start: int) -> int:
        """Run one command line; returns where the input goes on (-1: the
        put body from ``start`` is not all there yet)."""
        out = self.out
        if len(line) > MAX_LINE_CONTENT or b"\0" in line:
            out += BAD_FORMAT
            return start
        spec, text = identify(line)
        if spec is None:
            out += UNKNOWN_COMMAND
            return start
        try:
            args = parse_args(spec, text)
        except CommandError as e:
            out += e.reply
            return start
        engine = self.engine
        name = spec.name
        if name == "put":
            pri, delay, ttr, nbytes, trailing_ok = args
            if nbytes > engine.max_job_size:  # framing must know at once: discard it
                self.mode = DISCARD
                self.need = nbytes + 2
                self.after = self.render["put"](engine.refuse_oversized(self.session, nbytes))
                return start
            if not trailing_ok:
                out += self.render["put"](engine.reject_put(self.session, BAD_FORMAT_OUTCOME))
                return start
            stop = start + nbytes + 2
            if stop > len(self.buf):
                return -1
            outcome = engine.put(self.session, pri, delay, ttr, bytes(self.buf[start:stop]))
            out += self.render["put"](outcome)
            return stop
        if name == "quit":
            self.closing = True
            return start
        # The command table names the Engine member (as the protocol's _plain_handler).
        outcome = getattr(self.engine, spec.method)(self.session, *args)
        if outcome is WAITING:
            if self.eof:  # a half-closed client cannot wait
                engine.cancel_wait(self.session)
                out += TIMED_OUT
            else:
                self.blocked = True
        elif name.startswith("reserve-with"):
            out += self.render["reserve"](outcome)  # (the protocol renders both alike)
        else:
            out += self.render[name](outcome)
        return start

    # ------------------------------------------------------------- output

    def flush(self) -> bool:
        """Write what the socket takes; False if the connection broke."""
        out = self.out
        if out:
            try:
                sent = self.sock.send(out)
            except (BlockingIOError, InterruptedError):
                return True
            except OSError:
                return False
            del out[:sent]
        return True


class EarlyServer:
    """The early loop: a thread serving ``listener`` with one memory engine."""

    def __init__(self, listener: Any, max_job_size: int, stats_quoted: bool = True,
                 max_connections: int = 0, max_memory: int = 0,
                 drain_requested: Callable[[], bool] = lambda: False,
                 version: Optional[str] = None) -> None:
        self.listener = listener
        self.clock = Clock()
        facts: Facts
        if version is not None:
            from .facts import ProcessFacts
            facts = ProcessFacts(version, self.clock.seconds())
        else:
            facts = Facts(self.clock.seconds())
        # Built where every engine is built (twisted_stalk.engines).
        from ..engines import open_engine
        self.engine = open_engine("memory:", self.clock, max_job_size, facts)
        self.engine.limit_memory(max_memory)
        self.render = render_table(stats_quoted)
        #: At most this many connections (0: as the open-file limit allows).
        self.max_connections = max_connections or _derived_cap()
        self._drain_requested = drain_requested
        #: Open connections, in the order they were accepted.
        self.connections: Dict[EarlyConnection, None] = {}
        self._selector = Poller()
        self._wake_r, self._wake_w = os.pipe()
        self._stopping = False
        self._listening = False
        #: Held while the loop's thread runs (stop() waits on it).
        self._running = _thread.allocate_lock()
        self._started = False
        self._switch = sys.getswitchinterval()
        #: An exception that ended the loop early (reported by the hand-over).
        self.failure: Optional[BaseException] = None

    # ------------------------------------------------------------ control

    def start(self) -> "EarlyServer":
        self._selector.register(self._wake_r, EVENT_READ, None)
        self._listen(True)
        sys.setswitchinterval(min(self._switch, SWITCH_INTERVAL))
        # A bare thread (threading's module costs the first reply its import);
        # like a daemon thread, it does not hold up the interpreter's exit.
        self._running.acquire()
        self._started = True
        _thread.start_new_thread(self._run, ())
        return self

    def stop(self) -> List[EarlyConnection]:
        """End the loop (from another thread) and return the open
        connections, oldest first, for the hand-over; the listener and the
        connections' sockets stay open."""
        self._stopping = True
        try:
            os.write(self._wake_w, b"x")
        except OSError:
            pass
        if self._started:
            with self._running:  # the loop's thread has ended
                pass
        sys.setswitchinterval(self._switch)
        os.close(self._wake_r)
        os.close(self._wake_w)
        return list(self.connections)

    # -------------------------------------------------------------- loop

    def _run(self) -> None:
        _name_thread(THREAD_NAME)
        try:
            self._loop()
        except BaseException as e:  # noqa: B902 - reported by the hand-over, never lost
            self.failure = e
        finally:
            self._running.release()

    def _loop(self) -> None:
        engine = self.engine
        select = self._selector.select
        now = self.clock.seconds
        while not self._stopping:
            at = engine.next_deadline()
            timeout = None if at is None else max(0.0, at - now())
            ready = select(timeout)
            if self._drain_requested() and not engine.draining:
                engine.drain()  # before the input that came after the signal
            for fileobj, conn, events in ready:
                if conn is None:
                    if fileobj is self.listener:
                        self._accept()
                    continue  # the stop signal: the loop condition ends it
                if events & EVENT_READ:
                    self._read(conn)
                if events & EVENT_WRITE and conn in self.connections:
                    self._settle(conn)
            if at is not None and now() >= at:
                engine.tick()
            self._deliver()

    def _accept(self) -> None:
        listener = self.listener
        while len(self.connections) < self.max_connections:
            try:
                fd, _ = listener._accept()  # (socket.socket's accept, without its module)
            except OSError:  # EAGAIN: none left; anything else: the reactor's accept sees it
                break
            sock = _socket.socket(listener.family, _socket.SOCK_STREAM, 0, fd)
            sock.setblocking(False)
            try:
                sock.setsockopt(_socket.IPPROTO_TCP, _socket.TCP_NODELAY, 1)
            except OSError:
                pass
            conn = EarlyConnection(sock, self.engine, self.render)
            self.connections[conn] = None
            self._settle(conn)
        self._listen(len(self.connections) < self.max_connections)

    def _listen(self, on: bool) -> None:
        if on != self._listening:
            self._listening = on
            if on:
                self._selector.register(self.listener, EVENT_READ, None)
            else:
                self._selector.unregister(self.listener)

    def _read(self, conn: EarlyConnection) -> None:
        try:
            data = conn.sock.recv(READ_SIZE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._drop(conn)
            return
        if data:
            conn.received(data)
        else:
            conn.ended()
        self._settle(conn)

    def _deliver(self) -> None:
        """The engine's wake-ups, after the replies of the commands that caused them."""
        engine = self.engine
        while engine.wakeups:
            wakeups, engine.wakeups = engine.wakeups, []
            for s, outcome in wakeups:
                if not s.closed:
                    s.frontend.wake(outcome)
                    self._settle(s.frontend)

    def _settle(self, conn: EarlyConnection) -> None:
        """Write what can be written; close a finished connection; register
        the events it now waits for."""
        if conn not in self.connections:
            return
        if not conn.flush():
            self._drop(conn)
            return
        if conn.closing and not conn.out:
            self._drop(conn)
            return
        if len(conn.out) <= MAX_UNSENT and conn.buf and not (conn.blocked or conn.closing):
            conn.run()  # input held while replies were unsent
            if conn.out and not conn.flush():
                self._drop(conn)
                return
        events = (EVENT_READ if conn.wants_read else 0) | (EVENT_WRITE if conn.out else 0)
        if events != conn.events:
            if not conn.events:
                self._selector.register(conn.sock, events, conn)
            elif not events:
                self._selector.unregister(conn.sock)
            else:
                self._selector.modify(conn.sock, events, conn)
            conn.events = events

    def _drop(self, conn: EarlyConnection) -> None:
        """Close a connection and its session (its reserved jobs go back)."""
        del self.connections[conn]
        if conn.events:
            self._selector.unregister(conn.sock)
            conn.events = 0
        conn.closing = True
        conn.sock.close()
        self.engine.close_session(conn.session)
        self._listen(len(self.connections) < self.max_connections)


class Poller:
    """What the loop uses of :class:`selectors.PollSelector`, the same
    calls and events, without importing :mod:`selectors` (and with it
    :mod:`collections` and :mod:`math`) before the first reply:
    :meth:`select` gives ``(fileobj, data, events)`` triples."""

    __slots__ = ("_poll", "_keys")

    def __init__(self) -> None:
        self._poll = select.poll()
        #: fd -> (fileobj, data, events)
        self._keys: Dict[int, tuple] = {}

    def register(self, fileobj: Any, events: int, data: Any) -> None:
        fd = fileobj if fileobj.__class__ is int else fileobj.fileno()
        self._poll.register(fd, _POLL_EVENTS[events])
        self._keys[fd] = (fileobj, data, events)

    def modify(self, fileobj: Any, events: int, data: Any) -> None:
        fd = fileobj if fileobj.__class__ is int else fileobj.fileno()
        self._poll.modify(fd, _POLL_EVENTS[events])
        self._keys[fd] = (fileobj, data, events)

    def unregister(self, fileobj: Any) -> None:
        fd = fileobj if fileobj.__class__ is int else fileobj.fileno()
        self._poll.unregister(fd)
        del self._keys[fd]

    def select(self, timeout: Optional[float]) -> List[tuple]:
        """The ready ``(fileobj, data, events)``; ``timeout`` in seconds
        (None: no limit), rounded up to the millisecond as selectors does."""
        ms = None if timeout is None else max(0, -int(-timeout * 1000 // 1))
        ready = []
        keys = self._keys
        for fd, event in self._poll.poll(ms):
            key = keys.get(fd)
            if key is None:
                continue
            events = (EVENT_WRITE if event & ~select.POLLIN else 0) | \
                (EVENT_READ if event & ~select.POLLOUT else 0)
            if events & key[2]:
                ready.append((key[0], key[1], events & key[2]))
        return ready


#: selectors' EVENT_READ and EVENT_WRITE.
EVENT_READ, EVENT_WRITE = 1, 2
_POLL_EVENTS = {EVENT_READ: select.POLLIN, EVENT_WRITE: select.POLLOUT,
                EVENT_READ | EVENT_WRITE: select.POLLIN | select.POLLOUT}


def _derived_cap() -> int:
    """The connection cap the open-file limit allows as it stands (the
    reactor raises that limit later; this is never more than it allows).
    ``sysconf(_SC_OPEN_MAX)`` is that soft limit (glibc, musl, the BSDs),
    without loading the ``resource`` extension before the first reply."""
    try:
        soft = os.sysconf("SC_OPEN_MAX")
    except (AttributeError, ValueError, OSError):
        soft = -1
    if 0 < soft < 1 << 30:
        return max(1, soft - RESERVED_FDS)
    import resource
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 1 << 30
    return max(1, soft - RESERVED_FDS)


__all__ = ["EarlyConnection", "EarlyServer", "NOT_EARLY", "eligible", "serve_early"]
