"""The work queue: tubes, jobs, their state machine, counters and deadlines.

No I/O and no Twisted: time comes from the ``clock`` given to the queue (any
object with ``seconds()``, such as a reactor or ``twisted.internet.task.Clock``),
and the queue reports its next deadline (:meth:`WorkQueue.next_deadline`) so
that its owner arms one timer and calls :meth:`WorkQueue.tick` when it fires.

Complexity: put, reserve, release, bury, delete and touch are O(log n) in the
number of jobs (heap operations on a tube's heaps); nothing scans a tube or
the list of connections.  Heaps are lazy: an entry whose job left the heap's
state stays until it reaches the top or until the heap is compacted, which
happens when stale entries outnumber live ones (amortised O(1)).
"""
from __future__ import annotations

import heapq
from typing import Dict, List, Optional, Tuple

from ..protocol.yaml import StatPairs
from ..protocol.commands import COUNTED_COMMANDS
from ..protocol.constants import (
    DEFAULT_MAX_JOB_SIZE,
    DEFAULT_TUBE,
    SAFETY_MARGIN,
    URGENT_THRESHOLD,
)
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
from .facts import Facts
from .session import Session, SessionListener
from .tube import Tube

heappush = heapq.heappush
_new_job = object.__new__
heappop = heapq.heappop

#: Sentinel results of :meth:`WorkQueue.reserve`.
TIMED_OUT = "TIMED_OUT"
DEADLINE_SOON = "DEADLINE_SOON"

class WorkQueue:
    """All tubes and jobs of one server, and the rules that move jobs between states."""

    # Slots, not an instance dict: with more than 30 attributes CPython 3.11
    # stops sharing dict keys between instances, and then every ``self.x``
    # and ``self.method()`` here takes the slow, unspecialised lookup
    # (measured: several thousand instructions per job).
    __slots__ = (
        "clock", "_now", "max_job_size", "_journal", "_journaled", "facts", "jobs", "next_id",
        "tubes", "tube_list", "default_tube", "delay_heap", "ttr_heap", "wait_heap",
        "pause_heap", "_wait_seq", "_created", "wake_at", "wake_changed", "cmd_counts",
        "ready_count", "urgent_count", "reserved_count", "delayed_count", "buried_count",
        "waiting_count", "job_timeouts", "total_jobs", "current_connections",
        "total_connections", "producers", "workers", "draining",
        #: Bytes of stored job bodies: kept (and set) only by the --max-memory
        #: subclass, server.limits.MemoryAccountingQueue.
        "job_bytes",
    )

    def __init__(self, clock, max_job_size: int = DEFAULT_MAX_JOB_SIZE,
                 journal=None, facts: Optional[Facts] = None) -> None:
        self.clock = clock
        #: ``clock.seconds``, looked up once: a reactor's is a builtin stored
        #: on its class, which CPython cannot cache at the call site.
        self._now = clock.seconds
        self.max_job_size = max_job_size
        self.journal = journal if journal is not None else NullJournal()
        self.facts = facts or Facts(clock.seconds())
        self.jobs: Dict[int, Job] = {}
        self.next_id = 1
        self.tubes: Dict[bytes, Tube] = {}
        #: Tubes in beanstalkd's list order (append; swap-remove on delete).
        self.tube_list: List[Tube] = []
        self.default_tube = self.tube(DEFAULT_TUBE)
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
        self.draining = False

    @property
    def journal(self):
        """Where changes are recorded before they are acknowledged (the binlog)."""
        return self._journal

    @journal.setter
    def journal(self, journal) -> None:
        self._journal = journal
        #: False for the in-memory NullJournal: the hot paths skip its no-op calls.
        self._journaled = type(journal) is not NullJournal

    # ------------------------------------------------------------------ tubes

    def tube(self, name: bytes) -> Tube:
        """The tube called ``name``, created if it does not exist."""
        t = self.tubes.get(name)
        if t is None:
            t = self.tubes[name] = Tube(name)
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

    # --------------------------------------------------------------- sessions

    def open_session(self, listener: SessionListener) -> Session:
        """Register a new client; it uses and watches ``default``."""
        s = Session(listener, self.default_tube)
        self.default_tube.using_count += 1
        self.default_tube.watching_count += 1
        self.current_connections += 1
        self.total_connections += 1
        return s

    def close_session(self, s: Session) -> None:
        """Forget a client: stop its wait, return its reserved jobs to ready."""
        if s.closed:
            return
        s.closed = True
        self._stop_waiting(s)
        reserved = list(s.reserved.values())
        s.reserved.clear()
        s.ttr_heap.clear()
        for job in reserved:
            self._unreserve_counts(job)
            self._make_ready(job)
        s.use.using_count -= 1
        self._maybe_drop_tube(s.use)
        for t in s.watch:
            t.watching_count -= 1
            self._maybe_drop_tube(t)
        s.watch = []
        self.current_connections -= 1
        if s.is_producer:
            self.producers -= 1
        if s.is_worker:
            self.workers -= 1

    def set_producer(self, s: Session) -> None:
        if not s.is_producer:
            s.is_producer = True
            self.producers += 1

    def set_worker(self, s: Session) -> None:
        if not s.is_worker:
            s.is_worker = True
            self.workers += 1

    def use(self, s: Session, name: bytes) -> Tube:
        t = self.tube(name)
        old = s.use
        if old is not t:
            t.using_count += 1
            old.using_count -= 1
            s.use = t
            self._maybe_drop_tube(old)
        return t

    def watch(self, s: Session, name: bytes) -> int:
        t = self.tube(name)
        if t not in s.watch:
            s.watch.append(t)
            t.watching_count += 1
        return len(s.watch)

    def ignore(self, s: Session, name: bytes) -> Optional[int]:
        """Stop watching ``name``; None means NOT_IGNORED (it is the last one)."""
        t = self.tubes.get(name)
        watch = s.watch
        if t is not None and t in watch:
            if len(watch) < 2:
                return None
            i = watch.index(t)
            last = watch.pop()
            if i < len(watch):
                watch[i] = last
            t.watching_count -= 1
            self._maybe_drop_tube(t)
        return len(watch)

    # ------------------------------------------------------------------- jobs

    def new_job_id(self) -> int:
        """Take the next job id (beanstalkd assigns it when the put line is read)."""
        job_id = self.next_id
        self.next_id = job_id + 1
        return job_id

    def put(self, s: Session, job_id: int, pri: int, delay: int, ttr: int,
            body: bytes) -> Job:
        """Insert a job; ``body`` includes its trailing CRLF."""
        now = self._now()
        created = self._created
        if not 0.0 <= now - created < 0.001:
            created = self._created = now
        t = s.use
        # Job(job_id, pri, delay, ttr or 1, body, t, created), without the
        # cost of calling a Python __init__ (a third of a put's queue work);
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
            self._journal.job_put(job)
        self.jobs[job_id] = job
        self.total_jobs += 1
        t.total_jobs += 1
        if delay:
            self._make_delayed(job, now + delay)
        else:
            self._make_ready(job)
        return job

    def restore(self, job: Job, state: int, deadline_at: float = 0.0) -> None:
        """Put a job recovered from the binlog back in place (no journaling)."""
        self.jobs[job.id] = job
        if job.id >= self.next_id:
            self.next_id = job.id + 1
        if state == DELAYED:
            self._make_delayed(job, deadline_at)
        elif state == BURIED:
            self._make_buried(job)
        else:
            self._make_ready(job)

    # State entry.  Each _make_* puts a detached job into a state and counts it.

    def _make_ready(self, job: Job) -> None:
        t = job.tube
        waiting = t.waiting
        if waiting and not t.ready_count and not t.pause:
            # The first waiting client would reserve this job straight away
            # when it watches only this tube (nothing else is ready here):
            # reserve it now, without the round trip through the ready heap.
            for s in waiting:
                break
            if len(s.watch) == 1:
                self._stop_waiting(s)
                self._make_reserved(s, job, self._now())
                s.listener.reserved(job)
                return
        job.state = READY
        pri = job.pri
        if job.heap_key != pri:
            bucket = t.ready.get(pri)
            if bucket is None:
                bucket = t.ready[pri] = []
                heappush(t.ready_pris, pri)
            heappush(bucket, job.id)
            job.heap_key = pri
            t.ready_entries += 1
            if t.ready_entries > 2 * t.ready_count + 64:
                self._compact_ready(t)
        t.ready_count += 1
        self.ready_count += 1
        if job.pri < URGENT_THRESHOLD:
            t.urgent_count += 1
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
        job.count(RESERVES)
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

    # State exit.  _detach takes a job out of whatever state it is in.

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
            self._unreserve_counts(job)
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

    # Lazy heap maintenance.

    def _ready_top(self, t: Tube, take: bool = False) -> Optional[Job]:
        """The best ready job of ``t`` (lowest pri, then id), dropping stale
        entries; with ``take``, also take it out of the ready state.

        A bucket entry is live when its job is ready and still marks that
        bucket as holding its entry (``heap_key``); anything else is stale.
        """
        pris = t.ready_pris
        buckets = t.ready
        jobs = self.jobs
        while pris:
            pri = pris[0]
            bucket = buckets.get(pri)
            while bucket:
                job = jobs.get(bucket[0])
                if job is not None and job.heap_key == pri:
                    if job.state == READY:
                        if take:
                            heappop(bucket)
                            t.ready_entries -= 1
                            job.heap_key = None
                            t.ready_count -= 1
                            self.ready_count -= 1
                            if pri < URGENT_THRESHOLD:
                                t.urgent_count -= 1
                                self.urgent_count -= 1
                        return job
                    job.heap_key = None
                heappop(bucket)
                t.ready_entries -= 1
            buckets.pop(pri, None)
            heappop(pris)
        return None

    def _compact_ready(self, t: Tube) -> None:
        jobs = self.jobs
        entries = 0
        for pri, bucket in list(t.ready.items()):
            live = []
            for job_id in bucket:
                job = jobs.get(job_id)
                if job is None or job.heap_key != pri:
                    continue
                if job.state == READY:
                    live.append(job_id)
                else:
                    job.heap_key = None
            if live:
                heapq.heapify(live)
                t.ready[pri] = live
                entries += len(live)
            else:
                del t.ready[pri]
        t.ready_pris = sorted(t.ready)
        t.ready_entries = entries

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

    # ---------------------------------------------------------------- reserve

    def _best_ready(self, s: Session, now: float) -> Optional[Job]:
        best = None
        for t in s.watch:
            if t.ready_count and not (t.pause and t.unpause_at > now):
                job = self._ready_top(t)
                if job is not None and (best is None or job.pri < best.pri
                                        or (job.pri == best.pri and job.id < best.id)):
                    best = job
        return best

    def _take_ready(self, job: Job) -> None:
        """Take ``job``, just found as the top of its tube, out of the ready state."""
        self._ready_top(job.tube, True)

    def reserve(self, s: Session, timeout: Optional[float] = None):
        """Reserve the best ready job from the tubes ``s`` watches.

        Returns the :class:`Job`, :data:`DEADLINE_SOON`, :data:`TIMED_OUT`
        (``timeout`` 0 and nothing ready), or None when the session now waits;
        the result then arrives through its listener.  ``timeout`` None or
        negative waits for ever.
        """
        if not s.is_worker:
            self.set_worker(s)
        now = self._now()
        if s.reserved:
            soonest = s.soonest_deadline()
            if (soonest is not None and now >= soonest - SAFETY_MARGIN
                    and not any(t.ready_count for t in s.watch)):
                return DEADLINE_SOON
        watch = s.watch
        if len(watch) == 1:
            t = watch[0]
            job = (self._ready_top(t, True) if t.ready_count
                   and not (t.pause and t.unpause_at > now) else None)
        else:
            job = self._best_ready(s, now)
            if job is not None:
                self._take_ready(job)
        if job is not None:
            self._make_reserved(s, job, now)
            return job
        if timeout == 0:
            return TIMED_OUT
        self._start_waiting(s, now, timeout)
        return None

    def _start_waiting(self, s: Session, now: float, timeout: Optional[float]) -> None:
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

    def cancel_wait(self, s: Session) -> None:
        """Withdraw ``s``'s waiting reserve, if any; its listener hears nothing."""
        self._stop_waiting(s)

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
        if t.pause and t.unpause_at > now:
            return
        waiting = t.waiting
        while waiting and t.ready_count:
            s = next(iter(waiting))
            job = self._best_ready(s, now)
            if job is None:  # pragma: no cover - t has a ready job
                return
            self._stop_waiting(s)
            self._take_ready(job)
            self._make_reserved(s, job, now)
            s.listener.reserved(job)

    def reserve_job(self, s: Session, job_id: int) -> Optional[Job]:
        """Reserve a specific ready, delayed or buried job."""
        job = self.jobs.get(job_id)
        if job is None or job.state == RESERVED:
            return None
        if job.state != READY:
            # Journaled so that after a restart it comes back ready, as
            # reserved jobs do, not delayed or buried.
            self.journal.job_updated(job, UPDATE_RESERVE)
        self.set_worker(s)
        self._detach(job)
        self._make_reserved(s, job, self._now())
        return job

    # ------------------------------------------------------- job commands

    def delete(self, s: Session, job_id: int) -> bool:
        jobs = self.jobs
        job = jobs.get(job_id)
        if job is None:
            return False
        if job.state == RESERVED and s.reserved.get(job_id) is not job:
            return False
        if self._journaled:
            self._journal.job_deleted(job)
        self._detach(job, s)
        del jobs[job_id]
        t = job.tube
        t.cmd_delete += 1
        if not (t.using_count or t.watching_count):
            self._maybe_drop_tube(t)
        return True

    def release(self, s: Session, job_id: int, pri: int, delay: int) -> bool:
        job = s.reserved.get(job_id)
        if job is None:
            return False
        old = job.pri, job.delay
        job.pri, job.delay = pri, delay
        try:
            self.journal.job_updated(job, UPDATE_RELEASE)
        except Exception:
            job.pri, job.delay = old
            raise
        self._detach(job, s)
        job.count(RELEASES)
        if delay:
            self._make_delayed(job, self._now() + delay)
        else:
            self._make_ready(job)
        return True

    def bury(self, s: Session, job_id: int, pri: int) -> bool:
        job = s.reserved.get(job_id)
        if job is None:
            return False
        old = job.pri
        job.pri = pri
        try:
            self.journal.job_updated(job, UPDATE_BURY)
        except Exception:
            job.pri = old
            raise
        self._detach(job, s)
        job.count(BURIES)
        self._make_buried(job)
        return True

    def touch(self, s: Session, job_id: int) -> bool:
        job = s.reserved.get(job_id)
        if job is None:
            return False
        # A later deadline than before: the timer needs no change.
        self._touch_deadline(s, job, self._now() + job.ttr)
        return True

    def _kick(self, job: Job) -> None:
        self._detach(job)
        job.count(KICKS)
        self._make_ready(job)

    def kick(self, s: Session, bound: int) -> int:
        """Kick up to ``bound`` buried jobs of the used tube, or delayed ones if none are buried."""
        t = s.use
        kicked = 0
        try:
            if t.buried:
                while kicked < bound and t.buried:
                    job = next(iter(t.buried.values()))
                    self.journal.job_updated(job, UPDATE_KICK)
                    self._kick(job)
                    kicked += 1
            else:
                while kicked < bound:
                    delayed = self._delayed_top(t.delayed)
                    if delayed is None:
                        break
                    self.journal.job_updated(delayed, UPDATE_KICK)
                    heappop(t.delayed)
                    self._kick(delayed)
                    kicked += 1
        except JournalError:
            if not kicked:
                raise  # nothing kicked: the error reply
        return kicked

    def kick_job(self, job_id: int) -> bool:
        job = self.jobs.get(job_id)
        if job is None or job.state not in (BURIED, DELAYED):
            return False
        self.journal.job_updated(job, UPDATE_KICK)
        self._kick(job)
        return True

    # ---------------------------------------------------------------- peeks

    def peek(self, job_id: int) -> Optional[Job]:
        return self.jobs.get(job_id)

    def peek_ready(self, s: Session) -> Optional[Job]:
        return self._ready_top(s.use)

    def peek_delayed(self, s: Session) -> Optional[Job]:
        return self._delayed_top(s.use.delayed)

    def peek_buried(self, s: Session) -> Optional[Job]:
        buried = s.use.buried
        return next(iter(buried.values())) if buried else None

    def pause_tube(self, name: bytes, delay: int) -> bool:
        t = self.tubes.get(name)
        if t is None:
            return False
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
        return True

    # ------------------------------------------- listing and flushing (admin)

    def stored_bytes(self) -> int:
        """Bytes of all stored job bodies, each with its CRLF (O(jobs); a
        queue that needs it often keeps a running count, see server.limits)."""
        return sum(len(job.body) for job in self.jobs.values())

    def list_jobs(self, name: bytes, state: int, limit: int) -> Optional[List[int]]:
        """Ids of up to ``limit`` jobs of tube ``name`` in ``state``, in the
        order the queue would take them (ready: priority then id; delayed and
        reserved: deadline; buried: kick order).  None if there is no such tube.
        Reads the tube's own structures; changes nothing.
        """
        t = self.tubes.get(name)
        if t is None:
            return None
        if limit <= 0:
            return []
        jobs = self.jobs
        if state == BURIED:
            out: List[int] = []
            for job_id in t.buried:
                if len(out) >= limit:
                    break
                out.append(job_id)
            return out
        if state == READY:
            ready: List[Tuple[int, int]] = []
            for pri in sorted(t.ready):
                for job_id in t.ready[pri]:
                    job = jobs.get(job_id)
                    if job is not None and job.state == READY and job.heap_key == pri:
                        ready.append((pri, job_id))
                if len(ready) >= limit:
                    break
            return [job_id for _, job_id in heapq.nsmallest(limit, ready)]
        if state == DELAYED:
            entries = ((e[0], e[1]) for e in t.delayed)
        elif state == RESERVED:
            entries = ((e[0], e[1]) for e in self.ttr_heap)
        else:
            return []
        live: Dict[int, float] = {}
        for deadline, job_id in entries:
            job = jobs.get(job_id)
            if (job is not None and job.state == state and job.tube is t
                    and job.deadline_at == deadline):
                live[job_id] = deadline
        return [job_id for _, job_id in heapq.nsmallest(limit, ((d, i) for i, d in live.items()))]

    def flush_tube(self, name: bytes, states=(READY, DELAYED, BURIED)) -> Optional[int]:
        """Delete every job of tube ``name`` in one of ``states``; returns how
        many, or None if there is no such tube.  Each deletion is journaled
        (``job_deleted``) first; a :class:`JournalError` stops the flush and
        is raised only if nothing was deleted (as :meth:`kick` does).
        """
        t = self.tubes.get(name)
        if t is None:
            return None
        jobs = self.jobs
        everything = len(jobs)
        holders: Dict[int, Session] = {}
        if RESERVED in states and t.reserved_count:
            for _, job_id, s in self.ttr_heap:
                if job_id in s.reserved:
                    holders[job_id] = s
        doomed = [jobs[job_id] for state in states
                  for job_id in self.list_jobs(name, state, everything) or ()]
        deleted = 0
        try:
            for job in doomed:
                self.journal.job_deleted(job)
                self._detach(job, holders.get(job.id))
                del jobs[job.id]
                deleted += 1
        except JournalError:
            if not deleted:
                raise
        if deleted and READY in states:
            self._compact_ready(t)
        self._maybe_drop_tube(t)
        return deleted

    # ------------------------------------------------------------- deadlines

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
        """Do everything that is due: delays end, TTRs expire, waits end, pauses end."""
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
                s.listener.deadline_soon()
            elif s.wait_deadline is not None and now >= s.wait_deadline:
                self._stop_waiting(s)
                s.listener.timed_out()
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
            self.journal.job_updated(job, UPDATE_TIMEOUT)
        except Exception:
            pass  # the job comes back as ready after a restart anyway
        s.reserved.pop(job.id, None)
        self._unreserve_counts(job)
        job.count(TIMEOUTS)
        self.job_timeouts += 1
        self._make_ready(job)

    # ----------------------------------------------------------------- stats

    def stats_job(self, job_id: int) -> Optional[StatPairs]:
        job = self.jobs.get(job_id)
        if job is None:
            return None
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

    def stats_tube(self, name: bytes) -> Optional[StatPairs]:
        t = self.tubes.get(name)
        if t is None:
            return None
        now = self._now()
        left = max(0, int(t.unpause_at - now)) if t.pause else 0
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

    def stats(self) -> StatPairs:
        now = self._now()
        facts = self.facts
        utime, stime = facts.rusage()
        binlog = self.journal.stats()
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

    def list_tubes(self) -> List[bytes]:
        return [t.name for t in self.tube_list]

    def list_tubes_watched(self, s: Session) -> List[bytes]:
        return [t.name for t in s.watch]


__all__ = ["WorkQueue", "TIMED_OUT", "DEADLINE_SOON"]
