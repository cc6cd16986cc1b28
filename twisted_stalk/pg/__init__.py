# -*- test-case-name: tests.test_pg_wire -*-
"""An engine backed by PostgreSQL: several twisted-stalk nodes serve one replicated queue.

Imported only when the server is given ``--engine`` (the in-memory server
never loads it or its driver).  :func:`open_url` is its opener for
``twisted_stalk.engines`` (``postgresql://`` URLs); :func:`open_node` builds
a node's engine from an ``--engine`` value: it creates or migrates the schema, registers the
node (both blocking, at startup), then connects without blocking the reactor.
docs/ha.md describes the architecture and its guarantees.
"""
from __future__ import annotations

from typing import Any, Optional

from ..core.engine import EngineError
from ..core.facts import Facts


#: -b with --engine: the one message stalkd and twistd give for it.
ENGINE_WITH_BINLOG = "--engine and -b/--binlog-dir do not go together: the database is the persistence"


def driver_problem() -> Optional[str]:
    """Why the engine's driver cannot run here (None: it can).

    psycopg is imported and its libpq binding made to start (and drop) a
    connection to a socket path that does not exist, which fails at once
    without touching the network: a binding that imports but cannot create
    a connection object (psycopg's pure-Python one on a PyPy whose ``ctypes``
    :func:`.driver.fit_pypy_ctypes` does not fit) must be one line at
    startup, not a traceback at the first statement."""
    try:
        from psycopg import pq

        from .driver import fit_pypy_ctypes
        fit_pypy_ctypes()  # done on the driver's import too; said here to be seen
    except ImportError:
        # The package is not on an index: name the driver itself, and the extra
        # for a checkout.
        return ("--engine needs the psycopg driver: pip install 'psycopg[binary]' "
                "(from a checkout of twisted-stalk: pip install '.[postgresql]')")
    try:
        pq.PGconn.connect_start(b"host=/nonexistent/twisted-stalk-probe").finish()
    except Exception as e:  # the binding itself is broken on this interpreter
        import platform
        return (f"--engine: psycopg's libpq binding does not work on "
                f"{platform.python_implementation()} {platform.python_version()} "
                f"({e.__class__.__name__}: {one_line(e)})")
    return None


def one_line(error: BaseException) -> str:
    """An error's message on one line (libpq's span several, with hints)."""
    return " ".join(str(error).split())


def cannot_use(error: BaseException, config: Any) -> str:
    """The one line for a database that the start-up connections cannot use."""
    import psycopg
    if isinstance(error, psycopg.errors.ConnectionTimeout):
        from .config import startup_timeout
        return (f"--engine: the database did not answer within {startup_timeout(config)} s "
                f"(connect_timeout, from stalk_wait): {one_line(error)}")
    return f"--engine: cannot use the database: {one_line(error)}"


def open_url(url: str, settings: Any) -> Any:
    """The opener of ``postgresql://`` engines (``twisted_stalk.engines``):
    :func:`open_node` with the server's settings; there is no binlog."""
    if settings.options.get("binlog-dir"):
        raise EngineError(ENGINE_WITH_BINLOG)
    return open_node(url, settings.reactor, settings.max_job_size, settings.process_facts())


def open_node(text: str, reactor: Any, max_job_size: int, facts: Optional[Facts] = None,
              start: bool = True) -> Any:
    """A registered :class:`~.engine.PgEngine` for the ``--engine`` value ``text``."""
    problem = driver_problem()
    if problem:
        raise EngineError(problem)
    import psycopg

    from .config import parse, startup_conninfo
    from .engine import PgEngine
    from .schema import SchemaError
    try:
        config = parse(text)
    except ValueError as e:
        raise EngineError(f"--engine: {e}")
    engine = PgEngine(reactor, config, max_job_size=max_job_size, facts=facts)
    running = config.conninfo
    config.conninfo = startup_conninfo(config)  # bounded: register() blocks
    try:
        engine.register()
    except SchemaError as e:
        raise EngineError(f"--engine: {e}")
    except psycopg.Error as e:
        raise EngineError(cannot_use(e, config))
    finally:
        config.conninfo = running
    if start:
        engine.start().addErrback(lambda f: None)  # the pool keeps trying
    return engine


def init_schema(text: str) -> str:
    """``--engine-init``: create or migrate the schema, and say what was done
    (further lines: what older versions used and is dropped now, or what
    waits until no older node is registered, and which node that is)."""
    problem = driver_problem()
    if problem:
        raise EngineError(problem)
    import psycopg

    from .config import parse, startup_conninfo
    from .schema import SchemaError, migrate
    try:
        config = parse(text)
        done = migrate(startup_conninfo(config), config.schema)
    except (ValueError, SchemaError) as e:
        raise EngineError(f"--engine: {e}")
    except psycopg.Error as e:
        raise EngineError(cannot_use(e, config))
    if done.found == done.now:
        said = f"schema {config.schema} is at version {done.now}"
    else:
        said = f"schema {config.schema}: version {done.found} -> {done.now}"
    return "\n".join([said] + done.notes(config.schema))


__all__ = ["ENGINE_WITH_BINLOG", "EngineError", "driver_problem", "init_schema", "one_line", "open_node",
           "open_url"]
