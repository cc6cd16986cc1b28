# -*- test-case-name: tests.test_protocol_flush -*-
"""Flushing a tube on a server without ``flush-tube``: peek and delete, bounded.

A stock beanstalkd cannot delete a tube's jobs in one command, so a flush
peeks at the first job of a state (``peek-ready``...) and deletes it by id,
again and again.  Producers may keep putting and workers may take a job
between the peek and the delete, so the loop needs a rule for when to stop.
It is written once, here, as a step generator that does no I/O; the client
library (:meth:`BeanstalkProtocol.flush_tube <twisted_stalk.client.protocol.
BeanstalkProtocol.flush_tube>`, with Deferreds) and the shell (``stalk
flush``, over a blocking socket) drive it::

    flush = PeekDeleteFlush(("ready", "buried"), flush_budgets(stats_tube, states))
    steps = flush.steps()
    batch = next(steps)                  # [("peek-ready",)]
    while True:
        replies = send_and_read(batch)   # one decoded Reply per command, in order
        try:
            batch = steps.send(replies)  # [("delete", 7), ("peek-ready",)] ...
        except StopIteration:
            break
    flush.deleted                        # {"ready": 3, "buried": 1}

Each command is a tuple ``(name, *args)`` for
:func:`~twisted_stalk.protocol.commands.encode_command`; the connection must
be using the tube.  The commands of one batch may be sent together (the delete
of one job and the peek for the next: the server answers the peek after the
delete, so it shows the next job); the generator wants their replies, in order.

The give-up rule, per state (ready, then delayed, then buried, as asked):

* it deletes at most as many jobs as the tube had in that state at the start
  (``stats-tube``'s ``current-jobs-<state>``: the *budget*), so producers
  still putting cannot keep it going;
* a delete answered ``NOT_FOUND`` (someone reserved or deleted the job after
  the peek) is not counted; the state is given up when the same job fails
  twice in a row or when more deletes failed than the budget, so workers
  taking the jobs cannot keep it going either;
* it ends when the peek answers ``NOT_FOUND`` (no job left in that state).

So a state costs at most 2 * budget + 1 peeks and as many deletes.  Any other
error reply raises its :class:`~twisted_stalk.protocol.replies.ReplyError`.
Reserved jobs are never touched: ``peek-*`` does not show them.
"""
from __future__ import annotations

from typing import Dict, Generator, Iterable, List, Mapping, Sequence, Tuple, Union

from .replies import Reply

#: A command to send: ``(name, *args)``.
Command = Tuple[Union[str, int, bytes], ...]
#: What :meth:`PeekDeleteFlush.steps` yields and is sent.
Steps = Generator[List[Command], Sequence[Reply], int]


def flush_budgets(stats: Mapping[str, object], states: Iterable[str]) -> Dict[str, int]:
    """The budget of each state: its ``current-jobs-<state>`` count in a
    ``stats-tube`` mapping (0 when missing or not a number)."""
    budgets = {}
    for state in states:
        count = stats.get(f"current-jobs-{state}", 0)
        budgets[state] = count if isinstance(count, int) and count > 0 else 0
    return budgets


class PeekDeleteFlush:
    """One flush by ``peek-<state>`` and ``delete``, under the give-up rule.

    :param states: the states to flush, in order (``"ready"``, ``"delayed"``,
        ``"buried"``; never ``"reserved"``).
    :param budgets: the most jobs to delete in each state (see
        :func:`flush_budgets`).
    """

    def __init__(self, states: Iterable[str], budgets: Mapping[str, int]) -> None:
        self.states = tuple(states)
        if "reserved" in self.states:
            raise ValueError("peek and delete cannot flush reserved jobs")
        self.budgets = {s: max(0, budgets.get(s, 0)) for s in self.states}
        #: Jobs deleted so far, by state (updated as the replies come in).
        self.deleted: Dict[str, int] = {s: 0 for s in self.states}
        #: Why a state was given up before its peek found no job, by state.
        self.gave_up: Dict[str, str] = {}

    @property
    def total(self) -> int:
        """Jobs deleted so far, all states together."""
        return sum(self.deleted.values())

    def steps(self) -> Steps:
        """The commands to send, batch by batch; send it each batch's replies.
        Returns (``StopIteration.value``) the number of jobs deleted."""
        for state in self.states:
            budget = self.budgets[state]
            if budget:
                yield from self._state(state, budget)
        return self.total

    def _state(self, state: str, budget: int) -> Steps:
        peek: Command = ("peek-" + state,)
        deleted = self.deleted
        misses = 0
        last_miss = None
        (found,) = yield [peek]
        while found.ok:
            job_id = found.job_id
            assert job_id is not None
            # Pipeline the next peek unless this delete may be the last one.
            more = deleted[state] + 1 < budget
            replies = yield [("delete", job_id), peek] if more else [("delete", job_id)]
            answer = replies[0]
            if answer.ok:
                deleted[state] += 1
            elif answer.word == "NOT_FOUND" and answer.expected:
                misses += 1
                if job_id == last_miss:
                    self.gave_up[state] = (f"job {job_id} could not be deleted "
                                           f"({answer.line.decode('ascii', 'replace')})")
                    return 0
                if misses > budget:
                    self.gave_up[state] = (f"gave up on {state} jobs after {misses} failed "
                                           "deletes: they keep being taken by others")
                    return 0
                last_miss = job_id
            else:
                raise answer.error()
            if more:
                found = replies[1]
            elif deleted[state] >= budget:
                return 0
            else:
                (found,) = yield [peek]
        if found.word != "NOT_FOUND" or not found.expected:
            raise found.error()
        return 0


__all__ = ["Command", "PeekDeleteFlush", "Steps", "flush_budgets"]
