# -*- test-case-name: tests.test_ops_admin -*-
"""Extension verbs for operators (``--extensions``; off by default).

They are new command names only, described in the command table
(:data:`~twisted_stalk.protocol.commands.EXTENSION_COMMANDS`) and looked up
on the server's UNKNOWN_COMMAND branch (see
``BeanstalkServerProtocol.lineReceived``), so stock commands and their
replies never change and, with extensions off, these names answer
``UNKNOWN_COMMAND`` exactly as beanstalkd does.  None of the names starts
with a stock command's prefix (beanstalkd matches some words by prefix).

``list-jobs <tube> <state> <limit>``
    ``OK <bytes>`` and a YAML list of up to ``limit`` job ids of the tube in
    ``ready``/``delayed``/``buried``/``reserved`` state, in the order the
    engine takes them, without reserving anything.  ``NOT_FOUND`` if the tube
    does not exist.
``flush-tube <tube> [<state>]``
    Deletes the tube's jobs in ``state`` (without one: ready, delayed and
    buried, never jobs a worker holds) and answers ``FLUSHED <count>``.  Each
    deletion goes through the engine's journal (the binlog) as a delete, so a
    restart does not bring them back.  ``NOT_FOUND`` if the tube does not exist.
``capabilities``
    ``OK <bytes>`` and a YAML list of the extension verbs this server serves.

Malformed arguments answer ``BAD_FORMAT``; a binlog that cannot write answers
``INTERNAL_ERROR`` (as stock commands do) unless some jobs were already flushed.
The engine serves ``list-jobs`` and ``flush-tube`` (``MemoryEngine.list_jobs``,
``flush_tube``); this module only switches them on and counts them.
"""
from __future__ import annotations

from typing import Dict, List

from ..protocol.commands import EXTENSION_COMMANDS

#: The extension verbs, in the order ``capabilities`` lists them.
VERBS = tuple(spec.name for spec in EXTENSION_COMMANDS)


class Extensions:
    """The extension verbs of one server, with a count of each."""

    def __init__(self) -> None:
        self.counts: Dict[str, int] = dict.fromkeys(VERBS, 0)
        #: What ``capabilities`` lists.
        self.verbs: List[bytes] = [verb.encode() for verb in VERBS]

    def count(self, verb: str) -> None:
        self.counts[verb] += 1


def enable(factory) -> Extensions:
    """Turn the extension verbs on for ``factory``'s connections."""
    ext = factory.extensions = Extensions()
    return ext


def verbs() -> List[str]:
    return list(VERBS)


__all__ = ["Extensions", "VERBS", "enable", "verbs"]
