"""End to end: the real ``stalk`` program in a pseudo-terminal (pexpect)
against a real server on loopback: put with a body, reserve, Ctrl-C out of a
blocking reserve, history across runs, Ctrl-R search."""
import os
import sys
import time

import pytest

from twisted_stalk.protocol.yaml import parse_mapping
from twisted_stalk_cli.shell.conn import Connection
from twisted_stalk_cli.shell.target import parse_target

pexpect = pytest.importorskip("pexpect")

CTRL_C, CTRL_D, CTRL_R, UP = "\x03", "\x04", "\x12", "\x1b[A"


def expect(child, pattern, timeout=15):
    """child.expect, answering prompt_toolkit's cursor position requests the
    way a terminal does (without answers it hides the bottom toolbar).

    ``timeout`` bounds the whole wait, however many requests come meanwhile
    (the prompt redraws its toolbar every 0.5 s), so this never loops forever."""
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise pexpect.TIMEOUT(f"{pattern!r} not seen within {timeout} s; "
                                  f"last output: {child.before!r}")
        if child.expect([pattern, "\x1b\\[6n"], timeout=left) == 0:
            return
        child.send("\x1b[1;1R")


def spawn(server, tmp_path):
    env = dict(os.environ)
    for key in ("STALK_ADDRESS", "STALK_CONFIG", "STALK_DEBUG", "NO_COLOR"):
        env.pop(key, None)
    env.update(XDG_CONFIG_HOME=str(tmp_path / "config"), XDG_DATA_HOME=str(tmp_path / "data"),
               TERM="xterm-256color", PYTHONUNBUFFERED="1")
    child = pexpect.spawn(sys.executable, ["-m", "twisted_stalk_cli.shell", "-a", f"127.0.0.1:{server.port}"],
                          env=env, dimensions=(30, 140), encoding="utf-8", timeout=15)
    try:
        expect(child, "connected to 127.0.0.1:%d" % server.port)
        expect(child, "watch=default")
    except BaseException:
        child.close(force=True)  # never leave the program running
        raise
    return child


def leave(child):
    """Ctrl-D, then the program must exit within 15 s (EOF)."""
    child.send(CTRL_D)
    child.expect(pexpect.EOF, timeout=15)


def job_state(server, job_id):
    conn = Connection(parse_target(f"127.0.0.1:{server.port}"), reply_timeout=5)
    conn.connect()
    try:
        reply = conn.call(b"stats-job %d\r\n" % job_id)
        return parse_mapping(reply.body)["state"] if reply.body else reply.word
    finally:
        conn.close()


def test_interactive_session_in_a_terminal(any_server, tmp_path):
    child = spawn(any_server, tmp_path)
    try:
        child.send("use e2e\r")
        expect(child, "USING e2e")
        expect(child, "use=e2e")
        # put with the body on the next line, ended by an empty line
        child.send("put\r")
        expect(child, "body>")
        child.send("hello terminal\r")
        child.send("\r")
        expect(child, "INSERTED 1")
        child.send("watch e2e\r")
        expect(child, "WATCHING 2")
        child.send("reserve\r")
        expect(child, "RESERVED 1 14")
        expect(child, "hello terminal")
        # the toolbar shows the reserved job and its TTR countdown
        expect(child, "reserved:")
        expect(child, r"#1 \d+s")
        # a blocking reserve, interrupted with Ctrl-C
        child.send("reserve\r")
        expect(child, "waiting for a job")
        child.send(CTRL_C)
        expect(child, "reserve interrupted: dropped that connection")
        expect(child, "#1")
        expect(child, "restored use=e2e watch=default,e2e")
        assert job_state(any_server, 1) == "ready"
        # still usable, with the state restored on the new connection
        child.send("list-tube-used\r")
        expect(child, "USING e2e")
        leave(child)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0
    history = tmp_path / "data" / "stalk" / "history"
    assert "\n+reserve\n" in history.read_text()

    # a second run: Up recalls the last command, Ctrl-R finds older ones
    child = spawn(any_server, tmp_path)
    try:
        child.send(UP + "\r")
        expect(child, "USING default")  # list-tube-used, on the new connection
        for search, reply in (("use e2", "USING e2e"), ("watch", "WATCHING 2"), ("reserve", "RESERVED 1 14")):
            child.send(CTRL_R + search)
            expect(child, "reverse-i-search")
            child.send("\r")  # accept the search
            child.send("\r")  # run it
            expect(child, reply)
        leave(child)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0
