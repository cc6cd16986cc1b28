"""The beanstalk wire codec: the command table and its encoder, argument
parsing, reply decoding, the reply reader and the peek-and-delete flush.

Pure Python with no Twisted import and no I/O, shared by the server, the client
and the shell.
"""
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
from .flush import PeekDeleteFlush, flush_budgets
from .reader import ReplyReader

__all__ = [
    "BY_NAME", "COMMANDS", "CommandError", "CommandSpec", "command_format", "encode_command",
    "parse_args", "parse_command", "valid_tube_name", "validate_command_args",
    "PeekDeleteFlush", "flush_budgets", "ReplyReader",
]
