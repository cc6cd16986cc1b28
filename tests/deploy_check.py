"""Run a systemd unit's ``ExecStart=`` the way docs/deploy.md installs it, and
check the server it starts: the listener lines, a job through the beanstalk
port, the binlog, ``/metrics``, the console with a bearer token, and a clean
stop on SIGTERM.  Used by tests/test_deploy.py (paths and ports moved into a
temporary directory) and by .ci/run (``python tests/deploy_check.py UNIT
TOKEN``: the installed unit, as its ``User=`` and ``Group=``, after
docs/deploy/install.sh).  Not systemd: none of the unit's sandboxing applies."""
from __future__ import annotations

import json
import os
import re
import selectors
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from typing import Dict, List, Optional


def unit_settings(text: str) -> Dict[str, str]:
    """``key=value`` settings of a unit file (continuation lines joined)."""
    settings: Dict[str, str] = {}
    joined = re.sub(r"\\\n\s*", " ", text)
    for line in joined.splitlines():
        line = line.strip()
        if line and not line.startswith(("#", ";", "[")) and "=" in line:
            key, _, value = line.partition("=")
            settings[key.strip()] = value.strip()
    return settings


def exec_start(text: str) -> List[str]:
    """The unit's ``ExecStart=`` command line, as a list."""
    return shlex.split(unit_settings(text)["ExecStart"])


def _listener_lines(proc: subprocess.Popen, stream, timeout: float) -> List[str]:
    """Output lines until the web console's line (the last listener announced)."""
    sel = selectors.DefaultSelector()
    sel.register(stream, selectors.EVENT_READ)
    buf, lines = b"", []
    deadline = time.monotonic() + timeout
    while not any("web console on" in line for line in lines):
        left = deadline - time.monotonic()
        if left <= 0 or proc.poll() is not None:
            raise AssertionError(f"no listener lines (status {proc.poll()}): {lines}")
        if sel.select(left):
            chunk = os.read(stream.fileno(), 65536)
            if not chunk:
                raise AssertionError(f"output ended (status {proc.wait(5)}): {lines}")
            buf += chunk
            *complete, buf = buf.split(b"\n")
            lines += [c.decode(errors="replace") for c in complete]
    return lines


def _ask(sock: socket.socket, data: bytes) -> bytes:
    sock.sendall(data)
    reply = b""
    while not reply.endswith(b"\r\n"):
        chunk = sock.recv(4096)
        assert chunk, reply
        reply += chunk
    return reply


def check_server(argv: List[str], token: str, binlog_dir: str,
                 run_as: Optional[str] = None, timeout: float = 30.0) -> List[str]:
    """Start ``argv`` (as ``run_as``), check what it serves, stop it; its lines."""
    as_user = {"user": run_as, "group": run_as, "extra_groups": []} if run_as else {}
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, cwd=binlog_dir, **as_user)
    try:
        lines = _listener_lines(proc, proc.stdout, timeout)
        text = "\n".join(lines)
        port = int(re.search(r"beanstalk on tcp \S+:(\d+)", text).group(1))
        metrics = re.search(r"metrics on (http://\S+)", text).group(1)
        console = re.search(r"web console on (http://[^/\s]+/)", text).group(1)
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            assert _ask(sock, b"use deploy-check\r\n") == b"USING deploy-check\r\n"
            assert _ask(sock, b"put 0 0 60 5\r\nhello\r\n").startswith(b"INSERTED ")
        assert any(name.startswith("binlog.") for name in os.listdir(binlog_dir)), \
            os.listdir(binlog_dir)
        with urllib.request.urlopen(metrics, timeout=10) as r:
            assert r.status == 200 and b"beanstalk_current_connections" in r.read()
        request = urllib.request.Request(console + "api/v1/overview",
                                         headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(request, timeout=10) as r:
            assert r.status == 200 and json.load(r)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout) == 0
        return lines
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def main(argv: List[str]) -> int:
    """``deploy_check.py UNIT TOKEN``: the installed unit's command line, as its user."""
    unit, token = argv
    with open(unit) as f:
        text = f.read()
    settings = unit_settings(text)
    binlog_dir = "/var/lib/" + settings["StateDirectory"]
    assert settings["User"] == settings["Group"]
    for line in check_server(exec_start(text), token, binlog_dir, run_as=settings["User"]):
        print(f"  {line}")
    print(f"deploy check: {unit} serves, as {settings['User']}, and stops cleanly")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
