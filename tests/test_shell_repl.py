"""The REPL driven through prompt_toolkit's pipe input against real servers."""
import os
import re
import signal
import socket
import threading
import time

import pytest
from prompt_toolkit.history import InMemoryHistory
from prompt_toolkit.input import create_pipe_input
from prompt_toolkit.output import DummyOutput

from servers import start_server
from twisted_stalk_cli.shell.render import plain
from twisted_stalk_cli.shell.repl import Shell
from twisted_stalk_cli.shell.target import parse_target
from twisted_stalk_cli.shell.tracked import TrackedConnection

ENTER = "\r"
CTRL_C = "\x03"
CTRL_D = "\x04"


class Recorder:
    def __init__(self):
        self.chunks = []

    def __call__(self, fragments):
        self.chunks.append(plain(fragments))

    @property
    def text(self):
        return "".join(self.chunks)


def make_shell(server, inp, **kw):
    out = Recorder()
    session = TrackedConnection(parse_target(f"127.0.0.1:{server.port}"), reply_timeout=5)
    shell = Shell(session, input=inp, output=DummyOutput(), write=out,
                  history=kw.pop("history", InMemoryHistory()), **kw)
    return shell, out


def run_keys(server, keys, **kw):
    with create_pipe_input() as inp:
        inp.send_text(keys)
        shell, out = make_shell(server, inp, **kw)
        status = shell.run(banner=False)
    return shell, out.text, status


def ask(server, line):
    """One command on a separate connection (to look at the server's state)."""
    with socket.create_connection(server.address, timeout=5) as s:
        s.sendall(line.encode() + b"\r\n")
        data = b""
        while not data.endswith(b"\r\n") or (data.startswith(b"OK ") and data.count(b"\r\n") < 2):
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        return data.decode()


def test_repl_session_put_peek_reserve(any_server):
    keys = ("use emails" + ENTER
            + "put" + ENTER + '{"to": "a@b.c"}' + ENTER + ENTER
            + "put 5 0 60 5" + ENTER + "hello" + ENTER
            + "peek-ready" + ENTER
            + "watch emails" + ENTER + "ignore default" + ENTER
            + "reserve" + ENTER
            + "stats-tube emails" + ENTER
            + "list-tubes-watched" + ENTER
            + CTRL_D)
    shell, text, status = run_keys(any_server, keys)
    assert status == 0
    assert "connected to 127.0.0.1:" in text
    assert "USING emails" in text
    assert "INSERTED 1\n" in text and "INSERTED 2\n" in text
    assert "FOUND 2 5\n(5 bytes, text)\nhello\n" in text
    assert "WATCHING 2" in text and "WATCHING 1" in text
    assert "RESERVED 2 5" in text
    assert "current-jobs-reserved  1" in text
    assert "- emails" in text
    assert shell.session.use == "emails" and shell.session.watch == ["emails"]
    assert shell.state_text() == "use=emails watch=emails"
    assert 2 in shell.session.reserved and shell.session.reserved[2].deadline is not None
    assert list(shell.known.jobs) == [2, 1]
    assert "emails" in shell.known.tubes


def test_repl_json_body_is_pretty_printed(ours):
    keys = "put" + ENTER + '{"a":[1,2]}' + ENTER + ENTER + "peek-ready" + ENTER + CTRL_D
    _, text, _ = run_keys(ours, keys)
    assert '(11 bytes, JSON)\n{\n  "a": [\n    1,\n    2\n  ]\n}\n' in text


def test_repl_validation_keeps_bad_commands_local(ours):
    keys = "\\wire on" + ENTER + "frob 1" + ENTER + CTRL_C + "stats-job x" + ENTER + CTRL_C + "!frob" + ENTER + CTRL_D
    shell, text, _ = run_keys(ours, keys)
    assert ">> frob 1" not in text and ">> stats-job x" not in text
    assert ">> frob\\r\\n" in text
    assert "UNKNOWN_COMMAND  (the server does not know this command)" in text


def test_repl_wire_toggle_and_help(ours):
    keys = ("\\wire" + ENTER + "use wired" + ENTER + "\\wire off" + ENTER + "list-tube-used" + ENTER
            + "help" + ENTER + "help put" + ENTER + "help nope" + ENTER + CTRL_D)
    _, text, _ = run_keys(ours, keys)
    assert "wire display on" in text
    assert ">> use wired\\r\\n" in text and "<< USING wired\\r\\n" in text
    assert ">> list-tube-used" not in text
    assert "Worker commands:" in text and "reserve-with-timeout <seconds>" in text
    assert "put <pri> <delay> <ttr> [bytes]" in text and "leave it out and the shell counts" in text
    assert "no command 'nope'" in text


def test_repl_put_from_file_and_editor(ours, tmp_path):
    body = tmp_path / "b.bin"
    body.write_bytes(b"\x00\x01binary")
    keys = f"put @{body}" + ENTER + "put 1 0 5 $EDITOR" + ENTER + "peek 1" + ENTER + "peek 2" + ENTER + CTRL_D
    _, text, _ = run_keys(ours, keys, editor=lambda initial: b"edited body")
    assert "INSERTED 1" in text and "INSERTED 2" in text
    assert "(8 bytes, binary, escaped)\n\\x00\\x01binary" in text
    assert "edited body" in text


@pytest.fixture
def python_sigint():
    """Python's own SIGINT handler (KeyboardInterrupt), as the stalk program
    has.  Trial tests that ran the global reactor earlier in this pytest
    process (test_client_wire, test_client_tls ...) leave the reactor's
    handler installed, which only schedules reactor.stop(): the blocking recv
    would then never be interrupted (the old test hung until DEADLINE_SOON,
    about 60 s, and failed, depending on which tests ran before it)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


class CtrlC(threading.Thread):
    """Presses Ctrl-C (SIGINT to the main thread) once the shell waits in a
    blocking reserve: after it has said so and the server counts a waiting
    connection.  A fixed delay raced with the shell's own 0.3 s pause before
    "waiting for a job" under load (the interrupt then came before the
    message).  Never hangs: it presses anyway after ``limit`` seconds, and if
    the shell is still blocked ``limit`` seconds after the press it shuts its
    socket down (``unblocked``), so the test fails at once instead."""

    def __init__(self, server, out, conn, limit=10.0):
        super().__init__(daemon=True)
        self.server, self.out, self.conn, self.limit = server, out, conn, limit
        self.main = threading.main_thread().ident
        self.stop = threading.Event()
        self.unblocked = False

    def run(self):
        deadline = time.monotonic() + self.limit
        while not self.stop.is_set() and time.monotonic() < deadline:
            if ("waiting for a job" in self.out.text
                    and "current-waiting: 1" in ask(self.server, "stats")):
                break
            self.stop.wait(0.02)
        if self.stop.is_set():
            return
        signal.pthread_kill(self.main, signal.SIGINT)
        if not self.stop.wait(self.limit):
            self.unblocked = True
            try:
                self.conn.sock.shutdown(socket.SHUT_RDWR)
            except (AttributeError, OSError):
                pass


def test_ctrl_c_out_of_a_blocking_reserve(any_server, python_sigint):
    """Ctrl-C drops the connection, reconnects, restores use/watch and says
    that the jobs reserved on the old connection went back to ready."""
    with create_pipe_input() as inp:
        shell, out = make_shell(any_server, inp)
        assert shell.ensure_connected()
        for line in ("use work", "watch work", "ignore default", "put\nfirst\n", "reserve"):
            assert shell.handle(line)
        assert "RESERVED 1 5" in out.text
        assert list(shell.session.reserved) == [1]
        ctrl_c = CtrlC(any_server, out, shell.session.conn)
        ctrl_c.start()
        try:
            assert shell.handle("reserve")  # nothing ready: blocks until Ctrl-C
        finally:
            ctrl_c.stop.set()
            ctrl_c.join(5)
        assert not ctrl_c.unblocked, "SIGINT did not interrupt the blocking reserve"
        text = out.text
        assert "reserve: waiting for a job (Ctrl-C to give up)" in text
        assert "reserve interrupted: dropped that connection" in text
        assert "the server returned the jobs reserved on it to ready: #1" in text
        assert "restored use=work watch=work" in text
        assert shell.session.reserved == {}
        assert shell.known.jobs[1] == "returned to ready"  # as completion labels it
        assert "state: ready" in ask(any_server, "stats-job 1")
        # the new connection really uses/watches work
        shell.handle("list-tube-used")
        shell.handle("list-tubes-watched")
        assert out.text.endswith("OK 11\n- work  (using, watching)\n")
        shell.handle("reserve-with-timeout 0")
        assert "RESERVED 1 5" in out.chunks[-1]
        shell.session.conn.close()


def test_connection_loss_reconnects_and_restores(tmp_path):
    server = start_server("ours")
    port = server.port
    try:
        with create_pipe_input() as inp:
            shell, out = make_shell(server, inp)
            assert shell.ensure_connected()
            shell.handle("use lost")
            shell.handle("watch lost")
            server.stop()
            shell.handle("stats")
            text = out.text
            assert "closed by the server" in text or "lost" in text
            assert "no reply to stats: it may or may not have taken effect" in text
            assert "cannot connect to 127.0.0.1:%d" % port in text
            assert "Press Enter to retry" in text
            assert "(disconnected: Enter retries)" in plain(shell.prompt_message())
            server = start_server("ours", port=port)
            shell.handle("")  # Enter retries
            assert "reconnected to 127.0.0.1:%d; restored use lost, watch lost" % port in out.text
            shell.handle("list-tube-used")
            assert out.chunks[-1] == "USING lost\n"
            shell.session.conn.close()
    finally:
        server.stop()


def test_quit_and_exit_leave_the_shell(ours):
    _, text, status = run_keys(ours, "quit" + ENTER + "stats" + ENTER)
    assert status == 0 and "OK " not in text
    _, text, status = run_keys(ours, "\\q" + ENTER + "stats" + ENTER)
    assert status == 0 and "OK " not in text


def test_history_is_kept_in_a_file(ours, tmp_path):
    from prompt_toolkit.history import FileHistory
    path = tmp_path / "history"
    run_keys(ours, "put" + ENTER + "multi" + ENTER + "line" + ENTER + ENTER + "use hist" + ENTER + CTRL_D,
             history=FileHistory(str(path)))
    entries = list(FileHistory(str(path)).load_history_strings())
    assert entries[:2] == ["use hist", "put\nmulti\nline\n"]
    # a new session: Up recalls "use hist"; Ctrl-R finds the put with its body
    def history():
        # prompt_toolkit reads the file in a background task that may lose
        # the race with keys already waiting in the pipe; a person cannot type
        # that fast (the terminal test covers it), so read it up front here.
        h = FileHistory(str(path))
        h._loaded_strings = list(h.load_history_strings())
        h._loaded = True
        return h

    _, text, _ = run_keys(ours, "\x1b[A" + ENTER + CTRL_D, history=history())
    assert "USING hist" in text
    _, text, _ = run_keys(ours, "\x12multi" + ENTER + ENTER + "peek-ready" + ENTER + CTRL_D,
                          history=history())
    assert "INSERTED 2" in text and "FOUND 1 10\n(10 bytes, text)\nmulti\nline\n" in text


def test_internal_errors_never_show_a_traceback(ours, monkeypatch):
    def boom(*a, **k):
        raise RuntimeError("kaput")
    with create_pipe_input() as inp:
        inp.send_text("stats" + ENTER + CTRL_D)
        shell, out = make_shell(ours, inp)
        monkeypatch.setattr(shell, "handle", boom)
        assert shell.run(banner=False) == 0
    assert "internal error: RuntimeError: kaput" in out.text
    assert "Traceback" not in out.text


def test_alt_enter_sends_a_body_without_the_empty_line(ours):
    keys = "put" + ENTER + "x" + "\x1b" + ENTER + "peek-ready" + ENTER + CTRL_D
    _, text, _ = run_keys(ours, keys)
    assert "INSERTED 1" in text and "FOUND 1 1\n" in text


def test_toolbar_counts_down_reserved_jobs_and_forgets_expired_ones():
    from twisted_stalk_cli.shell.tracked import Reserved
    now = [100.0]
    with create_pipe_input() as inp:
        session = TrackedConnection(parse_target("127.0.0.1:1"), clock=lambda: now[0])
        shell = Shell(session, input=inp, output=DummyOutput(), write=Recorder(),
                      clock=lambda: now[0])
        session.reserved[5] = Reserved(5, deadline=130.0)
        assert "#5 30s" in plain(shell.toolbar())
        now[0] = 129.5
        assert "#5 0.5s DEADLINE_SOON" in plain(shell.toolbar())
        now[0] = 131.0
        assert "#5 TTR expired" in plain(shell.toolbar())
        now[0] = 141.0
        assert "#5" not in plain(shell.toolbar()) and session.reserved == {}
        shell.prompt.default_buffer.text = "release 5 "
        assert "<pri>: priority" in plain(shell.toolbar())


def test_ctrl_c_during_the_shells_own_request_keeps_replies_in_step(ours, monkeypatch):
    """Ctrl-C after the shell sent one of its own commands (here the stats-job
    that reads a reserved job's TTR) and before its reply came: that
    connection is closed and a new one made, so the late reply can never be
    taken for the answer to the next command."""
    from twisted_stalk_cli.shell import conn as shell_conn
    send = shell_conn.Connection.send
    pressed = []

    def send_then_ctrl_c(self, data):
        sent = send(self, data)
        if data.startswith(b"stats-job") and not pressed:
            pressed.append(data)
            raise KeyboardInterrupt
        return sent

    monkeypatch.setattr(shell_conn.Connection, "send", send_then_ctrl_c)
    keys = "put" + ENTER + "x" + ENTER + ENTER + "reserve" + ENTER + "list-tube-used" + ENTER + CTRL_D
    shell, text, status = run_keys(ours, keys)
    assert status == 0 and pressed
    assert "RESERVED 1 1" in text
    assert "interrupted\n" in text
    assert "the server returned the jobs reserved on it to ready: #1" in text
    assert text.endswith("USING default\n")
    assert "state: ready" in ask(ours, "stats-job 1")


def test_tube_lookup_runs_in_the_background(ours):
    """Completion's list-tubes goes out on a connection of its own, in a
    thread, at most every ``interval`` s, with a short deadline: a stopped
    server costs the prompt nothing."""
    from twisted_stalk_cli.shell.lookup import TubeLookup
    target = parse_target(f"127.0.0.1:{ours.port}")
    lookup = TubeLookup(target, interval=60)
    try:
        assert lookup.request()
        assert not lookup.request()  # running, then too soon
        lookup.wait(5)
        assert lookup.take() == ["default"] and lookup.take() is None
        assert not lookup.request()
        # job ids to check: those the server no longer has are handed over once
        assert ask(ours, "put 0 0 60 1\r\nx").startswith("INSERTED 1")
        assert lookup.refresh_now([1, 7, 99])
        lookup.wait(5)
        assert lookup.take_gone() == [7, 99] and lookup.take_gone() == []
    finally:
        lookup.close()
    os.kill(ours.proc.pid, signal.SIGSTOP)
    try:
        done = threading.Event()
        lookup = TubeLookup(target, timeout=0.3, on_done=done.set)
        started = time.monotonic()
        assert lookup.request()
        assert time.monotonic() - started < 0.2
        assert done.wait(5)
        assert lookup.take() is None and "no reply" in lookup.failed
        lookup.close()
    finally:
        os.kill(ours.proc.pid, signal.SIGCONT)


def test_a_loss_noticed_while_idle_is_reported_once(ours):
    """The server closes the connection between commands: the toolbar (drawn
    every half second) notices without waiting, stops counting down the
    reservation, and the loss is reported with the jobs the server returned."""
    with create_pipe_input() as inp:
        shell, out = make_shell(ours, inp)
        assert shell.ensure_connected()
        shell.handle("put\nx\n")
        shell.handle("reserve")
        assert "#1" in plain(shell.toolbar())
        ours.stop()
        deadline = time.monotonic() + 5
        while "disconnected" not in plain(shell.toolbar()):
            assert time.monotonic() < deadline, "the loss was not noticed"
            time.sleep(0.02)
        assert "#1" not in plain(shell.toolbar())
        shell.handle("stats")
        text = out.text
        assert re.search(r"connection to 127.0.0.1:%d (closed by the server|lost)" % ours.port, text)
        assert "the server returned the jobs reserved on it to ready: #1" in text
        assert "cannot connect" in text
        assert shell.known.jobs[1] != "reserved"
        shell.handle("")
        assert len(re.findall("closed by the server|lost", out.text)) == 1


def test_a_tab_while_typings_completion_still_loads_asks_the_server(ours):
    """A Tab on a tube name that finds the completion-while-typing still
    loading (prompt_toolkit's menu state set, no completion in it yet; a
    loaded machine, a fast typist) asks for a lookup and completes from its
    answer, as a Tab with no menu does: it used to complete at once from the
    last lookup's list, which lacked a tube created since (a flaky terminal
    test on CPython 3.13)."""
    from prompt_toolkit.buffer import Buffer, CompletionState
    from prompt_toolkit.document import Document
    from prompt_toolkit.keys import Keys

    asked = []

    class Lookup:
        def refresh_now(self, job_ids=()):
            asked.append(list(job_ids))
            return True

    with create_pipe_input() as inp:
        shell, _ = make_shell(ours, inp)
        shell.lookup = Lookup()
        tab = shell._bindings().get_bindings_for_keys((Keys.ControlI,))[0]
        for loading in (True, False):
            asked.clear()
            shell._tab_waiting = None
            buffer = Buffer(completer=shell.prompt.completer, document=Document("stats-tube fr"))
            if loading:
                buffer.complete_state = CompletionState(original_document=buffer.document)
            tab.handler(type("Event", (), {"current_buffer": buffer})())
            assert asked == [[]], loading
            assert shell._tab_waiting == buffer.document
