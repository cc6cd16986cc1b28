# -*- test-case-name: tests.test_pg_units -*-
"""The statements that run many commands at once (batch.py), each in two forms.

A prepared statement's plan is set up and torn down whole at every
execution, its unused parts too, so each comes in the form a batch needs:
``put_many`` (a lone node's puts: no notices to other nodes) and
``put_many_telling``; ``delete_many`` (no job taken for the workers) and
``delete_many_taking``.  A put and a delete in the lean forms took about
half the database's CPU of the full forms (310-320 µs a pair against
590-600; docs/performance.md).  A batch of one runs the ``_one`` forms
(``put_one``, ``delete_one``, ...), its values as scalars instead of
one-element arrays.  sql.py registers them all.
"""
from __future__ import annotations

import re

from .notices import JobsReady
from .sqlparts import NOW, among, first_ready, keeps


#: The columns a put writes (``put_many`` and ``put_one``).
_COLUMNS = ("(id, tube, state, pri, delay, ttr, created_at, deadline_at, owner_node, owner_conn,"
            " reserves, body)")

def put_many(telling: bool, one: bool = False) -> str:
    """Many puts at once (batch.py): $1 tubes, $2 priorities, $3 delays, $4
    TTRs, $5 bodies, $6 the connection of this node ($7) waiting to be
    handed each job (0: none; -1: the node's take, connection 0, for the
    put's own session's next reserve: taking.py).  A job is handed over
    (inserted reserved by ($7, conn)) only if no ready job of its tube is as
    good (pri <= its own: those have smaller ids) and the tube is not
    paused, so priorities stay global; the node picks the best jobs of the
    batch for its waiting reserves.  ``telling``: the jobs that go in ready
    are announced to the other nodes on channel $8 by the statement itself,
    one ``JobsReady`` notice per tube (notices.py), sent when it commits: no
    commit of its own.  A node that knows of no other node runs the
    statement without that part (``put_many``, seven parameters; see the
    module docstring).  ``one``: a batch of one put, its values as scalars
    ($1 text, $2-$4 bigint, $5 bytea, $6 bigint) instead of arrays
    (``put_one``, ``put_one_telling``): no arrays to read, and a smaller
    plan.

    The batch is one INSERT over the arrays, each put's hand-over decided
    in the row it reads, with no materialized step, join or sort around it
    (in the closed loop this plan is what the database sets up and tears
    down at every batch; docs/performance.md).  One (id, 0, handed over) per
    put: each id is drawn (``nextval``) as the arrays' rows are read, in
    order, so the ids ascend with the puts, and the engine pairs the rows,
    sorted by id, with its puts."""
    if one:
        return _put_one(telling)
    insert = """
            INSERT INTO {s}.jobs AS j """ + _COLUMNS + """
            SELECT nextval('{s}.job_ids'), x.tube,
                   CASE WHEN x.handed THEN 1 WHEN x.delay > 0 THEN 2 ELSE 0 END,
                   x.pri, x.delay, x.ttr, c.now,
                   c.now + CASE WHEN x.handed THEN x.ttr ELSE x.delay END,
                   CASE WHEN x.handed THEN $7::bigint END,
                   CASE WHEN x.handed THEN greatest(x.conn, 0) END,
                   CASE WHEN x.handed THEN 1 ELSE 0 END, x.body
            FROM (SELECT u.*,
                         u.conn <> 0
                         AND NOT EXISTS (SELECT 1 FROM {s}.jobs o
                                         WHERE o.state = 0 AND o.tube = u.tube
                                           AND o.pri <= u.pri
                                         OFFSET 0)  -- a probe per put (sqlparts.keeps)
                         AND NOT EXISTS (SELECT 1 FROM {s}.tubes p
                                         WHERE p.name = u.tube
                                           AND p.unpause_at > (SELECT now FROM c)) AS handed
                  FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::bigint[], $5::bytea[],
                              $6::bigint[]) AS u(tube, pri, delay, ttr, body, conn)
                  OFFSET 0) x CROSS JOIN c"""
    if not telling:
        return f"""
        WITH {NOW}{insert}
            RETURNING j.id, 0::bigint, j.state = 1"""
    return f"""
        WITH {NOW},
        ins AS ({insert}
            RETURNING j.id, j.tube, j.state),
        told AS (
            SELECT pg_notify($8::text, format('{JobsReady.FORMAT}', $7::bigint, ins.tube, count(*)))
            FROM ins WHERE ins.state = 0
            GROUP BY ins.tube)
        SELECT ins.id, 0::bigint, ins.state = 1 FROM ins
        WHERE (SELECT count(*) FROM told) >= 0  -- runs told"""


def _put_one(telling: bool) -> str:
    """``put_many``'s batch of one put, written as one INSERT: its values as
    scalars, whether it is handed over read once (``h``), no join, no sort.
    A prepared plan is set up at every execution, each of its nodes and
    expressions: this form cost the database 198 µs of CPU a put where the
    batch's form of one row cost 236 (docs/performance.md).  Same parameters
    and rows as ``put_many``'s."""
    told = f""",
        told AS (
            SELECT pg_notify($8::text, format('{JobsReady.FORMAT}', $7::bigint, $1::text, 1))
            FROM h WHERE $3::bigint = 0 AND NOT h.handed)"""
    return f"""
        WITH {NOW},
        h AS MATERIALIZED (
            SELECT nextval('{{s}}.job_ids') AS id, c.now,
                   $6::bigint <> 0
                   AND NOT EXISTS (SELECT 1 FROM {{s}}.jobs o
                                   WHERE o.state = 0 AND o.tube = $1::text AND o.pri <= $2::bigint
                                   OFFSET 0)
                   AND NOT EXISTS (SELECT 1 FROM {{s}}.tubes p
                                   WHERE p.name = $1::text AND p.unpause_at > c.now) AS handed
            FROM c){told if telling else ""}
        INSERT INTO {{s}}.jobs AS j {_COLUMNS}
        SELECT h.id, $1::text,
               CASE WHEN h.handed THEN 1 WHEN $3::bigint > 0 THEN 2 ELSE 0 END,
               $2::bigint, $3::bigint, $4::bigint, h.now,
               h.now + CASE WHEN h.handed THEN $4::bigint ELSE $3::bigint END,
               CASE WHEN h.handed THEN $7::bigint END,
               CASE WHEN h.handed THEN greatest($6::bigint, 0) END,
               CASE WHEN h.handed THEN 1 ELSE 0 END, $5::bytea
        FROM h{"  WHERE (SELECT count(*) FROM told) >= 0  -- runs told" if telling else ""}
        RETURNING j.id, 1::bigint, j.state = 1"""


#: The jobs ``delete_many`` deletes: each by its id, and a reserved one only
#: under the reservation its deleter holds (fencing); or (``one``) the one.
_MANY_DELETE = """j.id = ANY($1::bigint[])
              AND (j.state <> 1 OR (j.owner_node = $3::bigint
                   AND (j.id, j.reserves) IN (SELECT * FROM unnest($1::bigint[], $5::int[]))
                   AND (j.owner_conn = 0 OR (j.id, j.owner_conn) IN (
                           SELECT * FROM unnest($1::bigint[], $2::bigint[])))))"""
_ONE_DELETE = """j.id = $1::bigint
              AND (j.state <> 1 OR (j.owner_node = $3::bigint AND j.reserves = $5::int
                   AND (j.owner_conn = 0 OR j.owner_conn = $2::bigint)))"""


def delete_many(taking: bool, one: bool = False, looking: bool = True) -> str:
    """Many deletes at once: $1 ids, $2 their sessions' connections, $3
    node, $4 tubes the batch's sessions use or watch, $5 the reservation
    each deleting session holds of its job (its ``reserves`` when it got it;
    0: none).  ``taking``: $6/$7 tubes and how many of their best ready jobs
    to take for the node's workers about to reserve (taking.py: a worker's
    delete carries its next job); a batch that takes none runs the statement
    without that part (``delete_many``, five parameters).  ``one``: a batch
    of one delete, $1, $2 and $5 scalars (``delete_one``, ``delete_one_taking``).

    One row per deleted job: id, tube, state, owner connection (the node
    tells which of the batch's deletes of that id it answers: a join with
    the ids would answer whichever it met first), whether its tube keeps
    jobs, its reservation.  The jobs are found by ``id = ANY($1)`` (the
    primary key, also in a plan made while the table was new; see sql.SESSION);
    a reserved job is deleted only by the reservation it is under (fencing:
    the same node and connection, or the node's take, connection 0, and the
    same ``reserves``), so a holder whose reservation ended cannot delete it
    when it was taken again.  "Keeps jobs" is looked up once per tube of the
    batch (``k``), not once per job, and not at all (NULL) for a tube in $4:
    the answer only serves the node's tube list, which keeps a used or
    watched tube anyway.  Then one row per job taken (state -1): id, tube,
    the job's columns (body, TTR, priority, time left) and its reservation;
    a taken job is reserved by (node, 0) until the node hands it out.

    ``looking=False`` (``delete_many_kept``, ``delete_one_kept``, their
    ``_taking`` forms): the node knows every job's tube to be one the batch's
    sessions use or watch, so "keeps jobs" is NULL without the lookup's part
    of the plan, and there is no $4 (the later parameters move down by one).
    That part's set-up alone cost the database about 90 µs a statement
    (docs/performance.md)."""
    not_deleted = "x.id <> $1::bigint" if one else "x.id <> ALL($1::bigint[])"
    taken_where = f""" AND {not_deleted}
                  AND NOT EXISTS (SELECT 1 FROM {{s}}.tubes p
                                  WHERE p.name = w.tube
                                    AND p.unpause_at > (SELECT now FROM c))"""
    taking_ids = f"""SELECT p.id FROM unnest($6::text[], $7::bigint[]) AS w(tube, n)
                     {first_ready("w.tube", taken_where, "w.n")} p"""
    took = f""",
        took AS (
            UPDATE {{s}}.jobs j
            SET state = 1, owner_node = $3::bigint, owner_conn = 0,
                deadline_at = c.now + j.ttr, reserves = j.reserves + 1
            FROM c
            WHERE {among(taking_ids)}
            RETURNING j.id, j.tube, j.body, j.ttr, j.pri, j.deadline_at - c.now AS left,
                      j.reserves)"""
    taken = """
        UNION ALL
        SELECT took.id, took.tube, -1::smallint, 0::bigint, NULL::boolean, took.body,
               took.ttr, took.pri, took.left, took.reserves FROM took"""
    deleting = f"""DELETE FROM {{s}}.jobs j
            WHERE {_ONE_DELETE if one else _MANY_DELETE}"""
    deleted = "d AS (\n            " + deleting + """
            RETURNING j.id, j.tube, j.state, j.owner_conn, j.reserves)"""
    if looking:
        return f"""
        WITH {NOW},
        {deleted},
        k AS MATERIALIZED (
            SELECT t.tube, CASE WHEN t.tube <> ALL($4::text[])
                   THEN {keeps("t.tube", " AND o.id NOT IN (SELECT id FROM d)")} END AS keeps
            FROM (SELECT DISTINCT tube FROM d) t){took if taking else ""}
        SELECT d.id, d.tube, d.state, d.owner_conn, k.keeps, NULL::bytea, NULL::bigint,
               NULL::bigint, NULL::float8, d.reserves
        FROM d JOIN k ON k.tube = d.tube{taken if taking else ""}"""
    if taking:
        sql = f"""
        WITH {NOW},
        {deleted}{took}
        SELECT d.id, d.tube, d.state, d.owner_conn, NULL::boolean, NULL::bytea, NULL::bigint,
               NULL::bigint, NULL::float8, d.reserves
        FROM d{taken}"""
    else:  # the DELETE alone
        sql = f"""
        {deleting}
        RETURNING j.id, j.tube, j.state, j.owner_conn, NULL::boolean, NULL::bytea,
                  NULL::bigint, NULL::bigint, NULL::float8, j.reserves"""
    return re.sub(r"\$([5-7])::", lambda m: "$%d::" % (int(m.group(1)) - 1), sql)


__all__ = ["delete_many", "put_many"]
