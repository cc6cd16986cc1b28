# -*- test-case-name: tests.test_pg_wire -*-
"""The database schema of the PostgreSQL engine, versioned, created and migrated by the server.

Everything lives in one PostgreSQL schema (``twisted_stalk`` unless the
engine string says ``stalk_schema=...``), so one database can hold several
independent queues.  :data:`MIGRATIONS` lists the changes in order; the
table ``schema_version`` records how far a database has come.
:func:`migrate` applies what is missing under an advisory lock, so nodes
starting together do not race, and refuses a database whose schema is newer
than this code.

Tables (version 1):

``jobs``
    One row per job.  ``state``: 0 ready, 1 reserved, 2 delayed, 3 buried
    (the codes of :mod:`twisted_stalk.core.job`).  ``deadline_at`` is when a
    delayed job becomes ready or a reservation's TTR ends, in the database's
    clock (seconds since the epoch), so every node measures time alike.
    ``owner_node``/``owner_conn`` name the connection holding a reservation.
    ``buried_seq`` orders buried jobs for ``kick``.  ``body`` is the job's
    data, byte for byte, without the protocol's CRLF.
``tubes``
    Pause state of tubes (``pause`` seconds, ``unpause_at``).
``nodes``
    One row per live node: its heartbeat and its published figures.
``retired``
    Counters of nodes that are gone, kept so that totals do not go back.
"""
from __future__ import annotations

import re
from typing import List, Tuple

#: The newest schema version this code knows.
VERSION = 1

#: (version, statements) in order; ``{s}`` is the schema name, quoted.
MIGRATIONS: List[Tuple[int, List[str]]] = [
    (1, [
        "CREATE SEQUENCE {s}.job_ids",
        "CREATE SEQUENCE {s}.bury_seq",
        "CREATE SEQUENCE {s}.node_ids",
        """CREATE TABLE {s}.jobs (
            id bigint PRIMARY KEY,
            tube text NOT NULL,
            state smallint NOT NULL,
            pri bigint NOT NULL,
            delay bigint NOT NULL,
            ttr bigint NOT NULL,
            created_at double precision NOT NULL,
            deadline_at double precision NOT NULL DEFAULT 0,
            buried_seq bigint,
            owner_node bigint,
            owner_conn bigint,
            reserves integer NOT NULL DEFAULT 0,
            timeouts integer NOT NULL DEFAULT 0,
            releases integer NOT NULL DEFAULT 0,
            buries integer NOT NULL DEFAULT 0,
            kicks integer NOT NULL DEFAULT 0,
            body bytea NOT NULL
        )""",
        "ALTER TABLE {s}.jobs ALTER COLUMN body SET STORAGE EXTERNAL",
        "CREATE INDEX jobs_ready ON {s}.jobs (tube, pri, id) WHERE state = 0",
        "CREATE INDEX jobs_tube ON {s}.jobs (tube, state)",
        "CREATE INDEX jobs_delayed ON {s}.jobs (deadline_at, id) WHERE state = 2",
        "CREATE INDEX jobs_reserved ON {s}.jobs (deadline_at) WHERE state = 1",
        "CREATE INDEX jobs_owner ON {s}.jobs (owner_node, owner_conn) WHERE state = 1",
        "CREATE INDEX jobs_buried ON {s}.jobs (tube, buried_seq) WHERE state = 3",
        """CREATE TABLE {s}.tubes (
            name text PRIMARY KEY,
            pause bigint NOT NULL DEFAULT 0,
            unpause_at double precision NOT NULL DEFAULT 0
        )""",
        """CREATE TABLE {s}.nodes (
            id bigint PRIMARY KEY,
            started_at double precision NOT NULL,
            heartbeat_at double precision NOT NULL,
            hostname text NOT NULL DEFAULT '',
            pid integer NOT NULL DEFAULT 0,
            figures jsonb NOT NULL DEFAULT '{{}}',
            tubes jsonb NOT NULL DEFAULT '{{}}'
        )""",
        """CREATE TABLE {s}.retired (
            key text PRIMARY KEY,
            value bigint NOT NULL
        )""",
    ]),
]

_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


class SchemaError(Exception):
    """The database cannot be used by this version (too new, or a bad schema name)."""


def quoted(schema: str) -> str:
    """The schema name as an SQL identifier (only plain lower-case names are allowed)."""
    if not _NAME.match(schema):
        raise SchemaError(f"schema name {schema!r}: use lower-case letters, digits and _")
    return '"%s"' % schema


def migrate(conninfo: str, schema: str) -> Tuple[int, int]:
    """Create or bring the schema up to :data:`VERSION` (blocking; at startup).

    Returns (version found, version now).  Raises :class:`SchemaError` for a
    database whose schema is newer than this code.
    """
    import psycopg

    s = quoted(schema)
    with psycopg.connect(conninfo, autocommit=False) as conn:
        # One migrating node at a time, per schema.
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", ("twisted_stalk:" + schema,))
        conn.execute(f"CREATE SCHEMA IF NOT EXISTS {s}")
        conn.execute(f"CREATE TABLE IF NOT EXISTS {s}.schema_version (version integer NOT NULL)")
        row = conn.execute(f"SELECT max(version) FROM {s}.schema_version").fetchone()
        found = row[0] or 0
        if found > VERSION:
            raise SchemaError(f"schema {schema} is at version {found}; this server knows "
                              f"up to {VERSION}: upgrade twisted-stalk")
        for version, statements in MIGRATIONS:
            if version <= found:
                continue
            for statement in statements:
                conn.execute(statement.format(s=s))
            conn.execute(f"INSERT INTO {s}.schema_version VALUES (%s)", (version,))
        conn.commit()
    return found, VERSION


def drop(conninfo: str, schema: str) -> None:
    """Remove the schema and everything in it (tests)."""
    import psycopg

    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {quoted(schema)} CASCADE")


__all__ = ["MIGRATIONS", "SchemaError", "VERSION", "drop", "migrate", "quoted"]
