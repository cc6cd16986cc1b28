# -*- test-case-name: tests.test_core,tests.test_engine -*-
"""The in-memory engine: every command's rules, the job state machine, counters, deadlines.

:class:`MemoryEngine` implements :class:`~twisted_stalk.core.engine.Engine`,
the seam every front end (wire protocol, web console, metrics) uses: one
method per command, taking the session and parsed arguments, applying all of
that command's rules (ids, counters, draining, the memory ceiling, the
journal) and returning its outcome.  It never calls a front end: results for
*other* sessions (a waiting reserve that got a job, timed out or hit
DEADLINE_SOON) are queued in :attr:`MemoryEngine.wakeups` for the front end
to deliver after the command's own reply.

No I/O and no Twisted: time comes from the ``clock`` given to the engine (any
object with ``seconds()``, such as a reactor or ``twisted.internet.task.Clock``),
and the engine reports its next deadline (:meth:`MemoryEngine.next_deadline`)
so that its owner arms one timer and calls :meth:`MemoryEngine.tick` when it
fires.

Complexity: put, reserve, release, bury, delete and touch are O(log n) in the
number of jobs (heap operations on a tube's heaps); nothing scans a tube or
the list of sessions.  Heaps are lazy: an entry whose job left the heap's
state stays until it reaches the top or until the heap is compacted, which
happens when stale entries outnumber live ones (amortised O(1)).
"""
from __future__ import annotations

import heapq
from typing import Dict, Iterable, List, Optional, Set, Tuple, Union

from ..protocol.commands import COUNTED_COMMANDS, valid_tube_name
from ..protocol.constants import (
    DEFAULT_MAX_JOB_SIZE,
    DEFAULT_TUBE,
    SAFETY_MARGIN,
    UNRESERVED_STATES,
    URGENT_THRESHOLD,
)
from ..protocol.yaml import StatPairs
from . import listing
from .engine import JOB_SORTS
from .facts import Facts
from .job import (
    BURIED,
    BURIES,
    DELAYED,
    INVALID,
    KICKS,
    READY,
    RELEASES,
    RESERVED,
    RESERVES,
    STATE_BY_NAME,
    STATE_NAMES,
    TIMEOUTS,
    Job,
)
from .journal import (
    UPDATE_BURY,
    UPDATE_KICK,
    UPDATE_RELEASE,
    UPDATE_RESERVE,
    UPDATE_TIMEOUT,
    JournalError,
    NullJournal,
)
from .outcomes import (
    BAD_FORMAT,
    DEADLINE_SOON,
    DELETED,
    DRAINING,
    EXPECTED_CRLF,
    INTERNAL_ERROR,
    NOT_FOUND,
    NOT_IGNORED,
    OUT_OF_MEMORY,
    PAUSED,
    RELEASED,
    TIMED_OUT,
    TOUCHED,
    WAITING,
    Outcome,
)
from .outcomes import BURIED as BURIED_OUTCOME
from .outcomes import KICKED as KICKED_OUTCOME
from .session import Session, SessionListener
from .tube import Tube

heappush = heapq.heappush
heappop = heapq.heappop
_new_job = object.__new__

#: What a waiting reserve's wake-up carries: the job it got, TIMED_OUT or DEADLINE_SOON.
WakeUp = Tuple[Session, Union[Job, Outcome]]


class MemoryEngine:
    """All tubes and jobs of one server, and the rules that move jobs between states."""

    # Slots, not an instance dict: with more than 30 attributes CPython 3.11
    # stops sharing dict keys between instances, and then every ``self.x``
    # and ``self.method()`` here takes the slow, unspecialised lookup
    # (measured: several thousand instructions per job).
    __slots__ = (
        "clock", "_now", "max_job_size", "max_memory", "job_bytes", "_journal", "_journaled",
        "facts", "jobs", "next_id", "tubes", "tube_list", "default_tube", "sessions",
        "delay_heap", "ttr_heap", "wait_heap", "pause_heap", "_wait_seq", "_created",
        "wake_at", "wake_changed", "wakeups", "cmd_counts",
        "ready_count", "urgent_count", "reserved_count", "delayed_count", "buried_count",
        "waiting_count", "job_timeouts", "total_jobs", "current_connections",
        "total_connections", "producers", "workers", "draining", "held", "notify",
    )

    def __init__(self, clock, max_job_size: int = DEFAULT_MAX_JOB_SIZE,
                 journal=None, facts: Optional[Facts] = None, max_memory: int = 0) -> None:
        self.clock = clock
        #: ``clock.seconds``, looked up once: a reactor's is a builtin stored
        #: on its class, which CPython cannot cache at the call site.
        self._now = clock.seconds
        #: Largest job body in bytes (``-z``): larger puts get JOB_TOO_BIG.
        self.max_job_size = max_job_size
        #: Ceiling on :attr:`job_bytes` (``--max-memory``; 0: none): a put
        #: that would pass it gets OUT_OF_MEMORY.
        self.max_memory = max_memory
        #: Bytes of stored job bodies, each with its CRLF.
        self.job_bytes = 0
        self.journal = journal if journal is not None else NullJournal()
        self.facts = facts or Facts(clock.seconds())
        self.jobs: Dict[int, Job] = {}
        self.next_id = 1
        self.tubes: Dict[bytes, Tube] = {}
        #: Tubes in beanstalkd's list order (append; swap-remove on delete).
        self.tube_list: List[Tube] = []
        self.default_tube = self.tube(DEFAULT_TUBE)
        #: Open sessions (for listings such as the console's connections page).
        self.sessions: Set[Session] = set()
        # Global lazy heaps of deadlines.
        self.delay_heap: List[Tuple[float, int]] = []
        #: (deadline_at, job id, reserving session) of reserved jobs.
        self.ttr_heap: List[Tuple[float, int, Session]] = []
        self.wait_heap: List[Tuple[float, int, Session]] = []
        self.pause_heap: List[Tuple[float, bytes]] = []
        self._wait_seq = 0
        # Jobs put in the same millisecond share one creation-time float.
        self._created = 0.0
        #: The earliest deadline the owner's timer is known to cover; a push
        #: of an earlier deadline sets ``wake_changed`` so the owner re-arms.
        #: Later deadlines need nothing: a timer firing early just re-arms.
        self.wake_at = float("inf")
        self.wake_changed = False
        #: Results for waiting sessions, to deliver after the current command's
        #: own reply: ``(session, Job | TIMED_OUT | DEADLINE_SOON)``.
        self.wakeups: List[WakeUp] = []
        # Counters.
        self.cmd_counts: Dict[str, int] = dict.fromkeys(COUNTED_COMMANDS, 0)
        self.ready_count = 0
        self.urgent_count = 0
        self.reserved_count = 0
        self.delayed_count = 0
        self.buried_count = 0
        self.waiting_count = 0
        self.job_timeouts = 0
        self.total_jobs = 0
        self.current_connections = 0
        self.total_connections = 0
        self.producers = 0
        self.workers = 0
        #: Drain mode (SIGUSR1): put answers DRAINING.
        self.draining = False
        #: True while no job is handed out (a graceful shutdown): reserves wait.
        self.held = False
        #: Unused here: this engine queues wake-ups only inside a command or a tick.
        self.notify = None

    @property
    def journal(self):
        """Where changes are recorded before they are acknowledged (the binlog)."""
        return self._journal

    @journal.setter
    def journal(self, journal) -> None:
        self._journal = journal
        #: False for the in-memory NullJournal: the hot paths skip its no-op calls.
        self._journaled = type(journal) is not NullJournal

    # ------------------------------------------------------------ sessions

    def open_session(self, listener: SessionListener) -> Session:
        """Register a new client; it uses and watches ``default``."""
        s = Session(listener, self.default_tube)
        self.default_tube.using_count += 1
        self.default_tube.watching_count += 1
        self.current_connections += 1
        self.total_connections += 1
        self.sessions.add(s)
        return s

    def close_session(self, s: Session) -> None:
        """Forget a client: stop its wait, return its reserved jobs to ready.

        Tubes it leaves unused go in beanstalkd's order (its watch list is
        cleared from the front, each removal moving the last entry there;
        then the used tube), so ``list-tubes`` shows the same order after.
        """
        if s.closed:
            return
        s.closed = True
        self.sessions.discard(s)
        self._stop_waiting(s)
        reserved = list(s.reserved.values())
        s.reserved.clear()
        s.ttr_heap.clear()
        for job in reserved:
            self._unreserve_counts(job)
            self._make_ready(job)
        watch = s.watch
        s.watch = []
        while watch:
            t = watch[0]
            last = watch.pop()
            if watch:
                watch[0] = last
            t.watching_count -= 1
            self._maybe_drop_tube(t)
        s.use.using_count -= 1
        self._maybe_drop_tube(s.use)
        self.current_connections -= 1
        if s.is_producer:
            self.producers -= 1
        if s.is_worker:
            self.workers -= 1

    def _set_producer(self, s: Session) -> None:
        s.is_producer = True
        self.producers += 1

    def _set_worker(self, s: Session) -> None:
        s.is_worker = True
        self.workers += 1

    # ---------------------------------------------------------------- tubes

    def tube(self, name: bytes) -> Tube:
        """The tube called ``name``, created if it does not exist."""
        t = self.tubes.get(name)
        if t is None:
            t = self.tubes[name] = Tube(name, self.jobs)
            t.index = len(self.tube_list)
            self.tube_list.append(t)
        return t

    def _maybe_drop_tube(self, t: Tube) -> None:
        if t.unused and t is not self.default_tube and t.index >= 0:
            del self.tubes[t.name]
            last = self.tube_list.pop()
            if last is not t:
                self.tube_list[t.index] = last
                last.index = t.index
            t.index = -1

    # ============================================================ commands
    #
    # One method per protocol command.  Each counts itself in ``stats`` and
    # returns its outcome (see core/outcomes.py and core/engine.py).

    def put(self, s: Session, pri: int, delay: int, ttr: int, body: bytes):
        """Insert a job into the used tube: its id, or EXPECTED_CRLF (``body``
        does not end in CRLF), DRAINING, OUT_OF_MEMORY (``max_memory``) or
        INTERNAL_ERROR (the journal failed).  ``body`` includes its CRLF.

        As in beanstalkd, every put takes a job id, refused or not.
        """
        self.cmd_counts["put"] += 1
        if not s.is_producer:
            self._set_producer(s)
        job_id = self.next_id
        self.next_id = job_id + 1
        if body[-2:] != b"\r\n":
            return EXPECTED_CRLF
        if self.draining:
            return DRAINING
        size = len(body)
        if self.max_memory and self.job_bytes + size > self.max_memory:
            return OUT_OF_MEMORY
        now = self._now()
        created = self._created
        if not 0.0 <= now - created < 0.001:
            created = self._created = now
        t = s.use
        # Job(job_id, pri, delay, ttr or 1, body, t, created), without the
        # cost of calling a Python __init__ (a third of a put's engine work);
        # tests/test_core.py checks that both build the same job.
        job = _new_job(Job)
        job.id = job_id
        job.pri = pri
        job.delay = delay
        job.ttr = ttr or 1
        job.body = body
        job.tube = t
        job.state = READY
        job.created_at = created
        job.deadline_at = 0.0
        job.counts = None
        job.heap_key = None
        job.binlog_file = 0
        if self._journaled:
            try:
                self._journal.job_put(job)
            except JournalError:
                return INTERNAL_ERROR
        self.jobs[job_id] = job
        self.job_bytes += size
        self.total_jobs += 1
        t.total_jobs += 1
        if delay:
            self._make_delayed(job, now + delay)
        else:
            self._make_ready(job)
        return job_id

    def reject_put(self, s: Session, reason: Outcome) -> Outcome:
        """A put line that brings no job: its body was over ``max_job_size``
        (JOB_TOO_BIG; the front end discarded it) or bytes trail its
        arguments (BAD_FORMAT).  beanstalkd counts these puts too."""
        self.cmd_counts["put"] += 1
        return reason

    def use(self, s: Session, name: bytes) -> bytes:
        """Use tube ``name`` for puts (created if needed); returns its name."""
        self.cmd_counts["use"] += 1
        t = self.tube(name)
        old = s.use
        if old is not t:
            t.using_count += 1
            old.using_count -= 1
            s.use = t
            self._maybe_drop_tube(old)
        return name

    def watch(self, s: Session, name: bytes) -> int:
        """Add tube ``name`` to the watch list; returns the list's length."""
        self.cmd_counts["watch"] += 1
        t = self.tube(name)
        if t not in s.watch:
            s.watch.append(t)
            t.watching_count += 1
        return len(s.watch)

    def ignore(self, s: Session, name: bytes):
        """Stop watching ``name``: the watch list's length, or NOT_IGNORED
        when it is the last tube watched."""
        self.cmd_counts["ignore"] += 1
        t = self.tubes.get(name)
        watch = s.watch
        if t is not None and t in watch:
            if len(watch) < 2:
                return NOT_IGNORED
            i = watch.index(t)
            last = watch.pop()
            if i < len(watch):
                watch[i] = last
            t.watching_count -= 1
            self._maybe_drop_tube(t)
        return len(watch)

    def reserve(self, s: Session):
        """Reserve the best ready job of the watched tubes, waiting for one
        for ever: the :class:`Job`, DEADLINE_SOON or WAITING."""
        self.cmd_counts["reserve"] += 1
        watch = s.watch
        if s.reserved or len(watch) != 1 or not s.is_worker or self.held:
            return self._reserve(s, None)
        # The common case, as _reserve would take it but without its call:
        # one tube watched, no reservation whose deadline could be near.
        t = watch[0]
        now = self._now()
        if t.ready_count and not (t.pause and t.unpause_at > now):
            job = t.ready_top(True)  # _take_ready, inline
            self.ready_count -= 1
            if job.pri < URGENT_THRESHOLD:  # type: ignore[union-attr]
                self.urgent_count -= 1
            self._make_reserved(s, job, now)  # type: ignore[arg-type]
            return job
        self._start_waiting(s, now, None)
        return WAITING

    def reserve_with_timeout(self, s: Session, timeout: int):
        """As :meth:`reserve`, waiting at most ``timeout`` seconds (negative:
        for ever; 0: answer now, TIMED_OUT if nothing is ready)."""
        self.cmd_counts["reserve-with-timeout"] += 1
        return self._reserve(s, None if timeout < 0 else timeout)

    def reserve_job(self, s: Session, job_id: int):
        """Reserve one ready, delayed or buried job by id: the :class:`Job`,
        NOT_FOUND (no such job, or already reserved) or INTERNAL_ERROR."""
        job = self.jobs.get(job_id)
        if job is None or job.state == RESERVED:
            return NOT_FOUND
        if job.state != READY:
            # Journaled so that after a restart it comes back ready, as
            # reserved jobs do, not delayed or buried.
            try:
                self._journal.job_updated(job, UPDATE_RESERVE)
            except JournalError:
                return INTERNAL_ERROR
        if not s.is_worker:
            self._set_worker(s)
        self._detach(job)
        self._make_reserved(s, job, self._now())
        return job

    def delete(self, s: Session, job_id: int) -> Outcome:
        """Delete a job that is ready, delayed, buried or reserved by ``s``:
        DELETED, NOT_FOUND or INTERNAL_ERROR."""
        self.cmd_counts["delete"] += 1
        jobs = self.jobs
        job = jobs.get(job_id)
        if job is None:
            return NOT_FOUND
        if job.state == RESERVED and s.reserved.get(job_id) is not job:
            return NOT_FOUND
        if self._journaled:
            try:
                self._journal.job_deleted(job)
            except JournalError:
                return INTERNAL_ERROR
        self._detach(job, s)
        del jobs[job_id]
        self.job_bytes -= len(job.body)
        t = job.tube
        t.cmd_delete += 1
        if not (t.using_count or t.watching_count):
            self._maybe_drop_tube(t)
        return DELETED

    def release(self, s: Session, job_id: int, pri: int, delay: int) -> Outcome:
        """Give back a job ``s`` reserved, with a new priority, ready or
        after ``delay`` seconds: RELEASED, NOT_FOUND or INTERNAL_ERROR."""
        self.cmd_counts["release"] += 1
        job = s.reserved.get(job_id)
        if job is None:
            return NOT_FOUND
        old = job.pri, job.delay
        job.pri, job.delay = pri, delay
        try:
            self._journal.job_updated(job, UPDATE_RELEASE)
        except JournalError:
            job.pri, job.delay = old
            return INTERNAL_ERROR
        self._detach(job, s)
        job.count(RELEASES)
        if delay:
            self._make_delayed(job, self._now() + delay)
        else:
            self._make_ready(job)
        return RELEASED

    def bury(self, s: Session, job_id: int, pri: int) -> Outcome:
        """Bury a job ``s`` reserved: BURIED, NOT_FOUND or INTERNAL_ERROR."""
        self.cmd_counts["bury"] += 1
        job = s.reserved.get(job_id)
        if job is None:
            return NOT_FOUND
        old = job.pri
        job.pri = pri
        try:
            self._journal.job_updated(job, UPDATE_BURY)
        except JournalError:
            job.pri = old
            return INTERNAL_ERROR
        self._detach(job, s)
        job.count(BURIES)
        self._make_buried(job)
        return BURIED_OUTCOME

    def touch(self, s: Session, job_id: int) -> Outcome:
        """Restart the TTR of a job ``s`` reserved: TOUCHED or NOT_FOUND."""
        self.cmd_counts["touch"] += 1
        job = s.reserved.get(job_id)
        if job is None:
            return NOT_FOUND
        # A later deadline than before: the timer needs no change.
        self._touch_deadline(s, job, self._now() + job.ttr)
        return TOUCHED

    def kick(self, s: Session, bound: int):
        """Kick up to ``bound`` buried jobs of the used tube, or delayed ones
        if none are buried: how many, or INTERNAL_ERROR if the journal failed
        before the first."""
        self.cmd_counts["kick"] += 1
        t = s.use
        kicked = 0
        journal = self._journal
        try:
            if t.buried:
                while kicked < bound and t.buried:
                    job = next(iter(t.buried.values()))
                    journal.job_updated(job, UPDATE_KICK)
                    self._kick(job)
                    kicked += 1
            else:
                while kicked < bound:
                    delayed = self._delayed_top(t.delayed)
                    if delayed is None:
                        break
                    journal.job_updated(delayed, UPDATE_KICK)
                    heappop(t.delayed)
                    self._kick(delayed)
                    kicked += 1
        except JournalError:
            if not kicked:
                return INTERNAL_ERROR
        return kicked

    def kick_job(self, s: Session, job_id: int) -> Outcome:
        """Make one buried or delayed job ready: KICKED, NOT_FOUND or
        INTERNAL_ERROR.  (beanstalkd has no counter for kick-job.)"""
        job = self.jobs.get(job_id)
        if job is None or job.state not in (BURIED, DELAYED):
            return NOT_FOUND
        try:
            self._journal.job_updated(job, UPDATE_KICK)
        except JournalError:
            return INTERNAL_ERROR
        self._kick(job)
        return KICKED_OUTCOME

    def peek(self, s: Session, job_id: int):
        """The job with this id, in any state, or NOT_FOUND."""
        self.cmd_counts["peek"] += 1
        return self.jobs.get(job_id) or NOT_FOUND

    def peek_ready(self, s: Session):
        """The used tube's next ready job, or NOT_FOUND."""
        self.cmd_counts["peek-ready"] += 1
        return s.use.ready_top() or NOT_FOUND

    def peek_delayed(self, s: Session):
        """The used tube's delayed job that is ready soonest, or NOT_FOUND."""
        self.cmd_counts["peek-delayed"] += 1
        return self._delayed_top(s.use.delayed) or NOT_FOUND

    def peek_buried(self, s: Session):
        """The used tube's first buried job (the next to be kicked), or NOT_FOUND."""
        self.cmd_counts["peek-buried"] += 1
        buried = s.use.buried
        return next(iter(buried.values())) if buried else NOT_FOUND

    def stats_job(self, s: Session, job_id: int):
        """A job's stats (pairs in beanstalkd's order), or NOT_FOUND."""
        self.cmd_counts["stats-job"] += 1
        return self.job_stats(job_id)

    def stats_tube(self, s: Session, name: bytes):
        """A tube's stats (pairs in beanstalkd's order), or NOT_FOUND."""
        self.cmd_counts["stats-tube"] += 1
        return self.tube_stats(name)

    def stats(self, s: Session) -> StatPairs:
        """The server's stats (pairs in beanstalkd's order)."""
        self.cmd_counts["stats"] += 1
        return self.server_stats()

    def list_tubes(self, s: Session) -> List[bytes]:
        """The names of all tubes, in beanstalkd's order."""
        self.cmd_counts["list-tubes"] += 1
        return [t.name for t in self.tube_list]

    def list_tube_used(self, s: Session) -> bytes:
        """The name of the tube ``s`` uses."""
        self.cmd_counts["list-tube-used"] += 1
        return s.use.name

    def list_tubes_watched(self, s: Session) -> List[bytes]:
        """The names of the tubes ``s`` watches, in its order."""
        self.cmd_counts["list-tubes-watched"] += 1
        return [t.name for t in s.watch]

    def pause_tube(self, s: Session, name: bytes, delay: int) -> Outcome:
        """Hold back reserves from tube ``name`` for ``delay`` seconds (0 ends
        a pause): PAUSED, NOT_FOUND, or BAD_FORMAT for an invalid name
        (beanstalkd counts the command before it checks the name)."""
        self.cmd_counts["pause-tube"] += 1
        if not valid_tube_name(name):
            return BAD_FORMAT
        t = self.tubes.get(name)
        if t is None:
            return NOT_FOUND
        now = self._now()
        t.pause = delay
        t.unpause_at = now + delay
        t.cmd_pause += 1
        if delay:
            heappush(self.pause_heap, (t.unpause_at, name))
            if t.unpause_at < self.wake_at:
                self.wake_at = t.unpause_at
                self.wake_changed = True
        elif t.waiting:
            self._serve_waiters(t)
        return PAUSED

    # ---------------------------------------------- extension verbs (admin)

    def list_jobs(self, s: Session, name: bytes, state: str, limit: int):
        """Ids of up to ``limit`` jobs of tube ``name`` in ``state`` (a name
        from ``JOB_STATES``), in the order the engine would take them (ready:
        priority then id; delayed and reserved: deadline; buried: kick
        order), or NOT_FOUND if there is no such tube.  Changes nothing."""
        t = self.tubes.get(name)
        if t is None:
            return NOT_FOUND
        return listing.job_ids(self, t, STATE_BY_NAME[state], limit)

    def flush_tube(self, s: Session, name: bytes,
                   states: Iterable[str] = UNRESERVED_STATES):
        """Delete every job of tube ``name`` in one of ``states``: how many,
        NOT_FOUND if there is no such tube, or INTERNAL_ERROR if the journal
        failed before the first.  Each deletion is journaled first."""
        t = self.tubes.get(name)
        if t is None:
            return NOT_FOUND
        codes = [STATE_BY_NAME[state] for state in states]
        jobs = self.jobs
        holders: Dict[int, Session] = {}
        if RESERVED in codes and t.reserved_count:
            for _, job_id, holder in self.ttr_heap:
                if job_id in holder.reserved:
                    holders[job_id] = holder
        everything = len(jobs)
        doomed = [jobs[job_id] for code in codes
                  for job_id in listing.job_ids(self, t, code, everything)]
        deleted = 0
        try:
            for job in doomed:
                self._journal.job_deleted(job)
                self._detach(job, holders.get(job.id))
                del jobs[job.id]
                self.job_bytes -= len(job.body)
                deleted += 1
        except JournalError:
            if not deleted:
                return INTERNAL_ERROR
        if deleted and READY in codes:
            t.compact_ready()
        self._maybe_drop_tube(t)
        return deleted

    # ------------------------------------------- listing (consoles; no counting)

    def jobs_page(self, name: bytes, state: str, sort: str = "queue", offset: int = 0,
                  limit: int = 50, descending: bool = False):
        """``(total, jobs)``: one page of tube ``name``'s jobs in ``state``
        sorted by ``sort`` (see ``Engine.jobs_page``), or NOT_FOUND.  Taking
        order costs O((offset + limit) log); other orders scan the tube's jobs
        in that state once."""
        t = self.tubes.get(name)
        if t is None:
            return NOT_FOUND
        if sort not in JOB_SORTS:
            raise ValueError(f"unknown sort {sort!r}")
        return listing.jobs_page(self, t, STATE_BY_NAME[state], sort, max(0, offset),
                                 limit, descending)

    def job_holder(self, job_id: int) -> Optional[Session]:
        """The session that holds reserved job ``job_id``, or None."""
        job = self.jobs.get(job_id)
        if job is None or job.state != RESERVED:
            return None
        for s in self.sessions:
            if s.reserved.get(job_id) is job:
                return s
        return None

    def search_bodies(self, name: bytes, needle: bytes, after_id: int, span: int):
        """``(jobs, next_after)``: tube ``name``'s jobs with ids in
        ``(after_id, after_id + span]`` whose body contains ``needle`` (see
        ``Engine.search_bodies``), or NOT_FOUND.  O(span)."""
        t = self.tubes.get(name)
        if t is None:
            return NOT_FOUND
        return listing.search_bodies(self, t, needle, after_id, span)

    # ============================================================ server

    def drain(self) -> None:
        """Enter drain mode (SIGUSR1): put answers DRAINING from now on."""
        self.draining = True

    def hold(self) -> None:
        """Hand out no more jobs (a graceful shutdown): reserves wait instead
        of taking jobs, while workers may still finish the ones they hold."""
        self.held = True

    def cancel_wait(self, s: Session) -> bool:
        """Withdraw ``s``'s waiting reserve without a result; True if it was waiting."""
        if not s.waiting:
            return False
        self._stop_waiting(s)
        return True

    def take_wakeups(self) -> List[WakeUp]:
        """The wake-ups queued so far, in order; the queue is emptied."""
        wakeups, self.wakeups = self.wakeups, []
        return wakeups

    def restore(self, job: Job, state: int, deadline_at: float = 0.0) -> None:
        """Put a job recovered from the binlog back in place (no journaling)."""
        self.jobs[job.id] = job
        self.job_bytes += len(job.body)
        if job.id >= self.next_id:
            self.next_id = job.id + 1
        if state == DELAYED:
            self._make_delayed(job, deadline_at)
        elif state == BURIED:
            self._make_buried(job)
        else:
            self._make_ready(job)

    # ========================================================= state machine
    #
    # Each _make_* puts a detached job into a state and counts it; _detach
    # takes a job out of whatever state it is in.

    def _make_ready(self, job: Job) -> None:
        t = job.tube
        waiting = t.waiting
        if waiting and not t.ready_count and not t.pause and not self.held:
            # The first waiting client would reserve this job straight away
            # when it watches only this tube (nothing else is ready here):
            # reserve it now, without the round trip through the ready heap.
            for s in waiting:
                break
            if len(s.watch) == 1:
                self._stop_waiting(s)
                self._make_reserved(s, job, self._now())
                self.wakeups.append((s, job))
                return
        job.state = READY
        t.push_ready(job)
        self.ready_count += 1
        if job.pri < URGENT_THRESHOLD:
            self.urgent_count += 1
        if waiting:
            self._serve_waiters(t)

    def _make_delayed(self, job: Job, deadline_at: float) -> None:
        job.state = DELAYED
        job.deadline_at = deadline_at
        t = job.tube
        entry = (deadline_at, job.id)
        heappush(t.delayed, entry)
        heappush(self.delay_heap, entry)
        if deadline_at < self.wake_at:
            self.wake_at = deadline_at
            self.wake_changed = True
        t.delayed_count += 1
        self.delayed_count += 1
        if len(t.delayed) > 2 * t.delayed_count + 32:
            t.delayed = self._live_deadlines(t.delayed, DELAYED)
        if len(self.delay_heap) > 2 * self.delayed_count + 32:
            self.delay_heap = self._live_deadlines(self.delay_heap, DELAYED)

    def _make_buried(self, job: Job) -> None:
        job.state = BURIED
        job.tube.buried[job.id] = job
        self.buried_count += 1

    def _make_reserved(self, s: Session, job: Job, now: float) -> None:
        job.state = RESERVED
        job_id = job.id
        deadline = job.deadline_at = now + job.ttr
        counts = job.counts  # job.count(RESERVES), inline: once per reservation
        if counts is None:
            job.counts = [1, 0, 0, 0, 0]
        else:
            counts[RESERVES] += 1
        reserved = s.reserved
        if reserved:
            self._track_session_deadline(s, job_id, deadline)
        reserved[job_id] = job
        ttrs = self.ttr_heap
        heappush(ttrs, (deadline, job_id, s))
        if deadline < self.wake_at:
            self.wake_at = deadline
            self.wake_changed = True
        job.tube.reserved_count += 1
        self.reserved_count += 1
        if len(ttrs) > 2 * self.reserved_count + 32:
            self.ttr_heap = self._live_deadlines(ttrs, RESERVED)

    def _track_session_deadline(self, s: Session, job_id: int, deadline: float) -> None:
        """Record a deadline in the session's own heap (for DEADLINE_SOON).

        A session holding one job needs no heap (its soonest deadline is that
        job's); the heap is kept only while it holds more, so when a second
        job arrives the first one's entry goes in too.
        """
        heap = s.ttr_heap
        reserved = s.reserved
        if len(reserved) == 1:
            for other in reserved.values():
                heappush(heap, (other.deadline_at, other.id))
        heappush(heap, (deadline, job_id))
        if len(heap) > 2 * len(reserved) + 32:
            s.ttr_heap = self._live_deadlines(heap, RESERVED)

    def _touch_deadline(self, s: Session, job: Job, deadline: float) -> None:
        job.deadline_at = deadline
        heappush(self.ttr_heap, (deadline, job.id, s))
        if len(s.reserved) > 1:
            heappush(s.ttr_heap, (deadline, job.id))

    def _detach(self, job: Job, s: Optional[Session] = None) -> None:
        """Take ``job`` out of its state; ``s`` holds it if it is reserved."""
        state = job.state
        t = job.tube
        if state == READY:
            t.ready_count -= 1
            self.ready_count -= 1
            if job.pri < URGENT_THRESHOLD:
                t.urgent_count -= 1
                self.urgent_count -= 1
        elif state == RESERVED:
            if s is not None:
                s.reserved.pop(job.id, None)
            t.reserved_count -= 1
            self.reserved_count -= 1
        elif state == DELAYED:
            t.delayed_count -= 1
            self.delayed_count -= 1
        elif state == BURIED:
            del t.buried[job.id]
            self.buried_count -= 1
        job.state = INVALID

    def _unreserve_counts(self, job: Job) -> None:
        job.tube.reserved_count -= 1
        self.reserved_count -= 1

    def _kick(self, job: Job) -> None:
        self._detach(job)
        job.count(KICKS)
        self._make_ready(job)

    def _take_ready(self, t: Tube) -> Optional[Job]:
        """Take the best ready job of ``t`` out of the ready state."""
        job = t.ready_top(True)
        if job is not None:
            self.ready_count -= 1
            if job.pri < URGENT_THRESHOLD:
                self.urgent_count -= 1
        return job

    def _live_deadlines(self, heap: list, state: int) -> list:
        jobs = self.jobs
        live = []
        for entry in heap:
            job = jobs.get(entry[1])
            if job is not None and job.state == state and job.deadline_at == entry[0]:
                live.append(entry)
        heapq.heapify(live)
        return live

    def _delayed_top(self, heap: List[Tuple[float, int]]) -> Optional[Job]:
        jobs = self.jobs
        while heap:
            deadline, job_id = heap[0]
            job = jobs.get(job_id)
            if job is not None and job.state == DELAYED and job.deadline_at == deadline:
                return job
            heappop(heap)
        return None

    # ------------------------------------------------------------- reserve

    def _best_tube(self, s: Session, now: float) -> Optional[Tube]:
        """The watched tube whose next ready job is the best (lowest priority,
        then id) among those not paused, or None."""
        if self.held:
            return None
        best = best_tube = None
        for t in s.watch:
            if t.ready_count and not (t.pause and t.unpause_at > now):
                job = t.ready_top()
                if job is not None and (best is None or job.pri < best.pri
                                        or (job.pri == best.pri and job.id < best.id)):
                    best, best_tube = job, t
        return best_tube

    def _reserve(self, s: Session, timeout: Optional[int]):
        if not s.is_worker:
            self._set_worker(s)
        now = self._now()
        if s.reserved:
            soonest = s.soonest_deadline()
            deadline_soon = soonest is not None and now >= soonest - SAFETY_MARGIN
            if deadline_soon and not any(t.ready_count for t in s.watch):
                return DEADLINE_SOON
        else:
            deadline_soon = False
        watch = s.watch
        if len(watch) == 1:
            t = watch[0]
            job = (self._take_ready(t) if t.ready_count and not self.held
                   and not (t.pause and t.unpause_at > now) else None)
        else:
            best = self._best_tube(s, now)
            job = self._take_ready(best) if best is not None else None
        if job is not None:
            self._make_reserved(s, job, now)
            return job
        if timeout == 0:
            # beanstalkd answers a zero timeout from its wait, where a
            # reservation in its last second wins over the timeout.
            return DEADLINE_SOON if deadline_soon else TIMED_OUT
        self._start_waiting(s, now, timeout)
        return WAITING

    def _start_waiting(self, s: Session, now: float, timeout: Optional[int]) -> None:
        s.waiting = True
        self.waiting_count += 1
        for t in s.watch:
            t.waiting[s] = None
        s.wait_deadline = now + timeout if timeout is not None and timeout > 0 else None
        if s.wait_deadline is not None or s.reserved:
            self._schedule_wait(s)
        # Otherwise only a job ends this wait: no timer entry, and its token
        # stays 0, which no wait_heap entry carries.

    def _schedule_wait(self, s: Session) -> None:
        wake = s.wait_deadline
        if s.reserved:
            soonest = s.soonest_deadline()
            if soonest is not None:
                margin = soonest - SAFETY_MARGIN
                if wake is None or margin < wake:
                    wake = margin
        self._wait_seq += 1
        s.wait_token = self._wait_seq
        if wake is not None:
            heappush(self.wait_heap, (wake, s.wait_token, s))
            if wake < self.wake_at:
                self.wake_at = wake
                self.wake_changed = True
            if len(self.wait_heap) > 2 * self.waiting_count + 32:
                self.wait_heap = [e for e in self.wait_heap
                                  if e[2].waiting and e[2].wait_token == e[1]]
                heapq.heapify(self.wait_heap)

    def _stop_waiting(self, s: Session) -> None:
        if not s.waiting:
            return
        s.waiting = False
        s.wait_token = 0
        self.waiting_count -= 1
        for t in s.watch:
            t.waiting.pop(s, None)

    def _serve_waiters(self, t: Tube) -> None:
        now = self._now()
        if self.held or (t.pause and t.unpause_at > now):
            return
        waiting = t.waiting
        while waiting and t.ready_count:
            s = next(iter(waiting))
            best = self._best_tube(s, now)
            if best is None:  # pragma: no cover - t has a ready job
                return
            job = self._take_ready(best)
            self._stop_waiting(s)
            self._make_reserved(s, job, now)  # type: ignore[arg-type]
            self.wakeups.append((s, job))  # type: ignore[arg-type]

    # ------------------------------------------------------------ deadlines

    def next_deadline(self) -> Optional[float]:
        """When :meth:`tick` next has work to do, or None.

        Also resets :attr:`wake_at` to that time: call it when (re)arming the
        timer, after a tick or when :attr:`wake_changed` is set.
        """
        self.wake_changed = False
        at = self._next_deadline()
        self.wake_at = float("inf") if at is None else at
        return at

    def _next_deadline(self) -> Optional[float]:
        best: Optional[float] = None
        top = self._delayed_top(self.delay_heap) if self.delay_heap else None
        if top is not None:
            best = top.deadline_at
        ttrs = self.ttr_heap
        jobs = self.jobs
        while ttrs:
            deadline, job_id, _ = ttrs[0]
            job = jobs.get(job_id)
            if job is not None and job.state == RESERVED and job.deadline_at == deadline:
                if best is None or deadline < best:
                    best = deadline
                break
            heappop(ttrs)
        waits = self.wait_heap
        while waits:
            when, token, s = waits[0]
            if s.waiting and s.wait_token == token:
                if best is None or when < best:
                    best = when
                break
            heappop(waits)
        pauses = self.pause_heap
        while pauses:
            when, name = pauses[0]
            t = self.tubes.get(name)
            if t is not None and t.pause and t.unpause_at == when:
                if best is None or when < best:
                    best = when
                break
            heappop(pauses)
        return best

    def tick(self) -> None:
        """Do everything that is due: delays end, TTRs expire, waits end,
        pauses end.  Results for waiting sessions go to :attr:`wakeups`."""
        now = self._now()
        jobs = self.jobs
        delays = self.delay_heap
        while delays and delays[0][0] <= now:
            deadline, job_id = heappop(delays)
            job = jobs.get(job_id)
            if job is None or job.state != DELAYED or job.deadline_at != deadline:
                continue
            self._detach(job)
            self._make_ready(job)
        # _make_ready may serve a waiter, which may compact these heaps:
        # read them from self on every turn.
        while self.ttr_heap and self.ttr_heap[0][0] <= now:
            deadline, job_id, s = heappop(self.ttr_heap)
            job = jobs.get(job_id)
            if job is None or job.state != RESERVED or job.deadline_at != deadline:
                continue
            self._time_out(job, s)
        while self.wait_heap and self.wait_heap[0][0] <= now:
            _, token, s = heappop(self.wait_heap)
            if not s.waiting or s.wait_token != token:
                continue
            soonest = s.soonest_deadline() if s.reserved else None
            if soonest is not None and now >= soonest - SAFETY_MARGIN:
                self._stop_waiting(s)
                self.wakeups.append((s, DEADLINE_SOON))
            elif s.wait_deadline is not None and now >= s.wait_deadline:
                self._stop_waiting(s)
                self.wakeups.append((s, TIMED_OUT))
            else:
                self._schedule_wait(s)
        pauses = self.pause_heap
        while pauses and pauses[0][0] <= now:
            when, name = heappop(pauses)
            t = self.tubes.get(name)
            if t is None or not t.pause or t.unpause_at != when:
                continue
            t.pause = 0
            if t.waiting:
                self._serve_waiters(t)

    def _time_out(self, job: Job, s: Session) -> None:
        try:
            self._journal.job_updated(job, UPDATE_TIMEOUT)
        except JournalError:
            pass  # the job comes back as ready after a restart anyway
        s.reserved.pop(job.id, None)
        self._unreserve_counts(job)
        job.count(TIMEOUTS)
        self.job_timeouts += 1
        self._make_ready(job)

    # ============================================================ inspection
    #
    # For front ends that look without being a client (metrics, a console):
    # nothing here counts as a command or changes anything.

    def job(self, job_id: int):
        """The job with this id, or NOT_FOUND (``peek`` without counting)."""
        return self.jobs.get(job_id) or NOT_FOUND

    def tube_names(self) -> List[bytes]:
        """The names of all tubes, in ``list-tubes`` order."""
        return [t.name for t in self.tube_list]

    def job_stats(self, job_id: int):
        """A job's ``stats-job`` pairs, or NOT_FOUND."""
        job = self.jobs.get(job_id)
        if job is None:
            return NOT_FOUND
        now = self._now()
        if job.state in (RESERVED, DELAYED):
            time_left = max(0, int(job.deadline_at - now))
        else:
            time_left = 0
        counts = job.counts or (0, 0, 0, 0, 0)
        return [
            ("id", job.id),
            ("tube", job.tube.name),
            ("state", STATE_NAMES[job.state]),
            ("pri", job.pri),
            ("age", int(now - job.created_at)),
            ("delay", job.delay),
            ("ttr", job.ttr),
            ("time-left", time_left),
            ("file", job.binlog_file),
            ("reserves", counts[RESERVES]),
            ("timeouts", counts[TIMEOUTS]),
            ("releases", counts[RELEASES]),
            ("buries", counts[BURIES]),
            ("kicks", counts[KICKS]),
        ]

    def tube_stats(self, name: bytes):
        """A tube's ``stats-tube`` pairs, or NOT_FOUND."""
        t = self.tubes.get(name)
        if t is None:
            return NOT_FOUND
        left = max(0, int(t.unpause_at - self._now())) if t.pause else 0
        return [
            ("name", t.name),
            ("current-jobs-urgent", t.urgent_count),
            ("current-jobs-ready", t.ready_count),
            ("current-jobs-reserved", t.reserved_count),
            ("current-jobs-delayed", t.delayed_count),
            ("current-jobs-buried", len(t.buried)),
            ("total-jobs", t.total_jobs),
            ("current-using", t.using_count),
            ("current-watching", t.watching_count),
            ("current-waiting", len(t.waiting)),
            ("cmd-delete", t.cmd_delete),
            ("cmd-pause-tube", t.cmd_pause),
            ("pause", t.pause),
            ("pause-time-left", left),
        ]

    def server_stats(self) -> StatPairs:
        """The server's ``stats`` pairs."""
        now = self._now()
        facts = self.facts
        utime, stime = facts.rusage()
        binlog = self._journal.stats()
        items: List[Tuple[str, object]] = [
            ("current-jobs-urgent", self.urgent_count),
            ("current-jobs-ready", self.ready_count),
            ("current-jobs-reserved", self.reserved_count),
            ("current-jobs-delayed", self.delayed_count),
            ("current-jobs-buried", self.buried_count),
        ]
        items += [("cmd-" + name, self.cmd_counts[name]) for name in COUNTED_COMMANDS]
        items += [
            ("job-timeouts", self.job_timeouts),
            ("total-jobs", self.total_jobs),
            ("max-job-size", self.max_job_size),
            ("current-tubes", len(self.tube_list)),
            ("current-connections", self.current_connections),
            ("current-producers", self.producers),
            ("current-workers", self.workers),
            ("current-waiting", self.waiting_count),
            ("total-connections", self.total_connections),
            ("pid", facts.pid()),
            ("version", facts.version),
            ("rusage-utime", float(utime)),
            ("rusage-stime", float(stime)),
            ("uptime", int(now - facts.started_at)),
            ("binlog-oldest-index", binlog["oldest"]),
            ("binlog-current-index", binlog["current"]),
            ("binlog-records-migrated", binlog["migrated"]),
            ("binlog-records-written", binlog["written"]),
            ("binlog-max-size", binlog["max_size"]),
            ("draining", self.draining),
            ("id", facts.instance_id),
            ("hostname", facts.hostname),
            ("os", facts.os),
            ("platform", facts.platform),
        ]
        return items  # type: ignore[return-value]


__all__ = ["MemoryEngine", "WakeUp"]
