# -*- test-case-name: tests.test_shell_cli -*-
"""What the tools ask the server, over the shell's blocking connection.

Each reply comes decoded (:class:`~twisted_stalk.protocol.replies.Reply`):
these helpers return its value, or raise :class:`~..errors.ToolError` for an
error reply the tool cannot go on after.
"""
from __future__ import annotations

from typing import Any, Dict, FrozenSet, List, Optional

from twisted_stalk.protocol.replies import Reply

from ..conn import Connection
from ..errors import ToolError


def expect(reply: Reply) -> Reply:
    """``reply`` if it is its command's success, else a :class:`ToolError`."""
    if not reply.ok:
        raise ToolError(f"{reply.command}: the server answered "
                        f"{reply.line.decode('utf-8', 'replace')}")
    return reply


def server_stats(conn: Connection) -> Dict[str, Any]:
    return expect(conn.command("stats")).value  # type: ignore[return-value]


def tube_stats(conn: Connection, tube: str) -> Optional[Dict[str, Any]]:
    """``stats-tube``; None when there is no such tube."""
    reply = conn.command("stats-tube", tube)
    if reply.word == "NOT_FOUND":
        return None
    return expect(reply).value  # type: ignore[return-value]


def job_stats(conn: Connection, job_id: int) -> Optional[Dict[str, Any]]:
    """``stats-job``; None when there is no such job."""
    reply = conn.command("stats-job", job_id)
    if reply.word == "NOT_FOUND":
        return None
    return expect(reply).value  # type: ignore[return-value]


def list_tubes(conn: Connection) -> List[str]:
    return expect(conn.command("list-tubes")).value  # type: ignore[return-value]


def use(conn: Connection, tube: str, verb: str = "use") -> None:
    """``use`` (or ``watch``) ``tube``; raises on any other reply."""
    expect(conn.command(verb, tube))


def capabilities(conn: Connection) -> FrozenSet[str]:
    """The extension verbs the server serves (``capabilities``); empty for a
    stock server, which answers UNKNOWN_COMMAND."""
    reply = conn.command("capabilities")
    return frozenset(reply.value) if reply.ok else frozenset()  # type: ignore[arg-type]


__all__ = ["capabilities", "expect", "job_stats", "list_tubes", "server_stats", "tube_stats",
           "use"]
