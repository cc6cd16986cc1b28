"""Graceful SIGTERM / SIGINT: stop accepting, answer what is in flight, close
waiting reserves cleanly, flush the binlog, exit 0 within a bounded time.

The drain logic runs under a ``Clock`` here; real ``stalkd`` processes check
the signals, the sockets and the binlog end to end.
"""
from __future__ import annotations

import signal
import socket
import time

import pytest
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport

from test_ops_helpers import start_stalkd
from twisted_stalk.engines import open_engine
from twisted_stalk.server import BeanstalkServerFactory
from twisted_stalk.server.shutdown import GracefulShutdown
from wire import Wire


# ------------------------------------------------------------------ with a Clock

class Harness:
    def __init__(self, grace: float = 5.0) -> None:
        self.clock = Clock()
        self.factory = BeanstalkServerFactory(self.clock, open_engine("memory:", self.clock))
        self.stopped_listening = 0
        self.shutdown = GracefulShutdown(self.factory, self.clock, self._stop_listening,
                                         grace=grace, poll=0.05)

    def _stop_listening(self) -> None:
        self.stopped_listening += 1

    def connect(self):
        proto = self.factory.buildProtocol(None)
        transport = StringTransport()
        proto.makeConnection(transport)
        return proto, transport

    def send(self, proto, data: bytes) -> None:
        proto.dataReceived(data)

    def reap(self) -> None:
        """Deliver connectionLost to every connection whose transport was closed."""
        for proto in list(self.factory.connections):
            if proto.transport.disconnecting:
                proto.connectionLost(None)


def take(transport: StringTransport) -> bytes:
    data = transport.value()
    transport.clear()
    return data


def test_drain_closes_quiet_connections_and_waits_for_work_in_flight():
    h = Harness()
    producer, pt = h.connect()
    h.send(producer, b"put 0 0 60 1\r\na\r\nput 0 0 60 1\r\nb\r\n")
    assert take(pt) == b"INSERTED 1\r\nINSERTED 2\r\n"
    holder, ht = h.connect()
    h.send(holder, b"reserve\r\n")
    assert take(ht) == b"RESERVED 1 1\r\na\r\n"
    waiter, wt = h.connect()
    h.send(waiter, b"watch other\r\nignore default\r\nreserve\r\n")
    assert take(wt) == b"WATCHING 2\r\nWATCHING 1\r\n"
    midway, mt = h.connect()
    h.send(midway, b"put 0 0 60 5\r\nhe")

    done = h.shutdown.start()
    fired = []
    done.addCallback(fired.append)
    assert h.stopped_listening == 1 and h.factory.engine.draining
    # The waiting reserve and the idle producer are closed at once, with no reply.
    assert wt.disconnecting and take(wt) == b""
    assert pt.disconnecting and take(pt) == b""
    # The worker holding a job and the half-sent put are left to finish.
    assert not ht.disconnecting and not mt.disconnecting
    h.reap()
    assert h.factory.engine.waiting_count == 0

    h.send(midway, b"llo\r\n")
    assert take(mt) == b"DRAINING\r\n"
    # No new job is handed out while the holder finishes (job 2 is ready).
    h.send(holder, b"reserve-with-timeout 0\r\n")
    assert take(ht) == b"TIMED_OUT\r\n"
    h.send(holder, b"delete 1\r\n")
    assert take(ht) == b"DELETED\r\n"
    h.clock.advance(0.05)
    assert mt.disconnecting and ht.disconnecting
    assert not fired
    h.reap()
    h.clock.advance(0.05)
    assert fired == [None]
    assert h.shutdown.aborted == 0 and h.shutdown.closed_cleanly == 4
    assert h.factory.engine.ready_count == 1  # job 2 stays for the next start (binlog)


def test_drain_is_bounded_by_the_grace_period():
    h = Harness(grace=3.0)
    holder, ht = h.connect()
    h.send(holder, b"put 0 0 60 1\r\nx\r\nreserve\r\n")
    typing, tt = h.connect()
    h.send(typing, b"stats-tu")  # half a command line, never finished
    fired = []
    h.shutdown.start().addCallback(fired.append)
    h.clock.advance(2.9)
    assert not fired and not ht.disconnecting and not tt.disconnecting
    h.clock.advance(0.2)
    assert ht.disconnecting and tt.disconnecting  # aborted
    h.reap()
    h.clock.advance(0)
    assert fired == [None] and h.shutdown.aborted == 2
    # The aborted worker's job went back to ready, as on any disconnect.
    assert h.factory.engine.ready_count == 1


def test_second_signal_hurries_and_start_is_idempotent():
    h = Harness(grace=60.0)
    holder, ht = h.connect()
    h.send(holder, b"put 0 0 60 1\r\nx\r\nreserve\r\n")
    first, second = [], []
    h.shutdown.start().addCallback(first.append)
    h.shutdown.start().addCallback(second.append)
    assert h.stopped_listening == 1
    h.clock.advance(1)
    assert not first
    h.shutdown.hurry()
    assert ht.disconnecting
    h.reap()
    h.clock.advance(0)
    assert first == second == [None]
    late = []
    h.shutdown.start().addCallback(late.append)
    assert late == [None]


def test_no_connections_finishes_at_once():
    h = Harness()
    fired = []
    h.shutdown.start().addCallback(fired.append)
    assert fired == [None]


# ------------------------------------------------------------- real processes

def _connect(server) -> Wire:
    s = socket.create_connection(server.address, timeout=5)
    return Wire(s)


def _eof(w: Wire, timeout: float = 5.0) -> bool:
    """True when the server closed cleanly (a FIN, not a reset) after what was read."""
    w.sock.settimeout(timeout)
    return w.buf == b"" and w.sock.recv(100) == b""


def test_sigterm_drains_and_keeps_the_binlog(tmp_path):
    binlog = tmp_path / "binlog"
    binlog.mkdir()
    server = start_stalkd(tmp_path, "-b", str(binlog), "--shutdown-grace", "5")
    try:
        producer = _connect(server)
        assert producer.ask(b"put 0 0 60 5\r\nfirst\r\n") == b"INSERTED 1\r\n"
        assert producer.ask(b"put 0 0 60 6\r\nsecond\r\n") == b"INSERTED 2\r\n"
        holder = _connect(server)
        assert holder.ask(b"reserve\r\n") == b"RESERVED 1 5\r\nfirst\r\n"
        waiter = _connect(server)
        assert waiter.ask(b"watch other\r\n") == b"WATCHING 2\r\n"
        assert waiter.ask(b"ignore default\r\n") == b"WATCHING 1\r\n"
        waiter.send(b"reserve\r\n")
        midway = _connect(server)
        midway.send(b"put 0 0 60 5\r\nhe")
        assert waiter.nothing_within(0.1)

        started = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        assert _eof(waiter) and _eof(producer)
        assert time.monotonic() - started < 2
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(server.address, timeout=2)
        midway.send(b"llo\r\n")
        assert midway.reply() == b"DRAINING\r\n"
        assert _eof(midway)
        assert holder.ask(b"reserve-with-timeout 0\r\n") == b"TIMED_OUT\r\n"
        assert holder.ask(b"delete 1\r\n") == b"DELETED\r\n"
        assert _eof(holder)
        assert server.proc.wait(10) == 0
        assert time.monotonic() - started < 4
    finally:
        server.stop()

    again = start_stalkd(tmp_path, "-b", str(binlog))
    try:
        w = _connect(again)
        assert w.ask(b"peek 1\r\n") == b"NOT_FOUND\r\n"
        assert w.ask(b"peek 2\r\n") == b"FOUND 2 6\r\nsecond\r\n"
        assert w.ask(b"peek 3\r\n") == b"NOT_FOUND\r\n"
    finally:
        assert again.stop() == 0


def test_sigint_then_grace_expiry_bounds_exit_and_returns_the_job(tmp_path):
    binlog = tmp_path / "binlog"
    binlog.mkdir()
    server = start_stalkd(tmp_path, "-V", "-b", str(binlog), "--shutdown-grace", "1")
    try:
        holder = _connect(server)
        assert holder.ask(b"put 0 0 60 4\r\nwork\r\nreserve\r\n") == b"INSERTED 1\r\n"
        assert holder.reply() == b"RESERVED 1 4\r\nwork\r\n"
        started = time.monotonic()
        server.proc.send_signal(signal.SIGINT)
        assert holder.nothing_within(0.5)  # still allowed to finish
        assert holder.closed()  # then cut off at the end of the grace period
        assert server.proc.wait(10) == 0
        assert 0.9 < time.monotonic() - started < 4
        log = server.log()
        assert "SIGINT: graceful shutdown" in log and "1 aborted" in log
        # (counts in the right number: it used to say "connection(s)")
        assert "draining 1 connection for at most 1 s" in log, log
        assert "shutdown: 0 connections closed cleanly, 1 aborted at the end" in log, log
    finally:
        server.stop()
    again = start_stalkd(tmp_path, "-V", "-b", str(binlog))
    try:
        w = _connect(again)
        assert w.ask(b"reserve-with-timeout 0\r\n") == b"RESERVED 1 4\r\nwork\r\n"
        w.close()  # else SIGTERM would give this worker the grace period to finish
        # (it used to read "replayed 1 records from 1 files: 1 jobs restored")
        assert "binlog: replayed 1 record from 1 file: 1 job restored" in again.log()
    finally:
        assert again.stop() == 0


def test_second_sigterm_stops_at_once(tmp_path):
    server = start_stalkd(tmp_path, "--shutdown-grace", "60")
    try:
        holder = _connect(server)
        assert holder.ask(b"put 0 0 60 1\r\nx\r\nreserve\r\n") == b"INSERTED 1\r\n"
        assert holder.reply().startswith(b"RESERVED 1")
        started = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        assert holder.nothing_within(0.3)
        server.proc.send_signal(signal.SIGTERM)
        assert server.proc.wait(10) == 0
        assert time.monotonic() - started < 3
    finally:
        server.stop()
