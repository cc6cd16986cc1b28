# -*- test-case-name: tests.test_shell_cli -*-
"""The shell's exit statuses and errors.

Exit status: 0 success, 1 an error reply (NOT_FOUND, TIMED_OUT ...), 2 bad
usage or a malformed command, 3 the server could not be reached or the
connection broke, 130 interrupted.
"""
from __future__ import annotations

from typing import List

EXIT_OK, EXIT_REPLY, EXIT_USAGE, EXIT_CONNECTION, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


class UsageError(Exception):
    """Bad command-line usage (exit status 2); str() is the explanation."""


class StalkError(Exception):
    """Base of the shell's connection errors; str() is a one-line message."""


class ConnectionFailed(StalkError):
    """The server could not be reached."""


class ConnectionBroken(StalkError):
    """The connection broke (or the server stopped answering) mid-request."""


class InterruptedRequest(Exception):
    """Ctrl-C while waiting for a reply: the connection was dropped.

    ``returned`` lists the ids of jobs the old connection had reserved, which
    the server has put back to ready; ``restored`` tells whether a new
    connection was made.
    """

    def __init__(self, returned: List[int], restored: bool, error: str = "") -> None:
        super().__init__("interrupted")
        self.returned = returned
        self.restored = restored
        self.error = error


def oserror_text(e: BaseException) -> str:
    """An OSError (or SSLError) in a few words: its strerror if it has one."""
    if isinstance(e, OSError) and e.strerror:
        return e.strerror
    return str(e) or e.__class__.__name__


class ToolError(Exception):
    """A tool's failure with a one-line message and an exit status."""

    def __init__(self, message: str, status: int = EXIT_REPLY) -> None:
        super().__init__(message)
        self.status = status


__all__ = [
    "EXIT_CONNECTION", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_REPLY", "EXIT_USAGE",
    "ConnectionBroken", "ConnectionFailed", "InterruptedRequest", "StalkError", "ToolError",
    "UsageError", "oserror_text",
]
