"""End to end: the real ``stalk`` program in a pseudo-terminal against a real
server on loopback.  pexpect reads the stream of bytes it writes (put with a
body, reserve, Ctrl-C out of a blocking reserve, history across runs, Ctrl-R
search); tmux keeps a real screen for what a person sees (a prompt wider than
the window, wrapped lines, the toolbar, the pager)."""
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest

from servers import REFERENCE, start_server
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


def terminal_env(tmp_path):
    env = dict(os.environ)
    for key in ("STALK_ADDRESS", "STALK_CONFIG", "STALK_DEBUG", "NO_COLOR", "PAGER", "LESS"):
        env.pop(key, None)
    env.update(XDG_CONFIG_HOME=str(tmp_path / "config"), XDG_DATA_HOME=str(tmp_path / "data"),
               XDG_STATE_HOME=str(tmp_path / "state"), TERM="xterm-256color",
               PYTHONUNBUFFERED="1")
    return env


def spawn(server, tmp_path, *args, dimensions=(30, 140)):
    child = pexpect.spawn(sys.executable, ["-m", "twisted_stalk_cli.shell", "-a", f"127.0.0.1:{server.port}",
                                           *args],
                          env=terminal_env(tmp_path), dimensions=dimensions, encoding="utf-8",
                          timeout=15)
    try:
        expect(child, "connected to 127.0.0.1:%d" % server.port)
        expect(child, "watch=default")
    except BaseException:
        child.close(force=True)  # never leave the program running
        raise
    return child


def leave(child):
    """Ctrl-D, then the program must exit within 15 s (EOF), answering the
    prompt's cursor position requests meanwhile (unanswered, each one costs
    prompt_toolkit a second's wait)."""
    child.send(CTRL_D)
    deadline = time.monotonic() + 15
    while child.expect([pexpect.EOF, "\x1b\\[6n"], timeout=max(0.1, deadline - time.monotonic())):
        child.send("\x1b[1;1R")


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


# --------------------------------------------------------------------------
# What a person sees: the program in tmux, read back with capture-pane

TMUX = shutil.which("tmux")


class Screen:
    """The real ``stalk`` in a tmux window of ``cols`` x ``rows``: keys go in
    with send-keys, the screen comes back with capture-pane (tmux answers the
    terminal queries prompt_toolkit makes, as a terminal does).  Every wait
    has a deadline, so a test fails instead of hanging."""

    def __init__(self, tmp_path, argv, *, cols=80, rows=24, env=None):
        if TMUX is None:
            pytest.skip("tmux is not installed")
        self.socket = str(tmp_path / "tmux")
        env = dict(env or terminal_env(tmp_path))
        self._tmux("-f", "/dev/null", "new-session", "-d", "-x", str(cols), "-y", str(rows),
                   "--", sys.executable, "-m", "twisted_stalk_cli.shell", *argv, env=env)

    def _tmux(self, *args, env=None):
        return subprocess.run([TMUX, "-S", self.socket, *args], env=env, check=True,
                              capture_output=True, text=True, timeout=10).stdout

    def keys(self, *keys):
        """Named keys (Enter, Tab, C-c, Escape ...), as tmux send-keys takes them."""
        self._tmux("send-keys", "-t", "0", *keys)

    def type(self, text):
        """Literal text, in one burst."""
        self._tmux("send-keys", "-t", "0", "-l", text)

    def text(self):
        return self._tmux("capture-pane", "-p", "-t", "0")

    def wait(self, check, timeout=10, what=""):
        """Until ``check(screen text)`` is true; returns the screen."""
        deadline = time.monotonic() + timeout
        while True:
            text = self.text()
            if check(text):
                return text
            if time.monotonic() > deadline:
                raise AssertionError(f"not on screen within {timeout} s: {what or check}\n{text}")
            time.sleep(0.05)

    def settle(self, check, timeout=10, what="", quiet=0.5):
        """Until ``check(screen text)`` is true and the screen has not changed
        for ``quiet`` seconds (a redraw has finished); returns the screen."""
        deadline = time.monotonic() + timeout
        text = self.wait(check, timeout, what)
        since = time.monotonic()
        while time.monotonic() - since < quiet:
            time.sleep(0.05)
            now = self.text()
            if now != text or not check(now):
                text, since = self.wait(check, max(0.1, deadline - time.monotonic()), what), \
                    time.monotonic()
        return text

    def wait_for(self, needle, timeout=10):
        return self.wait(lambda text: needle in text, timeout, repr(needle))

    def put(self, body, inserted):
        """``put`` at the prompt with a one-line ``body``; waits for ``INSERTED <inserted>``."""
        self.type("put")
        self.keys("Enter")
        self.type(body)
        self.keys("Enter", "Enter")
        self.wait_for(f"INSERTED {inserted}")

    def close(self):
        subprocess.run([TMUX, "-S", self.socket, "kill-server"], capture_output=True, timeout=10)

    def resize(self, cols, rows=24):
        self._tmux("resize-window", "-t", "0", "-x", str(cols), "-y", str(rows))


@pytest.fixture
def screen(tmp_path):
    """``screen(server, cols=80, rows=24, *args)``: stalk in tmux, connected."""
    opened = []

    def open_screen(server, cols=80, rows=24, *args, env=None):
        s = Screen(tmp_path, ["-a", f"127.0.0.1:{server.port}", *args], cols=cols, rows=rows, env=env)
        opened.append(s)
        s.wait_for("connected to")
        # keys typed before the prompt is up are echoed by the terminal and
        # throw prompt_toolkit's idea of the cursor column off; wait for it
        s.wait(lambda text: any(line.rstrip().endswith(">") for line in text.splitlines()),
               what="the prompt")
        return s

    yield open_screen
    for s in opened:
        s.close()


def prompt_ends_with(typed):
    """A check: some screen line is the prompt followed by ``typed``."""
    def check(text):
        return any(line.rstrip().endswith("> " + typed) for line in text.splitlines())
    return check


def test_prompt_fits_any_window(ours, screen):
    """A prompt wider than the window used to blank the screen (the wrapped
    part got a continuation prefix as wide as the prompt): three watched
    tubes at 80 columns, a 100-character tube name at 140, and narrower."""
    s = screen(ours, 80)
    for n, tube in enumerate(("aaaaaaaaaa", "bbbbbbbbbb", "cccccccccc"), start=2):
        s.type(f"watch {tube}")
        s.keys("Enter")
        s.wait_for(f"WATCHING {n}")
    s.type("stats")
    text = s.wait(prompt_ends_with("stats"), what="the prompt, then 'stats'")
    assert "connected to" in text and "WATCHING 4" in text  # earlier output stays
    s.keys("C-c")
    s.resize(140)
    long_name = "t" * 100
    s.type(f"use {long_name}")
    s.keys("Enter")
    s.wait_for(f"USING {long_name}")
    s.type("stats")
    text = s.wait(prompt_ends_with("stats"), what="the prompt, then 'stats'")
    assert "body>" not in text  # a wrapped command line is not a body line
    s.keys("C-c")
    s.resize(40)
    # Type only once the prompt is drawn for 40 columns and the redraw is
    # over: keys that arrive while a slow interpreter (PyPy, loaded) redraws
    # after the resize land in the old line.
    s.settle(lambda text: any("[use=ttt" in line and "\u2026" in line
                              for line in text.splitlines()),
             what="the prompt shortened for 40 columns")
    s.type("list-tube-used")
    s.wait(prompt_ends_with("list-tube-used"), what="the prompt at 40 columns")


def test_completion_never_blocks_typing(ours, screen):
    """Completing a tube name asks the server for its tubes; a server that
    stops answering used to freeze the prompt for the 30 s reply timeout.
    Lookups run in the background with a short deadline."""
    s = screen(ours, 100)
    os.kill(ours.proc.pid, signal.SIGSTOP)
    try:
        s.type("use ab")
        s.type("c")
        s.wait(prompt_ends_with("use abc"), timeout=3, what="'use abc' typed while the server is stopped")
        s.keys("BSpace")
        s.type("d")
        s.wait(prompt_ends_with("use abd"), timeout=3, what="'use abd'")
    finally:
        os.kill(ours.proc.pid, signal.SIGCONT)
    s.keys("Enter")
    s.wait_for("USING abd")


@pytest.fixture
def reference_or_ours():
    """beanstalkd when installed (ours otherwise): one server, to keep these
    tests short; the REPL and command-line tests cover both."""
    server = start_server("reference" if REFERENCE else "ours")
    yield server
    server.stop()


def toolbar_countdown(text):
    """The reserved jobs the toolbar (the screen's last lines) counts down."""
    return re.findall(r"#(\d+) \d+s", "\n".join(text.rstrip().splitlines()[-2:]))


def test_lost_connection_is_reported_with_the_returned_jobs(reference_or_ours, screen):
    """The server goes away while the shell is idle with a job reserved: it
    says so (it used to say only "cannot connect" at the next command, and
    the toolbar went on counting the lost reservation down)."""
    server = reference_or_ours
    s = screen(server, 100)
    s.put("x", inserted=1)
    s.type("reserve")
    s.keys("Enter")
    s.wait(lambda text: toolbar_countdown(text) == ["1"], what="#1 counting down")
    server.stop()
    s.type("use abc")
    s.keys("Enter")
    text = s.wait_for("cannot connect")
    assert "closed by the server" in text
    assert "the server returned the jobs reserved on it to ready: #1" in text
    assert toolbar_countdown(text) == []


def test_a_line_sent_in_pieces(ours, tmp_path):
    """``\\raw TEXT\\c`` sends a line without its CRLF: the shell used to wait
    30 s for a reply that could not come, then drop the connection."""
    child = spawn(ours, tmp_path)
    try:
        child.send("\\raw use fo\\c\r")
        expect(child, "waits for the rest of a line", timeout=5)
        child.send("!o\r")
        expect(child, "USING foo")
        expect(child, "use=foo")
        leave(child)
    finally:
        child.close(force=True)


def test_a_put_body_shorter_than_its_count(reference_or_ours, tmp_path):
    """A put whose body is shorter than its byte count leaves the server
    reading the body: the shell says how many bytes it waits for (it used to
    wait 30 s in silence), and they can be sent raw."""
    child = spawn(reference_or_ours, tmp_path)
    try:
        child.send("put 0 0 60 8\r")
        expect(child, "body>")
        child.send("hi\x1b\r")  # Alt-Enter: send now
        expect(child, "waits for 6 more bytes of a put body", timeout=5)
        child.send("peek 1\r")  # refused: the server would read it as body bytes
        expect(child, "would read this command as part")
        child.send("\x03!abcd\r")  # the CRLF after abcd ends the body
        expect(child, "INSERTED 1")
        child.send("peek 1\r")
        expect(child, "FOUND 1 8")
        leave(child)
    finally:
        child.close(force=True)


def test_tail_shows_only_jobs_put_after_it_started(tmp_path):
    """``stalk tail`` used to show old jobs as new when ids had gaps (a put
    refused with EXPECTED_CRLF uses up an id on beanstalkd) or after a binlog
    restart (``total-jobs`` starts again from 0): it printed 19 of 20 old jobs."""
    kind = "reference" if REFERENCE else "ours"
    binlog = tmp_path / "binlog"
    binlog.mkdir()
    server = start_server(kind, "-b", str(binlog))
    child = None
    try:
        target = parse_target(f"127.0.0.1:{server.port}")
        conn = Connection(target, reply_timeout=5)
        conn.connect()
        conn.command("use", "tailed")
        for i in range(19):
            assert conn.command("put", 0, 0, 60, body=b"old %d" % i).word == "INSERTED"
        conn.exchange(b"put 0 0 60 2\r\nhello\r\n")  # EXPECTED_CRLF (and UNKNOWN_COMMAND)
        last_old = conn.command("put", 0, 0, 60, body=b"old last").job_id
        conn.close()
        port = server.port
        server.stop()
        server = start_server(kind, "-b", str(binlog), port=port)
        child = pexpect.spawn(sys.executable, ["-m", "twisted_stalk_cli.shell", "-a", f"127.0.0.1:{port}",
                                               "tail", "tailed", "-n", "0.1"],
                              env=terminal_env(tmp_path), dimensions=(30, 140), encoding="utf-8")
        expect(child, "tailing tailed")
        conn.connect()
        conn.command("use", "tailed")
        new = conn.command("put", 0, 0, 60, body=b"brand new").job_id
        conn.close()
        assert new > last_old
        expect(child, r"#(\d+)  tailed")
        assert int(child.match.group(1)) == new, f"an old job shown as new: {child.match.group(0)}"
        expect(child, "brand new")
        child.send(CTRL_C)
        child.expect(pexpect.EOF, timeout=15)
    finally:
        if child is not None:
            child.close(force=True)
        server.stop()


def test_tab_in_the_same_burst_as_the_text(ours, tmp_path):
    """Text and Tab arriving together (a paste then Tab, a laggy SSH link)
    used to lose the Tab: completion while typing was still running."""
    child = spawn(ours, tmp_path)
    try:
        child.send("stats-t\t")
        child.send("default\r")
        expect(child, "current-jobs-ready")
        leave(child)
    finally:
        child.close(force=True)


def test_help_is_paged_and_a_wrapped_body_line_stays_one_line(ours, screen):
    """Output taller than the window goes through less (help used to scroll
    its start away); a body line wider than the window wraps under a blank
    prefix (it used to get a second body> and look like two lines)."""
    s = screen(ours, 80, 24)
    s.type("put")
    s.keys("Enter")
    s.type("x" * 100)
    s.keys("Enter")
    s.type("y")
    text = s.wait_for("body> y")
    assert text.count("body>") == 2, text
    s.keys("Escape", "Enter")  # Alt-Enter: send now
    s.wait_for("INSERTED 1")
    if shutil.which("less") is None:
        pytest.skip("less is not installed: the pager part is not tested")
    s.type("help")
    s.keys("Enter")
    text = s.wait_for("Producer commands:")  # the first page, in less
    assert "Ctrl-D quits" not in text
    s.keys("q")
    s.wait(lambda t: re.search(r"\]> *$", t, re.M), what="the prompt after less")
    s.type("\\pager off")
    s.keys("Enter")
    s.wait_for("pager off")
    s.type("help")
    s.keys("Enter")
    s.wait_for("Ctrl-D quits")
