"""``twistd beanstalk``: options and service construction.

``makeService`` builds one :class:`BeanstalkServerFactory` and one listening
service per endpoint string (tcp, tcp6, unix, ssl, systemd: anything
``serverFromString`` knows).  Every listener binds in
``privilegedStartService``; one that cannot bind ends twistd with one line
naming it and status 1 (:class:`~.server.listening.ListenerService`).
"""
from __future__ import annotations

import sys
from typing import List

from twisted.application.service import MultiService
from twisted.internet import defer
from twisted.logger import Logger
from twisted.python import usage

from .protocol.constants import DEFAULT_MAX_JOB_SIZE, MAX_JOB_SIZE_LIMIT
from .server.factory import BeanstalkServerFactory
from .server.limits import DEFAULT_WAIT
from .server.listening import ListenerService
from .server.ops import install_drain_signal, make_factory
from .server.tls import DEFAULT_HANDSHAKE_TIMEOUT

log = Logger()


def endpoint_for_port(port: str) -> str:
    """``--port`` takes a bare port number or a full endpoint string."""
    return f"tcp:{port}" if port.isdigit() else port


class Options(usage.Options):
    """Command-line options of ``twistd beanstalk``."""

    synopsis = "[options]"
    longdesc = ("A beanstalkd-compatible work-queue server. Listens on tcp:11300 "
                "unless --listen/--port say otherwise.")
    optParameters = [
        ["port", "p", None, "Port number or endpoint string to listen on."],
        ["max-job-size", "z", DEFAULT_MAX_JOB_SIZE, "Largest job body in bytes.", int],
        ["binlog-dir", "b", None, "Write-ahead log directory (persistence)."],
        ["fsync-ms", "f", 50, "fsync at most once every MS milliseconds (0: always).", int],
        ["binlog-size", "s", 10485760, "Size of each binlog file in bytes.", int],
        ["metrics", None, None, "Serve /metrics, /healthz, /readyz over HTTP on this endpoint."],
        ["web", None, None, "Serve the web console (docs/web.md) over HTTP on this endpoint."],
        ["web-auth", None, None, "Credentials file that lets the web console act (else read-only)."],
        ["max-connections", None, 0, "At N connections stop accepting until one closes "
         "(default: as many as the open-file limit allows).", int],
        ["max-connections-wait", None, DEFAULT_WAIT, "At the connection limit, a connection that "
         "waited SECS in the listen backlog is accepted and closed (counted and logged; "
         "0: at once).", float],
        ["max-memory", None, 0, "Put answers OUT_OF_MEMORY above BYTES of stored jobs.", int],
        ["tls-cert", None, None, "PEM certificate (then its chain) for --tls-listen."],
        ["tls-key", None, None, "PEM private key of --tls-cert (default: in the cert file)."],
        ["tls-ca", None, None, "PEM CA certificates: --tls-listen clients must present a "
         "certificate they signed (mutual TLS)."],
        ["shutdown-grace", None, 10.0, "Seconds SIGTERM/SIGINT waits for busy connections.",
         float],
        ["metrics-tubes", None, 100, "Tubes with their own /metrics series at most (the "
         "busiest active ones; the rest are summed into tube=\"*other*\").", int],
        ["metrics-tube-pattern", None, None, "Only tubes whose names match this regular "
         "expression get their own /metrics series."],
        ["stats-yaml", None, "1.13", "Stats YAML shape: 1.13 quotes string values, 1.12 "
         "(for clients that split lines on ': ') leaves them bare."],
        ["engine", None, None, "Keep the queue in PostgreSQL (a libpq connection string; "
         "docs/ha.md): several servers then serve one queue."],
        ["busy-poll", None, None, "Before sleeping, look for new input for up to USEC "
         "microseconds (default 0: off; docs/operations.md)."],
        ["tls-handshake-timeout", None, DEFAULT_HANDSHAKE_TIMEOUT,
         "Seconds a --tls-listen client has to finish its TLS handshake (0: no limit).",
         float],
    ]
    optFlags = [
        ["no-fsync", "F", "Never fsync the binlog."],
        ["extensions", None, "Serve the extension verbs list-jobs, flush-tube, capabilities."],
        ["engine-init", None, "Create or migrate --engine's schema, then exit."],
    ]

    def __init__(self) -> None:
        super().__init__()
        self["listen"] = []
        self["tls-listen"] = []

    def parseOptions(self, options=None) -> None:
        """Parse (UsageError when unusable).  Run as twistd's subcommand, a
        usage error is one line on stderr and status 1 instead: twistd would
        print every option first, and before Twisted 26.10 exit 0."""
        try:
            super().parseOptions(options)
        except usage.UsageError as e:
            if self.parent is None:  # not under twistd: the caller decides
                raise
            sys.stderr.write(f"twistd beanstalk: {e} (twistd beanstalk --help lists the options)\n")
            raise SystemExit(1)

    def opt_tls_listen(self, endpoint: str) -> None:
        """Endpoint string to listen on with TLS (--tls-cert/--tls-key/--tls-ca; repeatable)."""
        self["tls-listen"].append(endpoint_for_port(endpoint))

    def opt_listen(self, endpoint: str) -> None:
        """Endpoint string to listen on (repeatable), e.g. tcp:11300:interface=127.0.0.1."""
        self["listen"].append(endpoint)

    opt_l = opt_listen

    def postOptions(self) -> None:
        size = self["max-job-size"]
        if not 0 <= size <= MAX_JOB_SIZE_LIMIT:
            raise usage.UsageError(f"--max-job-size must be 0..{MAX_JOB_SIZE_LIMIT}")
        endpoints: List[str] = list(self["listen"])
        if self["port"]:
            endpoints.append(endpoint_for_port(self["port"]))
        for name in ("max-connections", "max-connections-wait", "max-memory", "shutdown-grace",
                     "tls-handshake-timeout", "metrics-tubes"):
            if self[name] < 0:
                raise usage.UsageError(f"--{name} must not be negative")
        from .server.ops import busy_poll_window, stats_quoted, tube_policy
        try:
            busy_poll_window(self)
            stats_quoted(self["stats-yaml"])
            tube_policy(self)
        except ValueError as e:
            raise usage.UsageError(str(e))
        if bool(self["tls-listen"]) != bool(self["tls-cert"]):
            raise usage.UsageError("--tls-listen and --tls-cert go together")
        if self["tls-cert"] or self["tls-key"] or self["tls-ca"]:
            from .server.tls import TLSConfigError, options_from_config
            try:
                options_from_config(self)  # fail now, with the file's name
            except TLSConfigError as e:
                raise usage.UsageError(str(e))
        if self["web-auth"]:
            if not self["web"]:
                raise usage.UsageError("--web-auth goes with --web")
            from .web.auth import AuthFileError, load
            try:
                load(self["web-auth"])  # fail now, with the file's name
            except AuthFileError as e:
                raise usage.UsageError(str(e))
        self["endpoints"] = endpoints or ([] if self["tls-listen"] else ["tcp:11300"])
        if self["engine"] and self["binlog-dir"]:
            from .pg import ENGINE_WITH_BINLOG
            raise usage.UsageError(ENGINE_WITH_BINLOG)
        if self["engine-init"]:
            if not self["engine"]:
                raise usage.UsageError("--engine-init goes with --engine")
            from .pg import EngineError, init_schema
            try:
                print(init_schema(self["engine"]))
            except EngineError as e:
                raise usage.UsageError(str(e))
            raise SystemExit(0)


class BeanstalkService(MultiService):
    """The listening services plus process-wide setup (signals)."""

    def __init__(self, factory: BeanstalkServerFactory) -> None:
        super().__init__()
        self.factory = factory

    shutdown = None  # GracefulShutdown, set by makeService

    def startService(self) -> None:
        install_drain_signal(self.factory)
        super().startService()
        if self.shutdown is not None:
            from .server.ops import install_signals_when_running
            install_signals_when_running(self.factory.reactor, self.shutdown)

    def stopService(self):
        # Drain first (a no-op when SIGTERM already did), then stop the rest.
        if self.shutdown is None:
            return super().stopService()
        return self.shutdown.start().addCallback(lambda _: super(BeanstalkService, self).stopService())


def _factory_or_exit(config, reactor) -> BeanstalkServerFactory:
    """:func:`make_factory` for twistd: an engine that cannot be used (a binlog
    directory that cannot be used, nor written by the -u/-g user twistd will
    switch to; an ``--engine`` database) ends twistd with one line and exit
    status 10, as stalkd does, not a traceback."""
    from .engines import EngineError, open_configured
    try:
        return make_factory(open_configured(config, reactor), config, reactor)
    except EngineError as e:
        sys.stderr.write(f"twistd: {e}\n")
        raise SystemExit(10)


def makeService(config, reactor=None) -> MultiService:
    """Build the beanstalk service from parsed :class:`Options`."""
    if reactor is None:
        from twisted.internet import reactor as default_reactor
        reactor = default_reactor
    from .server.reactor import upgrade
    upgrade(reactor)  # twistd's epoll reactor gets the lean main loop (see reactor.py)
    factory = _factory_or_exit(config, reactor)
    service = BeanstalkService(factory)
    limit = factory.connection_limit
    watch = limit.watch if limit is not None else None
    for description in config["endpoints"]:
        ListenerService(description, factory, "--listen", reactor, watch
                        ).setServiceParent(service)
    if config.get("tls-listen"):
        from .server.ops import tls_options
        from .server.tls import wrap_factory
        tls_factory = wrap_factory(factory, tls_options(config),
                                   config.get("tls-handshake-timeout", DEFAULT_HANDSHAKE_TIMEOUT),
                                   reactor)
        for description in config["tls-listen"]:
            ListenerService(description, tls_factory, "--tls-listen", reactor, watch
                            ).setServiceParent(service)
    from .server.ops import make_shutdown, metrics_site
    listening = list(service)
    service.shutdown = make_shutdown(
        factory, reactor, lambda: defer.DeferredList([s.stopService() for s in listening]),
        config)
    if config.get("metrics"):
        from .server.ops import tube_policy
        site = metrics_site(factory, service.shutdown, policy=tube_policy(config))
        ListenerService(config["metrics"], site, "--metrics", reactor).setServiceParent(service)
    if config.get("web"):
        from .web import console_service
        console_service(factory, reactor, config["web"], config.get("web-auth")
                        ).setServiceParent(service)
    return service
