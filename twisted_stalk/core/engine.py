# -*- test-case-name: tests.test_engine -*-
"""The engine seam: what every front end calls and every storage engine implements.

A front end (the wire protocol, the web console, metrics) turns its input
into one call per command on an :class:`Engine` and turns the outcome into
its output.  All rules of a command (ids, counters, draining, the memory
ceiling, the journal) live behind the call.  :class:`MemoryEngine
<twisted_stalk.core.memory.MemoryEngine>` keeps everything in memory (with
the optional binlog as its journal); an engine backed by a database
implements the same methods.

**Sessions.**  A front end opens a :class:`~twisted_stalk.core.session.Session`
per client with :meth:`Engine.open_session` (giving its front end, which
hears wake-ups) and closes it with :meth:`Engine.close_session` (its
reserved jobs go back to ready, its wait ends).  Every command method takes
the session first.

**Outcomes.**  Each command returns its result as a value: data on success
(a job id, a :class:`~twisted_stalk.core.job.JobRecord`, a count, a tube name,
stats pairs, a list of names or ids) or one of the constants of
:mod:`twisted_stalk.core.outcomes` (``NOT_FOUND``, ``DRAINING`` ...), as
listed on each method below.  A reserve that has to wait returns ``WAITING``.

**Wake-ups.**  A command or a timer can settle *another* session's waiting
reserve.  The engine never calls into that session's front end while a
command runs: it queues ``(session, result)`` in :attr:`Engine.wakeups`,
and the front end delivers them (``session.frontend.wake(result)``) after
the current command's own reply is written.  So the producer's ``INSERTED``
goes out before the worker's ``RESERVED`` it caused.

**Time.**  The engine reads time from its clock and keeps its deadlines
itself; its owner calls :meth:`Engine.next_deadline` to arm one timer and
:meth:`Engine.tick` when it fires.  ``wake_changed`` tells the owner that a
command set an earlier deadline (re-arm).

**Answers that arrive later.**  An engine whose storage answers
asynchronously (a database) may return a ``twisted.internet.defer.Deferred``
from any command method; it fires with the outcome.  The wire protocol then
holds that connection's later commands until it fires, so replies stay in
order per connection.  The in-memory engine always answers at once.  The
session methods (:meth:`Engine.open_session`, :meth:`Engine.close_session`,
:meth:`Engine.cancel_wait`), :meth:`Engine.reject_put` and the inspection
methods answer at once in every engine.  Such an engine queues wake-ups that
arrive on its own (a notification from the database) in :attr:`Engine.wakeups`
and then calls :attr:`Engine.notify`, which the owner sets to its delivery
function (the server factory's ``after_input``).  It may keep its own timers
and return None from :meth:`Engine.next_deadline`.

**Persistence.**  :attr:`Engine.journal` is what the wire front end asks
whether replies must wait (``journal.pending``, ``journal.when_settled``):
the binlog of the in-memory engine; an engine whose commands are durable
before they answer gives a ``NullJournal``.

**Inspection.**  Front ends that look without being a client (metrics, a
console) use :meth:`Engine.server_stats`, :meth:`Engine.tube_names`,
:meth:`Engine.tube_stats`, :meth:`Engine.job_stats` and :meth:`Engine.job`,
and read the values of :mod:`.readmodel`: :meth:`Engine.tube_figures`
(:class:`~.readmodel.TubeFigures`), :meth:`Engine.memory`
(:class:`~.readmodel.MemoryUse`) and ``journal.health()``
(:class:`~.journal.JournalHealth`): they count nothing and change nothing,
and no front end reads an engine's records.  A console also lists a tube's jobs
page by page (:meth:`Engine.jobs_page`), finds who holds a reservation
(:meth:`Engine.job_holder`) and searches bodies in bounded steps
(:meth:`Engine.search_bodies`); these answer at once in the in-memory engine
and may answer with a Deferred elsewhere.

**One base.**  The rules about sessions (use, watch, ignore, waiting
reserves and their deadlines, wake-ups, drain, the connection and command
counters) are the same in every engine and are written once, in
:class:`~twisted_stalk.core.sessions.SessionRules`, which engines derive
from; ``twisted_stalk.testing.engine_contract`` is the suite every engine passes.

Nothing here is specific to an in-memory engine: no method hands out
internal structures that a database engine could not produce (jobs are
:class:`~twisted_stalk.core.job.JobRecord` records; a database engine builds them
from rows).
"""
from __future__ import annotations

TYPE_CHECKING = False  # typing costs stalkd's first reply (server/_early.py)
if TYPE_CHECKING:  # pragma: no cover
    from typing import Callable, Iterable, List, Optional, Tuple, Union

if TYPE_CHECKING:  # pragma: no cover
    from typing import Protocol
else:  # interfaces, for the type checker and the reader
    Protocol = object

from .job import JobRecord
from .journal import Journal
from .outcomes import Outcome
from .session import FrontEnd, Session

if TYPE_CHECKING:  # pragma: no cover - the core imports no Twisted
    from twisted.internet.defer import Deferred

    from ..protocol.yaml import StatPairs
    from .readmodel import MemoryUse, TubeFigures

#: The orders :meth:`Engine.jobs_page` can sort by.
JOB_SORTS = ("queue", "id", "pri", "age", "time-left")

#: What a command answers with: data (an id or count, a name, a job, stats
#: pairs, names or ids, a page of jobs ``(total, jobs)``, a search step
#: ``(jobs, next_after)``) or an outcome constant.
#: (Type aliases: for the type checker.)
if TYPE_CHECKING:  # pragma: no cover
    Answer = Union[int, bytes, JobRecord, Outcome, StatPairs, List[bytes], List[int],
                   Tuple[int, List[JobRecord]], Tuple[List[JobRecord], Optional[int]]]
    #: A command's result: its answer, or (an asynchronous engine) a Deferred
    #: firing with it.
    Result = Union[Answer, "Deferred[Answer]"]


class EngineError(Exception):
    """An engine cannot start: a bad URL or setting, no driver, a directory
    or database it cannot use.  Its message is one line, for the operator."""


class Engine(Protocol):
    """The command API of a beanstalk engine (see the module docstring)."""

    #: Largest job body in bytes; a wire front end discards larger bodies.
    max_job_size: int
    #: ``(session, JobRecord | TIMED_OUT | DEADLINE_SOON)`` results for waiting
    #: sessions, to deliver after the current command's reply.
    wakeups: List[Tuple[Session, object]]
    #: Set when a command gave the engine an earlier deadline than the one
    #: :meth:`next_deadline` last returned.
    wake_changed: bool
    draining: bool
    #: Called (by an asynchronous engine) after it queued wake-ups outside a command.
    notify: Optional[Callable[[], None]]
    #: Replies wait while ``journal.pending`` (see the module docstring);
    #: ``journal.health()`` is what metrics and the console show of it.
    journal: Journal
    #: True: a connection's puts may run while its earlier ones are out
    #: (they share a batch statement: server/flow.py's chain); False: every
    #: command waits for the answer before it.  A wire front end then sends
    #: puts, reserves and deletes through :meth:`put_then`,
    #: :meth:`reserve_then` and :meth:`delete_then`.
    pipelined_puts: bool

    # Sessions and time.

    def open_session(self, frontend: FrontEnd) -> Session:
        """A new client; it uses and watches ``default``."""

    def close_session(self, s: Session) -> None:
        """The client is gone: its reservations return to ready, its wait ends."""

    def cancel_wait(self, s: Session) -> bool:
        """Withdraw ``s``'s waiting reserve with no result; True if it waited."""

    def take_wakeups(self) -> List[Tuple[Session, object]]:
        """The queued wake-ups, in order; the queue is emptied."""

    def next_deadline(self) -> Optional[float]:
        """When :meth:`tick` next has work to do (the clock's seconds), or None."""

    def tick(self) -> None:
        """Do what is due: delays end, TTRs expire, waits time out, pauses end."""

    def drain(self) -> None:
        """Drain mode: ``put`` answers DRAINING from now on."""

    def hold(self) -> None:
        """Hand out no more jobs (graceful shutdown): reserves wait."""

    def limit_memory(self, max_bytes: int) -> None:
        """``--max-memory``: put answers OUT_OF_MEMORY once stored job bodies
        would pass ``max_bytes`` (0: no limit); :meth:`memory` reports it.
        An engine whose bodies a database stores keeps it and applies none."""

    # The protocol's commands.

    def put(self, s: Session, pri: int, delay: int, ttr: int, body: bytes) -> Result:
        """Insert a job into the used tube (``body`` with its CRLF): the new
        id, or EXPECTED_CRLF, DRAINING, OUT_OF_MEMORY, INTERNAL_ERROR.  Every
        put takes an id, refused or not."""

    def put_then(self, s: Session, pri: int, delay: int, ttr: int, body: bytes,
                 answer: Callable[[Answer], None]) -> Any:
        """:meth:`put` with a callback instead of a Deferred: the answer if it
        is known now, else LATER and ``answer(result)`` once, later
        (core/later.py; ``SessionRules`` makes it from :meth:`put`)."""

    def reject_put(self, s: Session, reason: Outcome) -> Result:
        """A put line with no job (JOB_TOO_BIG or BAD_FORMAT): counted, returns ``reason``."""

    def refuse_oversized(self, s: Session, size: int) -> Optional[Outcome]:
        """JOB_TOO_BIG (counted as a put) if a body of ``size`` bytes (without
        its CRLF) passes ``max_job_size``, else None: the one size rule."""

    def use(self, s: Session, name: bytes) -> Result:
        """Use a tube for puts: its name."""

    def reserve(self, s: Session) -> Result:
        """A :class:`JobRecord`, DEADLINE_SOON, or WAITING (the result comes as a wake-up)."""

    def reserve_with_timeout(self, s: Session, timeout: int) -> Result:
        """As :meth:`reserve`; also TIMED_OUT.  Negative: no timeout."""

    def reserve_then(self, s: Session, timeout: Optional[int],
                     answer: Callable[[Answer], None]) -> Any:
        """:meth:`reserve` (``timeout`` None) or :meth:`reserve_with_timeout`
        with a callback, as :meth:`put_then`."""

    def reserve_job(self, s: Session, job_id: int) -> Result:
        """A :class:`JobRecord` (ready, delayed or buried before), NOT_FOUND, INTERNAL_ERROR."""

    def delete(self, s: Session, job_id: int) -> Result:
        """DELETED, NOT_FOUND, INTERNAL_ERROR."""

    def delete_then(self, s: Session, job_id: int, answer: Callable[[Answer], None]) -> Any:
        """:meth:`delete` with a callback, as :meth:`put_then`."""

    def release(self, s: Session, job_id: int, pri: int, delay: int) -> Result:
        """RELEASED, NOT_FOUND, INTERNAL_ERROR."""

    def bury(self, s: Session, job_id: int, pri: int) -> Result:
        """BURIED, NOT_FOUND, INTERNAL_ERROR."""

    def touch(self, s: Session, job_id: int) -> Result:
        """TOUCHED, NOT_FOUND."""

    def watch(self, s: Session, name: bytes) -> Result:
        """The number of tubes watched."""

    def ignore(self, s: Session, name: bytes) -> Result:
        """The number of tubes watched, or NOT_IGNORED."""

    def peek(self, s: Session, job_id: int) -> Result:
        """A :class:`JobRecord` or NOT_FOUND."""

    def peek_ready(self, s: Session) -> Result:
        """A :class:`JobRecord` or NOT_FOUND."""

    def peek_delayed(self, s: Session) -> Result:
        """A :class:`JobRecord` or NOT_FOUND."""

    def peek_buried(self, s: Session) -> Result:
        """A :class:`JobRecord` or NOT_FOUND."""

    def kick(self, s: Session, bound: int) -> Result:
        """How many jobs were kicked, or INTERNAL_ERROR."""

    def kick_job(self, s: Session, job_id: int) -> Result:
        """KICKED, NOT_FOUND, INTERNAL_ERROR."""

    def stats_job(self, s: Session, job_id: int) -> Result:
        """Stats pairs in beanstalkd's order, or NOT_FOUND."""

    def stats_tube(self, s: Session, name: bytes) -> Result:
        """Stats pairs in beanstalkd's order, or NOT_FOUND."""

    def stats(self, s: Session) -> Result:
        """Stats pairs in beanstalkd's order."""

    def list_tubes(self, s: Session) -> Result:
        """Tube names."""

    def list_tube_used(self, s: Session) -> Result:
        """The used tube's name."""

    def list_tubes_watched(self, s: Session) -> Result:
        """The watched tubes' names."""

    def pause_tube(self, s: Session, name: bytes, delay: int) -> Result:
        """PAUSED, NOT_FOUND, BAD_FORMAT (invalid name, counted first)."""

    # Inspection: counted as no command, changing nothing.

    def server_stats(self) -> StatPairs:
        """The server's stats pairs."""

    def tube_names(self) -> List[bytes]:
        """All tube names, in ``list-tubes`` order."""

    def tube_stats(self, name: bytes) -> Result:
        """A tube's stats pairs, or NOT_FOUND."""

    def job_stats(self, job_id: int) -> Result:
        """A job's stats pairs, or NOT_FOUND."""

    def job(self, job_id: int) -> Result:
        """A :class:`JobRecord`, or NOT_FOUND."""

    def tube_figures(self) -> List[TubeFigures]:
        """Every tube's figures (what ``stats-tube`` says of each), in
        ``list-tubes`` order: what metrics and the console chart."""

    def memory(self) -> MemoryUse:
        """Stored body bytes (None: not held by this engine) and the
        ``--max-memory`` ceiling it applies (0: none)."""

    # Extension verbs.

    def list_jobs(self, s: Session, name: bytes, state: str, limit: int) -> Result:
        """Up to ``limit`` job ids of a tube in a state, in taking order, or NOT_FOUND."""

    def flush_tube(self, s: Session, name: bytes, states: Iterable[str] = ...) -> Result:
        """How many jobs were deleted, NOT_FOUND, or INTERNAL_ERROR."""

    # Listing for consoles: counted as no command, changing nothing.

    def jobs_page(self, name: bytes, state: str, sort: str = "queue", offset: int = 0,
                  limit: int = 50, descending: bool = False) -> Result:
        """One page of a tube's jobs in a state (a name from ``JOB_STATES``):
        ``(total, jobs)``, where ``total`` is how many jobs the tube has in that
        state and ``jobs`` holds at most ``limit`` :class:`JobRecord` records from
        position ``offset`` of that list sorted by ``sort`` (one of
        :data:`JOB_SORTS`: ``queue`` is the order the engine takes them in,
        as ``list-jobs`` lists them; ``id``; ``pri`` then id; ``age``, newest
        first; ``time-left``, the TTR or delay deadline, then id),
        ``descending`` reversing it.  NOT_FOUND if there is no such tube."""

    def job_holder(self, job_id: int) -> Optional[Session]:
        """The session holding reserved job ``job_id`` (None: no such
        reservation)."""

    def search_bodies(self, name: bytes, needle: bytes, after_id: int, span: int) -> Result:
        """One bounded step of a body search: ``(jobs, next_after)``, the jobs
        of tube ``name`` (any state) whose id lies in ``(after_id, after_id +
        span]`` and whose body (without its CRLF) contains ``needle``, in id
        order, and the ``after_id`` to continue from (None once the range has
        passed the highest id given out).  The caller sizes ``span`` to bound
        the time of one step.  NOT_FOUND if there is no such tube."""


__all__ = ["Answer", "Engine", "EngineError", "JOB_SORTS", "Result"]
