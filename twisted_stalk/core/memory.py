# -*- test-case-name: tests.test_core,tests.test_engine,tests.test_engine_contract -*-
"""The in-memory engine: every command's rules, counters and tubes.

The rules every engine shares (sessions, use, watch, ignore, waiting
reserves, wake-ups, the tube registry, the put checks, the connection and
command counters, the stats pairs) are :class:`~.sessions.SessionRules`, its
base; this module gives that base its hooks (``new_tube``, ``arm``,
``return_reservations``).
The job state machine and deadlines are in :mod:`.states`, what can be read
without being a client (stats, listings, the read model) in
:mod:`.inspection`; both are parts of :class:`MemoryEngine`.

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

TYPE_CHECKING = False  # typing costs stalkd's first reply (server/_early.py)
if TYPE_CHECKING:  # pragma: no cover
    from typing import Dict, Iterable, List, Optional, Tuple

    from ..protocol.yaml import StatPairs

from ..protocol.commands import valid_tube_name
from ..protocol.constants import (
    DEFAULT_MAX_JOB_SIZE,
    UNRESERVED_STATES,
    URGENT_THRESHOLD,
)
from . import listing
from .counters import (
    BURY, DELETE, KICK, LIST_TUBES, PAUSE_TUBE, PEEK, PEEK_BURIED, PEEK_DELAYED, PEEK_READY,
    RELEASE, RESERVE, RESERVE_WITH_TIMEOUT, STATS, STATS_JOB, STATS_TUBE, TOUCH,
)
from .facts import Facts
from .inspection import Inspection
from .job import (
    BURIED,
    BURIES,
    DELAYED,
    READY,
    RELEASES,
    RESERVED,
    STATE_BY_NAME,
    JobRecord,
)
from .journal import (
    UPDATE_BURY,
    UPDATE_KICK,
    UPDATE_RELEASE,
    UPDATE_RESERVE,
    JournalError,
    NullJournal,
)
from .outcomes import (
    BAD_FORMAT,
    DELETED,
    INTERNAL_ERROR,
    NOT_FOUND,
    OUT_OF_MEMORY,
    PAUSED,
    RELEASED,
    TOUCHED,
    WAITING,
    Outcome,
)
from .outcomes import BURIED as BURIED_OUTCOME
from .outcomes import KICKED as KICKED_OUTCOME
from .session import Session, FrontEnd
from .sessions import SessionRules
from .states import JobStates
from .tube import MemoryTube

heappush = heapq.heappush
heappop = heapq.heappop
_new_job = object.__new__

class MemoryEngine(SessionRules, Inspection, JobStates):
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
        self.jobs: Dict[int, JobRecord] = {}
        self.next_id = 1
        self._init_tubes()  # the registry (SessionRules), holding ``default``
        # Sessions, waits, wake-ups, drain and the connection and command
        # counters (SessionRules).
        self._init_sessions()
        # Global lazy heaps of deadlines.
        self.delay_heap: List[Tuple[float, int]] = []
        #: (deadline_at, job id, reserving session) of reserved jobs.
        self.ttr_heap: List[Tuple[float, int, Session]] = []
        self.pause_heap: List[Tuple[float, bytes]] = []
        # Jobs put in the same millisecond share one creation-time float.
        self._created = 0.0
        #: The earliest deadline the owner's timer is known to cover; a push
        #: of an earlier deadline sets ``wake_changed`` so the owner re-arms.
        #: Later deadlines need nothing: a timer firing early just re-arms.
        self.wake_at = float("inf")
        # Counters of jobs.
        self.ready_count = 0
        self.urgent_count = 0
        self.reserved_count = 0
        self.delayed_count = 0
        self.buried_count = 0
        self.job_timeouts = 0
        self.total_jobs = 0

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
    #
    # The rules about sessions are SessionRules' (core/sessions.py); these
    # are its hooks.

    def open_session(self, frontend: FrontEnd) -> Session:
        """Register a new client; it uses and watches ``default``."""
        return self._opened(Session(frontend, self.default_tube))

    def return_reservations(self, s: Session) -> None:
        """A closing session's reserved jobs go back to ready."""
        reserved = list(s.reserved.values())
        s.reserved.clear()
        for job in reserved:
            self._unreserve_counts(job)
            self._make_ready(job)

    def arm(self, when: float) -> None:
        """Something is due at ``when``: ``wake_changed`` if that is earlier
        than the owner's timer covers."""
        if when < self.wake_at:
            self.wake_at = when
            self.wake_changed = True

    # ---------------------------------------------------------------- tubes

    def new_tube(self, name: bytes) -> MemoryTube:
        """A new tube, with its ready buckets over this engine's jobs."""
        return MemoryTube(name, self.jobs)

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
        refused = self._put_refused(s, body)
        job_id = self.next_id
        self.next_id = job_id + 1
        if refused is not None:
            return refused
        size = len(body)
        if self.max_memory and self.job_bytes + size > self.max_memory:
            return OUT_OF_MEMORY
        now = self._now()
        created = self._created
        if not 0.0 <= now - created < 0.001:
            created = self._created = now
        t = s.use
        # JobRecord(job_id, pri, delay, ttr or 1, body, t, created), without the
        # cost of calling a Python __init__ (a third of a put's engine work);
        # tests/test_core.py checks that both build the same job.
        job = _new_job(JobRecord)
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

    def reserve(self, s: Session):
        """Reserve the best ready job of the watched tubes, waiting for one
        for ever: the :class:`JobRecord`, DEADLINE_SOON or WAITING."""
        self.cmd_counts[RESERVE] += 1
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
        self.cmd_counts[RESERVE_WITH_TIMEOUT] += 1
        return self._reserve(s, None if timeout < 0 else timeout)

    def reserve_job(self, s: Session, job_id: int):
        """Reserve one ready, delayed or buried job by id: the :class:`JobRecord`,
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
        self.cmd_counts[DELETE] += 1
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
            self.drop_tube_if_unused(t)
        return DELETED

    def release(self, s: Session, job_id: int, pri: int, delay: int) -> Outcome:
        """Give back a job ``s`` reserved, with a new priority, ready or
        after ``delay`` seconds: RELEASED, NOT_FOUND or INTERNAL_ERROR."""
        self.cmd_counts[RELEASE] += 1
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
        self.cmd_counts[BURY] += 1
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
        self.cmd_counts[TOUCH] += 1
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
        self.cmd_counts[KICK] += 1
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
        self.cmd_counts[PEEK] += 1
        return self.jobs.get(job_id) or NOT_FOUND

    def peek_ready(self, s: Session):
        """The used tube's next ready job, or NOT_FOUND."""
        self.cmd_counts[PEEK_READY] += 1
        return s.use.ready_top() or NOT_FOUND

    def peek_delayed(self, s: Session):
        """The used tube's delayed job that is ready soonest, or NOT_FOUND."""
        self.cmd_counts[PEEK_DELAYED] += 1
        return self._delayed_top(s.use.delayed) or NOT_FOUND

    def peek_buried(self, s: Session):
        """The used tube's first buried job (the next to be kicked), or NOT_FOUND."""
        self.cmd_counts[PEEK_BURIED] += 1
        buried = s.use.buried
        return next(iter(buried.values())) if buried else NOT_FOUND

    def stats_job(self, s: Session, job_id: int):
        """A job's stats (pairs in beanstalkd's order), or NOT_FOUND."""
        self.cmd_counts[STATS_JOB] += 1
        return self.job_stats(job_id)

    def stats_tube(self, s: Session, name: bytes):
        """A tube's stats (pairs in beanstalkd's order), or NOT_FOUND."""
        self.cmd_counts[STATS_TUBE] += 1
        return self.tube_stats(name)

    def stats(self, s: Session) -> StatPairs:
        """The server's stats (pairs in beanstalkd's order)."""
        self.cmd_counts[STATS] += 1
        return self.server_stats()

    def list_tubes(self, s: Session) -> List[bytes]:
        """The names of all tubes, in beanstalkd's order."""
        self.cmd_counts[LIST_TUBES] += 1
        return [t.name for t in self.tube_list]

    def pause_tube(self, s: Session, name: bytes, delay: int) -> Outcome:
        """Hold back reserves from tube ``name`` for ``delay`` seconds (0 ends
        a pause): PAUSED, NOT_FOUND, or BAD_FORMAT for an invalid name
        (beanstalkd counts the command before it checks the name)."""
        self.cmd_counts[PAUSE_TUBE] += 1
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
        self.drop_tube_if_unused(t)
        return deleted

    # ============================================================ server

    def restore(self, job: JobRecord, state: int, deadline_at: float = 0.0) -> None:
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


__all__ = ["MemoryEngine"]
