# -*- test-case-name: tests.test_pg_wire,tests.test_pg_nodes -*-
"""Listing jobs on the PostgreSQL engine: the extension verbs (``list-jobs``,
``flush-tube``) and the web console's pages and body search (a part of
:class:`~.engine.PgEngine`)."""
from __future__ import annotations

from typing import Any, Iterable, Optional

from ..core.job import STATE_BY_NAME
from ..core.outcomes import NOT_FOUND
from ..protocol.constants import UNRESERVED_STATES
from .util import gather
from .waiting import PgSession


class Listing:
    """The engine's listings (see the module docstring)."""

    # ------------------------------------------------------------ extension verbs

    def list_jobs(self, s: PgSession, name: bytes, state: str, limit: int) -> Any:
        def listed(yes: bool) -> Any:
            if not yes:
                return NOT_FOUND
            return self.db.execute("list_jobs", [name, STATE_BY_NAME[state], limit]
                                   ).addCallback(lambda rows: [r[0] for r in rows])
        return self._tube_exists(name).addCallback(listed).addErrback(self.internal_error)

    def flush_tube(self, s: PgSession, name: bytes,
                   states: Iterable[str] = UNRESERVED_STATES) -> Any:
        codes = b"{" + b",".join(b"%d" % STATE_BY_NAME[st] for st in states) + b"}"

        def flush(yes: bool) -> Any:
            if not yes:
                return NOT_FOUND
            return self.db.execute("flush", [name, codes]).addCallback(flushed)

        def flushed(rows: Any) -> int:
            for job_id, node, conn in rows:
                if node == self.node_id:
                    if not conn:
                        self.taking.claim(job_id)
                    holder = self._by_conn.get(conn) if conn else self.job_holder(job_id)
                    if holder is not None:
                        holder.reserved.pop(job_id, None)
            return self.db.execute("tube_has_jobs", [name]).addCallback(
                lambda r: self._after_flush(name, bool(r[0][0]), len(rows)))
        return self._tube_exists(name).addCallback(flush).addErrback(self.internal_error)

    def _after_flush(self, name: bytes, remaining: bool, count: int) -> int:
        t = self.tubes.get(name)
        if t is not None and not remaining:
            t.has_jobs = False
            self.drop_tube_if_unused(t)
        return count

    # ------------------------------------------------------------ console

    def jobs_page(self, name: bytes, state: str, sort: str = "queue", offset: int = 0,
                  limit: int = 50, descending: bool = False) -> Any:
        """``(total, jobs)`` of tube ``name`` in ``state`` (a Deferred), or NOT_FOUND."""
        if name not in self.tubes:
            return NOT_FOUND
        code = STATE_BY_NAME[state]
        statement = "page_%s_%s" % (sort, "desc" if descending else "asc")
        if statement not in self.db.statements:
            raise ValueError(f"unknown sort {sort!r}")
        d = gather([self.db.execute("page_total", [name, code]),
                    self.db.execute(statement, [name, code, max(0, offset), limit])])
        return d.addCallbacks(lambda r: (r[0][0][0], [self._listed(row) for row in r[1]]),
                              self.internal_error)

    def search_bodies(self, name: bytes, needle: bytes, after_id: int, span: int) -> Any:
        """One bounded step of a body search (a Deferred): ``(jobs, next_after)``."""
        if name not in self.tubes:
            return NOT_FOUND
        d = gather([self.db.execute("search", [name, after_id, span, needle], (0, 0, 0, 1)),
                    self.db.execute("last_id")])

        def found(results: Any) -> Any:
            rows, last = results
            end = after_id + span
            return [self._listed(row) for row in rows], (None if end >= last[0][0] else end)
        return d.addCallbacks(found, self.internal_error)

    def _listed(self, row: Any) -> Any:
        """A JobRecord for a console listing: (JOB columns..., state, delay, age)."""
        job = self._job(row)
        now = self._now()
        job.state, job.delay = row[6], row[7]
        job.created_at = now - row[8]
        job.deadline_at = now + row[5]
        return job

    def job_holder(self, job_id: int) -> Optional[PgSession]:
        """The session of this node holding ``job_id`` (None: none here)."""
        for s in self.sessions:
            if job_id in s.reserved:
                return s
        return None


__all__ = ["Listing"]
