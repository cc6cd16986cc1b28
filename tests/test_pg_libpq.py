"""The driver over both libpq bindings: psycopg's and twisted_stalk.pg.libpq (cffi).

The same statements give the same rows, errors and notifications over
either, and the driver's own tests pass over the binding this interpreter
does not choose by default (CPython: cffi; PyPy: psycopg's ctypes one).
"""
from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

from pgcluster import unavailable

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _cffi_problem():
    try:
        from twisted_stalk.pg import libpq  # noqa: F401
    except (ImportError, OSError) as e:
        return f"the cffi binding cannot load here: {e}"
    return unavailable()


pytestmark = pytest.mark.skipif(bool(_cffi_problem()), reason=str(_cffi_problem()))

#: Every decoder, NULLs, empty values, binary parameters, an error, a notice
#: and a notification, through PgConnection on a real reactor.
SCRIPT = r"""
import sys
from twisted.internet import defer, reactor
from twisted_stalk.pg import driver
from twisted_stalk.pg.driver import PgConnection, PgError
STATEMENTS = {
    "kinds": "SELECT $1::bigint, $1::int4, $1::int2, $2::float8, $3::bool, $4::bytea, "
             "$5::text, $5::varchar, 'n'::name, NULL::bigint, ''::bytea",
    "many": "SELECT g, repeat('x', g)::bytea FROM generate_series(1, $1::int) g",
    "none": "SELECT 1 WHERE false",
    "set": "SELECT set_config('application_name', $1, false)",
}
out = [driver.BINDING]
heard = []
@defer.inlineCallbacks
def main():
    conn = PgConnection(reactor, sys.argv[1], STATEMENTS,
                        on_notify=lambda channel, payload: heard.append((channel, payload)))
    yield conn.connect()
    out.append((yield conn.execute("kinds", [-7, b"2.5", b"t", b"\x00\r\n\xff", b"caf\xc3\xa9"],
                                   [0, 0, 0, 1, 0])))
    out.append((yield conn.execute("kinds", [12345, b"-0.25", b"f", b"", b""], [0, 0, 0, 1, 0]))[0][3:7])
    out.append((yield conn.execute("kinds", [None, None, None, None, None]))[0][:7])
    rows = yield defer.gatherResults([conn.execute("many", [n]) for n in range(0, 300, 7)])
    out.append([len(r) for r in rows])
    out.append(rows[-1][-1])
    out.append((yield conn.execute("none")))
    out.append((yield conn.execute("set", [b"x" * 40])))
    for sql in ("SELECT 1/0", "SELECT nonsense", "INSERT INTO nowhere VALUES (1)"):
        try:
            yield conn.query(sql)
        except PgError as e:
            out.append((e.sqlstate, str(e).splitlines()[0]))
    out.append((yield conn.query("DO $$BEGIN RAISE NOTICE 'dropped'; END$$")))
    yield conn.query("LISTEN ch")
    yield conn.query("SELECT pg_notify('ch', $1)", [b"payload \xc3\xa9"])
    yield conn.query("SELECT 1")
    out.append(heard)
    out.append(conn.load)
    conn.close()
    print(out)
def failed(failure):
    failure.printTraceback(file=sys.stderr)
def start():
    main().addErrback(failed).addBoth(lambda _: reactor.stop())
reactor.callWhenRunning(start)
reactor.run()
"""


def _run(binding: str, dsn: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, TWISTED_STALK_PG_LIBPQ=binding)
    return subprocess.run([sys.executable, "-c", SCRIPT, dsn], capture_output=True,
                          text=True, timeout=60, env=env, cwd=ROOT)


def test_both_bindings_answer_the_drivers_statements_alike(pg_cluster):
    ours = _run("cffi", pg_cluster.dsn())
    psycopgs = _run("psycopg", pg_cluster.dsn())
    assert ours.returncode == 0 and psycopgs.returncode == 0, ours.stderr + psycopgs.stderr
    # Notices are dropped by both (libpq's default would print them).
    assert "dropped" not in ours.stderr + psycopgs.stderr
    assert ours.stdout.startswith("['cffi', ")
    assert psycopgs.stdout.startswith("['psycopg', ")
    assert ours.stdout.split(", ", 1)[1] == psycopgs.stdout.split(", ", 1)[1]
    out = eval(ours.stdout)  # noqa: S307 - our own script's repr of plain values
    assert out[1] == [(-7, -7, -7, 2.5, True, b"\x00\r\n\xff", b"caf\xc3\xa9", b"caf\xc3\xa9",
                       b"n", None, b"")]
    assert out[2] == (-0.25, False, b"", b"")
    assert out[3] == (None,) * 7
    assert out[4] == list(range(0, 300, 7))
    assert out[5] == (294, b"x" * 294)
    assert out[6] == [] and out[7] == [(b"x" * 40,)]
    assert [state for state, _ in out[8:11]] == ["22012", "42703", "42P01"]
    assert out[11] == [] and out[12] == [(b"ch", "payload é".encode())] and out[13] == 0


def test_the_binding_is_chosen_by_runtime_or_environment(monkeypatch):
    from twisted_stalk.pg import driver, libpq
    assert driver.BINDING == (os.environ.get(driver.BINDING_VARIABLE) or
                              ("cffi" if platform.python_implementation() == "PyPy"
                               else "psycopg"))
    assert driver.choose_binding("cffi") == ("cffi", libpq.PGconn)
    from psycopg import pq
    assert driver.choose_binding("psycopg") == ("psycopg", pq.PGconn)
    with pytest.raises(ValueError, match="TWISTED_STALK_PG_LIBPQ='ctypes': psycopg or cffi"):
        driver.choose_binding("ctypes")


def test_a_connection_that_fails_is_told_and_freed_once():
    from twisted_stalk.pg import libpq
    conn = libpq.PGconn.connect_start(b"host=/nonexistent/twisted-stalk-probe")
    assert conn.status == 1  # CONNECTION_BAD
    assert "nonexistent" in conn.get_error_message()
    conn.finish()
    conn.finish()
    assert conn.status == 1
    with pytest.raises(libpq.LibpqError, match="closed"):
        conn.consume_input()


def test_the_drivers_tests_pass_over_the_other_binding(pg_cluster):
    """tests/test_pg_units.py (the driver on a reactor, the engine's
    statements) with the binding this runtime does not choose by default, and
    on CPython (where that is the cffi one) tests/test_pg_wire.py too (the
    engine over real sockets).  On PyPy the other binding is psycopg's slow
    ctypes one, only a fallback, under which the wire suite's timed tests
    flake on a loaded machine; they run over the default binding anyway."""
    pypy = platform.python_implementation() == "PyPy"
    other = "psycopg" if pypy else "cffi"
    files = ["tests/test_pg_units.py"] + ([] if pypy else ["tests/test_pg_wire.py"])
    env = dict(os.environ, TWISTED_STALK_PG_LIBPQ=other, PYTHONPATH=ROOT)
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "0", "-p",
                           "no:cacheprovider", *files],
                          capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert " passed" in done.stdout.splitlines()[-1]
