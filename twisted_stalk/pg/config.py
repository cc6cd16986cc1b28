# -*- test-case-name: tests.test_pg_units -*-
"""``--engine``: a libpq connection string, plus the engine's own ``stalk_*`` settings.

The string is handed to libpq as it is (URL or ``key=value`` form, multi-host
strings with ``target_session_attrs=read-write`` included), except for the
parameters whose names start with ``stalk_``, which configure the engine and
which libpq would refuse:

==================  =======  ==================================================
``stalk_schema``    twisted_stalk  PostgreSQL schema holding the queue's tables
``stalk_pool``      4        connections per node for commands (pipelined)
``stalk_heartbeat`` 1        seconds between a node's heartbeats
``stalk_dead_after`` 5       seconds without a heartbeat after which other nodes
                             give a node's reservations back
``stalk_wait``      10       seconds a command waits for the database to come
                             back before it answers INTERNAL_ERROR; also the
                             ``connect_timeout`` of the start-up connections
                             (:func:`startup_conninfo`)
``stalk_take_hold`` 0.1      seconds a job taken by a worker's delete for its
                             next reserve waits to be asked for (0: take none;
                             below 1); also how long other nodes may not see
                             it (taking.py, docs/ha.md)
==================  =======  ==================================================
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Dict, Tuple

_KV = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*('(?:[^'\\]|\\.)*'|[^\s']*)")


@dataclass
class EngineConfig:
    """What the PostgreSQL engine needs from ``--engine``."""

    #: The libpq connection string, without the ``stalk_*`` parameters.
    conninfo: str
    schema: str = "twisted_stalk"
    pool: int = 4
    heartbeat: float = 1.0
    dead_after: float = 5.0
    wait: float = 10.0
    take_hold: float = 0.1


def split_settings(text: str) -> Tuple[str, Dict[str, str]]:
    """Separate the ``stalk_*`` parameters from a libpq connection string."""
    ours: Dict[str, str] = {}
    if "://" in text:
        base, sep, query = text.partition("?")
        kept = []
        for part in query.split("&") if sep else []:
            key, _, value = part.partition("=")
            if key.startswith("stalk_"):
                ours[key] = value
            elif part:
                kept.append(part)
        return base + ("?" + "&".join(kept) if kept else ""), ours
    kept = []
    pos = 0
    while pos < len(text):
        m = _KV.match(text, pos)
        if m is None:
            if text[pos:].strip():
                raise ValueError(f"cannot read the connection string near {text[pos:]!r}")
            break
        key, value = m.group(1), m.group(2)
        if key.startswith("stalk_"):
            ours[key] = value.strip("'")
        else:
            kept.append(m.group(0).strip())
        pos = m.end()
    return " ".join(kept), ours


def parse(text: str) -> EngineConfig:
    """An :class:`EngineConfig` from an ``--engine`` value; ValueError if malformed."""
    if not (text.startswith(("postgresql://", "postgres://")) or "=" in text):
        raise ValueError("--engine takes a PostgreSQL connection string "
                         "(postgresql://... or 'host=... dbname=...')")
    conninfo, ours = split_settings(text)
    config = EngineConfig(conninfo)
    for key, value in ours.items():
        name = key[len("stalk_"):]
        if name == "schema":
            config.schema = value
        elif name == "pool":
            if not (value.isdigit() and 1 <= int(value) <= 64):
                raise ValueError(f"stalk_pool must be a whole number 1..64, got {value!r}")
            config.pool = int(value)
        elif name in ("heartbeat", "dead_after", "wait"):
            try:
                number = float(value)
            except ValueError:
                number = float("nan")
            if not 0 < number < float("inf"):
                raise ValueError(f"{key} must be a positive number of seconds, got {value!r}")
            setattr(config, name, number)
        elif name == "take_hold":
            try:
                number = float(value)
            except ValueError:
                number = float("nan")
            if not 0 <= number < 1:
                raise ValueError(f"{key} must be a number of seconds from 0 to below 1, "
                                 f"got {value!r}")
            config.take_hold = number
        else:
            raise ValueError(f"unknown engine setting {key}")
    if config.dead_after <= config.heartbeat:
        raise ValueError("stalk_dead_after must be longer than stalk_heartbeat")
    return config


def startup_conninfo(config: EngineConfig) -> str:
    """The connection string for the blocking start-up connections (the schema
    migration, the node's registration): with libpq's ``connect_timeout`` set
    to ``stalk_wait`` (rounded up; libpq waits at least 2 s) unless the string
    sets one.  Without it a port that accepts but never speaks (another
    service, a proxy with nothing behind it) held the start for ever; the
    running driver bounds its own connects."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo
    if "connect_timeout" in conninfo_to_dict(config.conninfo):
        return config.conninfo
    return make_conninfo(config.conninfo, connect_timeout=startup_timeout(config))


def startup_timeout(config: EngineConfig) -> int:
    """Seconds libpq's ``connect_timeout`` gives a start-up connection (``stalk_wait``)."""
    return max(2, math.ceil(config.wait))


__all__ = ["EngineConfig", "parse", "split_settings", "startup_conninfo", "startup_timeout"]
