"""The lean main loop (server/reactor.py) and its fallback to Twisted's own."""
from __future__ import annotations

import subprocess
import sys
import time

import pytest
from twisted.internet.epollreactor import EPollReactor

from servers import free_port, ours_command, start_server
from test_ops_startup import _twistd
from test_wire_abuse import cpu_seconds
from twisted_stalk.server import _busypoll
from twisted_stalk.server import reactor as lean


def test_upgrade_gives_a_fresh_epoll_reactor_the_lean_loop():
    r = EPollReactor()
    try:
        assert lean.upgrade(r)
        assert type(r) is lean.LeanEPollReactor
        assert not lean.upgrade(r)  # once only
    finally:
        r._poller.close()


def test_a_reactor_missing_what_the_loop_reads_is_left_alone(monkeypatch):
    r = EPollReactor()
    try:
        monkeypatch.setattr(lean, "_RELIES_ON", lean._RELIES_ON + ("_no_such_member",))
        assert not lean.compatible(r)
        assert not lean.upgrade(r)
        assert type(r) is EPollReactor
    finally:
        r._poller.close()


def test_install_falls_back_to_twisteds_reactor():
    code = ("from twisted_stalk.server import reactor as lean;"
            "lean._RELIES_ON += ('_no_such_member',);"
            "r = lean.install(); print(type(r).__name__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["EPollReactor"]
    code = "from twisted_stalk.server import reactor as lean; print(type(lean.install()).__name__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["LeanEPollReactor"]


# ------------------------------------------------------------------ busy poll

def test_spin_returns_the_first_events_a_nonblocking_poll_finds():
    calls = []
    answers = [[], [], [(7, 1)]]

    def poll(timeout, maxevents):
        calls.append((timeout, maxevents))
        return answers[len(calls) - 1]

    assert _busypoll.spin(poll, 10.0, 3) == [(7, 1)]
    assert calls == [(0, 3)] * 3  # never a blocking wait


def test_spin_gives_up_after_its_window():
    calls = []
    assert _busypoll.spin(lambda t, n: calls.append(t) or [], 0.0, 1) == []
    assert calls == [0]
    started = time.perf_counter()
    assert _busypoll.spin(lambda t, n: [], 0.002, 1) == []
    assert 0.002 <= time.perf_counter() - started < 1.0


@pytest.mark.parametrize("given, env, window", [
    (None, None, 0.0), ("50", None, 50e-6), (None, "30", 30e-6), ("0", "30", 0.0),
    (1000, None, 1e-3)])
def test_busy_poll_window(monkeypatch, given, env, window):
    monkeypatch.delenv(_busypoll.ENV, raising=False)
    if env is not None:
        monkeypatch.setenv(_busypoll.ENV, env)
    assert _busypoll.window_from(given) == pytest.approx(window)


@pytest.mark.parametrize("given", ["-1", "1001", "fast", "1.5"])
def test_busy_poll_window_refuses(given):
    with pytest.raises(ValueError, match="--busy-poll must be"):
        _busypoll.window_from(given)


def test_busy_poll_only_on_the_lean_loop():
    lean_reactor, plain = lean.LeanEPollReactor(), EPollReactor()
    try:
        assert lean.enable_busy_poll(lean_reactor, 50e-6) and lean_reactor.busy_poll == 50e-6
        assert not lean.enable_busy_poll(plain, 50e-6) and not hasattr(plain, "busy_poll")
        assert not lean.enable_busy_poll(lean.LeanEPollReactor(), 0.0)
    finally:
        lean_reactor._poller.close()
        plain._poller.close()


def test_busy_poll_never_makes_a_timed_call_late():
    """With a window longer than the wait for the next timed call, the loop
    does not spin first (it would fire a whole window late)."""
    r = lean.LeanEPollReactor()
    r.busy_poll = 0.5
    fired = []
    r.callLater(0.05, lambda: (fired.append(time.monotonic()), r.stop()))
    started = time.monotonic()
    r.run(installSignalHandlers=False)
    assert fired and fired[0] - started < 0.4


def test_busy_polling_server_answers_and_sleeps_when_idle():
    """With the widest window the server answers as usual, and once its
    clients stop it sleeps: its CPU time over an idle half second stays small."""
    server = start_server("ours", "--busy-poll", "1000")
    try:
        sock = server.connect()
        for _ in range(200):
            sock.sendall(b"put 0 0 60 2\r\nhi\r\n")
            assert sock.recv(100).startswith(b"INSERTED ")
        before = cpu_seconds(server.proc.pid)
        time.sleep(0.5)  # real idle time: the property is about wall-clock sleeping
        assert cpu_seconds(server.proc.pid) - before < 0.1
        sock.close()
    finally:
        server.stop()


def test_busy_poll_usage_errors():
    result = subprocess.run(ours_command(free_port(), "--busy-poll", "2000"),
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 5
    assert result.stderr.strip().splitlines() == [
        "stalkd: --busy-poll must be 0 to 1000 microseconds, not 2000 (stalkd -h lists the flags)"]
    result = subprocess.run(_twistd("--busy-poll", "x"), capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.splitlines() == [
        "twistd beanstalk: --busy-poll must be microseconds (0 to 1000), not 'x' "
        "(twistd beanstalk --help lists the options)"]
