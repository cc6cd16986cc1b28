# -*- test-case-name: tests.test_shell_units -*-
"""What the user typed, turned into requests: one place for every input rule.

The interactive shell, ``stalk CMD ARGS`` and ``stalk -`` all go through
:func:`build_request`, and the shared command table
(:mod:`twisted_stalk.protocol.commands`) decides what is valid, so completion,
hints, validation and help never disagree; a request's bytes are encoded from
the same table (:func:`~twisted_stalk.protocol.commands.encode_command`).

Rules for ``put``:

* ``put`` or ``put <pri> <delay> <ttr>``: the body is on the following
  line(s), ended by an empty line; the shell counts the bytes (UTF-8).
  Omitted ``pri delay ttr`` take the configured defaults.
* ``put [<pri> <delay> <ttr>] @FILE``: the body is the file's bytes.
* ``put [<pri> <delay> <ttr>] $EDITOR``: the body is written in ``$VISUAL`` /
  ``$EDITOR``.

  A text body from a file or the editor (as from stdin for ``stalk put``)
  loses one final line break: :func:`drop_final_newline`.
* ``put <pri> <delay> <ttr> <bytes>``: sends exactly what you typed, even if
  the count is wrong, so you can test how a server copes.

A line starting with ``!`` is sent as raw bytes without any check (C-style
escapes ``\\r \\n \\t \\0 \\\\ \\xNN`` are decoded), for testing servers.

The extension verbs of our server (``list-jobs``, ``flush-tube``,
``capabilities``; ``--extensions``) come from their own small table,
:data:`~twisted_stalk.protocol.commands.EXTENSION_COMMANDS`, never from
``COMMANDS`` (the stock parser's table).  The interactive shell accepts them when the server
advertises them (``capabilities`` is always accepted: it is how to ask).
"""
from __future__ import annotations

import difflib
import os
import shlex
import subprocess
import tempfile
from dataclasses import dataclass, field
from typing import Callable, Collection, Dict, List, Optional, Tuple

from twisted_stalk.protocol import BY_NAME, COMMANDS, CommandSpec, validate_command_args
from twisted_stalk.protocol.commands import (
    EXTENSION_BY_NAME,
    EXTENSION_COMMANDS,
    command_spec,
    encode_command,
)
from twisted_stalk.protocol.constants import (
    DEFAULT_PUT_DELAY,
    DEFAULT_PUT_PRIORITY,
    DEFAULT_PUT_TTR,
    MAX_LINE_CONTENT,
)

from .toolnames import TOOL_NAMES

#: Default priority, delay and TTR for ``put`` without them (the project's one set).
DEFAULT_PUT = (DEFAULT_PUT_PRIORITY, DEFAULT_PUT_DELAY, DEFAULT_PUT_TTR)


class InputError(Exception):
    """What is wrong with a line, in words; ``position`` is a cursor hint."""

    def __init__(self, message: str, position: Optional[int] = None) -> None:
        super().__init__(message)
        self.message = message
        self.position = position


@dataclass(frozen=True)
class MetaCommand:
    name: str
    usage: str
    summary: str
    aliases: Tuple[str, ...] = ()


META_COMMANDS: Tuple[MetaCommand, ...] = (
    MetaCommand("help", "help [command]", "List commands, or explain one command.", ("?", "\\h", "\\help")),
    MetaCommand("\\wire", "\\wire [on|off]", "Toggle showing the exact bytes sent and received."),
    MetaCommand("\\jobs", "\\jobs", "Show the jobs this connection has reserved and their TTR left."),
    MetaCommand("\\reconnect", "\\reconnect", "Drop the connection and connect again (reserved jobs go back to ready)."),
    MetaCommand("\\connect", "\\connect <address>", "Connect to another server (host:port, unix:PATH, tls:host:port)."),
    MetaCommand("\\json", "\\json [on|off]", "Toggle pretty-printing of JSON job bodies."),
    MetaCommand("\\pager", "\\pager [on|off]", "Toggle showing output taller than the window in a pager."),
    MetaCommand("\\vi", "\\vi", "Use vi key bindings."),
    MetaCommand("\\emacs", "\\emacs", "Use emacs key bindings (the default)."),
    MetaCommand("\\raw", "\\raw <text>  (or !<text>)", "Send text as raw bytes without checking it (escapes: \\r \\n \\t \\0 \\\\ \\xNN)."),
    MetaCommand("top", "top [tube...] [-n SECONDS]", "A live per-tube table of this server's jobs, "
                "workers and rates, as stalk top; q or Ctrl-C returns to the prompt."),
    MetaCommand("tail", "tail [tube] [-n SECONDS]", "Show jobs as they arrive in a tube (default: "
                "the one in use) without reserving them, as stalk tail; q or Ctrl-C returns."),
    MetaCommand("flush", "flush <tube> [options]", "Delete a tube's ready, delayed and buried "
                "jobs, asking first (--state, --yes, --dry-run), as stalk flush."),
    MetaCommand("move", "move <from> <to> [options]", "Move jobs to another tube, never losing "
                "one, asking first (--state, --max, --yes, --dry-run), as stalk move."),
    MetaCommand("exit", "exit", "Leave the shell (also \\q, Ctrl-D).", ("\\q", "\\quit")),
)

META_BY_NAME: Dict[str, MetaCommand] = {}
for _m in META_COMMANDS:
    META_BY_NAME[_m.name] = _m
    for _a in _m.aliases:
        META_BY_NAME[_a] = _m


@dataclass
class Request:
    """Something to do: a protocol command, a raw send or a meta command."""

    name: str
    args: List[str] = field(default_factory=list)
    line: bytes = b""
    body: Optional[bytes] = None
    #: Sent without checking; further replies are drained and shown.
    raw: bool = False
    #: A shell command (help, \\wire ...), not sent to the server.
    meta: bool = False
    #: The raw text for ``\\raw`` / the argument text for meta commands.
    text: str = ""
    #: False for a raw line ending in ``\\c``: no CRLF after it.
    crlf: bool = True

    @property
    def spec(self) -> Optional[CommandSpec]:
        return command_spec(self.name)

    @property
    def blocks(self) -> bool:
        spec = self.spec
        return bool(spec and spec.blocks)

    def wire(self) -> bytes:
        """The bytes to send: a raw request's as typed, a command's encoded
        from the table (a put's byte count from its body)."""
        if self.raw:
            data = self.line + (b"\r\n" if self.crlf else b"")
            if self.body is not None:
                data += self.body + b"\r\n"
            return data
        spec = self.spec
        assert spec is not None
        args = self.args[:-1] if spec.has_body else self.args
        return encode_command(self.name, *args, body=self.body)


# --------------------------------------------------------------------------
# Usage strings and hints, from the table

def arg_label(spec: CommandSpec, index: int) -> str:
    arg = spec.args[index]
    if spec.name == "put" and arg.kind == "bytes":
        return "[bytes]"
    if spec.extension and index >= spec.min_args:
        return f"[{arg.name}]"
    return f"<{arg.name}>"


#: Which extension verbs to accept: None accepts them all (command-line mode,
#: where the server decides), a collection only those (the interactive shell
#: passes what the server advertised).
Extensions = Optional[Collection[str]]


def offered_extensions(extensions: Extensions) -> List[CommandSpec]:
    """The extension specs to complete and list in help."""
    return [spec for spec in EXTENSION_COMMANDS
            if extensions is None or spec.name in extensions]


def extension_allowed(name: str, extensions: Extensions) -> bool:
    return name in EXTENSION_BY_NAME and (
        extensions is None or name in extensions or name == "capabilities")


def usage(spec: CommandSpec) -> str:
    """``put <pri> <delay> <ttr> [bytes]``: the table's usage, the shell's view."""
    return " ".join([spec.name] + [arg_label(spec, i) for i in range(len(spec.args))])


def hint_for(text: str) -> str:
    """The grey argument hint to show after ``text`` (the line typed so far)."""
    if "\n" in text or not text.strip():
        return ""
    tokens = text.split()
    spec = command_spec(tokens[0])
    if spec is None:
        return ""
    # Whether the last token is finished or still being typed, the next
    # argument to hint is the one after the tokens typed so far.
    done = len(tokens) - 1
    prefix = "" if text[-1:].isspace() else " "
    if spec.name == "put" and tokens[-1:] and tokens[-1].startswith(("@", "$")) and len(tokens) > 1:
        return ""
    labels = [arg_label(spec, i) for i in range(done, len(spec.args))]
    if not labels:
        return ""
    return prefix + " ".join(labels)


def current_arg(text: str) -> Tuple[Optional[CommandSpec], Optional[int]]:
    """The command being typed and the index of the argument under the cursor."""
    first = text.split("\n", 1)[0]
    tokens = first.split()
    if not tokens:
        return None, None
    spec = command_spec(tokens[0])
    if spec is None:
        return None, None
    if len(tokens) == 1 and not first[-1:].isspace():
        return spec, None
    index = len(tokens) - 1 if first[-1:].isspace() else len(tokens) - 2
    if index >= len(spec.args):
        return spec, None
    return spec, index


def unknown_command(word: str, extensions: Extensions = ()) -> str:
    """Why ``word`` is not a command, and what to type instead (a tool of
    ``stalk`` that the shell did not run would run from the system shell)."""
    if word in TOOL_NAMES:
        return (f"{word!r} is not a beanstalk command but a stalk tool: run "
                f"`stalk {word}` from your terminal (stalk --help lists the tools)")
    return f"unknown command {word!r}{suggest_command(word, extensions)}"


def suggest_command(word: str, extensions: Extensions = ()) -> str:
    names = ([c.name for c in COMMANDS] + [c.name for c in offered_extensions(extensions)]
             + [m.name for m in META_COMMANDS])
    close = difflib.get_close_matches(word, names, n=3, cutoff=0.6)
    starts = [n for n in names if n.startswith(word)] if word else []
    options = list(dict.fromkeys(starts[:3] + close))
    return f" (did you mean {', '.join(options)}?)" if options else ""


# --------------------------------------------------------------------------
# Raw escapes

def decode_escapes(text: str) -> bytes:
    """``\\r \\n \\t \\0 \\\\ \\xNN`` to bytes; other characters as UTF-8."""
    out = bytearray()
    i = 0
    while i < len(text):
        ch = text[i]
        if ch != "\\" or i + 1 >= len(text):
            out += ch.encode("utf-8")
            i += 1
            continue
        nxt = text[i + 1]
        simple = {"r": b"\r", "n": b"\n", "t": b"\t", "0": b"\0", "\\": b"\\"}
        if nxt in simple:
            out += simple[nxt]
            i += 2
        elif nxt == "x" and i + 3 < len(text) + 0 and _is_hex(text[i + 2:i + 4]):
            out.append(int(text[i + 2:i + 4], 16))
            i += 4
        else:
            out += b"\\"
            i += 1
    return bytes(out)


def _is_hex(s: str) -> bool:
    return len(s) == 2 and all(c in "0123456789abcdefABCDEF" for c in s)


# --------------------------------------------------------------------------
# Put bodies

@dataclass
class PutForm:
    """How a put line says where its body comes from."""

    numbers: List[str]
    source: str  # "lines", "exact", "file", "editor"
    path: str = ""


def put_form(first_line: str) -> Optional[PutForm]:
    """Classify a ``put`` line (or ``!put``), None if it is not a put."""
    line = first_line[1:] if first_line.startswith("!") else first_line
    tokens = line.split()
    if not tokens or tokens[0] != "put":
        return None
    args = tokens[1:]
    if args and args[-1].startswith("@"):
        return PutForm(args[:-1], "file", args[-1][1:])
    if args and args[-1] in ("$EDITOR", "$VISUAL"):
        return PutForm(args[:-1], "editor")
    if len(args) == 4:
        return PutForm(args, "exact")
    return PutForm(args, "lines")


def needs_more_input(text: str) -> bool:
    """Whether Enter should start/continue a put body instead of submitting.

    * ``put`` / ``put <pri> <delay> <ttr>``: until an empty line ends the body.
    * ``put <pri> <delay> <ttr> <bytes>``: until the body has that many bytes
      (Alt-Enter submits a shorter one anyway).
    """
    first, nl, rest = text.partition("\n")
    form = put_form(first)
    if form is None or form.source in ("file", "editor"):
        return False
    if form.source == "exact":
        if not first.startswith("!") and validate_command_args("put", form.numbers):
            return False
        try:
            size = int(form.numbers[3])
        except ValueError:
            return False
        if not nl:
            return True
        return len(rest.encode("utf-8")) < size
    if len(form.numbers) not in (0, 3) or first.startswith("!"):
        return False
    if validate_command_args("put", form.numbers):
        return False  # malformed: let Enter submit so the validator explains
    if not nl:
        return True
    return not text.endswith("\n")


def default_editor(initial: bytes = b"") -> bytes:
    """Edit a body in ``$VISUAL``/``$EDITOR`` (``vi``); returns the bytes."""
    editor = os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi"
    fd, path = tempfile.mkstemp(prefix="stalk-body-", suffix=".txt")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(initial)
        try:
            status = subprocess.call(shlex.split(editor) + [path])
        except OSError as e:
            raise InputError(f"cannot run editor {editor!r}: {e.strerror or e}")
        if status != 0:
            raise InputError(f"editor {editor!r} exited with status {status}; nothing sent")
        with open(path, "rb") as f:
            data = f.read()
    finally:
        try:
            os.unlink(path)
        except OSError:
            pass
    return data


Editor = Callable[[bytes], bytes]


def drop_final_newline(data: bytes) -> bytes:
    """The one rule for bodies read from stdin, a file or an editor: a text
    body loses one final line break (``\\n`` or ``\\r\\n``), as ``$(cat FILE)``
    would, since ``echo``, editors and most text files end with one; a binary
    body (not UTF-8, or holding a NUL byte) is never changed.  (``stalk put
    --exact`` keeps the bytes.)"""
    if not data.endswith(b"\n") or b"\0" in data:
        return data
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return data
    return data[:-2] if data.endswith(b"\r\n") else data[:-1]


# --------------------------------------------------------------------------
# Building requests

def build_request(text: str, *, body: Optional[bytes] = None,
                  put_defaults: Tuple[int, int, int] = DEFAULT_PUT,
                  editor: Optional[Editor] = None, check_only: bool = False,
                  extensions: Extensions = None) -> Optional[Request]:
    """Turn one entry into a :class:`Request` (None for blank lines/comments).

    ``text`` is what was typed: the command line, and for a put the body on
    the following lines.  Script mode passes the body it read separately as
    ``body`` (already exact).  ``check_only`` validates without reading files
    or running the editor.  ``extensions``: the extension verbs to accept
    (None: all of them).  Raises :class:`InputError`.
    """
    first, nl, rest = text.partition("\n")
    stripped = first.strip()
    if not stripped or stripped.startswith("#"):
        if nl and rest.strip():
            raise InputError("a body needs a put command before it")
        return None
    if stripped.startswith("!") or stripped.split()[0] == "\\raw":
        lead = first.lstrip()
        raw = lead[1:] if lead.startswith("!") else lead[len("\\raw") + 1:]
        if not raw and not nl:
            raise InputError("nothing to send: give the raw text after ! (escapes: \\r \\n \\xNN)")
        crlf = True
        if raw.endswith("\\c") and not raw.endswith("\\\\c"):
            raw, crlf = raw[:-2], False
        data = decode_escapes(raw)
        req = Request(raw.split(" ", 1)[0] if raw else "", raw=True, text=raw, crlf=crlf)
        req.line = data
        if body is not None:
            req.body = body
        elif nl:
            req.body = rest.encode("utf-8")
        words = raw.split()
        req.args = words[1:]
        if command_spec(req.name) is None:
            req.name = ""
        return req
    tokens = stripped.split()
    word = tokens[0]
    if word in META_BY_NAME:
        if nl and rest.strip():
            raise InputError(f"{word} does not take a body")
        meta = META_BY_NAME[word]
        return Request(meta.name, tokens[1:], meta=True, text=stripped[len(word):].strip())
    if word in EXTENSION_BY_NAME:
        return _build_extension(word, tokens[1:], first, rest if nl else "", extensions)
    spec = BY_NAME.get(word)
    if spec is None:
        raise InputError(f"{unknown_command(word, extensions)}; type help for the list, "
                         "or prefix the line with ! to send it anyway")
    args = tokens[1:]
    if spec.name == "put":
        return _build_put(first, rest if nl else None, body, put_defaults, editor, check_only)
    if nl and rest.strip():
        raise InputError(f"{spec.name} does not take a body (only put does)")
    problem = validate_command_args(spec.name, args)
    if problem:
        raise InputError(f"{problem}; usage: {usage(spec)}", len(first))
    line = " ".join([spec.name] + args).encode("ascii")
    if len(line) > MAX_LINE_CONTENT:
        raise InputError(f"the command line is {len(line)} bytes; the server takes at most {MAX_LINE_CONTENT}")
    return Request(spec.name, args, line=line)


def _build_extension(word: str, args: List[str], first: str, rest: str,
                     extensions: Extensions) -> Request:
    spec = EXTENSION_BY_NAME[word]
    if not extension_allowed(word, extensions):
        raise InputError(f"{word} is an extension verb (twisted-stalk's server with --extensions) "
                         "that this server does not advertise (see capabilities); "
                         "prefix the line with ! to send it anyway")
    if rest.strip():
        raise InputError(f"{word} does not take a body (only put does)")
    problem = validate_command_args(word, args)
    if problem:
        raise InputError(f"{problem}; usage: {spec.usage}", len(first))
    line = " ".join([word] + args).encode("ascii")
    if len(line) > MAX_LINE_CONTENT:
        raise InputError(f"the command line is {len(line)} bytes; the server takes at most {MAX_LINE_CONTENT}")
    return Request(word, args, line=line)


def _build_put(first: str, rest: Optional[str], body: Optional[bytes],
               defaults: Tuple[int, int, int], editor: Optional[Editor],
               check_only: bool) -> Request:
    spec = BY_NAME["put"]
    form = put_form(first)
    assert form is not None
    nums = form.numbers
    if form.source in ("file", "editor") and len(nums) not in (0, 3):
        raise InputError(f"put {'@file' if form.source == 'file' else '$EDITOR'} takes "
                         "either no numbers or <pri> <delay> <ttr> before it", len(first))
    if len(nums) not in (0, 3, 4):
        raise InputError(f"put takes <pri> <delay> <ttr> and optionally <bytes>, "
                         f"or nothing for the defaults ({' '.join(map(str, defaults))}); "
                         f"usage: {usage(spec)} or put [<pri> <delay> <ttr>] @FILE|$EDITOR", len(first))
    problem = validate_command_args("put", nums)
    if problem:
        raise InputError(f"{problem}; usage: {usage(spec)}", len(first))
    if not nums:
        nums = [str(n) for n in defaults]
    if form.source == "file":
        path = os.path.expanduser(form.path)
        if not form.path:
            raise InputError("put @FILE: give a file name after @")
        if check_only:
            if not os.path.isfile(path):
                raise InputError(f"no such file: {form.path}")
            data = b""
        else:
            try:
                with open(path, "rb") as f:
                    data = drop_final_newline(f.read())
            except OSError as e:
                raise InputError(f"cannot read {form.path}: {e.strerror or e}")
    elif form.source == "editor":
        data = b"" if check_only else drop_final_newline((editor or default_editor)(b""))
    elif body is not None:
        data = body
    elif form.source == "exact":
        data = (rest or "").encode("utf-8")
    else:
        text = rest or ""
        if text.endswith("\n"):
            text = text[:-1]
        data = text.encode("utf-8")
    if form.source == "exact":
        line = ("put " + " ".join(nums)).encode("ascii")
        req = Request("put", nums, line=line, body=data)
        req.raw = len(data) != int(nums[3])
        return req
    line = ("put " + " ".join(nums) + f" {len(data)}").encode("ascii")
    return Request("put", nums + [str(len(data))], line=line, body=data)
