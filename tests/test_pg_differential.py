"""The differential scripts on a node on the PostgreSQL engine.

Each script of ``diffscripts`` runs on a fresh ``stalkd --engine`` node with
an empty schema of the session's throwaway cluster (tests/pgcluster.py), and
must give the same replies as the in-memory engine (the bytes pinned from
beanstalkd 1.12), except where docs/compat.md lists a difference.
"""
from __future__ import annotations

import pytest

from diffscripts import OURS_ONLY, SCRIPTS
from servers import start_server
from test_differential import run_checked


@pytest.fixture
def pg_server(pg_engine):
    server = start_server("ours", "--engine", pg_engine)
    yield server
    server.stop()


@pytest.mark.parametrize("script", SCRIPTS + list(OURS_ONLY), ids=lambda s: s.name)
def test_script_on_postgresql(pg_server, script) -> None:
    run_checked(pg_server, script)
