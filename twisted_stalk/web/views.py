# -*- test-case-name: tests.test_web_api -*-
"""What the API says about jobs, tubes, connections and the server, as JSON-ready dicts.

Bodies are never sent as markup: a body that is UTF-8 text without control
characters (other than tab, newline, carriage return) is sent as a JSON
string, anything else as hex; the page shows both with ``textContent``.
"""
from __future__ import annotations

import os
from typing import Any, Dict, Iterable, Optional, Tuple

from ..core.job import DELAYED, RESERVED, STATE_NAMES, Job
from ..protocol.yaml import as_dict

#: Bytes of a body shown in a list of jobs.
PREVIEW_BYTES = 120
#: Bytes of a body shown on a job's own page (the rest is downloadable).
DETAIL_BYTES = 64 * 1024
_CONTROL = frozenset(range(32)) - {9, 10, 13}


def _text(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("latin-1")
    return value


def stats_dict(pairs: Iterable[Tuple[str, Any]]) -> Dict[str, Any]:
    return {key: _text(value) for key, value in as_dict(pairs).items()}


def body_view(data: bytes, limit: int) -> Dict[str, Any]:
    """``{"kind": "text"|"hex", "data", "truncated", "size"}`` for a body without its CRLF."""
    shown = data[:limit]
    view: Dict[str, Any] = {"size": len(data), "truncated": len(data) > limit}
    text = _as_text(shown, cut=len(data) > limit)
    if text is not None:
        view.update(kind="text", data=text)
    else:
        view.update(kind="hex", data=shown.hex(" "))
    return view


def _as_text(data: bytes, cut: bool) -> Optional[str]:
    if cut:
        # A cut may split a character: drop up to three bytes of a partial one.
        for trim in range(4):
            try:
                text = data[:len(data) - trim].decode("utf-8")
                break
            except UnicodeDecodeError:
                continue
        else:
            return None
    else:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return None
    if any(ord(c) in _CONTROL or c == "\x7f" for c in text):
        return None
    return text


def job_summary(job: Job, now: float) -> Dict[str, Any]:
    """One row of a list of jobs."""
    state = job.state
    if state in (RESERVED, DELAYED):
        time_left = max(0, int(job.deadline_at - now))
    else:
        time_left = 0
    body = job.body[:-2]
    return {
        "id": job.id,
        "tube": job.tube.name.decode("latin-1"),
        "state": STATE_NAMES[state].decode(),
        "pri": job.pri,
        "age": int(now - job.created_at),
        "time_left": time_left,
        "ttr": job.ttr,
        "delay": job.delay,
        "size": len(body),
        "preview": body_view(body, PREVIEW_BYTES),
    }


_TUBE_FIELDS = (
    ("urgent", "current-jobs-urgent"), ("ready", "current-jobs-ready"),
    ("reserved", "current-jobs-reserved"), ("delayed", "current-jobs-delayed"),
    ("buried", "current-jobs-buried"), ("total_jobs", "total-jobs"),
    ("using", "current-using"), ("watching", "current-watching"),
    ("waiting", "current-waiting"), ("deletes", "cmd-delete"), ("pauses", "cmd-pause-tube"),
    ("pause", "pause"), ("pause_left", "pause-time-left"),
)


def tube_view(pairs: Iterable[Tuple[str, Any]]) -> Dict[str, Any]:
    stats = as_dict(pairs)
    view: Dict[str, Any] = {"name": _text(stats["name"])}
    for key, field in _TUBE_FIELDS:
        view[key] = stats.get(field, 0)
    view["paused"] = bool(view["pause"]) and view["pause_left"] > 0
    return view


def peer_text(transport) -> str:
    """``host:port`` (or ``unix``) of a connection's peer."""
    try:
        peer = transport.getPeer()
    except Exception:  # pragma: no cover - a transport without a peer
        return "?"
    host = getattr(peer, "host", None)
    if host is not None:
        return f"[{host}]:{peer.port}" if ":" in host else f"{host}:{peer.port}"
    name = getattr(peer, "name", None)
    return f"unix:{name.decode() if isinstance(name, bytes) else name or ''}"


def session_view(session, peer: str, held_limit: int = 50) -> Dict[str, Any]:
    held = sorted(session.reserved)
    return {
        "peer": peer,
        "use": session.use.name.decode("latin-1"),
        "watch": [t.name.decode("latin-1") for t in session.watch],
        "waiting": bool(session.waiting),
        "producer": bool(session.is_producer),
        "worker": bool(session.is_worker),
        "reserved": held[:held_limit],
        "reserved_count": len(held),
    }


def binlog_view(journal) -> Dict[str, Any]:
    """Whether a binlog is on, whether it can write, and its files' size."""
    directory = getattr(journal, "directory", None)
    if directory is None:
        return {"enabled": False}
    from ..server.metrics import binlog_problem
    problem = binlog_problem(journal)
    size = files = 0
    try:
        with os.scandir(directory) as entries:
            for entry in entries:
                if entry.name.startswith("binlog.") and entry.is_file():
                    files += 1
                    size += entry.stat().st_size
    except OSError:
        pass
    return {"enabled": True, "directory": directory, "writable": problem is None,
            "problem": problem, "files": files, "size_bytes": size}


_SERVER_FIELDS = (
    "version", "uptime", "pid", "hostname", "current-connections", "current-producers",
    "current-workers", "current-waiting", "current-tubes", "total-jobs", "total-connections",
    "current-jobs-urgent", "current-jobs-ready", "current-jobs-reserved",
    "current-jobs-delayed", "current-jobs-buried", "job-timeouts", "max-job-size",
    "binlog-current-index", "binlog-oldest-index", "binlog-records-written", "draining",
)


def server_view(pairs: Iterable[Tuple[str, Any]], engine) -> Dict[str, Any]:
    stats = as_dict(pairs)
    view = {key: _text(stats.get(key)) for key in _SERVER_FIELDS}
    view["job_bytes"] = getattr(engine, "job_bytes", None)
    view["binlog"] = binlog_view(engine.journal)
    return view


def state_name(code: int) -> str:
    return STATE_NAMES[code].decode()


__all__ = ["DETAIL_BYTES", "PREVIEW_BYTES", "binlog_view", "body_view", "job_summary",
           "peer_text", "server_view", "session_view", "state_name", "stats_dict",
           "tube_view"]
