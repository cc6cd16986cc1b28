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

:class:`Stats` is a part of :class:`~.engine.PgEngine`, which delegates
these methods of the ``Engine`` seam to it.  It also keeps what the node
knows of the other nodes (their figures, the retired totals, whether any is
known at all: :attr:`Stats.alone`), which the heartbeat (:mod:`.upkeep`)
refreshes through its ``read_*`` methods.  What it uses of the engine is
:class:`StatsHost`.
"""
from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, List, Optional, Tuple
from typing import Protocol as _Interface

from twisted.internet import defer

from ..core.counters import LIST_TUBES, STATS, STATS_JOB, STATS_TUBE
from ..core.job import STATE_NAMES
from ..core.outcomes import NOT_FOUND
from ..core.readmodel import MemoryUse, TubeFigures
from ..protocol.yaml import StatPairs
from .util import MAX_ID, gather

if TYPE_CHECKING:  # pragma: no cover
    from ..core.journal import Journal
    from .connections import Connections
    from .tubes import NodeTube


class StatsHost(_Interface):
    """What :class:`Stats` uses of the engine (its other arrows: none)."""

    db: "Connections"
    node_id: Optional[int]
    tubes: Dict[bytes, "NodeTube"]
    tube_list: List["NodeTube"]
    cmd_counts: Dict[str, int]
    journal: "Journal"
    #: The tube registry's event count (tubes.TubeRegistry).
    _epoch: int

    def reconcile(self, with_jobs: Iterable[bytes], elsewhere: Iterable[bytes],
                  since: Optional[int] = None) -> None:
        """Bring the tube list in line with the database (tubes.TubeRegistry)."""

    def _settle(self, name: bytes, jobs: bool) -> None:
        """A look found tube ``name`` holds ``jobs`` (tubes.TubeRegistry)."""

    def _server_stat_pairs(self, counts: Tuple[int, int, int, int, int],
                           binlog: Dict[str, int],
                           over_nodes: Callable[[str, int, bool], int]) -> StatPairs:
        """The ``stats`` pairs (core.sessions.SessionRules)."""

    def internal_error(self, failure: Any) -> Any:
        """A command's statement failed: log it, answer INTERNAL_ERROR."""


class Stats:
    """The stats side of the engine (see the module docstring)."""

    def __init__(self, engine: StatsHost) -> None:
        self.engine = engine
        #: Other live nodes: id -> (figures, tube figures), as of the last read.
        self.others: Dict[int, Tuple[Dict[str, int], Dict[str, List[int]]]] = {}
        #: Notices heard from other nodes, and how many had been heard when the
        #: last read of ``nodes`` went out (-1: none read yet); see :attr:`alone`.
        self.heard = 0
        self.heard_at_read = -1
        #: Counters of nodes that are gone.
        self.retired: Dict[str, int] = {}
        #: Job counts of the whole queue as of the last heartbeat (inspection).
        self.counts: Tuple[int, ...] = (0, 0, 0, 0, 0)
        self.inspected_at = 0.0

    # ------------------------------------------------------------ the other nodes

    @property
    def alone(self) -> bool:
        """No other node is known (upkeep.py): the last read of ``nodes``
        found none, and no other node's notice came since it went out."""
        return not self.others and self.heard == self.heard_at_read

    def noticed(self) -> None:
        """A notice of another node came (upkeep.py)."""
        self.heard += 1

    def read_others(self, rows: Any, heard: int) -> None:
        """The other nodes' rows, read when ``heard`` notices had come."""
        self.others = {node: (json.loads(figures), json.loads(tubes))
                       for node, figures, tubes in rows}
        self.heard_at_read = heard

    def read_retired(self, rows: Any) -> None:
        self.retired = {key.decode(): value for key, value in rows}

    def elsewhere(self) -> List[bytes]:
        """Tubes other nodes' sessions use, watch or wait on."""
        names = set()
        for _, tubes in self.others.values():
            for name, figures in tubes.items():
                if figures[0] or figures[1] or figures[2]:
                    names.add(name.encode("ascii"))
        return sorted(names)

    def read_counts(self, rows: Any) -> None:
        if rows:
            self.counts = tuple(rows[0][:5])

    def read_tube_counts(self, rows: Any) -> None:
        fresh: Dict[bytes, List[int]] = {}
        for name, state, urgent, n in rows:
            counts = fresh.setdefault(name, [0, 0, 0, 0, 0])
            counts[1 + state] = n
            if state == 0:
                counts[0] = urgent
        for t in self.engine.tube_list:
            c = fresh.get(t.name, [0, 0, 0, 0, 0])
            (t.urgent_count, t.ready_count, t.reserved_count, t.delayed_count,
             t.buried_count) = c

    def read_fresh(self) -> defer.Deferred:
        """Other nodes' figures and the retired totals, read now."""
        e = self.engine
        db = e.db
        return gather([
            db.execute("others", [e.node_id]).addCallback(self.read_others, self.heard),
            db.execute("retired").addCallback(self.read_retired),
        ])

    def inspected(self) -> bool:
        """True if a front end looked at the server's or the tubes' figures in
        the last minute: the heartbeat then also refreshes the job counts (a
        count reads every job, so a node nobody inspects does not count)."""
        return time.monotonic() - self.inspected_at < 60.0

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

    # ------------------------------------------------------------ the commands

    def stats(self, s: Any) -> Any:
        e = self.engine
        e.cmd_counts[STATS] += 1
        db = e.db
        since = e._epoch
        d = gather([
            db.execute("counts_all"),
            db.execute("tubes_with_jobs"),
            self.read_fresh(),
        ])

        def build(results: Any) -> StatPairs:
            counts, with_jobs, _ = results
            self.read_counts(counts)
            e.reconcile([r[0] for r in with_jobs], self.elsewhere(), since)
            return self._stat_pairs()
        return d.addCallbacks(build, e.internal_error)

    def stats_tube(self, s: Any, name: bytes) -> Any:
        e = self.engine
        e.cmd_counts[STATS_TUBE] += 1
        d = gather([e.db.execute("counts_tube", [name]), self.read_fresh()])

        def build(results: Any) -> Any:
            row = results[0][0]
            urgent, ready, reserved, delayed, buried, pause, left = row
            e._settle(name, bool(ready or reserved or delayed or buried))
            t = e.tubes.get(name)
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
        return d.addCallbacks(build, e.internal_error)

    def stats_job(self, s: Any, job_id: int) -> Any:
        self.engine.cmd_counts[STATS_JOB] += 1
        return self.job_stats(job_id)

    def list_tubes(self, s: Any) -> Any:
        e = self.engine
        e.cmd_counts[LIST_TUBES] += 1
        since = e._epoch
        d = gather([e.db.execute("tubes_with_jobs"), self.read_fresh()])

        def build(results: Any) -> List[bytes]:
            e.reconcile([r[0] for r in results[0]], self.elsewhere(), since)
            return self.tube_names()
        return d.addCallbacks(build, e.internal_error)

    # ------------------------------------------------------------ inspection

    def tube_names(self) -> List[bytes]:
        return [t.name for t in self.engine.tube_list]

    def tube_stats(self, name: bytes) -> Any:
        """A tube's stats from what the node holds (job counts as of the last heartbeat)."""
        self.inspected_at = time.monotonic()
        t = self.engine.tubes.get(name)
        if t is None:
            return NOT_FOUND
        return self._figures(t).stat_pairs()

    def tube_figures(self) -> List[TubeFigures]:
        """Every tube's figures: job counts as of the last heartbeat, the
        rest summed over the nodes (as :meth:`tube_stats`)."""
        self.inspected_at = time.monotonic()
        return [self._figures(t) for t in self.engine.tube_list]

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
        self.inspected_at = time.monotonic()
        return self._stat_pairs()

    def _stat_pairs(self) -> StatPairs:
        e = self.engine
        return e._server_stat_pairs(self.counts, e.journal.stats(), self._sum)

    def job_stats(self, job_id: int) -> Any:
        """A job's stats pairs, read from the database (a Deferred)."""
        if job_id > MAX_ID:
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
        e = self.engine
        return e.db.execute("stats_job", [job_id]).addCallbacks(build, e.internal_error)


__all__ = ["Stats", "StatsHost"]
