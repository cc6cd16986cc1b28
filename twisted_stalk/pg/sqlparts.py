# -*- test-case-name: tests.test_pg_units -*-
"""Pieces of SQL that several of the engine's statements share (sql.py, sql_many.py).

``{s}`` stands for the quoted schema name, as in the statements.
"""
from __future__ import annotations

#: The statement's one reading of the database's clock, as seconds since the
#: epoch (a ``WITH`` item named ``c``, column ``now``).
NOW = "c AS MATERIALIZED (SELECT extract(epoch FROM clock_timestamp())::float8 AS now)"

#: The states in the order :func:`keeps` asks them: the common ones first,
#: held jobs (read through the deadline index) last.
STATES = (0, 3, 2, 1)


def keeps(tube: str, also: str = "") -> str:
    """Whether tube ``tube`` (an SQL expression) keeps a job (``also``: a
    further condition on it, ``o``): one EXISTS per state, each through that
    state's index (schema.py: there is no index of jobs by tube alone),
    asked in turn until one finds a job.  ``OFFSET 0`` keeps each a probe of
    the tube: without it the planner may instead read every job of the
    state once into a hash, a plan that a generic plan made while the table
    was small would keep (sql.SESSION)."""
    return "(" + " OR ".join(
        f"EXISTS (SELECT 1 FROM {{s}}.jobs o WHERE o.state = {st} AND o.tube = {tube}{also}"
        f" OFFSET 0)" for st in STATES) + ")"


def among(found: str) -> str:
    """A condition on ``j``: its id is one of those in ``found`` (an SQL query
    of ids, e.g. a CTE's ``SELECT id FROM x``), as an index condition on the
    key.  An ``UPDATE`` joined with the rows it found may otherwise read the
    whole table on the outer side of the join and find them again for every
    row: a generic plan made from the statistics of a drained table (no live
    row) did that, and each drain statement then read every job (the drain's
    stalls; ``bench/pg_plans.py --drained``).  ``ARRAY(...)`` is computed once,
    before the scan."""
    return f"j.id = ANY(ARRAY({found}))"


def first_ready(tube: str, more: str = "", limit: str = "1", lock: bool = True) -> str:
    """A tube's best ready jobs (priority, then id) as a ``CROSS JOIN
    LATERAL`` of their ``id`` and ``pri``: ``tube`` an SQL expression,
    ``more`` further conditions (`` AND ...``), ``limit`` how many; with
    ``lock`` those that no other statement is taking, locked (``FOR UPDATE
    SKIP LOCKED``) until the statement commits."""
    return f"""CROSS JOIN LATERAL (
                SELECT x.id, x.pri FROM {{s}}.jobs x
                WHERE x.state = 0 AND x.tube = {tube}{more}
                ORDER BY x.pri, x.id LIMIT {limit}{" FOR UPDATE SKIP LOCKED" if lock else ""})"""


__all__ = ["NOW", "STATES", "among", "first_ready", "keeps"]
