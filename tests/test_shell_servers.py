"""``stalk --servers A,B,C``: top and read-only commands over several servers
(subprocesses against real servers: ours and, when installed, beanstalkd)."""
import json
import subprocess

import pytest

from servers import REFERENCE, free_port, start_server
from test_shell_cli import STALK, Probe, env_for, put
from twisted_stalk_cli.shell.servers import sum_rows, top_table


@pytest.fixture(scope="module")
def three():
    servers = [start_server("ours"), start_server("reference" if REFERENCE else "ours"),
               start_server("ours")]
    yield servers
    for s in servers:
        s.stop()


def run(tmp_path, servers, *args, extra=()):
    names = [f"127.0.0.1:{s.port}" for s in servers] + list(extra)
    p = subprocess.run(STALK + ["--servers", ",".join(names)] + list(args),
                       capture_output=True, env=env_for(tmp_path), timeout=20)
    p.out = p.stdout.decode("utf-8", "replace")
    p.err = p.stderr.decode("utf-8", "replace")
    assert "Traceback" not in p.err, p.err
    return p


def test_top_shows_each_server_and_the_sums(three, tmp_path):
    for i, s in enumerate(three):
        for _ in range(i + 1):
            put(Probe(s), "srv-top", "x")
    p = run(tmp_path, three, "top", "--once", "srv-top")
    assert p.returncode == 0, p.err
    lines = p.out.splitlines()
    assert lines[0].startswith("stalk top  3 servers, 3 up")
    assert lines[2].split()[:4] == ["TUBE", "SERVER", "READY", "URGENT"]
    assert lines[3].split()[:3] == ["srv-top", "(sum)", "6"]
    assert [ln.split()[:2] for ln in lines[4:7]] == [
        [f"127.0.0.1:{s.port}", str(i + 1)] for i, s in enumerate(three)]
    p = run(tmp_path, three, "--json", "top", "-c", "1", "srv-top")
    frame = json.loads(p.out)
    assert [s["up"] for s in frame["servers"]] == [True] * 3
    [tube] = frame["tubes"]
    assert tube["tube"] == "srv-top" and tube["sum"]["ready"] == 6
    assert sorted(v["ready"] for v in tube["servers"].values()) == [1, 2, 3]


def test_read_only_commands_print_one_result_per_server(three, tmp_path):
    put(Probe(three[1]), "srv-ro", "only on the second")
    p = run(tmp_path, three, "--json", "stats-tube", "srv-ro")
    records = [json.loads(line) for line in p.out.splitlines()]
    assert [r["server"] for r in records] == [f"127.0.0.1:{s.port}" for s in three]
    assert [r["reply"] for r in records] == ["NOT_FOUND", "OK", "NOT_FOUND"]
    assert records[1]["stats"]["current-jobs-ready"] == 1 and p.returncode == 1
    p = run(tmp_path, three, "--tube", "srv-ro", "peek-ready")
    assert p.out.count("== 127.0.0.1:") == 3 and "only on the second" in p.out
    p = run(tmp_path, three, "--json", "stats")
    assert all(json.loads(line)["ok"] for line in p.out.splitlines()) and p.returncode == 0
    p = run(tmp_path, three, "--json", "stats", "srv-ro")  # the stats tool: a tube
    assert len(p.out.splitlines()) == 3


def test_a_down_server_is_reported_and_the_others_shown(three, tmp_path):
    gone = f"127.0.0.1:{free_port()}"
    p = run(tmp_path, three[:1], "--json", "list-tubes", extra=[gone])
    first, second = [json.loads(line) for line in p.out.splitlines()]
    assert first["ok"] and second["server"] == gone and "cannot connect" in second["error"]
    assert p.returncode == 3
    p = run(tmp_path, three[:1], "top", "--once", extra=[gone])
    assert f"{gone}: DOWN" in p.out and p.returncode == 3


def test_changing_commands_are_refused(three, tmp_path):
    for args in (["delete", "1"], []):
        p = run(tmp_path, three[:1], *args)
        assert p.returncode == 2 and "--servers" in p.err


def test_sums():
    a = ["t", 1, 0, 2, 0, 0, 1, 1, 1, "1.5", "-", "-"]
    b = ["t", 2, 1, 0, 3, 1, 0, 2, 0, "0.5", "2.0", "5s"]
    assert sum_rows([a, b]) == [3, 1, 2, 3, 1, 1, 3, 1, "2.0", "2.0", "5s"]
    table = top_table({"x": ({}, [a]), "y": ({}, [b, ["u"] + a[1:]])})
    assert [r[:3] for r in table] == [["t", "(sum)", 3], ["", "x", 1], ["", "y", 2],
                                      ["u", "(sum)", 1], ["", "y", 1]]
