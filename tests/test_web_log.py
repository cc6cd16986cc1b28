"""The console's audit trail: a real ``stalkd --web`` started without ``-V``
logs every action (who, what, how many jobs) and every login and failed login
on stderr, while the rest of its info lines stay quiet."""
from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.request

from servers import free_port
from test_ops_helpers import start_stalkd, wait_http
from twisted_stalk.web.auth import hash_token
from web_harness import cheap_hash
from wire import Wire

TOKEN = "deploy-token-0123456789abcdef"


def _post(url, body, token=None):
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=5) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def _log_line(server, needle, timeout=5.0):
    """The server's log line holding ``needle`` (the log is written as it goes)."""
    deadline = time.monotonic() + timeout
    while True:
        for line in server.log().splitlines():
            if needle in line:
                return line
        assert time.monotonic() < deadline, f"{needle!r} not logged:\n{server.log()}"
        time.sleep(0.02)


def test_actions_and_logins_are_logged_without_verbose(tmp_path):
    auth = tmp_path / "console.auth"
    auth.write_text(f"user alice admin {cheap_hash('wonderland')}\n"
                    f"token deploy-bot admin {hash_token(TOKEN)}\n")
    web_port = free_port()
    server = start_stalkd(tmp_path, "--web", f"tcp:{web_port}:interface=127.0.0.1",
                          "--web-auth", str(auth))
    api = f"http://127.0.0.1:{web_port}/api/v1/"
    try:
        wait_http(api + "whoami")
        w = Wire(socket.create_connection(server.address, timeout=5))
        assert w.ask(b"use mail\r\n") == b"USING mail\r\n"
        for _ in range(3):
            assert w.ask(b"put 0 0 60 1\r\nx\r\n").startswith(b"INSERTED")

        assert _post(api + "login", {"user": "alice", "password": "wrong"})[0] == 401
        assert "failed login for alice" in _log_line(server, "failed login")
        assert _post(api + "login", {"user": "alice", "password": "wonderland"})[0] == 200
        assert "alice logged in from 127.0.0.1" in _log_line(server, "logged in")

        # Each action in its own words (it said "put single: 1 of 1 jobs").
        status, answer = _post(api + "jobs/delete", {"ids": [1, 2]}, TOKEN)
        assert (status, answer["task"]["done"]) == (200, 2)
        assert _log_line(server, " deleted ").endswith(
            "web console: deploy-bot deleted 2 of 2 jobs (jobs 1, 2)")
        assert _post(api + "jobs/delete", {"ids": [3]}, TOKEN)[0] == 200
        assert _log_line(server, " deleted job").endswith("web console: deploy-bot deleted job 3")
        assert _post(api + "tubes/mail/kick", {"bound": 5}, TOKEN)[0] == 200
        assert _log_line(server, " kicked ").endswith(
            "web console: deploy-bot kicked 0 delayed jobs in tube mail (up to 5)")
        status, answer = _post(api + "tubes/single/jobs", {"body": "hi"}, TOKEN)
        assert status == 200
        assert _log_line(server, " put ").endswith("web console: deploy-bot put job 4 in single")
        assert _post(api + "tubes/mail/pause", {"delay": 60}, TOKEN)[0] == 200
        assert _log_line(server, " paused ").endswith(
            "web console: deploy-bot paused tube mail for 60 s")
        assert _post(api + "tubes/mail/pause", {"delay": 0}, TOKEN)[0] == 200
        assert _log_line(server, " unpaused ").endswith(
            "web console: deploy-bot unpaused tube mail")
        assert w.ask(b"stats-job 1\r\n") == b"NOT_FOUND\r\n"
        w.sock.close()
        # Info lines other than the console's stay quiet without -V.
        assert "open-file limit" not in server.log()
    finally:
        server.stop()
