"""Limits: --max-connections refuses at once (counted, logged), the open-file limit
is raised and reported, --max-memory makes put answer OUT_OF_MEMORY, and a small
held-load run (the full one is bench/held_load.py)."""
from __future__ import annotations

import importlib.util
import os
import resource
import socket
import time

import greenstalk
import pytest
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport

from servers import free_port, stored_bytes
from test_ops_helpers import http_get, start_stalkd, wait_http
from twisted_stalk.server import BeanstalkServerFactory
from twisted_stalk.server import limits, ops
from wire import Wire

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _refused(address, timeout: float = 3.0) -> bool:
    """True when a new connection is closed by the server at once (EOF or reset)."""
    s = socket.create_connection(address, timeout=timeout)
    try:
        s.sendall(b"list-tube-used\r\n")
        return s.recv(100) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True
    finally:
        s.close()


def test_connection_over_the_limit_is_refused_at_once(tmp_path):
    metrics_port = free_port()
    server = start_stalkd(tmp_path, "--max-connections", "3",
                          "--metrics", f"tcp:{metrics_port}:interface=127.0.0.1")
    try:
        wait_http(f"http://127.0.0.1:{metrics_port}/healthz")
        # Fill the three places (start_stalkd's probe may not be reaped yet:
        # a connection refused meanwhile is retried, and counted).
        held, early = [], 0
        deadline = time.monotonic() + 10
        while len(held) < 3:
            w = Wire(socket.create_connection(server.address, timeout=5))
            try:
                assert w.ask(b"list-tube-used\r\n") == b"USING default\r\n"
                held.append(w)
            except (EOFError, ConnectionResetError):
                early += 1
                w.close()
                assert time.monotonic() < deadline
                time.sleep(0.02)
        started = time.monotonic()
        assert _refused(server.address)
        assert time.monotonic() - started < 1.0  # never left hanging
        server.wait_log("refused connection from 127.0.0.1")
        assert "at the limit of 3 connections" in server.log()
        _, _, body = http_get(f"http://127.0.0.1:{metrics_port}/metrics")
        assert f"beanstalk_refused_connections_total {early + 1}" in body
        assert "beanstalk_max_connections 3" in body
        # The held connections still work; freeing one lets a new one in.
        assert held[0].ask(b"stats-tube default\r\n").startswith(b"OK ")
        held.pop().close()
        for _ in range(100):
            w = Wire(socket.create_connection(server.address, timeout=5))
            try:
                if w.ask(b"list-tube-used\r\n") == b"USING default\r\n":
                    break
            except (EOFError, ConnectionResetError):
                pass
            w.close()
            time.sleep(0.02)
        else:
            pytest.fail("a freed slot was never reused")
        w.close()
        for h in held:
            h.close()
    finally:
        assert server.stop() == 0


def test_open_file_limit_is_raised_and_reported(tmp_path):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard <= 1024:
        pytest.skip("needs a finite hard limit above 1024")
    # Start the server with a low soft limit; it raises it to the hard one.
    import subprocess
    from servers import ours_command
    port = free_port()
    log_path = tmp_path / "log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            ["sh", "-c", 'ulimit -Sn 256 && exec "$@"', "sh", *ours_command(port, "-V")],
            stdout=subprocess.DEVNULL, stderr=log)
    try:
        deadline = time.monotonic() + 10
        while f"open-file limit {hard}" not in log_path.read_text():
            assert time.monotonic() < deadline, log_path.read_text()
            assert proc.poll() is None, log_path.read_text()
            time.sleep(0.02)
        text = log_path.read_text()
        assert f"accepting at most {hard - limits.RESERVED_FDS} connections" in text
        with open(f"/proc/{proc.pid}/limits") as f:
            line = next(l for l in f if l.startswith("Max open files"))
        assert line.split()[3] == str(hard)
    finally:
        proc.terminate()
        assert proc.wait(10) == 0


def test_max_memory_answers_out_of_memory(tmp_path):
    server = start_stalkd(tmp_path, "--max-memory", "1000", "-z", "900")
    try:
        w = Wire(socket.create_connection(server.address, timeout=5))
        body = b"a" * 600
        assert w.ask(b"put 0 0 60 600\r\n%s\r\n" % body) == b"INSERTED 1\r\n"
        # 602 + 602 stored bytes would pass 1000: refused; the body is consumed,
        # so the pipelined command after it is still understood.
        assert w.ask(b"put 0 0 60 600\r\n%s\r\nlist-tube-used\r\n" % body) \
            == b"OUT_OF_MEMORY\r\n"
        assert w.reply() == b"USING default\r\n"
        assert w.ask(b"put 0 0 60 300\r\n%s\r\n" % (b"b" * 300)) == b"INSERTED 3\r\n"
        # A stock client sees its OUT_OF_MEMORY error.
        client = greenstalk.Client(server.address, encoding=None)
        with pytest.raises(greenstalk.OutOfMemoryError):
            client.put(b"c" * 200)
        # Deleting frees room again.
        assert w.ask(b"delete 1\r\n") == b"DELETED\r\n"
        assert client.put(b"c" * 200) == 5
        client.close()
        # Limits do not change the other replies: too big is still JOB_TOO_BIG.
        assert w.ask(b"put 0 0 60 901\r\n%s\r\n" % (b"d" * 901)) == b"JOB_TOO_BIG\r\n"
        w.close()
    finally:
        assert server.stop() == 0


# ------------------------------------------------------------------ in-process

def _factory(maximum: int):
    clock = Clock()
    factory = BeanstalkServerFactory(clock)
    limit = limits.install_connection_limit(factory, maximum, clock)
    return clock, factory, limit


def _connect(factory):
    proto = factory.buildProtocol(None)
    transport = StringTransport()
    proto.makeConnection(transport)
    return proto, transport


def test_limit_counts_refusals_and_rate_limits_the_log():
    from twisted.logger import globalLogPublisher
    clock, factory, limit = _factory(2)
    events = []
    globalLogPublisher.addObserver(events.append)
    try:
        a, _ = _connect(factory)
        b, _ = _connect(factory)
        refused = []
        for _ in range(5):
            proto, transport = _connect(factory)
            assert transport.disconnecting  # closed at once
            refused.append(proto)
        clock.advance(limits.LOG_EVERY)
        _connect(factory)
    finally:
        globalLogPublisher.removeObserver(events.append)
    assert limit.refused == 6 and len(factory.connections) == 2
    lines = [e for e in events if e.get("log_namespace") == "twisted_stalk.limits"]
    assert len(lines) == 2  # the first, then one per LOG_EVERY seconds
    assert lines[1]["refused"] == 6 and lines[1]["since"] == 5
    a.connectionLost(None)
    proto, transport = _connect(factory)
    assert not transport.disconnecting and factory.connections == {b, proto}


def test_configure_derives_the_limit_from_open_files():
    clock = Clock()
    factory = BeanstalkServerFactory(clock)
    ops.configure(factory, {}, clock)
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        assert factory.connection_limit is None
    else:
        assert factory.connection_limit.maximum == soft - limits.RESERVED_FDS
        assert not factory.connection_limit.explicit
    assert factory.extensions is None
    assert factory.engine.max_memory == 0
    ops.configure(factory, {"max-connections": 7, "max-memory": 10, "extensions": True}, clock)
    assert factory.connection_limit.maximum == 7 and factory.connection_limit.explicit
    assert limits.memory_limit_of(factory) == 10 and factory.extensions is not None


def test_memory_limit_counts_bytes_through_every_removal():
    clock = Clock()
    factory = BeanstalkServerFactory(clock)
    limits.install_memory_limit(factory, 20)
    proto, t = _connect(factory)
    proto.dataReceived(b"put 0 0 60 8\r\n12345678\r\nput 0 0 60 8\r\n12345678\r\n")
    assert t.value() == b"INSERTED 1\r\nINSERTED 2\r\n"
    t.clear()
    proto.dataReceived(b"put 0 0 60 8\r\n12345678\r\n")
    assert t.value() == b"OUT_OF_MEMORY\r\n"
    t.clear()
    # EXPECTED_CRLF and DRAINING keep their precedence over OUT_OF_MEMORY.
    proto.dataReceived(b"put 0 0 60 8\r\n12345678XX")
    assert t.value() == b"EXPECTED_CRLF\r\n"
    t.clear()
    proto.dataReceived(b"reserve\r\ndelete 1\r\nput 0 0 60 8\r\n12345678\r\n")
    assert t.value().endswith(b"DELETED\r\nINSERTED 5\r\n")
    q = factory.engine
    assert q.job_bytes == stored_bytes(q) == 20
    # The admin flush keeps the count too.
    from twisted_stalk.server import admin
    admin.enable(factory)
    t.clear()
    proto.dataReceived(b"flush-tube default\r\nput 0 0 60 8\r\n12345678\r\n")
    assert t.value() == b"FLUSHED 2\r\nINSERTED 6\r\n"
    assert q.job_bytes == stored_bytes(q) == 10


def test_memory_limit_counts_jobs_already_stored():
    clock = Clock()
    factory = BeanstalkServerFactory(clock)
    proto, t = _connect(factory)
    proto.dataReceived(b"put 0 0 60 3\r\nabc\r\n")
    assert factory.engine.job_bytes == 5
    limits.install_memory_limit(factory, 12)
    assert factory.engine.job_bytes == 5
    proto2, t2 = _connect(factory)
    proto2.dataReceived(b"put 0 0 60 6\r\nabcdef\r\nput 0 0 60 5\r\nabcde\r\n")
    assert t2.value() == b"OUT_OF_MEMORY\r\nINSERTED 3\r\n"


def test_small_held_load():
    """bench/held_load.py, scaled down: 300 idle connections, 1 s of load each way."""
    spec = importlib.util.spec_from_file_location("held_load",
                                                  os.path.join(ROOT, "bench", "held_load.py"))
    held_load = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(held_load)
    figures = held_load.run(idle=300, seconds=1.0, producers=2, workers=2, stall=2.0)
    assert figures["ok"], figures["problems"]
    assert figures["idle_answered"] == 300 and figures["exit_status"] == 0
