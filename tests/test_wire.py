"""Our server over real loopback sockets: framing, bad input, blocking, signals."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from typing import List

import pytest
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport

from servers import IO_VARIANTS, connect_asap, free_port, ours_command, start_server
from twisted_stalk.engines import open_engine
from twisted_stalk.server import BeanstalkServerFactory
from twisted_stalk.server.protocol import MAX_BUFFERED_WHILE_WAITING
from wire import Wire


@pytest.fixture(params=list(IO_VARIANTS))
def ours(request):
    """Our server, run each way the wire tests cover (servers.IO_VARIANTS)."""
    server = start_server("ours", env=IO_VARIANTS[request.param])
    yield server
    server.stop()


@pytest.fixture
def wire(ours):
    w = Wire(ours.connect())
    yield w
    w.close()


SESSION = (b"use t\r\nput 2 0 10 5\r\nhello\r\nput 1 0 10 4\r\na\r\nb\r\n"
           b"watch t\r\nreserve\r\nstats-job 2\r\nrelease 2 3 0\r\nreserve\r\n"
           b"delete 1\r\nlist-tubes-watched\r\npeek 1\r\nbogus\r\n")
SESSION_REPLIES = 12


def test_pipelined_session_equals_byte_at_a_time(ours):
    whole = Wire(ours.connect())
    whole.send(SESSION)
    a = whole.replies(SESSION_REPLIES)
    other = start_server("ours")
    try:
        split = Wire(other.connect())
        for i in range(len(SESSION)):
            split.send(SESSION[i:i + 1])
        b = split.replies(SESSION_REPLIES)
    finally:
        other.stop()
    assert a == b
    assert a[0] == b"USING t\r\n" and a[4].startswith(b"RESERVED 2 4\r\na\r\nb\r\n")
    assert a[-1] == b"UNKNOWN_COMMAND\r\n"


def test_body_carries_any_bytes(wire):
    body = bytes(range(256)) + b"\r\n\r\nput 1 0 1 1\r\n"
    assert wire.ask(b"put 0 0 10 %d\r\n%s\r\n" % (len(body), body)) == b"INSERTED 1\r\n"
    assert wire.ask(b"peek 1\r\n") == b"FOUND 1 %d\r\n%s\r\n" % (len(body), body)


def test_overlong_line_answered_and_connection_stays(wire):
    wire.send(b"x" * 10000 + b"\r\nlist-tube-used\r\n")
    assert wire.replies(2) == [b"BAD_FORMAT\r\n", b"USING default\r\n"]


@pytest.mark.parametrize("length", [224, 225, 226])
def test_line_length_limit(wire, length):
    """224 bytes with CRLF is a line; longer is BAD_FORMAT and the next command is served.

    (beanstalkd 1.12 swallows the command after a 225-byte line: see docs/compat.md.)
    """
    line = b"x" * (length - 2) + b"\r\n"
    wire.send(line + b"list-tube-used\r\n")
    first = b"UNKNOWN_COMMAND\r\n" if length == 224 else b"BAD_FORMAT\r\n"
    assert wire.replies(2) == [first, b"USING default\r\n"]


def test_overlong_line_split_before_lf(wire):
    wire.send(b"y" * 300 + b"\r")
    wire.send(b"\nlist-tube-used\r\n")
    assert wire.replies(2) == [b"BAD_FORMAT\r\n", b"USING default\r\n"]


def test_job_too_big_body_is_discarded_not_parsed(wire):
    body = b"list-tubes\r\n" * 6000  # 72000 bytes of would-be commands
    wire.send(b"put 0 0 10 %d\r\n" % len(body))
    assert wire.nothing_within(0.2)
    wire.send(body + b"\r\nlist-tube-used\r\n")
    assert wire.replies(2) == [b"JOB_TOO_BIG\r\n", b"USING default\r\n"]


def test_expected_crlf(wire):
    wire.send(b"put 0 0 10 3\r\nabcXYlist-tube-used\r\n")
    assert wire.replies(2) == [b"EXPECTED_CRLF\r\n", b"USING default\r\n"]


def test_max_size_body(ours):
    w = Wire(ours.connect())
    body = b"z" * 65535
    assert w.ask(b"put 0 0 10 65535\r\n" + body + b"\r\n") == b"INSERTED 1\r\n"
    w.send(b"put 0 0 10 65536\r\n" + body + b"zz\r\n")
    assert w.reply() == b"JOB_TOO_BIG\r\n"


def test_disconnect_returns_reserved_jobs(ours):
    a = Wire(ours.connect())
    a.ask(b"put 0 0 100 1\r\nx\r\n")
    assert a.ask(b"reserve\r\n").startswith(b"RESERVED 1 1")
    a.close()
    b = Wire(ours.connect())
    for _ in range(100):
        if b"current-jobs-ready: 1\n" in b.ask(b"stats\r\n"):
            break
        time.sleep(0.02)
    assert b.ask(b"reserve-with-timeout 0\r\n").startswith(b"RESERVED 1 1")


def test_quit_returns_reserved_jobs(ours):
    a = Wire(ours.connect())
    a.ask(b"put 0 0 100 1\r\nx\r\n")
    a.ask(b"reserve\r\n")
    a.send(b"quit\r\n")
    assert a.closed()
    b = Wire(ours.connect())
    for _ in range(100):
        reply = b.ask(b"reserve-with-timeout 0\r\n")
        if reply != b"TIMED_OUT\r\n":
            break
        time.sleep(0.02)
    assert reply.startswith(b"RESERVED 1 1")


def test_blocked_reserve_buffers_input_and_serves_it_after(ours):
    worker = Wire(ours.connect())
    worker.send(b"reserve\r\nlist-tube-used\r\nstats-tube default\r\n")
    assert worker.nothing_within(0.2)
    producer = Wire(ours.connect())
    producer.ask(b"put 0 0 10 2\r\nhi\r\n")
    replies = worker.replies(3)
    assert replies[0] == b"RESERVED 1 2\r\nhi\r\n"
    assert replies[1] == b"USING default\r\n"
    assert b"current-jobs-reserved: 1\n" in replies[2]


def test_blocked_client_disconnect_is_noticed(ours):
    worker = Wire(ours.connect())
    worker.send(b"reserve\r\n" + b"list-tubes\r\n" * 1000)
    assert worker.nothing_within(0.1)
    worker.close()
    watcher = Wire(ours.connect())
    for _ in range(100):
        stats = watcher.ask(b"stats\r\n")
        if b"current-waiting: 0\n" in stats and b"current-connections: 1\n" in stats:
            break
        time.sleep(0.02)
    else:
        pytest.fail(stats.decode())
    producer = Wire(ours.connect())
    producer.ask(b"put 0 0 10 1\r\nx\r\n")
    assert watcher.ask(b"reserve-with-timeout 0\r\n").startswith(b"RESERVED 1 1")


def test_half_closed_waiting_client_gets_timed_out(wire):
    wire.send(b"reserve\r\n")
    assert wire.nothing_within(0.1)
    wire.sock.shutdown(socket.SHUT_WR)
    assert wire.reply() == b"TIMED_OUT\r\n"


def test_a_client_that_half_closes_after_many_commands_gets_every_reply(wire):
    """More commands than a read runs in one turn (server/flow.py), then a
    half-close: every one is answered before the server closes (it used to
    close after the first turn's)."""
    wire.sock.sendall(b"list-tube-used\r\n" * 500)
    wire.sock.shutdown(socket.SHUT_WR)
    replies = b""
    while True:
        data = wire.sock.recv(65536)
        if not data:
            break
        replies += data
    assert replies == b"USING default\r\n" * 500


def test_drain_mode_on_sigusr1(ours):
    w = Wire(ours.connect())
    assert w.ask(b"put 0 0 10 1\r\nx\r\n") == b"INSERTED 1\r\n"
    ours.proc.send_signal(signal.SIGUSR1)
    for _ in range(100):
        if b"draining: true\n" in w.ask(b"stats\r\n"):
            break
        time.sleep(0.02)
    assert w.ask(b"put 0 0 10 1\r\nx\r\n") == b"DRAINING\r\n"
    assert w.ask(b"reserve-with-timeout 0\r\n").startswith(b"RESERVED 1 1")


def test_sigterm_exits_zero(ours):
    assert ours.stop(signal.SIGTERM) == 0


# ------------------------------------------------------------- in-memory bounds

def _connected(max_job_size=65535):
    clock = Clock()
    factory = BeanstalkServerFactory(clock, open_engine("memory:", clock, max_job_size=max_job_size))
    proto = factory.buildProtocol(None)
    transport = StringTransport()
    proto.makeConnection(transport)
    return clock, factory, proto, transport


def test_memory_bounded_for_endless_line():
    _, _, proto, transport = _connected()
    for _ in range(1000):
        proto.dataReceived(b"a" * 10000)
        assert len(proto._buf) <= 224
    assert transport.value() == b""  # answered once its CRLF arrives, as beanstalkd
    proto.dataReceived(b"\r\nlist-tube-used\r\n")
    assert transport.value() == b"BAD_FORMAT\r\nUSING default\r\n"


def test_memory_bounded_for_endless_too_big_body():
    _, _, proto, transport = _connected()
    proto.dataReceived(b"put 0 0 1 4294967295\r\n")
    for _ in range(1000):
        proto.dataReceived(b"b" * 10000)
        assert proto._buf == b""
    assert transport.value() == b""


def test_a_reserve_answered_later_times_out_if_the_client_half_closed_meanwhile():
    """An engine that answers a reserve later (``reserve_then``: the
    PostgreSQL engine's statement) and finds no job: if the client
    half-closed while it looked, the reserve times out at once instead of
    waiting for ever (readConnectionLost had no wait to cancel yet).  It
    failed once on PyPy in CI, where the statement outlasted the test's
    0.1 s."""
    from twisted_stalk.core.later import LATER
    clock = Clock()
    engine = open_engine("memory:", clock)
    memory = type(engine)
    asked = []

    class AnswersLater(memory):  # the in-memory engine, its reserves answered by the test
        __slots__ = ()
        pipelined_puts = True

        def reserve_then(self, s, timeout, answer):
            asked.append((s, answer))
            return LATER
    engine.__class__ = AnswersLater
    factory = BeanstalkServerFactory(clock, engine)
    proto = factory.buildProtocol(None)
    transport = StringTransport()
    proto.makeConnection(transport)
    proto.dataReceived(b"reserve\r\n")
    proto.readConnectionLost()
    assert transport.value() == b""
    (s, answer), = asked
    answer(memory.reserve(engine, s))  # no job: the session waits now
    assert transport.value() == b"TIMED_OUT\r\n"
    assert transport.disconnecting  # then it closes, as for a wait cancelled at once
    engine.put(engine.open_session(None), 0, 0, 60, b"x\r\n")
    assert not engine.wakeups  # the wait was withdrawn: nobody to hand the job to


def test_waiting_client_input_buffer_is_bounded():
    _, _, proto, transport = _connected()
    proto.dataReceived(b"reserve\r\n")
    chunk = b"list-tubes\r\n" * 1000
    while transport.producerState != "paused":
        proto.dataReceived(chunk)
    assert len(proto._buf) <= MAX_BUFFERED_WHILE_WAITING + len(chunk)
    # A transport that keeps delivering anyway gets the connection dropped.
    while not transport.disconnecting and len(proto._buf) < 10 * MAX_BUFFERED_WHILE_WAITING:
        proto.dataReceived(chunk)
    assert transport.disconnecting and proto._buf == b""


def test_timers_use_one_delayed_call():
    clock, factory, proto, transport = _connected()
    for i in range(100):
        proto.dataReceived(b"put 0 %d 10 1\r\nx\r\n" % (i + 1))
    assert len(clock.getDelayedCalls()) == 1
    clock.advance(100)
    assert factory.engine.ready_count == 100
    assert clock.getDelayedCalls() == []


def test_reserve_timeout_and_ttr_with_clock():
    clock, factory, proto, transport = _connected()
    proto.dataReceived(b"reserve-with-timeout 2\r\n")
    clock.advance(1.9)
    assert transport.value() == b""
    clock.advance(0.2)
    assert transport.value() == b"TIMED_OUT\r\n"
    transport.clear()
    proto.dataReceived(b"put 0 0 2 1\r\nx\r\nreserve\r\nreserve\r\n")
    assert transport.value() == b"INSERTED 1\r\nRESERVED 1 1\r\nx\r\n"
    clock.advance(0.99)
    assert transport.value() == b"INSERTED 1\r\nRESERVED 1 1\r\nx\r\n"
    clock.advance(0.02)  # the last second of the TTR begins
    assert transport.value().endswith(b"x\r\nDEADLINE_SOON\r\n")
    transport.clear()
    proto.dataReceived(b"reserve\r\n")  # issued inside the margin
    assert transport.value() == b"DEADLINE_SOON\r\n"
    transport.clear()
    clock.advance(1.0)
    assert factory.engine.job_timeouts == 1
    proto.dataReceived(b"reserve\r\n")
    assert transport.value() == b"RESERVED 1 1\r\nx\r\n"


# ------------------------------------------------------------------ the drop-in

#: A bare interpreter binding a port: what any Python server pays before it listens.
_BARE_LISTENER = """
import socket, sys, time
s = socket.socket()
s.bind(("127.0.0.1", int(sys.argv[-1])))
s.listen(8)
time.sleep(30)
"""


def _seconds_until_accepting(command: List[str], port: int, env: dict, talk: bool) -> float:
    started = time.monotonic()
    proc = subprocess.Popen(command, stderr=subprocess.DEVNULL, env=env)
    try:
        sock = connect_asap(port, proc, started)
        accepted_after = time.monotonic() - started
        if talk:
            assert Wire(sock).ask(b"list-tube-used\r\n") == b"USING default\r\n"
        sock.close()
        return accepted_after
    finally:
        proc.terminate()
        proc.wait(10)


def test_stalkd_listens_within_30ms_of_a_bare_interpreter(compiled_env):
    """Suites written for beanstalkd connect 0.1 s after the launch: stalkd
    listens at most 30 ms after the same interpreter binding a port would
    (measured: 6-10 ms; the interpreter alone takes 10 ms in a clean venv,
    60-75 ms on this machine's pyenv CPython, whose site runs a .pth).
    Byte code cached, as an installed server has it.  Interleaved pairs,
    the best of five: a busy machine stretches single launches."""
    margins = []
    for _ in range(5):
        port = free_port()
        ours = _seconds_until_accepting(ours_command(port), port, compiled_env, talk=True)
        port = free_port()
        bare = _seconds_until_accepting([sys.executable, "-c", _BARE_LISTENER, str(port)],
                                        port, compiled_env, talk=False)
        margins.append(ours - bare)
        if margins[-1] <= 0.03:
            break
    assert min(margins) <= 0.03, margins


def test_stalkd_bad_flag_and_busy_port():
    bad = subprocess.run([sys.executable, "-m", "twisted_stalk_cli.stalkd", "-x"],
                         capture_output=True, text=True, timeout=30)
    assert bad.returncode == 5
    assert bad.stderr.splitlines() == ["stalkd: unknown flag: -x (stalkd -h lists the flags)"]
    assert "Traceback" not in bad.stderr
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    port = holder.getsockname()[1]
    busy = subprocess.run(ours_command(port), capture_output=True, text=True, timeout=30)
    holder.close()
    assert busy.returncode == 111
    assert busy.stderr.strip().count("\n") == 0 and "Address already in use" in busy.stderr


def test_stalkd_unix_socket(tmp_path):
    path = str(tmp_path / "bs.sock")
    proc = subprocess.Popen([sys.executable, "-m", "twisted_stalk_cli.stalkd", "-l", "unix:" + path])
    try:
        for _ in range(500):
            if os.path.exists(path):
                try:
                    s = socket.socket(socket.AF_UNIX)
                    s.connect(path)
                    break
                except OSError:
                    s.close()
            time.sleep(0.01)
        w = Wire(s)
        assert w.ask(b"put 0 0 1 1\r\nx\r\n") == b"INSERTED 1\r\n"
    finally:
        proc.terminate()
        assert proc.wait(10) == 0


def test_stalkd_version_and_help():
    out = subprocess.run([sys.executable, "-m", "twisted_stalk_cli.stalkd", "-v"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0 and "1.13" in out.stdout
    out = subprocess.run([sys.executable, "-m", "twisted_stalk_cli.stalkd", "-h"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0 and "-z BYTES" in out.stdout


def test_stalkd_max_job_size_flag():
    server = start_server("ours", "-z", "10")
    try:
        w = Wire(server.connect())
        assert w.ask(b"put 0 0 1 10\r\n0123456789\r\n") == b"INSERTED 1\r\n"
        assert w.ask(b"put 0 0 1 11\r\n0123456789a\r\n") == b"JOB_TOO_BIG\r\n"
        assert b"max-job-size: 10\n" in w.ask(b"stats\r\n")
    finally:
        server.stop()
