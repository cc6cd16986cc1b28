# -*- test-case-name: tests.test_shell_cli -*-
"""``stalk top``: a live per-tube table of job counts, waiting workers, and
put and delete rates (stats only: nothing changes)."""
from __future__ import annotations

import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

from twisted_stalk.wording import counted

from ..conn import Connection
from ..errors import EXIT_OK
from ..output import Output, isatty
from ..render import render_columns
from .args import check_tube, parser
from .keys import Wait, quit_keys
from .queries import list_tubes, server_stats, tube_stats


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


def run(conn: Connection, argv: Sequence[str], out: Output, stdin=None) -> int:
    """``stalk top`` (and ``top`` in the shell): until Ctrl-C or, live on a
    terminal, ``q`` (``stdin``: where keys are read, default sys.stdin)."""
    p = parser("top", "A live per-tube table: job counts, waiting workers, put and delete rates.")
    p.add_argument("tubes", nargs="*", help="only these tubes")
    p.add_argument("-n", "--interval", type=float, default=1.0, help="seconds between refreshes (default 1)")
    p.add_argument("-c", "--count", type=int, default=0, help="stop after COUNT refreshes (default: until q or Ctrl-C)")
    p.add_argument("--once", action="store_true", help="print one table and exit")
    a = p.parse_args(argv)
    for t in a.tubes:
        check_tube(t)
    live = isatty(out.stream) and out.fmt == "pretty" and not a.once
    count = 1 if a.once else a.count
    if live:
        out.stream.write("\x1b[?1049h\x1b[?25l")
    try:
        with quit_keys(stdin, live) as wait:
            return _frames(conn, a, out, live, count, wait)
    except KeyboardInterrupt:
        return EXIT_OK
    finally:
        if live:
            out.stream.write("\x1b[?25h\x1b[?1049l")
            out.stream.flush()


def _frames(conn: Connection, a: Any, out: Output, live: bool, count: int, wait: Wait) -> int:
    """Draw a frame every ``a.interval`` seconds, ``count`` times (0: until
    ``wait`` says to quit)."""
    prev: Optional[Dict[str, Dict[str, Any]]] = None
    prev_t = 0.0
    n = 0
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
                    f"{counted(server.get('current-connections', 0), 'connection')}  "
                    f"{counted(server.get('current-workers', 0), 'worker')}  "
                    f"{server.get('current-waiting', 0)} waiting  {counted(len(tubes), 'tube')}")
            total = [sum(r[i] for r in rows) for i in range(1, 9)]
            table = rows + ([["(all)"] + total + ["", "", ""]] if len(rows) > 1 else [])
            # On a terminal every line fits its width (a wider line wrapped
            # and broke every row in two); into a pipe the table is whole.
            width = out.size().columns if isatty(out.stream) else 0
            lines = render_columns(TOP_COLUMNS, table, width=width)
            if width:
                head = head if len(head) <= width else head[:max(0, width - 1)] + "\u2026"
            show_frame(out, "\n".join([head, ""] + lines) + "\n", live, n,
                       f"every {a.interval:g}s, q or Ctrl-C quits")
        if count and n >= count:
            return EXIT_OK
        if wait(a.interval - (time.monotonic() - t0)):
            return EXIT_OK


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


def show_frame(out: Any, text: str, live: bool, n: int, footer: str) -> None:
    """Write one frame of ``top``: on a live terminal the screen is cleared
    first and ``footer`` follows; into a pipe, frames after the first are
    set apart by a blank line."""
    if live:
        text = "\x1b[H\x1b[2J" + text + "\n" + footer
    elif n > 1:
        text = "\n" + text
    out.stream.write(text)
    out.stream.flush()
