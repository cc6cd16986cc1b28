# -*- test-case-name: tests.test_shell_servers -*-
"""``stalk --servers A,B,C ...``: several independent servers at once.

beanstalkd has no clustering: people run independent servers and spread jobs
over them (``twisted_stalk.client.BeanstalkPool``).  With ``--servers`` the
shell looks at all of them:

* ``top`` shows, tube by tube, the sums over the servers and each server's
  row (a server that cannot be reached is named in the header, and the
  others are still shown);
* the read-only commands (``stats``, ``stats-tube``, ``stats-job``,
  ``list-tubes``, ``peek``, ``peek-ready``, ``peek-delayed``,
  ``peek-buried``) and the ``stats`` tool run on each server in turn and
  print one result per server: a ``== SERVER ==`` line before each in the
  pretty and raw formats, a ``"server"`` field in each ``--json`` /
  ``--yaml`` record.

Exit status: the worst of the servers' (0 ok, 1 an error reply, 3 a server
that could not be reached).  Nothing is changed on any server.
"""
from __future__ import annotations

import copy
import sys
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

from twisted_stalk.wording import counted
from twisted_stalk.protocol import COMMANDS

from .conn import Connection
from .errors import EXIT_CONNECTION, EXIT_OK, EXIT_REPLY, StalkError, UsageError
from .output import Output, isatty
from .render import render_columns
from .tools.args import check_tube, parser
from .tools.keys import quit_keys
from .tools.top import TOP_COLUMNS, show_frame, top_rows, top_snapshot

#: Commands that only read, and so may run on every server (``read_only`` in the table).
READ_ONLY = tuple(spec.name for spec in COMMANDS if spec.read_only)


class Server:
    """One server of the list: its address and, once made, its connection."""

    def __init__(self, name: str, target: Any, connect_timeout: float,
                 reply_timeout: float) -> None:
        self.name = name
        self.conn = Connection(target, connect_timeout=connect_timeout,
                               reply_timeout=reply_timeout)
        self.error = ""

    def connected(self) -> bool:
        """Connect if needed; False (and :attr:`error` set) if it cannot be."""
        if self.conn.connected:
            return True
        try:
            self.conn.connect()
        except StalkError as e:
            self.error = str(e)
            return False
        self.error = ""
        return True

    def close(self) -> None:
        self.conn.close()


def parse_servers(args: Any, config: Dict[str, str], connect_timeout: float,
                  reply_timeout: float) -> List[Server]:
    """The ``--servers`` list as :class:`Server` objects (TLS options apply to each)."""
    from .target import resolve_target
    servers = []
    for text in args.servers.split(","):
        text = text.strip()
        if not text:
            continue
        one = copy.copy(args)
        one.url, one.address = text, None
        target = resolve_target(one, config)
        servers.append(Server(str(target), target, connect_timeout, reply_timeout))
    if not servers:
        raise UsageError("--servers needs a comma-separated list of servers (HOST:PORT,...)")
    if len({s.name for s in servers}) != len(servers):
        raise UsageError("--servers lists a server twice")
    return servers


def run_servers(args: Any, config: Dict[str, str], command: List[str], out: Output,
                connect_timeout: float, reply_timeout: float) -> int:
    """``stalk --servers ... COMMAND``: dispatch to :func:`top` or :func:`each`."""
    if not command or command[0] == "-":
        raise UsageError("--servers needs a command: top, stats, or one of "
                         + ", ".join(READ_ONLY) + " (the interactive shell takes one server)")
    name = command[0]
    if name in ("help", "?"):
        from .help import help_text
        out.fragments(help_text(" ".join(command[1:])))
        return EXIT_OK
    if name not in READ_ONLY + ("top",):
        raise UsageError(f"--servers works with top, stats and read-only commands "
                         f"({', '.join(READ_ONLY)}), not {name}")
    if name == "top" and {"-h", "--help"} & set(command[1:]):
        top(out, [], command[1:])
        return EXIT_OK
    servers = parse_servers(args, config, connect_timeout, reply_timeout)
    try:
        if name == "top":
            return top(out, servers, command[1:])
        return each(out, servers, command, args.tube)
    finally:
        for s in servers:
            s.close()


def each(out: Output, servers: Sequence[Server], command: List[str],
         tube: Optional[str]) -> int:
    """Run one read-only command (or the ``stats`` tool) on each server."""
    from .run import select_tube
    if command[0] == "stats" and len(command) == 2:  # the stats tool: stats TUBE
        command = ["stats-tube", check_tube(command[1])]
    elif command[0] == "stats" and len(command) > 2:
        raise UsageError("stats takes at most one tube")
    from .request import InputError, build_request
    try:
        req = build_request(" ".join(command))
    except InputError as e:
        raise UsageError(e.message)
    assert req is not None
    status = EXIT_OK
    for server in servers:
        if not server.connected():
            status = max(status, EXIT_CONNECTION)
            _failed(out, server.name, server.error)
            continue
        try:
            if tube:
                select_tube(server.conn, tube)
            reply = server.conn.command(req.name, *req.args)
        except StalkError as e:
            status = max(status, EXIT_CONNECTION)
            _failed(out, server.name, str(e))
            continue
        if out.fmt in ("json", "yaml"):
            from .render import reply_data
            out.record(dict(server=server.name, **reply_data(reply)))
        else:
            out.stream.write(f"== {server.name} ==\n")
            out.stream.flush()
            out.reply(reply)
        if not reply.ok:
            status = max(status, EXIT_REPLY)
    return status


def _failed(out: Output, name: str, error: str) -> None:
    if out.fmt in ("json", "yaml"):
        out.record({"server": name, "error": error})
    else:
        sys.stderr.write(f"stalk: {name}: {error}\n")


# --------------------------------------------------------------------------
# top over several servers

def _rate(text: Any) -> Optional[float]:
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def sum_rows(rows: Sequence[List[Any]]) -> List[Any]:
    """One ``top`` row (without its tube name) adding up per-server rows:
    counts and rates summed, the longest pause."""
    total: List[Any] = [sum(r[i] for r in rows) for i in range(1, 9)]
    for i in (9, 10):
        rates = [_rate(r[i]) for r in rows]
        known = [x for x in rates if x is not None]
        total.append(f"{sum(known):.1f}" if known else "-")
    pauses = [r[11] for r in rows if r[11] != "-"]
    total.append(max(pauses, key=lambda p: int(p[:-1])) if pauses else "-")
    return total


def top_table(frames: Dict[str, Tuple[Dict[str, Any], List[List[Any]]]]
              ) -> List[List[Any]]:
    """Rows tube by tube: ``TUBE (sum) ...`` then one row per server having it."""
    by_tube: Dict[str, List[Tuple[str, List[Any]]]] = {}
    for name, (_, rows) in frames.items():
        for row in rows:
            by_tube.setdefault(row[0], []).append((name, row))
    table: List[List[Any]] = []
    for tube in sorted(by_tube):
        rows = by_tube[tube]
        table.append([tube, "(sum)"] + sum_rows([r for _, r in rows]))
        table += [["", name] + row[1:] for name, row in rows]
    return table


def top(out: Output, servers: Sequence[Server], argv: Sequence[str]) -> int:
    """``stalk --servers ... top``: every server's tubes and the sums, refreshed."""
    p = parser("top", "A live per-tube table over several servers: the sums, then each "
               "server's row.")
    p.add_argument("tubes", nargs="*", help="only these tubes")
    p.add_argument("-n", "--interval", type=float, default=1.0,
                   help="seconds between refreshes (default 1)")
    p.add_argument("-c", "--count", type=int, default=0,
                   help="stop after COUNT refreshes (default: until q or Ctrl-C)")
    p.add_argument("--once", action="store_true", help="print one table and exit")
    a = p.parse_args(argv)
    for t in a.tubes:
        check_tube(t)
    live = isatty(out.stream) and out.fmt == "pretty" and not a.once
    count = 1 if a.once else a.count
    prev: Dict[str, Dict[str, Dict[str, Any]]] = {}
    prev_t: Dict[str, float] = {}
    n = 0
    status = EXIT_OK
    if live:
        out.stream.write("\x1b[?1049h\x1b[?25l")
    try:
        with quit_keys(None, live) as wait:
            while True:
                t0 = time.monotonic()
                frames: Dict[str, Tuple[Dict[str, Any], List[List[Any]]]] = {}
                down: Dict[str, str] = {}
                for s in servers:
                    try:
                        if not s.connected():
                            raise StalkError(s.error)
                        stats, tubes = top_snapshot(s.conn, a.tubes)
                    except StalkError as e:
                        s.close()
                        down[s.name] = str(e)
                        prev.pop(s.name, None)
                        continue
                    rows = top_rows(tubes, prev.get(s.name), t0 - prev_t.get(s.name, t0))
                    prev[s.name], prev_t[s.name] = tubes, t0
                    frames[s.name] = (stats, rows)
                status = EXIT_CONNECTION if down else EXIT_OK
                n += 1
                _show(out, servers, frames, down, live, n, a.interval)
                if count and n >= count:
                    return status
                if wait(a.interval - (time.monotonic() - t0)):
                    return status
    except KeyboardInterrupt:
        return status
    finally:
        if live:
            out.stream.write("\x1b[?25h\x1b[?1049l")
            out.stream.flush()


def _show(out: Output, servers: Sequence[Server],
          frames: Dict[str, Tuple[Dict[str, Any], List[List[Any]]]], down: Dict[str, str],
          live: bool, n: int, interval: float) -> None:
    keys = [c.lower() for c in TOP_COLUMNS]
    if out.fmt in ("json", "yaml"):
        table = top_table(frames)
        tubes = []
        for row in table:
            if row[1] == "(sum)":
                tubes.append({"tube": row[0], "sum": dict(zip(keys[1:], row[2:])),
                              "servers": {}})
            else:
                tubes[-1]["servers"][row[1]] = dict(zip(keys[1:], row[2:]))
        out.record({"time": time.time(),
                    "servers": [{"server": s.name, "up": s.name in frames,
                                 **({"error": down[s.name]} if s.name in down else {})}
                                for s in servers],
                    "tubes": tubes})
        return
    waiting = sum(st.get("current-waiting", 0) for st, _ in frames.values())
    workers = sum(st.get("current-workers", 0) for st, _ in frames.values())
    head = (f"stalk top  {counted(len(servers), 'server')}, {len(frames)} up  "
            f"{counted(workers, 'worker')}  {waiting} waiting")
    lines = [head] + [f"  {name}: DOWN ({why})" for name, why in down.items()] + [""]
    lines += render_columns((TOP_COLUMNS[0], "SERVER") + TOP_COLUMNS[1:], top_table(frames))
    show_frame(out, "\n".join(lines) + "\n", live, n, f"every {interval:g}s, q or Ctrl-C quits")


__all__ = ["READ_ONLY", "Server", "each", "parse_servers", "run_servers", "sum_rows", "top",
           "top_table"]
