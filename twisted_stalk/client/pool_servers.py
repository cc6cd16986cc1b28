# -*- test-case-name: tests.test_client_pool,tests.test_client_pool_wire -*-
"""A pool's commands on every server at once: a part of
:class:`~twisted_stalk.client.pool.BeanstalkPool`.

``stats`` and ``stats_tube`` add up the servers' figures
(:mod:`~twisted_stalk.client.aggregate`); ``list_tubes``, ``kick``,
``list_jobs``, ``flush_tube`` and ``pause_tube`` combine their answers; the
peeks take the first server's (in the pool's order) that has a job.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Tuple

from twisted.internet.defer import Deferred, DeferredList, fail

from .aggregate import PoolStats
from .client import BeanstalkClient
from .errors import NoServerAvailable, NotFound
from .job import Job
from .members import JobId
from ._validate import TubeName


class ServersAndStats:
    """The every-server commands of :class:`~twisted_stalk.client.pool.BeanstalkPool` (a part of it)."""

    def _each(self, call: Callable[[BeanstalkClient], Deferred]
              ) -> "Deferred[Tuple[Dict[str, Any], Dict[str, BaseException]]]":
        """``call`` on every usable server; (results, errors) by name."""
        self.start()
        members = self._members
        ds = []
        for m in members:
            if m.usable:
                ds.append(call(m.client))
            else:
                ds.append(fail(NoServerAvailable(f"{m.name} is {m.state}")))

        def split(results: List[Tuple[bool, Any]]):
            values: Dict[str, Any] = {}
            errors: Dict[str, BaseException] = {}
            for m, (ok, value) in zip(members, results):
                if ok:
                    values[m.name] = value
                else:
                    errors[m.name] = value.value
            return values, errors
        return DeferredList(ds, consumeErrors=True).addCallback(split)

    def stats(self) -> "Deferred[PoolStats]":
        """Server statistics summed over the servers that answered
        (``.servers``: each one's; ``.errors``: those that did not)."""
        def combine(r: Tuple[Dict[str, Any], Dict[str, BaseException]]) -> PoolStats:
            if not r[0]:
                raise NoServerAvailable("no server answered stats", r[1])
            return PoolStats(*r)
        return self._each(lambda c: c.stats()).addCallback(combine)

    def stats_tube(self, tube: TubeName) -> "Deferred[PoolStats]":
        """A tube's statistics summed over the servers that have it.
        Errors: :class:`NotFound` when none has it."""
        return self._each(lambda c: c.stats_tube(tube)).addCallback(
            lambda r: self._found(r, lambda values: PoolStats(values, r[1])))

    def list_tubes(self) -> "Deferred[List[str]]":
        """The tubes that exist on any server, sorted."""
        return self._each(lambda c: c.list_tubes()).addCallback(
            lambda r: sorted(set().union(*r[0].values())))

    def kick(self, bound: int, tube: Optional[TubeName] = None) -> "Deferred[int]":
        """Kick up to ``bound`` jobs on *each* server; fires with the total kicked."""
        return self._each(lambda c: c.kick(bound, tube)).addCallback(
            lambda r: sum(r[0].values()))

    def list_jobs(self, tube: TubeName, state: str, limit: int) -> "Deferred[List[JobId]]":
        """Ids (:class:`JobId`) of up to ``limit`` jobs of ``tube`` in ``state``
        on *each* server, server after server (see
        :meth:`BeanstalkClient.list_jobs`).  Errors: :class:`NotFound` when no
        server has the tube."""
        return self._each(lambda c: c.list_jobs(tube, state, limit)).addCallback(
            self._found, lambda r: [JobId(i, name) for name, ids in r.items() for i in ids])

    def flush_tube(self, tube: TubeName, state: Optional[str] = None) -> "Deferred[int]":
        """Delete the jobs of ``tube`` in ``state`` on every server (see
        :meth:`BeanstalkClient.flush_tube`); fires with the total deleted."""
        return self._each(lambda c: c.flush_tube(tube, state)).addCallback(
            self._found, lambda r: sum(r.values()))

    @staticmethod
    def _found(r: Tuple[Dict[str, Any], Dict[str, BaseException]],
               combine: Callable[[Dict[str, Any]], Any]) -> Any:
        """``combine`` the servers' answers; NotFound when none had the tube."""
        values, errors = r
        if not values:
            found = [e for e in errors.values() if isinstance(e, NotFound)]
            if found:
                raise found[0]
            raise NoServerAvailable("no server answered", errors)
        return combine(values)

    def pause_tube(self, tube: TubeName, delay: int) -> "Deferred[None]":
        """Pause ``tube`` on every server that has it."""
        return self._each(lambda c: c.pause_tube(tube, delay)).addCallback(lambda r: None)

    def peek_ready(self, tube: Optional[TubeName] = None) -> "Deferred[Job]":
        """A ready job of ``tube`` from the first server (in the pool's
        order) that has one: not the best across servers."""
        return self._first(lambda c: c.peek_ready(tube))

    def peek_delayed(self, tube: Optional[TubeName] = None) -> "Deferred[Job]":
        """A delayed job of ``tube`` from the first server that has one."""
        return self._first(lambda c: c.peek_delayed(tube))

    def peek_buried(self, tube: Optional[TubeName] = None) -> "Deferred[Job]":
        """A buried job of ``tube`` from the first server that has one."""
        return self._first(lambda c: c.peek_buried(tube))

    def _first(self, call: Callable[[BeanstalkClient], Deferred]) -> "Deferred[Job]":
        def pick(r: Tuple[Dict[str, Any], Dict[str, BaseException]]) -> Job:
            for m in self._members:
                if m.name in r[0]:
                    return r[0][m.name]
            raise NotFound("peek", b"NOT_FOUND (on every server)")
        return self._each(call).addCallback(pick)


__all__ = ["ServersAndStats"]
