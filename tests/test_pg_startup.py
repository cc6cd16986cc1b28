"""A PostgreSQL engine pointed at a port that accepts but never speaks (another
service, a proxy with nothing behind it) used to hang at start for ever: the
blocking start-up connections (schema migration, the node's registration) had
no timeout.  Now ``stalk_wait`` bounds them as libpq's ``connect_timeout``:
one line on stderr, a non-zero exit, within that time, and the beanstalk
port never opened meanwhile."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest

from servers import free_port, ours_command
from test_ops_startup import _twistd

pytest.importorskip("psycopg")


def _driver_problem():
    from twisted_stalk.pg import driver_problem
    return driver_problem()


# Where psycopg's binding cannot connect, the engine stops earlier, with its own one line.
pytestmark = pytest.mark.skipif(bool(_driver_problem()), reason=str(_driver_problem()))


@pytest.fixture
def silent_port():
    """A TCP port whose connections the kernel accepts and nobody ever answers."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    yield sock.getsockname()[1]
    sock.close()


def _run(argv, port=None, timeout=30.0):
    """Run ``argv`` to its end; meanwhile ``port`` must refuse every connection."""
    started = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONUNBUFFERED="1"))
    accepted = 0
    while port is not None and proc.poll() is None and time.monotonic() - started < timeout:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            accepted += 1
        except OSError:
            pass
        time.sleep(0.05)
    out, err = proc.communicate(timeout=timeout)
    assert accepted == 0, "the beanstalk port accepted while the engine could not start"
    return subprocess.CompletedProcess(argv, proc.returncode, out, err), time.monotonic() - started


@pytest.mark.parametrize("command", ["stalkd", "twistd", "engine-init"])
def test_a_database_port_that_never_speaks_ends_the_start_with_one_line(silent_port, command):
    engine = f"postgresql://stalk@127.0.0.1:{silent_port}/stalk?stalk_wait=2"
    port = free_port()
    if command == "stalkd":
        argv = ours_command(port, "--engine", engine)
    elif command == "twistd":
        argv = _twistd("--port", str(port), "--engine", engine)
    else:
        argv = [sys.executable, "-m", "twisted_stalk_cli.stalkd", "--engine", engine, "--engine-init"]
    proc, took = _run(argv, port)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode != 0, proc.stderr
    assert len(lines) == 1, proc.stderr
    assert "did not answer within 2 s" in lines[0] and "Traceback" not in proc.stderr
    assert 2.0 <= took < 8.0, took  # the connect timeout, plus the interpreter's start


def test_the_start_up_timeout_follows_stalk_wait_unless_the_string_sets_one():
    from psycopg.conninfo import conninfo_to_dict

    from twisted_stalk.pg.config import parse, startup_conninfo

    def timeout_of(text):
        return conninfo_to_dict(startup_conninfo(parse(text))).get("connect_timeout")

    assert timeout_of("host=db dbname=q") == "10"
    assert timeout_of("postgresql://db/q?stalk_wait=0.5") == "2"  # libpq's least
    assert timeout_of("postgresql://db/q?stalk_wait=7.2") == "8"
    assert timeout_of("host=db connect_timeout=30 stalk_wait=3") == "30"
