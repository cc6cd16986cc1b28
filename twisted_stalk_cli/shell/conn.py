# -*- test-case-name: tests.test_shell_cli -*-
"""The shell's connection: a small blocking socket client.

Why blocking sockets and not the Twisted client: the interactive shell spends
its life inside prompt_toolkit's own event loop, and between prompts it does
exactly one request at a time.  A plain socket keeps that simple, starts fast
(no reactor import), and makes Ctrl-C out of a blocking ``reserve`` trivial:
the KeyboardInterrupt lands in ``recv``, the shell drops the socket (the
server then returns the jobs reserved on it to ready), reconnects and restores
``use``/``watch`` (:mod:`.tracked`).

Commands are encoded from the shared command table
(:func:`~twisted_stalk.protocol.commands.encode_command`) and replies are read
by the shared :class:`~twisted_stalk.protocol.reader.ReplyReader`, as the
client library reads them.  Which replies to expect comes from the bytes
sent (:mod:`twisted_stalk.protocol.framing`): one per command they complete,
named from the table, none for a command the server has only part of (a line
without CRLF, a put body shorter than its count), so no reply that cannot come
is waited for.
Each reply is decoded once, here, against the command it answers: the
:class:`~twisted_stalk.protocol.replies.Reply` says whether it is a success
(``BURIED`` after ``bury`` is, after ``put`` it means out of memory), carries
its fields, data block and decoded value, and the rest of the shell reads
those.  The reader is lenient, because the shell shows whatever a server
sends: a line that is no reply of its command is decoded by its shape
(``expected`` False), and replies nothing was expected for (a server that
frames raw bytes differently) are decoded as surplus replies.  Only a
framing error (a line or data block no beanstalk server sends) drops the
connection.
"""
from __future__ import annotations

import select
import socket
import ssl
import time
from collections import deque
from typing import Callable, Deque, List, Optional, Sequence, Union

from twisted_stalk.protocol.commands import encode_command
from twisted_stalk.protocol.flush import Command
from twisted_stalk.protocol.framing import Sent, ServerFraming
from twisted_stalk.protocol.reader import (
    BODY_NOT_CRLF,
    BODY_TOO_LARGE,
    LINE_TOO_LONG,
    ReplyReader,
)
from twisted_stalk.protocol.replies import MAX_REPLY_LINE, Reply, ReplyOutOfStep

from .errors import ConnectionBroken, ConnectionFailed, oserror_text
from .target import Target, tls_context

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
        #: Why the connection was lost, until the next connect or close (None
        #: when it is open, was never opened or was closed on purpose).
        self.lost: Optional[str] = None
        #: Bytes read by :meth:`poll_closed` and not decoded yet.
        self._early = b""
        self._reader = ReplyReader(lenient=True)
        #: What the server has made of the bytes sent
        #: (:mod:`twisted_stalk.protocol.framing`).
        self.framing = ServerFraming()
        #: Replies decoded and not read yet (a chunk may complete several).
        self._replies: Deque[Reply] = deque()

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
            raise ConnectionFailed(f"cannot connect to {t}: {oserror_text(e)}") from None
        self.sock = sock
        self._forget()

    def _forget(self) -> None:
        self.framing.reset()
        self._reader.reset()
        self._replies.clear()

    def close(self) -> None:
        sock, self.sock = self.sock, None
        self.lost = None
        self._early = b""
        self._forget()
        if sock is not None:
            try:
                sock.close()
            except OSError:
                pass

    def _lose(self, why: str) -> ConnectionBroken:
        """Close because the connection failed; the error to raise."""
        self.close()
        self.lost = why
        return ConnectionBroken(why)

    def send(self, data: bytes) -> List[Sent]:
        """Send ``data``; returns the commands it completes (none when the
        server waits for the rest of one:
        :mod:`twisted_stalk.protocol.framing`), whose replies the reader then
        expects, in order (``quit`` gets none)."""
        if self.sock is None:
            raise ConnectionBroken("not connected")
        if self.wire:
            self.wire("send", data)
        sent = self.framing.feed(data)
        for command in sent:
            self._reader.expect(command.name)
        try:
            self.sock.settimeout(self.reply_timeout)
            self.sock.sendall(data)
        except (OSError, ssl.SSLError) as e:
            raise self._lose(f"connection to {self.target} lost: {oserror_text(e)}") from None
        return sent

    def _fill(self, timeout: Optional[float]) -> None:
        """Receive one chunk and decode the replies it completes."""
        assert self.sock is not None
        chunk, self._early = self._early, b""
        if not chunk:
            self.sock.settimeout(timeout)
            try:
                chunk = self.sock.recv(65536)
            except socket.timeout:
                raise
            except (OSError, ssl.SSLError) as e:
                raise self._lose(f"connection to {self.target} lost: {oserror_text(e)}") from None
        if not chunk:
            raise self._lose(f"connection to {self.target} closed by the server")
        if self.wire:
            self.wire("recv", chunk)
        for reply in self._reader.feed(chunk):
            if type(reply) is not Reply:
                raise self._lose(self._out_of_step(reply))  # type: ignore[arg-type]
            self._replies.append(reply)

    def _out_of_step(self, error: ReplyOutOfStep) -> str:
        if error.why == LINE_TOO_LONG:
            return (f"{self.target} sent a reply line longer than {MAX_REPLY_LINE} bytes: "
                    "is it a beanstalk server?")
        if error.why == BODY_TOO_LARGE:
            size = error.line.rsplit(b" ", 1)[-1].decode("ascii", "replace")
            return f"the server announced an impossible body size {size}"
        if error.why == BODY_NOT_CRLF:
            return "the server's reply body was not followed by CRLF"
        return f"connection to {self.target} dropped: {error}"

    def read_reply(self, *, blocking: bool = False) -> Reply:
        """Read one reply.  ``blocking`` waits forever (reserve); otherwise the
        reply timeout applies and expiry drops the connection."""
        if self._replies:
            return self._replies.popleft()
        if self.sock is None:
            raise ConnectionBroken("not connected")
        timeout = None if blocking else self.reply_timeout
        try:
            while not self._replies:
                self._fill(timeout)
        except socket.timeout:
            raise self._lose(
                f"no reply from {self.target} within {self.reply_timeout:g} s; connection dropped"
            ) from None
        return self._replies.popleft()

    def poll_closed(self) -> bool:
        """Whether the server has closed the connection; for idle moments
        (nothing awaited), and it never waits.  A socket that is readable
        with nothing to read was closed: the connection is then closed with
        :attr:`lost` saying why."""
        sock = self.sock
        if sock is None:
            return True
        if self._early or self._replies or not self.readable(0):
            return False
        try:
            if isinstance(sock, ssl.SSLSocket):  # no MSG_PEEK: read what is there
                sock.setblocking(False)
                try:
                    self._early = sock.recv(65536)
                except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError):
                    return False
                finally:
                    if self.sock is sock:
                        sock.settimeout(self.reply_timeout)
                closed = not self._early
            else:
                closed = not sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except BlockingIOError:
            return False
        except (OSError, ssl.SSLError) as e:
            self._lose(f"connection to {self.target} lost: {oserror_text(e)}")
            return True
        if closed:
            self._lose(f"connection to {self.target} closed by the server")
        return closed

    def readable(self, timeout: float) -> bool:
        """Whether a reply (or part of one) is ready within ``timeout`` s."""
        if self._replies or self._reader.buffered or self._early or self.sock is None:
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
        A reply still arriving at the end gets a little longer to complete.
        """
        replies: List[Reply] = []
        deadline = time.monotonic() + wait
        grace = True
        while self.sock is not None:
            replies.extend(self._replies)
            self._replies.clear()
            left = deadline - time.monotonic()
            if left <= 0:
                if not (grace and self._reader.buffered):
                    break
                left, grace = 0.05, False
            try:
                self._fill(left)
            except socket.timeout:
                break
        return replies

    def exchange(self, data: bytes, *,
                 on_wait: Optional[Callable[[], None]] = None) -> List[Reply]:
        """Send ``data`` and read the reply to each command it completes, in
        order: none when the server waits for the rest of a command, several
        for several commands.  A reserve's reply may take any time (Ctrl-C
        gives up); ``on_wait`` is called once if one has none after a moment.
        """
        try:
            replies = []
            for command in self.send(data):
                if command.blocks and on_wait is not None and not self.readable(0.3):
                    on_wait()
                    on_wait = None
                replies.append(self.read_reply(blocking=command.blocks))
            return replies
        except KeyboardInterrupt:
            # Its reply may still come: the next command would read it as its
            # own.  Close, so that the stream can never be out of step.
            self.close()
            raise

    def call(self, data: bytes) -> Reply:
        """Send the bytes of one whole command and read its reply."""
        replies = self.exchange(data)
        if len(replies) != 1:
            raise ValueError(f"{data[:40]!r}... is not one command: {len(replies)} replies")
        return replies[0]

    def command(self, name: str, *args: Union[int, str, bytes],
                body: Optional[bytes] = None) -> Reply:
        """Send one command, encoded from the table, and read its reply."""
        return self.call(encode_command(name, *args, body=body))

    def pipeline(self, commands: Sequence[Command]) -> List[Reply]:
        """Send commands together and read their replies, in order."""
        return self.exchange(b"".join(encode_command(*c) for c in commands))  # type: ignore[arg-type]


__all__ = ["Connection", "WireHook"]
