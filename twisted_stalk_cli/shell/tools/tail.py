# -*- test-case-name: tests.test_shell_cli -*-
"""``stalk tail TUBE``: jobs as they arrive, without reserving any (stats and
peek only: no job counter changes)."""
from __future__ import annotations

import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from twisted_stalk.protocol.constants import UNRESERVED_STATES

from ..conn import Connection
from ..errors import EXIT_OK
from ..output import Output, isatty
from ..render import body_data, render_body
from .args import check_tube, parser
from .keys import Wait, quit_keys
from .queries import job_stats, server_stats, use


class Tail:
    """Finds jobs of one tube as they appear, without reserving anything.

    Job ids are handed out in increasing order, so the jobs put after tail
    starts are those above the highest id in use then, and those are the
    only ones shown.  That id is found by asking ``stats-job`` for the ids
    above a floor (``stats``' ``total-jobs``, and the heads of the tube's
    queues), in batches, until a batch holds none: ``total-jobs`` alone is
    not it, since ids can run ahead of it (a put refused with
    EXPECTED_CRLF uses one up on beanstalkd; after a binlog restart the
    count starts again from 0 while the jobs keep their ids).

    Each poll then reads ``total-jobs`` (plus the gap found), the heads, and
    a window of ids past them; the window widens while ``total-jobs`` grows
    more than the jobs found.  ``stats-job`` tells a job's tube and state,
    ``peek`` its body; delayed jobs are shown when they turn ready.  A job
    whose age says it was there before tail started is never shown (a last
    guard when the gaps are wider than a batch).
    """

    BATCH = 32
    PER_POLL = 500
    PROBE = 8
    MAX_WINDOW = 1024

    def __init__(self, conn: Connection, tube: str,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.conn = conn
        self.tube = tube
        self.clock = clock
        self.started = clock()
        use(conn, tube)  # peek-ready/-delayed/-buried look at the used tube
        total = int(server_stats(conn).get("total-jobs", 0))
        self.last = self._highest(max([total] + self._heads()))
        # Watching the tube (never reserved from) shows in its current-watching
        # once the starting point is known: every job put after that is shown.
        use(conn, tube, verb="watch")
        self.offset = self.last - total
        self.total = total
        self.window = self.PROBE
        self.pending: Dict[int, None] = {}

    def _heads(self) -> List[int]:
        ids = []
        for state in UNRESERVED_STATES:
            reply = self.conn.command("peek-" + state)
            if reply.word == "FOUND" and reply.job_id is not None:
                ids.append(reply.job_id)
        return ids

    def _probe(self, first: int, count: int) -> Dict[int, Dict[str, Any]]:
        """The stats of the jobs among ids ``first`` .. ``first + count - 1``
        (one round trip)."""
        replies = self.conn.pipeline([("stats-job", i) for i in range(first, first + count)])
        return {first + i: r.value for i, r in enumerate(replies)  # type: ignore[misc]
                if r.ok and isinstance(r.value, dict)}

    def _highest(self, floor: int) -> int:
        """The highest id in use, searching upwards from ``floor``."""
        top = floor
        while True:
            found = self._probe(top + 1, self.BATCH)
            if not found:
                return top
            top = max(found)

    def _old(self, st: Dict[str, Any]) -> bool:
        """Whether a job's age says it was there before tail started."""
        age = st.get("age")
        return isinstance(age, int) and age > self.clock() - self.started + 1

    def poll(self) -> List[Tuple[int, Dict[str, Any], Optional[bytes]]]:
        found = []
        total = int(server_stats(self.conn).get("total-jobs", 0))
        if total < self.total:  # the server restarted: the count starts again
            self.offset = self.last - total
        created = max(0, total - self.total)
        self.total = total
        known = max([total + self.offset] + self._heads())
        extra: Dict[int, Dict[str, Any]] = {}
        if known - self.last <= self.PER_POLL:
            extra = self._probe(known + 1, self.window)
            if extra:
                known = max(extra)
        self.offset = max(self.offset, known - total)
        upto = min(known, self.last + self.PER_POLL)
        for job_id in list(self.pending):
            st = job_stats(self.conn, job_id)
            if st is None:
                del self.pending[job_id]
            elif st.get("state") != "delayed":
                del self.pending[job_id]
                found.append(self._with_body(job_id, st))
        seen = 0
        for job_id in range(self.last + 1, upto + 1):
            st = extra.get(job_id) or job_stats(self.conn, job_id)
            if st is None:
                continue
            seen += 1
            if st.get("tube") != self.tube or self._old(st):
                continue
            if st.get("state") == "delayed":
                self.pending[job_id] = None
                continue
            found.append(self._with_body(job_id, st))
        # Jobs were put that did not turn up (or were deleted at once): look
        # further next time.
        self.window = (min(self.window * 2, self.MAX_WINDOW) if seen < created and not extra
                       else self.PROBE)
        self.last = max(self.last, upto)
        return found

    def _with_body(self, job_id: int, st: Dict[str, Any]) -> Tuple[int, Dict[str, Any], Optional[bytes]]:
        reply = self.conn.command("peek", job_id)
        return job_id, st, reply.body if reply.word == "FOUND" else None


def run(conn: Connection, argv: Sequence[str], out: Output, stdin=None) -> int:
    """``stalk tail TUBE`` (and ``tail`` in the shell): until Ctrl-C or, on
    a terminal, ``q`` (``stdin``: where keys are read, default sys.stdin)."""
    p = parser("tail", "Show jobs as they arrive in TUBE, without reserving them "
                "(stats and peek only: no job counter changes).")
    p.add_argument("tube")
    p.add_argument("-n", "--interval", type=float, default=0.5, help="seconds between polls (default 0.5)")
    p.add_argument("-c", "--count", type=int, default=0, help="exit after COUNT jobs")
    p.add_argument("--for", dest="duration", type=float, default=0, help="exit after SECONDS")
    a = p.parse_args(argv)
    check_tube(a.tube)
    live = isatty(out.stream) and out.fmt == "pretty"
    tail = Tail(conn, a.tube)
    if out.fmt == "pretty":
        out.note(f"tailing {a.tube} on {conn.target} "
                 f"({'q or Ctrl-C' if live else 'Ctrl-C'} to stop)")
    try:
        with quit_keys(stdin, live) as wait:
            return _follow(tail, a, out, wait)
    except KeyboardInterrupt:
        return EXIT_OK


def _follow(tail: Tail, a: Any, out: Output, wait: Wait) -> int:
    """Show the jobs ``tail`` finds, polling every ``a.interval`` seconds,
    until ``a.count`` jobs, ``a.duration`` seconds, or ``wait`` says to quit."""
    start = time.monotonic()
    shown = 0
    while True:
        t0 = time.monotonic()
        for job_id, st, body in tail.poll():
            show_job(out, job_id, st, body)
            shown += 1
            if a.count and shown >= a.count:
                return EXIT_OK
        if a.duration and time.monotonic() - start >= a.duration:
            return EXIT_OK
        if wait(a.interval - (time.monotonic() - t0)):
            return EXIT_OK


def show_job(out: Output, job_id: int, st: Dict[str, Any], body: Optional[bytes]) -> None:
    state = st.get("state", "?")
    if out.fmt in ("json", "yaml"):
        rec = {"id": job_id, "tube": st.get("tube"), "state": state, "pri": st.get("pri"),
               "ttr": st.get("ttr"), "age": st.get("age")}
        if body is not None:
            rec["bytes"] = len(body)
            rec.update(body_data(body))
        out.record(rec)
    elif out.fmt in ("raw", "plain"):  # as peek's reply: CRLF with --raw
        eol = b"\r\n" if out.fmt == "raw" else b"\n"
        if body is None:
            out.binary(b"GONE %d" % job_id + eol)
        else:
            out.binary(b"FOUND %d %d" % (job_id, len(body)) + eol + body + eol)
    else:
        head = f"#{job_id}  {st.get('tube')}  pri {st.get('pri')}  ttr {st.get('ttr')}  {state}"
        out.fragments([("class:reply.ok", head + "\n")])
        if body is None:
            out.fragments([("class:body.header", "(deleted before it could be read)\n")])
        else:
            out.fragments(render_body(body))
