# -*- test-case-name: tests.test_pg_wire,tests.test_pg_nodes -*-
"""Looking at jobs on the PostgreSQL engine: the peeks, the extension verbs
(``list-jobs``, ``flush-tube``) and the web console's pages and body search.

:class:`Listing` is a part of :class:`~.engine.PgEngine`, which delegates
these members of the seam to it; what it uses of the engine and the other
parts is :class:`ListingHost`."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, List, Optional, Set
from typing import Protocol as _Interface

from ..core.counters import PEEK, PEEK_BURIED, PEEK_DELAYED, PEEK_READY
from ..core.job import STATE_BY_NAME
from ..core.outcomes import NOT_FOUND
from ..protocol.constants import UNRESERVED_STATES
from .util import MAX_ID, gather
from .waiting import PgSession

if TYPE_CHECKING:  # pragma: no cover
    from twisted.internet import defer

    from .connections import Connections
    from .taking import Taking
    from .tubes import NodeTube
    from .waiting import Reserver


class ListingHost(_Interface):
    """What :class:`Listing` uses of the engine, and through it of the other parts."""

    db: "Connections"
    node_id: Optional[int]
    cmd_counts: Dict[str, int]
    tubes: Dict[bytes, "NodeTube"]
    sessions: Set[PgSession]
    by_conn: Dict[int, PgSession]
    #: The other parts: the take (``claim``), the reserver (``record``).
    taking: "Taking"
    reserver: "Reserver"
    # The shared base's (core.sessions.SessionRules).
    _now: Callable[[], float]

    def tube_exists(self, name: bytes) -> "defer.Deferred":
        """Whether tube ``name`` exists (a Deferred)."""

    def drop_tube_if_unused(self, t: "NodeTube") -> None:
        """Forget tube ``t`` if nothing keeps it."""

    def internal_error(self, failure: Any) -> Any:
        """A command's statement failed: log it, answer INTERNAL_ERROR."""


class Listing:
    """The engine's listings (see the module docstring)."""

    def __init__(self, engine: ListingHost) -> None:
        self.engine = engine

    # ------------------------------------------------------------ peeks

    def _peek(self, name: str, params: List[Any]) -> Any:
        e = self.engine
        record = e.reserver.record

        def found(rows: Any) -> Any:
            if not rows:
                return NOT_FOUND
            job_id, body = rows[0]
            return record((job_id, body, 0, 0, b"", 0.0))
        return e.db.execute(name, params).addCallbacks(found, e.internal_error)

    def peek(self, s: PgSession, job_id: int) -> Any:
        self.engine.cmd_counts[PEEK] += 1
        if job_id > MAX_ID:
            return NOT_FOUND
        return self._peek("peek", [job_id])

    def peek_ready(self, s: PgSession) -> Any:
        self.engine.cmd_counts[PEEK_READY] += 1
        return self._peek("peek_ready", [s.use.name])

    def peek_delayed(self, s: PgSession) -> Any:
        self.engine.cmd_counts[PEEK_DELAYED] += 1
        return self._peek("peek_delayed", [s.use.name])

    def peek_buried(self, s: PgSession) -> Any:
        self.engine.cmd_counts[PEEK_BURIED] += 1
        return self._peek("peek_buried", [s.use.name])

    def job(self, job_id: int) -> Any:
        """The job (a Deferred), or NOT_FOUND; counts nothing."""
        if job_id > MAX_ID:
            return NOT_FOUND
        e = self.engine
        record = e.reserver.record

        def found(rows: Any) -> Any:
            return record(rows[0]) if rows else NOT_FOUND
        return e.db.execute("job", [job_id]).addCallbacks(found, e.internal_error)

    # ------------------------------------------------------------ extension verbs

    def list_jobs(self, s: PgSession, name: bytes, state: str, limit: int) -> Any:
        e = self.engine

        def listed(yes: bool) -> Any:
            if not yes:
                return NOT_FOUND
            return e.db.execute("list_jobs", [name, STATE_BY_NAME[state], limit]
                                ).addCallback(lambda rows: [r[0] for r in rows])
        return e.tube_exists(name).addCallback(listed).addErrback(e.internal_error)

    def flush_tube(self, s: PgSession, name: bytes,
                   states: Iterable[str] = UNRESERVED_STATES) -> Any:
        e = self.engine
        codes = b"{" + b",".join(b"%d" % STATE_BY_NAME[st] for st in states) + b"}"

        def flush(yes: bool) -> Any:
            if not yes:
                return NOT_FOUND
            return e.db.execute("flush", [name, codes]).addCallback(flushed)

        def flushed(rows: Any) -> int:
            for job_id, node, conn in rows:
                if node == e.node_id:
                    if not conn:
                        e.taking.claim(job_id)
                    holder = e.by_conn.get(conn) if conn else self.job_holder(job_id)
                    if holder is not None:
                        holder.reserved.pop(job_id, None)
            return e.db.execute("tube_has_jobs", [name]).addCallback(
                lambda r: self._after_flush(name, bool(r[0][0]), len(rows)))
        return e.tube_exists(name).addCallback(flush).addErrback(e.internal_error)

    def _after_flush(self, name: bytes, remaining: bool, count: int) -> int:
        e = self.engine
        t = e.tubes.get(name)
        if t is not None and not remaining:
            t.has_jobs = False
            e.drop_tube_if_unused(t)
        return count

    # ------------------------------------------------------------ console

    def jobs_page(self, name: bytes, state: str, sort: str = "queue", offset: int = 0,
                  limit: int = 50, descending: bool = False) -> Any:
        """``(total, jobs)`` of tube ``name`` in ``state`` (a Deferred), or NOT_FOUND."""
        e = self.engine
        if name not in e.tubes:
            return NOT_FOUND
        code = STATE_BY_NAME[state]
        statement = "page_%s_%s" % (sort, "desc" if descending else "asc")
        if statement not in e.db.statements:
            raise ValueError(f"unknown sort {sort!r}")
        d = gather([e.db.execute("page_total", [name, code]),
                    e.db.execute(statement, [name, code, max(0, offset), limit])])
        return d.addCallbacks(lambda r: (r[0][0][0], [self._listed(row) for row in r[1]]),
                              e.internal_error)

    def search_bodies(self, name: bytes, needle: bytes, after_id: int, span: int) -> Any:
        """One bounded step of a body search (a Deferred): ``(jobs, next_after)``."""
        e = self.engine
        if name not in e.tubes:
            return NOT_FOUND
        d = gather([e.db.execute("search", [name, after_id, span, needle], (0, 0, 0, 1)),
                    e.db.execute("last_id")])

        def found(results: Any) -> Any:
            rows, last = results
            end = after_id + span
            return [self._listed(row) for row in rows], (None if end >= last[0][0] else end)
        return d.addCallbacks(found, e.internal_error)

    def _listed(self, row: Any) -> Any:
        """A JobRecord for a console listing: (JOB columns..., state, delay, age)."""
        e = self.engine
        job = e.reserver.record(row)
        now = e._now()
        job.state, job.delay = row[6], row[7]
        job.created_at = now - row[8]
        job.deadline_at = now + row[5]
        return job

    def job_holder(self, job_id: int) -> Optional[PgSession]:
        """The session of this node holding ``job_id`` (None: none here)."""
        for s in self.engine.sessions:
            if job_id in s.reserved:
                return s
        return None


__all__ = ["Listing", "ListingHost"]
