#!/usr/bin/env python3
"""The floor under any Python node of the PostgreSQL engine: a relay that does
the durable work of ``wake-20`` and nothing else.

What it is for: ``bench/pg_bench.py``'s wake-20 row (20 workers waiting in
reserve, one producer keeping one put in flight) measures one put's round
trip through a node, which the issue's target puts at 0.6x of a one-connection
loop of one-row INSERT commits.  This relay is the cheapest node that keeps
the same guarantees on that path: it speaks just enough beanstalk for the
load generator (``use``, ``watch``, ``ignore``, ``put``, ``reserve``,
``delete``; one tube), and per job it commits what the engine commits, no
more: the put's INSERT (the job goes in already reserved by a waiting
worker, as the engine's hand-off does) before ``INSERTED``/``RESERVED``, the
delete's DELETE before ``DELETED``.  No batching, no fencing, no timers, no
statistics, no Deferreds: the same reactor (``server/reactor.py``'s lean
epoll loop) and the same libpq driver as the engine (``pg/driver.py``, whose
results come back through one Deferred per statement: the driver's only
per-statement cost left in).  So the relay's jobs/s is what a node on
CPython could reach on this machine with one put in flight, whatever its
design; the engine's distance to it is what a leaner engine could gain.

The closed loop's floor is the relay with ``--closed`` (``ClosedBatch``): each
client puts a job, reserves it and deletes it; the puts of one reactor turn are
one INSERT, each job going in reserved by its putter (the engine's hand-off of
a put to its own session's next reserve), the reserve is answered from it
without a statement, and the deletes of a turn are one DELETE; one batch of
each kind out at a time (the engine's ``Batcher``).  No ready job exists in that
row, so the relay skips the engine's check that none is as good (priorities
stay global there): that check is part of the engine's work, not the floor's.
With ``--record`` as well, the jobs are rows of the engine's own job table (a
schema made by ``pg/schema.py``: every column beanstalk keeps of a job, and
the index by which any node finds a reservation's deadline), written as the
engine writes a handed put: the durable work of the closed loop for any node
that keeps beanstalk's job record in PostgreSQL.

The drain's floor is the relay with ``--drain`` (``DrainBatch``): the
backlog's puts make ready jobs, and per batch of deletes it runs one
statement, as the engine's ``delete_many_taking`` does, that deletes them and
takes as many of the best ready jobs (``FOR UPDATE SKIP LOCKED``) for the
workers' next reserves, which it answers without a statement; one batch out
at a time (the engine's ``Batcher``).  ``bench/pg_bench.py --targets relay``
runs it in the drain row beside the engine and Graphile Worker.

    python bench/pg_floor.py                 # relay, engine node and pgbench loop, one run
    python bench/pg_floor.py --rounds 3

Prints one table: jobs/s, the median put -> RESERVED latency, PostgreSQL CPU
and node CPU per job, for the INSERT loop, and for the relay and one engine
node their wake-20 and latency rows (pg_bench's: one worker waiting, 100 puts
a second), all on one throwaway cluster (tests/pgcluster.py, the settings of
pg_bench).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections import deque
from typing import Any, Callable, Deque, Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.dirname(HERE), HERE, os.path.join(os.path.dirname(HERE), "tests")]

SCHEMA = """
CREATE TABLE IF NOT EXISTS floor_jobs (
    id bigserial PRIMARY KEY, state smallint NOT NULL, owner int, body bytea NOT NULL)"""
STATEMENTS = {
    # a put handed to waiting worker $2 (0: none, the job stays ready)
    "put": "INSERT INTO floor_jobs (state, owner, body) "
           "VALUES (CASE WHEN $2::int > 0 THEN 1 ELSE 0 END, NULLIF($2::int, 0), $1::bytea) "
           "RETURNING id",
    # a ready job (the relay knows which: it put them) to worker $2
    "take": "UPDATE floor_jobs SET state = 1, owner = $2::int WHERE id = $1::bigint",
    "delete": "DELETE FROM floor_jobs WHERE id = $1::bigint RETURNING id",
    # the closed loop (--closed): a batch of puts, each reserved by its putter
    # ($1, the relay's numbers of the putting connections; $3 their tubes, which
    # this table does not keep), and a batch of deletes
    "put_own": "INSERT INTO floor_jobs (state, owner, body) "
               "SELECT 1, u.owner, u.body "
               "FROM unnest($1::int[], $2::bytea[], $3::text[]) AS u(owner, body, tube) "
               "RETURNING id, owner",
    "delete_many": "DELETE FROM floor_jobs WHERE id = ANY($1::bigint[]) RETURNING id",
    # the drain (--drain): the best ready job to worker $1, found by the index
    "take_best": "UPDATE floor_jobs SET state = 1, owner = $1::int WHERE id = ("
                 "SELECT id FROM floor_jobs WHERE state = 0 ORDER BY id LIMIT 1 "
                 "FOR UPDATE SKIP LOCKED) RETURNING id, body",
    # a batch of deletes ($1) that takes as many best ready jobs for the
    # workers that will reserve next ($2 of them), as the engine's
    # delete_many_taking does: deleted rows have no body
    "delete_taking": "WITH gone AS (DELETE FROM floor_jobs WHERE id = ANY($1::bigint[]) "
                     "RETURNING id), took AS (UPDATE floor_jobs SET state = 1, owner = 0 "
                     "WHERE id IN (SELECT id FROM floor_jobs WHERE state = 0 ORDER BY id "
                     "LIMIT $2::int FOR UPDATE SKIP LOCKED) RETURNING id, body) "
                     "SELECT id, NULL::bytea FROM gone UNION ALL SELECT id, body FROM took",
}
#: ``--closed --record``: the closed loop's puts and deletes on the engine's
#: own job table (schema ``floor_record``, made by pg/schema.py), each put
#: written as the engine writes a handed one (reserved by this node, 1, and
#: its putter; its TTR's deadline set).
RECORD = "floor_record"
RECORD_STATEMENTS = {
    "put_own": f"""INSERT INTO "{RECORD}".jobs (id, tube, state, pri, delay, ttr, created_at,
                   deadline_at, owner_node, owner_conn, reserves, body)
               SELECT nextval('"{RECORD}".job_ids'), u.tube, 1, 1024, 0, 120, c.now,
                      c.now + 120, 1, u.owner, 1, u.body
               FROM unnest($1::int[], $2::bytea[], $3::text[]) AS u(owner, body, tube),
                    (SELECT extract(epoch FROM clock_timestamp())::float8 AS now) c
               RETURNING id, owner_conn""",
    "delete_many": f'DELETE FROM "{RECORD}".jobs WHERE id = ANY($1::bigint[]) RETURNING id',
}


def statements(record: bool = False) -> Dict[str, str]:
    """The relay's prepared statements, name -> SQL (``record``: the closed
    loop's on the engine's job table, :data:`RECORD_STATEMENTS`)."""
    return dict(STATEMENTS, **RECORD_STATEMENTS) if record else STATEMENTS


#: The index the drain's takes read (the engine's ``jobs_ready`` is partial too).
DRAIN_INDEX = "CREATE INDEX IF NOT EXISTS floor_ready ON floor_jobs (id) WHERE state = 0"


#: The rows, as bench/pg_bench.py's: (name, waiting workers, jobs (0: --jobs),
#: the producer's pace).
ROWS = [("wake-20", 20, 0, []), ("latency", 1, 500, ["--rate", "100"])]

#: The replies that need no statement (``%s``: the command's argument).
IMMEDIATE = {b"list-tube-used": b"USING default\r\n",
             b"watch": b"WATCHING 2\r\n", b"ignore": b"WATCHING 1\r\n"}


def serve(port: int, dsn: str, drain: bool = False, closed: bool = False,
          record: bool = False) -> None:
    """Run the relay on 127.0.0.1:``port`` until killed (``drain``: see
    :class:`DrainBatch`; ``closed``: :class:`ClosedBatch`, on the engine's job
    table with ``record``)."""
    from twisted_stalk.server import reactor as lean
    lean.install()
    from twisted.internet import protocol, reactor
    from twisted_stalk.pg.driver import PgConnection
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as setup:
        setup.execute(SCHEMA)
        setup.execute(DRAIN_INDEX)
        setup.execute("TRUNCATE floor_jobs RESTART IDENTITY")
    session = None
    if closed and record:  # and the engine's session settings (sql.SESSION): its plans
        from twisted_stalk.pg.sql import SESSION as session
        from twisted_stalk.pg.schema import migrate
        migrate(dsn, RECORD)
        with psycopg.connect(dsn, autocommit=True) as setup:
            setup.execute(f'TRUNCATE "{RECORD}".jobs')

    conns: List[PgConnection] = []
    waiting: Deque["Relay"] = deque()
    ready: Deque[tuple] = deque()  # (id, body) of jobs put while no worker waited

    def execute(name: str, params: List[Any]):
        formats = [1, 0] if name == "put" else None  # the body in binary
        return min(conns, key=lambda c: c.load).execute(name, params, formats)

    class Relay(protocol.Protocol):
        def __init__(self) -> None:
            self.buf = b""
            self.number = 0
            self.tube = b"default"
            self.own: Optional[tuple] = None  # (id, body): its put's job, for its reserve
            self.replies: Deque[List[Optional[bytes]]] = deque()  # in command order

        def slot(self) -> List[Optional[bytes]]:
            """A place in the reply order; fill it with :meth:`answer`."""
            s: List[Optional[bytes]] = [None]
            self.replies.append(s)
            return s

        def answer(self, s: List[Optional[bytes]], reply: bytes) -> None:
            s[0] = reply
            out = []
            while self.replies and self.replies[0][0] is not None:
                out.append(self.replies.popleft()[0])
            self.transport.write(b"".join(out))

        def connectionMade(self) -> None:
            self.transport.setTcpNoDelay(True)  # as the server does
            Relay.count = getattr(Relay, "count", 0) + 1
            self.number = Relay.count

        def connectionLost(self, reason: Any) -> None:
            if self in waiting:
                waiting.remove(self)

        def dataReceived(self, data: bytes) -> None:
            self.buf += data
            while True:
                end = self.buf.find(b"\r\n")
                if end < 0:
                    return
                line = self.buf[:end]
                if line.startswith(b"put "):
                    size = int(line.rsplit(b" ", 1)[1])
                    if len(self.buf) < end + 2 + size + 2:
                        return
                    body = self.buf[end + 2:end + 2 + size]
                    self.buf = self.buf[end + 4 + size:]
                    self.put(body)
                    continue
                self.buf = self.buf[end + 2:]
                word, _, rest = line.partition(b" ")
                if word == b"reserve":
                    self.reserve()
                elif word == b"use":
                    self.tube = rest
                    self.answer(self.slot(), b"USING %s\r\n" % rest)
                elif word == b"delete" and (drain or closed):
                    batch.add(int(rest), self, self.slot())
                elif word == b"delete":
                    s = self.slot()
                    execute("delete", [int(rest)]).addCallback(lambda rows, s=s: self.answer(
                        s, b"DELETED\r\n" if rows else b"NOT_FOUND\r\n"))
                else:
                    self.answer(self.slot(), IMMEDIATE.get(word, b"UNKNOWN_COMMAND\r\n")
                                .replace(b"%s", rest))

        def put(self, body: bytes) -> None:
            if closed:
                batch.put(self, body, self.slot())
                return
            if drain:  # the backlog: a ready job, which the takes find by the index
                s = self.slot()
                execute("put", [body, 0]).addCallback(
                    lambda rows: self.answer(s, b"INSERTED %d\r\n" % rows[0][0]))
                return
            worker = waiting.popleft() if waiting else None
            s = self.slot()

            def done(rows: Any) -> None:
                job = rows[0][0]
                self.answer(s, b"INSERTED %d\r\n" % job)
                if worker is not None:
                    worker.answer(worker.waits,
                                  b"RESERVED %d %d\r\n%s\r\n" % (job, len(body), body))
                else:
                    ready.append((job, body))
                    if waiting:
                        waiting.popleft().take()
            execute("put", [body, worker.number if worker else 0]).addCallback(done)

        def reserve(self) -> None:
            self.waits = self.slot()
            if self.own is not None:  # --closed: its own put's job, already reserved by it
                job, body = self.own
                self.own = None
                self.answer(self.waits, b"RESERVED %d %d\r\n%s\r\n" % (job, len(body), body))
            elif drain:
                batch.reserve(self)
            elif ready:
                self.take()
            else:
                waiting.append(self)

        def take(self) -> None:
            job, body = ready.popleft()
            execute("take", [job, self.number]).addCallback(lambda _: self.answer(
                self.waits, b"RESERVED %d %d\r\n%s\r\n" % (job, len(body), body)))

    batch: Any = (DrainBatch(reactor, execute) if drain
                  else ClosedBatch(reactor, execute) if closed else None)

    def up(_: Any) -> None:
        reactor.listenTCP(port, protocol.Factory.forProtocol(Relay), interface="127.0.0.1")
        print(f"floor: listening on {port}", flush=True)

    from twisted.internet import defer
    for _ in range(4):
        conns.append(PgConnection(reactor, dsn, statements(closed and record),
                                  settings=session))
    defer.gatherResults([c.connect() for c in conns]).addCallback(up)
    reactor.run()


class DrainBatch:
    """The drain's durable work, as the engine does it and no more (``--drain``).

    Deletes of one reactor turn share one statement through the engine's own
    batcher (``pg/batch.py``: group commit, one statement out at a time), and
    each batch takes as many of the best ready jobs as it deletes, for the
    workers that will reserve next; a reserve is answered from those without
    a statement, or else takes the best ready job itself (``take_best``).
    ``DELETED`` goes out once the statement committed, as the engine's does."""

    def __init__(self, reactor: Any, execute: Callable[[str, List[Any]], Any]) -> None:
        from twisted_stalk.pg.batch import Batcher, int_array
        self.execute = execute
        self.int_array = int_array
        self.deletes = Batcher(reactor, self._delete_taking, lambda _: b"INTERNAL_ERROR\r\n")
        self.taken: Deque[tuple] = deque()  # (id, body) taken, not yet handed out
        self.asking: Deque[Any] = deque()  # reserves that found nothing to take

    def add(self, job: int, relay: Any, slot: List[Optional[bytes]]) -> None:
        self.deletes.add(job, lambda reply: relay.answer(slot, reply))

    def _delete_taking(self, jobs: List[int]) -> Any:
        def done(rows: Any) -> List[bytes]:
            gone = set()
            for job, body in rows:
                if body is None:
                    gone.add(job)
                else:
                    self.taken.append((job, body))
            while self.asking and self.taken:
                self.hand(self.asking.popleft())
            return [b"DELETED\r\n" if job in gone else b"NOT_FOUND\r\n" for job in jobs]
        return self.execute("delete_taking", [self.int_array(jobs), len(jobs)]).addCallback(done)

    def reserve(self, relay: Any) -> None:
        if self.taken:
            self.hand(relay)
            return

        def took(rows: Any) -> None:
            if rows:
                job, body = rows[0]
                relay.answer(relay.waits, b"RESERVED %d %d\r\n%s\r\n" % (job, len(body), body))
            elif self.taken:
                self.hand(relay)
            else:  # what is left is in a delete batch's take
                self.asking.append(relay)
        self.execute("take_best", [relay.number]).addCallback(took)

    def hand(self, relay: Any) -> None:
        job, body = self.taken.popleft()
        relay.answer(relay.waits, b"RESERVED %d %d\r\n%s\r\n" % (job, len(body), body))


class ClosedBatch:
    """The closed loop's durable work, as the engine does it and no more (``--closed``).

    Puts of one reactor turn are one INSERT, each job reserved by its putter
    (whose next reserve the relay answers from it without a statement), and
    deletes of a turn one DELETE, each kind through the engine's own batcher
    (``pg/batch.py``: group commit, one statement of each kind out at a time).
    ``INSERTED`` and ``DELETED`` go out once their statement committed."""

    def __init__(self, reactor: Any, execute: Callable[[str, List[Any]], Any]) -> None:
        from twisted_stalk.pg.batch import Batcher, bytea_array, int_array, text_array
        self.execute = execute
        self.int_array = int_array
        self.bytea_array = bytea_array
        self.text_array = text_array
        failed = lambda _: b"INTERNAL_ERROR\r\n"  # noqa: E731
        self.puts = Batcher(reactor, self._put_own, failed)
        self.deletes = Batcher(reactor, self._delete_many, failed)

    def put(self, relay: Any, body: bytes, slot: List[Optional[bytes]]) -> None:
        def answer(job: Any) -> None:
            if job.__class__ is int:
                relay.own = (job, body)
                relay.answer(slot, b"INSERTED %d\r\n" % job)
            else:
                relay.answer(slot, job)
        self.puts.add((relay.number, body, relay.tube), answer)

    def add(self, job: int, relay: Any, slot: List[Optional[bytes]]) -> None:
        self.deletes.add(job, lambda reply: relay.answer(slot, reply))

    def _put_own(self, items: List[tuple]) -> Any:
        def done(rows: Any) -> List[int]:
            ids = {owner: job for job, owner in rows}
            return [ids[owner] for owner, _, _ in items]
        owners, bodies, tubes = zip(*items)
        return self.execute("put_own", [self.int_array(list(owners)),
                                        self.bytea_array(list(bodies)),
                                        self.text_array(list(tubes))]).addCallback(done)

    def _delete_many(self, jobs: List[int]) -> Any:
        def done(rows: Any) -> List[bytes]:
            gone = {job for job, in rows}
            return [b"DELETED\r\n" if job in gone else b"NOT_FOUND\r\n" for job in jobs]
        return self.execute("delete_many", [self.int_array(jobs)]).addCallback(done)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--dsn", help=argparse.SUPPRESS)
    ap.add_argument("--drain", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--closed", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--record", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=5000)
    ap.add_argument("--insert-secs", type=float, default=3.0)
    args = ap.parse_args()
    if args.record and not args.closed:
        ap.error("--record is the closed loop's (--closed)")
    if args.serve:
        serve(args.serve, args.dsn, args.drain, args.closed, args.record)
        return
    import pg_bench
    import pgmeter
    from pgcluster import Cluster
    import psycopg
    import twisted_stalk.pg.driver  # noqa: F401 (on PyPy it fits psycopg's ctypes binding)
    cluster = Cluster(settings=[
        "shared_buffers=256MB", "max_wal_size=2GB", "fsync=on", "synchronous_commit=on",
        "shared_preload_libraries=pg_stat_statements"]).init().start()
    rows: List[tuple] = []
    try:
        conn = psycopg.connect(cluster.dsn(), autocommit=True)
        conn.execute(f"{pgmeter.MARK} CREATE EXTENSION pg_stat_statements")
        conn.execute(SCHEMA)
        gen = pg_bench.generator()
        for rnd in range(args.rounds):
            pg_bench.prepare_loop(cluster)
            before = pgmeter.take(conn, cluster.proc.pid, [])
            r = pg_bench.run_loop(cluster, seconds=args.insert_secs)
            after = pgmeter.take(conn, cluster.proc.pid, [])
            per = pgmeter.per_job(before, after, r["jobs"])
            rows.append((rnd, "insert-loop", "", r["rate"], r["p50"], per["pg_cpu"],
                         1e6 * r["client_cpu"] / r["jobs"]))
            for name in ("relay", "engine"):
                port = pg_bench.free_port()
                if name == "relay":
                    argv = [sys.executable, os.path.abspath(__file__), "--serve", str(port),
                            "--dsn", cluster.dsn()]
                else:
                    argv = [sys.executable, "-m", "twisted_stalk_cli.stalkd", "-l", "127.0.0.1",
                            "-p", str(port), "--engine",
                            cluster.dsn() + f" stalk_schema=floor{rnd} stalk_pool=4"]
                node = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                        env=dict(os.environ, PYTHONPATH=os.path.dirname(HERE)))
                try:
                    pg_bench.wait_listening(port, node)
                    time.sleep(1.0)
                    before = pgmeter.take(conn, cluster.proc.pid, [node.pid])
                    for row, workers, jobs, paced in ROWS:
                        before = pgmeter.take(conn, cluster.proc.pid, [node.pid])
                        out = subprocess.run(
                            [gen, "--addr", f"127.0.0.1:{port}", "--mode", "wait-wake",
                             "--conns", str(workers), "--ops", str(jobs or args.jobs),
                             "--size", "100", "--quiet", "--tube", row] + paced,
                            capture_output=True, text=True, timeout=300)
                        after = pgmeter.take(conn, cluster.proc.pid, [node.pid])
                        report = json.loads(out.stdout.strip().splitlines()[-1])
                        if not report["ok"] or report["errors"]:
                            raise SystemExit(f"{name} {row}: the generator failed: "
                                             f"{out.stdout[-800:]} {out.stderr[-800:]}")
                        phase = report["phases"][-1]
                        per = pgmeter.per_job(before, after, phase["jobs"])
                        rows.append((rnd, name, row, phase["ops_per_sec"],
                                     phase["lat_us"]["p50"] / 1000, per["pg_cpu"],
                                     per["node_cpu"]))
                finally:
                    node.terminate()
                    node.wait()
    finally:
        cluster.stop()
    print(f"# {os.cpu_count()} CPUs, load average {' '.join('%.2f' % x for x in os.getloadavg())}")
    print("| round | system | row | jobs/s | p50 ms | PG CPU µs/job | node CPU µs/job |")
    print("| ---: | --- | --- | ---: | ---: | ---: | ---: |")
    for rnd, name, row, rate, p50, pg, node in rows:
        shown = "" if row == "latency" else f"{rate:,.0f}"
        print(f"| {rnd + 1} | {name} | {row} | {shown} | {p50:.2f} | {pg:,.0f} | {node:,.0f} |")
    print()
    for rnd in range(args.rounds):
        rate = {name: r for n, name, row, r, *_ in rows if n == rnd and row in ("", "wake-20")}
        print(f"- round {rnd + 1}: wake-20 / INSERT loop: relay {rate['relay'] / rate['insert-loop']:.2f}x,"
              f" engine {rate['engine'] / rate['insert-loop']:.2f}x;"
              f" engine / relay {rate['engine'] / rate['relay']:.2f}x")


if __name__ == "__main__":
    main()
