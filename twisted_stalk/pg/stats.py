# -*- test-case-name: tests.test_pg_wire,tests.test_pg_nodes -*-
"""``stats``, ``stats-tube``, ``stats-job``, ``list-tubes`` across nodes.

The rule (docs/compat.md): what is about jobs is read from the database when
the command runs (``current-jobs-*``, a tube's job counts and pause, a job's
fields, which tubes hold jobs).  What is about connections and commands is
counted by the node that served them and summed over the nodes: this node's
figures exact, the other live nodes' as of their last heartbeat, and, for
totals (``cmd-*``, ``total-*``, ``job-timeouts``), those of nodes that are
gone.  ``pid``, ``uptime``, ``rusage-*``, ``id``, ``hostname``, ``draining``
are this node's.  With one node every figure is what beanstalkd shows.

The inspection methods (metrics, console) answer at once from what the node
holds: its own figures and the job counts read at the last heartbeat.
"""
from __future__ import annotations

import time
from typing import Any, List

from twisted.internet import defer

from ..core.counters import LIST_TUBES, STATS, STATS_JOB, STATS_TUBE
from ..core.job import STATE_NAMES
from ..core.outcomes import INTERNAL_ERROR, NOT_FOUND
from ..core.readmodel import MemoryUse, TubeFigures
from ..protocol.yaml import StatPairs
from .util import gather


class Stats:
    """The stats side of the engine (a part of :class:`~.engine.PgEngine`)."""

    _inspected_at = 0.0

    # ------------------------------------------------------------ sums

    def _sum(self, key: str, mine: int, totals: bool) -> int:
        value = mine
        for figures, _ in self.others.values():
            value += figures.get(key, 0)
        if totals:
            value += self.retired.get(key, 0)
        return value

    def _tube_sums(self, t: Any) -> List[int]:
        """[using, watching, waiting, total-jobs, cmd-delete, cmd-pause] over nodes."""
        sums = ([t.using_count, t.watching_count, len(t.waiting), t.total_jobs, t.cmd_delete,
                 t.cmd_pause] if t is not None else [0] * 6)
        name = None
        for _, tubes in self.others.values():
            if name is None:
                name = (t.name if t is not None else b"").decode("ascii")
            figures = tubes.get(name)
            if figures:
                sums = [a + b for a, b in zip(sums, figures)]
        return sums

    def _read_fresh(self) -> defer.Deferred:
        """Other nodes' figures and the retired totals, read now."""
        db = self.db
        return gather([
            db.execute("others", [self.node_id]).addCallback(self._read_others, self._heard),
            db.execute("retired").addCallback(self._read_retired),
        ])

    # ------------------------------------------------------------ the commands

    def stats(self, s: Any) -> Any:
        self.cmd_counts[STATS] += 1
        db = self.db
        since = self._epoch
        d = gather([
            db.execute("counts_all"),
            db.execute("tubes_with_jobs"),
            self._read_fresh(),
        ])

        def build(results: Any) -> StatPairs:
            counts, with_jobs, _ = results
            self._read_counts(counts)
            self.reconcile([r[0] for r in with_jobs], self._elsewhere(), since)
            return self._stat_pairs()
        return d.addCallbacks(build, self._internal_error)

    def stats_tube(self, s: Any, name: bytes) -> Any:
        self.cmd_counts[STATS_TUBE] += 1
        db = self.db
        d = gather([db.execute("counts_tube", [name]), self._read_fresh()])

        def build(results: Any) -> Any:
            row = results[0][0]
            urgent, ready, reserved, delayed, buried, pause, left = row
            self._settle(name, bool(ready or reserved or delayed or buried))
            t = self.tubes.get(name)
            sums = self._tube_sums(t)
            if t is None and not (ready or reserved or delayed or buried) and not any(sums[:3]):
                return NOT_FOUND
            if t is not None:
                (t.urgent_count, t.ready_count, t.reserved_count, t.delayed_count,
                 t.buried_count) = urgent, ready, reserved, delayed, buried
            pause = pause or 0
            return TubeFigures(name, urgent, ready, reserved, delayed, buried, sums[3], sums[0],
                               sums[1], sums[2], sums[4], sums[5], pause,
                               max(0, int(left)) if pause and left is not None else 0
                               ).stat_pairs()
        return d.addCallbacks(build, self._internal_error)

    def stats_job(self, s: Any, job_id: int) -> Any:
        self.cmd_counts[STATS_JOB] += 1
        return self.job_stats(job_id)

    def list_tubes(self, s: Any) -> Any:
        self.cmd_counts[LIST_TUBES] += 1
        since = self._epoch
        d = gather([self.db.execute("tubes_with_jobs"), self._read_fresh()])

        def build(results: Any) -> List[bytes]:
            self.reconcile([r[0] for r in results[0]], self._elsewhere(), since)
            return self.tube_names()
        return d.addCallbacks(build, self._internal_error)

    # ------------------------------------------------------------ inspection

    def _inspected(self) -> bool:
        """True if a front end looked at the server's or the tubes' figures in
        the last minute: the heartbeat then also refreshes the job counts (a
        count reads every job, so a node nobody inspects does not count)."""
        return time.monotonic() - self._inspected_at < 60.0

    def tube_names(self) -> List[bytes]:
        return [t.name for t in self.tube_list]

    def tube_stats(self, name: bytes) -> Any:
        """A tube's stats from what the node holds (job counts as of the last heartbeat)."""
        self._inspected_at = time.monotonic()
        t = self.tubes.get(name)
        if t is None:
            return NOT_FOUND
        return self._figures(t).stat_pairs()

    def tube_figures(self) -> List[TubeFigures]:
        """Every tube's figures: job counts as of the last heartbeat, the
        rest summed over the nodes (as :meth:`tube_stats`)."""
        self._inspected_at = time.monotonic()
        return [self._figures(t) for t in self.tube_list]

    def _figures(self, t: Any) -> TubeFigures:
        using, watching, waiting, total, deletes, pauses = self._tube_sums(t)
        return TubeFigures(t.name, t.urgent_count, t.ready_count, t.reserved_count,
                           t.delayed_count, t.buried_count, total, using, watching, waiting,
                           deletes, pauses, t.pause, 0)

    def memory(self) -> MemoryUse:
        """The bodies are the database's: not counted here, and no ceiling applied."""
        return MemoryUse(None, 0)

    def server_stats(self) -> StatPairs:
        """The server's stats: job counts as last read, counters summed over
        nodes (for the front ends that show them: the heartbeat keeps the
        counts fresh while they look; ``stats`` reads its own)."""
        self._inspected_at = time.monotonic()
        return self._stat_pairs()

    def _stat_pairs(self) -> StatPairs:
        return self._server_stat_pairs(self.counts, self.journal.stats(), self._sum)

    def job_stats(self, job_id: int) -> Any:
        """A job's stats pairs, read from the database (a Deferred)."""
        if job_id > 2**63 - 1:
            return NOT_FOUND
        def build(rows: Any) -> Any:
            if not rows:
                return NOT_FOUND
            (jid, tube, state, pri, age, delay, ttr, left, reserves, timeouts, releases,
             buries, kicks) = rows[0]
            time_left = max(0, int(left)) if state in (1, 2) else 0
            return [
                ("id", jid), ("tube", tube), ("state", STATE_NAMES[state]), ("pri", pri),
                ("age", int(age)), ("delay", delay), ("ttr", ttr), ("time-left", time_left),
                ("file", 0), ("reserves", reserves), ("timeouts", timeouts),
                ("releases", releases), ("buries", buries), ("kicks", kicks),
            ]
        return self.db.execute("stats_job", [job_id]).addCallbacks(build, self._internal_error)

    def _internal_error(self, failure: Any) -> Any:
        self._failed(failure)
        return INTERNAL_ERROR


__all__ = ["Stats"]
