# -*- test-case-name: tests.test_shell_cli -*-
"""``stalk put``: put jobs, their bodies from the arguments, files or stdin."""
from __future__ import annotations

import os
import sys
from typing import List, Sequence, Tuple

from twisted_stalk.protocol.commands import command_spec

from ..conn import Connection
from ..errors import EXIT_OK, EXIT_REPLY, EXIT_USAGE, ToolError
from ..output import Output, isatty
from ..request import DEFAULT_PUT, drop_final_newline
from .args import check_tube, int_arg, parser
from .queries import use


def run(conn: Connection, argv: Sequence[str], out: Output, stdin=None,
        defaults: Tuple[int, int, int] = DEFAULT_PUT) -> int:
    p = parser("put", "Put a job: the body from the arguments, files, or stdin.")
    p.add_argument("body", nargs="*", help="the body (the arguments joined by spaces)")
    p.add_argument("-t", "--tube", help="tube to put into (default: default)")
    p.add_argument("-p", "--pri", default=str(defaults[0]), help=f"priority (default {defaults[0]})")
    p.add_argument("-d", "--delay", default=str(defaults[1]), help=f"delay in seconds (default {defaults[1]})")
    p.add_argument("--ttr", default=str(defaults[2]), help=f"time to run in seconds (default {defaults[2]})")
    p.add_argument("-f", "--file", action="append", default=[],
                   help="read a body from FILE (repeatable: one job per file; - for stdin)")
    p.add_argument("-l", "--lines", action="store_true", help="read stdin: one job per line")
    p.add_argument("-x", "--exact", action="store_true",
                   help="keep a final newline of a body read from stdin or a file (by default "
                   "one is dropped from text, as echo and editors add it)")
    a = p.parse_args(argv)
    if a.body and "--" not in argv:
        refuse_command_line(a.body)
    keep = (lambda data: data) if a.exact else drop_final_newline
    pri = int_arg(a.pri, "--pri")
    delay = int_arg(a.delay, "--delay")
    ttr = int_arg(a.ttr, "--ttr")
    stdin = stdin if stdin is not None else sys.stdin.buffer
    bodies: List[bytes] = []
    if a.body:
        bodies.append(" ".join(a.body).encode("utf-8"))
    for path in a.file:
        if path == "-":
            bodies.append(keep(stdin.read()))
            continue
        try:
            with open(os.path.expanduser(path), "rb") as f:
                bodies.append(keep(f.read()))
        except OSError as e:
            raise ToolError(f"cannot read {path}: {e.strerror or e}", EXIT_USAGE)
    if a.lines:
        for line in stdin:
            line = line.rstrip(b"\r\n") if line.endswith(b"\r\n") else line.rstrip(b"\n")
            if line:
                bodies.append(line)
    elif not a.body and not a.file:
        if isatty(stdin):
            out.note("reading the body from stdin; end it with Ctrl-D")
        bodies.append(keep(stdin.read()))
    if a.tube:
        use(conn, check_tube(a.tube))
    status = EXIT_OK
    for body in bodies:
        reply = conn.command("put", pri, delay, ttr, body=body)
        out.reply(reply)
        if not reply.ok:
            status = EXIT_REPLY
            break
    return status


def refuse_command_line(words: Sequence[str]) -> None:
    """A body that looks like a command line (``stalk put 0 0 60 5``, ``stalk
    put put ...``) is most likely not meant as one: refuse it, saying how to
    put it on purpose (after ``--``) and how to give the numbers."""
    numbers = 3 <= len(words) <= 4 and all(w.isdigit() for w in words)
    if not numbers and command_spec(words[0]) is None:
        return
    body = " ".join(words)
    raise ToolError(
        f"the body {body!r} looks like a command line, not a job: the put tool "
        "takes the body as its arguments and the numbers as options "
        "(stalk put -p PRI -d DELAY --ttr TTR BODY; stdin or -f FILE for a body); "
        f"to put that body anyway: stalk put -- {body}", EXIT_USAGE)
