# -*- test-case-name: tests.test_pg_wire,tests.test_pg_nodes -*-
"""Reserves on the PostgreSQL engine: taking a job, waiting for one, waking up.

A reserve runs the ``reserve`` statement for the session's watched tubes.
If it finds nothing the session waits, in the order it came, in each watched
tube's ``waiting`` list.  Whenever jobs may have become ready in a tube (a
put, release, kick or TTR expiry through this node, a notification from
another node, a pause ending), :meth:`Reserver._serve` tries the reserve
again for as many waiting sessions as jobs arrived, first come first; a job
it gets is delivered as a wake-up.

No wake-up is lost to a race: each tube counts its events, a reserve notes
the counts before its statement goes out, and one that found nothing while a
count moved tries again.  A session whose wait ended (timed out, withdrawn,
closed) while its statement was out gives back a job that arrived anyway.

Reserves of one session never overlap (``attempting``); reserve-with-timeout
deadlines and DEADLINE_SOON are timed by the node, as in the in-memory
engine.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Set, Tuple
from typing import Protocol as _Interface

from twisted.internet import defer
from twisted.python.failure import Failure

from ..core.job import READY, RESERVED, JobRecord
from ..core.later import LATER
from ..core.outcomes import DEADLINE_SOON, INTERNAL_ERROR, TIMED_OUT, WAITING
from ..core.session import Session
from ..protocol.constants import SAFETY_MARGIN
from .batch import Batcher, int_array, text_array
from .notices import JobsReady

if TYPE_CHECKING:  # pragma: no cover
    from .connections import Connections
    from .replyhold import ReplyHold
    from .notifications import Notifications
    from .taking import Taking
    from .tubes import NodeTube
    from .upkeep import Upkeep


class PgSession(Session):
    """A client of the PostgreSQL engine: a core session plus its number on this node."""

    __slots__ = ("conn_id", "attempting", "deleted", "streak", "put_before", "put_streak",
                 "expect")

    def __init__(self, frontend: Any, default: Any, conn_id: int) -> None:
        super().__init__(frontend, default)
        #: The connection's number on this node: reservations belong to (node, conn_id).
        self.conn_id = conn_id
        #: True while a reserve statement for this session is out.
        self.attempting = False
        #: A delete came since the last reserve; deletes in a row each
        #: followed by a reserve; the tube its delete took a job for (taking.py).
        self.deleted = False
        self.streak = 0
        #: The same for puts followed by a reserve.
        self.put_before = False
        self.put_streak = 0
        self.expect: Optional[bytes] = None

    def holds_in(self, job_id: int, tubes: Set[bytes]) -> bool:
        """Whether this session holds job ``job_id``, of one of ``tubes``."""
        job = self.reserved.get(job_id)
        return job is not None and job.tube.name in tubes


class ReserverHost(_Interface):
    """What :class:`Reserver` uses of the engine, and through it of the other parts."""

    reactor: Any
    db: "Connections"
    notifications: "Notifications"
    node_id: Optional[int]
    tubes: Dict[bytes, "NodeTube"]
    held: bool
    waiting_count: int
    wakeups: List[Any]
    #: Holds a batch's replies until the next batch's statement left (or None).
    reply_hold: Optional["ReplyHold"]
    #: The other parts: the take (``hand``, ``stale``, ``asked``) and the
    #: timers (``schedule_ttr``, ``note``, ``failed``).
    taking: "Taking"
    upkeep: "Upkeep"
    # The shared base's (core.sessions.SessionRules).
    _now: Callable[[], float]

    def deliver(self) -> None:
        """Hand queued wake-ups to the front end."""

    def _set_worker(self, s: Session) -> None:
        """``s`` reserved: count it as a worker."""

    def _start_waiting(self, s: Session, now: float, timeout: Optional[int]) -> None:
        """``s`` waits in each tube it watches."""

    def _stop_waiting(self, s: Session) -> None:
        """``s`` waits no more."""

    def _track_session_deadline(self, s: Session, job_id: int, deadline: float) -> None:
        """Record a new reservation's deadline in the session's own heap."""


class Reserver:
    """The reserve side of the engine (a part of :class:`~.engine.PgEngine`)."""

    def __init__(self, engine: ReserverHost) -> None:
        self.engine = engine
        # What the per-job paths call, looked up once.
        self._now = engine._now
        self.db = engine.db
        self.tubes = engine.tubes
        self.notifications = engine.notifications
        self.taking = engine.taking
        upkeep = engine.upkeep
        self._schedule_ttr = upkeep.schedule_ttr
        self._note = upkeep.note
        self._failed = upkeep.failed
        self._set_worker = engine._set_worker
        self._track_session_deadline = engine._track_session_deadline
        #: One-tube reserves share a statement (batch.py).
        # A failed batch answers each reserve its Failure (see ``_take``).
        self._reserves = Batcher(engine.reactor, self._reserve_many, lambda failure: failure,
                                hold=engine.reply_hold)
        #: Wake-ups of reserves handed a put's job, sent after the put batch's replies.
        self._handoffs: List[Any] = []

    # ------------------------------------------------------------ the command

    def reserve(self, s: PgSession, timeout: Optional[int], held: bool,
                answer: Callable[[Any], None]) -> Any:
        """A reserve of ``s`` (``timeout``: None, or reserve-with-timeout's);
        ``held``: the engine's ``held``, which the command read.  Its result
        now, or LATER and ``answer(result)`` once (core/later.py)."""
        if not s.is_worker:
            self._set_worker(s)
        s.streak = s.streak + 1 if s.deleted else 0
        s.put_streak = s.put_streak + 1 if s.put_before else 0
        s.deleted = s.put_before = False
        taking = self.taking
        if taking.by_tube:
            if not held and not s.attempting:
                taken = taking.hand(s)
                if taken is not None:  # (pri, id, taken at, row)
                    row = taken[3]
                    job = self.record(row)
                    self.hold(s, job, row[5] - (self._now() - taken[2]))
                    return job
                d = taking.stale(s)
                if d is not None:  # taken jobs that may not be the best go back first
                    def given_back(_: Any) -> None:
                        result = self._reserve_now(s, timeout, self.engine.held, answer)
                        if result is not LATER:
                            answer(result)

                    def failed(failure: Any) -> None:
                        self._failed(failure)
                        answer(INTERNAL_ERROR)
                    d.addCallbacks(given_back, failed)
                    return LATER
            taking.asked(s)
        s.expect = None
        return self._reserve_now(s, timeout, held, answer)

    def _reserve_now(self, s: PgSession, timeout: Optional[int], held: bool,
                     answer: Callable[[Any], None]) -> Any:
        now = self._now()
        soonest = s.soonest_deadline() if s.reserved else None
        deadline_soon = soonest is not None and now >= soonest - SAFETY_MARGIN
        if held or s.attempting or (timeout != 0 and not deadline_soon
                                    and self._known_empty(s)):
            return self._no_job(s, timeout, deadline_soon, None)
        marks = [t.events for t in s.watch]

        def taken(job: Any) -> None:
            if job is INTERNAL_ERROR or job.__class__ is JobRecord:
                answer(job)
            else:
                answer(self._no_job(s, timeout, deadline_soon, marks))
        self._take(s, marks, taken)
        return LATER

    def _no_job(self, s: PgSession, timeout: Optional[int], deadline_soon: bool,
                marks: Optional[List[int]]) -> Any:
        if s.closed:
            return TIMED_OUT
        if deadline_soon:
            return DEADLINE_SOON
        if timeout == 0:
            return TIMED_OUT
        self.engine._start_waiting(s, self._now(), timeout)
        if marks is not None and [t.events for t in s.watch] != marks:
            self._attempt(s)  # jobs came while the statement was out
        return WAITING

    def _known_empty(self, s: PgSession) -> bool:
        """No watched tube of ``s`` can hold a ready job: a reserve statement
        found none in each, and nothing since made one ready (every way a job
        becomes ready, here or on another node, bumps the tube's ``events``;
        a lost notification is caught as for any waiting reserve: the LISTEN
        connection coming back, the heartbeat's ``ready_among``).  A reserve
        that would wait then waits without asking the database."""
        if not self.notifications.listening:
            return False
        for t in s.watch:
            if t.empty_at != t.events:
                return False
        return True

    def _take(self, s: PgSession, marks: List[int], answer: Callable[[Any], None]) -> None:
        """Run the reserve statement for ``s``; ``answer`` gets a JobRecord
        (now held by ``s``), None, or INTERNAL_ERROR.  ``marks``: each
        watched tube's ``events`` as the statement goes out."""
        s.attempting = True
        watch = s.watch

        def result(row: Any) -> Any:
            if row is None:
                for t, mark in zip(watch, marks):
                    if t.events == mark:
                        t.empty_at = mark
                return None
            if row.__class__ is Failure:
                self._failed(row)
                return INTERNAL_ERROR
            for t in watch:  # a job where none was thought to be: forget that
                if t.name == row[4]:
                    t.empty_at = -1
            return self.reserved(s, row)

        def done(row: Any) -> None:  # a row, None, or the statement's Failure
            s.attempting = False
            try:
                outcome = result(row)
            except Exception:  # a bug here answers INTERNAL_ERROR, as a Deferred's would
                self._failed(Failure())
                outcome = INTERNAL_ERROR
            answer(outcome)
        if len(watch) == 1:  # the common case: batched with others (batch.py)
            self._reserves.add((watch[0].name, s.conn_id), done)
        else:
            self.db.execute("reserve", [text_array([t.name for t in watch]),
                                        self.engine.node_id, s.conn_id]).addCallbacks(
                lambda rows: done(rows[0] if rows else None), done)

    def _reserve_many(self, items: List[Tuple[bytes, int]]) -> defer.Deferred:
        """Run a batch of one-tube reserves: a job row or None per item."""
        d = self.db.execute("reserve_many", [text_array([t for t, _ in items]),
                                             b"{" + b",".join(b"%d" % c for _, c in items)
                                             + b"}", self.engine.node_id])

        def answers(rows: Any) -> List[Any]:
            out: List[Any] = [None] * len(items)
            for row in rows:
                out[row[0] - 1] = row[1:]
            return out
        return d.addCallback(answers)

    def reserved(self, s: PgSession, row: Tuple[Any, ...]) -> Any:
        """A reserve statement gave ``s`` a job (row: id, body, ttr, pri, tube, left)."""
        job = self.record(row)
        if s.closed:
            self.give_back(s)  # the close's give-back may have run first
            return None
        self.hold(s, job, row[5])
        return job

    def hold(self, s: PgSession, job: JobRecord, left: float) -> None:
        """Record locally that ``s`` holds ``job`` for ``left`` more seconds."""
        deadline = self._now() + left
        job.state = RESERVED
        job.deadline_at = deadline
        reserved = s.reserved
        if reserved:
            self._track_session_deadline(s, job.id, deadline)
        reserved[job.id] = job
        self._schedule_ttr(s, job)

    # ------------------------------------------------------------ wake-ups

    def jobs_ready(self, t: "NodeTube", count: int = 1) -> None:
        """Jobs may have become ready in ``t``: serve its waiting sessions."""
        t.events += 1
        if t.waiting and not self.engine.held:
            self._serve(t, count)

    def _serve(self, t: "NodeTube", count: int) -> None:
        for s in list(t.waiting):
            if count <= 0:
                break
            if not s.attempting:
                self._attempt(s)
                count -= 1

    def _attempt(self, s: PgSession) -> None:
        """Try the reserve again for waiting session ``s``; a job is a wake-up."""
        marks = [t.events for t in s.watch]
        watched = list(s.watch)

        def done(job: Any) -> None:
            if isinstance(job, JobRecord):
                if not self._woken(s, job):
                    return
                e = self.engine
                e.wakeups.append((s, job))
                e.deliver()
                for t in watched:  # more jobs may be there for the next waiter
                    if t.waiting:
                        self._serve(t, 1)
            elif s.waiting and [t.events for t in s.watch] != marks:
                self._attempt(s)
        self._take(s, marks, done)

    def _woken(self, s: PgSession, job: JobRecord) -> bool:
        """``s`` got ``job`` for its waiting reserve: True if it still waits
        (its wait ends), else the job goes back (the wait ended meanwhile)."""
        if not s.waiting:
            self._unreserve(s, job)
            return False
        self.engine._stop_waiting(s)
        return True

    # ------------------------------------------------------------ hand-offs

    def takers(self, puts: List[Any]) -> List[Optional[PgSession]]:
        """For each put of a batch, the session waiting on this node to be
        handed its job, or None.

        In each tube the batch's best jobs (priority, then order) are offered
        to the tube's waiting sessions, first come first, as far as these each
        watch that one tube (the statement checks that tube for better ready
        jobs; a waiter watching several tubes is served by a reserve
        statement, and so are those after it); a session with a reserve
        statement out is skipped.  Each taker is marked ``attempting`` until
        the put statement has answered.  (The engine asks only while it is
        not held and some reserve waits.)"""
        takers: List[Optional[PgSession]] = [None] * len(puts)
        by_tube: dict = {}
        for n, (name, _, delay, *_) in enumerate(puts):
            if not delay:
                by_tube.setdefault(name, []).append(n)
        for name, ns in by_tube.items():
            t = self.tubes.get(name)
            if t is None or not t.waiting:
                continue
            free = []
            for s in t.waiting:
                if s.attempting:
                    continue
                if len(s.watch) != 1:
                    break
                free.append(s)
                if len(free) == len(ns):
                    break
            ns.sort(key=lambda n: puts[n][1])  # stable: priority, then order
            for n, s in zip(ns, free):
                takers[n] = s
                s.attempting = True
        return takers

    def handed(self, s: PgSession, row: Tuple[Any, ...]) -> None:
        """A put's statement handed its job to waiting session ``s``; the
        wake-up goes out after the batch's replies (:meth:`deliver_handoffs`)."""
        job = self.reserved(s, row)
        if job is not None and self._woken(s, job):
            self._handoffs.append((s, job))

    def deliver_handoffs(self) -> None:
        """After a put batch's replies: its hand-offs' wake-ups (so a
        producer's INSERTED leaves before the RESERVED it caused)."""
        if self._handoffs:
            e = self.engine
            e.wakeups.extend(self._handoffs)
            self._handoffs = []
            e.deliver()

    def _unreserve(self, s: PgSession, job: JobRecord) -> None:
        """Give back a job a reserve got for a session that no longer waits."""
        s.reserved.pop(job.id, None)
        self.db.execute("unreserve", [job.id, self.engine.node_id, s.conn_id]).addCallbacks(
            self.tubes_ready, self._failed)

    def give_back(self, s: PgSession) -> None:
        """Every job ``s`` holds goes back to ready (``s`` closed): those
        under (node, ``s``) and those it was handed from the node's take."""
        held = list(s.reserved.values())
        s.reserved.clear()
        self.db.first("give_back", [self.engine.node_id, s.conn_id,
                                    int_array([j.id for j in held]),
                                    int_array([j.binlog_file for j in held])]).addCallbacks(
            self.tubes_ready, self._failed)

    def tubes_ready(self, rows: Any) -> None:
        """Rows whose first column is a tube that got a ready job: wake waiters, tell others."""
        counts: dict = {}
        for row in rows:
            counts[row[0]] = counts.get(row[0], 0) + 1
        for name, n in counts.items():
            self.ready_by_name(name, n)

    def ready_by_name(self, name: bytes, count: int = 1, told: bool = False) -> None:
        """``count`` jobs became ready in tube ``name`` through this node
        (``told``: the statement that made them ready notified the others)."""
        t = self.tubes.get(name)
        if t is not None:
            self.jobs_ready(t, count)
        if not told:
            self._note(JobsReady(self.engine.node_id, name, count))

    def record(self, row: Tuple[Any, ...]) -> JobRecord:
        """A JobRecord from (id, body, ttr, pri, tube, time left[, reservation])
        (the body gets its CRLF).  A job this engine hands out carries the
        reservation it is under (the row's ``reserves`` when the holder got it;
        0: none) in ``binlog_file``, which no binlog uses here: the holder's
        commands carry it (fencing, taking.py).  (A slot of its own would need
        a subclass, and the front ends test ``__class__ is JobRecord``.)"""
        job = JobRecord.__new__(JobRecord)
        job.id = row[0]
        job.body = row[1] + b"\r\n"
        job.ttr = row[2]
        job.pri = row[3]
        job.tube = self.tubes.get(row[4]) or _Named(row[4])
        job.state = READY
        job.delay = 0
        job.created_at = 0.0
        job.deadline_at = 0.0
        job.counts = None
        job.heap_key = None
        job.binlog_file = row[6] if len(row) > 6 else 0
        return job


class _Named:
    """The tube of a job whose tube this node has no record of (for ``job.tube.name``)."""

    __slots__ = ("name",)

    def __init__(self, name: bytes) -> None:
        self.name = name


__all__ = ["PgSession", "Reserver", "ReserverHost"]
