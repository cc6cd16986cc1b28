# -*- test-case-name: tests.test_web_api -*-
"""What the API says about jobs, tubes, connections and the server, as JSON-ready dicts.

Bodies are never sent as markup: a body that is UTF-8 text without control
characters (other than tab, newline, carriage return) is sent as a JSON
string, anything else as hex; the page shows both with ``textContent``.
"""
from __future__ import annotations

from typing import Any, Dict, Iterable, Optional, Tuple

from ..core.engine import Engine
from ..core.job import DELAYED, RESERVED, STATE_NAMES, JobRecord
from ..core.journal import JournalHealth
from ..protocol.yaml import as_dict
from ..server.peers import ConnectionFacts, peer_text

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


def job_summary(job: JobRecord, now: float) -> Dict[str, Any]:
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


def session_view(facts: ConnectionFacts, held_limit: int = 50) -> Dict[str, Any]:
    return {
        "peer": facts.peer,
        "use": facts.use.decode("latin-1"),
        "watch": [name.decode("latin-1") for name in facts.watch],
        "waiting": facts.waiting,
        "producer": facts.producer,
        "worker": facts.worker,
        "reserved": list(facts.held[:held_limit]),
        "reserved_count": len(facts.held),
    }


def binlog_view(health: JournalHealth) -> Dict[str, Any]:
    """Whether a binlog is on, whether it can write, and its files' size."""
    if not health.enabled:
        return {"enabled": False}
    return {"enabled": True, "directory": health.directory,
            "writable": health.problem is None, "problem": health.problem,
            "files": health.files, "size_bytes": health.bytes}


_SERVER_FIELDS = (
    "version", "uptime", "pid", "hostname", "current-connections", "current-producers",
    "current-workers", "current-waiting", "current-tubes", "total-jobs", "total-connections",
    "current-jobs-urgent", "current-jobs-ready", "current-jobs-reserved",
    "current-jobs-delayed", "current-jobs-buried", "job-timeouts", "max-job-size",
    "binlog-current-index", "binlog-oldest-index", "binlog-records-written", "draining",
)


def server_view(pairs: Iterable[Tuple[str, Any]], engine: Engine) -> Dict[str, Any]:
    stats = as_dict(pairs)
    view = {key: _text(stats.get(key)) for key in _SERVER_FIELDS}
    view["job_bytes"] = engine.memory().used
    view["binlog"] = binlog_view(engine.journal.health())
    return view


def state_name(code: int) -> str:
    return STATE_NAMES[code].decode()


__all__ = ["DETAIL_BYTES", "PREVIEW_BYTES", "binlog_view", "body_view", "job_summary",
           "peer_text", "server_view", "session_view", "state_name", "stats_dict",
           "tube_view"]
