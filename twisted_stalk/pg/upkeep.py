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
"""
from __future__ import annotations

import heapq
import json
import socket
from typing import Any, Dict, List, Optional, Tuple

from twisted.internet import defer, task
from twisted.logger import Logger

from ..core.outcomes import INTERNAL_ERROR
from ..protocol.commands import COUNTED_COMMANDS
from ..wording import counted
from .batch import text_array
from .notices import DelayedDue, JobsReady, NodeHere, Notice, decode, merged, payload_array
from .sql import session_name, session_tag

log = Logger(namespace="twisted_stalk.pg")

#: Stale TTR entries tolerated beyond the live ones before a compaction.
_TTR_SLACK = 64


def _timed(entry: Tuple[float, int, Any]) -> bool:
    """Whether a ``ttr_heap`` entry still times a reservation: its session
    is open and holds the job with that deadline."""
    deadline, job_id, s = entry
    job = s.reserved.get(job_id)
    return job is not None and job.deadline_at == deadline and not s.closed


class Upkeep:
    """Timers, heartbeat and notifications (a part of :class:`~.engine.PgEngine`)."""

    def _init_upkeep(self) -> None:
        #: (deadline_at, job id, session) of the reservations this node times;
        #: an entry goes stale when its job is deleted, released, buried,
        #: touched or given back, and the heap is compacted once it holds
        #: more than ``_ttr_bound`` entries (see :meth:`_schedule_ttr`).
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
        self._timer = None
        self._timer_at = float("inf")
        now = self._now()
        self._waits_due(now)
        self._ttrs_due(now)
        pauses = self.pause_heap
        while pauses and pauses[0][0] <= now:
            _, name = heapq.heappop(pauses)
            t = self.tubes.get(name)
            if t is not None:
                self._jobs_ready(t, len(t.waiting))
        if self._delay_at is not None and self._delay_at <= now:
            self._delay_at = None
            self._promote()
        self._deliver()
        self._rearm()

    def _rearm(self) -> None:
        candidates = []
        if self.wait_heap:
            candidates.append(self.wait_heap[0][0])
        if self.ttr_heap:
            candidates.append(self.ttr_heap[0][0])
        if self.pause_heap:
            candidates.append(self.pause_heap[0][0])
        if self._delay_at is not None:
            candidates.append(self._delay_at)
        if candidates:
            self.arm(min(candidates))

    def _schedule_ttr(self, s: Any, job: Any) -> None:
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

    def _delayed_due_in(self, seconds: float, tell: bool = True) -> None:
        """A delayed job is due ``seconds`` from now (tell other nodes)."""
        at = self._now() + max(0.0, seconds) + 0.002
        if self._delay_at is None or at < self._delay_at:
            self._delay_at = at
            self.arm(at)
        if tell:
            self._note(DelayedDue(self.node_id, max(0.0, seconds)))

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
        if self._expiring and due is None:
            return
        self._expiring = True
        d = self.db.execute("expire")

        def expired(rows: Any) -> Any:
            self._expiring = False
            self.job_timeouts += len(rows)
            by_conn = self._by_conn
            for job_id, _, node, conn in rows:
                if node == self.node_id:  # connection 0: the take, or handed from it
                    s = by_conn.get(conn) if conn else self.job_holder(job_id)
                    if s is not None:
                        s.reserved.pop(job_id, None)
                    elif not conn:
                        self.taking.claim(job_id)
                if due:
                    due.pop(job_id, None)
            self._tubes_ready([(r[1],) for r in rows])
            if due:
                return self._check_held(due)
            return None

        def failed(failure: Any) -> None:
            self._expiring = False
            self._failed(failure)
            if due:  # try again shortly
                for job_id, s in due.items():
                    job = s.reserved.get(job_id)
                    if job is not None:
                        heapq.heappush(self.ttr_heap, (job.deadline_at, job_id, s))
                self.arm(self._now() + 0.5)
        d.addCallbacks(expired, failed)

    def _check_held(self, due: Dict[int, Any]) -> defer.Deferred:
        ids = "{" + ",".join(str(i) for i in due) + "}"
        d = self.db.execute("still_held", [ids.encode(), self.node_id])

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
                    self._schedule_ttr(s, job)
            self._deliver()
        return d.addCallbacks(held, self._failed)

    def _promote(self) -> None:
        if self._promoting:
            return
        self._promoting = True

        def promoted(rows: Any) -> Any:
            self._promoting = False
            self._tubes_ready(rows)
            return self.db.execute("next_delayed").addCallback(self._next_delayed)

        def failed(failure: Any) -> None:
            self._promoting = False
            self._failed(failure)
            self._delayed_due_in(0.5, tell=False)
        self.db.execute("promote").addCallbacks(promoted, failed).addErrback(self._failed)

    def _next_delayed(self, rows: Any) -> None:
        left = rows[0][0] if rows else None
        if left is not None:
            self._delay_at = None
            self._delayed_due_in(left, tell=False)

    # ------------------------------------------------------------ ready jobs

    def _ready_by_name(self, name: bytes, count: int = 1, told: bool = False) -> None:
        """``count`` jobs became ready in tube ``name`` through this node
        (``told``: the statement that made them ready notified the others)."""
        t = self.tubes.get(name)
        if t is not None:
            self._jobs_ready(t, count)
        if not told:
            self._note(JobsReady(self.node_id, name, count))

    # ------------------------------------------------------------ notifications

    def _note(self, notice: Notice) -> None:
        self._notes.append(notice)
        if self._notes_call is None:
            self._notes_call = self.reactor.callLater(0, self._send_notes)

    def _send_notes(self) -> None:
        self._notes_call = None
        notes, self._notes = self._notes, []
        if notes and not self._alone:
            self._notify(merged(notes))

    @property
    def _alone(self) -> bool:
        """No other node is known (see the module docstring; stats.py keeps what it knows)."""
        return self.statistics.alone

    def _notify(self, notes: List[Notice]) -> None:
        self.db.execute("notify", [self.channel.encode(),
                                   payload_array(notes)]).addErrback(self._failed)

    def _event(self, payload: bytes) -> None:
        """A notification from a node (see the module docstring)."""
        notice = decode(payload)
        if notice is None or notice.node == self.node_id:
            return
        self.statistics.noticed()
        if isinstance(notice, NodeHere):
            return
        if isinstance(notice, JobsReady):
            t = self.tubes.get(notice.tube)
            if t is not None:
                self._jobs_ready(t, notice.count)
        elif isinstance(notice, DelayedDue):
            self._delayed_due_in(notice.seconds, tell=False)
        else:
            t = self.tubes.get(notice.tube)
            if t is not None:
                if notice.seconds > 0:  # paused: its taken jobs go back
                    self.taking.give_back([t.name])
                self._pause_ends_in(t, notice.seconds)
        self._deliver()

    def _pause_ends_in(self, t: Any, seconds: float) -> None:
        if seconds <= 0:
            self._jobs_ready(t, len(t.waiting))
            return
        at = self._now() + seconds + 0.002
        heapq.heappush(self.pause_heap, (at, t.name))
        self.arm(at)

    def _resync(self) -> None:
        """Notifications may have been missed (a connection came back): look
        again, and tell the other nodes this one is there."""
        self._notify([NodeHere(self.node_id)])
        for t in list(self.tube_list):
            self._jobs_ready(t, len(t.waiting))
        self._beat()
        self._deliver()

    # ------------------------------------------------------------ heartbeat

    def _start_heartbeat(self) -> None:
        self._heartbeat = task.LoopingCall(self._beat)
        self._heartbeat.clock = self.reactor
        self._heartbeat.start(self.config.heartbeat, now=False)

    def figures(self) -> Dict[str, int]:
        """This node's counters, as published to the other nodes."""
        out = {"cmd-" + name: self.cmd_counts[name] for name in COUNTED_COMMANDS}
        out.update({
            "job-timeouts": self.job_timeouts, "total-jobs": self.total_jobs,
            "total-connections": self.total_connections,
            "current-connections": self.current_connections,
            "current-producers": self.producers, "current-workers": self.workers,
            "current-waiting": self.waiting_count,
        })
        return out

    def _beat(self) -> None:
        if self._beating or self.node_id is None:
            return
        self._beating = True
        self._beats += 1
        db = self.db
        since = self._epoch
        # The heartbeat first: a node back from an outage must renew its own
        # row before it looks for silent nodes, or it would find itself.
        d = db.execute("heartbeat", [self.node_id, json.dumps(self.figures()).encode(),
                                     json.dumps(self.referenced_tubes()).encode()])
        d.addCallback(self._alive, self._now())
        d.addCallback(lambda _: self._sweeps(since))

        def done(results: Any) -> None:
            self._beating = False
            ok = all(success for success, _ in results)
            if ok and self._failures:
                log.info("database reachable again")
                self._failures = 0
            if ok:
                self.taking.heal()
            self._deliver()

        def failed(failure: Any) -> None:
            self._healthy_since = None
            self._failed(failure)
            done([(False, failure)])
        d.addCallbacks(done, failed)

    def _sweeps(self, since: int) -> defer.Deferred:
        """The heartbeat's reads and sweeps, pipelined."""
        db = self.db
        st = self.statistics
        steps = []
        healthy = self._healthy_since
        if healthy is not None and self._now() - healthy >= self.config.dead_after:
            # Only a node that has reached the database for a while judges
            # others: after an outage every node gets stalk_dead_after to
            # come back before its reservations are given up.
            steps.append(db.execute("reclaim", [b"%f" % self.config.dead_after, self.node_id,
                                                session_tag(self.config.schema).encode()]
                                    ).addCallback(self._reclaimed))
        steps += [
            db.execute("promote").addCallback(self._tubes_ready),
            db.execute("next_delayed").addCallback(self._next_delayed),
            db.execute("paused").addCallback(self._paused),
            db.execute("others", [self.node_id]).addCallback(st.read_others, st.heard),
            db.execute("retired").addCallback(st.read_retired),
            db.execute("tubes_with_jobs").addCallback(
                lambda rows: self.reconcile([r[0] for r in rows], st.elsewhere(), since)),
        ]
        self._expire()
        if self._beats % 10 == 0 or self._beats - self._reclaimed_at <= 10:
            # A dead node's last statements may commit after its reservations
            # were given back: look for reservations of no node for a while.
            steps.append(db.execute("orphans").addCallback(self._tubes_ready))
        if st.inspected():
            # Counting reads every job: only for a node whose figures are read.
            steps.append(db.execute("counts_all").addCallback(st.read_counts))
            steps.append(db.execute("tube_counts").addCallback(st.read_tube_counts))
        waited = [t.name for t in self.tube_list if t.waiting]
        if waited:
            steps.append(db.execute("ready_among", [text_array(waited)]).addCallback(
                self._missed_ready))
        return defer.DeferredList(steps, consumeErrors=True)

    def _missed_ready(self, rows: Any) -> None:
        """Tubes with a ready job while reserves here wait on them: whatever
        wake-up should have come was lost, so try those reserves again."""
        for (name,) in rows:
            t = self.tubes.get(name)
            if t is not None and t.waiting:
                self._jobs_ready(t, len(t.waiting))

    def _reclaimed(self, rows: Any) -> None:
        if rows:
            self._reclaimed_at = self._beats
            nodes = sum(1 for r in rows if r[0] is None)
            jobs = len(rows) - nodes
            log.warn("gave up on {silent}: {returned} back to ready, their database "
                     "sessions ended", silent=counted(nodes, "silent node"),
                     returned=counted(jobs, "reservation"), nodes=nodes, jobs=jobs)
        self._tubes_ready([r for r in rows if r[0] is not None])

    def _alive(self, rows: Any, sent_at: float) -> None:
        if rows:
            now = self._now()
            if now - sent_at > self.config.dead_after / 2:
                # A heartbeat that took this long crossed an outage or a
                # stall: the other nodes may not have caught up yet.
                self._healthy_since = None
            elif self._healthy_since is None:
                self._healthy_since = now
            return
        # Given up on by the other nodes: they gave our reservations back.
        log.warn("node {node} was given up on by the other nodes (no heartbeat for "
                 "{dead} s): its reservations went back to ready; registering anew",
                 node=self.node_id, dead=self.config.dead_after)
        for s in list(self.sessions):
            s.reserved.clear()
            s.ttr_heap.clear()
        self.taking.forget()
        self.db.execute("register", [socket.gethostname().encode(), self.facts.pid()]
                        ).addCallbacks(self._registered, self._failed)

    def _registered(self, rows: Any) -> None:
        self.node_id = rows[0][0]
        self._name_sessions()

    def _name_sessions(self) -> None:
        """Name this node's database sessions after its id (``application_name``,
        :func:`~.sql.session_name`), so that other nodes that give it up end
        them: the connections to come at connect, those up now at once."""
        name = session_name(self.config.schema, self.node_id)
        self.db.settings["application_name"] = name
        self.notifications.settings["application_name"] = name
        conns = list(self.db.up)
        listen = self.notifications.conn
        if listen is not None and listen.ready and not listen.lost:
            conns.append(listen)
        for conn in conns:  # those still connecting apply it when they are up
            conn.apply_settings().addErrback(self._failed)

    def _paused(self, rows: Any) -> None:
        now = self._now()
        for name, left in rows:
            t = self.tubes.get(name)
            if t is not None and left > 0:
                at = now + left + 0.002
                if not any(n == name and abs(a - at) < 0.5 for a, n in self.pause_heap):
                    heapq.heappush(self.pause_heap, (at, name))
                    self.arm(at)

    def _failed(self, failure: Any) -> None:
        """A background statement failed (the database is away): log it once."""
        self._failures += 1
        if self._failures == 1:
            log.warn("database statement failed: {why}", why=failure.getErrorMessage())

    def internal_error(self, failure: Any) -> Any:
        """A command's statement failed: log it (once), answer INTERNAL_ERROR."""
        self._failed(failure)
        return INTERNAL_ERROR


__all__ = ["Upkeep"]
