"""docs/deploy.md, held to what ships: each file the page shows is the file in
docs/deploy/ byte for byte, ``systemd-analyze verify`` accepts both units, and
each unit's command line starts a working server (tests/deploy_check.py).  The
install steps themselves run in .ci/run (they create a user and write under /opt)."""
from __future__ import annotations

import os
import re
import shlex
import shutil
import stat
import subprocess
import sys

import pytest

from deploy_check import check_server, exec_reload, exec_start, unit_settings
from servers import free_port

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC = os.path.join(ROOT, "docs", "deploy.md")
SHIPPED = os.path.join(ROOT, "docs", "deploy")
UNITS = ("twisted-stalk.service", "stalkd.service")
VENV_BIN = "/opt/twisted-stalk/bin/"


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


def _blocks(kind: str):
    return re.findall(r"^```%s\n(.*?)^```$" % kind, _read(DOC), re.S | re.M)


def test_the_page_shows_the_shipped_units_and_install_steps():
    shown = {block.splitlines()[0]: block for block in _blocks("ini")}
    for name in UNITS:
        text = _read(os.path.join(SHIPPED, name))
        assert shown[text.splitlines()[0]] == text, name
    for script in ("install.sh", "pipx.sh"):
        header, _, steps = _read(os.path.join(SHIPPED, script)).partition("set -eu\n")
        assert header.startswith("#!/bin/sh\n") and steps in _blocks("sh"), \
            f"docs/deploy/{script} is one of the page's blocks, after its header"
        assert os.stat(os.path.join(SHIPPED, script)).st_mode & stat.S_IXUSR


def test_the_steps_and_the_units_agree():
    """The units run the venv the steps create, as the user they create, on the
    directories they create; the pipx variant rewrites exactly the venv path."""
    steps = _read(os.path.join(SHIPPED, "install.sh"))
    for name in UNITS:
        text = _read(os.path.join(SHIPPED, name))
        settings = unit_settings(text)
        argv = exec_start(text)
        assert argv[0].startswith(VENV_BIN) and "/usr/bin/python3 -m venv /opt/twisted-stalk\n" in steps
        assert settings["User"] == settings["Group"] == "stalk" and "--user-group" in steps
        state = "/var/lib/" + settings["StateDirectory"]
        assert state in argv and settings["WorkingDirectory"] == state
        assert f"install -d -o stalk -g stalk -m 0750 {state}\n" in steps
        auth = argv[argv.index("--web-auth") + 1]
        assert f"--file {auth}\n" in steps and f"chown root:stalk {auth}\n" in steps
        assert f"chmod 0640 {auth}\n" in steps
        # A person who logs in from a browser, not only a token.
        assert f'twisted_stalk.web.auth add "${{ADMIN:-admin}}" --file {auth}\n' in steps
        # systemctl reload: the server reads its credentials again.
        assert settings["ExecReload"] == "/bin/kill -HUP $MAINPID"
        assert f"docs/deploy/{name}" in steps
        grace = float(argv[argv.index("--shutdown-grace") + 1])
        assert float(settings["TimeoutStopSec"]) > grace
    pipx = _read(os.path.join(SHIPPED, "pipx.sh"))
    assert f"sed 's#{VENV_BIN}#/opt/pipx/venvs/twisted-stalk/bin/#'" in pipx
    assert "for unit in %s; do" % " ".join(UNITS) in pipx


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze")
def test_systemd_analyze_verifies_the_units(tmp_path):
    """Each unit as shipped, but for its program's directory (verify checks that
    the program exists; the install puts it under /opt)."""
    stubs = tmp_path / "bin"
    stubs.mkdir()
    for program in ("twistd", "stalkd"):
        shutil.copy("/bin/true", stubs / program)
    paths = []
    for name in UNITS:
        text = _read(os.path.join(SHIPPED, name)).replace(VENV_BIN, f"{stubs}/")
        (tmp_path / name).write_text(text)
        paths.append(str(tmp_path / name))
    result = subprocess.run(["systemd-analyze", "verify", "--man=no", *paths],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and result.stderr == "" and result.stdout == "", result


@pytest.mark.parametrize("name", UNITS)
def test_each_units_command_line_serves(name, tmp_path):
    """The unit's ExecStart, with this interpreter's programs, a temporary
    binlog directory and credentials file, and free ports; the person the
    install adds logs in, before and after the unit's ExecReload."""
    binlog, auth = tmp_path / "binlog", tmp_path / "console.auth"
    binlog.mkdir()
    tool = [sys.executable, "-m", "twisted_stalk.web.auth"]
    added = subprocess.run([*tool, "add", "admin", "--file", str(auth)], input="s3cret\n",
                           capture_output=True, text=True, timeout=60)
    assert added.returncode == 0, added
    made = subprocess.run([*tool, "token", "deploy", "--file", str(auth)],
                          capture_output=True, text=True, timeout=60)
    token = made.stdout.strip()
    assert made.returncode == 0 and token, made
    text = _read(os.path.join(SHIPPED, name))
    state = "/var/lib/" + unit_settings(text)["StateDirectory"]
    moved = {state: str(binlog), "/etc/twisted-stalk/console.auth": str(auth)}
    for port in ("11300", "9100", "8080"):
        moved[port] = str(free_port())
    argv = []
    for arg in exec_start(text):
        if arg.startswith(VENV_BIN):
            arg = os.path.join(os.path.dirname(sys.executable), arg[len(VENV_BIN):])
        for old, new in moved.items():
            arg = arg.replace(f":{old}", f":{new}") if old.isdigit() else arg.replace(old, new)
        if arg in moved:
            arg = moved[arg]
        argv.append(arg)
    lines = check_server(argv, token, str(binlog), person=("admin", "s3cret"),
                         reload=lambda pid: exec_reload(text, pid))
    assert any("beanstalk on tcp" in line for line in lines), lines
    assert any(line.endswith(f"web console: credentials reloaded from {auth}: 1 user and "
                             "1 token") for line in lines), lines


def test_the_page_says_how_to_run_without_systemd():
    """Its command line is stalkd.service's, with ``-u`` and the unit's ``User=``
    (stalkd reads the credentials as root, then becomes that user), and the
    page gives each systemctl verb's signal."""
    section = _read(DOC).split("\n## Without systemd\n")[1].split("\n## ")[0]
    blocks = re.findall(r"^```sh\n(.*?)^```$", section, re.S | re.M)
    # stalkd becomes the user itself; twistd (whose -u comes after it opens the
    # binlog) is started as that user.
    for block, name in zip(blocks, ("stalkd.service", "twisted-stalk.service")):
        text = _read(os.path.join(SHIPPED, name))
        unit, settings = exec_start(text), unit_settings(text)
        [line] = [line for line in re.sub(r"\\\n\s*", " ", block).splitlines()
                  if VENV_BIN in line]
        argv = shlex.split(line.partition(" 2>>")[0].partition(" >>")[0])
        if name == "stalkd.service":
            assert argv == [unit[0], "-u", settings["User"], *unit[1:]]
        else:
            assert argv == ["setpriv", f"--reuid={settings['User']}",
                            f"--regid={settings['Group']}", "--init-groups", *unit]
        assert block.startswith(f"cd {settings['WorkingDirectory']}\n")
        assert block.endswith("&\necho $! > /run/twisted-stalk.pid\n")
    assert len(blocks) == 2
    for verb, signal_name in (("reload", "HUP"), ("stop", "TERM")):
        assert (f"| `systemctl {verb} twisted-stalk` | `kill -{signal_name} "
                "$(cat /run/twisted-stalk.pid)`") in section
    assert settings["ExecReload"] == "/bin/kill -HUP $MAINPID"
