# -*- test-case-name: tests.test_core,tests.test_engine_contract -*-
"""The session rules every engine shares: one base, written once.

What happens to a *session* is the same whichever engine stores the jobs:
opening and closing it, the tubes it uses and watches (``use``, ``watch``,
``ignore``, ``list-tube-used``, ``list-tubes-watched``), its waiting reserve
and that wait's deadline (TIMED_OUT, DEADLINE_SOON), the queue of wake-ups,
drain and hold, the connection and command counters of ``stats``, and the
``stats`` pairs themselves (:meth:`SessionRules._server_stat_pairs`).
:class:`SessionRules` holds those rules; :class:`~.memory.MemoryEngine` and
:class:`~twisted_stalk.pg.engine.PgEngine` derive from it and supply its
hooks:

- :meth:`SessionRules.new_tube`: a new tube record called ``name`` (it has
  ``name``, ``index``, ``using_count``, ``watching_count``, ``waiting``, an
  ordered dict of the sessions waiting on it, and ``unused``: nothing keeps
  it); the base keeps the registry (:meth:`SessionRules.tube`,
  :meth:`SessionRules.drop_tube_if_unused`, ``tubes``, ``tube_list``);
- :meth:`SessionRules.arm`: a wait deadline at ``when`` (the clock's
  seconds) must be looked at by then: the engine's timer fires no later;
- :meth:`SessionRules.return_reservations`: a closing session's
  reservations go back to ready.

The engine also provides ``_now`` (its clock's ``seconds``), ``facts``,
``job_timeouts`` and ``total_jobs``, and calls :meth:`_init_tubes` and
:meth:`_init_sessions` from its constructor.  The put checks every engine
makes (:meth:`SessionRules._put_refused`) and the ``stats`` pairs are here
too.

Command counters are ``cmd_counts``, keyed by the command table's counted
names (``protocol.commands.COUNTED_COMMANDS``) through the constants of
:mod:`.counters` (``cmd_counts[PUT] += 1``): a dict increment per command,
as cheap as an attribute increment, and ``stats`` lists them in the table's
order.  The contract suite (``twisted_stalk.testing.engine_contract``)
checks that each command moves its own counter, in every engine.
"""
from __future__ import annotations

import heapq

TYPE_CHECKING = False  # typing costs stalkd's first reply (server/_early.py)
if TYPE_CHECKING:  # pragma: no cover
    from typing import Any, Callable, Dict, List, Optional, Set, Tuple

    from ..protocol.yaml import StatPairs

from ..protocol.commands import COUNTED_COMMANDS
from ..protocol.constants import DEFAULT_TUBE, SAFETY_MARGIN
from .counters import IGNORE, LIST_TUBE_USED, LIST_TUBES_WATCHED, PUT, USE, WATCH
from .facts import Facts
from .later import then_from_result
from .outcomes import (
    DEADLINE_SOON,
    DRAINING,
    EXPECTED_CRLF,
    JOB_TOO_BIG,
    NOT_IGNORED,
    TIMED_OUT,
    Outcome,
)
from .session import STALE_SLACK, Session

heappush = heapq.heappush
heappop = heapq.heappop

if TYPE_CHECKING:  # pragma: no cover
    #: What a waiting reserve's wake-up carries: the session and the job it
    #: got, TIMED_OUT or DEADLINE_SOON.
    WakeUp = Tuple[Session, Any]


def _one_node(key: str, value: int, is_total: bool) -> int:
    """A counter of a queue one process serves: its own figure."""
    return value


class SessionRules:
    """The rules about sessions, shared by every engine (see the module docstring).

    Slots, not attributes, so that :class:`~.memory.MemoryEngine` (which
    declares them) keeps its specialised attribute lookups.
    """

    __slots__ = ()

    #: An engine whose puts share batch statements says True (see ``Engine``).
    pipelined_puts = False

    # Declared for readers and type checkers; each engine stores them.
    sessions: Set[Session]
    wakeups: List[WakeUp]
    wait_heap: List[Tuple[float, int, Session]]
    _wait_seq: int
    cmd_counts: Dict[str, int]
    current_connections: int
    total_connections: int
    producers: int
    workers: int
    waiting_count: int
    draining: bool
    held: bool
    wake_changed: bool
    notify: Any
    default_tube: Any
    tubes: Dict[bytes, Any]
    tube_list: List[Any]
    max_job_size: int
    max_memory: int
    facts: Facts
    job_timeouts: int
    total_jobs: int
    _now: Callable[[], float]

    def put_then(self, s: Session, pri: int, delay: int, ttr: int, body: bytes,
                 answer: Callable[[Any], None]) -> Any:
        """:meth:`put`, its answer now or given to ``answer`` (core/later.py)."""
        return then_from_result(self.put(s, pri, delay, ttr, body), answer)  # type: ignore[attr-defined]

    def delete_then(self, s: Session, job_id: int, answer: Callable[[Any], None]) -> Any:
        """:meth:`delete`, its answer now or given to ``answer`` (core/later.py)."""
        return then_from_result(self.delete(s, job_id), answer)  # type: ignore[attr-defined]

    def reserve_then(self, s: Session, timeout: Optional[int],
                     answer: Callable[[Any], None]) -> Any:
        """:meth:`reserve` (``timeout`` None) or :meth:`reserve_with_timeout`,
        its answer now or given to ``answer`` (core/later.py)."""
        return then_from_result(self.reserve(s) if timeout is None  # type: ignore[attr-defined]
                                else self.reserve_with_timeout(s, timeout),  # type: ignore[attr-defined]
                                answer)

    def _init_sessions(self) -> None:
        """Set the state these rules keep (from the engine's constructor)."""
        #: Open sessions (for listings such as the console's connections page).
        self.sessions = set()
        #: Results for waiting sessions, to deliver after the current command's
        #: own reply: ``(session, JobRecord | TIMED_OUT | DEADLINE_SOON)``.
        self.wakeups = []
        #: (when, wait token, session): when a waiting session must be looked at.
        self.wait_heap = []
        self._wait_seq = 0
        self.cmd_counts = dict.fromkeys(COUNTED_COMMANDS, 0)
        self.current_connections = 0
        self.total_connections = 0
        self.producers = 0
        self.workers = 0
        self.waiting_count = 0
        #: Drain mode (SIGUSR1): put answers DRAINING.
        self.draining = False
        #: True while no job is handed out (a graceful shutdown): reserves wait.
        self.held = False
        self.wake_changed = False
        #: Set by the owner: called after wake-ups were queued outside a command.
        self.notify = None

    # ------------------------------------------------------------ hooks

    def new_tube(self, name: bytes) -> Any:
        """Hook: a new tube record called ``name`` (see the module docstring)."""
        raise NotImplementedError

    def _tube_dropped(self, t: Any) -> None:
        """Hook: tube ``t`` left the registry (an engine forgets what it kept of it)."""

    def arm(self, when: float) -> None:
        """Hook: something is due at ``when``: the engine's timer must fire by then."""
        raise NotImplementedError

    def return_reservations(self, s: Session) -> None:
        """Hook: closing session ``s`` holds jobs no more; they go back to ready."""
        raise NotImplementedError

    # ------------------------------------------------------------ tubes

    def _init_tubes(self) -> None:
        """The tube registry, holding ``default`` (from the engine's constructor)."""
        #: Tubes by name.
        self.tubes = {}
        #: Tubes in beanstalkd's list order (append; swap-remove on delete).
        self.tube_list = []
        self.default_tube = self.tube(DEFAULT_TUBE)

    def tube(self, name: bytes) -> Any:
        """The tube called ``name``, created (at the end of the list) if needed."""
        t = self.tubes.get(name)
        if t is None:
            t = self.tubes[name] = self.new_tube(name)
            t.index = len(self.tube_list)
            self.tube_list.append(t)
        return t

    def drop_tube_if_unused(self, t: Any) -> None:
        """Forget tube ``t`` if nothing keeps it (never ``default``): out of
        the name map, and out of the list by moving the last tube into its
        place, as beanstalkd removes from its tube set; so ``list-tubes``
        keeps the reference's order."""
        if t.unused and t is not self.default_tube and t.index >= 0:
            del self.tubes[t.name]
            tube_list = self.tube_list
            last = tube_list.pop()
            if last is not t:
                tube_list[t.index] = last
                last.index = t.index
            t.index = -1
            self._tube_dropped(t)

    # ------------------------------------------------------------ sessions

    def _opened(self, s: Session) -> Session:
        """Count a new session ``s`` (it uses and watches the default tube)."""
        t = self.default_tube
        t.using_count += 1
        t.watching_count += 1
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
        self.return_reservations(s)
        s.ttr_heap.clear()
        watch = s.watch
        s.watch = []
        while watch:
            t = watch[0]
            last = watch.pop()
            if watch:
                watch[0] = last
            t.watching_count -= 1
            self.drop_tube_if_unused(t)
        s.use.using_count -= 1
        self.drop_tube_if_unused(s.use)
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

    def drain(self) -> None:
        """Enter drain mode (SIGUSR1): put answers DRAINING from now on."""
        self.draining = True

    def hold(self) -> None:
        """Hand out no more jobs (a graceful shutdown): reserves wait instead
        of taking jobs, while workers may still finish the ones they hold."""
        self.held = True

    def limit_memory(self, max_bytes: int) -> None:
        """``--max-memory`` (0: none): the ceiling :meth:`memory` reports and
        an engine holding the bodies applies to each put."""
        self.max_memory = max(0, max_bytes)

    # ------------------------------------------------------------ a session's commands

    def reject_put(self, s: Session, reason: Outcome) -> Outcome:
        """A put line that brings no job: its body was over ``max_job_size``
        (JOB_TOO_BIG; the front end discarded it) or bytes trail its
        arguments (BAD_FORMAT).  beanstalkd counts these puts too."""
        self.cmd_counts[PUT] += 1
        return reason

    def refuse_oversized(self, s: Session, size: int) -> Optional[Outcome]:
        """The one size rule of a put body (without its CRLF): JOB_TOO_BIG,
        counted as a put, when ``size`` passes ``max_job_size``; None when
        the body may be put.  Every front end asks this (the wire protocol
        once it has compared the size to decide between reading and
        discarding the body)."""
        if size > self.max_job_size:
            return self.reject_put(s, JOB_TOO_BIG)
        return None

    def _put_refused(self, s: Session, body: bytes) -> Optional[Outcome]:
        """The checks every engine makes of a put before it stores anything,
        in beanstalkd's order: the put is counted and its session becomes a
        producer; then EXPECTED_CRLF if ``body`` does not end in CRLF,
        DRAINING in drain mode, else None (the engine goes on with its own
        checks, as the memory ceiling).  Either way a put takes a job id:
        the engine's to do."""
        self.cmd_counts[PUT] += 1
        if not s.is_producer:
            self._set_producer(s)
        if body[-2:] != b"\r\n":
            return EXPECTED_CRLF
        if self.draining:
            return DRAINING
        return None

    def use(self, s: Session, name: bytes) -> bytes:
        """Use tube ``name`` for puts (created if needed); returns its name."""
        self.cmd_counts[USE] += 1
        t = self.tube(name)
        old = s.use
        if old is not t:
            t.using_count += 1
            old.using_count -= 1
            s.use = t
            self.drop_tube_if_unused(old)
        return name

    def watch(self, s: Session, name: bytes) -> int:
        """Add tube ``name`` to the watch list; returns the list's length."""
        self.cmd_counts[WATCH] += 1
        t = self.tube(name)
        if t not in s.watch:
            s.watch.append(t)
            t.watching_count += 1
        return len(s.watch)

    def ignore(self, s: Session, name: bytes) -> Any:
        """Stop watching ``name``: the watch list's length, or NOT_IGNORED
        when it is the last tube watched."""
        self.cmd_counts[IGNORE] += 1
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
            self.drop_tube_if_unused(t)
        return len(watch)

    def list_tube_used(self, s: Session) -> bytes:
        """The name of the tube ``s`` uses."""
        self.cmd_counts[LIST_TUBE_USED] += 1
        return s.use.name

    def list_tubes_watched(self, s: Session) -> List[bytes]:
        """The names of the tubes ``s`` watches, in its order."""
        self.cmd_counts[LIST_TUBES_WATCHED] += 1
        return [t.name for t in s.watch]

    # ------------------------------------------------------------ stats

    def _server_stat_pairs(self, counts: Tuple[int, int, int, int, int],
                           binlog: Dict[str, int],
                           over_nodes: Callable[[str, int, bool], int] = _one_node) -> StatPairs:
        """The ``stats`` pairs in beanstalkd's order, for any engine.

        ``counts`` are the job counts (urgent, ready, reserved, delayed,
        buried); ``binlog`` the journal's figures; ``over_nodes(key, value,
        is_total)`` turns this process's figure of a counter into the queue's
        (an engine that several nodes serve sums the others'; ``is_total`` says
        that the figures of nodes gone count too).
        """
        facts = self.facts
        utime, stime = facts.rusage()
        urgent, ready, reserved, delayed, buried = counts
        cmd_counts = self.cmd_counts
        items: List[Tuple[str, object]] = [
            ("current-jobs-urgent", urgent),
            ("current-jobs-ready", ready),
            ("current-jobs-reserved", reserved),
            ("current-jobs-delayed", delayed),
            ("current-jobs-buried", buried),
        ]
        items += [("cmd-" + name, over_nodes("cmd-" + name, cmd_counts[name], True))
                  for name in COUNTED_COMMANDS]
        items += [
            ("job-timeouts", over_nodes("job-timeouts", self.job_timeouts, True)),
            ("total-jobs", over_nodes("total-jobs", self.total_jobs, True)),
            ("max-job-size", self.max_job_size),
            ("current-tubes", len(self.tube_list)),
            ("current-connections", over_nodes("current-connections",
                                               self.current_connections, False)),
            ("current-producers", over_nodes("current-producers", self.producers, False)),
            ("current-workers", over_nodes("current-workers", self.workers, False)),
            ("current-waiting", over_nodes("current-waiting", self.waiting_count, False)),
            ("total-connections", over_nodes("total-connections", self.total_connections,
                                             True)),
            ("pid", facts.pid()),
            ("version", facts.version),
            ("rusage-utime", float(utime)),
            ("rusage-stime", float(stime)),
            ("uptime", int(self._now() - facts.started_at)),
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

    # ------------------------------------------------------------ waiting reserves

    def _track_session_deadline(self, s: Session, job_id: int, deadline: float) -> None:
        """Record a new reservation's deadline in the session's own heap (for
        DEADLINE_SOON), before the job joins ``s.reserved``.

        A session holding one job needs no heap (its soonest deadline is that
        job's); the heap is kept only while it holds more, so when a second
        job arrives the first one's entry goes in too.  Stale entries (a job
        given back, touched, timed out) are dropped when they outnumber the
        live ones.
        """
        heap = s.ttr_heap
        reserved = s.reserved
        if len(reserved) == 1:
            for other in reserved.values():
                heappush(heap, (other.deadline_at, other.id))
        heappush(heap, (deadline, job_id))
        if len(heap) > 2 * len(reserved) + STALE_SLACK:
            live = [e for e in heap if e[1] == job_id and e[0] == deadline
                    or (e[1] in reserved and reserved[e[1]].deadline_at == e[0])]
            heapq.heapify(live)
            s.ttr_heap = live

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
        wake = s.wait_wake_time()
        self._wait_seq += 1
        s.wait_token = self._wait_seq
        if wake is not None:
            heappush(self.wait_heap, (wake, s.wait_token, s))
            self.arm(wake)
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

    def _waits_due(self, now: float) -> None:
        """End the waits due by ``now``: DEADLINE_SOON for a waiter whose
        reservation is a second from its TTR, TIMED_OUT for one whose
        ``reserve-with-timeout`` ran out; any other is scheduled again."""
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


__all__ = ["SessionRules"]
