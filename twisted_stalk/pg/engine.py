# -*- test-case-name: tests.test_pg_wire,tests.test_pg_nodes -*-
"""The PostgreSQL engine: the beanstalk commands on a queue that several nodes share.

:class:`PgEngine` implements :class:`~twisted_stalk.core.engine.Engine`.
Jobs live in PostgreSQL (:mod:`.schema`); each command that touches jobs is
one statement (:mod:`.sql`) sent on a pipelined connection (:mod:`.connections`),
and the command answers with a Deferred that fires once the statement has
committed: nothing is acknowledged before it is durable (with
``synchronous_commit`` on, and on the synchronous standby if one is
configured).  ``journal`` records nothing: it only holds replies (:mod:`.replyhold`).

What belongs to a connection lives in the node that holds it, as in
beanstalkd it lives in the server: the tubes a session uses and watches, its
waiting reserve, the reservations it holds (also recorded in the job rows as
(node, connection), so a reservation is checked by the database on every
release, bury, touch and delete).  Those commands (``use``, ``watch``,
``ignore``, ``list-tube-used``, ``list-tubes-watched``) and the session
methods answer at once.  Closing a session gives its reservations back in
the background.

The engine owns its parts, each an object built with it that declares what
it uses of it (a ``...Host`` protocol in its module; docs/architecture.md
draws the arrows): reserves and wake-ups (:mod:`.waiting`), timers,
heartbeat and notifications between nodes (:mod:`.upkeep`), stats
(:mod:`.stats`), peeks and listings (:mod:`.listing`), the jobs a worker's
delete takes for its next reserve (:mod:`.taking`).  The tubes
(:mod:`.tubes`) and the session rules (``core.sessions``) are its bases.
"""
from __future__ import annotations

import socket
from typing import Any, Callable, Dict, List, Optional, Tuple

from twisted.internet import defer
from twisted.logger import Logger

from ..core.counters import (
    BURY, DELETE, KICK, PAUSE_TUBE, RELEASE, RESERVE, RESERVE_WITH_TIMEOUT, TOUCH,
)
from ..core.facts import Facts
from ..core.journal import NullJournal
from ..core.later import LATER, as_deferred
from ..core.sessions import SessionRules
from ..core.outcomes import (
    BAD_FORMAT,
    BURIED,
    DELETED,
    INTERNAL_ERROR,
    KICKED,
    NOT_FOUND,
    PAUSED,
    RELEASED,
    TOUCHED,
    Outcome,
)
from ..protocol.commands import valid_tube_name
from ..protocol.constants import DEFAULT_MAX_JOB_SIZE
from .batch import Batcher, bytea_array, int_array, text_array
from .config import EngineConfig
from .notices import PauseEnds
from .connections import Connections
from .notifications import Notifications
from .replyhold import ENABLED as REPLY_HOLD, ReplyHold
from .sql import SESSION, channel, statements
from .listing import Listing
from .stats import Stats
from .util import MAX_ID, Delegated, gather
from .tubes import NodeTube, TubeRegistry
from .taking import Taking
from .upkeep import Upkeep
from .waiting import PgSession, Reserver

log = Logger(namespace="twisted_stalk.pg")


class PgEngine(TubeRegistry, SessionRules):
    """One node's engine on a PostgreSQL queue (see the module docstring).

    Its parts, each built with the engine and declaring what it uses of it
    (a ``...Host`` protocol in its module): :attr:`statistics` (stats.py),
    :attr:`upkeep` (upkeep.py), :attr:`taking` (taking.py), :attr:`reserver`
    (waiting.py), :attr:`listing` (listing.py).  The seam's members that
    live in a part are delegated to it (:class:`~.util.Delegated`)."""

    #: A connection's pipelined puts run while its earlier ones are out
    #: (server/flow.py: a chain), so one read's puts share a batch statement.
    pipelined_puts = True

    # The seam's stats and inspection are the stats part's (stats.py).
    stats = Delegated("statistics", Stats)
    stats_tube = Delegated("statistics", Stats)
    stats_job = Delegated("statistics", Stats)
    list_tubes = Delegated("statistics", Stats)
    tube_names = Delegated("statistics", Stats)
    tube_stats = Delegated("statistics", Stats)
    tube_figures = Delegated("statistics", Stats)
    memory = Delegated("statistics", Stats)
    server_stats = Delegated("statistics", Stats)
    job_stats = Delegated("statistics", Stats)
    # The peeks and listings are the listing part's (listing.py).
    peek = Delegated("listing", Listing)
    peek_ready = Delegated("listing", Listing)
    peek_delayed = Delegated("listing", Listing)
    peek_buried = Delegated("listing", Listing)
    job = Delegated("listing", Listing)
    list_jobs = Delegated("listing", Listing)
    flush_tube = Delegated("listing", Listing)
    jobs_page = Delegated("listing", Listing)
    search_bodies = Delegated("listing", Listing)
    job_holder = Delegated("listing", Listing)
    # The base's timer hook is the upkeep's (upkeep.py).
    arm = Delegated("upkeep", Upkeep)

    def __init__(self, reactor: Any, config: EngineConfig,
                 max_job_size: int = DEFAULT_MAX_JOB_SIZE, facts: Optional[Facts] = None) -> None:
        self.reactor = self.clock = reactor
        self._now = reactor.seconds
        self.config = config
        self.max_job_size = max_job_size
        #: Set by ``--max-memory`` (``limit_memory``) but not applied: job
        #: bodies are stored by the database (docs/compat.md); see :meth:`memory`.
        self.max_memory = 0
        self.facts = facts or Facts(reactor.seconds())
        self.reply_hold = ReplyHold() if REPLY_HOLD else None  # replyhold.py
        self.journal = self.reply_hold or NullJournal()
        self.channel = channel(config.schema)
        self.node_id: Optional[int] = None
        # Sessions, waits, wake-ups, drain and the connection and command
        # counters (core.sessions.SessionRules).
        self._init_sessions()
        #: This node's sessions by connection number.
        self.by_conn: Dict[int, PgSession] = {}
        self._next_conn = 0
        self.job_timeouts = 0
        self.total_jobs = 0
        self._epoch = 0
        self._init_tubes()
        self.statistics = Stats(self)
        upkeep = self.upkeep = Upkeep(self)
        #: The statement connections (pipelined, reconnected).
        self.db = Connections(reactor, config.conninfo, statements(config.schema),
                              size=config.pool, wait=config.wait, on_up=upkeep.resync,
                              settings=dict(SESSION))
        #: The LISTEN connection: other nodes' notices.
        self.notifications = Notifications(reactor, config.conninfo, self.channel,
                                           on_event=upkeep.event, on_up=upkeep.resync)
        #: Jobs a worker's delete took for its next reserve (taking.py).
        self.taking = Taking(self, config.take_hold)
        reserver = self.reserver = Reserver(self)
        self.listing = Listing(self)
        # What the commands call per job, looked up once.
        self.internal_error = upkeep.internal_error
        self._delayed_due_in = upkeep.delayed_due_in
        self._ready_by_name = reserver.ready_by_name
        self._reserve = reserver.reserve
        self._takers = reserver.takers
        self._handed = reserver.handed
        self._puts = Batcher(reactor, self._put_many, self.internal_error,
                             after=reserver.deliver_handoffs, hold=self.reply_hold)
        self._deletes = Batcher(reactor, self._delete_many, self.internal_error, hold=self.reply_hold)

    # ------------------------------------------------------------ life cycle

    def register(self) -> None:
        """Create or migrate the schema and register this node (blocking: at startup)."""
        import psycopg

        from .schema import VERSION, migrate, quoted
        for line in migrate(self.config.conninfo, self.config.schema).notes(self.config.schema):
            log.warn("{line}", line=line)
        s = quoted(self.config.schema)
        with psycopg.connect(self.config.conninfo, autocommit=True) as conn:
            row = conn.execute(
                f"INSERT INTO {s}.nodes (id, started_at, heartbeat_at, hostname, pid, version) "
                f"SELECT nextval('{s}.node_ids'), c.e, c.e, %s, %s, {VERSION} "
                f"FROM (SELECT extract(epoch FROM clock_timestamp())::float8 AS e) c "
                f"RETURNING id",
                (socket.gethostname(), self.facts.pid())).fetchone()
        self.node_id = row[0]
        self.upkeep.name_sessions()

    def start(self) -> defer.Deferred:
        """Connect the statement and LISTEN connections and start the
        heartbeat (after :meth:`register`)."""
        self.upkeep.start_heartbeat()
        self.reactor.addSystemEventTrigger("before", "shutdown", self.stop)
        return gather([self.db.start(), self.notifications.start()])

    def stop(self) -> defer.Deferred:
        """Leave: give back this node's reservations and unregister, then close."""
        self.upkeep.stop_heartbeat()
        self.taking.stop()
        self.notifications.stop()
        if self.node_id is None or not self.db.up:
            self.db.stop()
            return defer.succeed(None)
        d = self.db.execute("leave", [self.node_id])
        d.addCallback(self.reserver.tubes_ready)
        d.addCallback(lambda _: self.upkeep.send_notes())
        d.addErrback(self.upkeep.failed)
        d.addBoth(lambda _: self.db.stop())
        return d

    def hold(self) -> None:
        """Hand out no more jobs (a graceful stop): taken ones go back too."""
        super().hold()
        self.taking.give_back()

    def deliver(self) -> None:
        """Hand queued wake-ups to the front end (outside any command)."""
        if self.wakeups and self.notify is not None:
            self.notify()

    # ------------------------------------------------------------ sessions

    def open_session(self, frontend: Any) -> PgSession:
        """A new client, numbered on this node; it uses and watches ``default``."""
        self._next_conn += 1
        s = PgSession(frontend, self.default_tube, self._next_conn)
        self.by_conn[s.conn_id] = s
        return self._opened(s)

    def return_reservations(self, s: PgSession) -> None:
        """A closing session's jobs go back to ready (in the background)."""
        self.by_conn.pop(s.conn_id, None)
        self.taking.forgo(s)
        if s.is_worker:
            self.reserver.give_back(s)

    def next_deadline(self) -> None:
        """None: this engine keeps its own timers."""
        return None

    def tick(self) -> None:
        """Nothing: this engine keeps its own timers."""

    def _tube_dropped(self, t: NodeTube) -> None:
        if self.node_id is not None and self.db.up:
            self.db.execute("forget_tube", [t.name, self.node_id]).addErrback(self.upkeep.failed)

    # ------------------------------------------------------------ put

    def put(self, s: PgSession, pri: int, delay: int, ttr: int, body: bytes) -> Any:
        return as_deferred(lambda answer: self.put_then(s, pri, delay, ttr, body, answer))

    def put_then(self, s: PgSession, pri: int, delay: int, ttr: int, body: bytes,
                 answer: Callable[[Any], None]) -> Any:
        refused = self._put_refused(s, body)
        if refused is not None:
            self._refused(refused).addCallback(answer)
            return LATER
        t = s.use
        s.deleted = False  # its delete was not followed by a reserve (taking.py)
        s.put_before = True
        self._puts.add((t.name, pri, delay, ttr or 1, body[:-2], s, t), answer)
        return LATER

    def _inserted(self, item: Tuple[Any, ...], job_id: int, handed: bool) -> int:
        """A put of the batch committed: the engine's figures and notices."""
        _, pri, delay, _, _, _, t = item
        self.total_jobs += 1
        t.total_jobs += 1
        self._has_jobs(t)
        if delay:
            self._delayed_due_in(delay)
        elif not handed:  # put_many told the others
            self.taking.ready_behind(t, pri, job_id,
                                     lambda: self._ready_by_name(t.name, told=True))
        return job_id

    def _put_many(self, items: List[Any]) -> defer.Deferred:
        """Run a batch of puts (batch.py): the job id per item.

        The batch's best jobs of each tube are offered to that tube's waiting
        reserves on this node (``Reserver.takers``), and a put whose own session
        will reserve it to the node's take (taking.py); the statement hands
        each over unless a ready job as good is in the database (see
        ``put_many``)."""
        tubes, pris, delays, ttrs, bodies, sessions, _ = zip(*items)
        takers = ([None] * len(items) if self.held or not self.waiting_count
                  else self._takers(items))
        conns = [0] * len(items)
        marks: Dict[bytes, Any] = {}
        for n, (s, producer) in enumerate(zip(takers, sessions)):
            if s is not None:
                conns[n] = s.conn_id
            elif self.taking.hold and producer.put_streak:
                mark = self.taking.wants_put(producer, delays[n])
                if mark is not None:
                    conns[n] = -1
                    marks[tubes[n]] = mark
        if marks:
            self.taking.started()
        one = len(items) == 1  # its values as scalars: no arrays (sql_many.py)
        name, params = ("put_one", [tubes[0], pris[0], delays[0], ttrs[0], bodies[0], conns[0]]) \
            if one else ("put_many", [text_array(list(tubes)), int_array(list(pris)),
                                      int_array(list(delays)), int_array(list(ttrs)),
                                      bytea_array(list(bodies)), int_array(conns)])
        params.append(self.node_id)
        if not self.statistics.alone:  # the other nodes hear of its ready jobs
            name, params = name + "_telling", params + [self.channel.encode()]
        d = self.db.execute(name, params, (0, 0, 0, 0, 1, 0, 0, 0)[:len(params)] if one else None)

        def answers(rows: Any) -> List[int]:
            rows.sort()  # by id: the order of the puts (sql_many.put_many)
            out, took = [], []
            for (job_id, _, handed), item, s, conn in zip(rows, items, takers, conns):
                if s is not None:
                    s.attempting = False
                    if handed:  # (id, body, ttr, pri, tube, time left, reservation)
                        self._handed(s, (job_id, item[4], item[3], item[1], item[0],
                                         float(item[3]), 1))
                elif conn < 0:
                    if handed:  # (id, tube, body, ttr, pri, time left, reservation)
                        took.append((job_id, item[0], item[4], item[3], item[1],
                                     float(item[3]), 1))
                    else:
                        self.taking.forgo(item[5])
                out.append((job_id, handed))
            if marks:
                self.taking.ended()
                self.taking.took(took, marks)
            inserted = self._inserted
            return [inserted(item, job_id, handed) for item, (job_id, handed) in zip(items, out)]

        def failed(failure: Any) -> Any:
            if marks:
                self.taking.ended(failed=True)
            for s in takers:
                if s is not None:
                    s.attempting = False
            for s, conn in zip(sessions, conns):
                if conn < 0:
                    self.taking.forgo(s)
            return failure
        return d.addCallbacks(answers, failed)

    def _delete_many(self, items: List[Any]) -> defer.Deferred:
        """Run a batch of deletes, (job id, session, reservation, epoch when
        asked) each: DELETED or NOT_FOUND per item.  The statement answers
        (tube, state, tube keeps jobs) or nothing per job; "keeps jobs" is
        None (not looked up) for a tube the batch's sessions use or watch, and
        a batch whose jobs are all held by their deleters in such tubes runs
        without the lookup (``delete_many_kept``: sql_many.py).  It also takes
        jobs for the batch's workers about to reserve (taking.py); they are
        kept before the replies go out."""
        kept = {t.name for s in {item[1] for item in items} for t in (s.use, *s.watch)}
        tubes, counts, marks = self.taking.wants(items)
        if marks:
            self.taking.started()
        ids, conns, tokens = zip(*((i, s.conn_id, t) for i, s, t, _ in items))
        one = len(items) == 1
        params = [ids[0], conns[0], self.node_id, tokens[0]] if one else \
            [int_array(list(ids)), int_array(list(conns)), self.node_id, int_array(list(tokens))]
        known = all(s.holds_in(i, kept) for i, s, _, _ in items)  # no lookup: see above
        name = ("delete_one" if one else "delete_many") + ("_kept" if known else "")
        params[3:3] = [] if known else [text_array(sorted(kept))]
        if tubes:  # workers about to reserve: their next jobs come with it
            name, params = name + "_taking", params + [text_array(tubes), int_array(counts)]
        d = self.db.execute(name, params)

        def answers(rows: Any) -> List[Any]:
            # A job deleted by a batch that asked for it more than once is
            # the first asker's, or if it was reserved, its holder's.
            askers: Dict[int, List[int]] = {}
            for n, item in enumerate(items):
                job_id = item[0]
                askers.setdefault(job_id, []).append(n)
            out: List[Any] = [None] * len(items)
            took = []
            for job_id, tube, state, owner, remaining, *rest in rows:
                if state == -1:
                    took.append((job_id, tube) + tuple(rest))
                    continue
                n = next((n for n in askers[job_id] if state != 1 or (
                    items[n][2] == rest[4] and owner in (0, items[n][1].conn_id))),
                    askers[job_id][0])
                out[n] = (tube, state, remaining)
            if marks:
                self.taking.ended()
                self.taking.took(took, marks)
            deleted = self._deleted
            return [deleted(item, row) for item, row in zip(items, out)]

        def failed(failure: Any) -> Any:
            if marks:
                self.taking.ended(failed=True)
            for _, s, _, _ in items:
                if s.expect is not None and s.expect in marks:
                    self.taking.forgo(s)  # nothing was taken for it
            return failure
        return d.addCallbacks(answers, failed)

    def _refused(self, outcome: Outcome) -> defer.Deferred:
        """A refused put still takes a job id, as in beanstalkd."""
        return self.db.execute("take_id").addCallbacks(lambda _: outcome,
                                                       self.internal_error)

    # ------------------------------------------------------------ reserves

    def reserve(self, s: PgSession) -> Any:
        return as_deferred(lambda answer: self.reserve_then(s, None, answer))

    def reserve_with_timeout(self, s: PgSession, timeout: int) -> Any:
        return as_deferred(lambda answer: self.reserve_then(s, timeout, answer))

    def reserve_then(self, s: PgSession, timeout: Optional[int],
                     answer: Callable[[Any], None]) -> Any:
        self.cmd_counts[RESERVE if timeout is None else RESERVE_WITH_TIMEOUT] += 1
        return self._reserve(s, None if timeout is None or timeout < 0 else timeout,
                             self.held, answer)

    def reserve_job(self, s: PgSession, job_id: int) -> Any:
        if job_id > MAX_ID:
            return NOT_FOUND
        claimed = self.taking.claim(job_id) if self.taking.by_tube else None
        if claimed is not None:  # a taken job is ready to this node: it is handed over
            if not s.is_worker:
                self._set_worker(s)
            job = self.reserver.record(claimed)
            self.reserver.hold(s, job, claimed[5])
            return job
        d = self.db.execute("reserve_job", [job_id, self.node_id, s.conn_id])

        def done(rows: Any) -> Any:
            if not rows:
                return NOT_FOUND
            if not s.is_worker:
                self._set_worker(s)
            return self.reserver.reserved(s, rows[0]) or NOT_FOUND
        return d.addCallbacks(done, self.internal_error)

    # ------------------------------------------------------------ the holder's commands

    def delete(self, s: PgSession, job_id: int) -> Any:
        return as_deferred(lambda answer: self.delete_then(s, job_id, answer))

    def delete_then(self, s: PgSession, job_id: int, answer: Callable[[Any], None]) -> Any:
        self.cmd_counts[DELETE] += 1
        if job_id > MAX_ID:
            return NOT_FOUND
        s.deleted = True
        held = s.reserved.get(job_id)
        claimed = None if held is not None or not self.taking.by_tube else \
            self.taking.claim(job_id)  # taken for a reserve, ready to this node
        token = held.binlog_file if held is not None else claimed[6] if claimed else 0
        if claimed is not None:  # a failed delete leaves the taken job taken
            answer = self._unclaim_on_failure(claimed, answer)
        self._deletes.add((job_id, s, token, self._epoch), answer)
        return LATER

    def _unclaim_on_failure(self, claimed: Any, answer: Callable[[Any], None]
                            ) -> Callable[[Any], None]:
        def answered(result: Any) -> None:
            if result is INTERNAL_ERROR:
                self.taking.unclaim(claimed)
            answer(result)
        return answered

    def _deleted(self, item: Tuple[Any, ...], row: Any) -> Outcome:
        """A delete of the batch committed (``row``: tube, state, tube keeps
        jobs) or found no job (None): its answer, and the tube's figures."""
        job_id, s, _, since = item
        if row is None:
            s.reserved.pop(job_id, None)
            return NOT_FOUND
        name, state, remaining = row
        if state == 1:
            s.reserved.pop(job_id, None)
        t = self.tubes.get(name)
        if t is None and remaining is None:  # dropped while in flight: look
            self._look_again(name)
        elif t is None and remaining:
            t = self.tube(name)
            self._has_jobs(t)
        if t is not None:
            t.cmd_delete += 1
            if remaining is None:  # not looked up: a session here keeps the tube
                t.unsure = t.unsure or t.seen <= since
            elif not remaining and t.seen <= since:
                t.has_jobs = False
                self.drop_tube_if_unused(t)
        return DELETED

    def _holder_statement(self, s: PgSession, job_id: int, name: str, args: List[Any],
                          then: Any) -> Any:
        """Run a statement only the holder may run; NOT_FOUND if ``s`` does not hold the job."""
        job = s.reserved.get(job_id)
        if job is None:
            return NOT_FOUND
        d = self.db.execute(name, [job_id, self.node_id, s.conn_id] + args + [job.binlog_file])

        def done(rows: Any) -> Any:
            if not rows:
                s.reserved.pop(job_id, None)  # its TTR ran out, or its node was given up on
                return NOT_FOUND
            return then(rows[0])
        return d.addCallbacks(done, self.internal_error)

    def release(self, s: PgSession, job_id: int, pri: int, delay: int) -> Any:
        self.cmd_counts[RELEASE] += 1

        def released(row: Any) -> Outcome:
            s.reserved.pop(job_id, None)
            if delay:
                self._delayed_due_in(delay)
            else:
                t = self.tubes.get(row[0])
                if t is None:
                    self._ready_by_name(row[0])
                else:
                    self.taking.ready_behind(t, pri, job_id,
                                             lambda: self._ready_by_name(row[0]))
            return RELEASED
        return self._holder_statement(s, job_id, "release", [pri, delay], released)

    def bury(self, s: PgSession, job_id: int, pri: int) -> Any:
        self.cmd_counts[BURY] += 1

        def buried(row: Any) -> Outcome:
            s.reserved.pop(job_id, None)
            return BURIED
        return self._holder_statement(s, job_id, "bury", [pri], buried)

    def touch(self, s: PgSession, job_id: int) -> Any:
        self.cmd_counts[TOUCH] += 1

        def touched(row: Any) -> Outcome:
            job = s.reserved.get(job_id)
            if job is not None:
                job.deadline_at = self._now() + row[0]
                self.upkeep.schedule_ttr(s, job)
                s.move_deadline(job_id, job.deadline_at)
            return TOUCHED
        return self._holder_statement(s, job_id, "touch", [], touched)

    # ------------------------------------------------------------ kicks

    def kick(self, s: PgSession, bound: int) -> Any:
        self.cmd_counts[KICK] += 1
        name = s.use.name

        def kicked(rows: Any) -> int:
            if rows:
                self._ready_by_name(name, len(rows))
            return len(rows)
        return self.db.execute("kick", [name, bound]).addCallbacks(kicked,
                                                                  self.internal_error)

    def kick_job(self, s: PgSession, job_id: int) -> Any:
        if job_id > MAX_ID:
            return NOT_FOUND
        def kicked(rows: Any) -> Outcome:
            if not rows:
                return NOT_FOUND
            self._ready_by_name(rows[0][0])
            return KICKED
        return self.db.execute("kick_job", [job_id]).addCallbacks(kicked,
                                                                 self.internal_error)

    # ------------------------------------------------------------ pause

    def pause_tube(self, s: PgSession, name: bytes, delay: int) -> Any:
        self.cmd_counts[PAUSE_TUBE] += 1
        if not valid_tube_name(name):
            return BAD_FORMAT
        d = self.tube_exists(name)

        def exists(yes: bool) -> Any:
            if not yes:
                return NOT_FOUND
            return self.db.execute("pause", [name, delay]).addCallback(paused)

        def paused(rows: Any) -> Outcome:
            left = rows[0][0]
            t = self.tube(name)
            t.cmd_pause += 1
            if delay:
                self.taking.give_back([name])
            t.pause = delay
            self.upkeep.pause_ends_in(t, left if delay else 0)
            self.upkeep.note(PauseEnds(self.node_id, name, left if delay else 0))
            return PAUSED
        return d.addCallback(exists).addErrback(self.internal_error)

    def tube_exists(self, name: bytes) -> defer.Deferred:
        """Whether tube ``name`` exists: known here, holding jobs, or used by another node."""
        t = self.tubes.get(name)
        if t is not None and not (t.unsure and not t.referenced):
            return defer.succeed(True)
        d = gather([self.db.execute("tube_has_jobs", [name]), self.statistics.read_fresh()])

        def exists(results: Any) -> bool:
            jobs = bool(results[0][0][0])
            self._settle(name, jobs)
            return jobs or name in self.tubes or name in self.statistics.elsewhere()
        return d.addCallback(exists)


__all__ = ["PgEngine"]
