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
from test_ops_helpers import (allow_test_descriptors, fd_limited, http_get, start_stalkd,
                              wait_http)
from twisted_stalk.engines import open_engine
from twisted_stalk.server import BeanstalkServerFactory
from twisted_stalk.server import limits, ops
from wire import Wire

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_at_the_limit_new_connections_wait_until_a_slot_frees(tmp_path):
    metrics_port = free_port()
    server = start_stalkd(tmp_path, "--max-connections", "3",
                          "--metrics", f"tcp:{metrics_port}:interface=127.0.0.1")
    try:
        wait_http(f"http://127.0.0.1:{metrics_port}/healthz")
        # start_stalkd's probe may still hold a place for a moment: hold the
        # three places once it is gone.
        held = []
        while len(held) < 3:
            w = Wire(socket.create_connection(server.address, timeout=5))
            assert w.ask(b"list-tube-used\r\n") == b"USING default\r\n"
            held.append(w)
        # The fourth is not accepted (it waits in the backlog, served by no one)...
        waiting = Wire(socket.create_connection(server.address, timeout=5))
        waiting.send(b"list-tube-used\r\n")
        assert waiting.nothing_within(0.5)
        _, _, body = http_get(f"http://127.0.0.1:{metrics_port}/metrics")
        assert "beanstalk_refused_connections_total 0" in body
        assert "beanstalk_max_connections 3" in body
        # ...and is served as soon as a place frees, its command answered.
        assert held[0].ask(b"stats-tube default\r\n").startswith(b"OK ")
        held.pop().close()
        waiting.sock.settimeout(5)
        assert waiting.reply() == b"USING default\r\n"
        for h in held + [waiting]:
            h.close()
    finally:
        assert server.stop() == 0


def test_connection_flood_keeps_descriptors_for_the_binlog(tmp_path):
    """Under ``ulimit -n 256`` a flood of 1,000 connections while a producer
    writes to a binlog rotating every 4 KiB: every put is stored, the server
    never runs out of descriptors, every connection it closes unserved is
    counted, and the rest wait in the backlog until places free."""
    import selectors
    import subprocess
    import threading
    allow_test_descriptors(2200)
    from servers import ours_command
    port, metrics_port = free_port(), free_port()
    binlog = tmp_path / "binlog"
    binlog.mkdir()
    with open(tmp_path / "log", "wb") as log:
        proc = subprocess.Popen(fd_limited(256, *ours_command(
            port, "-b", str(binlog), "-s", "4096", "--max-connections-wait", "60",
            "--metrics", f"tcp:{metrics_port}:interface=127.0.0.1")),
            stdout=subprocess.DEVNULL, stderr=log)
    flood: list = []
    try:
        wait_http(f"http://127.0.0.1:{metrics_port}/healthz")
        producer = Wire(socket.create_connection(("127.0.0.1", port), timeout=10))
        replies: list = []
        stop = threading.Event()

        def produce() -> None:
            while not stop.is_set():
                replies.append(producer.ask(b"put 0 0 60 100\r\n%s\r\n" % (b"x" * 100)))
        thread = threading.Thread(target=produce)
        thread.start()
        most_fds = 0
        try:
            for _ in range(1000):
                s = socket.socket()
                s.setblocking(False)
                s.connect_ex(("127.0.0.1", port))
                flood.append(s)
                if len(flood) % 50 == 0:
                    most_fds = max(most_fds, len(os.listdir(f"/proc/{proc.pid}/fd")))
            # Everyone asks; collect what comes back within a second.
            sel = selectors.DefaultSelector()
            for s in flood:
                try:
                    s.send(b"list-tube-used\r\n")
                except OSError:
                    pass
                sel.register(s, selectors.EVENT_READ)
            served, closed = set(), set()
            maximum = 256 - limits.RESERVED_FDS
            # Until every place is taken (the producer holds one), then a little longer.
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                if len(served) == maximum - 1:
                    deadline = min(deadline, time.monotonic() + 0.5)
                most_fds = max(most_fds, len(os.listdir(f"/proc/{proc.pid}/fd")))
                for key, _ in sel.select(0.1):
                    try:
                        data = key.fileobj.recv(100)
                    except OSError:
                        data = b""
                    (served if data else closed).add(key.fileobj)
                    sel.unregister(key.fileobj)
        finally:
            stop.set()
            thread.join(10)
        assert replies and set(replies) == {b"INSERTED %d\r\n" % (i + 1)
                                            for i in range(len(replies))}
        assert most_fds <= 256
        assert len(served) == maximum - 1  # the producer holds one place
        waiting = [s for s in flood if s not in served and s not in closed]
        _, _, body = http_get(f"http://127.0.0.1:{metrics_port}/metrics")
        assert f"beanstalk_refused_connections_total {len(closed)}\n" in body, \
            (len(closed), [l for l in body.splitlines() if "refused" in l])
        assert "Too many open files" not in (tmp_path / "log").read_text()
        # Closing served connections lets waiting ones in, in order.
        for s in list(served)[:10]:
            s.close()
        answered = 0
        for s in waiting[:10]:
            s.setblocking(True)
            s.settimeout(5)
            if s.recv(100) == b"USING default\r\n":
                answered += 1
        assert answered == 10
        producer.close()
    finally:
        for s in flood:
            s.close()
        proc.terminate()
        assert proc.wait(15) == 0


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
    factory = BeanstalkServerFactory(clock, open_engine("memory:", clock))
    limit = limits.install_connection_limit(factory, maximum, clock)
    return clock, factory, limit


def _connect(factory):
    proto = factory.buildProtocol(None)
    transport = StringTransport()
    proto.makeConnection(transport)
    return proto, transport


class _Port:
    """Stands in for a listening port: records stopReading/startReading."""

    connected = True

    def __init__(self) -> None:
        self.reading = True
        self.calls = []

    def stopReading(self) -> None:
        self.reading = False
        self.calls.append("stop")

    def startReading(self) -> None:
        self.reading = True
        self.calls.append("start")


def test_limit_pauses_accepting_and_counts_the_overflow():
    from twisted.logger import globalLogPublisher
    clock, factory, limit = _factory(2)
    port = _Port()
    limit.watch(port)
    events = []
    globalLogPublisher.addObserver(events.append)
    try:
        a, _ = _connect(factory)
        assert port.reading
        b, _ = _connect(factory)
        assert not port.reading and limit.pauses == 1  # at the limit: stop accepting
        # The rest of an accept batch: no protocol, so the port closes each socket.
        for _ in range(5):
            assert factory.buildProtocol(None) is None
        clock.advance(limits.LOG_EVERY)
        assert factory.buildProtocol(None) is None
    finally:
        globalLogPublisher.removeObserver(events.append)
    assert limit.refused == 6 and len(factory.connections) == 2
    lines = [e for e in events if e.get("log_namespace") == "twisted_stalk.limits"]
    assert len(lines) == 2  # the first, then one per LOG_EVERY seconds
    assert lines[1]["refused"] == 6 and lines[1]["since"] == 5
    a.connectionLost(None)
    assert port.reading  # a place freed: accepting again
    proto, transport = _connect(factory)
    assert not transport.disconnecting and factory.connections == {b, proto}
    assert port.calls == ["stop", "start", "stop"]
    # A port that stopped listening is left alone.
    port.connected = False
    b.connectionLost(None)
    assert port.calls == ["stop", "start", "stop"]


def test_a_watched_port_accepts_no_more_than_the_free_places():
    clock, factory, limit = _factory(5)

    class Port(_Port):
        numberAccepts = 100

        def doRead(self):
            self.calls.append(self.numberAccepts)

    port = Port()
    limit.watch(port)
    port.doRead()
    a, _ = _connect(factory)
    b, _ = _connect(factory)
    port.doRead()
    assert port.calls == [5, 3]


def test_limit_counts_twisteds_emfile_recovery_closes():
    from twisted.logger import Logger
    clock, factory, limit = _factory(2)
    limit.watch(_Port())
    before = limit.refused
    # What twisted.internet.tcp logs for each socket it closes after EMFILE.
    Logger(namespace="twisted.internet.tcp.Port").info(
        "EMFILE recovery: Closed socket from {address}", address=("127.0.0.1", 1))
    assert limit.refused == before + 1


def test_configure_derives_the_limit_from_open_files():
    clock = Clock()
    factory = BeanstalkServerFactory(clock, open_engine("memory:", clock))
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
    factory = BeanstalkServerFactory(clock, open_engine("memory:", clock))
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
    factory = BeanstalkServerFactory(clock, open_engine("memory:", clock))
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
