# -*- test-case-name: tests.test_client_extensions -*-
"""Our server's extension verbs on a client connection, with their fallbacks.

:meth:`~ExtensionCommands.capabilities` asks once per connection which verbs
the server serves (``--extensions``); :meth:`~ExtensionCommands.list_jobs`
and :meth:`~ExtensionCommands.flush_tube` use them when advertised and fall
back on stock commands otherwise (the flush fallback is
:class:`twisted_stalk.protocol.flush.PeekDeleteFlush`, the shell's too).
"""
from __future__ import annotations

from typing import Any, Callable, Dict, FrozenSet, List, Optional, Tuple

from twisted.internet.defer import Deferred, succeed
from twisted.python.failure import Failure

from ..protocol.commands import encode_command
from ..protocol.flush import PeekDeleteFlush, flush_budgets
from ..protocol.replies import BadFormat, NotFound, Reply, UnknownCommand
from ..protocol.yaml import StatValue
from .pipeline import Pipeline, TubeName, _job_id, _reply, _value

Stats = Dict[str, StatValue]


class ExtensionCommands(Pipeline):
    """``capabilities``, ``list-jobs`` and ``flush-tube``, each falling back on
    stock commands where the server does not serve the verb."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: The extension verbs the server advertised (None: not asked yet).
        self._capabilities: Optional[FrozenSet[str]] = None
        self._capabilities_waiting: Optional[List[Deferred]] = None

    def stats_tube(self, tube: TubeName) -> "Deferred[Stats]":
        """The tube's statistics. Errors: :class:`NotFound`."""
        return self._command("stats-tube", (tube,), _value)

    @property
    def known_capabilities(self) -> Optional[FrozenSet[str]]:
        """The extension verbs the server advertised, once :meth:`capabilities`
        has been answered on this connection (None before)."""
        return self._capabilities

    def capabilities(self) -> "Deferred[FrozenSet[str]]":
        """The extension verbs the server serves (``capabilities``).

        Asked once per connection, then cached (concurrent callers share the
        one request).  A stock beanstalkd, or our server without
        ``--extensions``, answers ``UNKNOWN_COMMAND``: that is the empty set.
        """
        caps = self._capabilities
        if caps is not None:
            return succeed(caps)
        if not self._ready():
            return self._closed()
        d: Deferred = Deferred()
        waiting = self._capabilities_waiting
        if waiting is None:
            self._capabilities_waiting = waiting = []
            sent = self._send("capabilities", encode_command("capabilities"), _value,
                              self.timeout)
            sent.addBoth(self._capabilities_answered)
        waiting.append(d)
        return d

    def _capabilities_answered(self, result: Any) -> None:
        waiting, self._capabilities_waiting = self._capabilities_waiting or [], None
        if isinstance(result, Failure):
            if result.check(UnknownCommand, BadFormat):
                result = frozenset()
        else:
            result = frozenset(result)
        if not isinstance(result, Failure):
            self._capabilities = result
        for d in waiting:
            if not d.called:  # a waiter may have been cancelled
                if isinstance(result, Failure):
                    d.errback(result)
                else:
                    d.callback(result)

    def _extension(self, verb: str, direct: Callable[[], Deferred],
                   fallback: Callable[[], Deferred]) -> Deferred:
        caps = self._capabilities
        if caps is not None:
            return direct() if verb in caps else fallback()
        return self.capabilities().addCallback(
            lambda known: direct() if verb in known else fallback())

    def list_jobs(self, tube: TubeName, state: str, limit: int) -> "Deferred[List[int]]":
        """Ids of up to ``limit`` jobs of ``tube`` in ``state`` (``"ready"``,
        ``"delayed"``, ``"buried"``, ``"reserved"``), without reserving any, in
        the order the queue takes them.  Errors: :class:`NotFound` (no such tube).

        With ``list-jobs`` advertised this is one command.  On a stock server it
        falls back on ``stats-tube`` (for :class:`NotFound`) and
        ``peek-<state>``, which shows at most the *first* job of the state: the
        list has at most one id.  Reserved jobs cannot be listed that way:
        :class:`UnknownCommand`.
        """
        return self._command("list-jobs", (tube, state, limit), None, send=self._list_jobs)

    def _list_jobs(self, raw: bytes, state: str, limit: int) -> Deferred:
        line = encode_command("list-jobs", raw, state.encode(), limit)
        return self._extension(
            "list-jobs",
            lambda: self._send("list-jobs", line, _value, self.timeout),
            lambda: Deferred.fromCoroutine(self._list_jobs_fallback(raw, state, limit)))

    async def _list_jobs_fallback(self, raw: bytes, state: str, limit: int) -> List[int]:
        if state == "reserved":
            raise UnknownCommand("list-jobs", b"UNKNOWN_COMMAND (a stock server cannot "
                                 b"list reserved jobs)")
        stats = self.stats_tube(raw)
        peek = self._command("peek-" + state, (), _job_id, raw) if limit else None
        try:
            await stats
        except BaseException:
            if peek is not None:
                peek.addErrback(lambda _: None)
            raise
        if peek is None:
            return []
        try:
            return [await peek]
        except NotFound:
            return []

    def flush_tube(self, tube: TubeName, state: Optional[str] = None) -> "Deferred[int]":
        """Delete the jobs of ``tube`` in ``state`` (None: ready, delayed and
        buried, never reserved ones); fires with how many were deleted.
        Errors: :class:`NotFound` (no such tube).

        With ``flush-tube`` advertised this is one command, done at once on the
        server (and each deletion binlogged).  On a stock server it falls back
        on ``peek-<state>`` then ``delete`` until ``NOT_FOUND``, for ready, then
        delayed, then buried jobs, under the give-up rule of
        :class:`~twisted_stalk.protocol.flush.PeekDeleteFlush` (at most as many
        of each state as ``stats-tube`` counted at the start, so producers
        still putting cannot keep it going; a state is given up when its
        deletes keep failing); that is not atomic.  ``"reserved"`` needs the
        extension: :class:`UnknownCommand` otherwise.
        """
        args = (tube,) if state is None else (tube, state)
        return self._command("flush-tube", args, None, send=self._flush_tube)

    def _flush_tube(self, raw: bytes, state: Optional[str] = None) -> Deferred:
        line = (encode_command("flush-tube", raw) if state is None
                else encode_command("flush-tube", raw, state.encode()))
        states = ("ready", "delayed", "buried") if state is None else (state,)
        return self._extension(
            "flush-tube",
            lambda: self._send("flush-tube", line, _value, self.timeout),
            lambda: Deferred.fromCoroutine(self._flush_tube_fallback(raw, states)))

    async def _flush_tube_fallback(self, raw: bytes, states: Tuple[str, ...]) -> int:
        if "reserved" in states:
            raise UnknownCommand("flush-tube", b"UNKNOWN_COMMAND (a stock server cannot "
                                 b"delete jobs other connections reserved)")
        stats = await self.stats_tube(raw)
        flush = PeekDeleteFlush(states, flush_budgets(stats, states))
        steps = flush.steps()
        try:
            batch = next(steps)
            while True:
                # A batch (a delete and the next peek) goes out together.
                sent = [self._command(c[0], c[1:], _reply, raw, replies=True) for c in batch]
                replies: List[Reply] = []
                try:
                    for d in sent:
                        replies.append(await d)
                except BaseException:
                    for d in sent[len(replies) + 1:]:
                        d.addErrback(lambda _: None)
                    raise
                batch = steps.send(replies)
        except StopIteration:
            pass
        return flush.total


__all__ = ["ExtensionCommands"]
