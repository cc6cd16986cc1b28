# -*- test-case-name: tests.test_pg_wire -*-
"""The engine's SQL: one prepared statement per operation, each its own transaction.

Every statement that changes jobs is a single statement (CTEs included), so
it commits or fails as a whole and holds row locks only while it runs: two
nodes never deadlock waiting on each other's clients.  Rows to take are
chosen with ``FOR UPDATE SKIP LOCKED``: two nodes reserving at once never
get the same job, and neither waits for the other.

Time is the database's (``clock_timestamp()`` as seconds since the epoch,
once per statement in the ``c`` CTE), so TTRs, delays and pauses mean the
same on every node whatever their clocks say.  Statements return the
remaining time (deadline minus now) where a node must arm a timer.

``{s}`` is the quoted schema name; ``$n`` are the parameters (ints and
text in text format, the body in binary).
"""
from __future__ import annotations

import hashlib
from typing import Dict

from .schema import VERSION, quoted
from .sql_many import delete_many, put_many
from .sqlparts import NOW as _NOW
from .sqlparts import STATES as _STATES
from .sqlparts import among
from .sqlparts import first_ready as _first_ready
from .sqlparts import keeps as _keeps

#: Session settings of the statement connections (made before preparing).
#: Each statement that touches jobs finds them through an index, by design,
#: and PostgreSQL keeps a prepared statement's generic plan: one made while
#: the jobs table looked tiny (new, or analyzed while nearly empty) reads the
#: whole table at every execution once it has grown, until the next ANALYZE
#: (1.2 ms a delete batch on a churned table of 50 live jobs, against 0.013
#: through the primary key).  With sequential scans off the planner takes an
#: index wherever there is one; the inspection counts, which read every job,
#: have none to take (``tube_counts`` groups in an order no index gives) and
#: still scan.  Bitmap scans are off too: the held jobs are read whole through
#: their deadline index where a connection closes or a tube's jobs are
#: counted (schema.py), and that index keeps an entry for every reservation
#: since the last vacuum; a plain index scan marks the dead ones it meets so
#: that the next scan skips them (0.8 ms, then 0.04, after 3,000 reservations),
#: a bitmap scan reads them all every time.  No statement reads enough rows
#: for a bitmap to pay.  JIT is off: it never pays for these statements, and
#: a plan that keeps a disabled sequential scan would look costly enough to
#: start it.
#: Generic plans always: left to choose, PostgreSQL planned ``delete_many``
#: afresh at every execution (its custom plans, costed with the arrays'
#: contents, always looked cheaper than the generic one), 440 µs of planning
#: for 42 µs of execution, the largest part of the database's CPU per job
#: when workers wait for jobs one at a time (``wake-20``).
#: Hash and merge joins are off: every join in these statements pairs a few
#: rows (a batch's ids, a tube's best jobs) with the jobs they name, through
#: the primary key.  A generic plan made once the statistics say that one
#: tube holds thousands of jobs (a queue whose work goes through one busy
#: tube, analyzed) joined the jobs a delete batch takes with the whole jobs
#: table by hashing it: 17 ms a batch of 12 on 20,000 jobs, against 0.4 ms
#: through the key (bench/pg_plans.py ``--busy``).
SESSION: Dict[str, str] = {"enable_seqscan": "off", "enable_bitmapscan": "off",
                           "enable_hashjoin": "off", "enable_mergejoin": "off", "jit": "off",
                           "plan_cache_mode": "force_generic_plan"}


#: After a ``dead`` CTE (id, figures of the nodes that go): keep their totals in
#: ``retired``, give their reservations back, return the tubes that got ready jobs.
_GIVE_UP = """
        folded AS (  -- runs though nothing reads it, as every data-modifying CTE
            INSERT INTO {s}.retired AS r (key, value)
            SELECT f.key, sum(f.value::bigint) FROM dead, jsonb_each_text(dead.figures) f
            WHERE f.key LIKE 'cmd-%' OR f.key LIKE 'total-%' OR f.key = 'job-timeouts'
            GROUP BY f.key
            ON CONFLICT (key) DO UPDATE SET value = r.value + EXCLUDED.value
            RETURNING 1),
        back AS (
            UPDATE {s}.jobs j SET state = 0, owner_node = NULL, owner_conn = NULL
            WHERE j.state = 1 AND j.owner_node IN (SELECT id FROM dead)
            RETURNING j.tube)
        SELECT tube FROM back"""

#: Columns that make a JobRecord, in order (see engine._job).
JOB = "j.id, j.body, j.ttr, j.pri, j.tube, j.deadline_at - c.now"
#: A condition on a job ``x`` of the reserve statements' tube ``w.tube``: not paused.
_NOT_PAUSED = """
                  AND NOT EXISTS (SELECT 1 FROM {s}.tubes p, c
                                  WHERE p.name = w.tube AND p.unpause_at > c.now)"""
#: Above every (priority, id): the bound after a watch list's last tube.
_LAST = "9223372036854775807::bigint"


#: A job found by id is held: ``state + 0``, so that no plan reads every held
#: job through their index to find it.  PostgreSQL keeps the generic plan of
#: a prepared statement, and one made while that index was (nearly) empty
#: took it for the cheapest way to the row (SESSION).
_HELD = "j.state + 0 = 1"

def _of_tube(tube: str, gate: str) -> str:
    """The jobs of tube ``tube`` in the states ``gate`` lets through (a
    format of ``{st}``, e.g. ``$2::smallint = {st}``), as a subquery: one
    branch per state, each through that state's index; the gate of the
    others makes them end before they read anything."""
    return "(" + " UNION ALL ".join(
        f"SELECT * FROM {{s}}.jobs WHERE state = {st} AND tube = {tube} AND {gate.format(st=st)}"
        for st in _STATES) + ")"

STATEMENTS: Dict[str, str] = {
    # -------------------------------------------------------------- put
    "put": f"""
        WITH {_NOW}
        INSERT INTO {{s}}.jobs AS j (id, tube, state, pri, delay, ttr, created_at, deadline_at, body)
        SELECT nextval('{{s}}.job_ids'), $1::text, CASE WHEN $3::bigint > 0 THEN 2 ELSE 0 END,
               $2::bigint, $3::bigint, $4::bigint, c.now, c.now + $3::bigint, $5::bytea
        FROM c
        RETURNING j.id""",
    # Many puts, many deletes at once (batch.py): sql_many.py.
    "put_many": put_many(telling=False),
    "put_many_telling": put_many(telling=True),
    "put_one": put_many(telling=False, one=True),
    "put_one_telling": put_many(telling=True, one=True),
    "delete_many": delete_many(taking=False),
    "delete_many_taking": delete_many(taking=True),
    "delete_one": delete_many(taking=False, one=True),
    "delete_one_taking": delete_many(taking=True, one=True),
    # ... whose jobs' tubes the node knows its sessions keep: no lookup.
    "delete_many_kept": delete_many(taking=False, looking=False),
    "delete_many_kept_taking": delete_many(taking=True, looking=False),
    "delete_one_kept": delete_many(taking=False, one=True, looking=False),
    "delete_one_kept_taking": delete_many(taking=True, one=True, looking=False),
    # Jobs of node $1's take that it does not know of ($2: the ids it knows,
    # taken or handed out from its take) go back: a take whose answer was
    # lost with its connection, or whose give-back failed.  Returns their tubes.
    "return_lost_takes": """
        UPDATE {s}.jobs j SET state = 0, owner_node = NULL, owner_conn = NULL
        WHERE j.state = 1 AND j.owner_node = $1::bigint AND j.owner_conn = 0
          AND j.id <> ALL($2::bigint[])
        RETURNING j.tube""",
    # Taken jobs the node did not hand out go back as they were: $1 ids, $2
    # their reservations, $3 node.  Returns their tubes.
    "return_taken": f"""
        UPDATE {{s}}.jobs j SET state = 0, owner_node = NULL, owner_conn = NULL,
                                reserves = j.reserves - 1
        WHERE j.id = ANY($1::bigint[]) AND {_HELD}
          AND (j.id, j.reserves) IN (SELECT * FROM unnest($1::bigint[], $2::int[]))
          AND j.owner_node = $3::bigint AND j.owner_conn = 0
        RETURNING j.tube""",
    # An id for a put that is refused (beanstalkd takes one for those too).
    "take_id": "SELECT nextval('{s}.job_ids')",
    # ------------------------------------------------------------ reserve
    # $1 watched tubes, $2 node, $3 connection.  It locks only the job it
    # takes: a lock on another tube's best job, held to the commit, would
    # make a reserve on that tube pass over it (``SKIP LOCKED``) for a worse
    # one, or find none and take the tube for empty.  So the tubes are read
    # without locks and ordered by their best ready job (``o``), and tried
    # in that order, stopping at the first job taken: in each tube its best
    # job that no statement is taking, if no worse than the next tube's best
    # (so a job being taken is passed over for the best of the rest); if
    # that finds none (those next bests were being taken too), the first
    # tube with any job that no statement is taking.  (``o``, named twice,
    # is materialized and read back in the order it was made; the second
    # pass runs only if the first found nothing: tests/test_pg_locks.py.)
    "reserve": f"""
        WITH {_NOW},
        o AS (
            SELECT w.name, lead(b.pri, 1, {_LAST}) OVER n AS next_pri,
                   lead(b.id, 1, {_LAST}) OVER n AS next_id
            FROM unnest($1::text[]) AS w(name)
            {_first_ready("w.name", lock=False)} b
            WHERE NOT EXISTS (SELECT 1 FROM {{s}}.tubes p, c
                              WHERE p.name = w.name AND p.unpause_at > c.now)
            WINDOW n AS (ORDER BY b.pri, b.id)
            ORDER BY b.pri, b.id),
        cand AS (
            (SELECT r.id FROM o
             {_first_ready("o.name", " AND (x.pri, x.id) <= (o.next_pri, o.next_id)")} r
             LIMIT 1)
            UNION ALL
            (SELECT r.id FROM o {_first_ready("o.name")} r LIMIT 1)
            LIMIT 1)
        UPDATE {{s}}.jobs j
        SET state = 1, owner_node = $2::bigint, owner_conn = $3::bigint,
            deadline_at = c.now + j.ttr, reserves = j.reserves + 1
        FROM c WHERE {among("SELECT id FROM cand")}
        RETURNING {JOB}, j.reserves""",
    # Reserves of sessions that each watch one tube, at once (batch.py): $1
    # their tubes, $2 their connections, $3 node.  Each tube's best jobs go to
    # its sessions in the order they asked; one row per session served:
    # ordinal, then the job's columns.
    "reserve_many": f"""
        WITH {_NOW},
        req AS (SELECT r.tube, r.conn, r.n,
                       row_number() OVER (PARTITION BY r.tube ORDER BY r.n) AS rk
                FROM unnest($1::text[], $2::bigint[]) WITH ORDINALITY AS r(tube, conn, n)),
        want AS (SELECT req.tube, count(*) AS k FROM req GROUP BY req.tube),
        picked AS (
            SELECT w.tube, p.id,
                   row_number() OVER (PARTITION BY w.tube ORDER BY p.pri, p.id) AS rk
            FROM want w {_first_ready("w.tube", _NOT_PAUSED, "w.k")} p),
        pairs AS (SELECT picked.id, req.conn, req.n FROM picked
                  JOIN req ON req.tube = picked.tube AND req.rk = picked.rk)
        UPDATE {{s}}.jobs j
        SET state = 1, owner_node = $3::bigint, owner_conn = pairs.conn,
            deadline_at = c.now + j.ttr, reserves = j.reserves + 1
        FROM pairs, c WHERE j.id = pairs.id AND {among("SELECT id FROM pairs")}
        RETURNING pairs.n, {JOB}, j.reserves""",
    "reserve_job": f"""
        WITH {_NOW}
        UPDATE {{s}}.jobs j
        SET state = 1, owner_node = $2::bigint, owner_conn = $3::bigint,
            deadline_at = c.now + j.ttr, reserves = j.reserves + 1
        FROM c WHERE j.id = $1::bigint AND j.state <> 1
        RETURNING {JOB}, j.reserves""",
    # --------------------------------------------------- the holder's commands
    # $1 id, $2 node, $3 connection: the holder must match; release, bury and
    # touch also carry the reservation (``reserves`` when the holder got the
    # job) as their last parameter, checked as in ``delete_many`` (fencing).
    "delete": f"""
        WITH d AS (
            DELETE FROM {{s}}.jobs
            WHERE id = $1::bigint AND (state <> 1 OR (owner_node = $2::bigint
                                                     AND owner_conn = $3::bigint))
            RETURNING tube, state)
        SELECT d.tube, d.state, {_keeps("d.tube", " AND o.id <> $1::bigint")}
        FROM d""",
    "release": f"""
        WITH {_NOW}
        UPDATE {{s}}.jobs j
        SET state = CASE WHEN $5::bigint > 0 THEN 2 ELSE 0 END, pri = $4::bigint,
            delay = $5::bigint, deadline_at = c.now + $5::bigint,
            owner_node = NULL, owner_conn = NULL, releases = j.releases + 1
        FROM c
        WHERE j.id = $1::bigint AND {_HELD} AND j.owner_node = $2::bigint
          AND j.owner_conn IN ($3::bigint, 0) AND j.reserves = $6::bigint
        RETURNING j.tube, j.deadline_at""",
    "bury": f"""
        UPDATE {{s}}.jobs j
        SET state = 3, pri = $4::bigint, buried_seq = nextval('{{s}}.bury_seq'),
            owner_node = NULL, owner_conn = NULL, buries = j.buries + 1
        WHERE j.id = $1::bigint AND {_HELD} AND j.owner_node = $2::bigint
          AND j.owner_conn IN ($3::bigint, 0) AND j.reserves = $5::bigint
        RETURNING j.tube""",
    "touch": f"""
        WITH {_NOW}
        UPDATE {{s}}.jobs j SET deadline_at = c.now + j.ttr
        FROM c
        WHERE j.id = $1::bigint AND {_HELD} AND j.owner_node = $2::bigint
          AND j.owner_conn IN ($3::bigint, 0) AND j.reserves = $4::bigint
        RETURNING j.ttr""",
    # A reservation that nobody will hear of (its wait ended) goes back as it was.
    "unreserve": f"""
        UPDATE {{s}}.jobs j SET state = 0, owner_node = NULL, owner_conn = NULL,
                              reserves = j.reserves - 1
        WHERE j.id = $1::bigint AND {_HELD} AND j.owner_node = $2::bigint
          AND j.owner_conn = $3::bigint
        RETURNING j.tube""",
    # A closed connection's reservations go back to ready: those under its
    # (node $1, connection $2), and the jobs it was handed from the node's
    # take ($3 ids, $4 their reservations).
    "give_back": """
        UPDATE {s}.jobs j SET state = 0, owner_node = NULL, owner_conn = NULL
        WHERE j.state = 1 AND j.owner_node = $1::bigint AND (j.owner_conn = $2::bigint
              OR (j.owner_conn = 0 AND (j.id, j.reserves) IN (
                  SELECT u.id, u.tok::int FROM unnest($3::bigint[], $4::bigint[]) u(id, tok))))
        RETURNING j.tube""",
    # ------------------------------------------------------------- kicks
    # $1 tube, $2 bound: buried jobs in burial order, or delayed ones by deadline.
    "kick": f"""
        WITH b AS (
            SELECT id FROM {{s}}.jobs WHERE tube = $1::text AND state = 3
            ORDER BY buried_seq LIMIT $2::bigint FOR UPDATE SKIP LOCKED),
        d AS (
            SELECT id FROM {{s}}.jobs WHERE tube = $1::text AND state = 2
              AND NOT EXISTS (SELECT 1 FROM {{s}}.jobs WHERE tube = $1::text AND state = 3)
            ORDER BY deadline_at, id LIMIT $2::bigint FOR UPDATE SKIP LOCKED)
        UPDATE {{s}}.jobs j SET state = 0, kicks = j.kicks + 1
        WHERE {among("SELECT id FROM b UNION ALL SELECT id FROM d")}
        RETURNING j.id""",
    "kick_job": """
        UPDATE {s}.jobs SET state = 0, kicks = kicks + 1
        WHERE id = $1::bigint AND state IN (2, 3)
        RETURNING tube""",
    # ------------------------------------------------------------- peeks
    "peek": "SELECT id, body FROM {s}.jobs WHERE id = $1::bigint",
    "peek_ready": """SELECT id, body FROM {s}.jobs WHERE tube = $1::text AND state = 0
                     ORDER BY pri, id LIMIT 1""",
    "peek_delayed": """SELECT id, body FROM {s}.jobs WHERE tube = $1::text AND state = 2
                       ORDER BY deadline_at, id LIMIT 1""",
    "peek_buried": """SELECT id, body FROM {s}.jobs WHERE tube = $1::text AND state = 3
                      ORDER BY buried_seq LIMIT 1""",
    # ------------------------------------------------------------- stats
    "stats_job": f"""
        WITH {_NOW}
        SELECT j.id, j.tube, j.state, j.pri, c.now - j.created_at, j.delay, j.ttr,
               j.deadline_at - c.now, j.reserves, j.timeouts, j.releases, j.buries, j.kicks
        FROM {{s}}.jobs j, c WHERE j.id = $1::bigint""",
    "job": "SELECT id, body, ttr, pri, tube, 0::float8 FROM {s}.jobs j WHERE id = $1::bigint",
    # Counts per state of one tube ($1), each through its state's index,
    # then its pause and the time left.
    "counts_tube": f"""
        WITH {_NOW}
        SELECT r.urgent, r.ready,
               (SELECT count(*) FROM {{s}}.jobs WHERE state = 1 AND tube = $1::text),
               (SELECT count(*) FROM {{s}}.jobs WHERE state = 2 AND tube = $1::text),
               (SELECT count(*) FROM {{s}}.jobs WHERE state = 3 AND tube = $1::text),
               (SELECT p.pause FROM {{s}}.tubes p WHERE p.name = $1::text AND p.unpause_at > c.now),
               (SELECT p.unpause_at - c.now FROM {{s}}.tubes p WHERE p.name = $1::text)
        FROM c, (SELECT count(*) FILTER (WHERE pri < 1024) AS urgent, count(*) AS ready
                 FROM {{s}}.jobs WHERE state = 0 AND tube = $1::text) r""",
    "counts_all": """
        SELECT count(*) FILTER (WHERE state = 0 AND pri < 1024),
               count(*) FILTER (WHERE state = 0), count(*) FILTER (WHERE state = 1),
               count(*) FILTER (WHERE state = 2), count(*) FILTER (WHERE state = 3)
        FROM {s}.jobs""",
    # Counts per tube and state (inspection: metrics, console).
    # (Grouped by state first: no index gives that order, so the planner
    # reads the table once rather than a whole index; SESSION.)
    "tube_counts": """
        SELECT tube, state, count(*) FILTER (WHERE pri < 1024), count(*)
        FROM {s}.jobs GROUP BY state, tube""",
    # The tubes that hold jobs: a skip scan of each index that leads with
    # the tube (ready, delayed, buried), and the tubes of the held jobs.
    "tubes_with_jobs": "WITH RECURSIVE " + ",".join(f"""
        t{st}(name) AS (
            (SELECT tube FROM {{s}}.jobs WHERE state = {st} ORDER BY tube LIMIT 1)
            UNION ALL
            SELECT (SELECT tube FROM {{s}}.jobs WHERE state = {st} AND tube > t.name
                    ORDER BY tube LIMIT 1)
            FROM t{st} t WHERE t.name IS NOT NULL)""" for st in (0, 2, 3)) + """
        SELECT name FROM t0 WHERE name IS NOT NULL
        UNION SELECT name FROM t2 WHERE name IS NOT NULL
        UNION SELECT name FROM t3 WHERE name IS NOT NULL
        UNION SELECT tube FROM {s}.jobs WHERE state = 1""",
    "tube_has_jobs": f"SELECT {_keeps('$1::text')}",
    # Which of $1 (tubes this node's reserves wait on) hold a ready job and
    # are not paused: a wake-up for them was lost (the heartbeat's check).
    "ready_among": f"""
        WITH {_NOW}
        SELECT w.name FROM unnest($1::text[]) AS w(name)
        WHERE EXISTS (SELECT 1 FROM {{s}}.jobs x WHERE x.state = 0 AND x.tube = w.name
                      OFFSET 0)  -- a probe per tube (_keeps)
          AND NOT EXISTS (SELECT 1 FROM {{s}}.tubes p, c
                          WHERE p.name = w.name AND p.unpause_at > c.now)""",
    # Other live nodes' figures and tube references; then the retired counters.
    "others": "SELECT id, figures::text, tubes::text FROM {s}.nodes WHERE id <> $1::bigint",
    "retired": "SELECT key, value FROM {s}.retired",
    # ------------------------------------------------------------- pause
    # $1 tube, $2 seconds: the tube's pause ends $2 s from now (0: now).
    "pause": f"""
        WITH {_NOW}
        INSERT INTO {{s}}.tubes AS t (name, pause, unpause_at)
        SELECT $1::text, $2::bigint, c.now + $2::bigint FROM c
        ON CONFLICT (name) DO UPDATE SET pause = EXCLUDED.pause, unpause_at = EXCLUDED.unpause_at
        RETURNING t.unpause_at - (SELECT now FROM c)""",
    "paused": f"""
        WITH {_NOW}
        SELECT p.name, p.unpause_at - c.now FROM {{s}}.tubes p, c WHERE p.unpause_at > c.now""",
    # A tube nobody uses any more loses its pause (as beanstalkd forgets the tube).
    "forget_tube": f"""
        DELETE FROM {{s}}.tubes t WHERE t.name = $1::text
          AND NOT {_keeps("$1::text")}
          AND NOT EXISTS (SELECT 1 FROM {{s}}.nodes n WHERE n.id <> $2::bigint
                          AND n.tubes ? $1::text)""",
    # ------------------------------------------------------------- deadlines
    # Delayed jobs whose time came: ready.  Returns their tubes.
    "promote": f"""
        WITH {_NOW},
        x AS (SELECT id FROM {{s}}.jobs WHERE state = 2 AND deadline_at <= (SELECT now FROM c)
              ORDER BY deadline_at LIMIT 10000 FOR UPDATE SKIP LOCKED)
        UPDATE {{s}}.jobs j SET state = 0 WHERE {among("SELECT id FROM x")}
        RETURNING j.tube""",
    # Reservations whose TTR ran out: ready, counted once (whoever runs it
    # first).  (The time as a scalar subquery, here and in promote, so that it
    # bounds the index scan: joined with ``c``, a generic plan read every held
    # job and compared each.)
    "expire": f"""
        WITH {_NOW},
        x AS (SELECT id, owner_node, owner_conn FROM {{s}}.jobs
              WHERE state = 1 AND deadline_at <= (SELECT now FROM c)
              ORDER BY deadline_at LIMIT 10000 FOR UPDATE SKIP LOCKED)
        UPDATE {{s}}.jobs j SET state = 0, owner_node = NULL, owner_conn = NULL,
                                timeouts = j.timeouts + 1
        FROM x WHERE j.id = x.id AND {among("SELECT id FROM x")}
        RETURNING j.id, j.tube, x.owner_node, x.owner_conn""",
    # Which of $1 (ids) $2 (node) still holds, with the time left.
    "still_held": f"""
        WITH {_NOW}
        SELECT j.id, j.deadline_at - c.now FROM {{s}}.jobs j, c
        WHERE j.id = ANY($1::bigint[]) AND {_HELD} AND j.owner_node = $2::bigint""",
    # When the next delayed job is due (seconds from now), or NULL: the first
    # entry of the delayed jobs' index (the order only it gives).
    "next_delayed": f"""
        WITH {_NOW}
        SELECT (SELECT deadline_at FROM {{s}}.jobs WHERE state = 2
                ORDER BY deadline_at, id LIMIT 1) - c.now FROM c""",
    # ------------------------------------------------------------- nodes
    "register": f"""
        WITH {_NOW}
        INSERT INTO {{s}}.nodes (id, started_at, heartbeat_at, hostname, pid, version)
        SELECT nextval('{{s}}.node_ids'), c.now, c.now, $1::text, $2::int, {VERSION} FROM c
        RETURNING id, started_at""",
    # $1 node, $2 figures, $3 tube references: the row, or nothing if this
    # node was given up on (its reservations are gone).
    "heartbeat": f"""
        WITH {_NOW}
        UPDATE {{s}}.nodes n SET heartbeat_at = c.now, figures = $2::jsonb, tubes = $3::jsonb
        FROM c WHERE n.id = $1::bigint
        RETURNING c.now""",
    # Nodes whose last heartbeat is $1 seconds older than that of node $2 (the
    # node asking, which has just beaten): their reservations go back to
    # ready, their counters to ``retired``.  Heartbeats are compared with
    # each other, not with the clock, so a database that stalls every commit
    # for a while (a failover waiting for its synchronous standby) makes no
    # node look dead.  The database sessions of each node given up on end
    # (found by their application_name, :func:`session_name`; $3 is the
    # schema's tag in it): a stopped node's LISTEN connection no longer holds
    # the notification queue, which every put writes to (docs/ha.md).  Only
    # sessions the user may end are asked to (pg_terminate_backend's rule: a
    # superuser any; another user those of roles whose rights it has, or of
    # any role with pg_signal_backend's, but no superuser's), or the
    # statement would fail.
    # Returns the tubes that got ready jobs, and a NULL per node given up on.
    "reclaim": """
        WITH me AS (SELECT heartbeat_at FROM {s}.nodes WHERE id = $2::bigint),
        dead AS (DELETE FROM {s}.nodes n USING me
                 WHERE n.heartbeat_at < me.heartbeat_at - $1::float8 AND n.id <> $2::bigint
                 RETURNING n.id, n.figures),
""" + _GIVE_UP + """
        UNION ALL SELECT NULL FROM dead, LATERAL (
            SELECT count(pg_terminate_backend(a.pid)) AS n FROM pg_stat_activity a
            WHERE a.datname = current_database()
              AND a.application_name = 'stalk-node-' || dead.id || '@' || $3::text
              AND ((SELECT rolsuper FROM pg_roles WHERE rolname = current_user)
                   OR (NOT (SELECT rolsuper FROM pg_roles WHERE oid = a.usesysid)
                       AND (pg_has_role(a.usesysid, 'USAGE')
                            OR pg_has_role('pg_signal_backend', 'USAGE'))))) ended
        WHERE ended.n >= 0""",
    # A node leaving: its row goes, its counters to ``retired``, its
    # reservations back to ready.
    "leave": """
        WITH dead AS (DELETE FROM {s}.nodes n WHERE n.id = $1::bigint RETURNING n.id, n.figures),
""" + _GIVE_UP + """""",
    # Reservations whose node is not registered at all (a reserve that
    # committed after its node was given up on).
    "orphans": """
        UPDATE {s}.jobs j SET state = 0, owner_node = NULL, owner_conn = NULL
        WHERE j.state = 1 AND NOT EXISTS (SELECT 1 FROM {s}.nodes n WHERE n.id = j.owner_node)
        RETURNING j.tube""",
    # ------------------------------------------------------------- wake-ups
    "notify": "SELECT pg_notify($1::text, x) FROM unnest($2::text[]) AS x",
    # ------------------------------------------------------------- extensions
    "list_jobs": f"""
        SELECT id FROM {_of_tube("$1::text", "$2::smallint = {st}")} j
        ORDER BY CASE WHEN $2::smallint = 0 THEN pri END,
                 CASE WHEN $2::smallint = 3 THEN buried_seq END,
                 CASE WHEN $2::smallint IN (1, 2) THEN deadline_at END, id
        LIMIT $3::bigint""",
    "flush": f"""
        DELETE FROM {{s}}.jobs j
        WHERE {among(f'SELECT id FROM {_of_tube("$1::text", "{st} = ANY($2::smallint[])")} x')}
        RETURNING j.id, j.owner_node, j.owner_conn""",
}


#: ORDER BY of each console sort (``Engine.jobs_page``), ascending.
SORTS: Dict[str, str] = {
    "queue": ("CASE WHEN j.state = 0 THEN j.pri END {d}, CASE WHEN j.state = 3 THEN "
              "j.buried_seq END {d}, CASE WHEN j.state IN (1, 2) THEN j.deadline_at END {d}, "
              "j.id {d}"),
    "id": "j.id {d}",
    "pri": "j.pri {d}, j.id {d}",
    "age": "j.created_at {r}, j.id {r}",
    "time-left": "j.deadline_at {d}, j.id {d}",
}

for _sort, _order in SORTS.items():
    for _name, _d, _r in (("asc", "ASC", "DESC"), ("desc", "DESC", "ASC")):
        # $1 tube, $2 state, $3 offset, $4 limit.
        STATEMENTS[f"page_{_sort}_{_name}"] = f"""
            WITH {_NOW}
            SELECT {JOB}, j.state, j.delay, c.now - j.created_at
            FROM {_of_tube("$1::text", "$2::smallint = {st}")} j, c
            ORDER BY {_order.format(d=_d, r=_r)} OFFSET $3::bigint LIMIT $4::bigint"""
STATEMENTS["page_total"] = f"""
    SELECT count(*) FROM {_of_tube("$1::text", "$2::smallint = {st}")} j"""
# $1 tube, $2 after id, $3 span, $4 needle: a bounded step of a body search.
STATEMENTS["search"] = f"""
    WITH {_NOW}
    SELECT {JOB}, j.state, j.delay, c.now - j.created_at
    FROM {{s}}.jobs j, c
    WHERE j.tube = $1::text AND j.id > $2::bigint AND j.id <= $2::bigint + $3::bigint
      AND position($4::bytea IN j.body) > 0
    ORDER BY j.id"""
STATEMENTS["last_id"] = "SELECT last_value FROM {s}.job_ids"


def statements(schema: str) -> Dict[str, str]:
    """The statements for ``schema``, ready to prepare."""
    s = quoted(schema)
    return {name: sql.replace("{s}", s) for name, sql in STATEMENTS.items()}


def session_tag(schema: str) -> str:
    """How :func:`session_name` names ``schema``: itself when PostgreSQL keeps
    it as it is in an ``application_name`` (printable ASCII, short enough for
    its 63 bytes), else a digest of it."""
    if len(schema) <= 32 and schema.isascii() and schema.isprintable():
        return schema
    return hashlib.sha256(schema.encode()).hexdigest()[:16]


def session_name(schema: str, node: int) -> str:
    """The ``application_name`` of node ``node``'s database sessions
    (``stalk-node-3@twisted_stalk``): how the other nodes find them in
    ``pg_stat_activity`` to end them when they give the node up."""
    return f"stalk-node-{node}@{session_tag(schema)}"


def channel(schema: str) -> str:
    """The LISTEN/NOTIFY channel of ``schema``'s queue."""
    return schema + "_events"


__all__ = ["JOB", "SESSION", "STATEMENTS", "channel", "session_name", "session_tag", "statements"]
