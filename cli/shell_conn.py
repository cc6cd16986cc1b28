"""The shell's connection: a small blocking socket client with session state.

Why blocking sockets and not the Twisted client: the interactive shell spends
its life inside prompt_toolkit's own event loop, and between prompts it does
exactly one request at a time.  A plain socket keeps that simple, starts fast
(no reactor import), and makes Ctrl-C out of a blocking ``reserve`` trivial:
the KeyboardInterrupt lands in ``recv``, the shell drops the socket (the
server then returns the jobs reserved on it to ready), reconnects and restores
``use``/``watch``.

Replies are read by shape: ``OK <n>``, ``FOUND <id> <n>`` and
``RESERVED <id> <n>`` carry a body of ``n`` bytes plus CRLF; everything else
is a single line.  Whether a reply means success depends on the command
(``BURIED`` after ``bury`` is success, after ``put`` it means out of memory);
:func:`reply_ok` decides that from the shared command table.
"""
from __future__ import annotations

import os
import select
import socket
import ssl
import time
from dataclasses import dataclass
from typing import Callable, Dict, FrozenSet, List, Optional

from twisted_stalk.protocol.constants import DEFAULT_PORT, DEFAULT_TUBE
from twisted_stalk.protocol.replies import (
    ERRORS,
    MAX_REPLY_BODY,
    MAX_REPLY_LINE,
    UnexpectedReply,
    command_spec,
    decode_reply,
)

#: Reply words that carry a body, and the index of the length argument.
BODY_WORDS = {b"OK": 0, b"FOUND": 1, b"RESERVED": 1}

#: Reply words that are never success, whatever the command.
ERROR_WORDS = frozenset([
    b"OUT_OF_MEMORY", b"INTERNAL_ERROR", b"BAD_FORMAT", b"UNKNOWN_COMMAND",
    b"EXPECTED_CRLF", b"JOB_TOO_BIG", b"DRAINING", b"NOT_FOUND", b"TIMED_OUT",
    b"DEADLINE_SOON", b"NOT_IGNORED",
])

#: What each reply word means, for people.
MEANINGS = {
    "OUT_OF_MEMORY": "the server could not allocate memory for the job; try later",
    "INTERNAL_ERROR": "the server hit a bug",
    "BAD_FORMAT": "the server could not parse the command line",
    "UNKNOWN_COMMAND": "the server does not know this command",
    "EXPECTED_CRLF": "the body was not followed by CRLF: its byte count did not match",
    "JOB_TOO_BIG": "the body is larger than the server's max-job-size",
    "DRAINING": "the server is in drain mode and refuses new jobs",
    "NOT_FOUND": "no such job or tube, or not in a state this command accepts",
    "TIMED_OUT": "no job became ready in time",
    "DEADLINE_SOON": "a job you reserved is in its last second of TTR: delete, release or touch it",
    "NOT_IGNORED": "you cannot ignore the only tube you watch",
}


def meaning(word: str) -> str:
    """One line on what an error reply word means (the shell's own words, or
    the shared error class's docstring from twisted_stalk.protocol.replies)."""
    if word in MEANINGS:
        return MEANINGS[word]
    cls = ERRORS.get(word)
    doc = (cls.__doc__ or "").strip().split("\n")[0] if cls else ""
    prefix = f"``{word}``: "
    if doc.startswith(prefix):
        doc = doc[len(prefix):]
    return doc.rstrip(".")


class StalkError(Exception):
    """Base of the shell's connection errors; str() is a one-line message."""


class ConnectionFailed(StalkError):
    """The server could not be reached."""


class ConnectionLost(StalkError):
    """The connection broke (or the server stopped answering) mid-request."""


class InterruptedRequest(Exception):
    """Ctrl-C while waiting for a reply: the connection was dropped.

    ``returned`` lists the ids of jobs the old connection had reserved, which
    the server has put back to ready; ``restored`` tells whether a new
    connection was made.
    """

    def __init__(self, returned: List[int], restored: bool, error: str = "") -> None:
        super().__init__("interrupted")
        self.returned = returned
        self.restored = restored
        self.error = error


# --------------------------------------------------------------------------
# Addresses

@dataclass(frozen=True)
class Target:
    """Where the server is: ``tcp`` host/port, ``unix`` path or ``tls`` host/port.

    For ``tls``: ``cafile`` verifies the server (default: the system's CAs),
    ``insecure`` skips that, and ``cert``/``key`` are the client certificate
    and its private key for servers that require one (mutual TLS; ``key``
    may be left out when ``cert`` holds both)."""

    scheme: str = "tcp"
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    path: str = ""
    insecure: bool = False
    cafile: str = ""
    cert: str = ""
    key: str = ""

    def __str__(self) -> str:
        if self.scheme == "unix":
            return f"unix:{self.path}"
        host = f"[{self.host}]" if ":" in self.host else self.host
        prefix = "tls:" if self.scheme == "tls" else ""
        return f"{prefix}{host}:{self.port}"


def parse_target(text: str) -> Target:
    """Parse ``host:port``, ``host``, ``:port``, ``[::1]:p``, ``tcp:``/``tcp://``,
    ``unix:PATH``/``unix://PATH`` and ``tls:``/``tls://`` addresses.

    Raises ValueError with a readable message.
    """
    text = text.strip()
    if not text:
        raise ValueError("empty address")
    scheme = "tcp"
    for name in ("tcp", "unix", "tls", "ssl"):
        for sep in ("://", ":"):
            if text.startswith(name + sep):
                scheme = "tls" if name == "ssl" else name
                text = text[len(name) + len(sep):]
                break
        else:
            continue
        break
    if scheme == "unix":
        if not text:
            raise ValueError("unix: address needs a socket path")
        return Target("unix", path=text)
    host, port = text, DEFAULT_PORT
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            raise ValueError(f"bad address {text!r}: missing ]")
        host, rest = text[1:end], text[end + 1:]
        if rest:
            if not rest.startswith(":"):
                raise ValueError(f"bad address {text!r}")
            port = _port(rest[1:], text)
    elif text.count(":") == 1:
        host, _, p = text.partition(":")
        port = _port(p, text)
    elif text.count(":") > 1:
        raise ValueError(f"bad address {text!r}: write IPv6 addresses as [addr]:port")
    host = host.rstrip("/") or "127.0.0.1"
    return Target(scheme, host=host, port=port)


def _port(text: str, whole: str) -> int:
    text = text.rstrip("/")
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise ValueError(f"bad port in address {whole!r}")
    return int(text)


# --------------------------------------------------------------------------
# Replies

@dataclass
class Reply:
    """One server reply: its line (without CRLF) and its body, if any."""

    line: bytes
    body: Optional[bytes] = None

    @property
    def word(self) -> str:
        return self.line.split(b" ", 1)[0].decode("ascii", "replace")

    @property
    def args(self) -> List[bytes]:
        return self.line.split(b" ")[1:]

    @property
    def job_id(self) -> Optional[int]:
        """The job id of INSERTED/BURIED <id>/FOUND/RESERVED replies."""
        if self.word in ("INSERTED", "BURIED", "FOUND", "RESERVED") and self.args:
            try:
                return int(self.args[0])
            except ValueError:
                return None
        return None

    @property
    def count(self) -> Optional[int]:
        """The number of KICKED <n> / WATCHING <n> / FLUSHED <n> replies."""
        if self.word in ("KICKED", "WATCHING", "FLUSHED") and self.args:
            try:
                return int(self.args[0])
            except ValueError:
                return None
        return None

    def wire(self) -> bytes:
        data = self.line + b"\r\n"
        if self.body is not None:
            data += self.body + b"\r\n"
        return data


def reply_ok(command: Optional[str], reply: Reply) -> bool:
    """Whether ``reply`` is the success reply of ``command``.

    Success is the first reply listed for the command in the shared table
    (``INSERTED`` for put, ``BURIED`` for bury, ``KICKED`` for kick ...).  For
    a raw line the shell could not attribute, any non-error word counts.
    The extension verbs (``flush-tube`` ...) are judged by their own table.
    """
    if command and command_spec(command) is not None:
        try:
            return decode_reply(command, reply.line).ok
        except UnexpectedReply:
            return False
    return reply.word.encode() not in ERROR_WORDS


def unexpected(command: Optional[str], reply: Reply) -> bool:
    """True when ``reply`` is not one of the replies ``command`` can get."""
    if not command or command_spec(command) is None:
        return False
    try:
        decode_reply(command, reply.line)
    except UnexpectedReply:
        return True
    return False


# --------------------------------------------------------------------------
# The connection

WireHook = Callable[[str, bytes], None]


class Connection:
    """One blocking socket to a beanstalk server."""

    def __init__(self, target: Target, *, connect_timeout: float = 5.0,
                 reply_timeout: float = 30.0, wire: Optional[WireHook] = None) -> None:
        self.target = target
        self.connect_timeout = connect_timeout
        self.reply_timeout = reply_timeout
        self.wire = wire
        self.sock: Optional[socket.socket] = None
        self._buf = bytearray()

    @property
    def connected(self) -> bool:
        return self.sock is not None

    def connect(self) -> None:
        self.close()
        t = self.target
        try:
            if t.scheme == "unix":
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                sock.settimeout(self.connect_timeout)
                try:
                    sock.connect(t.path)
                except BaseException:
                    sock.close()
                    raise
            else:
                sock = socket.create_connection((t.host, t.port), timeout=self.connect_timeout)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                if t.scheme == "tls":
                    try:
                        ctx = tls_context(t)
                    except BaseException:
                        sock.close()
                        raise
                    try:
                        sock = ctx.wrap_socket(sock, server_hostname=t.host)
                    except BaseException:
                        sock.close()
                        raise
        except socket.timeout:
            raise ConnectionFailed(f"cannot connect to {t}: timed out") from None
        except (OSError, ssl.SSLError) as e:
            raise ConnectionFailed(f"cannot connect to {t}: {_oserror(e)}") from None
        self.sock = sock
        self._buf.clear()

    def close(self) -> None:
        sock, self.sock = self.sock, None
        self._buf.clear()
        if sock is not None:
            try:
                sock.close()
            except OSError:
                pass

    def send(self, data: bytes) -> None:
        if self.sock is None:
            raise ConnectionLost("not connected")
        if self.wire:
            self.wire("send", data)
        try:
            self.sock.settimeout(self.reply_timeout)
            self.sock.sendall(data)
        except (OSError, ssl.SSLError) as e:
            self.close()
            raise ConnectionLost(f"connection to {self.target} lost: {_oserror(e)}") from None

    def _fill(self, timeout: Optional[float]) -> None:
        assert self.sock is not None
        self.sock.settimeout(timeout)
        try:
            chunk = self.sock.recv(65536)
        except socket.timeout:
            raise
        except (OSError, ssl.SSLError) as e:
            self.close()
            raise ConnectionLost(f"connection to {self.target} lost: {_oserror(e)}") from None
        if not chunk:
            self.close()
            raise ConnectionLost(f"connection to {self.target} closed by the server")
        if self.wire:
            self.wire("recv", chunk)
        self._buf += chunk

    def read_reply(self, *, blocking: bool = False) -> Reply:
        """Read one reply.  ``blocking`` waits forever (reserve); otherwise the
        reply timeout applies and expiry drops the connection."""
        if self.sock is None:
            raise ConnectionLost("not connected")
        timeout = None if blocking else self.reply_timeout
        try:
            while True:
                end = self._buf.find(b"\r\n")
                if end >= 0:
                    break
                if len(self._buf) > MAX_REPLY_LINE:
                    self.close()
                    raise ConnectionLost(f"{self.target} sent a reply line longer than "
                                         f"{MAX_REPLY_LINE} bytes: is it a beanstalk server?")
                self._fill(timeout)
            line = bytes(self._buf[:end])
            del self._buf[:end + 2]
            word, _, rest = line.partition(b" ")
            if word in BODY_WORDS:
                parts = rest.split(b" ")
                idx = BODY_WORDS[word]
                try:
                    size = int(parts[idx])
                except (IndexError, ValueError):
                    return Reply(line)
                if not 0 <= size <= MAX_REPLY_BODY:
                    self.close()
                    raise ConnectionLost(f"the server announced an impossible body size {size}")
                while len(self._buf) < size + 2:
                    self._fill(timeout)
                body = bytes(self._buf[:size])
                trailer = bytes(self._buf[size:size + 2])
                del self._buf[:size + 2]
                if trailer != b"\r\n":
                    self.close()
                    raise ConnectionLost("the server's reply body was not followed by CRLF")
                return Reply(line, body)
            return Reply(line)
        except socket.timeout:
            self.close()
            raise ConnectionLost(
                f"no reply from {self.target} within {self.reply_timeout:g} s; connection dropped"
            ) from None

    def readable(self, timeout: float) -> bool:
        """Whether a reply (or part of one) is ready within ``timeout`` s."""
        if self._buf or self.sock is None:
            return True
        if isinstance(self.sock, ssl.SSLSocket) and self.sock.pending():
            return True
        try:
            ready, _, _ = select.select([self.sock], [], [], timeout)
        except (OSError, ValueError):
            return True
        return bool(ready)

    def drain(self, wait: float = 0.25) -> List[Reply]:
        """Read whatever further replies arrive within ``wait`` seconds.

        After a raw line the server may answer more than once (a body shorter
        than its byte count is read as commands); this keeps the stream in step.
        """
        replies: List[Reply] = []
        deadline = time.monotonic() + wait
        while self.sock is not None:
            if b"\r\n" in self._buf:
                saved = self.reply_timeout
                self.reply_timeout = max(0.05, deadline - time.monotonic())
                try:
                    replies.append(self.read_reply())
                finally:
                    self.reply_timeout = saved
                continue
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                self._fill(left)
            except socket.timeout:
                break
        return replies

    def call(self, data: bytes, *, blocking: bool = False) -> Reply:
        try:
            self.send(data)
            return self.read_reply(blocking=blocking)
        except KeyboardInterrupt:
            # Its reply may still come: the next command would read it as its
            # own.  Close, so that the stream can never be out of step.
            self.close()
            raise


def tls_context(t: Target) -> ssl.SSLContext:
    """The client TLS context for ``t``: server verification (``cafile``, or
    none with ``insecure``) and the client certificate (``cert``/``key``)."""
    try:
        ctx = ssl.create_default_context(cafile=t.cafile or None)
    except (OSError, ssl.SSLError) as e:
        raise ConnectionFailed(f"cannot load the CA file {t.cafile}: {_oserror(e)}") from None
    if t.insecure:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if t.cert:
        try:
            ctx.load_cert_chain(t.cert, t.key or None)
        except (OSError, ssl.SSLError) as e:
            what = f"{t.cert} and {t.key}" if t.key else t.cert
            raise ConnectionFailed(f"cannot load the client certificate {what}: "
                                   f"{_oserror(e)}") from None
    return ctx


def _oserror(e: BaseException) -> str:
    if isinstance(e, OSError) and e.strerror:
        return e.strerror
    return str(e) or e.__class__.__name__


# --------------------------------------------------------------------------
# Session state on top of a connection

@dataclass
class Reserved:
    """A job this session holds, and when its TTR runs out (monotonic)."""

    job_id: int
    deadline: Optional[float] = None
    ttr: Optional[int] = None


class Session:
    """A connection plus the state the shell keeps across reconnects.

    ``use`` and ``watch`` are what the user asked for; after a reconnect they
    are sent again.  ``reserved`` are the jobs reserved on the current
    connection (the server returns them to ready when it closes).
    """

    def __init__(self, target: Target, *, connect_timeout: float = 5.0,
                 reply_timeout: float = 30.0, wire: Optional[WireHook] = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.conn = Connection(target, connect_timeout=connect_timeout,
                               reply_timeout=reply_timeout, wire=wire)
        self.use = DEFAULT_TUBE.decode()
        self.watch: List[str] = [DEFAULT_TUBE.decode()]
        self.reserved: Dict[int, Reserved] = {}
        self.clock = clock
        #: True once a connection has been made (so later ones are reconnects).
        self.ever_connected = False
        #: The extension verbs the server advertises (``capabilities``, asked
        #: on each connect); empty for beanstalkd or ours without --extensions.
        self.capabilities: FrozenSet[str] = frozenset()

    @property
    def target(self) -> Target:
        return self.conn.target

    @property
    def connected(self) -> bool:
        return self.conn.connected

    def set_wire(self, hook: Optional[WireHook]) -> None:
        self.conn.wire = hook

    def connect(self) -> List[str]:
        """Connect, learn the server's extension verbs and restore use/watch;
        returns the commands replayed."""
        self.conn.connect()
        self.reserved.clear()
        self.capabilities = frozenset()
        self.ever_connected = True
        self.learn_capabilities()
        return self.restore()

    def learn_capabilities(self) -> FrozenSet[str]:
        """Ask ``capabilities`` quietly (not shown by ``\\wire``: a stock
        server answers UNKNOWN_COMMAND, which means none)."""
        hook, self.conn.wire = self.conn.wire, None
        try:
            reply = self._internal("capabilities")
        finally:
            self.conn.wire = hook
        self.track("capabilities", [], reply)
        return self.capabilities

    def restore(self) -> List[str]:
        replayed: List[str] = []
        default = DEFAULT_TUBE.decode()
        if self.use != default:
            self._internal(f"use {self.use}")
            replayed.append(f"use {self.use}")
        for tube in self.watch:
            if tube != default:
                self._internal(f"watch {tube}")
                replayed.append(f"watch {tube}")
        if default not in self.watch and self.watch:
            self._internal(f"ignore {default}")
            replayed.append(f"ignore {default}")
        return replayed

    def _internal(self, line: str) -> Reply:
        return self.conn.call(line.encode("ascii") + b"\r\n")

    def internal(self, line: str) -> Reply:
        """Send a command of the shell's own (not typed by the user)."""
        return self._internal(line)

    def drop(self) -> List[int]:
        """Close the connection; returns the reserved job ids the server frees."""
        returned = sorted(self.reserved)
        self.reserved.clear()
        self.conn.close()
        return returned

    def request(self, data: bytes, *, blocking: bool = False,
                on_wait: Optional[Callable[[], None]] = None) -> Reply:
        """Send one request and read its reply.

        ``on_wait`` is called if a blocking request has no answer after a
        moment.  Ctrl-C while waiting drops the connection, reconnects and
        restores use/watch, then raises :class:`InterruptedRequest`.
        """
        try:
            self.conn.send(data)
            if blocking and on_wait is not None and not self.conn.readable(0.3):
                on_wait()
            return self.conn.read_reply(blocking=blocking)
        except KeyboardInterrupt:
            returned = self.drop()
            try:
                self.connect()
            except StalkError as e:
                raise InterruptedRequest(returned, False, str(e)) from None
            raise InterruptedRequest(returned, True) from None

    def track(self, command: Optional[str], args: List[str], reply: Reply) -> None:
        """Update use/watch/reserved from a reply to ``command args``."""
        word = reply.word
        if word == "USING" and reply.args:
            self.use = reply.args[0].decode("ascii", "replace")
        elif word == "WATCHING" and args:
            tube = args[0]
            if command == "watch" and tube not in self.watch:
                self.watch.append(tube)
            elif command == "ignore" and tube in self.watch:
                self.watch.remove(tube)
        elif command == "list-tubes-watched" and word == "OK" and reply.body is not None:
            from twisted_stalk.protocol.yaml import parse_sequence
            tubes = parse_sequence(reply.body)
            if tubes:
                self.watch = tubes
        elif word == "RESERVED":
            jid = reply.job_id
            if jid is not None:
                self.reserved[jid] = Reserved(jid)
        elif command in ("delete", "release", "bury") and args and reply_ok(command, reply):
            self.reserved.pop(_int(args[0]), None)
        elif command == "quit":
            self.reserved.clear()
        elif command == "capabilities":
            if word == "OK" and reply.body is not None:
                from twisted_stalk.protocol.yaml import parse_sequence
                self.capabilities = frozenset(parse_sequence(reply.body))
            elif word == "UNKNOWN_COMMAND":
                self.capabilities = frozenset()

    def learn_deadline(self, job_id: int) -> None:
        """Ask the server how long a reserved job has left (stats-job)."""
        job = self.reserved.get(job_id)
        if job is None:
            return
        reply = self.internal(f"stats-job {job_id}")
        if reply.word != "OK" or reply.body is None:
            return
        from twisted_stalk.protocol.yaml import parse_mapping
        stats = parse_mapping(reply.body)
        left, ttr, state = stats.get("time-left"), stats.get("ttr"), stats.get("state")
        if state != "reserved":
            self.reserved.pop(job_id, None)
            return
        if isinstance(left, int):
            # time-left is truncated to whole seconds: the real deadline is up
            # to a second later, so count from the start of that second.
            job.deadline = self.clock() + left
        if isinstance(ttr, int):
            job.ttr = ttr


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        return -1


def data_home() -> str:
    """``$XDG_DATA_HOME/stalk`` (``~/.local/share/stalk``)."""
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return os.path.join(base, "stalk")


def state_home() -> str:
    """``$XDG_STATE_HOME/stalk`` (``~/.local/state/stalk``)."""
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(base, "stalk")


def config_home() -> str:
    """``$XDG_CONFIG_HOME/stalk`` (``~/.config/stalk``)."""
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(base, "stalk")


__all__ = [
    "Connection", "ConnectionFailed", "ConnectionLost", "InterruptedRequest", "MEANINGS",
    "meaning", "unexpected",
    "Reply", "Reserved", "Session", "StalkError", "Target", "parse_target", "reply_ok",
    "tls_context",
    "data_home", "state_home", "config_home",
]
