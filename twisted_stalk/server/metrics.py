"""``--metrics ENDPOINT``: Prometheus metrics and health checks over HTTP (twisted.web).

``/metrics``
    The Prometheus text exposition format (version 0.0.4), gzipped when the
    scraper accepts it: every counter and gauge of the ``stats`` command (same
    numbers: they are read from the same ``stats`` data the wire protocol
    renders), per-tube gauges and counters with a ``tube`` label (the
    ``stats-tube`` fields; which tubes get their own series and how the rest
    are summed: :mod:`.metrics_tubes`), the binlog figures, and the operations
    figures (refused connections, the connection, memory and open-file limits,
    stored job bytes with ``--max-memory``, extension verb counts, process descriptors and memory).
``/healthz``
    ``200 ok``: the process is alive and its reactor turns.
``/readyz``
    ``200 ready`` when the server is listening, its binlog (if any) can write,
    and it is neither draining (SIGUSR1) nor shutting down; otherwise ``503``
    and one line per reason, for load balancers and orchestrators.

Nothing is computed except when scraped; a scrape walks the tubes once (not
the jobs).  The listener holds at most :data:`MAX_CONNECTIONS` connections and
closes idle ones after :data:`IDLE_TIMEOUT` seconds.
"""
from __future__ import annotations

import os
import resource
import time
from typing import TYPE_CHECKING, Callable, Dict, Iterable, List, Optional, Tuple

from twisted.web.resource import Resource
from twisted.web.server import Site

from ..protocol.commands import COUNTED_COMMANDS
from ..protocol.yaml import as_dict
from .limits import open_fds
from .metrics_tubes import OTHER, TUBE_METRICS, TubePolicy

if TYPE_CHECKING:  # pragma: no cover
    from .factory import BeanstalkServerFactory

CONTENT_TYPE = b"text/plain; version=0.0.4; charset=utf-8"

#: stats key -> (metric name, type, help).  ``cmd-*`` keys become
#: ``beanstalk_commands_total{command=...}``; the string fields (version, id,
#: hostname, os, platform) and pid become labels of ``beanstalk_info``.
STATS_METRICS: Dict[str, Tuple[str, str, str]] = {
    "current-jobs-urgent": ("beanstalk_current_jobs_urgent", "gauge",
                            "Ready jobs with priority below 1024."),
    "current-jobs-ready": ("beanstalk_current_jobs_ready", "gauge", "Jobs in the ready state."),
    "current-jobs-reserved": ("beanstalk_current_jobs_reserved", "gauge",
                              "Jobs reserved by workers."),
    "current-jobs-delayed": ("beanstalk_current_jobs_delayed", "gauge", "Delayed jobs."),
    "current-jobs-buried": ("beanstalk_current_jobs_buried", "gauge", "Buried jobs."),
    "job-timeouts": ("beanstalk_job_timeouts_total", "counter",
                     "Reservations that ran out of time (TTR)."),
    "total-jobs": ("beanstalk_jobs_total", "counter", "Jobs created since start."),
    "max-job-size": ("beanstalk_max_job_size_bytes", "gauge", "Largest job body accepted."),
    "current-tubes": ("beanstalk_current_tubes", "gauge", "Tubes that exist."),
    "current-connections": ("beanstalk_current_connections", "gauge", "Open connections."),
    "current-producers": ("beanstalk_current_producers", "gauge",
                          "Open connections that have issued a put."),
    "current-workers": ("beanstalk_current_workers", "gauge",
                        "Open connections that have issued a reserve."),
    "current-waiting": ("beanstalk_current_waiting", "gauge",
                        "Connections waiting in a reserve."),
    "total-connections": ("beanstalk_connections_total", "counter",
                          "Connections accepted since start."),
    "rusage-utime": ("beanstalk_rusage_utime_seconds_total", "counter", "User CPU time."),
    "rusage-stime": ("beanstalk_rusage_stime_seconds_total", "counter", "System CPU time."),
    "uptime": ("beanstalk_uptime_seconds", "gauge", "Seconds since the server started."),
    "binlog-oldest-index": ("beanstalk_binlog_oldest_index", "gauge",
                            "Sequence number of the oldest binlog file."),
    "binlog-current-index": ("beanstalk_binlog_current_index", "gauge",
                             "Sequence number of the binlog file being written."),
    "binlog-records-migrated": ("beanstalk_binlog_records_migrated_total", "counter",
                                "Binlog records rewritten by compaction."),
    "binlog-records-written": ("beanstalk_binlog_records_written_total", "counter",
                               "Binlog records written."),
    "binlog-max-size": ("beanstalk_binlog_max_size_bytes", "gauge",
                        "Size of each binlog file."),
    "draining": ("beanstalk_draining", "gauge", "1 in drain mode (SIGUSR1): put answers DRAINING."),
}
INFO_KEYS = ("version", "id", "hostname", "os", "platform", "pid")


def escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    return repr(float(value))


class Readiness:
    """Why the server is not ready (an empty list: ready)."""

    def __init__(self, factory: BeanstalkServerFactory, shutdown=None,
                 listening: Optional[Callable[[], bool]] = None) -> None:
        self.factory = factory
        self.shutdown = shutdown
        self.listening = listening or (lambda: factory.numPorts > 0)

    def problems(self) -> List[str]:
        problems = []
        if self.shutdown is not None and self.shutdown.started:
            problems.append("shutting down")
        elif not self.listening():
            problems.append("not listening")
        engine = self.factory.engine
        if engine.draining:
            problems.append("draining")
        why = engine.journal.health().problem
        if why:
            problems.append(f"binlog not writable: {why}")
        return problems


class Collector:
    """Renders the metrics of one server."""

    def __init__(self, factory: BeanstalkServerFactory, shutdown=None,
                 start_time: Optional[float] = None, policy: Optional[TubePolicy] = None) -> None:
        self.factory = factory
        self.shutdown = shutdown
        self.start_time = time.time() if start_time is None else start_time
        #: Which tubes get their own series (:mod:`.metrics_tubes`).
        self.policy = policy or TubePolicy()

    def render(self) -> str:
        factory = self.factory
        engine = factory.engine
        memory = engine.memory()
        lines: List[str] = []

        def family(name: str, kind: str, help_text: str,
                   samples: Iterable[Tuple[str, object]]) -> None:
            lines.append(f"# HELP {name} {help_text}")
            lines.append(f"# TYPE {name} {kind}")
            for labels, value in samples:
                lines.append(f"{name}{labels} {_number(value)}")

        stats = as_dict(engine.server_stats())
        info = ",".join(f'{k}="{escape_label(str(stats.get(k, "")))}"' for k in INFO_KEYS)
        family("beanstalk_info", "gauge", "Server identity (labels); always 1.",
               [("{" + info + "}", 1)])
        family("beanstalk_commands_total", "counter",
               "Commands served, by command (the stats cmd-* counters).",
               [(f'{{command="{c}"}}', int(stats.get("cmd-" + c, 0))) for c in COUNTED_COMMANDS])
        for key, (name, kind, help_text) in STATS_METRICS.items():
            if key not in stats:
                continue
            family(name, kind, help_text, [("", stats[key])])

        # Operations figures.
        limit = factory.connection_limit
        family("beanstalk_max_connections", "gauge",
               "Connections accepted at once (0: no limit).",
               [("", limit.maximum if limit is not None else 0)])
        family("beanstalk_refused_connections_total", "counter",
               "Connections closed unserved at the connection limit (accepted over it, "
               "or waited longer than --max-connections-wait in the backlog).",
               [("", limit.refused if limit is not None else 0)])
        family("beanstalk_max_memory_bytes", "gauge",
               "--max-memory: put answers OUT_OF_MEMORY above it (0: no limit).",
               [("", memory.limit)])
        family("beanstalk_job_bytes", "gauge",
               "Bytes of stored job bodies, each with its CRLF.", [("", memory.used or 0)])
        ext = factory.extensions
        if ext is not None:
            family("beanstalk_extension_commands_total", "counter",
                   "Extension verbs served (--extensions).",
                   [(f'{{command="{verb}"}}', n) for verb, n in ext.counts.items()])
        health = engine.journal.health()
        family("beanstalk_binlog_enabled", "gauge", "1 when a binlog directory is in use.",
               [("", health.enabled)])
        if health.enabled:
            family("beanstalk_binlog_writable", "gauge", "1 when the binlog can take writes.",
                   [("", health.problem is None)])
        family("beanstalk_shutting_down", "gauge",
               "1 once SIGTERM/SIGINT started a graceful shutdown.",
               [("", bool(self.shutdown is not None and self.shutdown.started))])

        # Per tube: the policy's tubes, then the others summed.
        series = self.policy.split(engine.tube_figures())
        labels = ['{tube="%s"}' % escape_label(t.name.decode("latin-1")) for t in series.own]
        other = '{tube="%s"}' % OTHER
        for i, (name, kind, help_text, field) in enumerate(TUBE_METRICS):
            samples: List[Tuple[str, object]] = [
                (label, getattr(t, field)) for label, t in zip(labels, series.own)]
            if series.other is not None:
                samples.append((other, series.other[i]))
            family(name, kind, help_text, samples)
        family("beanstalk_metrics_tubes_aggregated", "gauge",
               f'Tubes summed into the tube="{OTHER}" series instead of their own.',
               [("", series.aggregated)])

        # The process.
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        fds = open_fds()
        if fds is not None:
            family("process_open_fds", "gauge", "Open file descriptors.", [("", fds)])
        if soft != resource.RLIM_INFINITY:
            family("process_max_fds", "gauge", "Open-file limit (RLIMIT_NOFILE) in force.",
                   [("", soft)])
        rss = _resident_bytes()
        if rss is not None:
            family("process_resident_memory_bytes", "gauge", "Resident memory size.",
                   [("", rss)])
        family("process_start_time_seconds", "gauge", "Start time, seconds since the epoch.",
               [("", self.start_time)])
        return "\n".join(lines) + "\n"


def _resident_bytes() -> Optional[int]:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


class _Text(Resource):
    isLeaf = True

    def __init__(self, render: Callable[[], Tuple[int, bytes, bytes]]) -> None:
        super().__init__()
        self._render = render

    def render_GET(self, request) -> bytes:
        code, content_type, body = self._render()
        request.setResponseCode(code)
        request.setHeader(b"content-type", content_type)
        request.setHeader(b"cache-control", b"no-store")
        return body

    render_HEAD = render_GET


class _Root(Resource):
    def render_GET(self, request) -> bytes:
        request.setHeader(b"content-type", b"text/plain; charset=utf-8")
        return b"twisted-stalk: /metrics /healthz /readyz\n"


#: Connections the metrics listener serves at once; more are closed at once.
MAX_CONNECTIONS = 16
#: Seconds an idle (keep-alive) metrics connection is kept (twisted.web's default: 12 hours).
IDLE_TIMEOUT = 30.0


class QuietSite(Site):
    """A Site that writes no access log line per scrape, holds at most
    ``max_connections`` connections (a connection over that is closed at once
    and counted in ``refused``) and closes connections idle for ``timeout``
    seconds."""

    displayTracebacks = False

    def __init__(self, resource, max_connections: int = MAX_CONNECTIONS,
                 timeout: float = IDLE_TIMEOUT, reactor=None) -> None:
        kwargs = {"reactor": reactor} if reactor is not None else {}
        super().__init__(resource, timeout=timeout, **kwargs)
        self.max_connections = max_connections
        self.open_connections = 0
        self.refused = 0

    def buildProtocol(self, addr):
        if self.open_connections >= self.max_connections:
            self.refused += 1
            return None  # the port closes the socket at once
        channel = super().buildProtocol(addr)
        self.open_connections += 1
        lost = channel.connectionLost

        def connection_lost(reason) -> None:
            self.open_connections -= 1
            lost(reason)
        channel.connectionLost = connection_lost
        return channel

    def log(self, request) -> None:
        pass


class MetricsSite(QuietSite):
    """The ``--metrics`` site.  It can listen before the server it reports on
    exists (``stalkd`` binds every listener before dropping privileges and
    opening the binlog); :meth:`attach` gives it the server before the reactor
    runs, so no request arrives before it."""

    collector: Optional["Collector"] = None
    readiness: Optional["Readiness"] = None

    def __init__(self, **kwargs) -> None:
        root = _Root()
        super().__init__(root, **kwargs)
        self.root = root

    def attach(self, factory, shutdown=None, listening: Optional[Callable[[], bool]] = None,
               policy: Optional[TubePolicy] = None) -> "MetricsSite":
        collector = self.collector = Collector(factory, shutdown, policy=policy)
        readiness = self.readiness = Readiness(factory, shutdown, listening)
        plain = b"text/plain; charset=utf-8"

        def metrics():
            return 200, CONTENT_TYPE, collector.render().encode("utf-8")

        def healthz():
            return 200, plain, b"ok\n"

        def readyz():
            problems = readiness.problems()
            if problems:
                return 503, plain, ("".join(p + "\n" for p in problems)).encode("utf-8")
            return 200, plain, b"ready\n"

        from twisted.web.resource import EncodingResourceWrapper
        from twisted.web.server import GzipEncoderFactory
        # gzip when the scraper accepts it (Prometheus does).
        self.root.putChild(b"metrics", EncodingResourceWrapper(_Text(metrics),
                                                               [GzipEncoderFactory()]))
        self.root.putChild(b"healthz", _Text(healthz))
        self.root.putChild(b"readyz", _Text(readyz))
        return self


def make_site(factory=None, shutdown=None, listening: Optional[Callable[[], bool]] = None,
              policy: Optional[TubePolicy] = None, **kwargs) -> MetricsSite:
    """The HTTP site for ``--metrics``: /metrics, /healthz, /readyz (attached
    to ``factory`` now, or later with :meth:`MetricsSite.attach`)."""
    site = MetricsSite(**kwargs)
    if factory is not None:
        site.attach(factory, shutdown, listening, policy)
    return site


__all__ = ["CONTENT_TYPE", "Collector", "IDLE_TIMEOUT", "MAX_CONNECTIONS", "MetricsSite",
           "QuietSite", "Readiness", "STATS_METRICS", "TUBE_METRICS",
           "make_site"]
