"""A third engine, found as a third party's would be: through the
``twisted_stalk.engines`` entry point of an installed package's metadata,
built by ``open_engine("toy:")``, and passing the importable contract suite
(twisted_stalk/testing/engine_contract.py)."""
from __future__ import annotations

import pytest
from twisted.internet.task import Clock

from twisted_stalk.engines import open_engine, registered
from twisted_stalk.testing.engine_contract import *  # noqa: F401,F403  (the suite)
from twisted_stalk.testing.engine_contract import clock_harness


@pytest.fixture
def toy_installed(tmp_path, monkeypatch):
    """A directory on sys.path holding the toy package's metadata, as pip
    would write it: a dist-info whose entry_points.txt names the opener."""
    info = tmp_path / "toy_engine-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-engine\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[twisted_stalk.engines]\ntoy = toy_engine:open_toy\n")
    monkeypatch.syspath_prepend(str(tmp_path))


@pytest.fixture
def engine_harness(toy_installed):
    clock = Clock()
    clock.advance(1000)
    engine = open_engine("toy:", clock, max_job_size=1000)
    yield clock_harness(engine, clock)


def test_the_toy_is_found_through_its_entry_point(toy_installed):
    from toy_engine import ToyEngine
    assert "toy" in {ep.name for ep in registered()}
    assert type(open_engine("toy:", Clock())) is ToyEngine


def test_without_its_package_there_is_no_toy_engine():
    from twisted_stalk.core.engine import EngineError
    with pytest.raises(EngineError, match="no engine for toy:"):
        open_engine("toy:", Clock())
