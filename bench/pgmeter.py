"""What a PostgreSQL benchmark row costs: commits, statements, WAL and CPU per job.

A :class:`Snapshot` is read before and after a row (:func:`take`);
:func:`per_job` turns two of them into figures per job:

* ``commits``: transactions that wrote (the next transaction id moved on:
  ``pg_current_snapshot()``'s xmax), each a WAL flush with fsync on.  Read
  at once, so it is exact at any moment, even between two phases of a run;
* ``xacts``: ``pg_stat_database.xact_commit`` summed over the databases
  (read-only transactions included).  Backends publish these counts at most
  once a second, so the harness lets the servers idle a moment before a
  snapshot; a phase boundary inside a running load makes it unreliable;
* ``statements``: ``pg_stat_statements`` calls (the harness's own
  statements, marked with :data:`MARK`, are left out);
* ``wal``: bytes of WAL (``pg_current_wal_lsn()``);
* ``pg_cpu``: user + system CPU of the cluster's processes (the postmaster,
  its live children, and through ``cutime``/``cstime`` the children that
  exited), read from ``/proc``, the harness's own backend left out;
* ``node_cpu``: user + system CPU of the given processes (the queue's nodes,
  or Graphile Worker's Node.js process).
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Tuple

#: A comment in every statement the harness runs, so it is not counted.
MARK = "/* pg_bench */"

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def parse_stat(text: str) -> Tuple[int, int, int, int, int]:
    """(ppid, utime, stime, cutime, cstime) from a ``/proc/PID/stat`` line (ticks)."""
    fields = text.rsplit(")", 1)[1].split()
    # After the command: state ppid pgrp session tty tpgid flags minflt cminflt
    # majflt cmajflt utime stime cutime cstime ...
    return (int(fields[1]), int(fields[11]), int(fields[12]), int(fields[13]),
            int(fields[14]))


def _stat(pid: int) -> Optional[Tuple[int, int, int, int, int]]:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return parse_stat(f.read())
    except (OSError, IndexError, ValueError):
        return None


def process_cpu(pids: Iterable[int]) -> float:
    """CPU seconds (user + system) the processes ``pids`` used so far."""
    total = 0
    for pid in pids:
        st = _stat(pid)
        if st:
            total += st[1] + st[2]
    return total / _TICK


def cluster_cpu(postmaster: int, exclude: Iterable[int] = ()) -> float:
    """CPU seconds of a PostgreSQL cluster: the postmaster, its live
    children, and (``cutime``/``cstime``) the children it has reaped."""
    skip = set(exclude)
    root = _stat(postmaster)
    if root is None:
        return 0.0
    total = sum(root[1:])
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in skip:
            continue
        st = _stat(int(entry))
        if st and st[0] == postmaster:
            total += st[1] + st[2]
    return total / _TICK


@dataclass
class Snapshot:
    """The counters of one moment (see the module docstring)."""

    xid: int
    xacts: int
    wal: int
    pg_cpu: float
    node_cpu: float
    #: queryid -> (calls, total ms, query text)
    statements: Dict[int, Tuple[int, float, str]] = field(default_factory=dict)


def take(conn, postmaster: int, nodes: Iterable[int]) -> Snapshot:
    """Read a :class:`Snapshot` over ``conn`` (a psycopg autocommit connection)."""
    me = conn.execute(f"{MARK} SELECT pg_backend_pid()").fetchone()[0]
    statements = {
        qid: (calls, total, query) for qid, calls, total, query in conn.execute(
            f"{MARK} SELECT queryid, calls, total_exec_time, query FROM pg_stat_statements"
            " WHERE queryid IS NOT NULL").fetchall()
        if MARK not in query}
    xid, xacts, wal = conn.execute(
        f"{MARK} SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint,"
        " (SELECT sum(xact_commit)::bigint FROM pg_stat_database),"
        " pg_current_wal_lsn() - '0/0'::pg_lsn").fetchone()
    return Snapshot(xid=int(xid), xacts=int(xacts), wal=int(wal),
                    pg_cpu=cluster_cpu(postmaster, [me]), node_cpu=process_cpu(nodes),
                    statements=statements)


def calls(before: Snapshot, after: Snapshot) -> Dict[int, Tuple[int, float, str]]:
    """Per statement: (calls, total ms, text) between the two snapshots."""
    out = {}
    for qid, (n, ms, query) in after.statements.items():
        n0, ms0, _ = before.statements.get(qid, (0, 0.0, query))
        if n > n0:
            out[qid] = (n - n0, ms - ms0, query)
    return out


def per_job(before: Snapshot, after: Snapshot, jobs: int) -> Dict[str, float]:
    """The row's figures per job (CPU in microseconds)."""
    jobs = max(jobs, 1)
    stmts = sum(n for n, _, _ in calls(before, after).values())
    return {
        "commits": (after.xid - before.xid) / jobs,
        "xacts": (after.xacts - before.xacts) / jobs,
        "statements": stmts / jobs,
        "wal": (after.wal - before.wal) / jobs,
        "pg_cpu": 1e6 * (after.pg_cpu - before.pg_cpu) / jobs,
        "node_cpu": 1e6 * (after.node_cpu - before.node_cpu) / jobs,
    }


def _words(sql: str) -> str:
    return re.sub(r"\s+", " ", sql).strip()


def _shape(sql: str) -> str:
    """``sql`` without its constants, parameters and spacing: as prepared and as
    ``pg_stat_statements`` shows it (constants become ``$n`` there, and so
    does the field of ``extract(epoch FROM ...)``, and a ``NULL``) alike."""
    sql = re.sub(r"extract\(\s*\w+", "extract(", sql)
    return re.sub(r"'(?:[^']|'')*'|\$\d+|\bNULL\b|[\d\s-]", "", sql)


def top_statements(before: Snapshot, after: Snapshot, jobs: int, named: Dict[str, str],
                   count: int = 5) -> List[Tuple[str, float, float]]:
    """The ``count`` statements that took the most time: (name, calls per
    job, execution µs per job).  ``named`` maps names to statement texts
    (as prepared); others are shown by their first words."""
    names = {_shape(sql): name for name, sql in named.items()}
    jobs = max(jobs, 1)
    rows = []
    for n, ms, query in calls(before, after).values():
        name = names.get(_shape(query)) or _words(query)[:48]
        rows.append((name, n / jobs, 1000 * ms / jobs))
    rows.sort(key=lambda r: -r[2])
    return rows[:count]


__all__ = ["MARK", "Snapshot", "calls", "cluster_cpu", "parse_stat", "per_job",
           "process_cpu", "take", "top_statements"]
