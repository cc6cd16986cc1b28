"""The beanstalk wire codec: command table, argument parsing, reply shapes.

Pure Python with no Twisted import, shared by the server, the client and the
shell.
"""
from .commands import (
    BY_NAME,
    COMMANDS,
    CommandError,
    CommandSpec,
    encode_command,
    parse_args,
    parse_command,
    valid_tube_name,
    validate_command_args,
)

__all__ = [
    "BY_NAME", "COMMANDS", "CommandError", "CommandSpec", "encode_command",
    "parse_args", "parse_command", "valid_tube_name", "validate_command_args",
]
