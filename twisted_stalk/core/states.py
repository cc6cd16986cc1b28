# -*- test-case-name: tests.test_core,tests.test_engine -*-
"""The job state machine of :class:`~twisted_stalk.core.memory.MemoryEngine`:
states, waiting reserves and deadlines.

Each ``_make_*`` puts a detached job into a state and counts it; ``_detach``
takes a job out of whatever state it is in, so every counter (global and per
tube) is exact after each step.  A job that becomes ready on a tube whose
first waiting client watches only that tube (with nothing else ready there)
is reserved for that client at once, without the round trip through the
ready heap; results for waiting clients are queued in ``wakeups``.

Deadlines (delays, TTRs, waiting reserves, pauses) each have one lazy heap;
:meth:`JobStates.next_deadline` gives the earliest so the owner arms one
timer, and :meth:`JobStates.tick` does what is due.
"""
from __future__ import annotations

import heapq

TYPE_CHECKING = False  # typing costs stalkd's first reply (server/_early.py)
if TYPE_CHECKING:  # pragma: no cover
    from typing import List, Optional, Tuple

from ..protocol.constants import SAFETY_MARGIN, URGENT_THRESHOLD
from .job import BURIED, DELAYED, INVALID, KICKS, READY, RESERVED, RESERVES, TIMEOUTS, JobRecord
from .journal import UPDATE_TIMEOUT, JournalError
from .outcomes import DEADLINE_SOON, TIMED_OUT, WAITING
from .session import Session
from .tube import MemoryTube

heappush = heapq.heappush
heappop = heapq.heappop


class JobStates:
    """A part of :class:`~twisted_stalk.core.memory.MemoryEngine` (which
    declares the slots these methods use)."""

    __slots__ = ()

    def _make_ready(self, job: JobRecord) -> None:
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

    def _make_delayed(self, job: JobRecord, deadline_at: float) -> None:
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

    def _make_buried(self, job: JobRecord) -> None:
        job.state = BURIED
        job.tube.buried[job.id] = job
        self.buried_count += 1

    def _make_reserved(self, s: Session, job: JobRecord, now: float) -> None:
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

    def _touch_deadline(self, s: Session, job: JobRecord, deadline: float) -> None:
        """A touch: ``job``'s new deadline in both heaps (its old entries go
        stale, and are dropped once they outnumber the live ones, as after
        a reservation)."""
        job.deadline_at = deadline
        ttrs = self.ttr_heap
        heappush(ttrs, (deadline, job.id, s))
        if len(ttrs) > 2 * self.reserved_count + 32:
            self.ttr_heap = self._live_deadlines(ttrs, RESERVED)
        s.move_deadline(job.id, deadline)

    def _detach(self, job: JobRecord, s: Optional[Session] = None) -> None:
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

    def _unreserve_counts(self, job: JobRecord) -> None:
        job.tube.reserved_count -= 1
        self.reserved_count -= 1

    def _kick(self, job: JobRecord) -> None:
        self._detach(job)
        job.count(KICKS)
        self._make_ready(job)

    def _take_ready(self, t: MemoryTube) -> Optional[JobRecord]:
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

    def _delayed_top(self, heap: List[Tuple[float, int]]) -> Optional[JobRecord]:
        jobs = self.jobs
        while heap:
            deadline, job_id = heap[0]
            job = jobs.get(job_id)
            if job is not None and job.state == DELAYED and job.deadline_at == deadline:
                return job
            heappop(heap)
        return None

    # ------------------------------------------------------------- reserve

    def _best_tube(self, s: Session, now: float) -> Optional[MemoryTube]:
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

    def _serve_waiters(self, t: MemoryTube) -> None:
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
        self._waits_due(now)
        pauses = self.pause_heap
        while pauses and pauses[0][0] <= now:
            when, name = heappop(pauses)
            t = self.tubes.get(name)
            if t is None or not t.pause or t.unpause_at != when:
                continue
            t.pause = 0
            if t.waiting:
                self._serve_waiters(t)

    def _time_out(self, job: JobRecord, s: Session) -> None:
        try:
            self._journal.job_updated(job, UPDATE_TIMEOUT)
        except JournalError:
            pass  # the job comes back as ready after a restart anyway
        s.reserved.pop(job.id, None)
        self._unreserve_counts(job)
        job.count(TIMEOUTS)
        self.job_timeouts += 1
        self._make_ready(job)


__all__ = ["JobStates"]
