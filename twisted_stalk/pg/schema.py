# -*- test-case-name: tests.test_pg_wire -*-
"""The database schema of the PostgreSQL engine, versioned, created and migrated by the server.

Everything lives in one PostgreSQL schema (``twisted_stalk`` unless the
engine string says ``stalk_schema=...``), so one database can hold several
independent queues.  :data:`MIGRATIONS` lists the changes in order; the
table ``schema_version`` records how far a database has come.
:func:`migrate` applies what is missing under an advisory lock, so nodes
starting together do not race, and refuses a database whose schema is newer
than this code.

A version may also retire what older nodes still use (version 2: two indexes
of version 1).  Its additive part is applied at once, older nodes still
running; the rest waits until no older node is registered (``nodes.version``
lower than the change's, NULL for a version 1 node) and is applied by the
first ``--engine-init`` or node start that finds none.  ``schema_version``
says which versions still wait (``finished``).

Tables (version 2):

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
    One row per live node: its heartbeat, its published figures and the
    schema version its code knows (``version``; NULL: version 1).
``retired``
    Counters of nodes that are gone, kept so that totals do not go back.

Indexes of ``jobs`` (version 2), one per way a job is looked up, each
partial, so that a ready, held or buried job is in one index besides the
primary key: a ready put or a release to ready writes two index entries, a
reserve or a touch two (version 1 wrote three and four):

``jobs_ready`` (tube, pri, id), ready jobs
    the next job of a tube (reserve, peek-ready, a tube's counts);
``jobs_reserved`` (deadline_at), held jobs
    the reservations whose TTR ran out; a node's or a connection's
    reservations (rare: a connection closing, a node given up) are found by
    reading the held jobs, as many as the connections hold;
``jobs_delayed`` (deadline_at, id), delayed jobs
    the delayed jobs whose time came, across tubes;
``jobs_delayed_tube`` (tube, deadline_at, id), delayed jobs
    a tube's delayed jobs (peek-delayed, kick, counts): delayed puts are off
    the worker's path, so they write three entries;
``jobs_buried`` (tube, buried_seq), buried jobs
    a tube's buried jobs in burial order.

Whether a tube keeps any job asks each of them in turn (sql.py).
"""
from __future__ import annotations

import re
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

#: The newest schema version this code knows.
VERSION = 2

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
    # Additive: version 1 nodes keep running against it (they neither read
    # nor write the new column, and any index serves their statements).
    (2, [
        "ALTER TABLE {s}.schema_version ADD COLUMN finished boolean NOT NULL DEFAULT true",
        "ALTER TABLE {s}.nodes ADD COLUMN version integer",
        "CREATE INDEX jobs_delayed_tube ON {s}.jobs (tube, deadline_at, id) WHERE state = 2",
    ]),
]

#: What a version retires, applied once no node older than it is registered.
#: Version 2's statements find held jobs by deadline alone, and a tube's
#: jobs through the index of each state.
RETIRE: Dict[int, List[str]] = {
    2: [
        "DROP INDEX {s}.jobs_tube",
        "DROP INDEX {s}.jobs_owner",
    ],
}

#: Seconds a retirement waits for the tables it changes (then it waits for
#: the next --engine-init or node start).
RETIRE_LOCK_WAIT = 2.0

_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


class SchemaError(Exception):
    """The database cannot be used by this version (too new, or a bad schema name)."""


def quoted(schema: str) -> str:
    """The schema name as an SQL identifier (only plain lower-case names are allowed)."""
    if not _NAME.match(schema):
        raise SchemaError(f"schema name {schema!r}: use lower-case letters, digits and _")
    return '"%s"' % schema


class Migrated(NamedTuple):
    """What :func:`migrate` did."""

    found: int
    now: int
    #: Why a version's retirements wait (one line naming an older node), or None.
    waiting: Optional[str] = None
    #: The versions whose retirements were applied now.
    finished: Tuple[int, ...] = ()

    def notes(self, schema: str) -> List[str]:
        """What a person is told besides the versions: what was dropped now
        (not for a new schema, which had nothing older), what waits."""
        said = [f"schema {schema}: version {version} finished: what only older versions "
                f"used is dropped" for version in (self.finished if self.found else ())]
        return said + ([self.waiting] if self.waiting else [])


def migrate(conninfo: str, schema: str, upto: int = VERSION) -> Migrated:
    """Create or bring the schema up to :data:`VERSION` (blocking; at startup).

    Applies the missing versions, then what they retire if no older node is
    registered (else :attr:`Migrated.waiting` says which one is).  Raises
    :class:`SchemaError` for a database whose schema is newer than this
    code.  ``upto`` stops at an older version (tests build a version 1
    database with it).
    """
    import psycopg

    s = quoted(schema)
    with psycopg.connect(conninfo, autocommit=False) as conn:
        # One migrating node at a time, per schema (version 1 nodes take the same lock).
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", ("twisted_stalk:" + schema,))
        conn.execute(f"CREATE SCHEMA IF NOT EXISTS {s}")
        conn.execute(f"CREATE TABLE IF NOT EXISTS {s}.schema_version (version integer NOT NULL)")
        row = conn.execute(f"SELECT max(version) FROM {s}.schema_version").fetchone()
        found = row[0] or 0
        if found > VERSION:
            raise SchemaError(f"schema {schema} is at version {found}; this server knows "
                              f"up to {VERSION}: upgrade twisted-stalk")
        for version, statements in MIGRATIONS:
            if version <= found or version > upto:
                continue
            for statement in statements:
                conn.execute(statement.format(s=s))
            conn.execute(f"INSERT INTO {s}.schema_version (version) VALUES (%s)", (version,))
            if RETIRE.get(version):
                conn.execute(f"UPDATE {s}.schema_version SET finished = false "
                             f"WHERE version = %s", (version,))
        now = max(found, min(upto, VERSION))
        finished: List[int] = []
        waiting = _retire(conn, schema, finished) if now >= 2 else None  # (the column is 2's)
        conn.commit()
    return Migrated(found, now, waiting, tuple(finished))


def _retire(conn: Any, schema: str, finished: List[int]) -> Optional[str]:
    """Apply the retirements no registered node still needs, oldest first
    (their versions added to ``finished``); the line saying why the next one
    waits, or None."""
    import psycopg

    s = quoted(schema)
    pending = conn.execute(f"SELECT version FROM {s}.schema_version WHERE NOT finished "
                           f"ORDER BY version").fetchall()
    for (version,) in pending:
        keeps = f"schema {schema}: version {version} keeps the indexes of version {version - 1}"
        older = conn.execute(
            f"SELECT n.id, n.hostname, n.pid, coalesce(n.version, 1), "
            f"extract(epoch FROM clock_timestamp()) - n.heartbeat_at "
            f"FROM {s}.nodes n WHERE coalesce(n.version, 1) < %s ORDER BY n.id LIMIT 1",
            (version,)).fetchone()
        if older is not None:
            node, host, pid, theirs, ago = older
            return (f"{keeps} while node {node} ({host or '?'}, pid {pid}, version {theirs}, "
                    f"last heard {max(0, int(ago))} s ago) is registered: run --engine-init "
                    f"again once every node runs version {version}")
        try:
            with conn.transaction():  # (a savepoint)
                # Dropping an index waits for every statement on the table and
                # makes every later one wait behind it: not for long.
                conn.execute(f"SET LOCAL lock_timeout = {int(RETIRE_LOCK_WAIT * 1000)}")
                for statement in RETIRE.get(version, []):
                    conn.execute(statement.format(s=s))
        except psycopg.errors.LockNotAvailable:
            return (f"{keeps}: the jobs table stayed in use for {RETIRE_LOCK_WAIT:g} s "
                    f"(a long transaction?): run --engine-init again")
        conn.execute(f"UPDATE {s}.schema_version SET finished = true "
                     f"WHERE version = %s", (version,))
        finished.append(version)
    return None


def drop(conninfo: str, schema: str) -> None:
    """Remove the schema and everything in it (tests)."""
    import psycopg

    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {quoted(schema)} CASCADE")


__all__ = ["MIGRATIONS", "Migrated", "RETIRE", "RETIRE_LOCK_WAIT", "SchemaError", "VERSION", "drop",
           "migrate", "quoted"]
