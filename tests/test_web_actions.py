"""The console's actions: each a protocol command through a console session,
counted and seen by clients as a client's; large ones in slices; logins,
bearer tokens and the CSRF rule in front of them."""
from __future__ import annotations

import socket

import pytest
from twisted.logger import formatEvent, globalLogPublisher

from twisted_stalk.web import login as login_module
from web_harness import ADMIN_TOKEN, Harness, credentials

BEARER = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


@pytest.fixture
def h():
    harness = Harness(credentials())
    yield harness
    assert not harness.failures, harness.failures


def _fill(h, tube=b"work", n=5):
    c = h.client()
    h.say(c, b"use %s\r\n" % tube)
    return c, [int(h.say(c, b"put %d 0 60 5\r\nhello\r\n" % i).split()[1]) for i in range(n)]


def _stats(h, c, tube=b"work"):
    reply = h.say(c, b"stats-tube %s\r\n" % tube)
    return dict(line.split(": ", 1) for line in reply.decode().splitlines()[2:] if ": " in line)


def _bury(h, n, tube=b"work"):
    c, ids = _fill(h, tube, n)
    worker = h.client(port=50001)
    h.say(worker, b"watch %s\r\n" % tube)
    for job_id in ids:
        h.say(worker, b"reserve-job %d\r\nbury %d 0\r\n" % (job_id, job_id))
    return c, ids


# ------------------------------------------------------------------ actions

def test_put_counts_and_wakes_a_waiting_worker(h):
    worker = h.client(port=50010)
    h.say(worker, b"watch work\r\nignore default\r\n")
    assert h.say(worker, b"reserve\r\n") == b""
    proto, transport = worker
    before = h.engine.cmd_counts["put"]
    response = h.post("tubes/work/jobs", {"body": "from the console", "pri": 5, "ttr": 30},
                      headers=BEARER)
    assert response.status == 200, response
    job_id = response.json["task"]["result"]["id"]
    # The waiting worker got it, delivered after the console's command.
    assert transport.value() == b"RESERVED %d 16\r\nfrom the console\r\n" % job_id
    assert h.engine.cmd_counts["put"] == before + 1
    # The console's session is gone again.
    assert h.engine.current_connections == 1


def test_put_validates_and_reports_refusals(h):
    assert h.post("tubes/work/jobs", {"body": "x", "pri": -1}, headers=BEARER).status == 400
    assert h.post("tubes/work/jobs", {"body": "x", "ttr": "soon"}, headers=BEARER).status == 400
    assert h.post("tubes/work/jobs", {"body": "zz", "encoding": "hex"},
                  headers=BEARER).status == 400
    response = h.post("tubes/work/jobs", {"body": "00ff0d0a", "encoding": "hex"}, headers=BEARER)
    assert response.status == 200
    assert h.engine.job(response.json["task"]["result"]["id"]).body == b"\x00\xff\r\n\r\n"
    big = h.post("tubes/work/jobs", {"body": "x" * 70000}, headers=BEARER)
    assert big.status == 413 and "max job size" in big.json["error"]
    h.engine.drain()
    drained = h.post("tubes/work/jobs", {"body": "x"}, headers=BEARER)
    assert drained.status == 503 and "draining" in drained.json["error"]


def test_kick_n_kicks_buried_only_when_there_are_buried(h):
    c, ids = _bury(h, 7)
    h.say(c, b"put 0 100 60 1\r\nd\r\n")
    response = h.post("tubes/work/kick", {"bound": 100}, headers=BEARER)
    assert response.json["task"]["result"] == {"kicked": 7, "kind": "buried"}
    stats = _stats(h, c)
    assert stats["current-jobs-buried"] == "0" and stats["current-jobs-delayed"] == "1"
    response = h.post("tubes/work/kick", {"bound": 100}, headers=BEARER)
    assert response.json["task"]["result"] == {"kicked": 1, "kind": "delayed"}


def test_kick_delete_bury_selected_jobs(h):
    c, ids = _bury(h, 3)
    assert h.post("jobs/kick", {"ids": ids[:2]}, headers=BEARER).json["task"]["done"] == 2
    assert _stats(h, c)["current-jobs-ready"] == "2"
    bury = h.post("jobs/bury", {"ids": ids}, headers=BEARER).json["task"]
    assert (bury["done"], bury["skipped"]) == (2, 1)  # the third was buried already
    assert h.engine.job_stats(ids[0])[-2] == ("buries", 2)
    worker = h.client(port=50020)
    h.say(worker, b"watch work\r\nreserve-job %d\r\n" % ids[0])
    task = h.post("jobs/delete", {"ids": ids + [424242]}, headers=BEARER).json["task"]
    # A job a worker holds is not the console's to delete; a missing one neither.
    assert (task["done"], task["skipped"]) == (2, 2)
    assert task["result"] == {"deleted": ids[1:]}
    assert h.say(worker, b"delete %d\r\n" % ids[0]) == b"DELETED\r\n"


def test_move_puts_a_copy_and_deletes_the_original(h):
    c, ids = _fill(h, n=2)
    h.say(c, b"put 7 40 90 5\r\nlater\r\n")
    delayed = ids[-1] + 1
    response = h.post("jobs/move", {"ids": [ids[0], delayed], "tube": "elsewhere"},
                      headers=BEARER)
    task = response.json["task"]
    assert task["done"] == 2
    moved = {int(k): v for k, v in task["result"]["moved"].items()}
    assert h.engine.job(ids[0]) is not None and h.engine.job_stats(ids[0]) != []
    assert h.say(c, b"peek %d\r\n" % ids[0]) == b"NOT_FOUND\r\n"
    copy = dict(h.engine.job_stats(moved[delayed]))
    assert (copy["tube"], copy["state"], copy["pri"], copy["ttr"]) == (
        b"elsewhere", b"delayed", 7, 90)
    assert copy["time-left"] == 40
    assert h.say(c, b"peek %d\r\n" % moved[ids[0]]) == b"FOUND %d 5\r\nhello\r\n" % moved[ids[0]]
    assert h.post("jobs/move", {"ids": [ids[1]], "tube": "-bad"},
                  headers=BEARER).status == 400


def test_flush_runs_in_slices_and_clients_are_served_between(h):
    h = Harness(credentials(), budget=0.0)  # every job is its own slice
    c, ids = _bury(h, 40)
    h.say(c, b"put 0 0 60 1\r\nr\r\n")
    assert h.post("tubes/work/flush", {"state": "buried", "confirm": "wrong"},
                  headers=BEARER).status == 400
    assert h.post("tubes/work/flush", {"state": "reserved", "confirm": "work"},
                  headers=BEARER).status == 400
    response = h.post("tubes/work/flush", {"state": "buried", "confirm": "work"},
                      headers=BEARER)
    assert response.status == 202
    task_id = response.json["task"]["id"]
    served_between = 0
    while h.console.tasks.running():
        assert h.say(c, b"stats-tube work\r\n").startswith(b"OK")
        served_between += 1
        h.clock.step()
    assert served_between > 10
    task = h.get(f"tasks/{task_id}", headers=BEARER).json["task"]
    assert (task["state"], task["done"], task["total"]) == ("done", 40, 40)
    stats = _stats(h, c)
    assert stats["current-jobs-buried"] == "0" and stats["current-jobs-ready"] == "1"
    assert h.engine.cmd_counts["delete"] == 40
    assert h.get("tasks", headers=BEARER).json["tasks"][0]["id"] == task_id


def test_pause_and_unpause(h):
    c, _ = _fill(h, n=1)
    assert h.post("tubes/work/pause", {"delay": 60}, headers=BEARER).status == 200
    assert _stats(h, c)["pause"] == "60"
    assert h.post("tubes/work/pause", {"delay": 0}, headers=BEARER).status == 200
    assert _stats(h, c)["pause"] == "0"
    assert h.post("tubes/nothing/pause", {"delay": 5}, headers=BEARER).status == 404


def test_too_many_ids_or_running_tasks(h):
    assert h.post("jobs/delete", {"ids": list(range(1, 1002))}, headers=BEARER).status == 400
    assert h.post("jobs/delete", {"ids": []}, headers=BEARER).status == 400
    assert h.post("jobs/delete", {"ids": ["x"]}, headers=BEARER).status == 400
    slow = Harness(credentials(), budget=0.0)
    _bury(slow, 30)
    for _ in range(4):
        assert slow.post("jobs/kick", {"ids": list(range(1, 31))},
                         headers=BEARER).status == 202
    assert slow.post("jobs/kick", {"ids": [1]}, headers=BEARER).status == 429
    slow.run_tasks()


def test_every_action_is_logged_with_who_and_how_many(h):
    events = []
    globalLogPublisher.addObserver(events.append)
    try:
        _fill(h, n=3)
        h.post("jobs/delete", {"ids": [1, 2]}, headers=BEARER)
    finally:
        globalLogPublisher.removeObserver(events.append)
    [event] = [e for e in events if "console_action" in e]
    assert event["user"] == "ci" and event["kind"] == "delete" and event["done"] == 2


def _logged(h, path, body):
    """The audit line an action writes (as a log file shows it), and the page's notice."""
    events = []
    globalLogPublisher.addObserver(events.append)
    try:
        task = h.post(path, body, headers=BEARER).json["task"]
        h.run_tasks()
    finally:
        globalLogPublisher.removeObserver(events.append)
    [line] = [formatEvent(e) for e in events if "console_action" in e]
    task = h.get(f"tasks/{task['id']}", headers=BEARER).json["task"]
    assert line == f"web console: ci {task['summary']}"
    return line


def test_each_action_has_its_own_wording_in_the_log(h):
    """It said "ci pause emails: 1 of 1 jobs" said neither how long nor, for a
    put, which job; "1 jobs".  Each action now says what it did."""
    c, ids = _fill(h, n=3)
    assert _logged(h, "tubes/single/jobs", {"body": "x"}) == \
        f"web console: ci put job {ids[-1] + 1} in single"
    assert _logged(h, "tubes/work/pause", {"delay": 60}) == \
        "web console: ci paused tube work for 60 s"
    assert _logged(h, "tubes/work/pause", {"delay": 0}) == "web console: ci unpaused tube work"
    assert _logged(h, "tubes/nothing/pause", {"delay": 5}) == \
        "web console: ci could not pause tube nothing for 5 s: no tube nothing"
    assert _logged(h, "jobs/delete", {"ids": [ids[0]]}) == \
        f"web console: ci deleted job {ids[0]}"
    assert _logged(h, "jobs/delete", {"ids": [ids[0]]}) == \
        f"web console: ci deleted 0 of 1 job (job {ids[0]}; 1 skipped)"
    assert _logged(h, "jobs/bury", {"ids": ids[1:]}) == \
        f"web console: ci buried 2 of 2 jobs (jobs {ids[1]}, {ids[2]})"
    assert _logged(h, "jobs/kick", {"ids": [ids[1]]}) == \
        f"web console: ci kicked job {ids[1]}"
    assert _logged(h, "tubes/work/kick", {"bound": 10}) == \
        "web console: ci kicked 1 buried job in tube work (up to 10)"
    assert _logged(h, "tubes/work/kick", {"bound": 10}) == \
        "web console: ci kicked 0 delayed jobs in tube work (up to 10)"
    _logged(h, "tubes/work/kick", {"bound": 1})
    assert h.get("tasks", headers=BEARER).json["tasks"][0]["doing"] == \
        "kick up to 1 job in tube work"
    moved = _logged(h, "jobs/move", {"ids": [ids[1]], "tube": "retry"})
    assert moved == f"web console: ci moved job {ids[1]} to tube retry (now job {ids[-1] + 2})"
    # What the page shows while an action runs: what it was asked.
    assert h.get("tasks", headers=BEARER).json["tasks"][0]["doing"] == \
        f"move job {ids[1]} to tube retry"
    more = _fill(h, n=9)[1]
    assert _logged(h, "jobs/delete", {"ids": more}) == \
        "web console: ci deleted 9 of 9 jobs (jobs %s ...)" % ", ".join(map(str, more[:5]))
    _bury(h, 2, b"mail")
    assert _logged(h, "tubes/mail/flush", {"state": "buried", "confirm": "mail"}) == \
        "web console: ci flushed tube mail: deleted 2 of 2 buried jobs"
    assert h.get("tasks", headers=BEARER).json["tasks"][0]["doing"] == \
        "flush the buried jobs of tube mail"
    h.engine.drain()
    assert _logged(h, "tubes/work/jobs", {"body": "x"}) == (
        "web console: ci could not put a job in work: the server is draining (SIGUSR1): "
        "it takes no new jobs")


# ------------------------------------------------------------ who may act

def test_anonymous_gets_401_when_credentials_are_configured(h):
    assert h.get("overview").status == 401
    assert h.get("whoami").json == {"api": 1, "version": h.get("whoami").json["version"],
                                    "auth": True, "user": None, "role": None,
                                    "can_act": False, "csrf": None, "host": None,
                                    "put_defaults": {"pri": 2**31, "delay": 0, "ttr": 120}}
    assert h.post("jobs/delete", {"ids": [1]}).status == 401
    assert h.get("overview", headers={"Authorization": "Bearer wrong"}).status == 401


def test_login_cookie_and_csrf(h):
    _fill(h, n=2)
    assert h.login(password="nope").status == 401
    response = h.login()
    assert response.status == 200 and response.json["can_act"] is True
    cookie = response.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie.replace("Strict", "strict")
    assert h.get("overview").status == 200
    me = h.get("whoami").json
    assert me["csrf"] == h.csrf and me["host"] == socket.gethostname()
    # A POST without the CSRF token, or from another site, is refused.
    assert h.post("jobs/delete", {"ids": [1]}, csrf=False).status == 403
    other = h.post("jobs/delete", {"ids": [1]}, headers={"Origin": "http://evil.example"})
    assert other.status == 403 and "cross-site" in other.json["error"]
    assert h.post("jobs/delete", {"ids": [1]}, headers={"Origin": "http://console"}).status == 200
    assert h.post("logout").status == 200
    assert h.get("overview").status == 401


def test_viewer_login_cannot_act(h):
    assert h.login("bob", "builder").json["can_act"] is False
    assert h.post("tubes/default/pause", {"delay": 1}).status == 403


def test_repeated_failures_lock_the_name_out_for_a_while(h, monkeypatch):
    now = [0.0]
    monkeypatch.setattr(h.console.logins, "now", lambda: now[0])
    for _ in range(login_module.FAILURES_ALLOWED):
        assert h.login(password="bad").status == 401
    assert h.login().status == 429
    now[0] += login_module.LOCKOUT + 1
    assert h.login().status == 200


def test_login_sessions_expire(h, monkeypatch):
    now = [0.0]
    monkeypatch.setattr(h.console.logins, "now", lambda: now[0])
    h.login()
    now[0] += login_module.IDLE + 1
    assert h.get("overview").status == 401
