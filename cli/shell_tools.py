"""Command-line tools built on the protocol: top, tail, put, flush, move, kick, stats.

Each tool takes its own arguments (``stalk TOOL --help``), a connected
:class:`~.shell_conn.Connection` and an :class:`Output`, and returns the exit
status.  None of them reserves a job it does not move, so ``tail`` and
``top`` leave every job counter as it was.

``flush`` and ``move`` ask the server for its extension verbs
(``capabilities``): with ``flush-tube`` a flush is one command per state, with
``list-jobs`` a move finds its jobs without peeking at their bodies; on a stock
server they peek and delete (or move) job by job.
"""
from __future__ import annotations

import argparse
import os
import re
import signal
import sys
import time
from contextlib import contextmanager
from typing import Any, Dict, FrozenSet, Iterator, List, Optional, Sequence, Tuple

from twisted_stalk.protocol import valid_tube_name
from twisted_stalk.protocol.constants import U32_MAX, UNRESERVED_STATES
from twisted_stalk.protocol.yaml import parse_mapping, parse_sequence

from .shell_conn import Connection, Reply, StalkError, reply_ok, state_home
from .shell_input import DEFAULT_PUT
from .shell_render import (
    Fragments,
    body_data,
    dump_json,
    dump_yaml,
    raw_bytes,
    render_body,
    render_columns,
    render_reply,
    reply_data,
)

EXIT_OK, EXIT_REPLY, EXIT_USAGE, EXIT_CONNECTION, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
STATES = UNRESERVED_STATES


class ToolError(Exception):
    """A failure with a one-line message and an exit status."""

    def __init__(self, message: str, status: int = EXIT_REPLY) -> None:
        super().__init__(message)
        self.status = status


class Output:
    """Prints replies and records in the chosen format: pretty, raw, json, yaml."""

    def __init__(self, fmt: str, *, stream=None, err=None, body_only: bool = False,
                 color: bool = True) -> None:
        self.fmt = fmt
        self.stream = stream or sys.stdout
        self.err = err or sys.stderr
        self.body_only = body_only
        self.color = color
        self.count = 0

    def fragments(self, frags: Fragments) -> None:
        if self.color and _isatty(self.stream):
            from prompt_toolkit import print_formatted_text
            from prompt_toolkit.formatted_text import FormattedText

            from .shell_ui import STYLE
            print_formatted_text(FormattedText(frags), end="", style=STYLE,
                                 include_default_pygments_style=False, file=self.stream)
        else:
            self.stream.write("".join(f[1] for f in frags))
        self.stream.flush()

    def reply(self, command: Optional[str], reply: Reply) -> None:
        if self.fmt == "pretty" and not self.body_only:
            self.fragments(render_reply(command, reply))
        elif self.fmt in ("json", "yaml"):
            self.record(reply_data(command, reply))
        else:
            self.binary(raw_bytes(command, reply, body_only=self.body_only))

    def record(self, data: Any, *, text: str = "") -> None:
        """A structured record: JSON line, YAML document, or ``text``."""
        if self.fmt == "json":
            self.stream.write(dump_json(data) + "\n")
        elif self.fmt == "yaml":
            self.stream.write("---\n" + dump_yaml(data))
        else:
            self.stream.write(text)
        self.stream.flush()

    def binary(self, data: bytes) -> None:
        buf = getattr(self.stream, "buffer", None)
        if buf is not None:
            self.stream.flush()
            buf.write(data)
            buf.flush()
        else:
            self.stream.write(data.decode("utf-8", "replace"))
            self.stream.flush()

    def note(self, text: str) -> None:
        """Progress and explanations: stderr, so stdout stays machine-readable."""
        self.err.write(text + "\n")
        self.err.flush()


def _isatty(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


# --------------------------------------------------------------------------
# Protocol helpers

def call(conn: Connection, line: str, body: Optional[bytes] = None) -> Reply:
    data = line.encode("ascii") + b"\r\n"
    if body is not None:
        data += body + b"\r\n"
    return conn.call(data)


def expect(reply: Reply, command: str) -> Reply:
    if not reply_ok(command, reply):
        raise ToolError(f"{command}: the server answered {reply.line.decode('utf-8', 'replace')}")
    return reply


def check_tube(name: str) -> str:
    if not valid_tube_name(name.encode("ascii", "replace")):
        raise ToolError(f"bad tube name {name!r}: up to 200 of A-Z a-z 0-9 - + / ; . $ _ ( ), "
                        "not starting with -", EXIT_USAGE)
    return name


def server_stats(conn: Connection) -> Dict[str, Any]:
    reply = expect(call(conn, "stats"), "stats")
    return parse_mapping(reply.body or b"")


def tube_stats(conn: Connection, tube: str) -> Optional[Dict[str, Any]]:
    reply = call(conn, f"stats-tube {tube}")
    if reply.word == "NOT_FOUND":
        return None
    return parse_mapping(expect(reply, "stats-tube").body or b"")


def job_stats(conn: Connection, job_id: int) -> Optional[Dict[str, Any]]:
    reply = call(conn, f"stats-job {job_id}")
    if reply.word == "NOT_FOUND":
        return None
    return parse_mapping(expect(reply, "stats-job").body or b"")


def list_tubes(conn: Connection) -> List[str]:
    reply = expect(call(conn, "list-tubes"), "list-tubes")
    return parse_sequence(reply.body or b"")


def use(conn: Connection, tube: str) -> None:
    expect(call(conn, f"use {tube}"), "use")


def capabilities(conn: Connection) -> FrozenSet[str]:
    """The extension verbs the server serves (``capabilities``); empty for a
    stock server, which answers UNKNOWN_COMMAND."""
    reply = call(conn, "capabilities")
    if reply.word == "OK" and reply.body is not None:
        return frozenset(parse_sequence(reply.body))
    return frozenset()


def _int_arg(text: str, what: str, limit: int = U32_MAX) -> int:
    if not text.isdigit() or int(text) > limit:
        raise ToolError(f"{what} must be a whole number 0..{limit}", EXIT_USAGE)
    return int(text)


class Parser(argparse.ArgumentParser):
    """argparse that raises instead of exiting (the caller prints one line)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise ToolError(f"{self.prog}: {message} (see {self.prog} --help)", EXIT_USAGE)


def _parser(name: str, description: str) -> Parser:
    return Parser(prog=f"stalk {name}", description=description)


@contextmanager
def deferred_interrupt() -> Iterator[List[bool]]:
    """Ctrl-C sets a flag checked between jobs; a second Ctrl-C interrupts."""
    flag = [False]
    previous = signal.getsignal(signal.SIGINT)

    def handler(signum, frame):
        if flag[0]:
            signal.signal(signal.SIGINT, previous)
            raise KeyboardInterrupt
        flag[0] = True

    try:
        signal.signal(signal.SIGINT, handler)
    except ValueError:  # not the main thread
        yield flag
        return
    try:
        yield flag
    finally:
        signal.signal(signal.SIGINT, previous)


class Progress:
    """A one-line progress bar on stderr (only when stderr is a terminal)."""

    def __init__(self, label: str, total: int, stream=None) -> None:
        self.label = label
        self.total = max(total, 0)
        self.stream = stream or sys.stderr
        self.enabled = _isatty(self.stream)
        self.done = 0
        self._last = 0.0

    def step(self, n: int = 1) -> None:
        self.done += n
        now = time.monotonic()
        if self.enabled and (now - self._last > 0.05 or self.done >= self.total):
            self._last = now
            total = max(self.total, self.done, 1)
            width = 30
            filled = int(width * self.done / total)
            self.stream.write(f"\r{self.label} [{'#' * filled}{'.' * (width - filled)}] "
                              f"{self.done}/{self.total}")
            self.stream.flush()

    def finish(self) -> None:
        if self.enabled and self._last:
            self.stream.write("\n")
            self.stream.flush()


def confirm(question: str, yes: bool, out: Output, stdin=None) -> bool:
    if yes:
        return True
    stdin = stdin or sys.stdin
    if not _isatty(stdin):
        raise ToolError("refusing to change jobs without confirmation: stdin is not a terminal; "
                        "pass --yes (or --dry-run to see the plan)", EXIT_USAGE)
    out.err.write(question + " [y/N] ")
    out.err.flush()
    answer = stdin.readline().strip().lower()
    return answer in ("y", "yes")


def parse_states(text: str) -> Tuple[str, ...]:
    if text == "all":
        return STATES
    states = tuple(s.strip() for s in text.split(",") if s.strip())
    bad = [s for s in states if s not in STATES]
    if bad or not states:
        raise ToolError(f"--state takes a comma-separated list of ready, delayed, buried, or all "
                        f"(got {text!r}); reserved jobs are never touched", EXIT_USAGE)
    return states


# --------------------------------------------------------------------------
# stalk stats / kick / put

def tool_stats(conn: Connection, argv: Sequence[str], out: Output) -> int:
    p = _parser("stats", "Server statistics, or a tube's with TUBE.")
    p.add_argument("tube", nargs="?", help="show this tube's statistics")
    a = p.parse_args(argv)
    if a.tube:
        check_tube(a.tube)
        reply = call(conn, f"stats-tube {a.tube}")
        out.reply("stats-tube", reply)
        return EXIT_OK if reply_ok("stats-tube", reply) else EXIT_REPLY
    reply = call(conn, "stats")
    out.reply("stats", reply)
    return EXIT_OK if reply_ok("stats", reply) else EXIT_REPLY


def tool_kick(conn: Connection, argv: Sequence[str], out: Output) -> int:
    p = _parser("kick", "Kick buried (or, if none, delayed) jobs of TUBE back to ready.")
    p.add_argument("tube", nargs="?", default=None, help="the tube (default: the one from --tube, or default)")
    p.add_argument("bound", nargs="?", default=None, help="most jobs to kick (default: all)")
    a = p.parse_args(argv)
    tube, bound = a.tube, a.bound
    if tube is not None and bound is None and tube.isdigit():
        tube, bound = None, tube
    if tube is not None:
        use(conn, check_tube(tube))
    n = _int_arg(bound, "the bound") if bound is not None else U32_MAX
    reply = call(conn, f"kick {n}")
    out.reply("kick", reply)
    return EXIT_OK if reply_ok("kick", reply) else EXIT_REPLY


def tool_put(conn: Connection, argv: Sequence[str], out: Output, stdin=None,
             defaults: Tuple[int, int, int] = DEFAULT_PUT) -> int:
    p = _parser("put", "Put a job: the body from the arguments, files, or stdin.")
    p.add_argument("body", nargs="*", help="the body (the arguments joined by spaces)")
    p.add_argument("-t", "--tube", help="tube to put into (default: default)")
    p.add_argument("-p", "--pri", default=str(defaults[0]), help=f"priority (default {defaults[0]})")
    p.add_argument("-d", "--delay", default=str(defaults[1]), help=f"delay in seconds (default {defaults[1]})")
    p.add_argument("--ttr", default=str(defaults[2]), help=f"time to run in seconds (default {defaults[2]})")
    p.add_argument("-f", "--file", action="append", default=[],
                   help="read a body from FILE (repeatable: one job per file; - for stdin)")
    p.add_argument("-l", "--lines", action="store_true", help="read stdin: one job per line")
    a = p.parse_args(argv)
    pri = _int_arg(a.pri, "--pri")
    delay = _int_arg(a.delay, "--delay")
    ttr = _int_arg(a.ttr, "--ttr")
    stdin = stdin if stdin is not None else sys.stdin.buffer
    bodies: List[bytes] = []
    if a.body:
        bodies.append(" ".join(a.body).encode("utf-8"))
    for path in a.file:
        if path == "-":
            bodies.append(stdin.read())
            continue
        try:
            with open(os.path.expanduser(path), "rb") as f:
                bodies.append(f.read())
        except OSError as e:
            raise ToolError(f"cannot read {path}: {e.strerror or e}", EXIT_USAGE)
    if a.lines:
        for line in stdin:
            line = line.rstrip(b"\r\n") if line.endswith(b"\r\n") else line.rstrip(b"\n")
            if line:
                bodies.append(line)
    elif not a.body and not a.file:
        if _isatty(stdin):
            out.note("reading the body from stdin; end it with Ctrl-D")
        bodies.append(stdin.read())
    if a.tube:
        use(conn, check_tube(a.tube))
    status = EXIT_OK
    for body in bodies:
        reply = call(conn, f"put {pri} {delay} {ttr} {len(body)}", body)
        out.reply("put", reply)
        if not reply_ok("put", reply):
            status = EXIT_REPLY
            break
    return status


# --------------------------------------------------------------------------
# stalk top

TOP_COLUMNS = ("TUBE", "READY", "URGENT", "RESERVED", "DELAYED", "BURIED", "WAITING",
               "WATCHING", "USING", "PUT/s", "DEL/s", "PAUSE")


def top_snapshot(conn: Connection, only: Sequence[str] = ()) -> Tuple[Dict[str, Any], Dict[str, Dict[str, Any]]]:
    server = server_stats(conn)
    tubes: Dict[str, Dict[str, Any]] = {}
    for name in (only or list_tubes(conn)):
        st = tube_stats(conn, name)
        if st is not None:
            tubes[name] = st
    return server, tubes


def top_rows(tubes: Dict[str, Dict[str, Any]], prev: Optional[Dict[str, Dict[str, Any]]],
             elapsed: float) -> List[List[Any]]:
    rows = []
    for name in sorted(tubes):
        st = tubes[name]
        if prev is not None and name in prev and elapsed > 0:
            puts = (st.get("total-jobs", 0) - prev[name].get("total-jobs", 0)) / elapsed
            dels = (st.get("cmd-delete", 0) - prev[name].get("cmd-delete", 0)) / elapsed
            put_s, del_s = f"{max(puts, 0):.1f}", f"{max(dels, 0):.1f}"
        else:
            put_s = del_s = "-"
        pause = st.get("pause-time-left", 0)
        rows.append([name, st.get("current-jobs-ready", 0), st.get("current-jobs-urgent", 0),
                     st.get("current-jobs-reserved", 0), st.get("current-jobs-delayed", 0),
                     st.get("current-jobs-buried", 0), st.get("current-waiting", 0),
                     st.get("current-watching", 0), st.get("current-using", 0), put_s, del_s,
                     f"{pause}s" if pause else "-"])
    return rows


def tool_top(conn: Connection, argv: Sequence[str], out: Output) -> int:
    p = _parser("top", "A live per-tube table: job counts, waiting workers, put and delete rates.")
    p.add_argument("tubes", nargs="*", help="only these tubes")
    p.add_argument("-n", "--interval", type=float, default=1.0, help="seconds between refreshes (default 1)")
    p.add_argument("-c", "--count", type=int, default=0, help="stop after COUNT refreshes (default: until Ctrl-C)")
    p.add_argument("--once", action="store_true", help="print one table and exit")
    a = p.parse_args(argv)
    for t in a.tubes:
        check_tube(t)
    live = _isatty(out.stream) and out.fmt == "pretty" and not a.once
    count = 1 if a.once else a.count
    prev: Optional[Dict[str, Dict[str, Any]]] = None
    prev_t = 0.0
    n = 0
    if live:
        out.stream.write("\x1b[?1049h\x1b[?25l")
    try:
        while True:
            t0 = time.monotonic()
            server, tubes = top_snapshot(conn, a.tubes)
            rows = top_rows(tubes, prev, t0 - prev_t)
            prev, prev_t = tubes, t0
            n += 1
            if out.fmt in ("json", "yaml"):
                out.record({"time": time.time(), "server": {k: server.get(k) for k in (
                    "version", "uptime", "current-connections", "current-workers",
                    "current-producers", "current-waiting", "total-jobs")},
                    "tubes": [dict(zip([c.lower() for c in TOP_COLUMNS], r)) for r in rows]})
            else:
                head = (f"stalk top  {conn.target}  beanstalkd {server.get('version', '?')}  "
                        f"up {_duration(server.get('uptime', 0))}  "
                        f"{server.get('current-connections', 0)} connections  "
                        f"{server.get('current-workers', 0)} workers  "
                        f"{server.get('current-waiting', 0)} waiting  {len(tubes)} tubes")
                total = [sum(r[i] for r in rows) for i in range(1, 9)]
                table = rows + ([["(all)"] + total + ["", "", ""]] if len(rows) > 1 else [])
                lines = render_columns(TOP_COLUMNS, table)
                text = "\n".join([head, ""] + lines) + "\n"
                if live:
                    text = "\x1b[H\x1b[2J" + text + f"\nevery {a.interval:g}s, Ctrl-C quits"
                elif n > 1:
                    text = "\n" + text
                out.stream.write(text)
                out.stream.flush()
            if count and n >= count:
                return EXIT_OK
            time.sleep(max(0.0, a.interval - (time.monotonic() - t0)))
    except KeyboardInterrupt:
        return EXIT_OK
    finally:
        if live:
            out.stream.write("\x1b[?25h\x1b[?1049l")
            out.stream.flush()


def _duration(seconds: Any) -> str:
    try:
        s = int(seconds)
    except (TypeError, ValueError):
        return "?"
    d, s = divmod(s, 86400)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    if d:
        return f"{d}d{h}h"
    if h:
        return f"{h}h{m}m"
    if m:
        return f"{m}m{s}s"
    return f"{s}s"


# --------------------------------------------------------------------------
# stalk tail

class Tail:
    """Finds jobs of one tube as they appear, without reserving anything.

    Job ids are handed out in order and ``stats``' ``total-jobs`` counts the
    jobs created, so every id above the last one seen is a new job:
    ``stats-job`` tells its tube and state and ``peek`` reads its body.  Ids
    can run ahead of total-jobs (a put answered EXPECTED_CRLF burns one; a
    binlog restart keeps ids but resets the count): the heads of the tube's
    queues (peek-ready/-delayed/-buried) and a few ids probed past the end
    keep the estimate honest.  Delayed jobs are shown when they turn ready.
    """

    PER_POLL = 500
    PROBE = 4

    def __init__(self, conn: Connection, tube: str) -> None:
        self.conn = conn
        self.tube = tube
        use(conn, tube)
        total = int(server_stats(conn).get("total-jobs", 0))
        heads = self._heads()
        self.last = max([total] + heads)
        self.offset = self.last - total
        self.pending: Dict[int, None] = {}

    def _heads(self) -> List[int]:
        ids = []
        for state in STATES:
            reply = call(self.conn, f"peek-{state}")
            if reply.word == "FOUND" and reply.job_id is not None:
                ids.append(reply.job_id)
        return ids

    def poll(self) -> List[Tuple[int, Dict[str, Any], Optional[bytes]]]:
        found = []
        total = int(server_stats(self.conn).get("total-jobs", 0))
        known = max([total + self.offset] + self._heads())
        extra: Dict[int, Dict[str, Any]] = {}
        if known - self.last <= self.PER_POLL:
            for job_id in range(known + 1, known + self.PROBE + 1):
                st = job_stats(self.conn, job_id)
                if st is not None:
                    extra[job_id] = st
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
        for job_id in range(self.last + 1, upto + 1):
            st = extra.get(job_id) or job_stats(self.conn, job_id)
            if st is None or st.get("tube") != self.tube:
                continue
            if st.get("state") == "delayed":
                self.pending[job_id] = None
                continue
            found.append(self._with_body(job_id, st))
        self.last = max(self.last, upto)
        return found

    def _with_body(self, job_id: int, st: Dict[str, Any]) -> Tuple[int, Dict[str, Any], Optional[bytes]]:
        reply = call(self.conn, f"peek {job_id}")
        return job_id, st, reply.body if reply.word == "FOUND" else None


def tool_tail(conn: Connection, argv: Sequence[str], out: Output) -> int:
    p = _parser("tail", "Show jobs as they arrive in TUBE, without reserving them "
                "(stats and peek only: no job counter changes).")
    p.add_argument("tube")
    p.add_argument("-n", "--interval", type=float, default=0.5, help="seconds between polls (default 0.5)")
    p.add_argument("-c", "--count", type=int, default=0, help="exit after COUNT jobs")
    p.add_argument("--for", dest="duration", type=float, default=0, help="exit after SECONDS")
    a = p.parse_args(argv)
    check_tube(a.tube)
    tail = Tail(conn, a.tube)
    if out.fmt == "pretty":
        out.note(f"tailing {a.tube} on {conn.target} (Ctrl-C to stop)")
    start = time.monotonic()
    shown = 0
    try:
        while True:
            t0 = time.monotonic()
            for job_id, st, body in tail.poll():
                show_job(out, job_id, st, body)
                shown += 1
                if a.count and shown >= a.count:
                    return EXIT_OK
            if a.duration and time.monotonic() - start >= a.duration:
                return EXIT_OK
            time.sleep(max(0.0, a.interval - (time.monotonic() - t0)))
    except KeyboardInterrupt:
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
    elif out.fmt == "raw":
        if body is None:
            out.binary(b"GONE %d\n" % job_id)
        else:
            out.binary(b"FOUND %d %d\n" % (job_id, len(body)) + body + b"\n")
    else:
        head = f"#{job_id}  {st.get('tube')}  pri {st.get('pri')}  ttr {st.get('ttr')}  {state}"
        out.fragments([("class:reply.ok", head + "\n")])
        if body is None:
            out.fragments([("class:body.header", "(deleted before it could be read)\n")])
        else:
            out.fragments(render_body(body))


# --------------------------------------------------------------------------
# stalk flush

def tool_flush(conn: Connection, argv: Sequence[str], out: Output, stdin=None) -> int:
    p = _parser("flush", "Delete the jobs of TUBE in the given states (never reserved ones). "
                "With the server's flush-tube extension, one command per state deletes the "
                "jobs there at that moment; otherwise it peeks and deletes job by job, never "
                "more than were counted when you confirmed.")
    p.add_argument("tube")
    p.add_argument("-s", "--state", default="all", help="ready,delayed,buried or all (default all)")
    p.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")
    p.add_argument("--dry-run", action="store_true", help="only show what would be deleted")
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
    if not confirm(f"Delete {plan} job(s) from tube {tube!r} on {conn.target}?", a.yes, out, stdin):
        out.note("nothing deleted")
        return EXIT_REPLY
    deleted = {s: 0 for s in states}
    if "flush-tube" in capabilities(conn):
        return _flush_tube(conn, out, tube, states, counts)
    use(conn, tube)
    progress = Progress(f"flush {tube}", total)
    stopped = ""
    with deferred_interrupt() as interrupted:
        for state in states:
            misses: Dict[int, int] = {}
            # At most as many as were counted when you confirmed: jobs that
            # keep arriving cannot make a flush run forever.
            while not interrupted[0] and deleted[state] < counts[state]:
                reply = call(conn, f"peek-{state}")
                if reply.word != "FOUND":
                    break
                job_id = reply.job_id or 0
                d = call(conn, f"delete {job_id}")
                if d.word == "DELETED":
                    deleted[state] += 1
                    progress.step()
                else:
                    misses[job_id] = misses.get(job_id, 0) + 1
                    if misses[job_id] >= 3:
                        stopped = f"job {job_id} could not be deleted ({d.line.decode()})"
                        break
    progress.finish()
    summary = ", ".join(f"{deleted[s]} {s}" for s in states)
    if interrupted[0]:
        out.note(f"interrupted: deleted {summary} so far; run it again to continue")
    else:
        out.note(f"flush {tube}: deleted {summary}" + (f" ({stopped})" if stopped else ""))
    if out.fmt in ("json", "yaml"):
        out.record({"tube": tube, "deleted": deleted})
    return EXIT_INTERRUPTED if interrupted[0] else EXIT_OK


def _flush_tube(conn: Connection, out: Output, tube: str, states: Sequence[str],
                counts: Dict[str, int]) -> int:
    """The flush with the server's ``flush-tube``: one command per state."""
    deleted = {s: 0 for s in states}
    stopped = ""
    with deferred_interrupt() as interrupted:
        for state in states:
            if interrupted[0]:
                break
            reply = call(conn, f"flush-tube {tube} {state}")
            if reply.word == "FLUSHED" and reply.count is not None:
                deleted[state] = reply.count
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


# --------------------------------------------------------------------------
# stalk move

def journal_path(target: str, src: str, dst: str) -> str:
    safe = re.sub(r"[^A-Za-z0-9.+_-]", "_", f"{target}-{src}-{dst}")
    return os.path.join(state_home(), f"move-{safe}.journal")


class Journal:
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
             journal: Journal) -> Tuple[str, Optional[int]]:
    """Move one job; returns ("moved", new id), ("gone", None) or raises.

    Order: stats-job (pri, ttr, delay), reserve-job (nobody else can take it),
    put into the target, record it, then delete the original.  A failed put
    releases (or re-buries) the original; a broken connection makes the
    server release it.  Either way the job still exists.
    """
    st = job_stats(conn, job_id)
    if st is None or st.get("tube") != src or st.get("state") != state:
        return "gone", None
    reply = call(conn, f"reserve-job {job_id}")
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
    put = call(conn, f"put {pri} {delay} {ttr} {len(body)}", body)
    use(conn, src)
    if put.word not in ("INSERTED", "BURIED") or put.job_id is None:
        if state == "buried":
            call(conn, f"bury {job_id} {pri}")
        else:
            call(conn, f"release {job_id} {pri} {delay}")
        raise ToolError(f"put into {dst!r} failed ({put.line.decode('utf-8', 'replace')}); "
                        f"job {job_id} left in {src!r}")
    new_id = put.job_id
    journal.write(f"put {job_id} {new_id}")
    if state == "buried" and put.word == "INSERTED":
        r = call(conn, f"reserve-job {new_id}")
        if r.word == "RESERVED":
            call(conn, f"bury {new_id} {pri}")
    d = call(conn, f"delete {job_id}")
    if d.word != "DELETED":
        raise ToolError(f"job {job_id} was copied to {dst!r} as {new_id} but could not be deleted "
                        f"from {src!r} ({d.line.decode('utf-8', 'replace')}): its TTR ({ttr}s) may "
                        "have run out; check for a duplicate")
    journal.write(f"done {job_id}")
    return "moved", new_id


def resume(conn: Connection, journal: Journal, src: str, out: Output) -> int:
    """Finish moves a previous run left half done: delete originals whose copy exists."""
    fixed = 0
    for old, new in journal.pending().items():
        st = job_stats(conn, old)
        if st is None or st.get("tube") != src:
            journal.write(f"done {old}")
            continue
        d = call(conn, f"delete {old}")
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
        reply = call(conn, f"list-jobs {src} {state} {max(1, min(want, 1000))}")
        if reply.word != "OK" or reply.body is None:
            return []
        return [int(i) for i in parse_sequence(reply.body) if i.isdigit()]
    reply = call(conn, f"peek-{state}")
    if reply.word != "FOUND" or reply.job_id is None:
        return []
    return [reply.job_id]


def tool_move(conn: Connection, argv: Sequence[str], out: Output, stdin=None) -> int:
    p = _parser("move", "Move jobs from one tube to another, safely: each job is reserved, "
                "put into the target, then deleted from the source, so it is never lost. "
                "Priority, TTR, remaining delay and buried state are kept. Resumable. "
                "Finds the jobs with the server's list-jobs extension when it has it.")
    p.add_argument("source")
    p.add_argument("target")
    p.add_argument("-s", "--state", default="all", help="ready,delayed,buried or all (default all)")
    p.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")
    p.add_argument("--dry-run", action="store_true", help="only show what would be moved")
    p.add_argument("-m", "--max", type=int, default=0, help="move at most MAX jobs")
    p.add_argument("--journal", help="journal file (default: in $XDG_STATE_HOME/stalk)")
    a = p.parse_args(argv)
    src, dst = check_tube(a.source), check_tube(a.target)
    if src == dst:
        raise ToolError("source and target are the same tube", EXIT_USAGE)
    states = parse_states(a.state)
    journal = Journal(a.journal or journal_path(str(conn.target), src, dst))
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
                 + (f"; {len(leftover)} half-done move(s) from an earlier run to finish" if leftover else ""))
        if out.fmt in ("json", "yaml"):
            out.record({"source": src, "target": dst, "dry_run": True, "jobs": counts,
                        "unfinished": len(leftover)})
        return EXIT_OK
    if total == 0 and not leftover:
        out.note(f"move {src} -> {dst}: nothing to move")
        journal.finish()
        return EXIT_OK
    if total and not confirm(f"Move {plan} job(s) from {src!r} to {dst!r} on {conn.target}?",
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


TOOLS = {
    "top": tool_top,
    "tail": tool_tail,
    "put": tool_put,
    "flush": tool_flush,
    "move": tool_move,
    "kick": tool_kick,
    "stats": tool_stats,
}

__all__ = ["EXIT_CONNECTION", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_REPLY", "EXIT_USAGE",
           "Output", "TOOLS", "Tail", "ToolError", "StalkError"]
