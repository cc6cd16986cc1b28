# -*- test-case-name: tests.test_pg_wire -*-
"""What a node knows about tubes: its clients' uses, watches and waits, its counters.

Jobs live in the database; who uses, watches and waits on a tube lives in
the node that holds those connections.  :class:`NodeTube` is a node's record
of one tube: the counts of its own sessions, the counters of the commands it
served (``total-jobs``, ``cmd-delete``, ``cmd-pause-tube``), whether the
tube holds jobs as far as the node knows (``has_jobs``), and the job counts
last read for inspection.

:class:`TubeRegistry` (a part of the engine) keeps the node's tube list in
beanstalkd's order (the base's registry, ``core.sessions``: appended when
created, the last one moved into a removed tube's place) and drops a tube when
nothing keeps it: no job in the database
and no session of any node using or watching it.  With one node this is
exactly beanstalkd's rule, because every job went through that node; with
several, a tube emptied through another node is dropped here at the next
look at the database (``list-tubes``, ``stats``, or the heartbeat): see
docs/compat.md.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Any, Dict, Iterable, List, Optional, Set



class NodeTube:
    """One tube as a node sees it (see the module docstring)."""

    __slots__ = (
        "name", "index", "using_count", "watching_count", "waiting", "has_jobs", "unsure", "seen",
        "total_jobs", "cmd_delete", "cmd_pause", "events", "empty_at", "urgent_count", "ready_count",
        "reserved_count", "delayed_count", "buried_count", "pause", "unpause_at",
    )

    def __init__(self, name: bytes) -> None:
        self.name = name
        #: Position in the node's tube list (-1: dropped).
        self.index = -1
        self.using_count = 0
        self.watching_count = 0
        #: This node's sessions waiting in reserve on the tube, in arrival order.
        self.waiting: "OrderedDict[Any, None]" = OrderedDict()
        #: The database holds jobs of this tube, as far as this node knows.
        self.has_jobs = False
        #: A delete of one of its jobs did not look whether jobs remain (the
        #: tube was used or watched here): look before dropping it.
        self.unsure = False
        #: The node's event count when ``has_jobs`` was last set (see reconcile).
        self.seen = 0
        self.total_jobs = 0
        self.cmd_delete = 0
        self.cmd_pause = 0
        #: Bumped whenever jobs may have become ready here: a reserve that
        #: found nothing while it moved tries again.
        self.events = 0
        #: ``events`` when a reserve statement last found no ready job here
        #: (-1: none did): while they are equal the tube holds none.
        self.empty_at = -1
        # Job counts and pause as last read from the database (inspection).
        self.urgent_count = 0
        self.ready_count = 0
        self.reserved_count = 0
        self.delayed_count = 0
        self.buried_count = 0
        self.pause = 0
        self.unpause_at = 0.0

    @property
    def referenced(self) -> bool:
        return bool(self.using_count or self.watching_count or self.waiting)

    @property
    def unused(self) -> bool:
        return not (self.has_jobs or self.referenced)


class TubeRegistry:
    """The node's tubes (a part of the engine; see the module docstring).
    Its :meth:`drop_tube_if_unused` refines the base registry's
    (``core.sessions.SessionRules``, after it among the engine's bases)."""

    tubes: Dict[bytes, NodeTube]
    tube_list: List[NodeTube]
    _epoch: int
    default_tube: NodeTube
    node_id: Optional[int]
    db: Any
    upkeep: Any

    def new_tube(self, name: bytes) -> NodeTube:
        """A tube new to this node (the base keeps the registry: core/sessions.py)."""
        return NodeTube(name)

    def _has_jobs(self, t: NodeTube) -> None:
        """The database holds jobs of ``t`` (a put through this node, a job seen)."""
        self._epoch += 1
        t.has_jobs = True
        t.unsure = False
        t.seen = self._epoch

    def _settle(self, name: bytes, jobs: bool) -> None:
        """A look at the database found tube ``name`` holds ``jobs``: an
        unsure tube (see ``delete_many``) nobody here keeps and holding none
        is dropped now, before the answer that looked."""
        t = self.tubes.get(name)
        if t is not None and t.unsure and not jobs and not t.referenced:
            t.has_jobs = t.unsure = False
            self.drop_tube_if_unused(t)

    def reconcile(self, with_jobs: Iterable[bytes], elsewhere: Iterable[bytes],
                  since: Optional[int] = None) -> None:
        """Bring the tube list in line with the database: ``with_jobs`` are
        the tubes holding jobs, ``elsewhere`` those other nodes' sessions use
        or watch, as read when the node's event count was ``since`` (an
        ``unsure`` tube's delete was answered before: see ``delete_many``).  Tubes
        nobody keeps are dropped (in list order); tubes new to this node are
        appended (in name order)."""
        jobs: Set[bytes] = set(with_jobs)
        others: Set[bytes] = set(elsewhere)
        for t in list(self.tube_list):
            if t.name in jobs:
                t.has_jobs = True
            elif t.has_jobs and (since is None or t.seen < since or t.unsure):
                t.has_jobs = t.unsure = False
        for t in [t for t in self.tube_list if t.unused and t.name not in others]:
            self.drop_tube_if_unused(t)
        for name in sorted((jobs | others) - set(self.tubes)):
            t = self.tube(name)
            if name in jobs:
                t.has_jobs = True

    def drop_tube_if_unused(self, t: NodeTube) -> None:
        """Forget tube ``t`` if nothing keeps it; if only ``has_jobs`` keeps
        it and a delete did not look whether jobs remain (``unsure``), look
        first (see ``delete_many``)."""
        if (t.unsure and t.has_jobs and not t.referenced and t.index >= 0
                and t is not self.default_tube):
            self._look_again(t.name)
        else:
            super().drop_tube_if_unused(t)

    def _look_again(self, name: bytes) -> None:
        """Whether tube ``name`` still holds jobs, in the background: drop it
        if not (unless a job was seen meanwhile), add it if so, unless the
        node dropped it while the look was out (a later delete found it
        empty: the look read the database before that delete committed)."""
        if self.node_id is None or not self.db.up:
            return
        since = self._epoch
        known = name in self.tubes

        def looked(rows: Any) -> None:
            t = self.tubes.get(name)
            if rows[0][0]:
                if t is None and not known:
                    self._has_jobs(self.tube(name))
                return
            if t is not None and t.seen <= since:
                self._settle(name, False)
        self.db.execute("tube_has_jobs", [name]).addCallbacks(looked, self.upkeep.failed)

    def referenced_tubes(self) -> Dict[str, List[int]]:
        """This node's figures per tube, published with its heartbeat:
        ``[using, watching, waiting, total-jobs, cmd-delete, cmd-pause-tube]``."""
        return {t.name.decode("ascii"): [t.using_count, t.watching_count, len(t.waiting),
                                         t.total_jobs, t.cmd_delete, t.cmd_pause]
                for t in self.tube_list
                if t.referenced or t.total_jobs or t.cmd_delete or t.cmd_pause}


__all__ = ["NodeTube", "TubeRegistry"]
