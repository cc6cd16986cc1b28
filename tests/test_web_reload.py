"""The console's credentials file changes while the server runs: the
credentials tool keeps the file's owner, group and mode, and the server reads
it again on SIGHUP (``systemctl reload``, the units' ``ExecReload=``), saying
so in one line, or in one line why not (keeping what it had).  After
docs/deploy.md, adding a person meant ``auth add``, a chown and chmod again, and
a restart."""
from __future__ import annotations

import json
import os
import pathlib
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import pytest
from twisted.logger import formatEvent, globalLogPublisher

from servers import free_port
from test_ops_helpers import Stalkd, start_stalkd, wait_http
from test_ops_startup import _twistd
from twisted_stalk.web.auth import parse
from twisted_stalk.web.reload import reload_credentials
from web_harness import ADMIN_TOKEN, Harness, cheap_hash, credentials

TOOL = [sys.executable, "-m", "twisted_stalk.web.auth"]


def _tool(*args: str, password: str = "") -> subprocess.CompletedProcess:
    """The credentials tool as a script runs it (standard input is not a terminal)."""
    return subprocess.run([*TOOL, *args], input=password, capture_output=True, text=True,
                          timeout=60)


# ------------------------------------------------------------ the tool

def test_the_tool_keeps_an_existing_files_owner_group_and_mode(tmp_path):
    auth = tmp_path / "console.auth"
    made = _tool("token", "deploy", "--file", str(auth))
    assert made.returncode == 0, made
    assert stat.S_IMODE(os.stat(auth).st_mode) == 0o600  # a new file: 0600
    # As the install leaves it: root:stalk 0640 (here: another owner and group
    # when the tests run as root, else this user's own group).
    owner = (65534, 65534) if os.geteuid() == 0 else (os.geteuid(), os.getegid())
    os.chown(auth, *owner)
    os.chmod(auth, 0o640)
    link = tmp_path / "link.auth"
    link.symlink_to(auth)
    added = _tool("add", "alice", "--file", str(link), password="wonderland\n")
    assert added.returncode == 0, added
    assert added.stdout == f"user alice (admin) written to {link}\n"
    assert link.is_symlink()
    st = os.stat(auth)
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (*owner, 0o640)
    assert _tool("remove", "deploy", "--file", str(auth)).returncode == 0
    st = os.stat(auth)
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (*owner, 0o640)
    entries = parse(auth.read_text())
    assert [(e.kind, e.name) for e in entries] == [("user", "alice")]
    assert sorted(os.listdir(tmp_path)) == ["console.auth", "link.auth"]  # no leftovers


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run the tool as another user")
def test_the_tool_says_so_when_it_cannot_keep_the_owner(request):
    """Run as a user who may write the directory but not give a file root's
    ownership: the file stays as it was, and the tool says why."""
    shared = pathlib.Path(tempfile.mkdtemp(prefix="stalk-auth-"))  # pytest's is 0700
    request.addfinalizer(lambda: shutil.rmtree(shared))
    shared.chmod(0o777)
    auth = shared / "console.auth"
    assert _tool("token", "deploy", "--file", str(auth)).returncode == 0
    auth.chmod(0o644)
    before = auth.read_text()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    python = "/usr/bin/python3"  # this one may live under /root, out of nobody's reach
    if not os.access(python, os.X_OK) or not all(
            os.stat(d).st_mode & 0o005 == 0o005 for d in (root, os.path.dirname(root))):
        pytest.skip("no Python and source tree that another user may run")
    result = subprocess.run([python, "-m", "twisted_stalk.web.auth", "add", "alice", "--file",
                             str(auth)], input="pw\n", capture_output=True, text=True,
                            timeout=60, user=65534, group=65534, extra_groups=[], cwd="/",
                            env={"PYTHONPATH": root, "PATH": "/usr/bin:/bin"})
    assert result.returncode == 1 and result.stderr == (
        f"cannot give the new {auth} the owner of the old one (uid 0, gid 0): "
        "run this as root or as that owner\n"), result
    assert auth.read_text() == before and os.listdir(shared) == ["console.auth"]


# ------------------------------------------------------------ reloading

def _lines(events):
    return [formatEvent(e) for e in events if e.get("log_namespace") == "twisted_stalk.web"]


def test_a_reload_takes_the_new_file_and_ends_the_logins_of_changed_users(tmp_path):
    h = Harness(credentials())
    assert h.login("alice", "wonderland").status == 200
    alice = dict(h.cookies)
    h.cookies = {}
    assert h.login("bob", "builder").status == 200
    bob = dict(h.cookies)
    auth = tmp_path / "console.auth"
    # bob's entry as it was, alice with a new password, a new user carol.
    bob_line = next(f"user bob viewer {e.secret}"
                    for e in h.console.logins.credentials.users.values() if e.name == "bob")
    auth.write_text(f"user alice admin {cheap_hash('looking-glass')}\n{bob_line}\n"
                    f"user carol admin {cheap_hash('hearts')}\n")
    events = []
    globalLogPublisher.addObserver(events.append)
    try:
        assert reload_credentials(h.console.logins, str(auth))
    finally:
        globalLogPublisher.removeObserver(events.append)
    assert _lines(events) == [f"web console: credentials reloaded from {auth}: 3 users and "
                              "0 tokens; 1 login ended (user removed or changed)"]
    h.cookies = alice
    assert h.get("overview").status == 401
    h.cookies = bob
    assert h.get("overview").status == 200
    h.cookies = {}
    assert h.login("alice", "wonderland").status == 401
    assert h.login("alice", "looking-glass").status == 200
    assert h.login("carol", "hearts").status == 200
    assert h.get("overview", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}).status == 401


def test_a_bad_file_changes_nothing_and_says_why(tmp_path):
    h = Harness(credentials())
    before = h.console.logins.credentials
    auth = tmp_path / "console.auth"
    auth.write_text("user alice admin\n")
    events = []
    globalLogPublisher.addObserver(events.append)
    try:
        assert not reload_credentials(h.console.logins, str(auth))
        assert not reload_credentials(h.console.logins, str(tmp_path / "gone.auth"))
    finally:
        globalLogPublisher.removeObserver(events.append)
    assert _lines(events) == [
        "web console: credentials not reloaded, the 2 users and 2 tokens loaded before stay "
        f"in force: {auth}, line 1: expected 'user|token NAME ROLE HASH'",
        "web console: credentials not reloaded, the 2 users and 2 tokens loaded before stay "
        f"in force: cannot read --web-auth file {tmp_path / 'gone.auth'}: "
        "No such file or directory"]
    assert h.console.logins.credentials is before
    assert h.login("alice", "wonderland").status == 200


# ------------------------------------------------------ a running server

class _Twistd(Stalkd):
    """``twistd -n beanstalk``, its log (standard output) in a file."""


def _start(program: str, tmp_path, auth, web_port: int) -> Stalkd:
    web = ["--web", f"tcp:{web_port}:interface=127.0.0.1", "--web-auth", str(auth)]
    if program == "stalkd":
        return start_stalkd(tmp_path, *web)
    port = free_port()
    log_path = str(tmp_path / "twistd.log")
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(_twistd("--listen", f"tcp:{port}:interface=127.0.0.1", *web),
                                stdout=log, stderr=subprocess.STDOUT, cwd=str(tmp_path))
    return _Twistd(proc, port, log_path)


def _post(url, body, cookie=None):
    headers = {"Content-Type": "application/json"}
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            return r.status, r.headers.get("Set-Cookie", "").split(";")[0]
    except urllib.error.HTTPError as e:
        return e.code, None


def _get(url, cookie=None, token=None):
    headers = {"Cookie": cookie} if cookie else {}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers),
                                    timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def _logged(server, needle: str, count: int) -> str:
    """The ``count``-th log line holding ``needle``, once it is written."""
    deadline = time.monotonic() + 10
    while True:
        found = [line for line in server.log().splitlines() if needle in line]
        if len(found) >= count:
            return found[count - 1]
        assert server.proc.poll() is None, f"the server ended:\n{server.log()}"
        assert time.monotonic() < deadline, f"{needle!r} not logged:\n{server.log()}"
        time.sleep(0.02)


@pytest.mark.parametrize("program", ["stalkd", "twistd"])
def test_sighup_reloads_the_credentials_of_a_running_server(program, tmp_path):
    """As after docs/deploy.md: a token only; a person added with the tool,
    then ``systemctl reload`` (SIGHUP); no restart."""
    auth = tmp_path / "console.auth"
    token = _tool("token", "deploy", "--file", str(auth)).stdout.strip()
    web_port = free_port()
    server = _start(program, tmp_path, auth, web_port)
    api = f"http://127.0.0.1:{web_port}/api/v1/"
    try:
        wait_http(api + "whoami")
        assert _post(api + "login", {"user": "alice", "password": "wonderland"})[0] == 401
        assert _tool("add", "alice", "--file", str(auth), password="wonderland\n").returncode == 0
        server.proc.send_signal(signal.SIGHUP)
        assert _logged(server, "credentials reloaded", 1).endswith(
            f"web console: credentials reloaded from {auth}: 1 user and 1 token")
        status, cookie = _post(api + "login", {"user": "alice", "password": "wonderland"})
        assert status == 200 and _get(api + "overview", cookie) == 200

        # A file the server cannot use: one line, and what it had stays.
        good = auth.read_text()
        auth.write_text(good + "user bob\n")
        server.proc.send_signal(signal.SIGHUP)
        assert _logged(server, "not reloaded", 1).endswith(
            "web console: credentials not reloaded, the 1 user and 1 token loaded before "
            f"stay in force: {auth}, line 4: expected 'user|token NAME ROLE HASH'")
        assert _get(api + "overview", cookie) == 200
        assert _get(api + "overview", token=token) == 200

        # Removed: alice's login ends at the reload.
        auth.write_text(good)
        assert _tool("remove", "alice", "--file", str(auth)).returncode == 0
        server.proc.send_signal(signal.SIGHUP)
        assert _logged(server, "credentials reloaded", 2).endswith(
            f"web console: credentials reloaded from {auth}: 0 users and 1 token; "
            "1 login ended (user removed or changed)")
        assert _get(api + "overview", cookie) == 401
        assert _get(api + "overview", token=token) == 200
    finally:
        assert server.stop() == 0, server.log()


def test_sighup_to_a_read_only_console_says_there_is_nothing_to_read(tmp_path):
    """``systemctl reload`` of a server whose console has no --web-auth must
    not end it (SIGHUP's default)."""
    web_port = free_port()
    server = start_stalkd(tmp_path, "--web", f"tcp:{web_port}:interface=127.0.0.1")
    try:
        wait_http(f"http://127.0.0.1:{web_port}/api/v1/whoami")
        server.proc.send_signal(signal.SIGHUP)
        assert _logged(server, "SIGHUP", 1).endswith(
            "web console: SIGHUP: no --web-auth file to read again (the console is read-only)")
        assert _get(f"http://127.0.0.1:{web_port}/api/v1/overview") == 200
    finally:
        assert server.stop() == 0, server.log()
