# -*- test-case-name: tests.test_shell_cli -*-
"""``stalk stats [TUBE]``: the server's statistics, or a tube's."""
from __future__ import annotations

from typing import Sequence

from ..conn import Connection
from ..errors import EXIT_OK, EXIT_REPLY
from ..output import Output
from .args import check_tube, parser


def run(conn: Connection, argv: Sequence[str], out: Output) -> int:
    p = parser("stats", "Server statistics, or a tube's with TUBE.")
    p.add_argument("tube", nargs="?", help="show this tube's statistics")
    a = p.parse_args(argv)
    if a.tube:
        reply = conn.command("stats-tube", check_tube(a.tube))
    else:
        reply = conn.command("stats")
    out.reply(reply)
    return EXIT_OK if reply.ok else EXIT_REPLY
