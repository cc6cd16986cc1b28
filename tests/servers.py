"""Start real beanstalk servers (ours and the C reference) for wire tests.

Each server runs as a subprocess bound to 127.0.0.1 on a free port; tests talk to
it over real loopback sockets.  ``reference`` is only available when Debian's
``beanstalkd`` is on PATH.
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import List, Optional

from twisted_stalk.testing.engine_contract import RecordingFrontEnd  # noqa: F401  (for the tests)

REFERENCE = shutil.which("beanstalkd")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def connect_asap(port: int, proc: subprocess.Popen, started: float) -> socket.socket:
    """Connect to ``port`` as soon as it listens (polling every ms)."""
    while True:
        try:
            return socket.create_connection(("127.0.0.1", port), timeout=5)
        except OSError:
            assert proc.poll() is None and time.monotonic() - started < 10
            time.sleep(0.001)


def first_reply(cmd: List[str], port: int, env: Optional[dict] = None,
                cwd: Optional[str] = None) -> float:
    """Seconds from launching ``cmd`` to its first reply."""
    started = time.monotonic()
    proc = subprocess.Popen(cmd, stderr=subprocess.DEVNULL, env=env, cwd=cwd)
    try:
        sock = connect_asap(port, proc, started)
        with sock:
            sock.sendall(b"list-tube-used\r\n")
            assert sock.recv(100) == b"USING default\r\n"
        return time.monotonic() - started
    finally:
        proc.terminate()
        proc.wait(10)


def compiled_launch_env(pycache: str) -> dict:
    """The environment for launches that are timed: byte code cached under
    ``pycache`` (a test run may forbid writing it, and compiling every module
    at each launch is not what an installed server does), warmed up once."""
    env = dict(os.environ, PYTHONPYCACHEPREFIX=pycache)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    port = free_port()
    first_reply(ours_command(port), port, env)
    return env


def clean_interpreter(where: str) -> str:
    """A virtual environment of the running interpreter at ``where``, as a
    fresh install would give: none of the machine's own ``.pth`` files run
    (this machine's import certifi, 40-60 ms at every start); one ``.pth``
    puts this tree and the running interpreter's site-packages (Twisted) on
    its path, and ``bin/stalkd`` is the console script pip writes.  Returns
    its ``bin`` directory."""
    import site
    import sysconfig
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", where], check=True)
    bin_dir = os.path.join(where, "bin")
    python = os.path.join(bin_dir, "python")
    purelib = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                             check=True, capture_output=True, text=True).stdout.strip()
    tree = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    paths = [tree] + site.getsitepackages() + [sysconfig.get_path("purelib")]
    with open(os.path.join(purelib, "twisted_stalk_tests.pth"), "w") as pth:
        pth.write("".join(f"{p}\n" for p in dict.fromkeys(paths)))
    with open(os.path.join(bin_dir, "stalkd"), "w") as script:  # as pip writes it
        script.write(f"#!{python}\nimport sys\nfrom twisted_stalk_cli.stalkd import main\n"
                     "if __name__ == '__main__':\n"
                     "    sys.argv[0] = sys.argv[0].removesuffix('.exe')\n"
                     "    sys.exit(main())\n")
    os.chmod(os.path.join(bin_dir, "stalkd"), 0o755)
    return bin_dir


def ours_command(port: int, *extra: str) -> List[str]:
    return [sys.executable, "-m", "twisted_stalk_cli.stalkd",
            "-l", "127.0.0.1", "-p", str(port), *extra]


def reference_command(port: int, *extra: str) -> List[str]:
    assert REFERENCE
    return [REFERENCE, "-l", "127.0.0.1", "-p", str(port), *extra]


@dataclass
class RunningServer:
    kind: str
    port: int
    proc: subprocess.Popen
    args: List[str] = field(default_factory=list)

    @property
    def address(self):
        return ("127.0.0.1", self.port)

    def connect(self, timeout: float = 5.0) -> socket.socket:
        s = socket.create_connection(self.address, timeout=timeout)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return s

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10.0) -> Optional[int]:
        return stop_process(self.proc, sig, timeout)


def stop_process(proc: subprocess.Popen, sig: int = signal.SIGTERM,
                 timeout: float = 10.0) -> Optional[int]:
    """Signal ``proc``, wait up to ``timeout`` s, then kill it; its exit status."""
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


#: Ways to run our server that the wire tests cover: the speed tricks on
#: (the default), busy polling on, direct socket I/O off, and Twisted's own epoll reactor.
IO_VARIANTS = {
    "fast": {},
    "busy-poll": {"TWISTED_STALK_BUSY_POLL": "50"},
    "plain-io": {"TWISTED_STALK_DIRECT_IO": "0"},
    "twisted-reactor": {"TWISTED_STALK_REACTOR": "twisted", "TWISTED_STALK_DIRECT_IO": "0"},
}


def start_server(kind: str, *extra: str, port: Optional[int] = None,
                 wait: float = 10.0, env: Optional[dict] = None) -> RunningServer:
    """Start ``kind`` ("ours" or "reference") and wait until it accepts."""
    port = port or free_port()
    cmd = ours_command(port, *extra) if kind == "ours" else reference_command(port, *extra)
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env=dict(os.environ, PYTHONUNBUFFERED="1", **(env or {})))
    deadline = time.monotonic() + wait
    while True:
        if proc.poll() is not None:
            err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
            raise RuntimeError(f"{kind} server exited with {proc.returncode}: {err}")
        try:
            # Connected is not enough: stalkd accepts (into the backlog) before
            # its reactor and binlog are up.  Wait for an answer to an empty
            # line (UNKNOWN_COMMAND: counted in no stats counter).
            with socket.create_connection(("127.0.0.1", port), timeout=5) as probe:
                probe.sendall(b"\r\n")
                if not probe.recv(64).startswith(b"UNKNOWN_COMMAND"):
                    raise OSError("no answer yet")
            break
        except OSError:
            if time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"{kind} server did not start listening on {port}")
            time.sleep(0.01)
    if kind == "ours":
        until_reactor_serves(proc, deadline)
    return RunningServer(kind, port, proc, list(extra))


def until_reactor_serves(proc: subprocess.Popen, deadline: float) -> None:
    """Wait until the reactor has taken over from stalkd's early loop (which
    answers while Twisted loads: server/_early.py): its thread is gone.  A
    test then sees the server it measures (memory, CPU, timers) whole.  (The
    loop's thread is found by its name: a server has threads of its own, the
    binlog's syncer, and one without the early loop never had it.)"""
    from twisted_stalk.server._early import THREAD_NAME
    tasks = f"/proc/{proc.pid}/task"

    def early_thread_runs() -> bool:
        for tid in os.listdir(tasks):
            try:
                with open(f"{tasks}/{tid}/comm") as comm:
                    if comm.read().strip() == THREAD_NAME:
                        return True
            except OSError:  # that thread just ended
                pass
        return False

    try:
        while early_thread_runs() and time.monotonic() < deadline:
            time.sleep(0.005)
    except OSError:  # not Linux, or the process is gone
        pass


def stored_bytes(engine) -> int:
    """Bytes of all stored job bodies, each with its CRLF, counted the slow way."""
    return sum(len(job.body) for job in engine.jobs.values())
