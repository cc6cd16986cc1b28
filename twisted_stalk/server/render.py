# -*- test-case-name: tests.test_engine -*-
"""Engine outcomes as reply bytes, derived from the command table.

An outcome constant (``NOT_FOUND`` ...) becomes its reply word's line; data
becomes the command's success reply, whose shape the table gives: the
fields of its first reply pattern (``INSERTED <id>``, ``USING <tube>``,
``WATCHING <count>``, ``RESERVED <id> <bytes>`` + body) and, for
``OK <bytes>``, what its data block holds (``reply_body``: stats pairs as
YAML, a sequence of names, a sequence of ids).
"""
from __future__ import annotations

TYPE_CHECKING = False  # typing costs stalkd's first reply (server/_early.py)
if TYPE_CHECKING:  # pragma: no cover
    from typing import Any, Callable, Dict

from ..core.outcomes import OUTCOMES, WAITING, Outcome
from ..protocol import yaml
from ..protocol.commands import COMMANDS, EXTENSION_COMMANDS, CommandSpec

#: The reply line of each outcome constant (WAITING has none).
LINES: Dict[Outcome, bytes] = {
    o: o.name.encode("ascii") + b"\r\n" for o in OUTCOMES.values() if o is not WAITING}


def job_reply(word: bytes, job: Any) -> bytes:
    """``<word> <id> <bytes>\\r\\n<body>\\r\\n`` (the job's body holds its CRLF)."""
    body = job.body
    return b"%s %d %d\r\n%s" % (word, job.id, len(body) - 2, body)


def _ok_sequence(names: Any) -> bytes:
    return yaml.ok_reply(yaml.sequence(names))


def _ok_ids(ids: Any) -> bytes:
    return yaml.ok_reply(yaml.sequence([b"%d" % i for i in ids]))


def _success(spec: CommandSpec, quoted: bool) -> Callable[[Any], bytes]:
    word, *fields = spec.replies[0].split(" ") if spec.replies else ("",)
    head = word.encode("ascii")
    if word == "OK":
        if spec.reply_body == "mapping":
            return lambda pairs: yaml.ok_reply(yaml.render_mapping(pairs, quoted))
        return _ok_ids if spec.reply_body == "ids" else _ok_sequence
    if fields == ["<id>", "<bytes>"]:
        return lambda job: job_reply(head, job)
    if fields:  # one field: <id>, <count> (ints) or <tube> (bytes)
        pattern = head + (b" %s\r\n" if fields == ["<tube>"] else b" %d\r\n")
        return lambda value: pattern % value
    return lambda value: LINES[value]


def renderer(spec: CommandSpec, quoted: bool = True) -> Callable[[Any], bytes]:
    """A function from ``spec``'s outcomes to their reply bytes.  ``quoted``:
    stats string values in double quotes (beanstalkd 1.13) or bare (1.12)."""
    success = _success(spec, quoted)
    lines = LINES

    def render(outcome: Any) -> bytes:
        line = lines.get(outcome) if outcome.__class__ is Outcome else None
        return success(outcome) if line is None else line
    return render


def render_table(quoted: bool = True) -> Dict[str, Callable[[Any], bytes]]:
    """A renderer for every stock command and extension verb, by name."""
    return {spec.name: renderer(spec, quoted) for spec in COMMANDS + EXTENSION_COMMANDS}


__all__ = ["LINES", "job_reply", "render_table", "renderer"]
