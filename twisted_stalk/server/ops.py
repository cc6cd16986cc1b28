"""Operations glue shared by ``twistd beanstalk`` (tap.py) and ``stalkd``.

Both read the same configuration keys (``twistd`` option names):

``max-connections``  int, 0/None: derived from the open-file limit
``max-memory``       int bytes, 0/None: no limit
``extensions``       bool: serve list-jobs, flush-tube, capabilities
``metrics``          endpoint string for the HTTP metrics/health site, or None
``tls-cert``, ``tls-key``, ``tls-ca``   PEM files (see :mod:`.tls`)
``shutdown-grace``   seconds a graceful shutdown waits for busy connections
``tls-handshake-timeout``  seconds a TLS client has to finish its handshake
``metrics-tubes``    int: tubes with their own /metrics series at most
``metrics-tube-pattern``  regex: only tubes whose names match get their own series
``stats-yaml``       "1.13" (default) or "1.12": string values quoted or bare
``busy-poll``        microseconds the main loop polls before sleeping (see :mod:`._busypoll`)

It imports nothing of ``twisted.application``: ``stalkd`` builds its server
from here without the twistd machinery (see docs/operations.md, "Startup time").
"""
from __future__ import annotations

import signal
from typing import Any, Callable, Optional

from twisted.internet.interfaces import IReactorFDSet
from twisted.logger import Logger

from . import _busypoll, admin, limits
from .shutdown import DEFAULT_GRACE, GracefulShutdown, install_signal_handlers

log = Logger(namespace="twisted_stalk.ops")


def make_factory(config, reactor, engine=None):
    """The server factory for ``config``: binlog replayed, limits and extensions
    on; ``engine``: the memory engine to serve (stalkd's early loop's), else a new one."""
    from .factory import BeanstalkServerFactory
    journal = None
    if config.get("binlog-dir"):
        try:
            from ..binlog import open_journal  # type: ignore[attr-defined]
        except ImportError:
            raise RuntimeError("-b/--binlog-dir: binlog persistence is not available in this build")
        journal = open_journal(config, reactor)
    factory = BeanstalkServerFactory(reactor, max_job_size=config["max-job-size"],
                                     journal=journal, engine=engine or _engine(config, reactor))
    configure(factory, config, reactor)  # limits, --max-memory, --extensions
    if journal is not None:
        # Replay the binlog into the engine, then arm the timer for the
        # restored delayed jobs.
        journal.attach(factory.engine)
        factory.rearm()
    return factory


def _engine(config, reactor):
    """The PostgreSQL engine for ``--engine`` (imported only then), or None."""
    if not config.get("engine"):
        return None
    from .. import PROTOCOL_VERSION
    from ..pg import ENGINE_WITH_BINLOG, open_engine
    if config.get("binlog-dir"):
        raise RuntimeError(ENGINE_WITH_BINLOG)
    from .facts import ProcessFacts
    return open_engine(str(config["engine"]), reactor, config["max-job-size"],
                       ProcessFacts(PROTOCOL_VERSION, reactor.seconds()))


def enter_drain(factory) -> None:
    """Drain mode (SIGUSR1): put answers DRAINING.  The one place that sets it."""
    factory.engine.drain()


def install_drain_signal(factory) -> None:
    """SIGUSR1 puts the server in drain mode."""
    def drain(signum, frame) -> None:
        enter_drain(factory)
        log.info("SIGUSR1: entering drain mode")

    signal.signal(signal.SIGUSR1, drain)


def configure(factory, config, clock) -> None:
    """Apply the limits and extensions to a freshly built factory.

    Raises the open-file limit and reports it; installs the connection limit
    (``--max-connections``, or what the open-file limit allows, so that the
    connection after the last one the process can hold is refused at once
    instead of hanging in the listen backlog; ``--max-connections-wait`` bounds
    the wait in the backlog at the limit); ``--max-memory``; ``--busy-poll``
    (on the reactor); ``--extensions``.
    """
    soft, hard = limits.raise_open_file_limit()
    explicit = int(config.get("max-connections") or 0)
    derived = limits.connections_allowed_by(soft)
    if explicit and derived and explicit > derived:
        log.warn("--max-connections {n} is more than the open-file limit {soft} allows "
                 "(about {derived}); connections beyond that are refused",
                 n=explicit, soft=soft, derived=derived)
    maximum = min(explicit, derived) if explicit and derived else (explicit or derived)
    wait = config.get("max-connections-wait")
    limits.install_connection_limit(factory, maximum, clock, explicit=bool(explicit),
                                    wait=limits.DEFAULT_WAIT if wait is None else float(wait))
    log.info("open-file limit {soft} (hard {hard}); accepting at most {maximum} connections",
             soft=_show(soft), hard=_show(hard), maximum=maximum or "unlimited")
    factory.set_stats_quoted(stats_quoted(config.get("stats-yaml")))
    max_memory = int(config.get("max-memory") or 0)
    if max_memory:
        limits.install_memory_limit(factory, max_memory)
        log.info("put answers OUT_OF_MEMORY above {n} bytes of stored jobs", n=max_memory)
    window = busy_poll_window(config)
    if window and _busypoll.enable(clock, window):
        log.info("busy poll: up to {usec:.0f} us before each sleep", usec=window * 1e6)
    elif window and IReactorFDSet.providedBy(clock):  # a reactor, not a test's Clock
        log.warn("--busy-poll needs the lean epoll main loop (server/reactor.py); ignored")
    if config.get("extensions"):
        admin.enable(factory)
        log.info("extension verbs on: {verbs}", verbs=", ".join(admin.VERBS))


#: ``--stats-yaml`` values: does the stats YAML quote string values?
STATS_YAML = {"1.13": True, "1.12": False}


def stats_quoted(shape: Optional[str]) -> bool:
    """``--stats-yaml``: True for 1.13's quoted strings (the default), False
    for 1.12's bare ones.  ValueError for any other shape."""
    if shape is None:
        return True
    try:
        return STATS_YAML[shape]
    except KeyError:
        raise ValueError(f"--stats-yaml must be 1.12 or 1.13, not {shape!r}")


def busy_poll_window(config) -> float:
    """``busy-poll`` in seconds (see :mod:`._busypoll`); ValueError (one line)
    when it is not 0 to 1000 microseconds."""
    return _busypoll.window_from(config.get("busy-poll"))


def tube_policy(config):
    """The /metrics per-tube policy from ``metrics-tubes`` and
    ``metrics-tube-pattern``; ValueError (one line) when they are unusable."""
    import re
    from .metrics_tubes import DEFAULT_LIMIT, TubePolicy
    limit = config.get("metrics-tubes")
    try:
        return TubePolicy(DEFAULT_LIMIT if limit is None else int(limit),
                          config.get("metrics-tube-pattern"))
    except re.error as e:
        raise ValueError(f"--metrics-tube-pattern: {e}")


def _show(n: int) -> str:
    import resource
    return "unlimited" if n == resource.RLIM_INFINITY else str(n)


def tls_options(config):
    """CertificateOptions from the tls-* keys, or None."""
    from .tls import options_from_config
    return options_from_config(config)


def make_shutdown(factory, clock, stop_listening: Callable[[], Any], config) -> GracefulShutdown:
    grace = config.get("shutdown-grace")
    return GracefulShutdown(factory, clock, stop_listening,
                            grace=DEFAULT_GRACE if grace is None else float(grace))


def metrics_site(factory=None, shutdown: Optional[GracefulShutdown] = None,
                 listening: Optional[Callable[[], bool]] = None, policy=None):
    """The ``--metrics`` site (attached to ``factory`` now, or later: ``site.attach``)."""
    from .metrics import make_site
    return make_site(factory, shutdown, listening, policy)


def install_signals_when_running(reactor, shutdown: GracefulShutdown,
                                 asked: Optional[Callable[[], int]] = None) -> None:
    """Graceful SIGTERM/SIGINT, installed after Twisted installs its own; if
    ``asked()`` then gives a signal, a stop asked earlier starts the shutdown."""
    reactor.callWhenRunning(install_signal_handlers, reactor, shutdown, asked=asked)


__all__ = ["configure", "enter_drain", "install_drain_signal", "install_signals_when_running",
           "make_factory", "make_shutdown", "metrics_site", "stats_quoted", "tls_options",
           "tube_policy"]
