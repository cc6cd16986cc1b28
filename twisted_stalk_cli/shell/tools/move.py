# -*- test-case-name: tests.test_shell_extensions -*-
"""``stalk move FROM TO``: move jobs between tubes without ever losing one.

Each job is reserved, put into the target, then deleted from the source; a
journal of each step lets a rerun finish a move an interruption left half
done.  With the server's ``list-jobs`` extension the jobs are found without
peeking at their bodies.
"""
from __future__ import annotations

import os
import re
from typing import Dict, List, Optional, Sequence, Tuple

from twisted_stalk.wording import counted

from ..conn import Connection
from ..errors import EXIT_INTERRUPTED, EXIT_OK, EXIT_REPLY, EXIT_USAGE, ToolError
from ..output import Output
from ..paths import state_home
from ..request import DEFAULT_PUT
from .args import add_plan_options, check_tube, parse_states, parser
from .interaction import Progress, confirm, deferred_interrupt
from .queries import capabilities, job_stats, tube_stats, use


def journal_path(target: str, src: str, dst: str) -> str:
    safe = re.sub(r"[^A-Za-z0-9.+_-]", "_", f"{target}-{src}-{dst}")
    return os.path.join(state_home(), f"move-{safe}.journal")


class MoveJournal:
    """Append-only record of a move, so a rerun can finish an interrupted step.

    Lines: ``put OLD NEW`` once the copy exists, ``done OLD`` once the
    original is deleted.  An OLD with ``put`` and no ``done`` may still exist
    in the source: a rerun deletes it (its copy is already in the target).
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self.f = None

    def pending(self) -> Dict[int, int]:
        put: Dict[int, int] = {}
        try:
            with open(self.path) as f:
                for line in f:
                    parts = line.split()
                    if len(parts) == 3 and parts[0] == "put":
                        put[int(parts[1])] = int(parts[2])
                    elif len(parts) == 2 and parts[0] == "done":
                        put.pop(int(parts[1]), None)
        except FileNotFoundError:
            pass
        except (OSError, ValueError) as e:
            raise ToolError(f"cannot read the move journal {self.path}: {e}")
        return put

    def write(self, line: str) -> None:
        if self.f is None:
            os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
            self.f = open(self.path, "a")
        self.f.write(line + "\n")
        self.f.flush()
        os.fsync(self.f.fileno())

    def finish(self) -> None:
        if self.f is not None:
            self.f.close()
            self.f = None
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


def move_one(conn: Connection, src: str, dst: str, state: str, job_id: int,
             journal: MoveJournal) -> Tuple[str, Optional[int]]:
    """Move one job; returns ("moved", new id), ("gone", None) or raises.

    Order: stats-job (pri, ttr, delay), reserve-job (nobody else can take it),
    put into the target, record it, then delete the original.  A failed put
    releases (or re-buries) the original; a broken connection makes the
    server release it.  Either way the job still exists.
    """
    st = job_stats(conn, job_id)
    if st is None or st.get("tube") != src or st.get("state") != state:
        return "gone", None
    reply = conn.command("reserve-job", job_id)
    if reply.word in ("UNKNOWN_COMMAND", "BAD_FORMAT"):
        raise ToolError("the server does not support reserve-job (beanstalkd 1.12 or later is "
                        "needed to move jobs safely); nothing was moved")
    if reply.word != "RESERVED" or reply.body is None:
        return "gone", None
    body = reply.body
    pri = int(st.get("pri", DEFAULT_PUT[0]))
    ttr = int(st.get("ttr", DEFAULT_PUT[2]))
    delay = int(st.get("time-left", 0)) if state == "delayed" else 0
    use(conn, dst)
    put = conn.command("put", pri, delay, ttr, body=body)
    use(conn, src)
    if put.word not in ("INSERTED", "BURIED") or put.job_id is None:
        if state == "buried":
            conn.command("bury", job_id, pri)
        else:
            conn.command("release", job_id, pri, delay)
        raise ToolError(f"put into {dst!r} failed ({put.line.decode('utf-8', 'replace')}); "
                        f"job {job_id} left in {src!r}")
    new_id = put.job_id
    journal.write(f"put {job_id} {new_id}")
    if state == "buried" and put.word == "INSERTED":
        r = conn.command("reserve-job", new_id)
        if r.word == "RESERVED":
            conn.command("bury", new_id, pri)
    d = conn.command("delete", job_id)
    if d.word != "DELETED":
        raise ToolError(f"job {job_id} was copied to {dst!r} as {new_id} but could not be deleted "
                        f"from {src!r} ({d.line.decode('utf-8', 'replace')}): its TTR ({ttr}s) may "
                        "have run out; check for a duplicate")
    journal.write(f"done {job_id}")
    return "moved", new_id


def resume(conn: Connection, journal: MoveJournal, src: str, out: Output) -> int:
    """Finish moves a previous run left half done: delete originals whose copy exists."""
    fixed = 0
    for old, new in journal.pending().items():
        st = job_stats(conn, old)
        if st is None or st.get("tube") != src:
            journal.write(f"done {old}")
            continue
        d = conn.command("delete", old)
        if d.word == "DELETED":
            out.note(f"resumed: job {old} had been copied as {new}; deleted the original")
            fixed += 1
            journal.write(f"done {old}")
        else:
            out.note(f"resumed: job {old} (copied as {new}) is {st.get('state')} and could not be "
                     "deleted; someone may be working on it: check for a duplicate")
    return fixed


def _candidates(conn: Connection, src: str, state: str, want: int, listing: bool) -> List[int]:
    """Ids of the next jobs to move: up to ``want`` from ``list-jobs`` (the
    extension: no bodies sent), or the one ``peek-<state>`` shows."""
    if listing:
        reply = conn.command("list-jobs", src, state, max(1, min(want, 1000)))
        return reply.value if reply.ok else []  # type: ignore[return-value]
    reply = conn.command("peek-" + state)
    if reply.word != "FOUND" or reply.job_id is None:
        return []
    return [reply.job_id]


def run(conn: Connection, argv: Sequence[str], out: Output, stdin=None) -> int:
    p = parser("move", "Move jobs from one tube to another, safely: each job is reserved, "
                "put into the target, then deleted from the source, so it is never lost. "
                "Priority, TTR, remaining delay and buried state are kept. Resumable. "
                "Finds the jobs with the server's list-jobs extension when it has it.")
    p.add_argument("source")
    p.add_argument("target")
    add_plan_options(p, "moved")
    p.add_argument("-m", "--max", type=int, default=0, help="move at most MAX jobs")
    p.add_argument("--journal", help="journal file (default: in $XDG_STATE_HOME/stalk)")
    a = p.parse_args(argv)
    src, dst = check_tube(a.source), check_tube(a.target)
    if src == dst:
        raise ToolError("source and target are the same tube", EXIT_USAGE)
    states = parse_states(a.state)
    journal = MoveJournal(a.journal or journal_path(str(conn.target), src, dst))
    leftover = journal.pending()
    st = tube_stats(conn, src)
    if st is None and not leftover:
        raise ToolError(f"no tube {src!r} on {conn.target}")
    counts = {s: int((st or {}).get(f"current-jobs-{s}", 0)) for s in states}
    total = sum(counts.values())
    if a.max:
        total = min(total, a.max)
    plan = ", ".join(f"{counts[s]} {s}" for s in states)
    if a.dry_run:
        out.note(f"move {src} -> {dst}: would move {plan}"
                 + (f" (at most {a.max})" if a.max else "")
                 + (f"; {counted(len(leftover), 'half-done move')} from an earlier run to finish"
                    if leftover else ""))
        if out.fmt in ("json", "yaml"):
            out.record({"source": src, "target": dst, "dry_run": True, "jobs": counts,
                        "unfinished": len(leftover)})
        return EXIT_OK
    if total == 0 and not leftover:
        out.note(f"move {src} -> {dst}: nothing to move")
        journal.finish()
        return EXIT_OK
    jobs = counted(sum(counts.values()), "job")
    if total and not confirm(f"Move {jobs} ({plan}{f'; at most {a.max}' if a.max else ''}) "
                             f"from {src!r} to {dst!r} on {conn.target}?",
                             a.yes, out, stdin):
        out.note("nothing moved")
        return EXIT_REPLY
    if leftover:
        resume(conn, journal, src, out)
    listing = "list-jobs" in capabilities(conn)
    use(conn, src)
    moved = {s: 0 for s in states}
    progress = Progress(f"move {src} -> {dst}", total)
    note = ""

    def more(state: str) -> bool:
        # At most as many as were counted when you confirmed, so that
        # producers still putting into the source cannot keep it going.
        return (not interrupted[0] and moved[state] < counts[state]
                and not (a.max and sum(moved.values()) >= a.max))

    with deferred_interrupt() as interrupted:
        for state in states:
            tries = 0
            gave_up = False
            while more(state) and not gave_up:
                want = counts[state] - moved[state]
                if a.max:
                    want = min(want, a.max - sum(moved.values()))
                ids = _candidates(conn, src, state, want, listing)
                if not ids:
                    break
                for job_id in ids:
                    if not more(state):
                        break
                    tries += 1
                    if tries > counts[state] + 100:
                        note = f"gave up on {state} jobs: they keep being taken by others"
                        gave_up = True
                        break
                    result, _ = move_one(conn, src, dst, state, job_id, journal)
                    if result == "moved":
                        moved[state] += 1
                        progress.step()
    progress.finish()
    summary = ", ".join(f"{moved[s]} {s}" for s in states)
    if interrupted[0]:
        out.note(f"interrupted: moved {summary} so far; run the same command again to continue")
    else:
        out.note(f"move {src} -> {dst}: moved {summary}" + (f" ({note})" if note else ""))
        journal.finish()
    if out.fmt in ("json", "yaml"):
        out.record({"source": src, "target": dst, "moved": moved})
    return EXIT_INTERRUPTED if interrupted[0] else EXIT_OK
