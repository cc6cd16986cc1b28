# -*- test-case-name: tests.test_pg_wire,tests.test_engine_contract -*-
"""A worker's delete carries its next job.

A worker that deletes its job and then reserves the next costs two
statements and two commits per job.  When a session's pattern shows that it
will reserve right after its delete (its last deletes were each followed by
a reserve, it watches one tube), the delete's statement (``delete_many``)
also takes the best ready job of that tube for it (``FOR UPDATE SKIP
LOCKED``, reserved by (node, connection 0): the node's take) and the reserve
that follows is answered from the node, without a statement.

The take is bounded by demand: one job per such delete, and a session has at
most one outstanding (``expect``) until its next reserve.  Jobs taken but
not asked for go back to ready, in one statement, after ``stalk_take_hold``
seconds, and at once when the node holds (a graceful stop), when the tube is
paused, when the jobs' order may no longer be beanstalkd's (below), when a
session that was to ask closes; if the node dies they are reclaimed with its
other reservations.  A take whose answer was lost (its connection broke as
it committed) or whose give-back failed is healed by the next heartbeat
after it (``return_lost_takes``: the node's take jobs it does not know of).

A put whose own session will reserve it (its last puts were each followed
by a reserve, and it watches the one tube it uses, as a closed loop does) is
taken the same way by the put's statement (``put_many``), where no ready job
of the tube is as good (so priorities stay global); it never becomes ready
in the database, and its session's reserve is answered by the node.

Order, on one node exactly beanstalkd's: the taken jobs of a tube were its
best ready jobs when the statement ran, and they are handed out best first
to whichever session of the node reserves on that tube next.  Anything that
may have made a job ready in the tube since the take went out (a put,
release, kick, delay or TTR ending, a give-back or pause ending, here or on
another node as far as it told this one: each bumps the tube's ``events``)
makes the taken jobs invalid: they go back and the reserve goes to the
database.  A reserve watching several tubes, one of which has taken jobs,
gives those back first, and so do the tube's waiting reserves.  Across nodes
a taken job is hidden from the others until handed out or given back: at
most the hold (docs/ha.md).

Fencing: every reservation carries its ``reserves`` count as a token (each
reservation raises it; a take given back lowers it again, so a handed-out
token is never seen twice); release, bury, touch and delete carry the token
their session holds and the statement checks it.
"""
from __future__ import annotations

import heapq
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Set, Tuple
from typing import Protocol as _Interface

from twisted.internet import defer

from .batch import int_array

if TYPE_CHECKING:  # pragma: no cover
    from .connections import Connections
    from .tubes import NodeTube
    from .upkeep import Upkeep
    from .waiting import Reserver

#: Deletes in a row each followed by a reserve before a session's delete takes a job.
STREAK = 2


class _Taken:
    """One tube's taken jobs: the tube record and its ``events`` when taken."""

    __slots__ = ("tube", "mark", "heap", "expecting")

    def __init__(self, tube: Any, mark: int) -> None:
        self.tube = tube
        self.mark = mark
        #: (pri, id, taken at, row) with row (id, body, ttr, pri, tube, left, reserves).
        self.heap: List[Tuple[int, int, float, Tuple[Any, ...]]] = []
        #: Sessions whose delete took for this tube and that have not reserved since.
        self.expecting = 0


class TakingHost(_Interface):
    """What :class:`Taking` uses of the engine, and through it of the other parts."""

    reactor: Any
    db: "Connections"
    node_id: Optional[int]
    held: bool
    tubes: Dict[bytes, "NodeTube"]
    sessions: Set[Any]
    #: The other parts: the reserver (``tubes_ready``), the upkeep (``failed``).
    reserver: "Reserver"
    upkeep: "Upkeep"
    # The shared base's (core.sessions.SessionRules).
    _now: Callable[[], float]


class Taking:
    """The node's taken jobs (a part of :class:`~.engine.PgEngine`; see the module docstring)."""

    def __init__(self, engine: TakingHost, hold: float) -> None:
        self.engine = engine
        #: Seconds a taken job waits to be asked for (0: never take).
        self.hold = hold
        self.by_tube: Dict[bytes, _Taken] = {}
        self._call: Any = None
        #: Jobs taken, handed out without a statement, given back (counters).
        self.taken = self.handed = self.returned = 0
        #: Statements out that take; a take or give-back failed (look: :meth:`heal`).
        self.out = 0
        self.unsure = False

    # ------------------------------------------------------------ the delete's side

    def wants(self, items: List[Any]) -> Tuple[List[bytes], List[int], Dict[bytes, Tuple[Any, int]]]:
        """For a delete batch (job id, session, token, ...): the tubes to take
        for, how many in each, and each tube's record and ``events`` now."""
        e = self.engine
        counts: Dict[bytes, int] = {}
        marks: Dict[bytes, Tuple[Any, int]] = {}
        if not self.hold or e.held:
            return [], [], marks
        for _, s, *_ in items:
            if s.streak < STREAK or s.expect is not None or len(s.watch) != 1 or s.closed:
                continue
            t = s.watch[0]
            if t.waiting:
                continue
            counts[t.name] = counts.get(t.name, 0) + 1
            marks[t.name] = self._expect(s, t)
        names = list(counts)
        return names, [counts[n] for n in names], marks

    def wants_put(self, s: Any, delay: int) -> Optional[Tuple[Any, int]]:
        """Whether session ``s``'s put is to be taken for its own next reserve
        (its last puts were each followed by a reserve, it watches the one
        tube it uses, where no reserve of the node waits): the tube's record
        and ``events`` now, or None."""
        t = s.use
        if (not self.hold or self.engine.held or delay or s.put_streak < STREAK
                or s.expect is not None or s.closed or len(s.watch) != 1
                or s.watch[0] is not t or t.waiting):
            return None
        return self._expect(s, t)

    def _expect(self, s: Any, t: Any) -> Tuple[Any, int]:
        """``s`` is to reserve on ``t`` what is taken for it now."""
        s.expect = t.name
        entry = self.by_tube.get(t.name)
        if entry is None:
            self.by_tube[t.name] = entry = _Taken(t, t.events)
        entry.expecting += 1
        return t, t.events

    def took(self, rows: List[Tuple[Any, ...]], marks: Dict[bytes, Tuple[Any, int]]) -> None:
        """A delete batch took ``rows`` (id, tube, body, ttr, pri, left,
        reserves): keep those whose tube saw nothing since the take went out,
        give back the others."""
        e = self.engine
        now = e._now()
        back: List[Tuple[int, int]] = []
        for row in rows:
            name = row[1]
            tube, mark = marks[name]
            entry = self.by_tube.get(name)
            if (e.held or tube.events != mark or e.tubes.get(name) is not tube
                    or tube.waiting):
                back.append((row[0], row[6]))
                continue
            if entry is None:
                self.by_tube[name] = entry = _Taken(tube, mark)
            elif entry.tube is not tube or entry.mark != mark:
                if entry.heap:  # older takes whose order no longer holds
                    back.extend((r[1], r[3][6]) for r in entry.heap)
                    entry.heap = []
                entry.tube, entry.mark = tube, mark
            self.taken += 1
            heapq.heappush(entry.heap, (row[4], row[0], now,
                                        (row[0], row[2], row[3], row[4], name, row[5], row[6])))
        if back:
            self._return(back)
        if self.by_tube and self._call is None:
            self._call = e.reactor.callLater(self.hold, self._expire)

    # ------------------------------------------------------------ the reserve's side

    def hand(self, s: Any) -> Optional[Tuple[int, int, float, Tuple[Any, ...]]]:
        """The job for session ``s``'s reserve from the take, or None: (pri,
        id, taken at, row) with row (id, body, ttr, pri, tube, time left then,
        reserves); the reserver makes it ``s``'s.  Taken jobs that may no
        longer be the best go back (see :meth:`stale`)."""
        self.asked(s)
        if len(s.watch) != 1:
            return None
        t = s.watch[0]
        entry = self.by_tube.get(t.name)
        if entry is None or not entry.heap:
            return None
        if entry.tube is not t or entry.mark != t.events:
            return None
        self.handed += 1
        return heapq.heappop(entry.heap)

    def ready_behind(self, t: Any, pri: int, job_id: int, made_ready: Any) -> None:
        """Job ``job_id`` of priority ``pri`` became ready in tube ``t``
        through this node (a put or release answered): ``made_ready()`` moves
        the tube's ``events``, which makes its taken jobs invalid, unless this
        job comes after every one of them (priority, then id): then they are
        still the tube's best and stay valid."""
        entry = self.by_tube.get(t.name)
        keep = (entry is not None and entry.heap and entry.tube is t
                and entry.mark == t.events and max(entry.heap)[:2] < (pri, job_id))
        made_ready()
        if keep:
            entry.mark = t.events

    def claim(self, job_id: int) -> Optional[Tuple[Any, ...]]:
        """Take job ``job_id`` out of the node's take (a ``delete`` or
        ``reserve-job`` of it on this node, where it is a ready job): its row,
        or None if it is not there."""
        for entry in self.by_tube.values():
            for n, item in enumerate(entry.heap):
                if item[1] == job_id:
                    entry.heap[n] = entry.heap[-1]
                    entry.heap.pop()
                    heapq.heapify(entry.heap)
                    return item[3]
        return None

    def unclaim(self, row: Tuple[Any, ...]) -> None:
        """A claimed job's statement failed: it goes back to ready."""
        self._return([(row[0], row[6])])

    def asked(self, s: Any) -> None:
        """Session ``s`` reserves: what was taken for it is no longer expected."""
        if s.expect is not None:
            entry = self.by_tube.get(s.expect)
            if entry is not None and entry.expecting:
                entry.expecting -= 1
            s.expect = None

    def stale(self, s: Any) -> Optional[defer.Deferred]:
        """If a watched tube of ``s`` holds taken jobs that ``s`` cannot be
        handed (they may no longer be the best, or ``s`` watches several
        tubes), give them back: a Deferred that fires once they are ready."""
        names = [t.name for t in s.watch
                 if t.name in self.by_tube and self.by_tube[t.name].heap]
        if not names:
            return None
        return self.give_back(names)

    # ------------------------------------------------------------ giving back

    def give_back(self, names: Optional[List[bytes]] = None) -> defer.Deferred:
        """Every taken job of ``names`` (None: all) goes back to ready."""
        jobs = []
        for name in list(self.by_tube) if names is None else names:
            entry = self.by_tube.get(name)
            if entry is not None and entry.heap:
                jobs.extend((r[1], r[3][6]) for r in entry.heap)
                entry.heap = []
        return self._return(jobs)

    def forgo(self, s: Any) -> None:
        """Session ``s`` will not ask for what was taken for it (it closed,
        or nothing was taken): a job taken for it goes back if no other
        session is to ask for it."""
        if s.expect is None:
            return
        entry = self.by_tube.get(s.expect)
        s.expect = None
        if entry is None:
            return
        entry.expecting = max(0, entry.expecting - 1)
        if len(entry.heap) > entry.expecting:
            worst = max(entry.heap)
            entry.heap.remove(worst)
            heapq.heapify(entry.heap)
            self._return([(worst[1], worst[3][6])])

    def forget(self) -> None:
        """This node's reservations are gone (it was given up on): so are its takes."""
        self.by_tube.clear()

    def _expire(self) -> None:
        """Taken jobs older than the hold go back; tubes with none left are forgotten."""
        self._call = None
        e = self.engine
        cutoff = e._now() - self.hold
        jobs = []
        soonest = None
        for name, entry in list(self.by_tube.items()):
            keep = []
            for item in entry.heap:
                if item[2] <= cutoff:
                    jobs.append((item[1], item[3][6]))
                else:
                    keep.append(item)
                    soonest = item[2] if soonest is None else min(soonest, item[2])
            if len(keep) != len(entry.heap):
                heapq.heapify(keep)
                entry.heap = keep
            if not keep:  # (a session that never asks keeps no timer going)
                del self.by_tube[name]
        if jobs:
            self._return(jobs)
        if self.by_tube:
            wait = self.hold if soonest is None else max(0.001, soonest + self.hold - e._now())
            self._call = e.reactor.callLater(wait, self._expire)

    def _return(self, jobs: List[Tuple[int, int]]) -> defer.Deferred:
        """Jobs (id, reservation) go back to ready, in one statement."""
        e = self.engine
        if not jobs:
            return defer.succeed(None)
        self.returned += len(jobs)
        if e.node_id is None:
            return defer.succeed(None)
        # (While the database is away this waits for it, as a command does.)
        d = e.db.execute("return_taken", [int_array([j for j, _ in jobs]),
                                          int_array([t for _, t in jobs]), e.node_id])

        def failed(failure: Any) -> None:
            self.unsure = True  # heal() gives them back
            e.upkeep.failed(failure)
        return d.addCallbacks(e.reserver.tubes_ready, failed)

    def started(self) -> None:
        """A statement that takes went out."""
        self.out += 1

    def ended(self, failed: bool = False) -> None:
        """It answered (``failed``: it may have committed unseen)."""
        self.out -= 1
        self.unsure = self.unsure or failed

    def heal(self) -> Optional[defer.Deferred]:
        """After a failure, when no take is out (the heartbeat calls this):
        this node's take jobs it does not know of go back to ready (a
        Deferred that fires once they are; None: nothing to do)."""
        e = self.engine
        if not self.unsure or self.out or e.node_id is None or not e.db.up:
            return None
        self.unsure = False
        known = [item[1] for entry in self.by_tube.values() for item in entry.heap]
        known += [job_id for s in e.sessions for job_id in s.reserved]
        return e.db.execute("return_lost_takes", [e.node_id, int_array(known)]).addCallbacks(
            e.reserver.tubes_ready, self._heal_failed)

    def _heal_failed(self, failure: Any) -> None:
        self.unsure = True
        self.engine.upkeep.failed(failure)

    def stop(self) -> None:
        if self._call is not None and self._call.active():
            self._call.cancel()
        self._call = None


__all__ = ["STREAK", "Taking", "TakingHost"]
