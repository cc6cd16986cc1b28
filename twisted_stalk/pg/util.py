# -*- test-case-name: tests.test_pg_wire -*-
"""Small helpers shared by the PostgreSQL engine's modules."""
from __future__ import annotations

from typing import Any, List

from twisted.internet import defer


def gather(deferreds: List[defer.Deferred]) -> defer.Deferred:
    """``gatherResults`` as a plain Deferred: the wire front end recognises an
    engine's later answer by its class (``Deferred``, not a subclass)."""
    d: defer.Deferred = defer.Deferred()
    defer.gatherResults(deferreds, consumeErrors=True).addBoth(d.callback)
    return d


def unwrap(failure: Any) -> Any:
    """The first failure inside a gather's FirstError (or the failure itself)."""
    sub = getattr(failure.value, "subFailure", None)
    return sub if sub is not None else failure


__all__ = ["gather", "unwrap"]
