"""``twistd beanstalk``: options and service construction.

``makeService`` builds one :class:`BeanstalkServerFactory` and one listening
service per endpoint string (tcp, tcp6, unix, ssl, systemd: anything
``serverFromString`` knows).
"""
from __future__ import annotations

import signal
from typing import List, Optional

from twisted.application.internet import StreamServerEndpointService
from twisted.application.service import MultiService
from twisted.internet.endpoints import serverFromString
from twisted.logger import Logger
from twisted.python import usage

from ..protocol.constants import DEFAULT_MAX_JOB_SIZE, MAX_JOB_SIZE_LIMIT
from .factory import BeanstalkServerFactory

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
    ]
    optFlags = [
        ["no-fsync", "F", "Never fsync the binlog."],
    ]

    def __init__(self) -> None:
        super().__init__()
        self["listen"] = []

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
        self["endpoints"] = endpoints or ["tcp:11300"]


def install_drain_signal(factory: BeanstalkServerFactory) -> None:
    """SIGUSR1 puts the server in drain mode: put answers DRAINING."""
    def drain(signum, frame) -> None:
        factory.queue.draining = True
        log.info("SIGUSR1: entering drain mode")

    signal.signal(signal.SIGUSR1, drain)


class BeanstalkService(MultiService):
    """The listening services plus process-wide setup (signals)."""

    def __init__(self, factory: BeanstalkServerFactory) -> None:
        super().__init__()
        self.factory = factory

    def startService(self) -> None:
        install_drain_signal(self.factory)
        super().startService()


def make_factory(config, reactor) -> BeanstalkServerFactory:
    journal = None
    if config.get("binlog-dir"):
        try:
            from ..binlog import open_journal  # type: ignore[attr-defined]
        except ImportError:
            raise RuntimeError("-b/--binlog-dir: binlog persistence is not available in this build")
        journal = open_journal(config, reactor)
    factory = BeanstalkServerFactory(reactor, max_job_size=config["max-job-size"],
                                     journal=journal)
    if journal is not None:
        # Replay the binlog into the queue, then arm the timer for the
        # restored delayed jobs.
        journal.attach(factory.queue)
        factory.rearm()
    return factory


def makeService(config, reactor=None) -> MultiService:
    """Build the beanstalk service from parsed :class:`Options`."""
    if reactor is None:
        from twisted.internet import reactor as default_reactor
        reactor = default_reactor
    factory = make_factory(config, reactor)
    service = BeanstalkService(factory)
    for description in config["endpoints"]:
        endpoint = serverFromString(reactor, description)
        StreamServerEndpointService(endpoint, factory).setServiceParent(service)
    return service
