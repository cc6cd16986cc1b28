# -*- test-case-name: tests.test_protocol_reader -*-
"""Reading replies off a beanstalk connection, without doing any I/O.

A :class:`ReplyReader` turns the bytes a server sends into decoded replies
(:class:`~twisted_stalk.protocol.replies.Reply`), each decoded once, against
the command it answers.  Reply words are ambiguous on their own (``BURIED
<id>`` after ``put`` means out of memory, ``BURIED`` after ``bury`` is
success; ``KICKED <n>`` vs ``KICKED``; what an ``OK <bytes>`` data block holds
is the command table's ``reply_body``), so the reader keeps a FIFO of the
commands sent and not yet answered: the caller tells it, in sending order, what
it sent (:meth:`ReplyReader.expect`) and hands it what arrives
(:meth:`ReplyReader.feed`)::

    reader = ReplyReader()
    reader.expect("put")
    reader.expect("reserve")
    reader.feed(b"INSERTED 7\\r\\nRESERVED 7 2\\r")    # [Reply(word="INSERTED", value=7 ...)]
    reader.feed(b"\\nhi\\r\\n")                         # [Reply(word="RESERVED", body=b"hi",
                                                     #        value=(7, b"hi") ...)]

It does no I/O, imports no Twisted and keeps no clock (in the manner of h11):
the client library's protocol, the shell's blocking connection and the
in-memory test server's clients all read through it.

Out of step: a line that is no reply of the command at the head of the FIFO, a
reply when nothing is expected, a reply line longer than any beanstalk reply
(:data:`~twisted_stalk.protocol.replies.MAX_REPLY_LINE`), a data block longer
than :data:`~twisted_stalk.protocol.replies.MAX_REPLY_BODY` or not followed by
CRLF.  Every later reply would be matched to the wrong command, so the list
:meth:`~ReplyReader.feed` returns then ends with an
:class:`~twisted_stalk.protocol.replies.ReplyOutOfStep` (a value, after the
replies decoded before it) and the reader takes no more input until
:meth:`~ReplyReader.reset`: the caller drops the connection.

A *lenient* reader (the shell, which shows whatever a server sends) instead
decodes such a line by its shape (:func:`~twisted_stalk.protocol.replies.
decode_shape`, ``expected`` False) and a reply when nothing is expected as a
surplus reply (after raw bytes); only the framing errors above put it out of
step.

Memory and time are bounded: at most one reply line, or one data block of the
length its line announced, is buffered beyond what has been decoded; each
reply costs one search for CRLF and one copy of its bytes, whatever the chunks
the stream arrives in (pipelined replies are never re-copied per reply).
"""
from __future__ import annotations

from collections import deque
from typing import Callable, Deque, List, Optional, Union

from .replies import (
    MAX_REPLY_BODY,
    MAX_REPLY_LINE,
    Reply,
    ReplyOutOfStep,
    decode_body,
    decode_reply,
    decode_shape,
)

#: Why a reader went out of step (:attr:`ReplyOutOfStep.why`), for the
#: framing errors.
LINE_TOO_LONG = "reply line too long"
BODY_NOT_CRLF = "data block not followed by CRLF"
BODY_TOO_LARGE = "data block too large"
NOTHING_EXPECTED = "no command is waiting for a reply"

#: What :meth:`ReplyReader.feed` returns: the replies decoded, possibly ended
#: by the error that put the stream out of step.
Decoded = List[Union[Reply, ReplyOutOfStep]]

_new_reply = tuple.__new__


class ReplyReader:
    """Decodes a stream of replies against a FIFO of the commands sent.

    Two ways to use it: :meth:`feed` returns every reply the bytes complete;
    :meth:`receive` then :meth:`next_reply` decode one reply at a time, for a
    caller that sends more commands (and calls :meth:`expect`) while it
    handles a reply (the client library holds commands back while a ``reserve``
    waits and sends them when it is answered).

    :param lenient: decode lines that fit no expected reply by their shape
        instead of going out of step (see the module's docstring).
    :param max_body: largest data block accepted.
    """

    __slots__ = ("lenient", "max_body", "_expected", "expect", "_buf", "_pos", "_head",
                 "_need", "error")

    def __init__(self, *, lenient: bool = False, max_body: int = MAX_REPLY_BODY) -> None:
        self.lenient = lenient
        self.max_body = max_body
        self._expected: Deque[Optional[str]] = deque()
        #: ``expect(command)``: a command was sent, its reply comes after those
        #: already expected.  ``command`` is a command name (``"put"``,
        #: ``"flush-tube"``...), or None (lenient readers) for bytes whose
        #: reply no command describes.  (The FIFO's own append: the client
        #: calls it once per command.)
        self.expect: Callable[[Optional[str]], None] = self._expected.append
        #: Received bytes; those before _pos are decoded already.
        self._buf: Union[bytes, bytearray] = b""
        self._pos = 0
        #: The reply whose data block is being read, and its length + CRLF.
        self._head: Optional[Reply] = None
        self._need = 0
        #: The error that put the stream out of step (None while in step).
        self.error: Optional[ReplyOutOfStep] = None

    @property
    def pending(self) -> int:
        """Replies expected and not yet returned (one being read included)."""
        return len(self._expected) + (self._head is not None)

    @property
    def buffered(self) -> int:
        """Bytes received and not yet returned as part of a reply."""
        return len(self._buf) - self._pos

    def reset(self) -> None:
        """Forget everything: expected commands, buffered bytes, any error
        (for a new connection)."""
        self._expected.clear()
        self._buf = b""
        self._pos = 0
        self._head = None
        self._need = 0
        self.error = None

    def feed(self, data: bytes) -> Decoded:
        """Take the bytes that arrived; return the replies they complete, in
        order, each with its data block and value.

        The list ends with an :class:`ReplyOutOfStep` if the stream went out
        of step; feeding an out-of-step reader raises that error again.
        """
        self.receive(data)
        out: Decoded = []
        next_reply = self.next_reply
        reply = next_reply()
        while reply is not None:
            out.append(reply)
            reply = next_reply()
        return out

    def receive(self, data: bytes) -> None:
        """Take the bytes that arrived (see :meth:`next_reply`); raises the
        error of an out-of-step reader."""
        if self.error is not None:
            raise self.error
        buf = self._buf
        pos = self._pos
        if pos >= len(buf):
            # Nothing left over: decode from the caller's bytes, uncopied.
            self._buf = data
        elif type(buf) is bytes:
            with memoryview(buf) as view:
                self._buf = bytearray(view[pos:])
            self._buf += data
        else:
            del buf[:pos]
            buf += data
        self._pos = 0

    def next_reply(self) -> Union[Reply, ReplyOutOfStep, None]:
        """The next reply the bytes received complete, decoded against the
        command expected first; None when more bytes are needed.

        Returns an :class:`ReplyOutOfStep` (once) when the stream went out
        of step, and None ever after."""
        buf = self._buf
        pos = self._pos
        need = self._need
        if need:
            head = self._head
            assert head is not None
            return self._block(head, need) if len(buf) - pos >= need else None
        i = buf.find(b"\r\n", pos)
        # (+ 1: the line's CR may have come without its LF)
        if (i < 0 and len(buf) - pos > MAX_REPLY_LINE + 1) or i - pos > MAX_REPLY_LINE:
            expected = self._expected
            return self._fail(expected[0] if expected else None,
                              bytes(buf[pos:pos + MAX_REPLY_LINE]), LINE_TOO_LONG)
        if i < 0:
            return None
        line = buf[pos:i] if type(buf) is bytes else bytes(buf[pos:i])
        self._pos = i + 2
        expected = self._expected
        if expected:
            command = expected.popleft()
        elif self.lenient:
            command = None
        else:
            return self._fail(None, line, NOTHING_EXPECTED)
        if command is None:
            reply = decode_shape(None, line)
        else:
            try:
                reply = decode_reply(command, line)
            except ReplyOutOfStep as e:
                if not self.lenient:
                    return self._fail(command, line, e.why)
                reply = decode_shape(command, line)
        length = reply.body_length
        if length is None:
            return reply
        if length > self.max_body:
            return self._fail(command, line, BODY_TOO_LARGE)
        need = length + 2
        if len(buf) - self._pos >= need:
            return self._block(reply, need)
        self._head = reply
        self._need = need
        return None

    def _block(self, head: Reply, need: int) -> Union[Reply, ReplyOutOfStep]:
        """``head`` with its data block, which the buffer holds."""
        buf = self._buf
        pos = self._pos
        stop = pos + need
        if buf[stop - 2:stop] != b"\r\n":
            return self._fail(head.command, bytes(buf[pos:stop]), BODY_NOT_CRLF)
        if type(buf) is bytes:
            body = buf[pos:stop - 2]
        else:
            with memoryview(buf) as view:
                body = bytes(view[pos:stop - 2])
        self._pos = stop
        self._need = 0
        self._head = None
        value = decode_body(head.command, head, body) if head.ok else None
        return _new_reply(Reply, head[:8] + (body, value, head.expected))

    def _fail(self, command: Optional[str], line: bytes, why: str) -> ReplyOutOfStep:
        self.reset()
        self.error = ReplyOutOfStep(command, line, why)
        self._expected.clear()
        return self.error


__all__ = ["BODY_NOT_CRLF", "BODY_TOO_LARGE", "Decoded", "LINE_TOO_LONG", "NOTHING_EXPECTED",
           "ReplyReader"]
