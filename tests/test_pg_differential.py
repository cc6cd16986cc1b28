"""The differential wire scripts against a node on the PostgreSQL engine.

Each script of ``diffscripts`` runs on a fresh ``stalkd --engine`` node with
an empty schema of the session's throwaway cluster (tests/pgcluster.py), and
must give the same replies as the in-memory engine (the bytes pinned from
beanstalkd 1.12), except where docs/compat.md lists a difference.

The normal suite runs :data:`SUBSET`: every script whose replies depend on
the engine (commands on jobs and tubes, counters, waits, TTRs, delays,
pauses, disconnects).  The scripts left out test the framing and the
argument parser, which are the same whatever the engine; all of them run
with ``python -m pytest tests/test_pg_differential.py -m slow -n 0``.
"""
from __future__ import annotations

import pytest

from diffscripts import OURS_ONLY, SCRIPTS
from servers import start_server
from test_differential import run_checked

ALL = SCRIPTS + list(OURS_ONLY)

#: The scripts that exercise the engine.
SUBSET = {
    "lifecycle", "priority-and-fifo", "multi-tube-watch", "tube-lifecycle", "delayed",
    "buried", "release-touch-delete-ownership", "reserve-job", "peek-scoping", "bodies",
    "numbers-job-ids", "pause-zero", "kick-job-counters", "counters-on-errors",
    "quit-returns-reserved-jobs", "disconnect-returns-reserved-jobs",
    "closing-client-drops-unused-tubes-in-reference-order",
    "zero-timeout-reserve-in-the-last-ttr-second-over-a-paused-tube", "waiting-reserve",
    "timed-ttr", "timed-deadline-soon-while-waiting", "timed-delays", "timed-pause",
    "ours-waiters-fifo",
}


@pytest.fixture
def pg_server(pg_engine):
    server = start_server("ours", "--engine", pg_engine)
    yield server
    server.stop()


@pytest.mark.parametrize("script", [s for s in ALL if s.name in SUBSET], ids=lambda s: s.name)
def test_script_on_postgresql(pg_server, script) -> None:
    run_checked(pg_server, script)


@pytest.mark.slow
@pytest.mark.parametrize("script", [s for s in ALL if s.name not in SUBSET],
                         ids=lambda s: s.name)
def test_framing_script_on_postgresql(slow_only, pg_server, script) -> None:
    run_checked(pg_server, script)


def test_the_subset_names_scripts_that_exist() -> None:
    assert SUBSET <= {s.name for s in ALL}
