# -*- test-case-name: tests.test_shell_cli -*-
"""Command-line mode: ``stalk CMD ARGS`` and ``stalk -`` (commands from
stdin), each reply printed by an :class:`~.output.Output`."""
from __future__ import annotations

import sys
import time
from typing import List, Tuple

from twisted_stalk.protocol import valid_tube_name

from .conn import Connection
from .errors import EXIT_OK, EXIT_REPLY, EXIT_USAGE, UsageError
from .output import Output
from .render import plain, render_wire
from .request import InputError, Request, build_request
from .script import ScriptReader
from .tools.queries import expect


def stderr_wire(direction: str, data: bytes) -> None:
    """The ``--wire`` hook of command-line mode: the bytes, on stderr."""
    sys.stderr.write(plain(render_wire(direction, data)))
    sys.stderr.flush()


def select_tube(conn: Connection, tube: str) -> None:
    """``--tube``: use and watch ``tube`` (only it)."""
    if not valid_tube_name(tube.encode("ascii", "replace")):
        raise UsageError(f"bad tube name {tube!r}")
    expect(conn.command("use", tube))
    expect(conn.command("watch", tube))
    if tube != "default":
        expect(conn.command("ignore", "default"))


def execute(conn: Connection, out: Output, req: Request) -> bool:
    """Send one request and print the reply to each command its bytes
    complete (and any further replies after raw bytes); True when all
    succeeded.  Bytes that leave the server waiting for the rest of a
    command are said so on stderr, and count as a failure."""
    replies = conn.exchange(req.wire())
    if req.raw:
        replies += conn.drain()
    for reply in replies:
        out.reply(reply)
    waiting = conn.framing.describe()
    if waiting:
        out.note(f"stalk: {waiting}")
    return all(reply.ok for reply in replies) and not waiting


def run_one(conn: Connection, out: Output, command: List[str], repeat: int, interval: float,
            defaults: Tuple[int, int, int]) -> int:
    """``stalk CMD ARGS``, ``repeat`` times (0: until Ctrl-C)."""
    text = " ".join(command)
    try:
        req = build_request(text, put_defaults=defaults)
    except InputError as e:
        raise UsageError(e.message)
    if req is None:
        return EXIT_OK
    if req.meta:
        raise UsageError(f"{req.name} only works in the interactive shell")
    if req.name == "put" and not req.raw:
        raise UsageError("use the put tool: stalk put [--tube T --pri P --delay D --ttr T] BODY")
    status = EXIT_OK
    n = 0
    while True:
        n += 1
        if not execute(conn, out, req):
            status = EXIT_REPLY
        if repeat and n >= repeat:
            return status
        time.sleep(max(0.0, interval))


def run_script(conn: Connection, out: Output, keep_going: bool,
               defaults: Tuple[int, int, int]) -> int:
    """Commands from stdin, one per line (put bodies as in the shell)."""
    status = EXIT_OK
    for lineno, line, body in ScriptReader(sys.stdin.buffer):
        try:
            req = build_request(line, body=body, put_defaults=defaults)
        except InputError as e:
            sys.stderr.write(f"stalk: stdin line {lineno}: {e.message}\n")
            if not keep_going:
                return EXIT_USAGE
            status = EXIT_USAGE
            continue
        if req is None:
            continue
        if req.meta:
            if req.name == "exit":
                break
            if req.name in ("top", "tail", "flush", "move"):  # (a terminal's, or stalk TOOL)
                sys.stderr.write(f"stalk: stdin line {lineno}: {req.name} runs in the "
                                 f"interactive shell, or as `stalk {req.name}`\n")
                if not keep_going:
                    return EXIT_USAGE
                status = EXIT_USAGE
                continue
            if req.name == "help":
                from .help import help_text
                out.fragments(help_text(req.text))
            elif req.name == "\\wire":
                conn.wire = None if (req.text == "off" or (not req.text and conn.wire)) else stderr_wire
            continue
        if req.name == "quit" and not req.raw:
            conn.send(req.wire())
            break
        if not execute(conn, out, req):
            if not keep_going:
                return EXIT_REPLY
            status = status or EXIT_REPLY
    return status


__all__ = ["execute", "run_one", "run_script", "select_tube", "stderr_wire"]
