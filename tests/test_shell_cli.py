"""``stalk`` in command-line mode, run as a subprocess against real servers."""
import json
import os
import subprocess
import sys
import time

import pytest
import yaml

from servers import free_port
from twisted_stalk.protocol.yaml import parse_mapping
from twisted_stalk_cli.shell.conn import Connection
from twisted_stalk_cli.shell.target import parse_target

STALK = [sys.executable, "-m", "twisted_stalk_cli.shell"]


def env_for(tmp_path):
    env = dict(os.environ)
    for key in ("STALK_ADDRESS", "STALK_CONFIG", "STALK_DEBUG"):
        env.pop(key, None)
    env.update(XDG_CONFIG_HOME=str(tmp_path / "config"), XDG_DATA_HOME=str(tmp_path / "data"),
               XDG_STATE_HOME=str(tmp_path / "state"), PYTHONUNBUFFERED="1")
    return env


class Probe:
    """An in-process connection to check the server's state quickly."""

    def __init__(self, server):
        self.conn = Connection(parse_target(f"127.0.0.1:{server.port}"), reply_timeout=5)
        self.conn.connect()

    def __call__(self, line, body=None):
        data = line.encode() + b"\r\n" + (body + b"\r\n" if body is not None else b"")
        return self.conn.call(data)

    def stats(self, line):
        reply = self(line)
        return parse_mapping(reply.body) if reply.word == "OK" else None


def put(q, tube, body, pri=1024, delay=0, ttr=60):
    q(f"use {tube}")
    reply = q(f"put {pri} {delay} {ttr} {len(body)}", body.encode())
    assert reply.word == "INSERTED"
    return reply.job_id


@pytest.fixture
def stalk(tmp_path):
    def run(server, *args, input=None, timeout=20):
        addr = ["-a", f"127.0.0.1:{server.port}"] if server is not None else []
        data = input.encode() if isinstance(input, str) else input
        p = subprocess.run(STALK + addr + list(args), input=data, capture_output=True,
                           env=env_for(tmp_path), timeout=timeout)
        p.out = p.stdout.decode("utf-8", "replace")
        p.err = p.stderr.decode("utf-8", "replace")
        assert "Traceback" not in p.err, p.err
        return p
    return run


def test_one_command_and_exit_status(any_server, stalk):
    p = stalk(any_server, "put", "--tube", "cli", "hello", "world")
    assert (p.returncode, p.out) == (0, "INSERTED 1\n")
    p = stalk(any_server, "--tube", "cli", "peek-ready")
    assert (p.returncode, p.stdout) == (0, b"FOUND 1 11\nhello world\n")
    p = stalk(any_server, "--body", "peek", "1")
    assert p.stdout == b"hello world"
    p = stalk(any_server, "peek", "99")
    assert (p.returncode, p.out) == (1, "NOT_FOUND\n")
    p = stalk(any_server, "stats-tube", "cli")
    assert p.returncode == 0 and yaml.safe_load(p.out)["current-jobs-ready"] == 1
    assert Probe(any_server).stats("stats-tube cli")["current-jobs-ready"] == 1
    p = stalk(any_server, "reserve-with-timeout", "0")
    assert (p.returncode, p.out) == (1, "TIMED_OUT\n")


def test_json_and_yaml_output(any_server, stalk):
    stalk(any_server, "put", "-t", "j", '{"k": 1}')
    stalk(any_server, "put", "-t", "j", "-f", "-", input=b"\xff\xfe")
    p = stalk(any_server, "--json", "peek", "1")
    assert json.loads(p.out) == {"reply": "FOUND", "line": "FOUND 1 8", "ok": True, "command": "peek",
                                 "id": 1, "bytes": 8, "body": '{"k": 1}'}
    assert json.loads(stalk(any_server, "--json", "peek", "2").out)["body_base64"] == "//4="
    data = yaml.safe_load(stalk(any_server, "--yaml", "stats-job", "1").out)
    assert data["stats"]["tube"] == "j" and data["stats"]["state"] == "ready"
    data = json.loads(stalk(any_server, "--json", "list-tubes").out)
    assert data["tubes"] == ["default", "j"]
    assert json.loads(stalk(any_server, "list-tubes", "--json").out) == data  # after the command too
    p = stalk(any_server, "--json", "delete", "7")
    assert p.returncode == 1 and json.loads(p.out)["ok"] is False


def test_pretty_output_when_forced(ours, stalk):
    stalk(ours, "put", '{"a": [1]}')
    p = stalk(ours, "--pretty", "peek", "1")
    assert p.out == 'FOUND 1 10\n(10 bytes, JSON)\n{\n  "a": [\n    1\n  ]\n}\n'
    p = stalk(ours, "--pretty", "stats")
    assert p.out.startswith("OK ") and "\ncurrent-jobs-ready " in p.out


def test_bad_input_is_explained_locally(ours, stalk):
    p = stalk(ours, "frob", "1")
    assert p.returncode == 2 and "unknown command 'frob'" in p.err
    p = stalk(ours, "delete", "x")
    assert p.returncode == 2 and "<id> must be a non-negative whole number" in p.err
    p = stalk(ours, "put", "--pri", "x", "body")
    assert p.returncode == 2 and "--pri must be a whole number" in p.err
    p = stalk(ours, "--nope")
    assert p.returncode == 2 and "unrecognized arguments" in p.err
    p = stalk(ours, "move", "a")
    assert p.returncode == 2 and "stalk move" in p.err


def test_unreachable_server_is_one_line(stalk, tmp_path):
    p = subprocess.run(STALK + ["-a", f"127.0.0.1:{free_port()}", "stats"], capture_output=True,
                       env=env_for(tmp_path), timeout=20)
    err = p.stderr.decode()
    assert p.returncode == 3
    assert err.count("\n") == 1 and "cannot connect to 127.0.0.1:" in err and "refused" in err


def test_script_from_stdin_stops_at_first_error(any_server, stalk):
    script = "use s\nput\nline one\nline two\n\nput 0 0 60 3\nabc\npeek-ready\ndelete 99\nstats\n"
    p = stalk(any_server, "-", input=script)
    assert p.returncode == 1
    assert p.out == "USING s\nINSERTED 1\nINSERTED 2\nFOUND 2 3\nabc\nNOT_FOUND\n"
    # -k keeps going; a pipe without "-" works too
    p = stalk(any_server, "-k", input="delete 99\nlist-tube-used\nbogus\nstats-job 1\n")
    assert p.returncode == 2
    assert p.out.startswith("NOT_FOUND\nUSING default\n---\n")
    assert "stdin line 3: unknown command 'bogus'" in p.err
    # top and tail, shell commands, need a terminal: said so, not skipped in silence
    p = stalk(any_server, input="top\nlist-tube-used\n")
    assert p.returncode == 2 and p.out == ""
    assert "stdin line 1: top runs in the interactive shell, or as `stalk top`" in p.err


def test_raw_bytes_and_extra_replies(any_server, stalk):
    # the body is read as 1 byte + "YZ" where CRLF should be; what follows
    # is a command of its own, and its reply is shown too
    p = stalk(any_server, "-k", input="!use  x\n!put 0 0 60 1\\r\\nxYZlist-tube-used\n")
    assert p.out.splitlines() == ["BAD_FORMAT", "EXPECTED_CRLF", "USING default"]


def test_repeat(ours, stalk):
    p = stalk(ours, "-r", "3", "-i", "0", "list-tube-used")
    assert p.out == "USING default\n" * 3


def test_put_tool_variants(ours, stalk, tmp_path):
    f = tmp_path / "job.bin"
    f.write_bytes(b"\x00file")
    p = stalk(ours, "put", "-t", "p", "--pri", "5", "--delay", "0", "--ttr", "9", "-f", str(f))
    assert p.out == "INSERTED 1\n"
    p = stalk(ours, "put", "-t", "p", "--lines", input="a\nb\n\nc\n")
    assert p.out == "INSERTED 2\nINSERTED 3\nINSERTED 4\n"
    p = stalk(ours, "put", "-t", "p", input="whole\nstdin\n")
    assert p.out == "INSERTED 5\n"
    q = Probe(ours)
    data = q.stats("stats-job 1")
    assert (data["pri"], data["ttr"], data["tube"]) == (5, 9, "p")
    assert q("peek 5").body == b"whole\nstdin"  # one final newline dropped
    assert q("peek 1").body == b"\x00file"


def test_stats_and_kick_tools(ours, stalk):
    q = Probe(ours)
    put(q, "k", "x", delay=100)
    put(q, "k", "y", delay=100)
    p = stalk(ours, "--json", "stats", "k")
    assert json.loads(p.out)["stats"]["current-jobs-delayed"] == 2
    assert stalk(ours, "kick", "k", "1").out == "KICKED 1\n"
    assert stalk(ours, "kick", "k").out == "KICKED 1\n"
    assert stalk(ours, "stats", "nope").returncode == 1
    assert "current-connections" in stalk(ours, "stats").out


def test_top_once(any_server, stalk):
    put(Probe(any_server), "t1", "x")
    p = stalk(any_server, "top", "--once")
    lines = p.out.splitlines()
    assert lines[0].startswith(f"stalk top  127.0.0.1:{any_server.port}")
    assert lines[2].split()[:6] == ["TUBE", "READY", "URGENT", "RESERVED", "DELAYED", "BURIED"]
    assert lines[4].split()[:3] == ["t1", "1", "0"]
    p = stalk(any_server, "--json", "top", "-c", "2", "-n", "0.1", "t1")
    frames = [json.loads(x) for x in p.out.splitlines()]
    assert len(frames) == 2 and frames[1]["tubes"][0]["put/s"] == "0.0"


def test_top_says_its_counts_in_the_right_number(any_server, stalk):
    """Alone on a fresh server, top's heading used to say "1 connections"
    (its own) and "1 tubes"."""
    head = stalk(any_server, "top", "--once").out.splitlines()[0]
    assert "  1 connection  0 workers  0 waiting  1 tube" in head, head


def test_tail_shows_new_jobs_without_reserving(any_server, stalk, tmp_path):
    stalk(any_server, "put", "-t", "tl", "old")
    addr = f"127.0.0.1:{any_server.port}"
    proc = subprocess.Popen(STALK + ["-a", addr, "--json", "tail", "tl", "-c", "3", "-n", "0.05", "--for", "15"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env_for(tmp_path))
    try:
        # wait until tail has its starting point (it then watches the tube)
        q = Probe(any_server)
        deadline = time.monotonic() + 10
        while (q.stats("stats-tube tl") or {}).get("current-watching", 0) < 1:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        q("use tl")
        q("put 0 0 60 5", b"first")
        q("use elsewhere")
        q("put 0 0 60 2", b"no")
        q("use tl")
        q("put 0 1 60 5", b"later")
        assert q.conn.call(b"put 0 0 60 1\r\nxYZ").word == "EXPECTED_CRLF"  # burns an id
        q("put 0 0 60 5", b"third")
        out, err = proc.communicate(timeout=20)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    jobs = [json.loads(x) for x in out.decode().splitlines()]
    assert sorted(j["body"] for j in jobs) == ["first", "later", "third"]
    stats = q.stats("stats")
    assert stats["cmd-reserve"] == 0 and stats["cmd-reserve-with-timeout"] == 0
    for j in jobs:
        assert q.stats(f"stats-job {j['id']}")["reserves"] == 0


def test_flush_is_confirmed_and_bounded(any_server, stalk):
    q = Probe(any_server)
    for i in range(3):
        put(q, "f", f"r{i}")
    put(q, "f", "d", delay=100)
    put(q, "keep", "other tube")
    p = stalk(any_server, "flush", "f", "--dry-run")
    assert p.returncode == 0 and "would delete 3 ready, 1 delayed, 0 buried" in p.err
    p = stalk(any_server, "flush", "f", input="")
    assert p.returncode == 2 and "pass --yes" in p.err
    p = stalk(any_server, "flush", "f", "--state", "delayed", "-y")
    assert p.returncode == 0 and "deleted 1 delayed" in p.err
    p = stalk(any_server, "flush", "f", "--state", "reserved", "-y")
    assert p.returncode == 2 and "reserved jobs are never touched" in p.err
    p = stalk(any_server, "flush", "f", "-y")
    assert "deleted 3 ready, 0 delayed, 0 buried" in p.err
    assert Probe(any_server).stats("stats-tube keep")["current-jobs-ready"] == 1


def test_move_keeps_every_job_and_its_attributes(any_server, stalk):
    q = Probe(any_server)
    for i in range(5):
        put(q, "src", f"job {i}", pri=10 + i, ttr=30)
    put(q, "src", "delayed", delay=300)
    put(q, "src", "to bury", pri=3)
    assert q("reserve-job 7").word == "RESERVED" and q("bury 7 3").word == "BURIED"
    p = stalk(any_server, "move", "src", "dst", "--dry-run")
    assert "would move 5 ready, 1 delayed, 1 buried" in p.err
    p = stalk(any_server, "move", "src", "dst", "-y", "--max", "2")
    assert "moved 2 ready" in p.err
    p = stalk(any_server, "move", "src", "dst", "-y")
    assert p.returncode == 0 and "moved 3 ready, 1 delayed, 1 buried" in p.err
    src = q.stats("stats-tube src")
    if src is not None:  # the reference drops empty tubes nobody uses
        assert all(src[f"current-jobs-{s}"] == 0 for s in ("ready", "delayed", "buried"))
    dst = q.stats("stats-tube dst")
    assert (dst["current-jobs-ready"], dst["current-jobs-delayed"], dst["current-jobs-buried"]) == (5, 1, 1)
    q("watch dst")
    q("ignore default")
    bodies = []
    for _ in range(5):
        job = q("reserve-with-timeout 0")
        bodies.append(job.body.decode())
        st = q.stats(f"stats-job {job.job_id}")
        assert st["ttr"] == 30 and st["pri"] == 10 + int(job.body[-1:])
    assert bodies == [f"job {i}" for i in range(5)]
    q("use dst")
    buried = q("peek-buried")
    assert buried.body == b"to bury"
    assert q.stats(f"stats-job {buried.job_id}")["pri"] == 3
    delayed = q("peek-delayed")
    assert 290 <= q.stats(f"stats-job {delayed.job_id}")["time-left"] <= 300


def test_move_resumes_a_half_done_job(ours, stalk, tmp_path):
    """A run that died between put and delete left a copy: the rerun deletes
    the original instead of copying it again."""
    q = Probe(ours)
    put(q, "a", "one")   # id 1
    put(q, "b", "one")   # id 2: the copy the dead run made
    journal = tmp_path / "move.journal"
    journal.write_text("put 1 2\n")
    p = stalk(ours, "move", "a", "b", "-y", "--journal", str(journal))
    assert p.returncode == 0
    assert "job 1 had been copied as 2; deleted the original" in p.err
    assert q.stats("stats-tube b")["current-jobs-ready"] == 1
    assert q("peek 1").word == "NOT_FOUND"
    assert not journal.exists()


def test_help_and_version(stalk):
    p = stalk(None, "help", "reserve")
    assert p.returncode == 0 and "reserve" in p.out and "Ctrl-C" in p.out
    p = stalk(None, "--help")
    assert p.returncode == 0 and "flush TUBE" in p.out
    assert stalk(None, "--version").out.startswith("stalk ")
    p = stalk(None, "tail", "--help")
    assert p.returncode == 0 and "without reserving" in p.out


def test_config_file_and_environment(ours, tmp_path):
    cfg = tmp_path / "config" / "stalk"
    cfg.mkdir(parents=True)
    (cfg / "config").write_text(f"[stalk]\naddress = 127.0.0.1:{ours.port}\nput_pri = 77\n")
    env = env_for(tmp_path)
    p = subprocess.run(STALK + ["-"], input=b"put\nx\n\nstats-job 1\n", capture_output=True, env=env, timeout=20)
    assert p.returncode == 0 and b"\npri: 77\n" in p.stdout
    env["STALK_ADDRESS"] = f"127.0.0.1:{free_port()}"
    p = subprocess.run(STALK + ["stats"], capture_output=True, env=env, timeout=20)
    assert p.returncode == 3


def test_raw_output_is_the_bytes_as_sent(any_server, stalk):
    """--raw promises the bytes as the server sent them: the OK line is kept
    and CRLF stays CRLF (the plain default into a pipe is for text tools)."""
    stalk(any_server, "put", "hello")
    p = stalk(any_server, "--raw", "peek", "1")
    assert p.stdout == b"FOUND 1 5\r\nhello\r\n"
    p = stalk(any_server, "--raw", "list-tubes")
    assert p.stdout == b"OK 14\r\n---\n- default\n\r\n"
    p = stalk(any_server, "--raw", "delete", "9")
    assert p.stdout == b"NOT_FOUND\r\n"
    p = stalk(any_server, "peek", "1")
    assert p.stdout == b"FOUND 1 5\nhello\n"
    p = stalk(any_server, "list-tubes")
    assert p.stdout == b"---\n- default\n"


def test_put_tool_bodies_follow_one_newline_rule(ours, stalk, tmp_path):
    """echo, files and editors end text with a newline: one final line break
    is dropped from a text body read from stdin or a file (as from the
    editor in the shell); --exact keeps the bytes; binary is never changed."""
    q = Probe(ours)
    text = tmp_path / "t.txt"
    text.write_bytes(b"from a file\r\n")
    binary = tmp_path / "b.bin"
    binary.write_bytes(b"\x00\x01\n")
    assert stalk(ours, "put", input="hi\n").out == "INSERTED 1\n"
    assert stalk(ours, "put", "-f", str(text), "-f", str(binary)).out == "INSERTED 2\nINSERTED 3\n"
    assert stalk(ours, "put", "--exact", input="hi\n").out == "INSERTED 4\n"
    assert stalk(ours, "put", "--exact", "-f", str(text)).out == "INSERTED 5\n"
    bodies = [q(f"peek {i}").body for i in range(1, 6)]
    assert bodies == [b"hi", b"from a file", b"\x00\x01\n", b"hi\n", b"from a file\r\n"]


def test_put_tool_refuses_a_body_that_looks_like_a_command_line(ours, stalk):
    """stalk put 0 0 60 5 used to put the body "0 0 60 5" silently."""
    for args in (["0", "0", "60", "5"], ["1024", "0", "60"], ["put", "0", "0", "60"]):
        p = stalk(ours, "put", *args)
        assert p.returncode == 2 and p.out == ""
        assert "looks like a command line" in p.err and "stalk put -- " in p.err
    assert Probe(ours).stats("stats")["total-jobs"] == 0
    p = stalk(ours, "put", "--", "0", "0", "60", "5")  # on purpose
    assert p.out == "INSERTED 1\n" and Probe(ours)("peek 1").body == b"0 0 60 5"
