"""The shell in a real terminal (tmux, as in test_shell_terminal.py): the first
Tab on a tube name offers a tube created a moment ago, ``stalk top`` fits the
terminal's width, and ``top`` and ``tail`` typed in the shell run there."""
import subprocess
import sys
import time

import pytest

from test_shell_terminal import Screen, prompt_ends_with, screen, terminal_env  # noqa: F401
from twisted_stalk_cli.shell.conn import Connection
from twisted_stalk_cli.shell.target import parse_target


def test_first_tab_offers_a_tube_created_since_the_last_lookup(ours, screen):
    """The Tab used to complete from the last lookup's list (taken at most
    every 5 s; a fresh shell's is just ``default``) and only the second Tab
    saw the new tube.  Now the Tab asks the server and completes from its
    answer."""
    s = screen(ours, 100)
    s.type("stats-tube ")  # completion while typing: a lookup, its menu
    s.wait_for("default")
    s.keys("C-u")
    s.wait(lambda text: any(line.rstrip().endswith("]>") for line in text.splitlines()),
           what="the prompt, empty")
    other = Connection(parse_target(f"127.0.0.1:{ours.port}"), reply_timeout=5)
    other.connect()
    try:
        assert other.call(b"watch fresh-tube\r\n").line == b"WATCHING 2"  # the tube exists
        s.type("stats-tube fr")
        s.keys("Tab")  # within the lookup interval: the list held is stale
        s.wait(prompt_ends_with("stats-tube fresh-tube"), timeout=5,
               what="the new tube completed by the first Tab")
        s.keys("Enter")
        s.wait(lambda text: any(line.split() == ["name", "fresh-tube"] for line in text.splitlines()),
               what="stats-tube fresh-tube answered")
    finally:
        other.close()


def test_top_rows_fit_the_terminal_width(ours, tmp_path):
    """Each row of ``stalk top`` is one screen line at any width: at 60
    columns the table used to wrap every row in two."""
    long_tube = "a-rather-long-tube-name-" + "x" * 40
    other = Connection(parse_target(f"127.0.0.1:{ours.port}"), reply_timeout=5)
    other.connect()
    try:
        assert other.call(b"watch %s\r\n" % long_tube.encode()).line == b"WATCHING 2"
        for cols in (60, 200):
            (tmp_path / str(cols)).mkdir()
            s = Screen(tmp_path / str(cols), ["-a", f"127.0.0.1:{ours.port}", "top", "-n", "0.2"],
                       cols=cols, rows=20, env=terminal_env(tmp_path))
            try:
                # (The width is the terminal's own: under pytest-xdist the
                # environment says COLUMNS=80, which a 60-column top ignores.)
                text = s.wait(lambda t: _table_rows(t) == ["TUBE", "a-rathe", "default", "(all)"],
                              what="top's table, each row on one line")
            finally:
                s.close()
            lines = text.splitlines()
            heading = next(i for i, line in enumerate(lines) if line.startswith("TUBE"))
            rows = lines[heading:heading + 4]  # heading, the two tubes, (all)
            assert all(len(r) <= cols for r in lines), text
            assert rows[2].split()[1:3] == ["0", "0"], text  # READY, URGENT: a whole row
            if cols == 200:
                assert long_tube in text and "PAUSE" in rows[0], text
            else:
                assert "\u2026" in rows[1] and "READY" in rows[0], text
    finally:
        other.close()


def _table_rows(text):
    """The first word (7 characters) of the four lines from top's heading on,
    once the frame is whole (its last line drawn)."""
    if "Ctrl-C quits" not in text:
        return []
    lines = text.splitlines()
    heading = next((i for i, line in enumerate(lines) if line.startswith("TUBE")), None)
    if heading is None:
        return []
    return [r.split()[0][:7] if r.split() else "" for r in lines[heading:heading + 4]]


def _prompt_lines(text):
    """The screen's lines that hold the prompt (and what was typed after it)."""
    return [line.rstrip() for line in text.splitlines() if "]> " in line or line.rstrip().endswith("]>")]


def test_top_runs_in_the_shell_and_q_returns_to_a_clear_prompt(ours, screen):
    """``top`` at the prompt used to be refused (the message twice, once cut
    short) and stay in the editor, so the next command was glued onto it
    (``toplist-tube-used``: unknown command).  Now it runs, full screen,
    against the shell's server; ``q`` comes back to an empty prompt."""
    s = screen(ours, 120)
    s.type("top")
    s.keys("Enter")
    text = s.wait_for("q or Ctrl-C quits")  # top's own screen
    assert f"stalk top  127.0.0.1:{ours.port}" in text and "TUBE" in text, text
    s.keys("q")
    s.wait(lambda t: _prompt_lines(t)[-1:] and _prompt_lines(t)[-1].endswith("]>"),
           what="an empty prompt after top")
    s.type("list-tube-used")
    s.keys("Enter")
    # the reply, then the next prompt (read before it is drawn, the screen
    # held one prompt line too few: a PyPy failure)
    text = s.wait(lambda t: "USING default" in t and len(_prompt_lines(t)) >= 3
                  and _prompt_lines(t)[-1].endswith("]>"),
                  what="list-tube-used answered and the next prompt")
    assert "unknown command" not in text and "not a beanstalk command" not in text, text
    assert [line.split("]> ")[-1] for line in _prompt_lines(text)][-3:-1] == [
        "top", "list-tube-used"], text
    # Ctrl-C comes back too, and top's options are taken
    s.type("top default -n 0.2")
    s.keys("Enter")
    s.wait_for("every 0.2s, q or Ctrl-C quits")
    s.keys("C-c")
    s.wait(lambda t: _prompt_lines(t)[-1:] and _prompt_lines(t)[-1].endswith("]>"),
           what="an empty prompt after Ctrl-C")
    s.type("stats-tube default")
    s.keys("Enter")
    s.wait(lambda text: any(line.split() == ["name", "default"] for line in text.splitlines()),
           what="stats-tube default answered after top")


def test_tail_runs_in_the_shell_on_the_tube_in_use(ours, screen):
    """``tail`` at the prompt follows the tube in use on a connection of its
    own (the shell's watch list and reservations stay as they were), shows
    jobs put meanwhile without reserving them, and Ctrl-C or ``q`` returns."""
    s = screen(ours, 120)
    s.type("use emails")
    s.keys("Enter")
    s.wait_for("USING emails")
    s.type("tail")
    s.keys("Enter")
    s.wait_for("tailing emails on 127.0.0.1:%d (q or Ctrl-C to stop)" % ours.port)
    other = Connection(parse_target(f"127.0.0.1:{ours.port}"), reply_timeout=5)
    other.connect()
    try:
        other.command("use", "emails")
        job = other.command("put", 0, 0, 60, body=b"hello tail").job_id
        s.wait_for(f"#{job}  emails")
        s.wait_for("hello tail")
        s.keys("q")
        s.wait(lambda t: _prompt_lines(t)[-1:] and _prompt_lines(t)[-1].endswith("]>"),
               what="an empty prompt after tail")
        s.type(f"stats-job {job}")
        s.keys("Enter")
        text = s.wait(lambda text: any(line.split() == ["state", "ready"]
                                       for line in text.splitlines()),
                      what="the job still ready (tail reserved nothing)")
        assert "use=emails watch=default]" in _prompt_lines(text)[-1], text
    finally:
        other.close()


def test_the_tool_hint_names_every_tool_not_a_command():
    from twisted_stalk_cli.shell.request import unknown_command
    assert "`stalk flush`" in unknown_command("flush")
    assert unknown_command("frobnicate").startswith("unknown command 'frobnicate'")


def test_tab_offers_no_job_deleted_since(ours, screen):
    """Tab on a job id offered every job the shell had seen, deleted ones too
    (``1004 inserted`` after a worker had deleted 1004).  A job deleted in
    the shell is forgotten at once; one deleted by another client is found
    gone by a background check (``stats-job``: NOT_FOUND), which the Tab
    waits for, and the menu that typing opened is corrected by it."""
    s = screen(ours, 100)
    for n in (1, 2, 3):
        s.put(f"job {n}", inserted=n)
    s.type("delete 3")  # deleted here
    s.keys("Enter")
    s.wait_for("DELETED")
    other = Connection(parse_target(f"127.0.0.1:{ours.port}"), reply_timeout=5)
    other.connect()
    try:
        assert other.call(b"delete 2\r\n").line == b"DELETED"  # by someone else
        s.type("peek ")
        s.keys("Tab")  # at once: the one job left, completed (not the first offered, 2)
        s.wait(prompt_ends_with("peek 1"), timeout=5, what="the one job left, completed")
        s.keys("Enter")
        s.wait_for("FOUND 1 5")
        text = s.text()
        assert "2      inserted" not in text and "3      inserted" not in text, text
    finally:
        other.close()


def test_flush_and_move_run_in_the_shell(ours, screen):
    """The tools that change jobs run at the prompt too, asking first as
    ``stalk flush``/``stalk move`` do; the next command runs on its own."""
    s = screen(ours, 140)
    other = Connection(parse_target(f"127.0.0.1:{ours.port}"), reply_timeout=5)
    other.connect()
    try:
        other.command("use", "old")
        for body in (b"a", b"b", b"c"):
            other.command("put", 0, 0, 60, body=body)
        other.command("use", "spare")
        other.command("put", 0, 0, 60, body=b"d")
        s.type("move spare old --yes")
        s.keys("Enter")
        s.wait_for("move spare -> old: moved 1 ready")
        s.type("flush old")
        s.keys("Enter")
        s.wait_for(f"Delete 4 jobs (4 ready, 0 delayed, 0 buried) from tube 'old' on "
                   f"127.0.0.1:{ours.port}? [y/N]")
        s.type("y")
        s.keys("Enter")
        s.wait_for("flush old: deleted 4 ready")
        s.type("stats")
        s.keys("Enter")
        text = s.wait(lambda t: any(line.split()[:2] == ["current-jobs-ready", "0"]
                                    for line in t.splitlines()), what="stats: no job left")
        assert "unknown command" not in text and "not a beanstalk command" not in text, text
    finally:
        other.close()


def test_a_refused_line_is_explained_once_and_in_full(ours, screen):
    """A line the shell refuses was explained twice, under the prompt cut at
    the window's edge and again in the toolbar; now once, what does not fit
    on the first line continuing on the next."""
    s = screen(ours, 100, 12)
    s.type("flsh x")
    s.keys("Enter")
    text = s.wait_for("send it anyway")
    assert text.count("unknown command 'flsh'") == 1, text
    lines = [line.rstrip() for line in text.splitlines()]
    first = next(i for i, line in enumerate(lines) if line.startswith("unknown command 'flsh'"))
    assert (lines[first] + " " + lines[first + 1]).endswith(
        "(did you mean flush?); type help for the list, or prefix the line with ! to send it anyway"), text
    assert all(len(line) <= 100 for line in lines), text


def test_stalk_top_and_tail_on_a_terminal_quit_on_q(ours, tmp_path):
    """From the system shell too, ``q`` quits as Ctrl-C does."""
    for argv in (["top", "-n", "0.2"], ["tail", "default"]):
        (tmp_path / argv[0]).mkdir()
        s = Screen(tmp_path / argv[0], ["-a", f"127.0.0.1:{ours.port}", *argv], cols=100, rows=12,
                   env=terminal_env(tmp_path))
        try:
            s.wait_for("q or Ctrl-C")
            s.type("q")
            deadline = time.monotonic() + 10
            while _running(s):  # the program exits, and tmux with it
                assert time.monotonic() < deadline, f"stalk {argv[0]} still running after q"
                time.sleep(0.05)
        finally:
            s.close()


def _running(s):
    try:
        s.text()
    except subprocess.CalledProcessError:
        return False
    return True


def test_stalk_tail_in_the_background_keeps_running(ours, tmp_path):
    """Reading ``q`` changes the terminal's mode, which would stop a
    background job (SIGTTOU: ``stalk tail ... &`` showed "Stopped (tty
    output)"); in the background the keys are left alone."""
    import shutil
    tmux = shutil.which("tmux")
    if tmux is None or shutil.which("bash") is None:
        pytest.skip("needs tmux and bash")
    sock = str(tmp_path / "tmux")
    env = dict(terminal_env(tmp_path), PS1="$ ")

    def run(*args):
        return subprocess.run([tmux, "-S", sock, *args], env=env, check=True, capture_output=True,
                              text=True, timeout=10).stdout

    run("-f", "/dev/null", "new-session", "-d", "-x", "160", "-y", "20", "--", "bash", "--norc", "-i")
    try:
        run("send-keys", "-t", "0", "-l", f"{sys.executable} -m twisted_stalk_cli.shell "
            f"-a 127.0.0.1:{ours.port} tail default -n 0.1 &\n")
        other = Connection(parse_target(f"127.0.0.1:{ours.port}"), reply_timeout=5)
        other.connect()
        deadline = time.monotonic() + 15
        while "tailing default" not in run("capture-pane", "-p", "-t", "0"):
            assert time.monotonic() < deadline, run("capture-pane", "-p", "-t", "0")
            time.sleep(0.05)
        job = other.command("put", 0, 0, 60, body=b"from the background").job_id
        other.close()
        while "from the background" not in run("capture-pane", "-p", "-t", "0"):
            assert time.monotonic() < deadline, run("capture-pane", "-p", "-t", "0")
            time.sleep(0.05)
        assert f"#{job}  default" in run("capture-pane", "-p", "-t", "0")
        run("send-keys", "-t", "0", "-l", "jobs\n")
        time.sleep(0.5)
        assert "Stopped" not in run("capture-pane", "-p", "-t", "0")
    finally:
        subprocess.run([tmux, "-S", sock, "send-keys", "-t", "0", "-l", "kill %1\n"],
                       capture_output=True, timeout=10)
        time.sleep(0.2)
        subprocess.run([tmux, "-S", sock, "kill-server"], capture_output=True, timeout=10)


def test_stalk_servers_top_on_a_terminal_quits_on_q(ours, tmp_path):
    """``stalk --servers a,b top`` quits on ``q`` as the one-server ``top``
    does (it used to quit only on Ctrl-C)."""
    from servers import start_server
    other = start_server("ours")
    try:
        names = f"127.0.0.1:{ours.port},127.0.0.1:{other.port}"
        s = Screen(tmp_path, ["--servers", names, "top", "-n", "0.2"], cols=100, rows=14,
                   env=terminal_env(tmp_path))
        try:
            s.wait_for("stalk top  2 servers, 2 up")
            s.wait_for("every 0.2s, q or Ctrl-C quits")  # its footer says so
            s.type("q")
            deadline = time.monotonic() + 10
            while _running(s):  # the program exits, and tmux with it
                assert time.monotonic() < deadline, "stalk --servers top still running after q"
                time.sleep(0.05)
        finally:
            s.close()
    finally:
        other.stop()


def test_tab_still_offers_a_job_another_client_holds_after_not_found(ours, screen):
    """``delete`` or ``touch`` of a job another connection reserved answers
    NOT_FOUND, yet the job is there (``peek`` finds it): Tab still offers
    it (the shell used to forget it, after ``delete`` and ``touch`` but not
    after ``release``)."""
    other = Connection(parse_target(f"127.0.0.1:{ours.port}"), reply_timeout=5)
    other.connect()
    try:
        s = screen(ours, 100)
        s.put("held", inserted=1)
        assert other.call(b"reserve\r\n").line == b"RESERVED 1 4"
        for command in ("delete 1", "touch 1"):
            s.type(command)
            s.keys("Enter")
        s.wait(lambda text: text.count("NOT_FOUND") == 2, what="two NOT_FOUND")
        s.type("peek ")
        s.keys("Tab")  # the one job known, completed
        s.wait(prompt_ends_with("peek 1"), timeout=5, what="the held job, completed")
        s.keys("Enter")
        s.wait_for("FOUND 1 4")
    finally:
        other.close()
