"""The package layout: the twistd plugin is discoverable, the wheel, the sdist
and the editable install ship what they should, and the library stands alone."""
from __future__ import annotations

import ast
import os
import subprocess
import sys
import zipfile
from typing import List, Tuple

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_plugin_discoverable():
    from twisted.application.service import IServiceMaker
    from twisted.plugin import getPlugins

    makers = {p.tapname: p for p in getPlugins(IServiceMaker)}
    assert "beanstalk" in makers
    assert makers["beanstalk"].module == "twisted_stalk.tap"


def test_reactor_plugin_discoverable():
    from twisted.application.reactors import getReactorTypes

    names = {r.shortName: r for r in getReactorTypes()}
    assert names["stalk-epoll"].moduleName == "twisted_stalk.server.reactor"


def test_tap_options_and_service():
    from twisted.internet.task import Clock

    from twisted_stalk.tap import Options, makeService

    config = Options()
    config.parseOptions(["--listen", "tcp:0:interface=127.0.0.1", "--port", "0", "-z", "100"])
    assert config["endpoints"] == ["tcp:0:interface=127.0.0.1", "tcp:0"]
    default = Options()
    default.parseOptions([])
    assert default["endpoints"] == ["tcp:11300"]
    service = makeService(config, reactor=Clock())
    assert len(list(service)) == 2
    assert service.factory.engine.max_job_size == 100


@pytest.mark.skipif(os.environ.get("SKIP_WHEEL_TEST") == "1", reason="wheel build skipped")
def test_wheel_ships_plugin_without_twisted_init(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "-w", str(tmp_path), ROOT], check=True, capture_output=True)
    wheel = next(p for p in os.listdir(tmp_path) if p.endswith(".whl"))
    names = zipfile.ZipFile(os.path.join(tmp_path, wheel)).namelist()
    assert "twisted/plugins/twisted_stalk_plugin.py" in names
    assert "twisted/__init__.py" not in names
    assert "twisted/plugins/__init__.py" not in names
    assert "twisted_stalk_cli/stalkd.py" in names
    assert "twisted_stalk_cli/shell/__init__.py" in names
    assert "twisted_stalk_cli/shell/tools/flush.py" in names
    assert "twisted_stalk/stalkd.py" in names and "twisted_stalk/boot.py" in names
    assert not any(n.startswith("cli/") for n in names)
    assert "twisted_stalk/py.typed" in names
    _installed_wheel_runs(os.path.join(tmp_path, wheel), tmp_path)


def _installed_wheel_runs(wheel: str, tmp_path) -> None:
    """The wheel, installed on its own (``pip install --target``, this
    environment supplying its dependencies), runs its commands from outside
    the tree: ``stalkd``, ``stalk``, ``python -m twisted_stalk`` and twistd's plugin."""
    target = str(tmp_path / "site")
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation",
                    "--no-index", "--target", target, wheel], check=True, capture_output=True)
    env = dict(_user_env(), PYTHONPATH=target)
    cwd = str(tmp_path)

    def run(*argv: str) -> str:
        result = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True,
                                timeout=60)
        assert result.returncode == 0, (argv, result.stderr)
        return result.stdout

    where = run(sys.executable, "-c", "import twisted_stalk, twisted_stalk_cli.shell, "
                "twisted.plugins.twisted_stalk_plugin as p; print(twisted_stalk.__file__); "
                "print(twisted_stalk_cli.shell.__file__); print(p.__file__)")
    assert all(line.startswith(target + os.sep) for line in where.split()), where
    version = run(sys.executable, "-m", "twisted_stalk", "-v")
    assert version.startswith("stalkd ")
    assert run(os.path.join(target, "bin", "stalkd"), "-v") == version
    assert run(os.path.join(target, "bin", "stalk"), "--help").startswith("usage: stalk")
    twistd = run(sys.executable, "-c", "import sys; sys.argv[0] = 'twistd'; "
                 "from twisted.scripts.twistd import run; run()", "--help")
    assert "A beanstalkd-compatible" in twistd


def test_editable_install_is_a_path_not_an_import_hook(tmp_path):
    """The editable wheel puts this tree on sys.path with a .pth line:
    twistd finds plugins by scanning sys.path for twisted/plugins/, and
    PYTHONPATH=. works alike.  (A package_dir mapping would make setuptools
    install an import hook instead, which twistd cannot see.)"""
    subprocess.run([sys.executable, "-c", "import sys; from setuptools import build_meta; "
                    "build_meta.build_editable(sys.argv[1])", str(tmp_path)],
                   cwd=ROOT, check=True, capture_output=True)
    wheel = next(p for p in os.listdir(tmp_path) if p.endswith(".whl"))
    with zipfile.ZipFile(os.path.join(tmp_path, wheel)) as z:
        pth = [n for n in z.namelist() if n.endswith(".pth")]
        assert not [n for n in z.namelist() if n.endswith(".py")], z.namelist()
        assert len(pth) == 1, z.namelist()
        lines = z.read(pth[0]).decode().split()
    assert [os.path.realpath(line) for line in lines] == [os.path.realpath(ROOT)]


def test_no_symlink_in_the_repository():
    """Every package is the folder of its name: nothing is a symlink (tools
    that read the tree, sdists and PYTHONPATH=. all see the same files)."""
    links = []
    for top, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d not in ("build", "dist")
                   and not d.endswith(".egg-info")]
        links += [os.path.join(top, n) for n in dirs + files
                  if os.path.islink(os.path.join(top, n))]
    assert links == []


def _imports_under(folder: str) -> List[Tuple[str, str]]:
    """(where, absolute module name) for every import in the .py files under
    ``twisted_stalk/<folder>``, relative imports resolved."""
    found = []
    base = os.path.join(ROOT, "twisted_stalk", folder)
    for top, _, files in os.walk(base):
        for name in files:
            if not name.endswith(".py"):
                continue
            path = os.path.join(top, name)
            package = os.path.relpath(top, ROOT).replace(os.sep, ".")
            with open(path, encoding="utf-8") as f:
                tree = ast.parse(f.read(), path)
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    modules = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom):
                    if node.level:
                        parent = package.split(".")[:len(package.split(".")) - node.level + 1]
                        modules = [".".join(parent + ([node.module] if node.module else []))]
                    else:
                        modules = [node.module or ""]
                else:
                    continue
                found += [(f"{path}:{node.lineno}", m) for m in modules]
    return found


def test_the_library_does_not_import_the_application():
    """Nothing in twisted_stalk/ imports twisted_stalk_cli: the server, client
    and ``python -m twisted_stalk`` stand without the shell."""
    assert [where for where, m in _imports_under("")
            if m.split(".")[0] == "twisted_stalk_cli"] == []


def test_the_server_does_not_import_the_console():
    """``web`` imports ``server``, never the reverse: the programs that
    assemble both (twisted_stalk/tap.py, twisted_stalk/stalkd.py) sit above."""
    assert [where for where, m in _imports_under("server")
            if m.startswith("twisted_stalk.web")] == []


def test_the_server_imports_no_engine_of_its_own():
    """``server`` serves whatever engine it is given: it imports neither the
    PostgreSQL engine nor the binlog; the assembly layer
    (twisted_stalk/engines.py) builds engines by URL."""
    engines = ("twisted_stalk.pg", "twisted_stalk.binlog")
    assert [(where, m) for where, m in _imports_under("server")
            if m.startswith(engines)] == []
    # ``from .. import pg`` names the package in the import's names.
    for top, _, files in os.walk(os.path.join(ROOT, "twisted_stalk", "server")):
        for name in (n for n in files if n.endswith(".py")):
            with open(os.path.join(top, name), encoding="utf-8") as f:
                tree = ast.parse(f.read())
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and node.module in (None, "twisted_stalk"):
                    assert not {a.name for a in node.names} & {"pg", "binlog"}, name


def _user_env() -> dict:
    """The environment of a user's shell: no source tree on the path."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


def test_installed_twistd_finds_the_plugin(tmp_path):
    """``twistd`` as installed (editable or not) lists ``beanstalk``, run from
    outside the source tree: twistd finds plugins by scanning sys.path for
    twisted/plugins/, which an import-hook editable install would hide."""
    twistd = os.path.join(os.path.dirname(sys.executable), "twistd")
    result = subprocess.run([twistd, "--help"], cwd=tmp_path, env=_user_env(),
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "beanstalk" in result.stdout and "A beanstalkd-compatible" in result.stdout


def test_twistd_beanstalk_runs(tmp_path):
    from servers import free_port
    from wire import Wire
    import socket
    import time

    port = free_port()
    twistd = os.path.join(os.path.dirname(sys.executable), "twistd")
    env = _user_env()
    proc = subprocess.Popen([twistd, "-n", "--pidfile=", "--reactor=stalk-epoll", "beanstalk",
                             "--port", f"tcp:{port}:interface=127.0.0.1"],
                            cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        for _ in range(500):
            try:
                sock = socket.create_connection(("127.0.0.1", port), timeout=1)
                break
            except OSError:
                assert proc.poll() is None, "twistd exited"
                time.sleep(0.02)
        w = Wire(sock)
        assert w.ask(b"put 0 0 1 2\r\nhi\r\n") == b"INSERTED 1\r\n"
    finally:
        proc.terminate()
        # twistd re-raises the signal after a clean shutdown to report it.
        assert proc.wait(20) in (0, -15)


def test_python_m_twisted_stalk_is_the_server():
    """``python -m twisted_stalk``, ``python -m twisted_stalk_cli.stalkd`` and
    ``stalkd`` are one program, whose flags are the library's."""
    for module in ("twisted_stalk", "twisted_stalk_cli.stalkd"):
        result = subprocess.run([sys.executable, "-m", module, "-x"], capture_output=True,
                                text=True, timeout=60)
        assert result.returncode == 5 and result.stderr == (
            "stalkd: unknown flag: -x (stalkd -h lists the flags)\n"), result
        result = subprocess.run([sys.executable, "-m", module, "-v"], capture_output=True,
                                text=True, timeout=60)
        assert result.returncode == 0 and result.stdout.startswith("stalkd "), result


def test_sdist_runs_its_own_tests(tmp_path):
    """The sdist has the license, the test helpers and what the tests load
    (docs/examples, bench/held_load.py), Linux-only and Python-version
    classifiers; a sample of its own tests passes from the unpacked tree."""
    import tarfile
    subprocess.run([sys.executable, "-c", "import sys; from setuptools import build_meta; "
                    "build_meta.build_sdist(sys.argv[1])", str(tmp_path)],
                   cwd=ROOT, check=True, capture_output=True)
    sdist = next(p for p in os.listdir(tmp_path) if p.endswith(".tar.gz"))
    with tarfile.open(os.path.join(tmp_path, sdist)) as tar:
        tar.extractall(tmp_path)
        top = tar.getnames()[0].split("/")[0]
    tree = os.path.join(tmp_path, top)
    for path in ("LICENSE", "tests/conftest.py", "tests/servers.py", "tests/wire.py",
                 "docs/examples/producer.py", "bench/held_load.py",
                 "twisted_stalk_cli/stalkd.py", "twisted_stalk/stalkd.py",
                 "twisted/plugins/twisted_stalk_plugin.py"):
        assert os.path.isfile(os.path.join(tree, path)), path
    with open(os.path.join(tree, "PKG-INFO")) as f:
        info = f.read()
    for line in ("Classifier: Operating System :: POSIX :: Linux",
                 "Classifier: License :: OSI Approved :: MIT License",
                 "Classifier: Programming Language :: Python :: 3.13",
                 "Classifier: Programming Language :: Python :: Implementation :: PyPy",
                 "Requires-Python: >=3.9"):
        assert line in info
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                             "tests/test_client_docs.py", "tests/test_protocol_table.py"],
                            cwd=tree, capture_output=True, text=True, timeout=300,
                            env=_user_env())
    assert result.returncode == 0, result.stdout[-2000:]
