# -*- test-case-name: tests.test_shell_cli -*-
"""``stalk kick [TUBE] [N]``: buried (or, if none, delayed) jobs back to ready."""
from __future__ import annotations

from typing import Sequence

from twisted_stalk.protocol.constants import U32_MAX

from ..conn import Connection
from ..errors import EXIT_OK, EXIT_REPLY
from ..output import Output
from .args import check_tube, int_arg, parser
from .queries import use


def run(conn: Connection, argv: Sequence[str], out: Output) -> int:
    p = parser("kick", "Kick buried (or, if none, delayed) jobs of TUBE back to ready.")
    p.add_argument("tube", nargs="?", default=None, help="the tube (default: the one from --tube, or default)")
    p.add_argument("bound", nargs="?", default=None, help="most jobs to kick (default: all)")
    a = p.parse_args(argv)
    tube, bound = a.tube, a.bound
    if tube is not None and bound is None and tube.isdigit():
        tube, bound = None, tube
    if tube is not None:
        use(conn, check_tube(tube))
    n = int_arg(bound, "the bound") if bound is not None else U32_MAX
    reply = conn.command("kick", n)
    out.reply(reply)
    return EXIT_OK if reply.ok else EXIT_REPLY
