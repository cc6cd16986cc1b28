# -*- test-case-name: tests.test_protocol_table,tests.test_protocol_reader -*-
"""The command table: every beanstalk command, its arguments, its replies.

One table drives the server's parser, the client's request encoder and the
shell's completion, hints, validation and help, so they cannot disagree.

Argument parsing reproduces beanstalkd byte for byte:

* ``u32`` / ``u64`` (``read_u32``/``read_u64``): leading spaces skipped, then
  at least one ASCII digit, no sign, no overflow of the type's range.  The last
  argument must end the line (no trailing bytes, not even a space).
* ``tube`` (``use``/``watch``/``ignore``/``stats-tube``): the rest of the line
  after the single space, 1..200 name characters, no leading ``-``.
* ``pause-tube``: leading spaces skipped, then the longest run of name
  characters (``read_tube_name``), then a ``u32`` delay.  beanstalkd counts
  ``cmd-pause-tube`` and only then rejects an invalid name (leading ``-``,
  over 200 bytes) with BAD_FORMAT.
* ``reserve-with-timeout`` (``strtol``): whitespace, optional sign, digits;
  trailing bytes ignored; no digits means 0; the value is then truncated to a
  C int as beanstalkd does (4294967296 is 0); a negative timeout waits forever.
* ``kick`` (``strtoul``): like ``strtol`` but at least one digit is required;
  a negative bound wraps as in C and the result is truncated to 32 bits.
"""
from __future__ import annotations

TYPE_CHECKING = False  # typing costs stalkd's first reply (server/_early.py)
if TYPE_CHECKING:  # pragma: no cover
    from typing import Dict, List, Optional, Sequence, Tuple, Union

from ..wording import counted
from .constants import (
    BAD_FORMAT,
    JOB_STATES,
    MAX_TUBE_NAME,
    NAME_CHARS,
    U32_MAX,
    U64_MAX,
    UNKNOWN_COMMAND,
)
from .frozen import Frozen


class Arg(Frozen):
    """One argument of a command: its name, kind and meaning."""

    __slots__ = ("name", "kind", "help")
    name: str
    #: "u32", "u64", "seconds", "tube", "timeout", "bound", "bytes" (stock
    #: commands); "state" (extension verbs: one of :data:`JOB_STATES`).
    kind: str
    help: str

    def __init__(self, name: str, kind: str, help: str) -> None:
        init = object.__setattr__
        init(self, "name", name)
        init(self, "kind", kind)
        init(self, "help", help)


class CommandSpec(Frozen):
    """A beanstalk command as the protocol defines it.

    Everything the server, the client and the shell need to know about a
    command is here, so no other table repeats it: how the server finds it in
    a line (``match``), whether a body follows it (``has_body``), whether it
    can wait (``blocks``), whether ``stats`` counts it (``counted``), its
    replies and what the data block of its success reply holds
    (``reply_body``), whether it hands out a job (``reserves``), whether it
    only reads the queue (``read_only``), whether its NOT_FOUND means the
    job it names does not exist (``gone_if_not_found``) and where ``help``
    lists it (``help_group``).
    """

    __slots__ = ("name", "args", "summary", "replies", "has_body", "blocks", "match",
                 "counted", "reply_body", "optional", "extension", "reserves", "read_only",
                 "gone_if_not_found", "help_group")
    name: str
    args: Tuple[Arg, ...]
    summary: str
    replies: Tuple[str, ...]
    #: True when a data block (the job body) follows the command line.
    has_body: bool
    #: True when the command may wait indefinitely for its reply.
    blocks: bool
    #: Beanstalkd matches command words by prefix; commands with arguments
    #: need the space after the word ("put "), the others match the bare word.
    #: Empty for extension verbs, which match their exact first word.
    match: bytes
    #: True when ``stats`` has a ``cmd-<name>`` counter for the command.
    counted: bool
    #: What the data block of the success reply holds: "job" (a job body),
    #: "mapping" (stats YAML), "sequence" (a YAML list of names), "ids" (a
    #: YAML list of job ids), or "" (no data block).
    reply_body: str
    #: Extension verbs only: how many trailing arguments may be left out.
    optional: int
    #: True for our server's extension verbs (``--extensions``), which are
    #: not part of beanstalkd's protocol.
    extension: bool
    #: True when a success hands a job to the connection (a reservation): a
    #: client sends these on a connection that may hold it.
    reserves: bool
    #: True when it only reads the queue (not the connection's own state) and
    #: changes nothing: the shell may send it to every server of a list.
    read_only: bool
    #: True when NOT_FOUND to it means the job it names does not exist, for
    #: anyone (``peek``, ``stats-job``).  To the other commands on a job id
    #: NOT_FOUND may also mean that the job exists in a state the command
    #: cannot take (reserved by another connection, not reserved by this one,
    #: not buried or delayed): the shell forgets a job id (for completion)
    #: only on this one's NOT_FOUND.
    gone_if_not_found: bool
    #: The group ``help`` lists a stock command in (the shell's help.GROUP_TITLES).
    help_group: str

    def __init__(self, name: str, args: Tuple[Arg, ...], summary: str,
                 replies: Tuple[str, ...], has_body: bool = False, blocks: bool = False,
                 match: bytes = b"", counted: bool = True, reply_body: str = "",
                 optional: int = 0, extension: bool = False, reserves: bool = False,
                 read_only: bool = False, gone_if_not_found: bool = False,
                 help_group: str = "") -> None:
        init = object.__setattr__
        for field, value in (("name", name), ("args", args), ("summary", summary),
                             ("replies", replies), ("has_body", has_body), ("blocks", blocks),
                             ("match", match), ("counted", counted),
                             ("reply_body", reply_body), ("optional", optional),
                             ("extension", extension), ("reserves", reserves),
                             ("read_only", read_only),
                             ("gone_if_not_found", gone_if_not_found),
                             ("help_group", help_group)):
            init(self, field, value)

    @property
    def method(self) -> str:
        """The name of the engine method (and of the server's handler) that
        serves this command: ``reserve-with-timeout`` -> ``reserve_with_timeout``."""
        return self.name.replace("-", "_")

    @property
    def min_args(self) -> int:
        return len(self.args) - self.optional

    @property
    def usage(self) -> str:
        parts = [self.name]
        for i, a in enumerate(self.args):
            parts.append(f"[{a.name}]" if i >= self.min_args else f"<{a.name}>")
        return " ".join(parts)


_ID = Arg("id", "u64", "job id")
_PRI = Arg("pri", "u32", "priority, 0 (most urgent) .. 4294967295")
_DELAY = Arg("delay", "seconds", "seconds to wait before the job becomes ready")
_TTR = Arg("ttr", "seconds", "seconds a worker may hold the job (time to run); 0 means 1")
_TUBE = Arg("tube", "tube", "tube name: up to 200 of A-Z a-z 0-9 - + / ; . $ _ ( ), not starting with -")
_JOB = ("RESERVED <id> <bytes>",)

#: The groups of ``help``.
_PRODUCER, _WORKER, _INSPECT = "Producer", "Worker", "Inspect and manage"

#: The stock commands, in beanstalkd's order of the ``cmd-*`` stats counters
#: (the three commands without a counter follow their siblings).
COMMANDS: Tuple[CommandSpec, ...] = (
    CommandSpec("put", (_PRI, _DELAY, _TTR, Arg("bytes", "bytes", "body length in bytes")),
                "Insert a job into the tube in use; the body follows on the next line.",
                ("INSERTED <id>", "BURIED <id>", "EXPECTED_CRLF", "JOB_TOO_BIG", "DRAINING"),
                has_body=True, match=b"put ", help_group=_PRODUCER),
    CommandSpec("peek", (_ID,), "Show a job by id.", ("FOUND <id> <bytes>", "NOT_FOUND"),
                match=b"peek ", reply_body="job", help_group=_INSPECT, read_only=True,
                gone_if_not_found=True),
    CommandSpec("peek-ready", (), "Show the next ready job in the tube in use.",
                ("FOUND <id> <bytes>", "NOT_FOUND"), match=b"peek-ready", reply_body="job",
                help_group=_INSPECT, read_only=True),
    CommandSpec("peek-delayed", (), "Show the delayed job with the shortest delay left in the tube in use.",
                ("FOUND <id> <bytes>", "NOT_FOUND"), match=b"peek-delayed", reply_body="job",
                help_group=_INSPECT, read_only=True),
    CommandSpec("peek-buried", (), "Show the next buried job in the tube in use.",
                ("FOUND <id> <bytes>", "NOT_FOUND"), match=b"peek-buried", reply_body="job",
                help_group=_INSPECT, read_only=True),
    CommandSpec("reserve", (), "Wait for and reserve a ready job from the watched tubes.",
                _JOB + ("DEADLINE_SOON", "TIMED_OUT"), blocks=True, match=b"reserve",
                reply_body="job", help_group=_WORKER, reserves=True),
    CommandSpec("reserve-with-timeout", (Arg("seconds", "timeout", "seconds to wait; 0 answers at once"),),
                "Reserve a job, waiting at most the given number of seconds.",
                _JOB + ("DEADLINE_SOON", "TIMED_OUT"), blocks=True,
                match=b"reserve-with-timeout ", reply_body="job",
                help_group=_WORKER, reserves=True),
    CommandSpec("reserve-job", (_ID,), "Reserve a specific ready, delayed or buried job by id.",
                _JOB + ("NOT_FOUND",), match=b"reserve-job ", counted=False, reply_body="job",
                help_group=_WORKER, reserves=True),
    CommandSpec("delete", (_ID,), "Delete a job (ready, delayed, buried, or reserved by you).",
                ("DELETED", "NOT_FOUND"), match=b"delete ", help_group=_WORKER),
    CommandSpec("release", (_ID, _PRI, _DELAY), "Put a job you reserved back into the ready (or delayed) queue.",
                ("RELEASED", "BURIED", "NOT_FOUND"), match=b"release ", help_group=_WORKER),
    CommandSpec("use", (_TUBE,), "Use a tube for subsequent puts (creating it if needed).",
                ("USING <tube>",), match=b"use ", help_group=_PRODUCER),
    CommandSpec("watch", (_TUBE,), "Add a tube to the watch list for reserve.",
                ("WATCHING <count>",), match=b"watch ", help_group=_WORKER),
    CommandSpec("ignore", (_TUBE,), "Remove a tube from the watch list.",
                ("WATCHING <count>", "NOT_IGNORED"), match=b"ignore ", help_group=_WORKER),
    CommandSpec("bury", (_ID, _PRI), "Bury a job you reserved.", ("BURIED", "NOT_FOUND"),
                match=b"bury ", help_group=_WORKER),
    CommandSpec("kick", (Arg("bound", "bound", "most jobs to kick"),),
                "Move buried (or, if none, delayed) jobs of the tube in use to ready.",
                ("KICKED <count>",), match=b"kick ", help_group=_INSPECT),
    CommandSpec("kick-job", (_ID,), "Move one buried or delayed job to ready.",
                ("KICKED", "NOT_FOUND"), match=b"kick-job ", counted=False, help_group=_INSPECT),
    CommandSpec("touch", (_ID,), "Ask for more time to work on a job you reserved.",
                ("TOUCHED", "NOT_FOUND"), match=b"touch ", help_group=_WORKER),
    CommandSpec("stats", (), "Statistics of the server (YAML).", ("OK <bytes>",), match=b"stats",
                reply_body="mapping", help_group=_INSPECT, read_only=True),
    CommandSpec("stats-job", (_ID,), "Statistics of a job (YAML).", ("OK <bytes>", "NOT_FOUND"),
                match=b"stats-job ", reply_body="mapping", help_group=_INSPECT, read_only=True,
                gone_if_not_found=True),
    CommandSpec("stats-tube", (_TUBE,), "Statistics of a tube (YAML).", ("OK <bytes>", "NOT_FOUND"),
                match=b"stats-tube ", reply_body="mapping", help_group=_INSPECT, read_only=True),
    CommandSpec("list-tubes", (), "List all existing tubes (YAML).", ("OK <bytes>",),
                match=b"list-tubes", reply_body="sequence", help_group=_INSPECT, read_only=True),
    CommandSpec("list-tube-used", (), "Show the tube in use.", ("USING <tube>",),
                match=b"list-tube-used", help_group=_INSPECT),
    CommandSpec("list-tubes-watched", (), "List the watched tubes (YAML).", ("OK <bytes>",),
                match=b"list-tubes-watched", reply_body="sequence", help_group=_INSPECT),
    CommandSpec("pause-tube", (_TUBE, Arg("delay", "seconds", "seconds to pause reserves for")),
                "Hold back reserves from a tube for some seconds.", ("PAUSED", "NOT_FOUND"),
                match=b"pause-tube", help_group=_INSPECT),
    CommandSpec("quit", (), "Close the connection.", (), match=b"quit", counted=False,
                help_group=_INSPECT),
)

#: Stock command specs by name.
BY_NAME: Dict[str, CommandSpec] = {c.name: c for c in COMMANDS}

#: The commands ``stats`` counts, in the order of its ``cmd-*`` keys.
COUNTED_COMMANDS: Tuple[str, ...] = tuple(c.name for c in COMMANDS if c.counted)

_EXT_STATE = Arg("state", "state", "ready, delayed, buried or reserved")

#: Our server's extension verbs (``--extensions``), in the order
#: ``capabilities`` lists them.  The server looks them up only for lines no
#: stock command matches, and by their exact first word: none starts with a
#: stock command's prefix.
EXTENSION_COMMANDS: Tuple[CommandSpec, ...] = (
    CommandSpec("list-jobs", (_TUBE, _EXT_STATE,
                              Arg("limit", "u32", "most ids to list, 0 .. 4294967295")),
                "List ids of a tube's jobs in a state, without reserving (extension).",
                ("OK <bytes>", "NOT_FOUND"), counted=False, reply_body="ids", extension=True),
    CommandSpec("flush-tube", (_TUBE, Arg("state", "state",
                                          "ready, delayed, buried or reserved; "
                                          "leave it out for ready, delayed and buried")),
                "Delete a tube's jobs in a state (default: all but reserved) (extension).",
                ("FLUSHED <count>", "NOT_FOUND"), counted=False, optional=1, extension=True),
    CommandSpec("capabilities", (), "List the extension verbs this server serves (extension).",
                ("OK <bytes>",), counted=False, reply_body="sequence", extension=True),
)

#: Extension verb specs by name.
EXTENSION_BY_NAME: Dict[str, CommandSpec] = {c.name: c for c in EXTENSION_COMMANDS}


def command_spec(name: str) -> Optional[CommandSpec]:
    """The spec of a stock command or an extension verb (None if neither)."""
    return BY_NAME.get(name) or EXTENSION_BY_NAME.get(name)


# beanstalkd's which_cmd() tries the words in an order where, of two words
# one of which is a prefix of the other ("reserve" / "reserve-with-timeout ",
# "stats" / "stats-job ", "list-tubes" / "list-tubes-watched"), the longer
# comes first; trying the longest first therefore finds the same command
# (tests/test_protocol_table.py checks this against beanstalkd's list).
_PREFIXES = tuple((c.match, c) for c in sorted(COMMANDS, key=lambda c: -len(c.match)))
# Words that must be followed by a space to be recognised.
_EXACT: Dict[bytes, CommandSpec] = {c.name.encode(): c for c in COMMANDS}


class CommandError(Exception):
    """A command line the server answers with an error word (BAD_FORMAT ...)."""

    def __init__(self, reply: bytes) -> None:
        super().__init__(reply)
        self.reply = reply


def identify(line: bytes) -> Tuple[Optional[CommandSpec], bytes]:
    """Find the command a line names, as beanstalkd does, and its argument text.

    Returns ``(None, b"")`` for an unknown command.  The argument text is what
    follows the matched word (for commands with arguments, after its space).
    """
    sp = line.find(b" ")
    word = line if sp < 0 else line[:sp]
    spec = _EXACT.get(word)
    if spec is not None:
        has_args = bool(spec.args) and spec.name != "pause-tube"
        if has_args and sp >= 0:
            return spec, line[sp + 1:]
        if not has_args:
            return spec, line[len(word):]
    for prefix, spec in _PREFIXES:
        if line.startswith(prefix):
            return spec, line[len(prefix):]
    return None, b""


def identify_extension(line: bytes) -> Tuple[Optional[CommandSpec], bytes]:
    """The extension verb a line names (by its exact first word) and the
    rest of the line after the word, or ``(None, b"")``.  The server asks
    only for lines :func:`identify` does not know."""
    sp = line.find(b" ")
    word = line if sp < 0 else line[:sp]
    spec = EXTENSION_BY_NAME.get(word.decode("ascii", "replace"))
    return (spec, line[len(word):]) if spec is not None else (None, b"")


def _skip_spaces(text: bytes, pos: int) -> int:
    n = len(text)
    while pos < n and text[pos] == 0x20:
        pos += 1
    return pos


def _read_uint(text: bytes, pos: int, limit: int, last: bool) -> Tuple[int, int]:
    """beanstalkd's read_u32/read_u64: returns (value, end position)."""
    pos = _skip_spaces(text, pos)
    end = pos
    n = len(text)
    while end < n and 0x30 <= text[end] <= 0x39:
        end += 1
    if end == pos:
        raise CommandError(BAD_FORMAT)
    value = int(text[pos:end])
    if value > limit or (last and end != n):
        raise CommandError(BAD_FORMAT)
    return value, end


_C_SPACE = b" \t\n\v\f\r"


def _read_c_integer(text: bytes, need_digits: bool) -> int:
    """C's strtol/strtoul prefix parse: whitespace, sign, digits, rest ignored."""
    pos = 0
    n = len(text)
    while pos < n and text[pos] in _C_SPACE:
        pos += 1
    negative = False
    if pos < n and text[pos] in b"+-":
        negative = text[pos] == 0x2D
        pos += 1
    end = pos
    while end < n and 0x30 <= text[end] <= 0x39:
        end += 1
    if end == pos:
        if need_digits:
            raise CommandError(BAD_FORMAT)
        return 0
    value = int(text[pos:end])
    return -value if negative else value


def valid_tube_name(name: bytes) -> bool:
    """True if ``name`` is a legal tube name (1..200 name characters, no leading -)."""
    return (0 < len(name) <= MAX_TUBE_NAME and name[0] != 0x2D
            and NAME_CHARS.issuperset(name))


def _tube_arg(text: bytes) -> bytes:
    if not valid_tube_name(text):
        raise CommandError(BAD_FORMAT)
    return text


if TYPE_CHECKING:  # pragma: no cover
    ArgValue = Union[int, bytes, None]


def parse_args(spec: CommandSpec, text: bytes) -> Tuple[ArgValue, ...]:
    """Parse the argument text of ``spec`` exactly as beanstalkd does.

    Raises :class:`CommandError` with the reply to send.  ``put`` returns
    ``(pri, delay, ttr, nbytes, trailing_ok)``: beanstalkd checks the body size
    against the limit (JOB_TOO_BIG) before it rejects trailing bytes.
    """
    name = spec.name
    if spec.extension:
        return _parse_extension_args(spec, text)
    if not spec.args:
        if text and name != "quit":
            raise CommandError(BAD_FORMAT)
        return ()
    kinds = [a.kind for a in spec.args]
    if name == "put":
        pri, pos = _read_uint(text, 0, U32_MAX, False)
        delay, pos = _read_uint(text, pos, U32_MAX, False)
        ttr, pos = _read_uint(text, pos, U32_MAX, False)
        nbytes, pos = _read_uint(text, pos, U32_MAX, False)
        return pri, delay, ttr, nbytes, pos == len(text)
    if kinds == ["tube"]:
        return (_tube_arg(text),)
    if name == "pause-tube":
        pos = _skip_spaces(text, 0)
        end = pos
        while end < len(text) and text[end] in NAME_CHARS:
            end += 1
        delay, _ = _read_uint(text, end, U32_MAX, True)
        # The name's validity is checked by the command itself, after it is
        # counted in cmd-pause-tube, as beanstalkd does.
        return text[pos:end], delay
    if name == "reserve-with-timeout":
        value = _read_c_integer(text, need_digits=False)
        if not -2**63 <= value < 2**63:
            raise CommandError(BAD_FORMAT)
        # beanstalkd stores the long in an int: keep its low 32 bits, signed.
        return ((value + 2**31) % 2**32 - 2**31,)
    if name == "kick":
        value = _read_c_integer(text, need_digits=True)
        if abs(value) > U64_MAX:
            raise CommandError(BAD_FORMAT)
        return (value % 2**64 & U32_MAX,)
    values: List[ArgValue] = []
    pos = 0
    last = len(kinds) - 1
    for i, kind in enumerate(kinds):
        limit = U64_MAX if kind == "u64" else U32_MAX
        value, pos = _read_uint(text, pos, limit, i == last)
        values.append(value)
    return tuple(values)


def _parse_extension_args(spec: CommandSpec, text: bytes) -> Tuple[ArgValue, ...]:
    """An extension verb's arguments: single spaces between them, each of its
    kind (``tube``, ``state``, ``u32`` of at most ten digits); the last
    ``spec.optional`` may be left out.  ``text`` is everything after the verb
    (its space included, empty for the bare verb)."""
    if not text:
        parts: List[bytes] = []
    elif text[:1] == b" ":
        parts = text[1:].split(b" ")
    else:
        raise CommandError(BAD_FORMAT)
    if not spec.min_args <= len(parts) <= len(spec.args):
        raise CommandError(BAD_FORMAT)
    values: List[ArgValue] = []
    for arg, part in zip(spec.args, parts):
        if arg.kind == "tube":
            values.append(_tube_arg(part))
        elif arg.kind == "state":
            if part.decode("ascii", "replace") not in JOB_STATES:
                raise CommandError(BAD_FORMAT)
            values.append(part)
        elif part.isdigit() and len(part) <= 10 and int(part) <= U32_MAX:
            values.append(int(part))
        else:
            raise CommandError(BAD_FORMAT)
    return tuple(values)


def parse_command(line: bytes) -> Tuple[CommandSpec, Tuple[ArgValue, ...]]:
    """Parse one command line (without CRLF) into its spec and arguments.

    Raises :class:`CommandError` carrying BAD_FORMAT or UNKNOWN_COMMAND.
    """
    if b"\0" in line:
        raise CommandError(BAD_FORMAT)
    spec, text = identify(line)
    if spec is None:
        raise CommandError(UNKNOWN_COMMAND)
    return spec, parse_args(spec, text)


#: Argument kinds written as decimal numbers; the others (tube, state) as names.
_NUMERIC_KINDS = frozenset(["u32", "u64", "seconds", "timeout", "bound", "bytes"])


def _formats(spec: CommandSpec) -> Dict[int, bytes]:
    """The ``%``-format of ``spec``'s bytes for each number of arguments a
    caller may give.  A command with a body (``put``) is given its arguments
    but the byte count, which the format takes from the body, then the body."""
    head = spec.name.encode("ascii")
    given = spec.args[:-1] if spec.has_body else spec.args
    formats: Dict[int, bytes] = {}
    for count in range(len(given) - spec.optional, len(given) + 1):
        kinds = [a.kind for a in given[:count]] + (["bytes"] if spec.has_body else [])
        line = b" ".join([head] + [b"%d" if k in _NUMERIC_KINDS else b"%s" for k in kinds])
        formats[count] = line + (b"\r\n%s\r\n" if spec.has_body else b"\r\n")
    return formats


_FORMATS: Dict[str, Dict[int, bytes]] = {
    spec.name: _formats(spec) for spec in COMMANDS + EXTENSION_COMMANDS}
_WITH_BODY = frozenset(spec.name for spec in COMMANDS if spec.has_body)


def command_format(name: str, nargs: Optional[int] = None) -> bytes:
    """The ``%``-format :func:`encode_command` fills for ``name`` given
    ``nargs`` arguments (all of them by default): ``b"delete %d\\r\\n"``,
    ``b"put %d %d %d %d\\r\\n%s\\r\\n"`` (pri, delay, ttr, byte count, body).

    For hot paths that encode one command many times (the client's ``put``);
    everything else calls :func:`encode_command`.
    """
    formats = _FORMATS[name]
    return formats[max(formats) if nargs is None else nargs]


def encode_command(name: str, *args: Union[int, str, bytes],
                   body: Optional[bytes] = None) -> bytes:
    """The bytes of one command, from the command table: its line, CRLF, and
    for a command with a body (``put``) the body and CRLF, the byte count
    being taken from the body::

        encode_command("delete", 7)                     # b"delete 7\\r\\n"
        encode_command("put", 1024, 0, 60, body=b"hi")  # b"put 1024 0 60 2\\r\\nhi\\r\\n"
        encode_command("flush-tube", b"emails")         # optional arguments may be left out

    Numbers are ints (or decimal text), names bytes (or ASCII text); text is
    sent as given, so a shell sends what its user typed.  The values are not
    checked (see :func:`validate_command_args`); the number of arguments is:
    :class:`ValueError` for an unknown command or a wrong count.
    """
    formats = _FORMATS.get(name)
    if formats is None:
        raise ValueError(f"unknown command {name!r}")
    fmt = formats.get(len(args))
    if fmt is None or (body is None) == (name in _WITH_BODY):
        spec = command_spec(name)
        assert spec is not None
        given = len(spec.args) - spec.has_body
        raise ValueError(f"{name} takes {arguments(given - spec.optional, given)} and "
                         f"{'a body' if spec.has_body else 'no body'}: {spec.usage}")
    try:
        return fmt % (args if body is None else args + (len(body), body))
    except TypeError:  # text typed by a user: send it as given
        pass
    parts = [name.encode("ascii")]
    for a in args:
        parts.append(a if isinstance(a, bytes) else
                     a.encode("ascii") if isinstance(a, str) else b"%d" % a)
    if body is None:
        return b" ".join(parts) + b"\r\n"
    return b" ".join(parts) + b" %d\r\n%s\r\n" % (len(body), body)


def arguments(least: int, most: int) -> str:
    """How many arguments a command takes, in words: "no arguments",
    "1 argument", "3 arguments", "1 or 2 arguments"."""
    if least != most:
        return f"{least} or {most} arguments"
    return "no arguments" if most == 0 else counted(most, "argument")


def validate_command_args(name: str, args: Sequence[str]) -> Optional[str]:
    """Explain what is wrong with ``name args`` (a stock command or an
    extension verb) before it is sent, or None.

    Used by the shell and the client so that a malformed command is caught
    locally with a readable message.
    """
    spec = command_spec(name)
    if spec is None:
        return f"unknown command {name!r}"
    expected = list(spec.args)
    if name == "put" and len(args) in (0, 3):
        # The shell may count the body's bytes itself.
        expected = expected[: len(args)]
    if not len(expected) - spec.optional <= len(args) <= len(expected):
        return f"{name} takes {arguments(spec.min_args, len(spec.args))}: {spec.usage}"
    for arg, text in zip(expected, args):
        if arg.kind == "tube":
            if not valid_tube_name(text.encode("ascii", "replace")):
                return f"<{arg.name}>: {arg.help}"
            continue
        if arg.kind == "state":
            if text not in JOB_STATES:
                return f"<{arg.name}> must be one of {', '.join(JOB_STATES)}"
            continue
        if arg.kind == "timeout":
            if not text.lstrip("-").isdigit():
                return f"<{arg.name}> must be a whole number of seconds"
            continue
        if spec.extension:
            if not (text.isascii() and text.isdigit() and len(text) <= 10
                    and int(text) <= U32_MAX):
                return f"<{arg.name}> must be a whole number 0 .. {U32_MAX}"
            continue
        if not (text.isascii() and text.isdigit()):
            return f"<{arg.name}> must be a non-negative whole number ({arg.help})"
        limit = U64_MAX if arg.kind == "u64" else U32_MAX
        if int(text) > limit:
            return f"<{arg.name}> must be at most {limit}"
    return None
