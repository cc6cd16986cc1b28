# -*- test-case-name: tests.test_shell_cli -*-
"""The tools' command-line arguments: a parser that raises instead of
exiting, and the checks their arguments share."""
from __future__ import annotations

import argparse
from typing import Tuple

from twisted_stalk.protocol import valid_tube_name
from twisted_stalk.protocol.constants import U32_MAX, UNRESERVED_STATES

from ..errors import EXIT_USAGE, ToolError


class Parser(argparse.ArgumentParser):
    """argparse that raises instead of exiting (the caller prints one line)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise ToolError(f"{self.prog}: {message} (see {self.prog} --help)", EXIT_USAGE)


def parser(name: str, description: str) -> Parser:
    """The parser of ``stalk NAME``."""
    return Parser(prog=f"stalk {name}", description=description)


def add_plan_options(p: Parser, done: str) -> None:
    """``--state``, ``--yes`` and ``--dry-run``: the options of the tools that
    change jobs (``done``: what ``--dry-run`` shows, "deleted", "moved")."""
    p.add_argument("-s", "--state", default="all", help="ready,delayed,buried or all (default all)")
    p.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")
    p.add_argument("--dry-run", action="store_true", help=f"only show what would be {done}")


def int_arg(text: str, what: str, limit: int = U32_MAX) -> int:
    if not text.isdigit() or int(text) > limit:
        raise ToolError(f"{what} must be a whole number 0..{limit}", EXIT_USAGE)
    return int(text)


def check_tube(name: str) -> str:
    if not valid_tube_name(name.encode("ascii", "replace")):
        raise ToolError(f"bad tube name {name!r}: up to 200 of A-Z a-z 0-9 - + / ; . $ _ ( ), "
                        "not starting with -", EXIT_USAGE)
    return name


def parse_states(text: str) -> Tuple[str, ...]:
    """``--state``: a comma-separated list of unreserved states, or ``all``."""
    if text == "all":
        return UNRESERVED_STATES
    states = tuple(s.strip() for s in text.split(",") if s.strip())
    bad = [s for s in states if s not in UNRESERVED_STATES]
    if bad or not states:
        raise ToolError(f"--state takes a comma-separated list of ready, delayed, buried, or all "
                        f"(got {text!r}); reserved jobs are never touched", EXIT_USAGE)
    return states


__all__ = ["Parser", "add_plan_options", "check_tube", "int_arg", "parse_states", "parser"]
