"""Throwaway PostgreSQL clusters for the PostgreSQL engine's tests and benchmarks.

:class:`Cluster` runs ``initdb`` in a temporary directory and starts
``postgres`` on a unix socket there (no TCP port is opened unless asked).
PostgreSQL refuses to run as root: as root the cluster belongs to, and runs
as, the ``postgres`` user that Debian's package creates.  :func:`find_bindir`
finds Debian's ``/usr/lib/postgresql/<version>/bin`` (or ``initdb`` on PATH);
:func:`unavailable` says why clusters cannot be made here, for a skip.

A standby (:meth:`Cluster.standby`) is made with ``pg_basebackup -R`` and
streams from its primary; :meth:`Cluster.promote` turns it into a primary.
"""
from __future__ import annotations

import glob
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from typing import List, Optional

_RUN_AS = "postgres"


def find_bindir() -> Optional[str]:
    """The directory holding initdb, postgres and pg_ctl, or None."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda p: int(p.split("/")[4]) if p.split("/")[4].isdigit() else 0)
    if found:
        return os.path.dirname(found[-1])
    initdb = shutil.which("initdb")
    return os.path.dirname(initdb) if initdb else None


def unavailable() -> Optional[str]:
    """Why no cluster can be started here (None: one can)."""
    from twisted_stalk.pg import driver_problem
    problem = driver_problem()
    if problem:
        return problem
    if find_bindir() is None:
        return "PostgreSQL is not installed (Debian: apt-get install postgresql)"
    if os.geteuid() == 0:
        try:
            import pwd
            pwd.getpwnam(_RUN_AS)
        except KeyError:
            return "running as root and there is no 'postgres' user to run PostgreSQL as"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _children(parent: int) -> List[int]:
    """The pids whose parent is ``parent`` (Linux ``/proc``)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == parent:
            found.append(int(entry))
    return found


def _running(pid: int) -> bool:
    """Whether ``pid`` still runs (a zombie waiting to be reaped does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _wait_gone(pids: List[int], wait: float = 10.0) -> None:
    """Return once none of ``pids`` runs any more (or ``wait`` seconds passed)."""
    deadline = time.monotonic() + wait
    while pids and time.monotonic() < deadline:
        pids = [pid for pid in pids if _running(pid)]
        if pids:
            time.sleep(0.01)


class Cluster:
    """One PostgreSQL server in a temporary directory (see the module docstring)."""

    def __init__(self, base: Optional[str] = None, port: Optional[int] = None,
                 settings: Optional[List[str]] = None) -> None:
        self.bindir = find_bindir()
        assert self.bindir, unavailable()
        self.base = base or tempfile.mkdtemp(prefix="stalk-pg-")
        self.data = os.path.join(self.base, "data")
        self.sockets = self.base
        self.port = port or _free_port()
        self.settings = settings or []
        self.proc: Optional[subprocess.Popen] = None
        os.chmod(self.base, 0o755)
        self._chown(self.base)

    # ------------------------------------------------------------ helpers

    def _owner(self) -> dict:
        """Popen arguments that run a program as the cluster's owner."""
        if os.geteuid() == 0:
            return {"user": _RUN_AS, "group": _RUN_AS, "extra_groups": []}
        return {}

    def _chown(self, path: str) -> None:
        if os.geteuid() == 0:
            import pwd
            entry = pwd.getpwnam(_RUN_AS)
            os.chown(path, entry.pw_uid, entry.pw_gid)

    def _tool(self, name: str) -> str:
        return os.path.join(self.bindir, name)

    def dsn(self, dbname: str = "postgres", **extra: str) -> str:
        """A key/value connection string for this cluster over its unix socket."""
        parts = [f"host={self.sockets}", f"port={self.port}", f"user={_RUN_AS}",
                 f"dbname={dbname}"]
        parts += [f"{k}={v}" for k, v in extra.items()]
        return " ".join(parts)

    # ------------------------------------------------------------ life cycle

    def init(self) -> "Cluster":
        subprocess.run([self._tool("initdb"), "-D", self.data, "-A", "trust",
                                       "-U", _RUN_AS, "--no-sync", "-E", "UTF8"],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, **self._owner())
        return self

    def start(self, wait: float = 30.0) -> "Cluster":
        argv = [self._tool("postgres"), "-D", self.data, "-k", self.sockets,
                "-p", str(self.port), "-c", "listen_addresses=",
                "-c", "max_connections=200", "-c", "shared_buffers=64MB",
                "-c", "max_wal_senders=10", "-c", "wal_level=replica",
                "-c", "hot_standby=on", "-c", "logging_collector=off"]
        for s in self.settings:
            argv += ["-c", s]
        log = open(os.path.join(self.base, "postgres.log"), "ab")
        self.proc = subprocess.Popen(argv, stdout=log, stderr=log, start_new_session=True,
                                     cwd=self.base, **self._owner())
        log.close()
        self.wait_ready(wait)
        return self

    def wait_ready(self, wait: float = 30.0) -> None:
        import psycopg
        deadline = time.monotonic() + wait
        while True:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"postgres exited: {self.log_tail()}")
            try:
                with psycopg.connect(self.dsn(), connect_timeout=2) as conn:
                    conn.execute("SELECT 1")
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"postgres did not start: {self.log_tail()}")
                time.sleep(0.05)

    def log_tail(self, n: int = 2000) -> str:
        try:
            with open(os.path.join(self.base, "postgres.log"), "rb") as f:
                return f.read()[-n:].decode("utf-8", "replace")
        except OSError:
            return ""

    def stop(self, mode: str = "fast") -> None:
        """Stop the server: ``fast`` (SIGINT), ``immediate`` (SIGQUIT) or ``kill`` (SIGKILL)."""
        proc = self.proc
        if proc is None:
            return
        sig = {"fast": signal.SIGINT, "immediate": signal.SIGQUIT,
               "kill": signal.SIGKILL}[mode]
        if proc.poll() is None:
            if mode == "kill":
                # Everything at once, as a machine crash would.  PostgreSQL's
                # children are process-group leaders of their own, so they are
                # found by parent and killed one by one; a restart must wait
                # for them, or it finds their shared memory still in use.
                children = _children(proc.pid)
                os.kill(proc.pid, signal.SIGKILL)
                for pid in children:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                _wait_gone(children)
            else:
                proc.send_signal(sig)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        self.proc = None

    def postmaster_pid(self) -> Optional[int]:
        try:
            with open(os.path.join(self.data, "postmaster.pid")) as f:
                return int(f.readline())
        except (OSError, ValueError):
            return None

    def destroy(self) -> None:
        self.stop("immediate")
        shutil.rmtree(self.base, ignore_errors=True)

    # ------------------------------------------------------------ SQL

    def sql(self, statement: str, dbname: str = "postgres", autocommit: bool = True):
        import psycopg
        with psycopg.connect(self.dsn(dbname), autocommit=autocommit) as conn:
            cur = conn.execute(statement)
            return cur.fetchall() if cur.description else None

    def create_database(self, name: str) -> str:
        self.sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        self.sql(f'CREATE DATABASE "{name}"')
        return self.dsn(name)

    # ------------------------------------------------------------ replication

    def standby(self, port: Optional[int] = None) -> "Cluster":
        """A new cluster copied from this one with pg_basebackup, streaming from it."""
        other = Cluster(port=port, settings=self.settings)
        subprocess.run([self._tool("pg_basebackup"), "-h", self.sockets,
                                       "-p", str(self.port), "-U", _RUN_AS, "-D", other.data,
                                       "-R", "-X", "stream", "--no-sync",
                                       "-d", f"application_name=standby{other.port}"],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, **self._owner())
        return other

    def promote(self) -> None:
        """Make this standby a primary; returns once it takes writes."""
        self.sql("SELECT pg_promote(true, 60)")

    def follow(self, primary: "Cluster") -> None:
        """Rebuild this (stopped) cluster as a standby of ``primary``."""
        shutil.rmtree(self.data, ignore_errors=True)
        subprocess.run([self._tool("pg_basebackup"), "-h", primary.sockets,
                                       "-p", str(primary.port), "-U", _RUN_AS, "-D", self.data,
                                       "-R", "-X", "stream", "--no-sync",
                                       "-d", f"application_name=standby{self.port}"],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, **self._owner())


__all__ = ["Cluster", "find_bindir", "unavailable"]


# ---------------------------------------------------------------- pytest fixtures

def _fixtures():
    """Define the fixtures only when pytest is there (benchmarks import this module too)."""
    import itertools

    import pytest

    counter = itertools.count(1)

    @pytest.fixture(scope="session")
    def pg_cluster():
        """One throwaway PostgreSQL cluster for the whole test session."""
        why = unavailable()
        if why:
            pytest.skip(f"PostgreSQL engine tests: {why}")
        cluster = Cluster().init().start()
        try:
            yield cluster
        finally:
            cluster.destroy()

    @pytest.fixture
    def pg_engine(pg_cluster):
        """An ``--engine`` value naming a fresh, empty schema on the session's cluster."""
        return pg_cluster.dsn() + f" stalk_schema=t{next(counter)}_{os.getpid()}"

    @pytest.fixture
    def slow_only(request):
        """Skip a long test unless the run selects ``-m slow``."""
        if "slow" not in (request.config.getoption("markexpr") or ""):
            pytest.skip("a long test: run with -m slow")

    return pg_cluster, pg_engine, slow_only


try:
    pg_cluster, pg_engine, slow_only = _fixtures()
except ImportError:  # pragma: no cover - no pytest (a benchmark)
    pass
