# -*- test-case-name: tests.test_shell_units -*-
"""Showing replies: binary-safe bodies, JSON pretty-printing, stats tables.

Renderers return prompt_toolkit formatted text (a list of ``(style, text)``
fragments) so the same output is coloured in a terminal and plain in tests
(:func:`plain`).  Nothing from the server reaches the terminal unescaped:
control characters in lines and bodies are shown as ``\\xNN`` escapes.

Machine formats for command-line mode (:func:`reply_data`, :func:`raw_bytes`)
live here too.

Replies come decoded once, by the connection's
:class:`~twisted_stalk.protocol.reader.ReplyReader`: whether a reply is a
success, its fields, its data block and value are read from the
:class:`~twisted_stalk.protocol.replies.Reply`, and what an ``OK`` data block
holds from the command table (``reply_body``); only replies no command
describes (after raw bytes) are shown by the look of their data block.
"""
from __future__ import annotations

import base64
import json
import re
from typing import Any, Dict, Iterable, List, Sequence, Tuple

from twisted_stalk.protocol.commands import command_spec
from twisted_stalk.protocol.replies import ERRORS, Reply
from twisted_stalk.protocol.yaml import parse_mapping, parse_sequence
from twisted_stalk.wording import counted

Fragments = List[Tuple[str, str]]


def meaning(word: str) -> str:
    """One line on what an error reply word means (its error class's)."""
    cls = ERRORS.get(word)
    return cls.meaning if cls is not None else ""


def data_kind(reply: Reply) -> str:
    """What the data block of an ``OK`` reply holds: ``"mapping"`` (stats),
    ``"tubes"`` (a list of tube names), ``"ids"`` (job ids), ``"names"``
    (another list: the extension verbs), or ``""`` when the reply's command
    does not say (a reply to raw bytes, or one its command cannot get)."""
    spec = command_spec(reply.command) if reply.expected else None
    kind = spec.reply_body if spec is not None else ""
    if kind == "sequence":
        # The stock protocol lists tubes; an extension verb lists what it is named for.
        return "names" if spec.extension else "tubes"  # type: ignore[union-attr]
    return kind if kind in ("mapping", "ids") else ""


def plain(fragments: Iterable[Tuple[str, ...]]) -> str:
    return "".join(f[1] for f in fragments)


# --------------------------------------------------------------------------
# Escaping

_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def escape_text(text: str) -> str:
    """Escape characters that would act on the terminal (keeps \\n and \\t)."""
    return _CONTROL.sub(lambda m: "\\x%02x" % ord(m.group()) if ord(m.group()) < 256
                        else "\\u%04x" % ord(m.group()), text)


def escape_bytes(data: bytes) -> str:
    """Bytes as printable ASCII with ``\\n \\r \\t \\\\ \\xNN`` escapes;
    a line break follows each ``\\n`` so multi-line data stays readable."""
    out: List[str] = []
    for b in data:
        if b == 0x5C:
            out.append("\\\\")
        elif b == 0x0A:
            out.append("\\n\n")
        elif b == 0x0D:
            out.append("\\r")
        elif b == 0x09:
            out.append("\\t")
        elif 0x20 <= b < 0x7F:
            out.append(chr(b))
        else:
            out.append("\\x%02x" % b)
    return "".join(out)


def safe_line(line: bytes) -> str:
    return escape_text(line.decode("utf-8", "replace"))


# --------------------------------------------------------------------------
# Bodies

def classify_body(body: bytes) -> Tuple[str, Any]:
    """("empty"|"json"|"text"|"binary", value) for a job body."""
    if not body:
        return "empty", ""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return "binary", body
    controls = len(_CONTROL.findall(text.replace("\r\n", "\n")))
    if "\x00" in text or controls > max(2, len(text) // 10):
        return "binary", body
    stripped = text.strip()
    if stripped[:1] in ("{", "[") or (stripped[:1] == '"' and stripped[-1:] == '"'):
        try:
            return "json", json.loads(text)
        except ValueError:
            pass
    return "text", text


_JSON_TOKEN = re.compile(r'("(?:[^"\\]|\\.)*")(\s*:)?|(-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)|(true|false|null)')


def _json_fragments(text: str) -> Fragments:
    out: Fragments = []
    pos = 0
    for m in _JSON_TOKEN.finditer(text):
        if m.start() > pos:
            out.append(("class:json.punct", text[pos:m.start()]))
        if m.group(1):
            style = "class:json.key" if m.group(2) else "class:json.string"
            out.append((style, escape_text(m.group(1))))
            if m.group(2):
                out.append(("class:json.punct", m.group(2)))
        elif m.group(3):
            out.append(("class:json.number", m.group(3)))
        else:
            out.append(("class:json.literal", m.group(4)))
        pos = m.end()
    if pos < len(text):
        out.append(("class:json.punct", text[pos:]))
    return out


def render_body(body: bytes, *, pretty_json: bool = True, limit: int = 0) -> Fragments:
    """A job body with a one-line header saying its size and kind."""
    kind, value = classify_body(body)
    size = counted(len(body), "byte")
    shown = body
    cut = 0
    if limit and len(body) > limit and kind != "json":
        shown, cut = body[:limit], len(body) - limit
        kind, value = classify_body(shown) if kind != "binary" else ("binary", shown)
        if kind == "json":
            kind, value = "text", shown.decode("utf-8", "replace")
    frags: Fragments = []
    if kind == "empty":
        return [("class:body.header", "(empty body)\n")]
    if kind == "json" and pretty_json:
        frags.append(("class:body.header", f"({size}, JSON)\n"))
        frags += _json_fragments(json.dumps(value, indent=2, ensure_ascii=False))
        frags.append(("", "\n"))
    elif kind in ("json", "text"):
        label = "JSON" if kind == "json" else "text"
        text = body.decode("utf-8") if kind == "json" else value
        frags.append(("class:body.header", f"({size}, {label})\n"))
        frags.append(("class:body", escape_text(text)))
        if not text.endswith("\n"):
            frags.append(("", "\n"))
    else:
        frags.append(("class:body.header", f"({size}, binary, escaped)\n"))
        text = escape_bytes(shown)
        frags.append(("class:body.binary", text))
        if not text.endswith("\n"):
            frags.append(("", "\n"))
    if cut:
        frags.append(("class:body.header", f"... {counted(cut, 'more byte')} not shown\n"))
    return frags


# --------------------------------------------------------------------------
# Tables and lists

def render_table(stats: Dict[str, Any], *, title: str = "") -> Fragments:
    """``key   value`` rows with the keys padded to one width; the values,
    numbers and words alike, start in one column."""
    frags: Fragments = []
    if title:
        frags.append(("class:table.title", title + "\n"))
    if not stats:
        return frags + [("class:body.header", "(empty)\n")]
    width = max(len(k) for k in stats)
    for key, value in stats.items():
        text = _fmt(value)
        frags.append(("class:table.key", escape_text(key.ljust(width))))
        frags.append(("", "  "))
        frags.append(("class:table.value", escape_text(text) + "\n"))
    return frags


def _fmt(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def render_list(names: Sequence[str], *, use: str = "", watch: Sequence[str] = ()) -> Fragments:
    frags: Fragments = []
    if not names:
        return [("class:body.header", "(none)\n")]
    for name in names:
        marks = []
        if name == use:
            marks.append("using")
        if name in watch:
            marks.append("watching")
        frags.append(("class:table.value", "- " + escape_text(name)))
        if marks:
            frags.append(("class:reply.meaning", "  (" + ", ".join(marks) + ")"))
        frags.append(("", "\n"))
    return frags


#: A table fitted to a terminal cuts its first column no narrower than this.
MIN_FIRST_COLUMN = 16


def render_columns(headers: Sequence[str], rows: Sequence[Sequence[Any]], *,
                   align_left: int = 1, width: int = 0) -> List[str]:
    """A plain aligned table (for stalk top); the first ``align_left`` columns
    are left-aligned, the rest right-aligned.

    With ``width`` (a terminal's columns) no line is wider: the first
    column's long values are cut (ending in ``…``), down to
    :data:`MIN_FIRST_COLUMN` characters at most, then the columns that still do not fit are left out from the
    right, so no row wraps."""
    cells = [[escape_text(str(h)) for h in headers]] + [[escape_text(_fmt(c)) for c in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    keep = len(headers)
    if width > 0:
        rest = sum(widths[1:]) + 2 * (len(widths) - 1)
        widths[0] = max(min(widths[0], MIN_FIRST_COLUMN), min(widths[0], width - rest))
        while keep > 1 and sum(widths[:keep]) + 2 * (keep - 1) > width:
            keep -= 1
    lines = []
    for row in cells:
        parts = [_cell(c, widths[i], i < align_left) for i, c in enumerate(row[:keep])]
        lines.append("  ".join(parts).rstrip())
    return lines


def _cell(text: str, width: int, left: bool) -> str:
    if len(text) > width:
        text = text[:max(0, width - 1)] + "\u2026"
    return text.ljust(width) if left else text.rjust(width)


# --------------------------------------------------------------------------
# Whole replies

def render_reply(reply: Reply, *, pretty_json: bool = True, body_limit: int = 0,
                 use: str = "", watch: Sequence[str] = ()) -> Fragments:
    """How the interactive shell shows a reply."""
    command = reply.command or None
    ok = reply.ok
    frags: Fragments = [("class:reply.ok" if ok else "class:reply.error", safe_line(reply.line))]
    word = reply.word
    spec = command_spec(command) if command else None
    if not reply.expected:
        frags.append(("class:reply.meaning", f"  (not a reply {command} can get)"))
    elif not ok and word == "UNKNOWN_COMMAND" and spec is not None and spec.extension:
        frags.append(("class:reply.meaning", "  (this server does not serve this extension "
                      "verb: beanstalkd, or twisted-stalk without --extensions)"))
    elif not ok:
        text = meaning(word)
        if text:
            frags.append(("class:reply.meaning", f"  ({text})"))
    frags.append(("", "\n"))
    if reply.body is None:
        return frags
    if word == "OK":
        kind = data_kind(reply) or _look(reply.body)
        if kind == "mapping":
            frags += render_table(stats_of(reply))
        elif kind in ("ids", "names"):  # job ids or verb names: no tube marks
            frags += render_list(_names(reply))
        elif kind == "tubes":
            frags += render_list(_names(reply), use=use, watch=watch)
        else:
            frags += render_body(reply.body, pretty_json=pretty_json, limit=body_limit)
        return frags
    return frags + render_body(reply.body, pretty_json=pretty_json, limit=body_limit)


def stats_of(reply: Reply) -> Dict[str, Any]:
    """A stats body as a dict: the reply's value when its command says it is
    one (decoded by the shared reply code, which keeps the server id a
    string), else parsed from the look of it."""
    if isinstance(reply.value, dict):
        return reply.value
    return parse_mapping(reply.body or b"")


def _names(reply: Reply) -> List[str]:
    """A list body's items as text."""
    if data_kind(reply):
        return [str(item) for item in reply.value]  # type: ignore[union-attr]
    return parse_sequence(reply.body or b"")


def _look(body: bytes) -> str:
    """The kind of an OK data block no command describes, by its look."""
    if _looks_mapping(body):
        return "mapping"
    return "tubes" if _looks_sequence(body) else ""


def _looks_mapping(body: bytes) -> bool:
    lines = [ln for ln in body.splitlines() if ln and ln != b"---"]
    return bool(lines) and all(b": " in ln or ln.endswith(b":") for ln in lines)


def _looks_sequence(body: bytes) -> bool:
    lines = [ln for ln in body.splitlines() if ln and ln != b"---"]
    return all(ln.startswith(b"- ") for ln in lines)


def render_wire(direction: str, data: bytes) -> Fragments:
    arrow = ">> " if direction == "send" else "<< "
    style = "class:wire.send" if direction == "send" else "class:wire.recv"
    out: Fragments = []
    text = escape_bytes(data).rstrip("\n")
    for i, piece in enumerate(text.split("\n")):
        out.append((style, (arrow if i == 0 else "   ") + piece + "\n"))
    return out


# --------------------------------------------------------------------------
# Machine-readable output

def reply_data(reply: Reply) -> Dict[str, Any]:
    """A reply as a dict for --json / --yaml."""
    data: Dict[str, Any] = {"reply": reply.word, "line": reply.line.decode("utf-8", "replace"),
                            "ok": reply.ok}
    if reply.command:
        data["command"] = reply.command
    if reply.job_id is not None:
        data["id"] = reply.job_id
    if reply.number is not None:
        data["count"] = reply.number
    if reply.word == "USING" and reply.tube is not None:
        data["tube"] = reply.tube
    if reply.body is not None:
        data["bytes"] = len(reply.body)
        kind = data_kind(reply) or _look(reply.body) if reply.word == "OK" else ""
        if kind == "mapping":
            data["stats"] = stats_of(reply)
        elif kind == "ids":
            data["ids"] = reply.value
        elif kind == "names":
            data[reply.command] = _names(reply)
        elif kind == "tubes":
            data["tubes"] = _names(reply)
        else:
            data.update(body_data(reply.body))
    return data


def body_data(body: bytes) -> Dict[str, Any]:
    """``{"body": text}`` when the body is UTF-8, else ``{"body_base64": ...}``."""
    try:
        return {"body": body.decode("utf-8")}
    except UnicodeDecodeError:
        return {"body_base64": base64.b64encode(body).decode("ascii")}


def raw_bytes(reply: Reply, *, body_only: bool = False, exact: bool = False) -> bytes:
    """The reply for a pipe: the line; for OK the YAML as sent; for jobs the
    line then the body verbatim, each ended by LF.  ``body_only`` prints just
    the body bytes; ``exact`` (``--raw``) the bytes the server sent: the line
    and the data block, each with its CRLF."""
    if exact and not body_only:
        return reply.line + b"\r\n" + (b"" if reply.body is None else reply.body + b"\r\n")
    if reply.body is None:
        return b"" if body_only else reply.line + b"\n"
    if body_only:
        return reply.body
    if reply.word == "OK":
        return reply.body if reply.body.endswith(b"\n") else reply.body + b"\n"
    return reply.line + b"\n" + reply.body + b"\n"


def dump_yaml(data: Any) -> str:
    import yaml
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True, default_flow_style=False)


def dump_json(data: Any) -> str:
    return json.dumps(data, ensure_ascii=False)


def first_line_error(message: str) -> Fragments:
    return [("class:error", message + "\n")]


__all__ = [
    "Fragments", "body_data", "classify_body", "data_kind", "dump_json", "dump_yaml",
    "escape_bytes", "escape_text", "meaning", "plain", "raw_bytes", "render_body", "render_columns", "render_list",
    "render_reply", "render_table", "render_wire", "reply_data", "safe_line",
]
