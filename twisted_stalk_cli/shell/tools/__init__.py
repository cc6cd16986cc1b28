# -*- test-case-name: tests.test_shell_cli -*-
"""``stalk``'s tools, one module each: ``stalk TOOL [options]``.

Each tool is a function ``run(conn, argv, out)`` that takes its own arguments
(``stalk TOOL --help``), a connected :class:`~..conn.Connection` and an
:class:`~..output.Output`, and returns the exit status.  None of them
reserves a job it does not move, so ``tail`` and ``top`` leave every job
counter as it was.

``flush`` and ``move`` ask the server for its extension verbs
(``capabilities``): with ``flush-tube`` a flush is one command per state, with
``list-jobs`` a move finds its jobs without peeking at their bodies; on a stock
server they peek and delete (or move) job by job.
"""
from __future__ import annotations

from typing import Callable, Dict

from ..toolnames import TOOL_NAMES
from . import flush, kick, move, put, stats, tail, top  # noqa: F401  (TOOL_NAMES' modules)

#: The tools by name, in the order ``stalk --help`` lists them.
TOOLS: Dict[str, Callable[..., int]] = {name: globals()[name].run for name in TOOL_NAMES}

__all__ = ["TOOLS"]
