#!/usr/bin/env python3
"""The PostgreSQL engine's benchmark rows, beside Graphile Worker, on one cluster.

One throwaway PostgreSQL 15 cluster (tests/pgcluster.py; fsync on,
``synchronous_commit=on``, ``pg_stat_statements`` loaded), and on it, one
system at a time:

* ``pg-1``: one ``stalkd --engine`` node; ``pg-2``: two nodes on the same
  schema, the row's connections split between them (one generator per
  node, run at once; jobs/s are added, the latency is the worse of the two);
* ``graphile``: Graphile Worker (when ``node`` and ``npm`` are there),
  installed with npm into a temporary folder for this run only, with its own
  performance-test settings (bench/pg_bench_graphile.js);
* ``memory``: the in-memory engine, for scale (no database figures; its
  drain's node CPU includes the put phase, which no database shows the end of).
* ``relay``: bench/pg_floor.py's relay, the cheapest node that does the
  row's durable work as the engine does it and nothing else (its ``--drain``
  form in the drain row: deletes batched with the take of the next jobs),
  for the floor under any node (rows ``drain``, ``closed``, ``wake-20``,
  ``latency``); ``relay-record``: the same relay writing the closed loop's jobs
  into the engine's own job table (``--record``), the floor under a node that
  keeps beanstalk's job record in PostgreSQL (row ``closed``).

Rows (ours are driven by the C load generator ``bstalk_load``, bench/compare/;
``BSTALK_LOAD`` names another build):

* ``drain``: a backlog of 20,000 jobs drained by 24 workers
  (``put-reserve-delete``: the figures are those of its reserve-delete phase);
* ``closed``: closed loop, 50 clients each doing put, reserve, delete
  (``mixed``); Graphile: 50 clients each adding a job and waiting until a
  worker has run it;
* ``enqueue``: 50 producers putting 20,000 jobs;
* ``wake-20``: 20 workers waiting in reserve, one producer (``wait-wake``);
* ``latency``: one worker waiting, put -> RESERVED, the median; the
  producer puts 100 jobs a second (open loop), so that every put finds the
  worker waiting (a closed-loop producer waits only for INSERTED and would
  measure a queue).  Graphile: one client adding a job and waiting until a
  worker has run it.

The anchor, ``insert-loop``: on the same cluster, one connection committing
one-row INSERTs in a loop (autocommit, a 100-byte body, into a two-column
table made for it), for ``--insert-secs`` seconds (bounded by ``--cap``),
run just before the first wake-20 or latency row of a system on the
database.  It is PostgreSQL's own ``pgbench -c 1 -n -M prepared`` with a
one-line custom script, found beside
the cluster's ``initdb`` (Debian installs it with the server): a client in C
with prepared statements, so the loop is the cluster's commit path and
little else, the most one connection can commit here.  Where there is no
``pgbench`` a psycopg loop stands in (prepared too; its rate then includes
Python's cost per statement, and the anchor row says which ran).  Its jobs/s
is commits/s; its p50 the median INSERT (commit included) from pgbench's
per-transaction log; its node CPU is the client's.  Below the table each
database system's wake-20 jobs/s and latency p50 are given as ratios to it.

Per row, besides jobs/s and the median latency: commits, statements, WAL
bytes, PostgreSQL CPU and node CPU per job (see bench/pgmeter.py for how
each is read), the generator's own CPU per job (its phase's, as it reports
it), and the cores the row kept busy (those three CPU figures per job times
jobs/s: next to the machine's CPU count, whether the row was bound by the
cores or by waiting); for the engine the statements that took the most time.
``--explain`` then times ``delete_many`` under ``EXPLAIN (ANALYZE, BUFFERS)``
as it is and without its per-row ``EXISTS``.

    python bench/pg_bench.py                            # everything
    python bench/pg_bench.py --targets pg-1 --rows closed,drain --no-explain
    python bench/pg_bench.py --targets pg-1 --rows drain --drain-workers 96 --no-explain
    python bench/pg_bench.py --targets pg-1 --rows wake-20,latency --no-explain
    pypy3 bench/pg_bench.py --targets relay,pg-1,graphile --rows drain --warmup --no-explain

``--warmup`` runs each of our rows once, unmeasured, on the node(s) it then
measures (the drain's boundary counts from the jobs put before), so that a
JIT (PyPy) is measured warm; each row otherwise starts a fresh node.

Bounded in time (``--cap`` seconds per generator run) and in jobs;
loopback and a unix socket only; every server, the cluster and the npm
folder are gone at the end.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import Callable, Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, HERE)
sys.path.insert(0, ROOT)

import pgmeter  # noqa: E402
from pgcluster import Cluster, unavailable  # noqa: E402

#: The targets that are bench/pg_floor.py's relay (``relay-record``: ``--record``).
RELAYS = ("relay", "relay-record")

#: Targets that serve only some rows (``relay-record`` is the closed loop's).
ONLY_ROWS: Dict[str, Tuple[str, ...]] = {"relay-record": ("closed",)}

#: row: (generator mode, connections, jobs, measured phase, extra arguments)
ROWS: Dict[str, Tuple[str, int, int, str, List[str]]] = {
    "drain": ("put-reserve-delete", 24, 20000, "reserve-delete", []),
    "closed": ("mixed", 50, 30000, "mixed", []),
    "enqueue": ("put", 50, 20000, "put", ["--no-cleanup"]),
    "wake-20": ("wait-wake", 20, 5000, "wait-wake", []),
    "latency": ("wait-wake", 1, 500, "wait-wake", ["--rate", "100"]),
}
#: Graphile Worker's rows: the command sent to bench/pg_bench_graphile.js.
GRAPHILE = {"drain": "drain 20000", "closed": "closed 5000 50", "enqueue": "enqueue 20000 50",
            "latency": "latency 500"}
#: The anchor: its table (made for it), its statement, its seconds by default.
LOOP_TABLE = "insert_loop"
LOOP_BODY = "x" * 100
LOOP_SECS = 5.0
#: The rows given as ratios to the anchor (only for systems on the database).
ANCHORED = ("wake-20", "latency")
#: Seconds the servers idle before a snapshot (backends publish their
#: transaction counts at most once a second).
SETTLE = 1.2


def generator() -> str:
    """The C load generator: ``$BSTALK_LOAD``, or bench/compare/bstalk_load.c
    built once into the temporary folder."""
    found = os.environ.get("BSTALK_LOAD")
    if found:
        return found
    found = os.path.join(tempfile.gettempdir(), f"bstalk_load-{os.getuid()}")
    if not os.path.exists(found):
        subprocess.run(["gcc", "-O2", "-o", found, os.path.join(HERE, "compare", "bstalk_load.c")],
                       check=True)
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_listening(port: int, proc: subprocess.Popen, wait: float = 30.0) -> None:
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server on {port} exited: {proc.stderr.read().decode()[-2000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                s.sendall(b"list-tube-used\r\n")
                if s.recv(64).startswith(b"USING"):
                    return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"server on {port} did not start")


def pgbench_path(cluster: Cluster) -> Optional[str]:
    """PostgreSQL's ``pgbench`` beside the cluster's ``initdb``, or None."""
    path = os.path.join(cluster.bindir, "pgbench")
    return path if os.access(path, os.X_OK) else None


def prepare_loop(cluster: Cluster) -> None:
    """A fresh, empty table for the anchor: an identity key and a body."""
    cluster.sql(f"{pgmeter.MARK} DROP TABLE IF EXISTS {LOOP_TABLE}")
    cluster.sql(f"{pgmeter.MARK} CREATE TABLE {LOOP_TABLE} "
                "(id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, body text NOT NULL)")


def run_loop(cluster: Cluster, seconds: float = 0.0, transactions: int = 0,
             client: str = "auto") -> dict:
    """One connection committing one-row INSERTs into the anchor's table
    (made by :func:`prepare_loop`), autocommit, for ``transactions`` of them
    or else ``seconds``.  ``client``: ``pgbench``, ``psycopg`` or ``auto``
    (pgbench where it is installed).  Returns ``jobs`` (commits), ``rate``
    (commits/s), ``p50`` (ms), ``errors``, ``client`` (which ran) and
    ``client_cpu`` (its CPU seconds)."""
    pgbench = pgbench_path(cluster) if client in ("auto", "pgbench") else None
    if client == "pgbench" and pgbench is None:
        raise RuntimeError("no pgbench beside the cluster's initdb")
    if pgbench is None:
        return _psycopg_loop(cluster, seconds, transactions)
    folder = tempfile.mkdtemp(prefix="stalk-bench-loop-")
    try:
        script = os.path.join(folder, "insert.sql")
        with open(script, "w") as f:
            f.write(f"INSERT INTO {LOOP_TABLE} (body) VALUES ('{LOOP_BODY}');\n")
        bound = ["-t", str(transactions)] if transactions else [
            "-T", str(max(1, round(seconds)))]
        used = resource.getrusage(resource.RUSAGE_CHILDREN)
        done = subprocess.run(
            [pgbench, "-n", "-c", "1", "-j", "1", "-M", "prepared", "-f", script, "-l",
             "--log-prefix", os.path.join(folder, "log")] + bound + [cluster.dsn()],
            capture_output=True, text=True, cwd=folder,
            timeout=(seconds or transactions / 10) + 60)
        now = resource.getrusage(resource.RUSAGE_CHILDREN)
        if done.returncode != 0:
            raise RuntimeError(f"pgbench failed: {done.stderr[-500:]}")
        tps = re.search(r"^tps = ([\d.]+)", done.stdout, re.M)
        processed = re.search(r"actually processed: (\d+)", done.stdout)
        failed = re.search(r"number of failed transactions: (\d+)", done.stdout)
        latencies = []  # client transaction time_us script epoch epoch_us, one line each
        for log in glob.glob(os.path.join(folder, "log.*")):
            with open(log) as f:
                latencies += [int(line.split()[2]) for line in f if line.strip()]
        if not (tps and processed and latencies):
            raise RuntimeError(f"pgbench said nothing to read: {done.stdout[-500:]}")
        return {"jobs": int(processed.group(1)), "rate": float(tps.group(1)),
                "p50": median(latencies) / 1000,
                "errors": int(failed.group(1)) if failed else 0, "client": "pgbench",
                "client_cpu": (now.ru_utime + now.ru_stime) - (used.ru_utime + used.ru_stime)}
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _psycopg_loop(cluster: Cluster, seconds: float, transactions: int) -> dict:
    """:func:`run_loop` where there is no pgbench: the same loop in Python."""
    import psycopg
    latencies = []
    sql = f"INSERT INTO {LOOP_TABLE} (body) VALUES (%s)"
    with psycopg.connect(cluster.dsn(), autocommit=True) as conn:
        cpu, start = time.process_time(), time.perf_counter()
        deadline = start + seconds
        while len(latencies) < transactions if transactions else (
                time.perf_counter() < deadline):
            t = time.perf_counter()
            conn.execute(sql, (LOOP_BODY,), prepare=True)
            latencies.append(time.perf_counter() - t)
        elapsed = time.perf_counter() - start
        cpu = time.process_time() - cpu
    return {"jobs": len(latencies), "rate": len(latencies) / elapsed,
            "p50": 1000 * median(latencies) if latencies else None, "errors": 0,
            "client": "psycopg", "client_cpu": cpu}


def median(values: List[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


def anchor_lines(anchor: dict, results: List[Tuple[str, str, Optional[dict]]]) -> List[str]:
    """Each database system's wake-20 jobs/s and latency p50 against the
    anchor's commits/s and p50, one line each (memory has none)."""
    lines = []
    for name, row, r in results:
        if name == "memory" or row not in ANCHORED or not r:
            continue
        if row == "wake-20" and r.get("rate") and anchor.get("rate"):
            lines.append(f"- {name} wake-20 / one-connection INSERT loop: "
                         f"{r['rate']:,.0f} / {anchor['rate']:,.0f} per second = "
                         f"{r['rate'] / anchor['rate']:.2f}x")
        if row == "latency" and r.get("p50") and anchor.get("p50"):
            lines.append(f"- {name} latency p50 / one INSERT commit's p50: "
                         f"{r['p50']:.2f} / {anchor['p50']:.2f} ms = "
                         f"{r['p50'] / anchor['p50']:.2f}x")
    return lines


class Target:
    """One or more of our servers the generator is pointed at."""

    def __init__(self, name: str, argvs: List[List[str]]) -> None:
        self.name = name
        self.ports = [free_port() for _ in argvs]
        self.procs: List[subprocess.Popen] = []
        for argv, port in zip(argvs, self.ports):
            argv = [a.replace("{port}", str(port)) for a in argv]
            proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            self.procs.append(proc)
            wait_listening(port, proc)

    @property
    def pids(self) -> List[int]:
        return [p.pid for p in self.procs]

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


def merge(results: List[dict], phase: str) -> Optional[dict]:
    """One figure row from the generators' JSON lines (None: one failed)."""
    phases = [p for r in results for p in r.get("phases", []) if p.get("name") == phase]
    if len(phases) != len(results) or not phases:
        return None
    jobs = sum(p["jobs"] for p in phases)
    cpu = [p.get("client_cpu_s", -1) for p in phases]
    return {"jobs": jobs,
            "rate": sum(p["ops_per_sec"] for p in phases),
            "p50": max(p["lat_us"]["p50"] for p in phases) / 1000,
            "p99": max(p["lat_us"]["p99"] for p in phases) / 1000,
            "errors": sum(p["errors"] for p in phases),
            # The generators' own CPU in the phase, per job (the clients' share).
            "gen_cpu": 1e6 * sum(cpu) / jobs if jobs and min(cpu) >= 0 else None}


def cores_busy(r: Optional[dict]) -> Optional[float]:
    """How many cores the row kept busy: PostgreSQL's, the node's and the
    generator's CPU per job (where known) times jobs per second.  Next to the
    machine's CPU count it says whether the row was bound by the cores or
    by waiting (for a commit, a round trip, a wake-up)."""
    if not r or r.get("rate") is None or r.get("pg_cpu") is None or r.get("node_cpu") is None:
        return None
    return (r["pg_cpu"] + r["node_cpu"] + (r.get("gen_cpu") or 0)) * r["rate"] / 1e6


def run_generators(gen: str, ports: List[int], row: str, cap: float,
                   boundary: Optional[Callable[[], bool]] = None,
                   at_boundary: Optional[Callable[[], None]] = None,
                   pipeline: int = 0) -> Optional[dict]:
    """Run a row's generator(s); ``at_boundary`` is called once
    ``boundary()`` holds while they run (the drain's phase change);
    ``pipeline``: commands in flight per connection (0: one; in wake-20 and
    latency, the producer's)."""
    mode, conns, jobs, phase, extra = ROWS[row]
    if pipeline:
        extra = extra + ["--pipeline", str(pipeline)]
    ports = ports if conns > 1 else ports[:1]
    procs = []
    for i, port in enumerate(ports):
        argv = [gen, "--addr", f"127.0.0.1:{port}", "--mode", mode,
                "--conns", str(max(1, conns // len(ports))), "--ops", str(jobs // len(ports)),
                "--duration", str(cap), "--timeout", str(cap * 2 + 30), "--quiet",
                "--tube", f"b{os.getpid()}x{i}"] + extra
        procs.append(subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    if boundary is not None:
        while any(p.poll() is None for p in procs) and not boundary():
            time.sleep(0.002)
        at_boundary()
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=cap * 2 + 60)
        lines = out.decode().strip().splitlines()
        if not lines:
            print(f"# generator failed: {err.decode()[-500:]}", file=sys.stderr)
        results.append(json.loads(lines[-1]) if lines else {})
    return merge(results, phase)


class Bench:
    """The cluster, the measuring connection, and the rows' output."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.cluster = Cluster(settings=[
            "shared_buffers=256MB", "max_wal_size=2GB", "fsync=on", "synchronous_commit=on",
            "shared_preload_libraries=pg_stat_statements", "pg_stat_statements.max=2000",
            "pg_stat_statements.track=top"]).init().start()
        import psycopg
        self.conn = psycopg.connect(self.cluster.dsn(), autocommit=True)
        self.conn.execute(f"{pgmeter.MARK} CREATE EXTENSION pg_stat_statements")
        self.schemas = iter(range(1, 10 ** 6))
        self.tops: List[Tuple[str, str, List[Tuple[str, float, float]]]] = []
        self.graphile_version = "?"

    def snapshot(self, nodes: List[int]) -> pgmeter.Snapshot:
        return pgmeter.take(self.conn, self.cluster.proc.pid, nodes)

    def engine(self, schema: str) -> str:
        return (self.cluster.dsn() + f" stalk_schema={schema} stalk_pool={self.args.pool}"
                + (f" {self.args.settings}" if self.args.settings else ""))

    def ours(self, name: str, row: str, gen: str) -> Optional[dict]:
        stalkd = [sys.executable, "-m", "twisted_stalk_cli.stalkd", "-l", "127.0.0.1",
                  "-p", "{port}"]
        sequence = None  # the drain's job ids, which tell when the backlog is in
        if name == "memory":
            target = Target(name, [stalkd])
            schema = None
        elif name in RELAYS:  # bench/pg_floor.py's: the durable work alone
            target = Target(name, [[sys.executable, os.path.join(HERE, "pg_floor.py"),
                                    "--serve", "{port}", "--dsn", self.cluster.dsn()]
                                   + (["--drain"] if row == "drain" else [])
                                   + (["--closed"] if row == "closed" else [])
                                   + (["--record"] if name == "relay-record" else [])])
            schema = None
            sequence = "floor_jobs_id_seq"
        else:
            schema = f"bench{next(self.schemas)}"
            count = 2 if name == "pg-2" else 1
            target = Target(name, [stalkd + ["--engine", self.engine(schema)]] * count)
            sequence = f"{schema}.job_ids"
        try:
            if self.args.warmup:  # the same row once, unmeasured, on the same node(s)
                run_generators(gen, target.ports, row, self.args.cap, pipeline=self.args.pipeline)
            time.sleep(SETTLE)
            marks: Dict[str, pgmeter.Snapshot] = {"before": self.snapshot(target.pids)}
            boundary = at_boundary = None
            if row == "drain" and sequence:
                ids_given = (f"{pgmeter.MARK} SELECT CASE WHEN is_called THEN last_value"
                             f" ELSE 0 END FROM {sequence}")
                jobs = self.conn.execute(ids_given).fetchone()[0] + ROWS[row][2]

                def boundary() -> bool:  # every put of the backlog has been taken
                    return self.conn.execute(ids_given).fetchone()[0] >= jobs

                def at_boundary() -> None:
                    marks["before"] = self.snapshot(target.pids)
            r = run_generators(gen, target.ports, row, self.args.cap, boundary, at_boundary,
                               self.args.pipeline)
            time.sleep(SETTLE)
            after = self.snapshot(target.pids)
        finally:
            target.stop()
        if r is None:
            return None
        r.update(pgmeter.per_job(marks["before"], after, r["jobs"]))
        if schema or name in RELAYS:
            if schema:
                from twisted_stalk.pg.sql import statements
                named = statements(schema)
            else:
                import pg_floor
                named = pg_floor.statements(record=name == "relay-record")
            self.tops.append((name, row, pgmeter.top_statements(marks["before"], after,
                                                                r["jobs"], named)))
        if row == "drain":
            r["xacts"] = None  # the boundary falls inside a running generator
        if row == "latency":
            r["rate"] = None  # paced
        return r

    def insert_loop(self, seconds: float) -> dict:
        """The anchor row: :func:`run_loop` between two snapshots; its node
        CPU is the client's (pgbench's, or this process's for psycopg)."""
        prepare_loop(self.cluster)
        time.sleep(SETTLE)
        before = self.snapshot([])
        r = run_loop(self.cluster, seconds=seconds)
        time.sleep(SETTLE)
        after = self.snapshot([])
        r.update(pgmeter.per_job(before, after, r["jobs"]))
        r["node_cpu"] = 1e6 * r.pop("client_cpu") / max(r["jobs"], 1)
        self.tops.append((r["client"], "insert-loop", pgmeter.top_statements(
            before, after, r["jobs"], {"insert": f"INSERT INTO {LOOP_TABLE} (body) VALUES ($1)"})))
        return r

    def graphile(self, rows: List[str]) -> Dict[str, dict]:
        """Graphile Worker's rows (empty without node and npm)."""
        if not (shutil.which("node") and shutil.which("npm")):
            print("# graphile: no node/npm here, skipped")
            return {}
        folder = tempfile.mkdtemp(prefix="stalk-bench-graphile-")
        out: Dict[str, dict] = {}
        proc = None
        try:
            subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--silent",
                            "--prefix", folder, f"graphile-worker@{self.args.graphile}", "pg"],
                           check=True, stdout=subprocess.DEVNULL, timeout=300)
            with open(os.path.join(folder, "node_modules", "graphile-worker",
                                   "package.json")) as f:
                self.graphile_version = json.load(f)["version"]
            url = (f"postgresql://postgres@/postgres?host={self.cluster.sockets}"
                   f"&port={self.cluster.port}")
            proc = subprocess.Popen(["node", os.path.join(HERE, "pg_bench_graphile.js"), folder,
                                     url], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    text=True, bufsize=1)
            if proc.stdout.readline().strip() != "MIGRATED":
                raise RuntimeError("graphile: the schema was not installed")
            for row in rows:
                if row not in GRAPHILE:
                    continue
                proc.stdin.write(GRAPHILE[row] + "\n")
                if proc.stdout.readline().strip() != "READY":
                    raise RuntimeError(f"graphile: {row} did not start")
                time.sleep(SETTLE)
                before = self.snapshot([proc.pid])
                proc.stdin.write("GO\n")
                line = proc.stdout.readline().strip()
                if not line.startswith("DONE "):
                    raise RuntimeError(f"graphile: {row} failed")
                done = json.loads(line[5:])
                time.sleep(SETTLE)
                after = self.snapshot([proc.pid])
                r = {"jobs": done["jobs"],
                     "rate": None if row == "latency" else done["jobs"] / done["secs"],
                     "p50": done.get("p50_ms"), "errors": 0}
                r.update(pgmeter.per_job(before, after, done["jobs"]))
                self.tops.append(("graphile", row, pgmeter.top_statements(
                    before, after, done["jobs"], {})))
                out[row] = r
        except (subprocess.SubprocessError, RuntimeError, OSError) as e:
            print(f"# graphile: {e}", file=sys.stderr)
        finally:
            if proc is not None:
                proc.stdin.close()
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            shutil.rmtree(folder, ignore_errors=True)
        return out

    def explain(self, gen: str) -> None:
        """``delete_many`` under EXPLAIN (ANALYZE, BUFFERS), with and without
        its per-row EXISTS, on a tube of 20,000 ready jobs, 24 ids at a time."""
        from twisted_stalk.pg.sql import statements
        schema = f"bench{next(self.schemas)}"
        target = Target("pg-1", [[sys.executable, "-m", "twisted_stalk_cli.stalkd", "-l",
                                  "127.0.0.1", "-p", "{port}", "--engine", self.engine(schema)]])
        try:
            subprocess.run([gen, "--addr", f"127.0.0.1:{target.ports[0]}", "--mode", "put",
                            "--conns", "8", "--ops", "20000", "--no-cleanup", "--quiet",
                            "--tube", "explained", "--timeout", "120"],
                           check=True, stdout=subprocess.DEVNULL)
        finally:
            target.stop()
        sql = statements(schema)["delete_many"]
        variants = {"as is": sql, "without EXISTS": re.sub(
            r"EXISTS \(SELECT 1 FROM \S+ o WHERE .*?FROM d\)\)", "true", sql, flags=re.S)}
        if variants["without EXISTS"] == sql:
            raise RuntimeError("delete_many has no EXISTS (SELECT 1 FROM ... FROM d)) to leave out")
        ids = [row[0] for row in self.conn.execute(
            f"{pgmeter.MARK} SELECT id FROM {schema}.jobs ORDER BY id LIMIT 2400").fetchall()]
        print("\n## delete_many under EXPLAIN (ANALYZE, BUFFERS): 24 ids per statement, "
              "100 statements each, the tube's lowest ids first (as a drain takes them)")
        for label, text in variants.items():
            # Each variant deletes the same ids inside a transaction rolled back.
            self.conn.execute(f"{pgmeter.MARK} BEGIN")
            try:
                total, plan_shown = 0.0, None
                for k in range(0, len(ids), 24):
                    chunk = ids[k:k + 24]
                    bound = (text.replace("$1::bigint[]", f"ARRAY{chunk}::bigint[]")
                             .replace("$2::bigint[]", f"ARRAY{[0] * len(chunk)}::bigint[]")
                             .replace("$3::bigint", "0::bigint")
                             .replace("$4::text[]", "ARRAY[]::text[]")
                             .replace("$5::int[]", f"ARRAY{[0] * len(chunk)}::int[]")
                             .replace("$6::text[]", "ARRAY[]::text[]")
                             .replace("$7::bigint[]", "ARRAY[]::bigint[]"))
                    plan = [r[0] for r in self.conn.execute(
                        f"{pgmeter.MARK} EXPLAIN (ANALYZE, BUFFERS) {bound}").fetchall()]
                    total += float(re.search(r"Execution Time: ([\d.]+)", plan[-1]).group(1))
                    plan_shown = plan_shown or (plan if k >= 24 * 50 else None)
                print(f"\n### {label}: {1000 * total / len(ids):.1f} µs per deleted job\n")
                print("\n".join("    " + line for line in plan_shown or []))
            finally:
                self.conn.execute(f"{pgmeter.MARK} ROLLBACK")

    def close(self) -> None:
        self.conn.close()
        self.cluster.destroy()


def fmt(r: Optional[dict], key: str, spec: str) -> str:
    value = r.get(key) if r else None
    return "n/a" if value is None else format(value, spec)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--targets", default="pg-1,pg-2,graphile")
    ap.add_argument("--rows", default=",".join(ROWS))
    ap.add_argument("--cap", type=float, default=15.0, help="seconds per generator run at most")
    ap.add_argument("--pool", type=int, default=4, help="stalk_pool of each node")
    ap.add_argument("--settings", default="",
                    help="more engine settings for our nodes, e.g. 'stalk_take_hold=0'")
    ap.add_argument("--graphile", default="0.17", help="graphile-worker version to install")
    ap.add_argument("--no-explain", dest="explain", action="store_false")
    ap.add_argument("--pipeline", type=int, default=0,
                    help="our rows: commands in flight per connection (wake-20: the producer's)")
    ap.add_argument("--insert-secs", type=float, default=LOOP_SECS,
                    help="the one-connection INSERT loop's seconds, run before the first "
                    "wake-20 or latency row (bounded by --cap; 0: none)")
    ap.add_argument("--warmup", action="store_true",
                    help="our systems: run each row once, unmeasured, on the same node(s) "
                    "before measuring it (a JIT's warm-up: PyPy)")
    ap.add_argument("--drain-workers", type=int, default=ROWS["drain"][1],
                    help="our drain row: worker connections")
    args = ap.parse_args()
    mode, _, jobs, phase, extra = ROWS["drain"]
    ROWS["drain"] = (mode, args.drain_workers, jobs, phase, extra)
    why = unavailable()
    if why:
        raise SystemExit(why)
    gen = generator()
    rows = args.rows.split(",")
    bench = Bench(args)
    load = os.getloadavg()
    print(f"# PostgreSQL {bench.cluster.sql('SHOW server_version')[0][0]}, fsync on, "
          f"synchronous_commit on, 100-byte bodies; stalk_pool={args.pool}; "
          f"{os.cpu_count()} CPUs, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print("| system | row | jobs/s | p50 ms | commits/job | xacts/job | statements/job "
          "| WAL B/job | PG CPU µs/job | node CPU µs/job | generator CPU µs/job | cores busy |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")

    def show(name: str, row: str, r: Optional[dict]) -> None:
        print(f"| {name} | {row} | {fmt(r, 'rate', ',.0f')} | {fmt(r, 'p50', '.2f')} | "
              f"{fmt(r, 'commits', '.3f')} | {fmt(r, 'xacts', '.3f')} | "
              f"{fmt(r, 'statements', '.2f')} | {fmt(r, 'wal', ',.0f')} | "
              f"{fmt(r, 'pg_cpu', '.0f')} | {fmt(r, 'node_cpu', '.0f')} | "
              f"{fmt(r, 'gen_cpu', '.0f')} | {fmt({'c': cores_busy(r)}, 'c', '.2f')} |",
              flush=True)

    anchor: Optional[dict] = None
    shown: List[Tuple[str, str, Optional[dict]]] = []

    def anchor_first(name: str, row: str) -> None:
        nonlocal anchor
        if (anchor is None and args.insert_secs > 0 and name != "memory"
                and row in ANCHORED):
            anchor = bench.insert_loop(min(args.insert_secs, args.cap))
            show(f"one connection, {anchor['client']}", "insert-loop", anchor)
    try:
        for name in args.targets.split(","):
            if name == "graphile":
                if "latency" in rows and shutil.which("node") and shutil.which("npm"):
                    anchor_first(name, "latency")
                for row, r in bench.graphile(rows).items():
                    show(f"Graphile Worker {bench.graphile_version}", row, r)
                    shown.append((name, row, r))
                continue
            for row in rows:
                if row not in ONLY_ROWS.get(name, (row,)):
                    continue
                anchor_first(name, row)
                r = bench.ours(name, row, gen)
                show(name, row, r)
                shown.append((name, row, r))
        if anchor is not None:
            print(f"\n## Against one connection's INSERT loop ({anchor['client']}: "
                  f"{anchor['rate']:,.0f} commits/s, p50 {anchor['p50']:.2f} ms)\n")
            print("\n".join(anchor_lines(anchor, shown)) or "- no row to compare")
        print("\n## Top statements by execution time (µs per job; calls per job)\n")
        for name, row, top in bench.tops:
            print(f"- {name} {row}: " + "; ".join(
                f"{stmt} {us:.0f} µs ({n:.2f})" for stmt, n, us in top))
        if args.explain:
            bench.explain(gen)
        load = os.getloadavg()
        print(f"\n# load average at the end {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    finally:
        bench.close()


if __name__ == "__main__":
    main()
