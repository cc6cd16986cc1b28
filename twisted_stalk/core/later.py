# -*- test-case-name: tests.test_engine_contract,tests.test_pg_units -*-
"""Answers given to a callback: the hot commands of an engine that answers later.

A wire front end's put, reserve and delete are its hottest commands, and on
an engine that answers them later (one batch statement for many clients,
``Engine.pipelined_puts``) a Deferred per command, with the callbacks that
engine and front end chain on it, cost about an eighth of a node's time in
the closed loop (docs/performance.md).  So such an engine also takes those
commands with a plain callback (``Engine.put_then``, ``Engine.reserve_then``,
``Engine.delete_then``):

* the call returns the answer when it is known at once, and then never
  calls ``answer``;
* or it returns :data:`LATER`, and calls ``answer(result)`` exactly once,
  with the same answer the plain command would have given (a failure is
  answered as the plain command's Deferred would be rendered: the engine
  logs it and answers INTERNAL_ERROR).

The plain commands stay: :func:`as_deferred` makes one from the callback
form, and :func:`then_from_result` the callback form from a plain command
(what :class:`~twisted_stalk.core.sessions.SessionRules` gives every engine
by default).  The contract suite checks that both forms answer alike.
"""
from __future__ import annotations

TYPE_CHECKING = False  # typing costs stalkd's first reply (server/_early.py)
if TYPE_CHECKING:  # pragma: no cover
    from typing import Any, Callable

from .outcomes import INTERNAL_ERROR


class _Later:
    """The one value meaning "the answer goes to the callback"."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "LATER"


#: Returned by a ``*_then`` command that will call its ``answer`` later.
LATER: Any = _Later()


def as_deferred(start: Callable[[Callable[[Any], None]], Any]) -> Any:
    """The plain command from its callback form: ``start(answer)``'s answer
    if it gave one at once, else a Deferred that fires with it."""
    from twisted.internet.defer import Deferred  # the core imports no Twisted
    d = Deferred()
    result = start(d.callback)
    return d if result is LATER else result


def then_from_result(result: Any, answer: Callable[[Any], None]) -> Any:
    """The callback form from a plain command's ``result``: the result itself
    if it is not a Deferred; else :data:`LATER`, and the Deferred's outcome
    goes to ``answer`` (a failure is logged and answered INTERNAL_ERROR, as a
    wire front end renders a failed Deferred)."""
    if not hasattr(result, "addCallbacks"):  # not a Deferred
        return result
    result.addCallbacks(answer, lambda failure: answer(_internal_error(failure)))
    return LATER


def _internal_error(failure: Any) -> Any:
    from twisted.logger import Logger
    Logger(namespace="twisted_stalk.protocol").failure("engine failed a command", failure)
    return INTERNAL_ERROR


__all__ = ["LATER", "as_deferred", "then_from_result"]
