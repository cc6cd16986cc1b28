# -*- test-case-name: tests.test_core -*-
"""The command counters' names, as constants generated from the command table.

An engine counts each command in ``cmd_counts``, keyed by the command's name
(``stats`` lists them as ``cmd-<name>``, in the table's order).  The keys are
written through these constants, one per counted command of
``protocol.commands.COMMANDS``, named after it in capitals with ``_`` for
``-`` (``put`` is :data:`PUT`, ``reserve-with-timeout`` is
``RESERVE_WITH_TIMEOUT``), whose value is the key: ``cmd_counts[PUT] += 1``.
A misspelt name fails when its module is imported, not when the command
first runs; a command added to the table gets its constant here at once.
``tests/test_core.py`` checks that the library counts through them only.
"""
from __future__ import annotations

TYPE_CHECKING = False  # typing costs stalkd's first reply (server/_early.py)
if TYPE_CHECKING:  # pragma: no cover
    from typing import Dict

from ..protocol.commands import COUNTED_COMMANDS


def constant_name(command: str) -> str:
    """The constant that names ``command``'s counter: ``list-tubes`` -> ``LIST_TUBES``."""
    return command.upper().replace("-", "_")


#: Every counter's constant name and key.
COUNTERS: Dict[str, str] = {constant_name(name): name for name in COUNTED_COMMANDS}
globals().update(COUNTERS)

__all__ = ["COUNTERS", "constant_name", *COUNTERS]  # pyright: ignore
