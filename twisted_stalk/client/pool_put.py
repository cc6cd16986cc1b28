# -*- test-case-name: tests.test_client_pool,tests.test_client_pool_wire -*-
"""Where a pool's put goes: a part of :class:`~twisted_stalk.client.pool.BeanstalkPool`.

The pool's :mod:`~twisted_stalk.client.policy` (or the caller's ``key``)
orders the usable servers; ``DRAINING``, ``OUT_OF_MEMORY`` and an unreachable
server move the put to the next one, and so does a connection that broke
after the put was written when ``retry_written`` (the job may then exist
twice).
"""
from __future__ import annotations

from typing import Any, Collection, Dict, List, Optional, Set

from twisted.internet.defer import Deferred, fail
from twisted.python.failure import Failure

from .errors import (
    BeanstalkConnectionError,
    ClientClosed,
    Draining,
    NoServerAvailable,
    OutOfMemory,
)
from .job import DEFAULT_PRIORITY, DEFAULT_TTR
from .members import JobId, PoolServer
from ._validate import TubeName


class PutRouting:
    """The put of :class:`~twisted_stalk.client.pool.BeanstalkPool` (a part of it)."""

    def put(self, body: Any, priority: int = DEFAULT_PRIORITY, delay: int = 0,
            ttr: int = DEFAULT_TTR, tube: Optional[TubeName] = None, *,
            key: Optional[Any] = None,
            retry_written: Optional[bool] = None) -> "Deferred[JobId]":
        """Put a job on one server; fires with its :class:`JobId` (an int
        with ``.server``).

        The pool's policy picks the server (with ``key``: the key's server,
        see :class:`~twisted_stalk.client.policy.KeyHash`).  ``DRAINING``,
        ``OUT_OF_MEMORY`` and an unreachable server move the put to the next
        server.  A connection that broke after the put was written moves it
        too when ``retry_written`` (default: the pool's), at the risk of a
        duplicate; otherwise that error is raised.  Errors:
        :class:`NoServerAvailable` (every server refused), the put's own
        errors (:class:`InvalidArgument`, :class:`JobTooBig`, :class:`Buried`).
        """
        if self._closed:
            return fail(ClientClosed("the pool is closed"))
        written = self.retry_written if retry_written is None else retry_written
        if self._started:
            # The usual case, without a coroutine: the first usable server.
            usable = self._usable()
            if usable:
                policy = self._by_key if key is not None else self.policy
                first = getattr(policy, "first", None)
                index = (first(self._names, usable, key) if first is not None
                         else policy.order(self._names, usable, key)[0])
                member = self._members[index]
                d = member.client.put_now(body, priority, delay, ttr, tube)
                return d.addCallbacks(member.stored, self._put_failed, errbackArgs=(
                    member, body, priority, delay, ttr, tube, key, written))
        return Deferred.fromCoroutine(
            self._put(body, priority, delay, ttr, tube, key, written))

    def _put_failed(self, failure: Failure, member: PoolServer, *put: Any) -> Any:
        """The first server did not take the put: go on with the others (see
        :meth:`_put`) when that is allowed, else the error."""
        error = failure.value
        retry_written = put[-1]
        if isinstance(error, (Draining, OutOfMemory)) or (
                retry_written and isinstance(error, BeanstalkConnectionError)
                and not isinstance(error, ClientClosed)):
            self._log_retry(member, error)
            return Deferred.fromCoroutine(self._put(
                *put, tried={member.index}, errors={member.name: error}))
        return failure

    def _log_retry(self, member: PoolServer, error: BaseException) -> None:
        if isinstance(error, BeanstalkConnectionError):
            self.log.info("put to {server} failed after it was sent ({error}); "
                          "trying another server (the job may now exist twice)",
                          server=member.name, error=error)

    def _put_order(self, key: Optional[Any], tried: Collection[int]) -> List[int]:
        usable = [i for i in self._usable() if i not in tried]
        if not usable:
            return []
        if key is not None:
            return self._by_key.order(self._names, usable, key)
        return self.policy.order(self._names, usable, None)

    async def _put(self, body: Any, priority: int, delay: int, ttr: int,
                   tube: Optional[TubeName], key: Optional[Any], retry_written: bool,
                   tried: Optional[Set[int]] = None,
                   errors: Optional[Dict[str, BaseException]] = None) -> JobId:
        self.start()
        tried = set() if tried is None else tried
        errors = {} if errors is None else errors
        while True:
            order = self._put_order(key, tried)
            if not order:
                if errors:
                    raise NoServerAvailable(
                        "no server took the put: " + "; ".join(
                            f"{name}: {e}" for name, e in errors.items()), errors)
                if not all(m.settled.called for m in self._members):
                    await self._settled()
                else:
                    await self._when_any_up()
                continue
            member = self._members[order[0]]
            tried.add(member.index)
            try:
                job_id = await member.client.put_now(body, priority, delay, ttr, tube)
            except (Draining, OutOfMemory) as e:  # not stored: the next server
                errors[member.name] = e
                continue
            except ClientClosed:
                raise
            except BeanstalkConnectionError as e:
                if not retry_written:
                    raise
                self._log_retry(member, e)
                errors[member.name] = e
                continue
            return member.stored(job_id)


__all__ = ["PutRouting"]
