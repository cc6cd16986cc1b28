# -*- test-case-name: tests.test_pg_wire -*-
"""Small helpers shared by the PostgreSQL engine's modules."""
from __future__ import annotations

from typing import Any, List

from twisted.internet import defer

#: Job ids are bigints: a larger id (the protocol allows up to 2**64 - 1) names no job.
MAX_ID = 2**63 - 1


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


class Delegated:
    """A member of the engine that lives in one of its parts:
    ``engine.name`` is ``engine.<part>.name``.  Read on the class, it is the
    part's function (so the seam's signatures can be checked); read on an
    engine, the part's bound method, kept in the engine's ``__dict__`` at
    the first read, so later calls cost what a method's do."""

    def __init__(self, part: str, cls: type) -> None:
        self.part = part
        self.cls = cls
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, instance: Any, owner: Any = None) -> Any:
        if instance is None:
            return getattr(self.cls, self.name)
        bound = instance.__dict__[self.name] = getattr(getattr(instance, self.part), self.name)
        return bound


__all__ = ["Delegated", "MAX_ID", "gather", "unwrap"]
