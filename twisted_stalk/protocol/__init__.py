# -*- test-case-name: tests.test_protocol_reader -*-
"""The beanstalk wire codec: the command table and its encoder, argument
parsing, reply decoding, the reply reader, the peek-and-delete flush and the
framing rules (:mod:`.framing`).

Pure Python with no Twisted import and no I/O, shared by the server, the client
and the shell.  The client-side pieces (:class:`~.reader.ReplyReader`,
:class:`~.flush.PeekDeleteFlush`, :func:`~.flush.flush_budgets`) are imported
when first asked for, so the server does not pay for them.
"""
from __future__ import annotations

TYPE_CHECKING = False  # typing costs stalkd's first reply (server/_early.py)
if TYPE_CHECKING:  # pragma: no cover
    from typing import Any

from .commands import (
    BY_NAME,
    COMMANDS,
    CommandError,
    CommandSpec,
    command_format,
    encode_command,
    parse_args,
    parse_command,
    valid_tube_name,
    validate_command_args,
)

_LAZY = {"ReplyReader": "reader", "PeekDeleteFlush": "flush", "flush_budgets": "flush"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module
    return getattr(import_module(f".{module}", __name__), name)


__all__ = [
    "BY_NAME", "COMMANDS", "CommandError", "CommandSpec", "command_format", "encode_command",
    "parse_args", "parse_command", "valid_tube_name", "validate_command_args",
    "PeekDeleteFlush", "flush_budgets", "ReplyReader",
]
