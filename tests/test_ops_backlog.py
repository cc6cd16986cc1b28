"""At the connection limit a new client used to wait in the listen backlog in
silence, for as long as it took a worker to hang up (hours).  Now a connection
that waited longer than ``--max-connections-wait`` is accepted and closed at
once, counted in ``beanstalk_refused_connections_total`` and logged; one that
a freed place reaches within the wait is served."""
from __future__ import annotations

import socket
import subprocess
import time

import pytest
from twisted.internet.task import Clock

from servers import free_port, ours_command
from test_ops_helpers import http_get, start_stalkd, wait_http
from test_ops_limits import _connect
from twisted_stalk.engines import open_engine
from twisted_stalk.server import BeanstalkServerFactory, limits
from wire import Wire


class _ListeningPort:
    """A listening port over a real socket; accepting is left to the test."""

    connected = True

    def __init__(self, path: str = "") -> None:
        self.socket = socket.socket(socket.AF_UNIX if path else socket.AF_INET)
        self.socket.bind(path or ("127.0.0.1", 0))
        self.socket.listen(16)
        self.socket.setblocking(False)
        self.address = self.socket.getsockname()
        self.reading = True

    def stopReading(self) -> None:
        self.reading = False

    def startReading(self) -> None:
        self.reading = True


def _limit_of_one(port: _ListeningPort):
    """(clock, factory, limit): one place, a wait of 1 s, ``port`` watched."""
    clock = Clock()
    factory = BeanstalkServerFactory(clock, open_engine("memory:", clock))
    limit = limits.install_connection_limit(factory, 1, clock, wait=1.0)
    limit.watch(port)
    return clock, factory, limit


def _client(port: _ListeningPort) -> socket.socket:
    c = socket.socket(port.socket.family)
    c.settimeout(5)
    c.connect(port.address)
    c.setblocking(False)
    return c


def _is_closed(c: socket.socket) -> bool:
    try:
        return c.recv(1) == b""
    except BlockingIOError:
        return False


@pytest.mark.skipif(not hasattr(socket, "TCP_INFO"), reason="reads the backlog with TCP_INFO")
def test_a_connection_that_waited_longer_than_the_wait_is_closed_and_counted():
    port = _ListeningPort()
    clock, factory, limit = _limit_of_one(port)
    try:
        first = _client(port)  # queued at 0
        held, _ = _connect(factory)  # the one place: paused, the backlog watched
        assert not port.reading and limits.backlog_length(port.socket) == 1
        clock.advance(0.5)
        second = _client(port)  # first seen by the sweep at 0.75
        clock.advance(0.25)
        clock.advance(0.2)
        assert not _is_closed(first) and limit.refused == 0
        clock.advance(0.05)  # 1.0: the first waited the whole wait
        assert _is_closed(first) and not _is_closed(second)
        assert limit.refused == 1 and limits.backlog_length(port.socket) == 1
        # A place frees within the second's wait (at 1.25): the port accepts
        # it (served), and another connection takes the place again.
        clock.advance(0.25)
        held.connectionLost(None)
        assert port.reading
        served, _ = port.socket.accept()
        held, _ = _connect(factory)
        third = _client(port)  # first seen by the sweep at 1.5
        for _ in range(4):
            clock.advance(0.25)
        assert not _is_closed(third) and limit.refused == 1  # 2.25: not yet
        clock.advance(0.25)
        assert _is_closed(third) and limit.refused == 2  # 2.5
        assert not _is_closed(second)  # served, never closed by the sweeps
        served.close()
        for c in (first, second, third):
            c.close()
    finally:
        port.socket.close()


def test_the_wait_is_off_the_clock_once_a_place_frees():
    port = _ListeningPort()
    clock, factory, limit = _limit_of_one(port)
    try:
        held, _ = _connect(factory)
        assert clock.getDelayedCalls()  # sweeping while paused
        held.connectionLost(None)
        assert not clock.getDelayedCalls()  # and only then
    finally:
        port.socket.close()


def _hold_the_place(server) -> Wire:
    """The one place (start_stalkd's probe may hold it for a moment)."""
    deadline = time.monotonic() + 10
    while True:
        w = Wire(socket.create_connection(server.address, timeout=5))
        try:
            if w.ask(b"list-tube-used\r\n") == b"USING default\r\n":
                return w
        except (EOFError, ConnectionResetError):
            pass
        w.close()
        assert time.monotonic() < deadline


def test_at_the_limit_a_client_is_closed_after_the_wait(tmp_path):
    metrics_port = free_port()
    server = start_stalkd(tmp_path, "--max-connections", "1", "--max-connections-wait", "1",
                          "--metrics", f"tcp:{metrics_port}:interface=127.0.0.1")
    try:
        wait_http(f"http://127.0.0.1:{metrics_port}/healthz")
        held = _hold_the_place(server)
        _, _, body = http_get(f"http://127.0.0.1:{metrics_port}/metrics")
        before = refused(body)
        late = Wire(socket.create_connection(server.address, timeout=5))
        started = time.monotonic()
        late.send(b"list-tube-used\r\n")
        late.sock.settimeout(5)
        assert late.sock.recv(100) == b""  # end of file: no reply, and no reset
        took = time.monotonic() - started
        assert 0.9 <= took <= 1.8, took  # the wait, plus at most a sweep's tick
        _, _, body = http_get(f"http://127.0.0.1:{metrics_port}/metrics")
        assert refused(body) == before + 1
        assert ("at the limit of 1 connection (waited 1 s in the backlog)"  # not "1 connections"
                in server.wait_log("refused connection from"))
        # A place that frees within the wait serves the one waiting.
        waiting = Wire(socket.create_connection(server.address, timeout=5))
        waiting.send(b"list-tube-used\r\n")
        assert waiting.nothing_within(0.3)
        held.close()
        waiting.sock.settimeout(5)
        assert waiting.reply() == b"USING default\r\n"
        waiting.close()
    finally:
        assert server.stop() == 0


def refused(body: str) -> int:
    line = next(l for l in body.splitlines()
                if l.startswith("beanstalk_refused_connections_total "))
    return int(line.split()[1])



def test_twistd_and_stalkd_take_the_wait():
    from twisted.python import usage

    from twisted_stalk.server import ops
    from twisted_stalk.tap import Options
    from twisted_stalk import stalkd
    options = Options()
    options.parseOptions(["--max-connections", "3", "--max-connections-wait", "0.5"])
    clock = Clock()
    factory = BeanstalkServerFactory(clock, open_engine("memory:", clock))
    ops.configure(factory, options, clock)
    assert factory.connection_limit.wait == 0.5
    defaults = Options()
    defaults.parseOptions([])
    assert defaults["max-connections-wait"] == limits.DEFAULT_WAIT
    with pytest.raises(usage.UsageError, match="max-connections-wait must not be negative"):
        Options().parseOptions(["--max-connections-wait", "-1"])
    assert stalkd.parse_argv(["--max-connections-wait", "3"])["max-connections-wait"] == "3"
    bad = subprocess.run(ours_command(free_port(), "--max-connections-wait", "soon"),
                         capture_output=True, text=True, timeout=30)
    assert bad.returncode == 5 and "--max-connections-wait needs a number" in bad.stderr


def test_where_the_queue_cannot_be_read_a_backlog_waiting_the_whole_wait_is_emptied(tmp_path):
    """A unix socket has no TCP_INFO: a backlog that stays non-empty for the
    wait is emptied, each connection counted."""
    port = _ListeningPort(str(tmp_path / "s"))
    clock, factory, limit = _limit_of_one(port)
    clients = []
    try:
        assert limits.backlog_length(port.socket) is None
        clients += [_client(port), _client(port)]  # waiting when the limit is reached (at 0)
        held, _ = _connect(factory)
        for _ in range(4):
            assert not any(_is_closed(c) for c in clients) and limit.refused == 0
            clock.advance(0.25)
        assert all(_is_closed(c) for c in clients) and limit.refused == 2
    finally:
        for c in clients:
            c.close()
        port.socket.close()


@pytest.mark.skipif(not hasattr(socket, "TCP_INFO"), reason="reads the backlog with TCP_INFO")
def test_a_client_closed_after_the_wait_reads_end_of_file_even_after_sending_a_command():
    """The close is clean for both kinds of client: one that sent nothing, and
    one that sent a command while it waited (the usual beanstalk client: it
    used to get a connection reset, since closing a socket with unread bytes
    makes the kernel answer with RST instead of FIN)."""
    port = _ListeningPort()
    clock, factory, limit = _limit_of_one(port)
    try:
        held, _ = _connect(factory)  # the one place: paused, the backlog watched
        silent = _client(port)
        talker = _client(port)
        talker.sendall(b"stats\r\n")
        for _ in range(5):  # 1.25 s: both waited the whole wait
            clock.advance(0.25)
        assert limit.refused == 2
        for c in (silent, talker):
            c.settimeout(5)
            assert c.recv(100) == b""  # end-of-file, not ConnectionResetError
            c.close()
    finally:
        port.socket.close()
