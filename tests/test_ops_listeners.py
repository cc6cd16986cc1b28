"""At start ``stalkd`` and ``twistd -n beanstalk`` say, one line per listener,
what each serves and where: the beanstalk ports, the metrics URL and the web
console's URL (whatever -V says)."""
from __future__ import annotations

import os
import re
import selectors
import signal
import socket
import subprocess
import time

import pytest

from servers import free_port, ours_command
from test_ops_helpers import http_get
from test_ops_startup import _twistd
from wire import Wire

pytest.importorskip("twisted.web")


def _lines_until(proc, stream, done, timeout=20.0):
    """Lines of ``stream`` until ``done(lines)``; the process is left running."""
    sel = selectors.DefaultSelector()
    sel.register(stream, selectors.EVENT_READ)
    buf, lines = b"", []
    deadline = time.monotonic() + timeout
    while not done(lines):
        left = deadline - time.monotonic()
        assert left > 0 and proc.poll() is None, (proc.poll(), lines)
        if sel.select(left):
            chunk = os.read(stream.fileno(), 65536)
            assert chunk, lines
            buf += chunk
            *complete, buf = buf.split(b"\n")
            lines += [c.decode() for c in complete]
    return lines


def _check(lines, beanstalk_port, sock_path):
    """The four lines, each listener's address real: a beanstalk reply, HTTP 200."""
    text = "\n".join(lines)
    assert f"beanstalk on tcp 127.0.0.1:{beanstalk_port}" in text
    assert f"beanstalk on unix {sock_path}" in text or sock_path is None
    metrics = re.search(r"metrics on (http://127\.0\.0\.1:\d+/metrics)$", text, re.M)
    console = re.search(r"web console on (http://localhost:\d+/) \(every interface: "
                        r"0\.0\.0\.0:\d+\)$", text, re.M)
    assert metrics and console, text
    status, _, body = http_get(metrics.group(1))
    assert status == 200 and "beanstalk_current_connections" in body
    status, _, body = http_get(console.group(1))
    assert status == 200 and "<html" in body.lower()
    w = Wire(socket.create_connection(("127.0.0.1", beanstalk_port), timeout=5))
    assert w.ask(b"list-tube-used\r\n") == b"USING default\r\n"
    w.close()


def _stop(proc):
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(15) == 0


def test_stalkd_prints_one_line_per_listener():
    port = free_port()
    proc = subprocess.Popen(ours_command(port, "--metrics", "tcp:0:interface=127.0.0.1",
                                         "--web", "tcp:0"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        lines = _lines_until(proc, proc.stderr, lambda ls: len(ls) >= 3)
        assert len(lines) == 3 and all(l.startswith("stalkd: ") for l in lines), lines
        _check(lines, port, None)
    finally:
        _stop(proc)


def test_twistd_logs_one_line_per_listener(tmp_path):
    port = free_port()
    sock_path = str(tmp_path / "bs.sock")
    proc = subprocess.Popen(_twistd("--listen", f"tcp:{port}:interface=127.0.0.1",
                                    "--listen", f"unix:{sock_path}",
                                    "--metrics", "tcp:0:interface=127.0.0.1", "--web", "tcp:0"),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=tmp_path)
    try:
        lines = _lines_until(proc, proc.stdout, lambda ls: any("web console on" in l for l in ls))
        ours = [l for l in lines if "[twisted_stalk.listening#info]" in l]
        assert len(ours) == 4, lines
        _check(ours, port, sock_path)
    finally:
        _stop(proc)
