"""The shell in a real terminal (tmux, as in test_shell_terminal.py): the first
Tab on a tube name offers a tube created a moment ago, ``stalk top`` fits the
terminal's width, and ``top`` typed in the shell points to ``stalk top``."""
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


def test_top_typed_in_the_shell_points_to_stalk_top(ours, screen):
    s = screen(ours, 120)
    s.type("top")
    s.wait_for("run `stalk top` from your terminal")  # the toolbar, while typing
    s.keys("Enter")
    text = s.wait_for("is not a beanstalk command but a stalk tool")
    assert "unknown command 'top'" not in text


def test_the_tool_hint_names_every_tool_not_a_command():
    from twisted_stalk_cli.shell.request import unknown_command
    assert "`stalk tail`" in unknown_command("tail")
    assert unknown_command("frobnicate").startswith("unknown command 'frobnicate'")
