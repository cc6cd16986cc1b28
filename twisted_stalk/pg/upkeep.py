# -*- test-case-name: tests.test_pg_wire,tests.test_pg_nodes -*-
"""A node's timers, heartbeat and notifications: what happens between commands.

**Timers.**  The node keeps one ``callLater`` at the earliest of: a waiting
reserve's timeout or DEADLINE_SOON, the TTR of a job one of its sessions
holds, the end of a pause it knows of, the next delayed job it knows of.
When a TTR runs out the node runs the ``expire`` statement, which returns
*every* reservation past its deadline to ready, whoever holds it: the first
node to get there does it, exactly once (row locks), and counts it in its
``job-timeouts``.  The node then asks which of its own due reservations it
still holds (another node may have expired them first) and forgets the rest.
Delayed jobs become ready the same way (``promote``), by whichever node's
timer fires first.

**Heartbeat.**  Every ``stalk_heartbeat`` seconds the node updates its row
in ``nodes`` (with the figures other nodes add to their ``stats``), gives
back the reservations of nodes whose last heartbeat is ``stalk_dead_after``
seconds older than its own (once its own heartbeats have gone through, each
promptly, for that long: after an outage or a stall every node gets that
long to come back), runs both sweeps (so deadlines are kept even if the node that would have
timed them is gone), and re-reads the next delayed deadline, the pauses, the
other nodes' figures and which tubes hold jobs, and tries again the waiting
reserves of tubes that hold a ready job (a wake-up lost on the way waits at
most one heartbeat).  A node that finds its own
row gone was given up on while it could not reach the database: its
reservations have been given back, so it forgets them and registers anew.

**Notifications.**  Changes that may wake other nodes' waiting reserves are
sent, batched once per reactor turn, after the statements that made them
committed, as typed values (:mod:`.notices`): ``JobsReady`` (n jobs became
ready in a tube), ``DelayedDue`` (a delayed job is due then), ``PauseEnds``
(a pause ends then).  A node ignores its own, so a node that knows of no
other (its last read of ``nodes`` found none and no other node's notice
came since) sends none: a notice costs a commit.  A node that comes, or
whose LISTEN connection comes back, says ``NodeHere`` first, so the others
notify again at once rather than after their next heartbeat.

:class:`Upkeep` is a part of :class:`~.engine.PgEngine`; what it uses of
the engine and the other parts is :class:`UpkeepHost`.  The others call its
public methods: the reserver ``schedule_ttr``, ``note``, ``failed``; the
engine the rest.
"""
from __future__ import annotations

import heapq
import json
import socket
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, List, Optional, Set, Tuple
from typing import Protocol as _Interface

from twisted.internet import defer, task
from twisted.logger import Logger

from ..core.outcomes import INTERNAL_ERROR
from ..protocol.commands import COUNTED_COMMANDS
from ..wording import counted
from .batch import text_array
from .notices import DelayedDue, JobsReady, NodeHere, Notice, decode, merged, payload_array
from .sql import session_name, session_tag

if TYPE_CHECKING:  # pragma: no cover
    from ..core.facts import Facts
    from .config import EngineConfig
    from .connections import Connections
    from .notifications import Notifications
    from .stats import Stats
    from .taking import Taking
    from .tubes import NodeTube
    from .waiting import Reserver

log = Logger(namespace="twisted_stalk.pg")

#: Stale TTR entries tolerated beyond the live ones before a compaction.
_TTR_SLACK = 64


def _timed(entry: Tuple[float, int, Any]) -> bool:
    """Whether a ``ttr_heap`` entry still times a reservation: its session
    is open and holds the job with that deadline."""
    deadline, job_id, s = entry
    job = s.reserved.get(job_id)
    return job is not None and job.deadline_at == deadline and not s.closed


class UpkeepHost(_Interface):
    """What :class:`Upkeep` uses of the engine, and through it of the other parts."""

    reactor: Any
    config: "EngineConfig"
    db: "Connections"
    notifications: "Notifications"
    channel: str
    node_id: Optional[int]
    facts: "Facts"
    tubes: Dict[bytes, "NodeTube"]
    tube_list: List["NodeTube"]
    sessions: Set[Any]
    by_conn: Dict[int, Any]
    wait_heap: List[Tuple[float, int, Any]]
    cmd_counts: Dict[str, int]
    job_timeouts: int
    total_jobs: int
    total_connections: int
    current_connections: int
    producers: int
    workers: int
    waiting_count: int
    #: The other parts: the reserver (``jobs_ready``, ``tubes_ready``), the
    #: stats part (what the node knows of the others), the take.
    reserver: "Reserver"
    statistics: "Stats"
    taking: "Taking"
    # The shared base's (core.sessions.SessionRules, tubes.TubeRegistry).
    _now: Callable[[], float]
    _epoch: int

    def _waits_due(self, now: float) -> None:
        """End the waiting reserves due by ``now``."""

    def deliver(self) -> None:
        """Hand queued wake-ups to the front end."""

    def job_holder(self, job_id: int) -> Any:
        """The session of this node holding ``job_id``, or None."""

    def reconcile(self, with_jobs: Iterable[bytes], elsewhere: Iterable[bytes],
                  since: Optional[int] = None) -> None:
        """Bring the tube list in line with the database."""

    def referenced_tubes(self) -> Dict[str, List[int]]:
        """This node's figures per tube."""


class Upkeep:
    """Timers, heartbeat and notifications (a part of :class:`~.engine.PgEngine`)."""

    def __init__(self, engine: UpkeepHost) -> None:
        self.engine = engine
        self.reactor = engine.reactor
        self._now = engine._now
        #: (deadline_at, job id, session) of the reservations this node times;
        #: an entry goes stale when its job is deleted, released, buried,
        #: touched or given back, and the heap is compacted once it holds
        #: more than ``_ttr_bound`` entries (see :meth:`schedule_ttr`).
        self.ttr_heap: List[Tuple[float, int, Any]] = []
        self._ttr_bound = _TTR_SLACK
        self.pause_heap: List[Tuple[float, bytes]] = []
        #: When the next delayed job is due, as far as this node knows (local clock).
        self._delay_at: Optional[float] = None
        self._timer: Any = None
        self._timer_at = float("inf")
        self._notes: List[Notice] = []
        self._notes_call: Any = None
        self._beating = False
        self._expiring = False
        self._promoting = False
        self._beats = 0
        self._reclaimed_at = -100
        #: Since when (local clock) this node's heartbeats have all succeeded.
        self._healthy_since: Optional[float] = None
        self._heartbeat: Optional[task.LoopingCall] = None
        self._failures = 0

    # ------------------------------------------------------------ the timer

    def arm(self, when: float) -> None:
        """Make sure the timer fires no later than ``when`` (local clock)."""
        if when >= self._timer_at:
            return
        self._timer_at = when
        delay = max(0.0, when - self._now())
        timer = self._timer
        if timer is not None and timer.active():
            timer.reset(delay)
        else:
            self._timer = self.reactor.callLater(delay, self._fire)

    def _fire(self) -> None:
        e = self.engine
        self._timer = None
        self._timer_at = float("inf")
        now = self._now()
        e._waits_due(now)
        self._ttrs_due(now)
        pauses = self.pause_heap
        while pauses and pauses[0][0] <= now:
            _, name = heapq.heappop(pauses)
            t = e.tubes.get(name)
            if t is not None:
                e.reserver.jobs_ready(t, len(t.waiting))
        if self._delay_at is not None and self._delay_at <= now:
            self._delay_at = None
            self._promote()
        e.deliver()
        self._rearm()

    def _rearm(self) -> None:
        e = self.engine
        candidates = []
        if e.wait_heap:
            candidates.append(e.wait_heap[0][0])
        if self.ttr_heap:
            candidates.append(self.ttr_heap[0][0])
        if self.pause_heap:
            candidates.append(self.pause_heap[0][0])
        if self._delay_at is not None:
            candidates.append(self._delay_at)
        if candidates:
            self.arm(min(candidates))

    def schedule_ttr(self, s: Any, job: Any) -> None:
        """Time the reservation of ``job`` by ``s`` (at its ``deadline_at``).

        Entries are not removed when a reservation ends (a delete would have
        to find its entry): they are skipped when due, and once the heap holds
        more than twice the live entries it had after the last compaction
        (plus some slack) the stale ones are dropped at once.  So the heap
        stays within about twice the reservations this node holds, at an
        amortized constant cost per reservation.  The session's own heap
        (:meth:`~twisted_stalk.core.session.Session.move_deadline`) is
        kept within twice its reservations the same way."""
        heap = self.ttr_heap
        heapq.heappush(heap, (job.deadline_at, job.id, s))
        if len(heap) > self._ttr_bound:
            self._compact_ttrs()
        # A little after the deadline, so the database agrees it has passed.
        self.arm(job.deadline_at + 0.002)

    def _compact_ttrs(self) -> None:
        """Drop the TTR entries of reservations that ended or moved."""
        live = [entry for entry in self.ttr_heap if _timed(entry)]
        heapq.heapify(live)
        self.ttr_heap = live
        self._ttr_bound = 2 * len(live) + _TTR_SLACK

    def delayed_due_in(self, seconds: float, tell: bool = True) -> None:
        """A delayed job is due ``seconds`` from now (tell other nodes)."""
        e = self.engine
        at = self._now() + max(0.0, seconds) + 0.002
        if self._delay_at is None or at < self._delay_at:
            self._delay_at = at
            self.arm(at)
        if tell:
            self.note(DelayedDue(e.node_id, max(0.0, seconds)))

    # ------------------------------------------------------------ sweeps

    def _ttrs_due(self, now: float) -> None:
        heap = self.ttr_heap
        due: Dict[int, Any] = {}
        while heap and heap[0][0] <= now:
            entry = heapq.heappop(heap)
            if _timed(entry):
                due[entry[1]] = entry[2]
        if due:
            self._expire(due)

    def _expire(self, due: Optional[Dict[int, Any]] = None) -> None:
        """Run the expire statement; then check which of ``due`` (this node's
        reservations whose TTR ran out here) are still held."""
        e = self.engine
        if self._expiring and due is None:
            return
        self._expiring = True
        d = e.db.execute("expire")

        def expired(rows: Any) -> Any:
            self._expiring = False
            e.job_timeouts += len(rows)
            by_conn = e.by_conn
            for job_id, _, node, conn in rows:
                if node == e.node_id:  # connection 0: the take, or handed from it
                    s = by_conn.get(conn) if conn else e.job_holder(job_id)
                    if s is not None:
                        s.reserved.pop(job_id, None)
                    elif not conn:
                        e.taking.claim(job_id)
                if due:
                    due.pop(job_id, None)
            e.reserver.tubes_ready([(r[1],) for r in rows])
            if due:
                return self._check_held(due)
            return None

        def failed(failure: Any) -> None:
            self._expiring = False
            self.failed(failure)
            if due:  # try again shortly
                for job_id, s in due.items():
                    job = s.reserved.get(job_id)
                    if job is not None:
                        heapq.heappush(self.ttr_heap, (job.deadline_at, job_id, s))
                self.arm(self._now() + 0.5)
        d.addCallbacks(expired, failed)

    def _check_held(self, due: Dict[int, Any]) -> defer.Deferred:
        e = self.engine
        ids = "{" + ",".join(str(i) for i in due) + "}"
        d = e.db.execute("still_held", [ids.encode(), e.node_id])

        def held(rows: Any) -> None:
            now = self._now()
            still = {job_id: left for job_id, left in rows}
            for job_id, s in due.items():
                job = s.reserved.get(job_id)
                if job is None:
                    continue
                left = still.get(job_id)
                if left is None:
                    del s.reserved[job_id]
                elif not s.closed:
                    # Still ours past its deadline (a row lock made the sweep
                    # skip it): look again shortly, not at once.
                    job.deadline_at = now + max(left, 0.05)
                    s.move_deadline(job_id, job.deadline_at)  # (for DEADLINE_SOON)
                    self.schedule_ttr(s, job)
            e.deliver()
        return d.addCallbacks(held, self.failed)

    def _promote(self) -> None:
        e = self.engine
        if self._promoting:
            return
        self._promoting = True

        def promoted(rows: Any) -> Any:
            self._promoting = False
            e.reserver.tubes_ready(rows)
            return e.db.execute("next_delayed").addCallback(self._next_delayed)

        def failed(failure: Any) -> None:
            self._promoting = False
            self.failed(failure)
            self.delayed_due_in(0.5, tell=False)
        e.db.execute("promote").addCallbacks(promoted, failed).addErrback(self.failed)

    def _next_delayed(self, rows: Any) -> None:
        left = rows[0][0] if rows else None
        if left is not None:
            self._delay_at = None
            self.delayed_due_in(left, tell=False)

    # ------------------------------------------------------------ notifications

    def note(self, notice: Notice) -> None:
        self._notes.append(notice)
        if self._notes_call is None:
            self._notes_call = self.reactor.callLater(0, self.send_notes)

    def send_notes(self) -> None:
        self._notes_call = None
        notes, self._notes = self._notes, []
        if notes and not self.engine.statistics.alone:
            self._notify(merged(notes))

    def _notify(self, notes: List[Notice]) -> None:
        e = self.engine
        e.db.execute("notify", [e.channel.encode(),
                                payload_array(notes)]).addErrback(self.failed)

    def event(self, payload: bytes) -> None:
        """A notification from a node (see the module docstring)."""
        e = self.engine
        notice = decode(payload)
        if notice is None or notice.node == e.node_id:
            return
        e.statistics.noticed()
        if isinstance(notice, NodeHere):
            return
        if isinstance(notice, JobsReady):
            t = e.tubes.get(notice.tube)
            if t is not None:
                e.reserver.jobs_ready(t, notice.count)
        elif isinstance(notice, DelayedDue):
            self.delayed_due_in(notice.seconds, tell=False)
        else:
            t = e.tubes.get(notice.tube)
            if t is not None:
                if notice.seconds > 0:  # paused: its taken jobs go back
                    e.taking.give_back([t.name])
                self.pause_ends_in(t, notice.seconds)
        e.deliver()

    def pause_ends_in(self, t: Any, seconds: float) -> None:
        e = self.engine
        if seconds <= 0:
            e.reserver.jobs_ready(t, len(t.waiting))
            return
        at = self._now() + seconds + 0.002
        heapq.heappush(self.pause_heap, (at, t.name))
        self.arm(at)

    def resync(self) -> None:
        """Notifications may have been missed (a connection came back): look
        again, and tell the other nodes this one is there."""
        e = self.engine
        self._notify([NodeHere(e.node_id)])
        for t in list(e.tube_list):
            e.reserver.jobs_ready(t, len(t.waiting))
        self._beat()
        e.deliver()

    # ------------------------------------------------------------ heartbeat

    def start_heartbeat(self) -> None:
        e = self.engine
        self._heartbeat = task.LoopingCall(self._beat)
        self._heartbeat.clock = self.reactor
        self._heartbeat.start(e.config.heartbeat, now=False)

    def stop_heartbeat(self) -> None:
        if self._heartbeat is not None and self._heartbeat.running:
            self._heartbeat.stop()

    def figures(self) -> Dict[str, int]:
        """This node's counters, as published to the other nodes."""
        e = self.engine
        out = {"cmd-" + name: e.cmd_counts[name] for name in COUNTED_COMMANDS}
        out.update({
            "job-timeouts": e.job_timeouts, "total-jobs": e.total_jobs,
            "total-connections": e.total_connections,
            "current-connections": e.current_connections,
            "current-producers": e.producers, "current-workers": e.workers,
            "current-waiting": e.waiting_count,
        })
        return out

    def _beat(self) -> None:
        e = self.engine
        if self._beating or e.node_id is None:
            return
        self._beating = True
        self._beats += 1
        db = e.db
        since = e._epoch
        # The heartbeat first: a node back from an outage must renew its own
        # row before it looks for silent nodes, or it would find itself.
        d = db.execute("heartbeat", [e.node_id, json.dumps(self.figures()).encode(),
                                     json.dumps(e.referenced_tubes()).encode()])
        d.addCallback(self._alive, self._now())
        d.addCallback(lambda _: self._sweeps(since))

        def done(results: Any) -> None:
            self._beating = False
            ok = all(success for success, _ in results)
            if ok and self._failures:
                log.info("database reachable again")
                self._failures = 0
            if ok:
                e.taking.heal()
            e.deliver()

        def failed(failure: Any) -> None:
            self._healthy_since = None
            self.failed(failure)
            done([(False, failure)])
        d.addCallbacks(done, failed)

    def _sweeps(self, since: int) -> defer.Deferred:
        """The heartbeat's reads and sweeps, pipelined."""
        e = self.engine
        db = e.db
        st = e.statistics
        steps = []
        healthy = self._healthy_since
        if healthy is not None and self._now() - healthy >= e.config.dead_after:
            # Only a node that has reached the database for a while judges
            # others: after an outage every node gets stalk_dead_after to
            # come back before its reservations are given up.
            steps.append(db.execute("reclaim", [b"%f" % e.config.dead_after, e.node_id,
                                                session_tag(e.config.schema).encode()]
                                    ).addCallback(self._reclaimed))
        steps += [
            db.execute("promote").addCallback(e.reserver.tubes_ready),
            db.execute("next_delayed").addCallback(self._next_delayed),
            db.execute("paused").addCallback(self._paused),
            db.execute("others", [e.node_id]).addCallback(st.read_others, st.heard),
            db.execute("retired").addCallback(st.read_retired),
            db.execute("tubes_with_jobs").addCallback(
                lambda rows: e.reconcile([r[0] for r in rows], st.elsewhere(), since)),
        ]
        self._expire()
        if self._beats % 10 == 0 or self._beats - self._reclaimed_at <= 10:
            # A dead node's last statements may commit after its reservations
            # were given back: look for reservations of no node for a while.
            steps.append(db.execute("orphans").addCallback(e.reserver.tubes_ready))
        if st.inspected():
            # Counting reads every job: only for a node whose figures are read.
            steps.append(db.execute("counts_all").addCallback(st.read_counts))
            steps.append(db.execute("tube_counts").addCallback(st.read_tube_counts))
        waited = [t.name for t in e.tube_list if t.waiting]
        if waited:
            steps.append(db.execute("ready_among", [text_array(waited)]).addCallback(
                self._missed_ready))
        return defer.DeferredList(steps, consumeErrors=True)

    def _missed_ready(self, rows: Any) -> None:
        """Tubes with a ready job while reserves here wait on them: whatever
        wake-up should have come was lost, so try those reserves again."""
        e = self.engine
        for (name,) in rows:
            t = e.tubes.get(name)
            if t is not None and t.waiting:
                e.reserver.jobs_ready(t, len(t.waiting))

    def _reclaimed(self, rows: Any) -> None:
        e = self.engine
        if rows:
            self._reclaimed_at = self._beats
            nodes = sum(1 for r in rows if r[0] is None)
            jobs = len(rows) - nodes
            log.warn("gave up on {silent}: {returned} back to ready, their database "
                     "sessions ended", silent=counted(nodes, "silent node"),
                     returned=counted(jobs, "reservation"), nodes=nodes, jobs=jobs)
        e.reserver.tubes_ready([r for r in rows if r[0] is not None])

    def _alive(self, rows: Any, sent_at: float) -> None:
        e = self.engine
        if rows:
            now = self._now()
            if now - sent_at > e.config.dead_after / 2:
                # A heartbeat that took this long crossed an outage or a
                # stall: the other nodes may not have caught up yet.
                self._healthy_since = None
            elif self._healthy_since is None:
                self._healthy_since = now
            return
        # Given up on by the other nodes: they gave our reservations back.
        log.warn("node {node} was given up on by the other nodes (no heartbeat for "
                 "{dead} s): its reservations went back to ready; registering anew",
                 node=e.node_id, dead=e.config.dead_after)
        for s in list(e.sessions):
            s.reserved.clear()
            s.ttr_heap.clear()
        e.taking.forget()
        e.db.execute("register", [socket.gethostname().encode(), e.facts.pid()]
                     ).addCallbacks(self._registered, self.failed)

    def _registered(self, rows: Any) -> None:
        e = self.engine
        e.node_id = rows[0][0]
        self.name_sessions()

    def name_sessions(self) -> None:
        """Name this node's database sessions after its id (``application_name``,
        :func:`~.sql.session_name`), so that other nodes that give it up end
        them: the connections to come at connect, those up now at once."""
        e = self.engine
        name = session_name(e.config.schema, e.node_id)
        e.db.settings["application_name"] = name
        e.notifications.settings["application_name"] = name
        conns = list(e.db.up)
        listen = e.notifications.conn
        if listen is not None and listen.ready and not listen.lost:
            conns.append(listen)
        for conn in conns:  # those still connecting apply it when they are up
            conn.apply_settings().addErrback(self.failed)

    def _paused(self, rows: Any) -> None:
        e = self.engine
        now = self._now()
        for name, left in rows:
            t = e.tubes.get(name)
            if t is not None and left > 0:
                at = now + left + 0.002
                if not any(n == name and abs(a - at) < 0.5 for a, n in self.pause_heap):
                    heapq.heappush(self.pause_heap, (at, name))
                    self.arm(at)

    def failed(self, failure: Any) -> None:
        """A background statement failed (the database is away): log it once."""
        self._failures += 1
        if self._failures == 1:
            log.warn("database statement failed: {why}", why=failure.getErrorMessage())

    def internal_error(self, failure: Any) -> Any:
        """A command's statement failed: log it (once), answer INTERNAL_ERROR."""
        self.failed(failure)
        return INTERNAL_ERROR


__all__ = ["Upkeep"]
