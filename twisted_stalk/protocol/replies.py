# -*- test-case-name: tests.test_client_replies,tests.test_protocol_reader -*-
"""Reply decoding: what the server answered to the command at the head of the queue.

Beanstalk reply words are ambiguous on their own (``BURIED <id>`` after ``put``
means the server ran out of memory and the job is buried, ``BURIED`` after
``bury`` means success; ``KICKED <n>`` after ``kick`` vs ``KICKED`` after
``kick-job``), so a reply is always decoded against the command that asked for
it.  The command table (:data:`twisted_stalk.protocol.commands.COMMANDS`) lists
each command's replies; the first one listed is its success, the others are
errors.  Any command may also be answered ``OUT_OF_MEMORY``,
``INTERNAL_ERROR``, ``BAD_FORMAT`` or ``UNKNOWN_COMMAND``.

This module is shared by the client library and the shell.  Like the rest of
:mod:`twisted_stalk.protocol` it does no I/O and does not import Twisted::

    reply = decode_reply("put", b"INSERTED 7")      # Reply(word="INSERTED", ok=True, job_id=7)
    reply = decode_reply("reserve", b"RESERVED 3 5")
    reply.body_length                               # 5: read 5 bytes + CRLF next
    value = decode_body("reserve", reply, b"hello")  # (3, b"hello")
    decode_reply("bury", b"NOT_FOUND").error()       # NotFound(...)

A line that is not one of the command's replies raises :class:`ReplyOutOfStep`:
a client must then drop the connection, because every later reply would be
matched to the wrong command.

The extension verbs of our server (``--extensions``, compat.md "Extensions")
are described in the same command table, :data:`EXTENSION_COMMANDS` (kept
apart from ``COMMANDS``, which drives the server's stock parser, so stock
decoding is unchanged).  ``decode_reply``/``decode_body`` accept their names
too: ``capabilities`` -> ``OK <bytes>`` (a list of verb names),
``list-jobs`` -> ``OK <bytes>`` (a list of job ids) or ``NOT_FOUND``,
``flush-tube`` -> ``FLUSHED <count>`` or ``NOT_FOUND``.
"""
from __future__ import annotations

from typing import Callable, Dict, FrozenSet, List, NamedTuple, Optional, Tuple, Type, Union

from .commands import (
    BY_NAME,
    EXTENSION_BY_NAME,
    EXTENSION_COMMANDS,
    CommandSpec,
    command_spec,
    valid_tube_name,
)
from .constants import MAX_JOB_SIZE_LIMIT, MAX_TUBE_NAME
from .yaml import StatValue, parse_mapping, parse_sequence

#: Longest reply line a server may send (``USING`` + a 200-byte tube name is
#: the longest legal one); a client that buffers more without a CRLF is
#: talking to something that is not a beanstalk server.
MAX_REPLY_LINE = 64 + MAX_TUBE_NAME

#: Largest data block a reply may announce (job bodies are at most
#: :data:`MAX_JOB_SIZE_LIMIT`; stats bodies are a few KiB).
MAX_REPLY_BODY = MAX_JOB_SIZE_LIMIT

#: Replies any command may get.
GENERIC_ERRORS: Tuple[str, ...] = ("OUT_OF_MEMORY", "INTERNAL_ERROR", "BAD_FORMAT",
                                   "UNKNOWN_COMMAND")


# ----------------------------------------------------------------- errors

class BeanstalkError(Exception):
    """Base class of every error raised by the client library and the shell."""


class ReplyError(BeanstalkError):
    """The server answered a command with an error reply.

    :ivar command: the command's name (``"put"``, ``"reserve"`` ...).
    :ivar reply: the reply line as received, without CRLF.
    :ivar word: the reply word (``"NOT_FOUND"`` ...).
    :cvar meaning: what the reply means, in one line for people (the shell
        shows it next to the reply).
    """

    word: str = ""
    meaning: str = ""

    def __init__(self, command: str = "", reply: bytes = b"") -> None:
        self.command = command
        self.reply = reply or self.word.encode("ascii")
        super().__init__(f"{command}: {self.reply.decode('ascii', 'replace')}"
                         if command else self.reply.decode("ascii", "replace"))

    def __reduce__(self):  # keep pickling (and copying) working with our __init__
        return (self.__class__, (self.command, self.reply))


class NotFound(ReplyError):
    """``NOT_FOUND``: no such job (or not reserved by this connection), or no such tube."""

    word = "NOT_FOUND"
    meaning = "no such job or tube, or not in a state this command accepts"


class Buried(ReplyError):
    """``BURIED``: the server ran out of memory and buried the job.

    After ``put`` the reply carries the new job's id (:attr:`job_id`); after
    ``release`` it does not (the job is the one being released).
    """

    word = "BURIED"
    meaning = "the server ran out of memory and buried the job"

    @property
    def job_id(self) -> Optional[int]:
        """The buried job's id when the server sent one (after ``put``)."""
        parts = self.reply.split(b" ")
        if len(parts) == 2 and parts[1].isdigit():
            return int(parts[1])
        return None


class DeadlineSoon(ReplyError):
    """``DEADLINE_SOON``: a job reserved by this connection is in its last second of TTR."""

    word = "DEADLINE_SOON"
    meaning = "a job you reserved is in its last second of TTR: delete, release or touch it"


class TimedOut(ReplyError):
    """``TIMED_OUT``: ``reserve-with-timeout`` found no job in time."""

    word = "TIMED_OUT"
    meaning = "no job became ready in time"


class Draining(ReplyError):
    """``DRAINING``: the server is in drain mode and accepts no new jobs."""

    word = "DRAINING"
    meaning = "the server is in drain mode and refuses new jobs"


class JobTooBig(ReplyError):
    """``JOB_TOO_BIG``: the body is larger than the server's ``max-job-size``."""

    word = "JOB_TOO_BIG"
    meaning = "the body is larger than the server's max-job-size"


class ExpectedCRLF(ReplyError):
    """``EXPECTED_CRLF``: the job body was not followed by CRLF."""

    word = "EXPECTED_CRLF"
    meaning = "the body was not followed by CRLF: its byte count did not match"


class BadFormat(ReplyError):
    """``BAD_FORMAT``: the server could not parse the command line."""

    word = "BAD_FORMAT"
    meaning = "the server could not parse the command line"


class UnknownCommand(ReplyError):
    """``UNKNOWN_COMMAND``: the server does not know the command."""

    word = "UNKNOWN_COMMAND"
    meaning = "the server does not know this command"


class OutOfMemory(ReplyError):
    """``OUT_OF_MEMORY``: the server could not allocate memory for the job."""

    word = "OUT_OF_MEMORY"
    meaning = "the server could not allocate memory for the job; try later"


class InternalError(ReplyError):
    """``INTERNAL_ERROR``: a server bug (or, for ours, a binlog write failure)."""

    word = "INTERNAL_ERROR"
    meaning = "the server hit a bug"


class NotIgnored(ReplyError):
    """``NOT_IGNORED``: the tube is the only one in the watch list."""

    word = "NOT_IGNORED"
    meaning = "you cannot ignore the only tube you watch"


class ReplyOutOfStep(BeanstalkError):
    """A reply that is not one of the replies of the command it answers.

    :ivar command: the command at the head of the queue (None if there was none).
    :ivar line: the offending bytes.
    """

    def __init__(self, command: Optional[str], line: bytes, why: str = "") -> None:
        self.command = command
        self.line = bytes(line)
        self.why = why
        what = f"to {command!r}" if command else "with no command pending"
        msg = f"unexpected reply {what}: {self.line[:300]!r}"
        if why:
            msg += f" ({why})"
        super().__init__(msg)

    def __reduce__(self):
        return (self.__class__, (self.command, self.line, self.why))


#: The exception class of each error reply word.
ERRORS: Dict[str, Type[ReplyError]] = {
    cls.word: cls for cls in (
        NotFound, Buried, DeadlineSoon, TimedOut, Draining, JobTooBig, ExpectedCRLF,
        BadFormat, UnknownCommand, OutOfMemory, InternalError, NotIgnored,
    )
}


# ----------------------------------------------------------------- replies

JobValue = Tuple[int, bytes]
Value = Union[None, int, str, JobValue, Dict[str, StatValue], List[str], List[int]]


class Reply(NamedTuple):
    """One decoded reply: its line, and once read its data block and value.

    Exactly the fields its pattern names are set: ``job_id`` for ``<id>``,
    ``number`` for ``<count>``, ``tube`` for ``<tube>``, ``body_length`` for
    ``<bytes>`` (a data block of that many bytes plus CRLF follows).

    :func:`decode_reply` decodes the line: ``value`` is then already set for
    success replies without a data block (see :func:`decode_body`).
    :class:`~twisted_stalk.protocol.reader.ReplyReader` returns complete
    replies: ``body`` holds the data block and ``value`` its decoded value.
    ``expected`` is False only for a line a lenient reader could not match to
    its command (decoded by its shape alone; ``ok`` is then False too).
    """

    command: str
    word: str
    ok: bool
    line: bytes
    job_id: Optional[int] = None
    number: Optional[int] = None
    tube: Optional[str] = None
    body_length: Optional[int] = None
    body: Optional[bytes] = None
    value: Value = None
    expected: bool = True

    @property
    def has_body(self) -> bool:
        """True when a data block of :attr:`body_length` bytes + CRLF follows."""
        return self.body_length is not None

    def error(self) -> BeanstalkError:
        """The exception for an error reply (``ok`` is False): the
        :class:`ReplyError` of its word, or :class:`ReplyOutOfStep` for a
        line that is no reply of its command."""
        if self.ok:
            raise ValueError(f"{self.word} is the success reply of {self.command}")
        cls = ERRORS.get(self.word) if self.expected else None
        if cls is None:
            return ReplyOutOfStep(self.command or None, self.line)
        return cls(self.command, self.line)


_new_reply = tuple.__new__


def _digits(name: str, line: bytes, text: bytes, kind: str) -> int:
    if text.isdigit() and len(text) <= 20:  # bytes.isdigit is ASCII-only
        return int(text)
    raise ReplyOutOfStep(name, line, f"<{kind}> is not a number")


# The parsers of the reply patterns.  A success reply's value is set here
# when there is no data block to wait for (decode_body gives the same value).

def _no_fields(name: str, word: str, ok: bool, line: bytes, parts: List[bytes]) -> Reply:
    return _new_reply(Reply, (name, word, ok, line, None, None, None, None, None, None, True))


def _id_field(name: str, word: str, ok: bool, line: bytes, parts: List[bytes]) -> Reply:
    job_id = _digits(name, line, parts[1], "id")
    return _new_reply(Reply, (name, word, ok, line, job_id, None, None, None, None,
                              job_id if ok else None, True))


def _count_field(name: str, word: str, ok: bool, line: bytes, parts: List[bytes]) -> Reply:
    count = _digits(name, line, parts[1], "count")
    return _new_reply(Reply, (name, word, ok, line, None, count, None, None, None,
                              count if ok else None, True))


def _body_length(name: str, line: bytes, text: bytes) -> int:
    value = _digits(name, line, text, "bytes")
    if value > MAX_REPLY_BODY:
        raise ReplyOutOfStep(name, line, "data block too large")
    return value


def _bytes_field(name: str, word: str, ok: bool, line: bytes, parts: List[bytes]) -> Reply:
    return _new_reply(Reply, (name, word, ok, line, None, None, None,
                              _body_length(name, line, parts[1]), None, None, True))


def _id_bytes_fields(name: str, word: str, ok: bool, line: bytes,
                     parts: List[bytes]) -> Reply:
    return _new_reply(Reply, (name, word, ok, line, _digits(name, line, parts[1], "id"),
                              None, None, _body_length(name, line, parts[2]), None, None,
                              True))


def _tube_field(name: str, word: str, ok: bool, line: bytes, parts: List[bytes]) -> Reply:
    if not valid_tube_name(parts[1]):
        raise ReplyOutOfStep(name, line, "bad tube name")
    tube = parts[1].decode("ascii")
    return _new_reply(Reply, (name, word, ok, line, None, None, tube, None, None,
                              tube if ok else None, True))


_PARSERS = {
    (): _no_fields, ("id",): _id_field, ("count",): _count_field, ("bytes",): _bytes_field,
    ("id", "bytes"): _id_bytes_fields, ("tube",): _tube_field,
}

# One entry per reply word a command accepts: (word, ok, field count, parser).
_Entry = Tuple[str, bool, int, Callable[..., Reply]]


def _pattern(pattern: str) -> Tuple[str, Tuple[str, ...]]:
    """``"RESERVED <id> <bytes>"`` -> ``("RESERVED", ("id", "bytes"))``."""
    word, *args = pattern.split(" ")
    return word, tuple(a.strip("<>") for a in args)


def _table(spec: CommandSpec) -> Dict[bytes, _Entry]:
    table: Dict[bytes, _Entry] = {}
    for i, pattern in enumerate(spec.replies):
        word, kinds = _pattern(pattern)
        table[word.encode("ascii")] = (word, i == 0, len(kinds), _PARSERS[kinds])
    for word in GENERIC_ERRORS:
        table.setdefault(word.encode("ascii"), (word, False, 0, _no_fields))
    return table


_TABLES: Dict[str, Dict[bytes, _Entry]] = {name: _table(spec) for name, spec in BY_NAME.items()}
_TABLES.update((spec.name, _table(spec)) for spec in EXTENSION_COMMANDS)

_ALL_SPECS = tuple(BY_NAME.values()) + EXTENSION_COMMANDS

#: Reply words that are never a success, whatever the command (``BURIED`` is
#: not one: it is the success of ``bury``).
ERROR_WORDS: FrozenSet[str] = frozenset(
    [_pattern(p)[0] for spec in _ALL_SPECS for p in spec.replies[1:]]
    + list(GENERIC_ERRORS)) - {_pattern(spec.replies[0])[0]
                               for spec in _ALL_SPECS if spec.replies}

# Every field layout each reply word has in the table, by field count:
# b"BURIED" -> {0: (), 1: ("id",)}, b"OK" -> {1: ("bytes",)} ...
_SHAPES: Dict[bytes, Dict[int, Tuple[str, ...]]] = {}
for _spec in _ALL_SPECS:
    for _p in _spec.replies:
        _word, _kinds = _pattern(_p)
        _SHAPES.setdefault(_word.encode("ascii"), {})[len(_kinds)] = _kinds


def _loose_int(text: bytes) -> Optional[int]:
    return int(text) if text.isdigit() and len(text) <= 20 else None


def decode_shape(command: Optional[str], line: bytes) -> Reply:
    """Decode ``line`` by its shape alone, as a reply no command can be
    matched to (``command`` None: a surplus reply, after raw bytes) or one
    that is not a reply of ``command`` (``expected`` False, never ``ok``).

    The fields are read where the line has the shape of some reply in the
    table (``FOUND <id> <bytes>``, ``USING <tube>``...); ``ok`` for a surplus
    reply is whether its word can be a success at all (not in
    :data:`ERROR_WORDS`).  Never raises: for the shell, which shows whatever
    a server sends.  The ``body_length`` of an absurd count is None (there is
    no data block to read), one above :data:`MAX_REPLY_BODY` is kept: the
    reader refuses it.
    """
    parts = line.split(b" ")
    word = parts[0].decode("ascii", "replace")
    kinds = _SHAPES.get(parts[0], {}).get(len(parts) - 1, ())
    fields: Dict[str, Optional[object]] = {}
    for kind, text in zip(kinds, parts[1:]):
        fields[kind] = text.decode("ascii", "replace") if kind == "tube" else _loose_int(text)
    ok = command is None and word not in ERROR_WORDS
    return _new_reply(Reply, (command or "", word, ok, line, fields.get("id"),
                              fields.get("count"), fields.get("tube"), fields.get("bytes"),
                              None, None, command is None))


def success_reply(command: Union[str, CommandSpec]) -> Optional[str]:
    """The success reply pattern of ``command`` (``"INSERTED <id>"``), None for quit."""
    if isinstance(command, str):
        spec = command_spec(command)
        if spec is None:
            raise KeyError(command)
    else:
        spec = command
    return spec.replies[0] if spec.replies else None


def decode_reply(command: Union[str, CommandSpec], line: bytes) -> Reply:
    """Classify ``line`` (without CRLF) as a reply to ``command``.

    Returns a :class:`Reply`; raises :class:`ReplyOutOfStep` when the line is
    not one of the command's replies (unknown word, wrong argument count,
    non-numeric id/count/length, bad tube name, absurd body length).
    """
    name = command if type(command) is str else command.name  # type: ignore[union-attr]
    table = _TABLES.get(name)  # type: ignore[arg-type]
    if table is None:
        raise ReplyOutOfStep(name, line, "unknown command")  # type: ignore[arg-type]
    if type(line) is not bytes:
        line = bytes(line)
    parts = line.split(b" ")
    entry = table.get(parts[0])
    if entry is None:
        raise ReplyOutOfStep(name, line)  # type: ignore[arg-type]
    word, ok, nfields, parse = entry
    if len(parts) - 1 != nfields:
        raise ReplyOutOfStep(name, line, "wrong number of fields")  # type: ignore[arg-type]
    return parse(name, word, ok, line, parts)


def decode_body(command: Union[str, CommandSpec], reply: Reply,
                body: Optional[bytes] = None) -> Value:
    """The typed value of a success reply (``reply.ok``) and its data block.

    * ``put`` -> job id; ``watch``/``ignore`` -> watch-list size; ``kick`` -> count;
    * ``use``/``list-tube-used`` -> tube name (str);
    * ``reserve*``/``peek*`` -> ``(job id, body bytes)``;
    * ``stats``/``stats-job``/``stats-tube`` -> dict typed by key (names,
      ``tube``, ``state``, the server ``id``, ``version``, ``hostname``,
      ``os``, ``platform`` are str even when they look like numbers; rusage
      floats; ``draining`` a bool; counts ints);
    * ``list-tubes``/``list-tubes-watched`` -> list of tube names;
    * extensions: ``capabilities`` -> list of verb names, ``list-jobs`` ->
      list of job ids (ints), ``flush-tube`` -> number of jobs deleted;
    * everything else -> None.
    """
    name = command if isinstance(command, str) else command.name
    word = reply.word
    if word in ("INSERTED",):
        return reply.job_id
    if word in ("WATCHING", "FLUSHED") or (word == "KICKED" and reply.number is not None):
        return reply.number
    if word == "USING":
        return reply.tube
    if word in ("RESERVED", "FOUND"):
        assert reply.job_id is not None
        return (reply.job_id, body if body is not None else b"")
    if word == "OK":
        data = body or b""
        spec = command_spec(name)
        kind = spec.reply_body if spec is not None else "mapping"
        if kind == "sequence":
            return parse_sequence(data)
        if kind == "ids":
            return [int(i) for i in parse_sequence(data) if i.isdigit()]
        return parse_mapping(data, name)
    return None


__all__ = [
    "BeanstalkError", "ReplyError", "NotFound", "Buried", "DeadlineSoon", "TimedOut",
    "Draining", "JobTooBig", "ExpectedCRLF", "BadFormat", "UnknownCommand", "OutOfMemory",
    "InternalError", "NotIgnored", "ReplyOutOfStep", "ERRORS", "ERROR_WORDS", "GENERIC_ERRORS",
    "Reply", "decode_reply", "decode_body", "decode_shape", "success_reply", "MAX_REPLY_LINE", "MAX_REPLY_BODY",
    "EXTENSION_COMMANDS", "EXTENSION_BY_NAME", "command_spec",
]
