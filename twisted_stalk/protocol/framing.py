# -*- test-case-name: tests.test_framing,tests.test_shell_units -*-
"""beanstalkd's framing rules, stated once: what a server makes of the bytes it is sent.

This is the reference statement of the framing, written for clarity, not
speed: the server's tuned input loop (``dataReceived`` in
:mod:`twisted_stalk.server.protocol`, with its fast paths) is property-tested
against it (tests/test_framing.py), and the shell uses it to know which
replies to expect.

A server answers each command once it has all of it: a line up to its CRLF,
and for ``put`` the body of ``<bytes>`` bytes and its CRLF.  Bytes sent in
pieces (a raw line ending in ``\\c``, a put whose body is shorter than its
byte count) leave the server waiting for the rest, and a reply that cannot
come must not be waited for; bytes that hold several commands (a put whose
body is longer than its count: the rest is read as commands) get several
replies.  :class:`ServerFraming` follows the server's framing over the bytes
sent on one connection (beanstalkd's, which docs/compat.md describes: a
command line is at most :data:`~twisted_stalk.protocol.constants.MAX_LINE`
bytes with its CRLF, a longer one is answered BAD_FORMAT once its CRLF comes;
a put line that parses is followed by ``<bytes>`` + 2 bytes read raw), and
names each command it completes from the command table, so that the reply
reader expects exactly one reply per command, decoded against that command.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional

from twisted_stalk.protocol.commands import (
    CommandError,
    identify,
    identify_extension,
    parse_args,
)
from twisted_stalk.protocol.constants import MAX_LINE, MAX_LINE_CONTENT
from twisted_stalk.wording import counted


@dataclass(frozen=True)
class Sent:
    """A command the server has all of, and will answer."""

    #: Its name in the command table (None: no command the table knows,
    #: such as an unknown word or an over-long line; its reply is decoded
    #: by its shape).
    name: Optional[str]
    #: True when its reply may take any time (a reserve that parses).
    blocks: bool = False
    #: The command line as framed, without its CRLF (None: a line over
    #: ``MAX_LINE`` bytes with its CRLF, answered BAD_FORMAT).  What was
    #: framed, not which reply to expect: left out of comparisons, as is ``body``.
    line: Optional[bytes] = field(default=None, compare=False, repr=False)
    #: A put's body as read, ``<bytes>`` + 2 bytes (kept only when the
    #: framing was asked to keep bodies).
    body: Optional[bytes] = field(default=None, compare=False, repr=False)


class ServerFraming:
    """Follows what a server has made of the bytes sent so far.

    ``max_job_size`` is the server's ``-z`` if known: a put line announcing
    more is followed by its body all the same (the server discards it and
    answers ``JOB_TOO_BIG``), even with trailing bytes after the count, which
    otherwise make the line BAD_FORMAT with no body.  ``keep_bodies`` keeps
    each put's body in its :attr:`Sent.body`.
    """

    def __init__(self, max_job_size: Optional[int] = None, keep_bodies: bool = False) -> None:
        self.max_job_size = max_job_size
        self.keep_bodies = keep_bodies
        self.reset()

    def reset(self) -> None:
        """A new connection: the server has nothing yet."""
        #: The start of a line without its CRLF yet.
        self.partial = b""
        #: Body bytes (with the CRLF) the server still reads for a put.
        self.missing = 0
        #: The byte count of that put.
        self.announced = 0
        #: That put's line, and the pieces of its body read so far (kept
        #: only with ``keep_bodies``).
        self._put_line = b""
        self._body: List[bytes] = []
        #: True after ``quit``: the server closes the connection.
        self.closing = False
        self._skipping = False

    @property
    def waiting(self) -> bool:
        """Whether the server holds part of a command and waits for the rest."""
        return bool(self.partial or self.missing or self._skipping)

    def describe(self) -> str:
        """What the server waits for, in words ("" when nothing)."""
        if self.missing:
            sent = self.announced + 2 - self.missing
            return (f"the server waits for {counted(self.missing, 'more byte')} "
                    f"of a put body ({self.announced} announced, plus CRLF; {sent} sent)")
        if self._skipping:
            return (f"the server is discarding a line longer than {MAX_LINE} bytes "
                    "until its CRLF (then it answers BAD_FORMAT)")
        if self.partial:
            text = self.partial.decode("utf-8", "replace")
            return f"the server waits for the rest of a line, sent without CRLF: {text!r}"
        return ""

    def short(self) -> str:
        """What the server waits for, in a few words ("" when nothing)."""
        if self.missing:
            return counted(self.missing, "more put body byte")
        if self._skipping:
            return "the CRLF of an over-long line"
        if self.partial:
            return "the rest of a line"
        return ""

    def feed(self, data: bytes) -> List[Sent]:
        """Take the bytes sent; the commands they complete, in order."""
        done: List[Sent] = []
        if self.partial:
            data, self.partial = self.partial + data, b""
        pos = 0
        end = len(data)
        while pos < end:
            if self.missing:
                take = min(self.missing, end - pos)
                if self.keep_bodies:
                    self._body.append(data[pos:pos + take])
                self.missing -= take
                pos += take
                if not self.missing:
                    body = b"".join(self._body) if self.keep_bodies else None
                    self._body = []
                    done.append(Sent("put", line=self._put_line, body=body))
                continue
            i = data.find(b"\r\n", pos)
            if i < 0:
                rest = data[pos:]
                if self._skipping or len(rest) >= MAX_LINE:
                    # Too long: the server drops it up to its CRLF (a trailing
                    # CR is kept: its LF may come next).
                    self._skipping = True
                    self.partial = b"\r" if rest.endswith(b"\r") else b""
                else:
                    self.partial = rest
                break
            line = data[pos:i]
            pos = i + 2
            if self._skipping:
                self._skipping = False
                done.append(Sent(None))  # BAD_FORMAT
            else:
                done += self._line(line)
        return done

    def _line(self, line: bytes) -> List[Sent]:
        """A complete command line: the command it makes, if it is answered now."""
        if len(line) > MAX_LINE_CONTENT:
            return [Sent(None)]  # over-long: BAD_FORMAT
        if b"\0" in line:
            return [Sent(None, line=line)]  # BAD_FORMAT
        spec, text = identify(line)
        if spec is None:
            spec, _ = identify_extension(line)
            return [Sent(spec.name if spec is not None else None, line=line)]
        if spec.name == "quit":
            self.closing = True
            return []
        try:
            args = parse_args(spec, text)
        except CommandError:
            return [Sent(spec.name, line=line)]  # BAD_FORMAT, and no body follows
        if spec.has_body:
            size = int(args[-2])  # type: ignore[arg-type]
            too_big = self.max_job_size is not None and size > self.max_job_size
            if not args[-1] and not too_big:  # trailing bytes after the count: BAD_FORMAT
                return [Sent(spec.name, line=line)]
            self.announced = size
            self.missing = size + 2
            self._put_line = line
            return []
        return [Sent(spec.name, spec.blocks, line=line)]


__all__ = ["Sent", "ServerFraming"]
