"""Socket activation as docs/operations.md's systemd unit sets it up: the sockets are
bound by the "manager" (here a small launcher standing in for systemd, passing them as
fds 3 and 4 with LISTEN_FDS/LISTEN_PID) and ``twistd beanstalk`` adopts them through
``systemd:`` endpoints; SIGTERM (systemd's KillSignal) exits 0 after draining."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from servers import free_port
from test_ops_helpers import http_get, wait_http
from wire import Wire

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

LAUNCHER = r"""
import os, socket, sys
ports = [int(p) for p in sys.argv[1:3]]
for fd, port in zip((3, 4), ports):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", port))
    s.listen(128)
    got = s.detach()
    if got != fd:
        os.dup2(got, fd)
        os.close(got)
    os.set_inheritable(fd, True)
os.environ["LISTEN_FDS"] = "2"
os.environ["LISTEN_PID"] = str(os.getpid())   # exec keeps the pid, as systemd requires
os.environ["LISTEN_FDNAMES"] = "beanstalk:metrics"
os.execv(sys.argv[3], sys.argv[3:])
"""


def test_twistd_with_systemd_socket_activation(tmp_path):
    twistd = os.path.join(os.path.dirname(sys.executable), "twistd")
    if not os.path.exists(twistd):
        pytest.skip("no twistd script")
    port, metrics_port = free_port(), free_port()
    state = tmp_path / "state"
    state.mkdir()
    command = [twistd, "--nodaemon", "--pidfile=", "beanstalk",
               "--listen", "systemd:domain=INET:index=0",
               "--metrics", "systemd:domain=INET:index=1",
               "-b", str(state), "--shutdown-grace", "5"]
    proc = subprocess.Popen([sys.executable, "-c", LAUNCHER, str(port), str(metrics_port),
                             *command], cwd=tmp_path, env=dict(os.environ, PYTHONPATH=ROOT),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        # Once the "manager" has bound the sockets, clients may connect even
        # before the server has started: the kernel queues them.
        deadline = time.monotonic() + 10
        while True:
            try:
                w = Wire(socket.create_connection(("127.0.0.1", port), timeout=20))
                break
            except ConnectionRefusedError:
                assert time.monotonic() < deadline and proc.poll() is None
                time.sleep(0.01)
        w.sock.settimeout(20)
        assert w.ask(b"put 0 0 10 7\r\nsystemd\r\n") == b"INSERTED 1\r\n"
        wait_http(f"http://127.0.0.1:{metrics_port}/readyz")
        assert http_get(f"http://127.0.0.1:{metrics_port}/readyz")[0] == 200
        w.send(b"watch nothing-here\r\nignore default\r\nreserve\r\n")
        assert w.replies(2) == [b"WATCHING 2\r\n", b"WATCHING 1\r\n"]
        assert w.nothing_within(0.1)
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert w.closed()
        assert proc.wait(15) == 0
        assert time.monotonic() - started < 5
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert any(name.startswith("binlog.") for name in os.listdir(state))
