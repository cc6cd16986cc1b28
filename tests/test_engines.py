"""Choosing the engine by URL (twisted_stalk/engines.py): the one place that
builds one, for twistd, stalkd and the tests' in-memory servers."""
from __future__ import annotations

import configparser
import os

import pytest
from twisted.internet.task import Clock

from twisted_stalk.core.engine import EngineError
from twisted_stalk.core.memory import MemoryEngine
from twisted_stalk.engines import BUILT_IN, GROUP, engine_url, open_engine, scheme_of

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_setup_cfg_registers_the_built_in_engines():
    """The entry points setup.cfg declares are the openers BUILT_IN names."""
    cfg = configparser.ConfigParser()
    cfg.read(os.path.join(ROOT, "setup.cfg"))
    declared = dict(line.replace(" ", "").split("=", 1)
                    for line in cfg["options.entry_points"][GROUP].strip().splitlines())
    assert declared == BUILT_IN


def test_the_scheme_picks_the_engine():
    assert scheme_of("memory:") == "memory"
    assert scheme_of("PostgreSQL://host/db") == "postgresql"
    assert scheme_of("host=/tmp dbname=q") == "postgresql"  # libpq's key=value form
    with pytest.raises(EngineError, match="no scheme"):
        scheme_of("/var/lib/queue")
    with pytest.raises(EngineError, match=r"no engine for nosuch: \(known: memory, postgres"):
        open_engine("nosuch://x", Clock())


def test_the_flags_name_the_url():
    assert engine_url({"engine": None}) == "memory:"
    assert engine_url({"engine": "host=/tmp"}) == "host=/tmp"


def test_memory_engine_with_its_binlog(tmp_path):
    """``memory:`` builds the in-memory engine, with the binlog named in the
    options replayed into it: a job put before is there after."""
    clock = Clock()
    options = {"binlog-dir": str(tmp_path), "no-fsync": True}
    engine = open_engine("memory:", clock, max_job_size=100, options=options)
    assert isinstance(engine, MemoryEngine) and engine.max_job_size == 100
    s = engine.open_session(None)
    assert engine.put(s, 5, 0, 10, b"kept\r\n") == 1
    engine.journal.close()
    again = open_engine("memory:", clock, options=options)
    assert again.job(1).body == b"kept\r\n"
    assert again.journal.health().enabled
    again.journal.close()


def test_an_unusable_binlog_directory_is_an_engine_error(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(EngineError):
        open_engine("memory:", Clock(), options={"binlog-dir": str(tmp_path / "file")})


def test_postgresql_refuses_a_binlog():
    pytest.importorskip("psycopg")
    from twisted_stalk.pg import ENGINE_WITH_BINLOG
    with pytest.raises(EngineError) as e:
        open_engine("postgresql://nowhere/db", Clock(), options={"binlog-dir": "/tmp"})
    assert str(e.value) == ENGINE_WITH_BINLOG
