# -*- test-case-name: tests.test_client_memory,tests.test_client_pool -*-
"""Handles for calls that target tubes without changing a client's defaults.

``client.tube("emails").put(body)`` and ``client.watching("a", "b").reserve()``
(and the same on a pool): a :class:`Tube` or :class:`TubeSet` only remembers
the checked names and passes them to its client's (or pool's) calls.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Union

from twisted.internet.defer import Deferred

from ..protocol.yaml import StatValue
from . import _validate as v
from .errors import InvalidArgument
from .job import DEFAULT_PRIORITY, DEFAULT_TTR, Job

TubeName = Union[str, bytes]
Stats = Dict[str, StatValue]


class Tube:
    """A tube of a client: commands that target it without changing the client's
    default tube (``client.tube("emails").put(body)``)."""

    def __init__(self, client: Any, name: TubeName) -> None:
        self.client = client
        self._raw = v.tube_name(name)
        self.name = self._raw.decode("ascii")

    def __repr__(self) -> str:
        return f"<Tube {self.name!r}>"

    def put(self, body: Any, priority: int = DEFAULT_PRIORITY, delay: int = 0,
            ttr: int = DEFAULT_TTR) -> "Deferred[int]":
        """Put a job into this tube; fires with its id."""
        return self.client.put(body, priority, delay, ttr, tube=self._raw)

    def peek_ready(self) -> "Deferred[Job]":
        """The next ready job of this tube."""
        return self.client.peek_ready(tube=self._raw)

    def peek_delayed(self) -> "Deferred[Job]":
        """The delayed job of this tube with the shortest delay left."""
        return self.client.peek_delayed(tube=self._raw)

    def peek_buried(self) -> "Deferred[Job]":
        """The next buried job of this tube."""
        return self.client.peek_buried(tube=self._raw)

    def kick(self, bound: int) -> "Deferred[int]":
        """Kick up to ``bound`` jobs of this tube; fires with the number kicked."""
        return self.client.kick(bound, tube=self._raw)

    def stats(self) -> "Deferred[Stats]":
        """This tube's statistics."""
        return self.client.stats_tube(self._raw)

    def pause(self, delay: int) -> "Deferred[None]":
        """Pause reserves from this tube for ``delay`` seconds."""
        return self.client.pause_tube(self._raw, delay)

    def list_jobs(self, state: str, limit: int) -> "Deferred[List[int]]":
        """Ids of up to ``limit`` jobs of this tube in ``state`` (see
        :meth:`BeanstalkClient.list_jobs`)."""
        return self.client.list_jobs(self._raw, state, limit)

    def flush(self, state: Optional[str] = None) -> "Deferred[int]":
        """Delete this tube's jobs in ``state`` (None: ready, delayed and buried);
        fires with the number deleted (see :meth:`BeanstalkClient.flush_tube`)."""
        return self.client.flush_tube(self._raw, state)


class TubeSet:
    """A set of tubes to reserve from (``client.watching("a", "b").reserve()``)."""

    def __init__(self, client: Any, names: Sequence[TubeName]) -> None:
        if not names:
            raise InvalidArgument("watching() needs at least one tube")
        self.client = client
        self._raw = tuple(dict.fromkeys(v.tube_name(n) for n in names))
        self.names = tuple(n.decode("ascii") for n in self._raw)

    def __repr__(self) -> str:
        return f"<TubeSet {self.names!r}>"

    def reserve(self, timeout: Optional[int] = None) -> "Deferred[Job]":
        """Reserve a job from these tubes (``timeout`` None waits forever)."""
        return self.client.reserve(timeout, tubes=self._raw)


class PoolTube(Tube):
    """A tube of a pool (``pool.tube("emails").put(body, key=user_id)``): the
    calls of :class:`~twisted_stalk.client.Tube`, over every server."""

    def __repr__(self) -> str:
        return f"<PoolTube {self.name!r}>"

    def put(self, body: Any, priority: int = DEFAULT_PRIORITY, delay: int = 0,  # type: ignore[override]
            ttr: int = DEFAULT_TTR, *, key: Optional[Any] = None,
            retry_written: Optional[bool] = None) -> "Deferred[int]":
        """Put a job into this tube on one server; fires with its ``JobId``
        (see :meth:`BeanstalkPool.put`)."""
        return self.client.put(body, priority, delay, ttr, self._raw, key=key,
                               retry_written=retry_written)


__all__ = ["PoolTube", "Tube", "TubeSet"]
