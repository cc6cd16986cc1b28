"""Held load: many idle connections plus active producers and workers, on loopback.

    python bench/held_load.py                  # 10,000 idle connections, 10 s of load
    python bench/held_load.py --idle 2000 --seconds 3

What it does, bounded in time and stopping by itself:

1. raises its own open-file limit and starts ``stalkd`` on a free loopback port
   (which raises its own limit at start);
2. runs the active load alone for ``--seconds`` (the baseline): ``--producers``
   threads each putting 100-byte jobs, ``--workers`` threads each reserving and
   deleting, one blocking connection each, every round trip timed;
3. opens ``--idle`` connections that send nothing, and checks the server
   counts them all (``current-connections``);
4. runs the same active load again with the idle connections held open;
5. asks every idle connection for ``list-tube-used`` and checks each answers;
6. stops the server with SIGTERM (a graceful shutdown closing every
   connection) and checks it exits 0.

It prints the figures and fails (exit 1) if anything stalls: an active round
trip slower than ``--stall`` seconds, a connection the server did not count
or that does not answer, throughput with idle connections below half the
baseline, or a shutdown that does not exit 0 in time.  Only 127.0.0.1 is used.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BODY = b"x" * 100


def raise_nofile(need: int) -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, need)
    if soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError):
            pass
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(port: int, extra: List[str]) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "twisted_stalk_cli.stalkd", "-l", "127.0.0.1",
           "-p", str(port), *extra]
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    deadline = time.monotonic() + 15
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"stalkd exited: {proc.stderr.read().decode(errors='replace')}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc
        except OSError:
            if time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError("stalkd did not start")
            time.sleep(0.01)


class Conn:
    """A blocking connection reading replies by their framing."""

    def __init__(self, port: int, timeout: float) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def line(self) -> bytes:
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise EOFError("server closed the connection")
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\r\n")
        return line

    def body(self, n: int) -> bytes:
        while len(self.buf) < n + 2:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise EOFError("server closed the connection")
            self.buf += chunk
        data, self.buf = self.buf[:n], self.buf[n + 2:]
        return data

    def ask(self, data: bytes) -> bytes:
        self.sock.sendall(data)
        return self.line()

    def stats(self) -> Dict[str, str]:
        head = self.ask(b"stats\r\n")
        body = self.body(int(head.split()[1])).decode()
        return {k: v.strip('"') for k, _, v in
                (line.partition(": ") for line in body.splitlines()) if _}

    def close(self) -> None:
        self.sock.close()


def active_load(port: int, seconds: float, producers: int, workers: int,
                stall: float) -> Dict[str, float]:
    """Producers put, workers reserve+delete, for ``seconds``; every round trip timed."""
    stop = time.monotonic() + seconds
    lock = threading.Lock()
    results = {"puts": 0, "jobs": 0, "max_put": 0.0, "max_job": 0.0, "errors": 0,
               "put_lat": [], "job_lat": []}

    def producer() -> None:
        c = Conn(port, timeout=stall * 2)
        n, worst, lat = 0, 0.0, []
        try:
            c.ask(b"use held\r\n")
            while time.monotonic() < stop:
                t0 = time.perf_counter()
                reply = c.ask(b"put 0 0 60 %d\r\n%s\r\n" % (len(BODY), BODY))
                dt = time.perf_counter() - t0
                if not reply.startswith(b"INSERTED"):
                    raise RuntimeError(reply)
                n += 1
                worst = max(worst, dt)
                if n % 16 == 0:
                    lat.append(dt)
        except Exception:
            with lock:
                results["errors"] += 1
        finally:
            c.close()
        with lock:
            results["puts"] += n
            results["max_put"] = max(results["max_put"], worst)
            results["put_lat"] += lat

    def worker() -> None:
        c = Conn(port, timeout=stall * 2)
        n, worst, lat = 0, 0.0, []
        try:
            c.ask(b"watch held\r\n")
            while time.monotonic() < stop:
                t0 = time.perf_counter()
                head = c.ask(b"reserve-with-timeout 1\r\n")
                if head.startswith(b"TIMED_OUT"):
                    continue
                job_id, size = head.split()[1:3]
                c.body(int(size))
                if c.ask(b"delete %s\r\n" % job_id) != b"DELETED":
                    raise RuntimeError("delete failed")
                dt = time.perf_counter() - t0
                n += 1
                worst = max(worst, dt)
                if n % 16 == 0:
                    lat.append(dt)
        except Exception:
            with lock:
                results["errors"] += 1
        finally:
            c.close()
        with lock:
            results["jobs"] += n
            results["max_job"] = max(results["max_job"], worst)
            results["job_lat"] += lat

    threads = [threading.Thread(target=producer) for _ in range(producers)]
    threads += [threading.Thread(target=worker) for _ in range(workers)]
    started = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(seconds + stall * 4 + 5)
    elapsed = time.monotonic() - started
    out = {
        "seconds": round(elapsed, 2),
        "puts_per_s": round(results["puts"] / elapsed),
        "jobs_per_s": round(results["jobs"] / elapsed),
        "max_put_ms": round(results["max_put"] * 1000, 1),
        "max_job_ms": round(results["max_job"] * 1000, 1),
        "p99_put_ms": round(_p99(results["put_lat"]) * 1000, 2),
        "p99_job_ms": round(_p99(results["job_lat"]) * 1000, 2),
        "errors": results["errors"],
    }
    return out


def _p99(values: List[float]) -> float:
    if not values:
        return 0.0
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * 0.99))]


def open_idle(port: int, n: int, timeout: float) -> List[socket.socket]:
    """``n`` connected sockets that send nothing; opened in batches."""
    socks: List[socket.socket] = []
    deadline = time.monotonic() + timeout
    batch = 256
    while len(socks) < n:
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {len(socks)} of {n} idle connections opened in time")
        pending = []
        sel = selectors.DefaultSelector()
        for _ in range(min(batch, n - len(socks))):
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", port))
            sel.register(s, selectors.EVENT_WRITE)
            pending.append(s)
        left = len(pending)
        while left:
            events = sel.select(max(0.0, deadline - time.monotonic()))
            if not events:
                raise RuntimeError("idle connections did not connect in time")
            for key, _ in events:
                s = key.fileobj
                sel.unregister(s)
                err = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if err:
                    raise OSError(err, os.strerror(err))
                left -= 1
        sel.close()
        socks += pending
    return socks


def ping_all(socks: List[socket.socket], timeout: float) -> int:
    """Send list-tube-used on every socket; returns how many answered correctly."""
    sel = selectors.DefaultSelector()
    want = b"USING default\r\n"
    got: Dict[int, bytes] = {}
    for s in socks:
        s.sendall(b"list-tube-used\r\n")  # tiny; never blocks on loopback
        sel.register(s, selectors.EVENT_READ)
    ok = 0
    deadline = time.monotonic() + timeout
    left = len(socks)
    while left and time.monotonic() < deadline:
        for key, _ in sel.select(max(0.0, deadline - time.monotonic())):
            s = key.fileobj
            data = got.get(s.fileno(), b"") + s.recv(64)
            got[s.fileno()] = data
            if len(data) >= len(want) or not data:
                sel.unregister(s)
                left -= 1
                ok += data == want
    sel.close()
    return ok


def proc_figures(pid: int) -> Dict[str, int]:
    out = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    out["rss_kib"] = int(line.split()[1])
        out["fds"] = len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        pass
    return out


def run(idle: int = 10000, seconds: float = 10.0, producers: int = 4, workers: int = 4,
        stall: float = 2.0, baseline: bool = True, server_args: Optional[List[str]] = None
        ) -> Dict[str, object]:
    """Run the whole scenario; returns the figures and ``ok``."""
    limit = raise_nofile(idle + 256)
    if limit < idle + 64:
        raise RuntimeError(f"open-file limit {limit} is too low for {idle} idle connections")
    port = free_port()
    proc = start_server(port, server_args or [])
    figures: Dict[str, object] = {"idle": idle, "producers": producers, "workers": workers}
    problems: List[str] = []
    socks: List[socket.socket] = []
    try:
        if baseline:
            figures["baseline"] = active_load(port, seconds, producers, workers, stall)
        base = proc_figures(proc.pid)
        t0 = time.monotonic()
        socks = open_idle(port, idle, timeout=60)
        figures["open_idle_s"] = round(time.monotonic() - t0, 2)
        probe = Conn(port, timeout=10)
        counted = 0
        for _ in range(500):
            counted = int(probe.stats()["current-connections"]) - 1
            if counted >= idle:
                break
            time.sleep(0.02)
        figures["server_counted"] = counted
        if counted != idle:
            problems.append(f"server counts {counted} connections, {idle} are open")
        held = proc_figures(proc.pid)
        figures["server_rss_kib"] = held.get("rss_kib")
        figures["server_fds"] = held.get("fds")
        if "rss_kib" in base and "rss_kib" in held and idle:
            figures["bytes_per_idle_connection"] = round(
                (held["rss_kib"] - base["rss_kib"]) * 1024 / idle)
        figures["with_idle"] = load = active_load(port, seconds, producers, workers, stall)
        t0 = time.monotonic()
        answered = ping_all(socks, timeout=30)
        figures["ping_all_s"] = round(time.monotonic() - t0, 2)
        figures["idle_answered"] = answered
        if answered != idle:
            problems.append(f"only {answered} of {idle} idle connections answered")
        probe.close()
        worst = max(load["max_put_ms"], load["max_job_ms"]) / 1000
        if load["errors"]:
            problems.append(f"{load['errors']} active connections failed")
        if worst > stall:
            problems.append(f"a round trip took {worst:.2f} s (stall limit {stall} s)")
        if baseline:
            b = figures["baseline"]
            if load["jobs_per_s"] < 0.5 * b["jobs_per_s"]:  # type: ignore[index]
                problems.append("throughput with idle connections fell below half the baseline")
        # Graceful shutdown with every idle connection still open.
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(30)
        except subprocess.TimeoutExpired:
            code = None
        figures["shutdown_s"] = round(time.monotonic() - t0, 2)
        figures["exit_status"] = code
        if code != 0:
            problems.append(f"SIGTERM: exit status {code}")
    finally:
        for s in socks:
            s.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()
    figures["problems"] = problems
    figures["ok"] = not problems
    return figures


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--idle", type=int, default=10000)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--producers", type=int, default=4)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--stall", type=float, default=2.0,
                    help="slowest acceptable active round trip, seconds")
    ap.add_argument("--no-baseline", action="store_true")
    ap.add_argument("server_args", nargs="*", help="extra stalkd flags (after --)")
    args = ap.parse_args(argv)
    figures = run(args.idle, args.seconds, args.producers, args.workers, args.stall,
                  not args.no_baseline, args.server_args)
    print(json.dumps(figures, indent=2))
    return 0 if figures["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
