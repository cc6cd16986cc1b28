# -*- test-case-name: tests.test_shell_extensions -*-
"""``stalk flush TUBE``: delete a tube's ready, delayed or buried jobs.

With the server's ``flush-tube`` extension, one command per state.  On a stock
server, peek and delete job by job under the give-up rule of
:class:`twisted_stalk.protocol.flush.PeekDeleteFlush`, the one the client
library's fallback follows too.
"""
from __future__ import annotations

from typing import Dict, Sequence

from twisted_stalk.protocol.flush import PeekDeleteFlush
from twisted_stalk.protocol.replies import BeanstalkError
from twisted_stalk.wording import counted

from ..conn import Connection
from ..errors import EXIT_INTERRUPTED, EXIT_OK, EXIT_REPLY, ToolError
from ..output import Output
from .args import add_plan_options, check_tube, parse_states, parser
from .interaction import Progress, confirm, deferred_interrupt
from .queries import capabilities, tube_stats, use


def run(conn: Connection, argv: Sequence[str], out: Output, stdin=None) -> int:
    p = parser("flush", "Delete the jobs of TUBE in the given states (never reserved ones). "
                "With the server's flush-tube extension, one command per state deletes the "
                "jobs there at that moment; otherwise it peeks and deletes job by job, never "
                "more than were counted when you confirmed.")
    p.add_argument("tube")
    add_plan_options(p, "deleted")
    a = p.parse_args(argv)
    tube = check_tube(a.tube)
    states = parse_states(a.state)
    st = tube_stats(conn, tube)
    if st is None:
        raise ToolError(f"no tube {tube!r} on {conn.target}")
    counts = {s: int(st.get(f"current-jobs-{s}", 0)) for s in states}
    total = sum(counts.values())
    plan = ", ".join(f"{counts[s]} {s}" for s in states)
    if a.dry_run or total == 0:
        word = "would delete" if a.dry_run else "nothing to delete:"
        out.note(f"flush {tube}: {word} {plan} (reserved jobs are left alone)")
        if out.fmt in ("json", "yaml"):
            out.record({"tube": tube, "dry_run": bool(a.dry_run), "jobs": counts})
        return EXIT_OK
    if not confirm(f"Delete {counted(total, 'job')} ({plan}) from tube {tube!r} on {conn.target}?",
                   a.yes, out, stdin):
        out.note("nothing deleted")
        return EXIT_REPLY
    if "flush-tube" in capabilities(conn):
        return _flush_tube(conn, out, tube, states, counts)
    use(conn, tube)
    # At most as many as were counted when you confirmed, and so on: the rule
    # the client library's flush fallback follows too (PeekDeleteFlush).
    flush = PeekDeleteFlush(states, counts)
    progress = Progress(f"flush {tube}", total)
    failed = ""
    with deferred_interrupt() as interrupted:
        steps = flush.steps()
        try:
            batch = next(steps)
            while not interrupted[0]:
                before = flush.total
                batch = steps.send(conn.pipeline(batch))
                if flush.total > before:
                    progress.step(flush.total - before)
        except StopIteration:
            pass
        except BeanstalkError as e:  # an error reply other than NOT_FOUND
            failed = str(e)
        finally:
            steps.close()
    progress.finish()
    deleted = flush.deleted
    summary = ", ".join(f"{deleted[s]} {s}" for s in states)
    stopped = "; ".join(list(flush.gave_up.values()) + ([failed] if failed else []))
    if interrupted[0]:
        out.note(f"interrupted: deleted {summary} so far; run it again to continue")
    else:
        out.note(f"flush {tube}: deleted {summary}" + (f" ({stopped})" if stopped else ""))
    if out.fmt in ("json", "yaml"):
        out.record({"tube": tube, "deleted": deleted})
    if interrupted[0]:
        return EXIT_INTERRUPTED
    return EXIT_REPLY if failed else EXIT_OK


def _flush_tube(conn: Connection, out: Output, tube: str, states: Sequence[str],
                counts: Dict[str, int]) -> int:
    """The flush with the server's ``flush-tube``: one command per state."""
    deleted = {s: 0 for s in states}
    stopped = ""
    with deferred_interrupt() as interrupted:
        for state in states:
            if interrupted[0]:
                break
            reply = conn.command("flush-tube", tube, state)
            if reply.ok:
                deleted[state] = reply.value  # type: ignore[assignment]
            elif reply.word != "NOT_FOUND":  # NOT_FOUND: the tube went away, nothing left
                stopped = f"flush-tube {state} answered {reply.line.decode('utf-8', 'replace')}"
                break
    summary = ", ".join(f"{deleted[s]} {s}" for s in states)
    extra = sum(max(0, deleted[s] - counts[s]) for s in states)
    if interrupted[0]:
        out.note(f"interrupted: deleted {summary} so far; run it again to continue")
    else:
        note = f" ({extra} more than counted: put meanwhile)" if extra else ""
        out.note(f"flush {tube}: deleted {summary} with flush-tube{note}"
                 + (f" ({stopped})" if stopped else ""))
    if out.fmt in ("json", "yaml"):
        out.record({"tube": tube, "deleted": deleted})
    if interrupted[0]:
        return EXIT_INTERRUPTED
    return EXIT_REPLY if stopped else EXIT_OK
