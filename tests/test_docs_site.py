"""The documentation site builds without a warning, and its examples run.

The build is ``sphinx-build -W --keep-going`` (warnings are errors) into a
temporary directory; the examples are the tutorial's, the how-to guides' and
docs/ha.md's ``console`` and ``python`` blocks, run as written against real
servers the pages start (docs_examples.py says how a page is read).  Both skip
when Sphinx (the ``docs`` and ``test`` extras) or the installed commands are
missing.
"""
import glob
import html
import os
import re
import shutil
import socket
import subprocess
import sys

import pytest

from docs_examples import (DOCS, ROOT, Session, blocks, commands, declared_extras, matches,
                           pip_extras)
from servers import free_port

TUTORIAL = ["tutorial/first-queue.md", "tutorial/first-worker.md",
            "tutorial/first-deployment.md"]


def _sphinx_build(out: str, builder: str = "html") -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", builder,
         "-d", os.path.join(out, ".doctrees"), DOCS, out],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300)


def test_site_builds_without_warnings(tmp_path):
    """One build (it takes seconds: one test, so that xdist's two workers do not
    both build), then what the pages must hold."""
    pytest.importorskip("sphinx", reason="Sphinx is not installed (pip install -e '.[docs]')")
    pytest.importorskip("myst_parser", reason="myst-parser is not installed")
    out = str(tmp_path / "site")
    done = _sphinx_build(out)
    assert done.returncode == 0, done.stdout.decode("utf-8", "replace")
    assert os.path.exists(os.path.join(out, "index.html"))
    every_page_is_in_the_site(out)
    command_line_reference_lists_every_option(out)
    client_reference_is_generated_from_docstrings(out)


def every_page_is_in_the_site(out: str) -> None:
    pages = [os.path.relpath(p, DOCS) for p in glob.glob(os.path.join(DOCS, "**", "*.md"),
                                                         recursive=True)]
    pages = [p for p in pages if not p.startswith("_build")]
    missing = [p for p in pages
               if not os.path.exists(os.path.join(out, p[:-len(".md")] + ".html"))]
    assert not missing


def _page_text(out: str, page: str) -> str:
    with open(os.path.join(out, page), encoding="utf-8") as f:
        return html.unescape(re.sub(r"<[^>]+>", "", f.read()))


def command_line_reference_lists_every_option(out: str) -> None:
    """The reference shows each program's own --help: every option is on the page."""
    text = _page_text(out, "reference/command-line.html")
    from twisted_stalk.stalkd import USAGE
    from twisted_stalk.tap import Options
    from twisted_stalk_cli.shell.main import build_parser
    flags = set(re.findall(r"^ +(-\w|--[\w-]+)", USAGE, re.M))
    assert {"-b", "-l", "-p", "--engine", "--web"} <= flags
    for name, *_ in Options.optParameters + Options.optFlags:
        flags.add("--" + name)
    for action in build_parser()._actions:
        flags.update(action.option_strings)
    missing = sorted(f for f in flags if not re.search(re.escape(f) + r"(?![\w-])", text))
    assert not missing


def client_reference_is_generated_from_docstrings(out: str) -> None:
    text = " ".join(_page_text(out, "reference/client-api.html").split())
    from twisted_stalk.client import BeanstalkClient, Worker
    for obj in (BeanstalkClient, Worker):
        first_line = obj.__doc__.strip().splitlines()[0].strip().replace("``", "")
        assert " ".join(first_line.split()) in text
    assert "reserve" in text and "BeanstalkPool" in text


# ------------------------------------------------------------------ examples

def _environment(tmp_path, port: int) -> dict:
    env = dict(os.environ)
    bindir = os.path.dirname(sys.executable)
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
    # this tree, whichever checkout the package was installed from
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env["HOME"] = str(tmp_path / "home")
    env["XDG_CONFIG_HOME"] = str(tmp_path / "config")
    env["XDG_DATA_HOME"] = str(tmp_path / "data")
    env["STALK_ADDRESS"] = f"127.0.0.1:{port}"   # stalk's default server, 127.0.0.1:11300
    env.pop("PAGER", None)
    os.makedirs(env["HOME"], exist_ok=True)
    return env


def _needs_commands(env: dict) -> None:
    for name in ("stalk", "stalkd"):
        if not shutil.which(name, path=env["PATH"]):
            pytest.skip(f"`{name}` is not installed (pip install -e .)")
    for name in ("curl", "openssl"):       # the pages use them (.ci/run installs them)
        if not shutil.which(name, path=env["PATH"]):
            pytest.skip(f"`{name}` is not installed (Debian: apt-get install {name})")


@pytest.fixture
def session(tmp_path):
    ports = {"11300": free_port(), "11301": free_port(), "11302": free_port(),
             "9100": free_port(), "8080": free_port()}
    env = _environment(tmp_path, ports["11300"])
    _needs_commands(env)
    work = tmp_path / "work"
    work.mkdir()
    logs = tmp_path / "logs"
    logs.mkdir()
    substitutions = {k: str(v) for k, v in ports.items()}
    substitutions["/tmp/stalk-tutorial"] = str(work)
    substitutions["/tmp/stalk-howto"] = str(work)
    s = Session(env=env, substitutions=substitutions, logs=str(logs))
    yield s
    s.close()


def test_tutorial_runs_as_written(session):
    """The three tutorial pages, in order, in one session (as a reader follows them)."""
    for page in TUTORIAL:
        session.run_page(page)
    assert any(line.startswith("python docs/examples/worker.py") for line in session.ran)


@pytest.mark.parametrize("page", ["howto/from-beanstalkd.md", "howto/tls.md",
                                  "howto/metrics.md", "howto/console.md"])
def test_howto_runs_as_written(session, page):
    if page == "howto/tls.md":
        pytest.importorskip("OpenSSL", reason="TLS needs pyOpenSSL (pip install '.[tls]')")
    if page == "howto/from-beanstalkd.md" and not shutil.which("beanstalkd"):
        pytest.skip("Debian's beanstalkd is not installed")
    session.run_page(page)
    assert session.ran


@pytest.mark.parametrize("page", ["howto/postgresql.md", "ha.md"])
def test_postgresql_pages_run_as_written(session, pg_engine, page):
    """The several-nodes guide and docs/ha.md's first commands, on a throwaway cluster.

    The pages' connection strings name the reader's database; here each is the
    test's cluster (a fresh schema of it).
    """
    pytest.importorskip("psycopg", reason="the engine needs psycopg (pip install '.[postgresql]')")
    if sys.implementation.name == "pypy":
        pytest.skip("the PostgreSQL engine needs CPython (docs/ha.md)")
    for block in blocks(os.path.join(DOCS, page)):
        for command in (commands(block) if block.language == "console" else []):
            for conninfo in re.findall(r"--engine '([^']+)'", command.line):
                session.substitutions[conninfo] = pg_engine
    schema = re.search(r"stalk_schema=(\w+)", pg_engine).group(1)
    session.substitutions["schema twisted_stalk:"] = f"schema {schema}:"
    session.run_page(page)
    assert any("--engine-init" in line for line in session.ran)


def test_pip_install_lines_name_real_extras():
    """Every ``pip install '.[x]'`` in the docs and the README names an extra of setup.cfg."""
    extras = declared_extras()
    wrong = []
    for path in glob.glob(os.path.join(DOCS, "**", "*.md"), recursive=True) + [
            os.path.join(ROOT, "README.md")]:
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                for extra in pip_extras(line):
                    if extra not in extras:
                        wrong.append(f"{os.path.relpath(path, ROOT)}:{n}: {extra}")
                if "twisted-stalk[" in line and "pip install" in line:
                    wrong.append(f"{os.path.relpath(path, ROOT)}:{n}: not on an index")
    assert not wrong


def test_console_blocks_read_as_a_reader_types_them(tmp_path):
    """The page reader itself: commands, continued lines, background commands,
    the output after each, and a python block's output block."""
    page = tmp_path / "page.md"
    page.write_text("Text.\n\n```console\n$ stalkd -p 11300 &\n$ openssl req \\\n"
                    "    -x509\n$ stalk put 'a'\nINSERTED 1\n```\n\n```python\nprint(1)\n```\n\n"
                    "```text\n1\n```\n\n```sh\nnot run\n```\n", encoding="utf-8")
    found = blocks(str(page))
    assert [b.language for b in found] == ["console", "python", "sh"]
    assert found[1].output == "1\n"
    got = [(c.line, c.expected, c.background) for c in commands(found[0])]
    assert got == [("stalkd -p 11300", "", True),
                   ("openssl req \\\n    -x509", "", False),
                   ("stalk put 'a'", "INSERTED 1\n", False)]
    assert matches("FOUND 1 ...\nhello\n", "FOUND 1 12\nhello\n")
    assert not matches("INSERTED 1\n", "INSERTED 2\n")


def test_a_background_server_whose_port_was_taken_meanwhile_gets_a_fresh_one(tmp_path):
    """The session's ports were free when it began; another test may have
    taken one since.  The page's server is then started again on a fresh
    port, and the page's later commands use that one too."""
    from docs_examples import Command
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))  # (bound, not listening: a connection to it fails)
    port = taken.getsockname()[1]
    env = dict(os.environ, STALK_ADDRESS=f"127.0.0.1:{port}",
               PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    s = Session(env=env, substitutions={"11300": str(port)}, logs=str(tmp_path))
    try:
        s.run_command(Command(f"{sys.executable} -m twisted_stalk_cli.stalkd -l 127.0.0.1 "
                              "-p 11300", "", background=True), "page.md:1")
        fresh = s.substitutions["11300"]
        assert fresh != str(port)
        assert s.env["STALK_ADDRESS"] == f"127.0.0.1:{fresh}"
        assert len(s.background) == 1 and s.background[0][0].poll() is None
        s.run_command(Command(f"{sys.executable} -m twisted_stalk_cli.shell list-tubes",
                              "---\n- default\n"), "page.md:2")
    finally:
        s.close()
        taken.close()
