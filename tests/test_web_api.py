"""The console's JSON API against an engine on a Clock: looking, validation,
the read-only mode, the limits of requests (HTTP over string transports)."""
from __future__ import annotations

import json
import socket
import subprocess
import sys

import pytest

from twisted_stalk.web import sampler as sampler_module
from web_harness import VIEWER_TOKEN, Harness, credentials


@pytest.fixture
def h():
    harness = Harness()
    yield harness
    assert not harness.failures, harness.failures


def _fill(h, tube=b"emails", n=5, body=b"hello"):
    c = h.client()
    h.say(c, b"use %s\r\n" % tube)
    ids = []
    for i in range(n):
        reply = h.say(c, b"put %d 0 60 %d\r\n%s\r\n" % (100 + i, len(body), body))
        ids.append(int(reply.split()[1]))
    return c, ids


def test_overview_shows_counts_and_server_facts(h):
    c, ids = _fill(h)
    h.say(c, b"put 0 30 60 1\r\nd\r\n")
    h.say(c, b"pause-tube emails 100\r\n")
    data = h.get("overview").json
    tube = next(t for t in data["tubes"] if t["name"] == "emails")
    assert (tube["ready"], tube["delayed"], tube["urgent"], tube["paused"]) == (5, 1, 5, True)
    assert tube["pause_left"] == 100
    server = data["server"]
    assert server["current-jobs-ready"] == 5 and server["current-connections"] == 1
    assert server["binlog"] == {"enabled": False} and server["draining"] is False
    assert data["total_tubes"] == 2
    # Filter, sort, page.
    assert [t["name"] for t in h.get("overview?filter=mail").json["tubes"]] == ["emails"]
    names = [t["name"] for t in h.get("overview?sort=ready&order=desc").json["tubes"]]
    assert names == ["emails", "default"]
    assert len(h.get("overview?limit=1&offset=1").json["tubes"]) == 1


def test_rates_come_from_the_sampler_not_the_commands(h):
    c, _ = _fill(h, n=0)
    s = h.console.sampler
    s.sample()
    for _ in range(10):
        h.say(c, b"put 0 0 60 1\r\nx\r\n")
    s.sample()
    data = h.get("overview").json
    assert data["rates"]["put"] == [10 / sampler_module.INTERVAL]
    tube = next(t for t in data["tubes"] if t["name"] == "emails")
    assert tube["rates"]["put"] == [10 / sampler_module.INTERVAL]
    assert tube["rates"]["delete"] == [0]
    # Rings are bounded.
    for _ in range(sampler_module.POINTS + 20):
        s.sample()
    assert len(h.get("tubes/emails").json["tube"]["rates"]["put"]) == sampler_module.POINTS


def test_sampler_drops_tubes_that_went_away(h):
    c, ids = _fill(h, tube=b"short", n=1)
    h.console.sampler.sample()
    assert b"short" in h.console.sampler.tubes
    h.say(c, b"delete %d\r\nuse default\r\n" % ids[0])
    h.console.sampler.sample()
    assert b"short" not in h.console.sampler.tubes


def test_jobs_page_pages_and_sorts(h):
    _, ids = _fill(h, n=12)
    page = h.get("tubes/emails/jobs?state=ready&sort=id&limit=5&offset=5").json
    assert page["total"] == 12 and [j["id"] for j in page["jobs"]] == ids[5:10]
    page = h.get("tubes/emails/jobs?sort=pri&order=desc&limit=3").json
    assert [j["pri"] for j in page["jobs"]] == [111, 110, 109]
    job = page["jobs"][0]
    assert job["preview"] == {"kind": "text", "data": "hello", "size": 5, "truncated": False}
    assert h.get("tubes/emails/jobs?state=buried").json["jobs"] == []


def test_bodies_are_data_never_markup(h):
    _fill(h, n=1, body=b"<script>alert(1)</script>")
    _fill(h, tube=b"bin", n=1, body=b"\x00\x01\xff<b>")
    job = h.get("tubes/emails/jobs").json["jobs"][0]
    assert job["preview"]["data"] == "<script>alert(1)</script>"
    raw = h.get("tubes/emails/jobs").body
    assert b"<" not in raw and b"\\u003cscript\\u003e" in raw
    binary = h.get("tubes/bin/jobs").json["jobs"][0]["preview"]
    assert binary == {"kind": "hex", "data": "00 01 ff 3c 62 3e", "size": 6, "truncated": False}


def test_long_bodies_are_truncated_on_a_character_boundary(h):
    _fill(h, n=1, body=("é" * 100).encode())
    preview = h.get("tubes/emails/jobs").json["jobs"][0]["preview"]
    assert preview["kind"] == "text" and preview["truncated"]
    assert preview["data"] == "é" * 60 and preview["size"] == 200


def test_job_detail_names_the_holder_and_time_left(h):
    c, ids = _fill(h, n=2)
    worker = h.client(port=50123)
    h.say(worker, b"watch emails\r\n")
    reply = h.say(worker, b"reserve\r\n")
    held = int(reply.split()[1])
    h.clock.advance(15)
    data = h.get(f"jobs/{held}").json
    assert data["stats"]["state"] == "reserved" and data["stats"]["tube"] == "emails"
    assert data["holder"] == {"peer": "10.1.2.3:50123", "ttr_left": 45, "jobs_held": 1}
    assert data["body"]["data"] == "hello"
    h.say(c, b"put 0 90 60 1\r\nd\r\n")
    delayed = h.get("tubes/emails/jobs?state=delayed").json["jobs"][0]
    assert h.get(f"jobs/{delayed['id']}").json["ready_in"] == 90
    body = h.get(f"jobs/{ids[1]}/body")
    assert body.body == b"hello" and body.headers["content-type"] == "application/octet-stream"
    assert "attachment" in body.headers["content-disposition"]
    assert h.get("jobs/99999").status == 404


def test_connections_list_each_client(h):
    c, _ = _fill(h, n=1)
    worker = h.client(port=50200)
    h.say(worker, b"watch emails\r\nreserve\r\n")
    waiter = h.client(port=50300)
    h.say(waiter, b"watch other\r\nreserve\r\n")
    rows = {r["peer"]: r for r in h.get("connections").json["connections"]}
    assert rows["10.1.2.3:50200"]["reserved_count"] == 1
    assert rows["10.1.2.3:50200"]["watch"] == ["default", "emails"]
    assert rows["10.1.2.3:50300"]["waiting"] is True
    assert rows["10.1.2.3:50000"]["use"] == "emails" and rows["10.1.2.3:50000"]["producer"]


def test_search_finds_bodies_in_slices(h):
    c, ids = _fill(h, n=30)
    h.say(c, b"put 0 0 60 6\r\nneedle\r\n")
    h.say(c, b"put 0 0 60 9\r\nneedle 2!\r\n")
    data = h.get("tubes/emails/search?q=needle").json
    assert [m["preview"]["data"] for m in data["matches"]] == ["needle", "needle 2!"]
    assert data["complete"] is True
    assert len(h.get("tubes/emails/search?q=hello&limit=4").json["matches"]) == 4
    hexed = h.get("tubes/emails/search?q=6e6565646c65&encoding=hex").json
    assert len(hexed["matches"]) == 2
    assert h.get("tubes/emails/search?q=").status == 400
    assert h.get("tubes/nope/search?q=x").status == 404


def test_read_only_without_credentials(h):
    _fill(h, n=1)
    me = h.get("whoami").json
    assert me["auth"] is False and me["can_act"] is False and me["role"] == "viewer"
    assert me["host"] == socket.gethostname()
    for path, body in (("tubes/emails/jobs", {"body": "x"}), ("jobs/delete", {"ids": [1]}),
                       ("tubes/emails/pause", {"delay": 5}), ("tubes/emails/flush",
                                                              {"state": "ready"})):
        response = h.post(path, body)
        assert response.status == 403, path
        assert "read-only" in response.json["error"]
    assert h.engine.tube_stats(b"emails")[2] == ("current-jobs-ready", 1)


@pytest.mark.parametrize("path,status", [
    ("tubes/-bad/jobs", 400), ("tubes/" + "a" * 201, 400), ("tubes/a%20b", 400),
    ("tubes/nope", 404), ("jobs/abc", 400), ("jobs/0", 400), ("jobs/-1", 400),
    ("nothing", 404), ("tubes/default/jobs?state=lost", 400),
    ("tubes/default/jobs?limit=100000", 400), ("tubes/default/jobs?offset=-1", 400),
    ("tubes/default/jobs?sort=colour", 400), ("tasks/zzz-not-a-task!", 400),
    ("tasks/abcdef", 404),
])
def test_bad_input_gets_a_4xx_with_a_message(h, path, status):
    response = h.get(path)
    assert response.status == status, response
    assert isinstance(response.json["error"], str) and response.json["error"]


def test_tube_names_with_every_allowed_character_round_trip(h):
    name = b"a-b+c/d;e.f$g_h(i)"
    _fill(h, tube=name, n=1)
    from urllib.parse import quote
    data = h.get("tubes/" + quote(name.decode(), safe="") + "/jobs").json
    assert data["tube"]["name"] == name.decode() and data["total"] == 1


def test_method_not_allowed(h):
    assert h.request("DELETE", "/api/v1/overview").status == 405
    assert h.post("overview").status == 405


def test_security_headers_and_assets(h):
    page = h.request("GET", "/")
    assert page.status == 200 and page.headers["content-type"].startswith("text/html")
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert page.headers["x-content-type-options"] == "nosniff"
    assert page.headers["x-frame-options"] == "DENY"
    script = h.request("GET", "/static/console.js")
    assert script.status == 200 and b"textContent" in script.body
    assert h.request("GET", "/static/../auth.py").status == 404
    assert h.request("GET", "/static/").status == 404
    assert h.request("GET", "/anything").status == 404


def test_request_bodies_are_bounded():
    h = Harness(credentials(), max_job_size=1000)
    limit = h.site.max_body
    head = ("POST /api/v1/tubes/x/jobs HTTP/1.1\r\nHost: console\r\n"
            "Content-Type: application/json\r\nAuthorization: Bearer admin-token-0123456789\r\n")
    transport, _ = h.raw((head + f"Content-Length: {limit + 1}\r\n\r\n").encode() + b"x" * 100)
    assert transport.value().startswith(b"HTTP/1.1 413")
    assert transport.disconnecting
    # Chunked, without a length: cut off when the chunks pass the limit.
    chunk = b"%x\r\n%s\r\n" % (limit, b"y" * limit)
    transport, _ = h.raw((head + "Transfer-Encoding: chunked\r\n\r\n").encode() + chunk * 2)
    assert transport.value().startswith(b"HTTP/1.1 413")


def test_json_bodies_only():
    h = Harness(credentials())
    auth = {"Authorization": "Bearer admin-token-0123456789"}
    response = h.request("POST", "/api/v1/tubes/x/pause", raw_body=b"delay=5",
                         headers={**auth, "Content-Type": "application/x-www-form-urlencoded"})
    assert response.status == 415
    response = h.request("POST", "/api/v1/tubes/x/pause", raw_body=b"{nope", headers=auth)
    assert response.status == 400 and "JSON" in response.json["error"]
    response = h.request("POST", "/api/v1/tubes/x/pause", raw_body=b"[1]", headers=auth)
    assert response.status == 400


def test_no_traceback_reaches_the_client(h, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("secret internals")
    monkeypatch.setattr(h.console.sampler, "server_rates", broken)
    response = h.get("overview")
    assert response.status == 500
    assert b"secret" not in response.body and b"Traceback" not in response.body
    assert response.json == {"error": "internal error (see the server log)"}


def test_connections_beyond_the_limit_are_refused(h):
    h.site.max_connections = 1
    first = h.site.buildProtocol(None)
    second = h.site.buildProtocol(None)
    from twisted.internet.testing import StringTransport
    t = StringTransport()
    second.makeConnection(t)
    assert t.value().startswith(b"HTTP/1.1 503")
    first.makeConnection(StringTransport())
    first.connectionLost(None)
    assert h.site.open_connections == 0


def test_without_web_nothing_of_the_console_is_imported():
    code = ("import sys, twisted_stalk.tap as tap, twisted_stalk_cli.stalkd;"
            "o = tap.Options(); o.parseOptions(['--port', 'tcp:0']);"
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith('twisted_stalk.web'))))")
    out = subprocess.run([sys.executable, "-c", "import json;" + code], capture_output=True,
                         text=True, check=True).stdout
    assert json.loads(out) == []


def test_viewer_token_reads_but_cannot_act():
    h = Harness(credentials())
    bearer = {"Authorization": f"Bearer {VIEWER_TOKEN}"}
    assert h.get("overview", headers=bearer).status == 200
    response = h.post("tubes/default/pause", {"delay": 5}, headers=bearer)
    assert response.status == 403 and "viewer" in response.json["error"]


def test_startup_refuses_bad_console_options(tmp_path):
    from twisted.python import usage

    from twisted_stalk import tap
    bad = tmp_path / "auth"
    bad.write_text("user x admin nothing\n")
    options = tap.Options()
    with pytest.raises(usage.UsageError, match="goes with --web"):
        options.parseOptions(["--web-auth", str(bad)])
    with pytest.raises(usage.UsageError, match="line 1"):
        tap.Options().parseOptions(["--web", "tcp:0", "--web-auth", str(bad)])
    from servers import free_port, ours_command
    done = subprocess.run(ours_command(free_port(), "--web", "tcp:0:interface=127.0.0.1",
                                       "--web-auth", str(bad)),
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 1 and "line 1" in done.stderr
    done = subprocess.run(ours_command(free_port(), "--web-auth", str(bad)),
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 5 and "--web-auth goes with --web" in done.stderr
