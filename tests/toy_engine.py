"""A toy third engine: the in-memory rules, answering every command a turn
of the clock later, as an engine backed by a database answers.

It is what docs/architecture.md ("Adding a third engine") walks through: an
engine class implementing ``core.engine.Engine`` (here by deriving from the
in-memory one and handing its command answers out as Deferreds), an opener
``open_toy(url, settings)``, and an entry point naming it in the
``twisted_stalk.engines`` group (``toy = toy_engine:open_toy``), which
``tests/test_engine_toy.py`` installs as a package's metadata would.  The
wire protocol's tests use it too (tests/test_engine.py): replies stay in
order when answers come later.
"""
from __future__ import annotations

import functools
from typing import Any, Callable

from twisted.internet.defer import Deferred

from twisted_stalk.core.memory import MemoryEngine
from twisted_stalk.protocol.commands import COMMANDS, command_spec

#: The methods answering later: one per protocol command (``quit`` is the
#: front end's).  Session methods, ``reject_put`` and inspection answer at
#: once, as the seam requires.
LATER = {command_spec(spec.name).method for spec in COMMANDS} - {"quit"}


def _later(method: Callable[..., Any]) -> Callable[..., Deferred]:
    @functools.wraps(method)  # the same signature: the contract suite compares them
    def answer_later(self: "ToyEngine", *args: Any) -> Deferred:
        d: Deferred = Deferred()
        self.clock.callLater(0, lambda: d.callback(method(self, *args)))
        return d
    return answer_later


class ToyEngine(MemoryEngine):
    """The in-memory engine whose commands answer on a later turn of its clock."""

    __slots__ = ()


for _name in LATER:
    setattr(ToyEngine, _name, _later(getattr(MemoryEngine, _name)))


def open_toy(url: str, settings: Any) -> ToyEngine:
    """The ``toy:`` engine's opener (``twisted_stalk.engines.Opener``)."""
    return ToyEngine(settings.reactor, max_job_size=settings.max_job_size,
                     facts=settings.process_facts())
