import gc
import os
import signal
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

from servers import REFERENCE, compiled_launch_env, start_server  # noqa: E402
from pgcluster import pg_cluster, pg_engine, slow_only  # noqa: E402,F401  (PostgreSQL engine tests)

KINDS = ["ours"] + (["reference"] if REFERENCE else [])


@pytest.fixture
def ours():
    server = start_server("ours")
    yield server
    server.stop()


@pytest.fixture
def reference():
    if not REFERENCE:
        pytest.skip("Debian's beanstalkd is not installed")
    server = start_server("reference")
    yield server
    server.stop()


@pytest.fixture(params=KINDS)
def any_server(request):
    """Our server and, when installed, the reference beanstalkd."""
    server = start_server(request.param)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def compiled_env(tmp_path_factory):
    """Environment for timed launches of the server (see compiled_launch_env)."""
    return compiled_launch_env(str(tmp_path_factory.mktemp("pycache")))


@pytest.fixture(autouse=True)
def _restore_sigint():
    """Trial-based tests leave Twisted's SIGINT handler installed; put Python's back."""
    yield
    signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_runtest_setup(item):
    """Before a ``twisted.trial`` test case, collect what earlier tests left.

    Trial fails a test in whose run an error is logged, and Twisted logs a
    Deferred's unhandled failure when the Deferred is collected.  On CPython
    that happens as the test that dropped it ends; on PyPy at some later
    collection, possibly inside another test's run, which would then fail
    for what it did not do.  Collecting here keeps each such log with (or
    just after) the test that caused it, on every interpreter.
    """
    cls = getattr(item, "cls", None)
    if cls is not None and any(base.__module__.startswith("twisted.trial.")
                               for base in cls.__mro__):
        gc.collect()
