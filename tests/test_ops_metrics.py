"""``--metrics``: /metrics scraped over a real socket and parsed with the Prometheus
client library's own parser; /healthz and /readyz."""
from __future__ import annotations

import signal
import socket
import time

import pytest
from twisted.internet.task import Clock

from test_ops_helpers import http_get, start_stalkd, stats_of, wait_http
from servers import free_port
from twisted_stalk.server import BeanstalkServerFactory
from twisted_stalk.server import admin, limits
from twisted_stalk.server.metrics import INFO_KEYS, STATS_METRICS, Collector, Readiness
from wire import Wire

parser = pytest.importorskip("prometheus_client.parser")

#: Fields that move between two reads (time, CPU).
MOVING = {"uptime", "rusage-utime", "rusage-stime"}


def scrape(port: int):
    status, content_type, body = http_get(f"http://127.0.0.1:{port}/metrics")
    assert status == 200
    assert content_type.startswith("text/plain; version=0.0.4")
    families = {f.name: f for f in parser.text_string_to_metric_families(body)}
    return families, body


def sample(families, family: str, **labels):
    """The value of the sample of ``family`` with exactly these labels."""
    f = families[family]
    for s in f.samples:
        if s.labels == labels and not s.name.endswith("_created"):
            return s.value
    raise KeyError((family, labels))


def family_name(metric: str) -> str:
    # The parser names counter families without their _total suffix.
    return metric[:-len("_total")] if metric.endswith("_total") else metric


def test_scrape_matches_stats_and_tubes(tmp_path):
    metrics_port = free_port()
    server = start_stalkd(tmp_path, "--metrics", f"tcp:{metrics_port}:interface=127.0.0.1",
                          "--extensions", "--max-memory", "1000000", "--max-connections", "50")
    try:
        wait_http(f"http://127.0.0.1:{metrics_port}/healthz")
        w = Wire(socket.create_connection(server.address, timeout=5))
        for tube, n in ((b"emails", 3), (b"thumbs", 2)):
            assert w.ask(b"use %s\r\n" % tube) == b"USING %s\r\n" % tube
            for i in range(n):
                assert w.ask(b"put %d 0 60 3\r\nabc\r\n" % (i * 1000)).startswith(b"INSERTED")
        assert w.ask(b"put 0 30 60 1\r\nd\r\n").startswith(b"INSERTED")  # delayed in thumbs
        assert w.ask(b"watch emails\r\n") == b"WATCHING 2\r\n"
        reply = w.ask(b"reserve-with-timeout 0\r\n")
        assert reply.startswith(b"RESERVED")
        job_id = int(reply.split()[1])
        assert w.ask(b"bury %d 5\r\n" % job_id) == b"BURIED\r\n"
        assert w.ask(b"pause-tube thumbs 100\r\n") == b"PAUSED\r\n"
        assert w.ask(b"list-jobs emails ready 10\r\n").startswith(b"OK ")

        stats = stats_of(w)  # cmd-stats now counts this one, as the scrape will see
        families, body = scrape(metrics_port)

        # Every numeric stats field is exported under its mapped name, same value.
        for key, raw in stats.items():
            if key.startswith("cmd-"):
                value = sample(families, "beanstalk_commands", command=key[4:])
            elif key in INFO_KEYS:
                value = sample(families, "beanstalk_info", **{
                    k: stats[k] for k in INFO_KEYS})
                assert value == 1
                continue
            else:
                assert key in STATS_METRICS, f"stats field {key} has no metric"
                name = family_name(STATS_METRICS[key][0])
                value = sample(families, name)
            if key in MOVING:
                assert value >= float(raw)
            elif raw in ("true", "false"):
                assert value == (raw == "true")
            else:
                assert value == float(raw), key

        # Per-tube figures carry a tube label.
        assert sample(families, "beanstalk_tube_current_jobs_ready", tube="emails") == 2
        assert sample(families, "beanstalk_tube_current_jobs_buried", tube="emails") == 1
        assert sample(families, "beanstalk_tube_current_jobs_urgent", tube="emails") == 1  # pri 1000
        assert sample(families, "beanstalk_tube_current_jobs_ready", tube="thumbs") == 2
        assert sample(families, "beanstalk_tube_current_jobs_delayed", tube="thumbs") == 1
        assert sample(families, "beanstalk_tube_jobs", tube="thumbs") == 3
        assert sample(families, "beanstalk_tube_pause_seconds", tube="thumbs") == 100
        assert 98 <= sample(families, "beanstalk_tube_pause_time_left_seconds",
                            tube="thumbs") <= 100
        assert sample(families, "beanstalk_tube_current_watching", tube="emails") == 1
        assert sample(families, "beanstalk_tube_current_using", tube="default") == 0
        # Operations figures.
        assert sample(families, "beanstalk_max_connections") == 50
        assert sample(families, "beanstalk_refused_connections") == 0
        assert sample(families, "beanstalk_max_memory_bytes") == 1000000
        assert sample(families, "beanstalk_job_bytes") == 5 * len(b"abc\r\n") + len(b"d\r\n")
        assert sample(families, "beanstalk_extension_commands", command="list-jobs") == 1
        assert sample(families, "beanstalk_binlog_enabled") == 0
        assert sample(families, "process_max_fds") > 0
        assert sample(families, "process_open_fds") > 0

        # Health and readiness; SIGUSR1 (drain) makes it unready.
        assert http_get(f"http://127.0.0.1:{metrics_port}/healthz")[::2] == (200, "ok\n")
        assert http_get(f"http://127.0.0.1:{metrics_port}/readyz")[::2] == (200, "ready\n")
        server.proc.send_signal(signal.SIGUSR1)
        for _ in range(200):
            status, _, text = http_get(f"http://127.0.0.1:{metrics_port}/readyz")
            if status == 503:
                break
            time.sleep(0.01)
        assert (status, text) == (503, "draining\n")
        families, _ = scrape(metrics_port)
        assert sample(families, "beanstalk_draining") == 1
        assert http_get(f"http://127.0.0.1:{metrics_port}/healthz")[0] == 200
        assert http_get(f"http://127.0.0.1:{metrics_port}/nope")[0] == 404
        w.close()
    finally:
        assert server.stop() == 0


def test_binlog_figures_and_readiness(tmp_path):
    metrics_port = free_port()
    binlog = tmp_path / "binlog"
    binlog.mkdir()
    server = start_stalkd(tmp_path, "-b", str(binlog),
                          "--metrics", f"tcp:{metrics_port}:interface=127.0.0.1")
    try:
        wait_http(f"http://127.0.0.1:{metrics_port}/readyz")
        w = Wire(socket.create_connection(server.address, timeout=5))
        for _ in range(3):
            assert w.ask(b"put 0 0 60 2\r\nhi\r\n").startswith(b"INSERTED")
        families, _ = scrape(metrics_port)
        assert sample(families, "beanstalk_binlog_enabled") == 1
        assert sample(families, "beanstalk_binlog_writable") == 1
        assert sample(families, "beanstalk_binlog_records_written") >= 3
        assert sample(families, "beanstalk_binlog_current_index") >= 1
        assert http_get(f"http://127.0.0.1:{metrics_port}/readyz")[0] == 200
        w.close()
    finally:
        assert server.stop() == 0


# ------------------------------------------------------------------ in-process

def test_every_stats_field_has_a_metric():
    factory = BeanstalkServerFactory(Clock())
    keys = dict(factory.queue.stats())
    unmapped = [k for k in keys
                if not k.startswith("cmd-") and k not in INFO_KEYS and k not in STATS_METRICS]
    assert unmapped == []


def test_collector_renders_parseable_text_with_odd_tube_names():
    clock = Clock()
    factory = BeanstalkServerFactory(clock)
    limits.install_connection_limit(factory, 10, clock)
    admin.enable(factory)
    q = factory.queue
    proto = factory.buildProtocol(None)
    from twisted.internet.testing import StringTransport
    proto.makeConnection(StringTransport())
    proto.dataReceived(b"use a$b(c)+/;.x\r\nput 0 0 1 1\r\nx\r\n")
    text = Collector(factory).render()
    families = {f.name: f for f in parser.text_string_to_metric_families(text)}
    tube = [s for s in families["beanstalk_tube_current_jobs_ready"].samples
            if s.labels == {"tube": "a$b(c)+/;.x"}]
    assert tube and tube[0].value == 1
    assert q.stored_bytes() == 3


class _BrokenJournal:
    directory = "/nowhere"
    broken = "No space left on device"
    pending = False

    def stats(self):
        return {"oldest": 1, "current": 2, "migrated": 0, "written": 9, "max_size": 100}


def test_readiness_reports_each_problem():
    clock = Clock()
    factory = BeanstalkServerFactory(clock)
    listening = [True]
    ready = Readiness(factory, None, lambda: listening[0])
    assert ready.problems() == []
    factory.queue.journal = _BrokenJournal()
    factory.queue.draining = True
    listening[0] = False
    assert ready.problems() == ["not listening", "draining",
                                "binlog not writable: No space left on device"]
    text = Collector(factory).render()
    assert "beanstalk_binlog_writable 0" in text
