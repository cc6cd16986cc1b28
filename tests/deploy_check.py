"""Run a systemd unit's ``ExecStart=`` the way docs/deploy.md installs it, and
check the server it starts: the listener lines, a job through the beanstalk
port, the binlog, ``/metrics``, the console with a bearer token (and a person's
login), the unit's reload (the credentials read again), and a clean stop on
SIGTERM.  Used by tests/test_deploy.py (paths and ports moved into a
temporary directory) and by .ci/run (``python tests/deploy_check.py UNIT
TOKEN USER``: the installed unit, as its ``User=`` and ``Group=``, after
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
from typing import Callable, Dict, List, Optional, Tuple


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


def exec_reload(text: str, pid: int) -> List[str]:
    """The unit's ``ExecReload=`` command line for the process ``pid``."""
    return shlex.split(unit_settings(text)["ExecReload"].replace("$MAINPID", str(pid)))


class _Output:
    """A process's output, line by line, as it comes."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc = proc
        self.sel = selectors.DefaultSelector()
        self.sel.register(proc.stdout, selectors.EVENT_READ)
        self.buf = b""
        self.lines: List[str] = []

    def until(self, text: str, timeout: float) -> List[str]:
        """All lines so far, once one holds ``text``."""
        deadline = time.monotonic() + timeout
        while not any(text in line for line in self.lines):
            left = deadline - time.monotonic()
            if left <= 0 or self.proc.poll() is not None:
                raise AssertionError(f"no {text!r} (status {self.proc.poll()}): {self.lines}")
            if self.sel.select(left):
                chunk = os.read(self.proc.stdout.fileno(), 65536)
                if not chunk:
                    raise AssertionError(f"output ended (status {self.proc.wait(5)}): "
                                         f"{self.lines}")
                self.buf += chunk
                *complete, self.buf = self.buf.split(b"\n")
                self.lines += [c.decode(errors="replace") for c in complete]
        return self.lines


def _ask(sock: socket.socket, data: bytes) -> bytes:
    sock.sendall(data)
    reply = b""
    while not reply.endswith(b"\r\n"):
        chunk = sock.recv(4096)
        assert chunk, reply
        reply += chunk
    return reply


def _login(console: str, user: str, password: str) -> None:
    """A person logs in on the console (as the page does) and may look."""
    request = urllib.request.Request(console + "api/v1/login", method="POST",
                                     data=json.dumps({"user": user, "password": password}).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as r:
        cookie = r.headers["Set-Cookie"].split(";")[0]
        assert r.status == 200 and json.load(r)["can_act"]
    request = urllib.request.Request(console + "api/v1/overview", headers={"Cookie": cookie})
    with urllib.request.urlopen(request, timeout=10) as r:
        assert r.status == 200


def check_server(argv: List[str], token: str, binlog_dir: str,
                 run_as: Optional[str] = None, timeout: float = 30.0,
                 person: Optional[Tuple[str, str]] = None,
                 reload: Optional[Callable[[int], List[str]]] = None) -> List[str]:
    """Start ``argv`` (as ``run_as``), check what it serves, stop it; its lines.
    ``person``: a user and password that logs in on the console; ``reload``:
    the command that reloads the process ``pid``, after which the server says
    it read its credentials again (and still serves them)."""
    as_user = {"user": run_as, "group": run_as, "extra_groups": []} if run_as else {}
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, cwd=binlog_dir, **as_user)
    try:
        output = _Output(proc)
        lines = output.until("web console on", timeout)  # the last listener announced
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
        if person is not None:
            _login(console, *person)
        if reload is not None:
            subprocess.run(reload(proc.pid), check=True, timeout=10)
            output.until("web console: credentials reloaded from", timeout)
            if person is not None:
                _login(console, *person)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout) == 0
        return output.lines
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def main(argv: List[str]) -> int:
    """``deploy_check.py UNIT TOKEN USER``, the user's password on standard input:
    the installed unit's command line, as its user; the person the install
    added logs in, before and after the unit's reload."""
    unit, token, user = argv
    password = sys.stdin.readline().rstrip("\n")
    with open(unit) as f:
        text = f.read()
    settings = unit_settings(text)
    binlog_dir = "/var/lib/" + settings["StateDirectory"]
    assert settings["User"] == settings["Group"]
    for line in check_server(exec_start(text), token, binlog_dir, run_as=settings["User"],
                             person=(user, password),
                             reload=lambda pid: exec_reload(text, pid)):
        print(f"  {line}")
    print(f"deploy check: {unit} serves, as {settings['User']}, {user} logs in, a reload "
          "reads the credentials again, and it stops cleanly")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
