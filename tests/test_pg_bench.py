"""The PostgreSQL benchmark (bench/pgmeter.py, bench/pg_bench.py): its arithmetic without a
database; its one-connection INSERT loop, and the ratios to it, on a real cluster."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "bench"))

import pg_bench  # noqa: E402
import pgmeter  # noqa: E402


def test_parse_stat_reads_parent_and_times_after_a_command_with_spaces_and_parens():
    line = ("4242 (postgres: x (y) ) S 17 4242 4242 0 -1 4194560 100 0 0 0 "
            "250 40 7 3 20 0 1 0 123 456 78 0\n")
    assert pgmeter.parse_stat(line) == (17, 250, 40, 7, 3)


def test_process_cpu_of_this_process_grows_with_work():
    before = pgmeter.process_cpu([os.getpid()])
    deadline = before + 0.05
    while pgmeter.process_cpu([os.getpid()]) < deadline:
        sum(range(10000))
    assert pgmeter.process_cpu([os.getpid()]) >= deadline
    assert pgmeter.process_cpu([2 ** 30]) == 0.0  # a process that is gone counts nothing


def snap(xid, xacts, wal, pg, node, statements):
    return pgmeter.Snapshot(xid=xid, xacts=xacts, wal=wal, pg_cpu=pg, node_cpu=node,
                            statements=statements)


def test_per_job_divides_the_deltas_and_counts_only_statements_that_ran():
    before = snap(100, 50, 1000, 1.0, 2.0, {1: (10, 5.0, "SELECT a"), 2: (3, 1.0, "SELECT b")})
    after = snap(300, 450, 201000, 1.5, 2.2,
                 {1: (410, 45.0, "SELECT a"), 2: (3, 1.0, "SELECT b"), 3: (200, 2.0, "x")})
    figures = pgmeter.per_job(before, after, 200)
    assert figures == pytest.approx({"commits": 1.0, "xacts": 2.0, "statements": 3.0,
                                     "wal": 1000.0, "pg_cpu": 2500.0, "node_cpu": 1000.0})


def test_top_statements_names_the_engines_statements_and_orders_by_time():
    from twisted_stalk.pg.sql import statements
    named = statements("bench7")
    before = snap(0, 0, 0, 0, 0, {})
    after = snap(0, 0, 0, 0, 0, {
        # As pg_stat_statements shows them: constants (and extract's field) become $n.
        1: (100, 10.0, named["reserve"].replace("epoch", "$4").replace("\n", "\n  ")),
        2: (50, 40.0, named["delete_many"].replace(" 1 ", " $4 ")),
        3: (1, 0.5, "SELECT pg_notify($1::text, x) FROM something long enough to be cut " * 2)})
    top = pgmeter.top_statements(before, after, 100, named)
    assert [t[0] for t in top[:2]] == ["delete_many", "reserve"]
    assert top[0][1:] == pytest.approx((0.5, 400.0))
    assert top[2][0].startswith("SELECT pg_notify") and len(top[2][0]) == 48


def phase(name, jobs, rate, p50, cpu=0.0):
    return {"name": name, "jobs": jobs, "ops_per_sec": rate, "errors": 0,
            "lat_us": {"p50": p50, "p99": 2 * p50}, "client_cpu_s": cpu}


def test_merge_adds_the_generators_rates_and_cpu_and_keeps_the_worse_latency():
    results = [{"phases": [phase("put", 10, 1.0, 5),
                           phase("reserve-delete", 100, 1000.0, 900, cpu=0.001)]},
               {"phases": [phase("put", 10, 1.0, 5),
                           phase("reserve-delete", 120, 1500.0, 700, cpu=0.0012)]}]
    r = pg_bench.merge(results, "reserve-delete")
    assert r == {"jobs": 220, "rate": 2500.0, "p50": 0.9, "p99": 1.8, "errors": 0,
                 "gen_cpu": pytest.approx(10.0)}  # 2.2 ms of the generators' CPU, 220 jobs
    assert pg_bench.merge([results[0], {}], "reserve-delete") is None  # one generator failed
    unknown = [{"phases": [phase("put", 10, 1.0, 5, cpu=-1.0)]}]  # the generator could not tell
    assert pg_bench.merge(unknown, "put")["gen_cpu"] is None


def test_cores_busy_adds_the_cpu_per_job_of_every_process_times_the_rate():
    r = {"rate": 10000.0, "pg_cpu": 30.0, "node_cpu": 40.0, "gen_cpu": 15.0}
    assert pg_bench.cores_busy(r) == pytest.approx(0.85)
    assert pg_bench.cores_busy(dict(r, gen_cpu=None)) == pytest.approx(0.7)  # Graphile Worker's
    assert pg_bench.cores_busy(dict(r, rate=None)) is None  # paced (latency)
    assert pg_bench.cores_busy(None) is None


def test_anchor_lines_give_wake_20_and_latency_as_ratios_to_the_loop_and_skip_memory():
    anchor = {"rate": 1250.0, "p50": 0.4}
    lines = pg_bench.anchor_lines(anchor, [
        ("pg-1", "drain", {"rate": 5000.0, "p50": 2.0}),
        ("pg-1", "wake-20", {"rate": 1000.0, "p50": 0.9}),
        ("pg-1", "latency", {"rate": None, "p50": 1.6}),
        ("pg-2", "wake-20", None),  # the row failed
        ("memory", "wake-20", {"rate": 20000.0, "p50": 0.05})])
    assert lines == [
        "- pg-1 wake-20 / one-connection INSERT loop: 1,000 / 1,250 per second = 0.80x",
        "- pg-1 latency p50 / one INSERT commit's p50: 1.60 / 0.40 ms = 4.00x"]


@pytest.mark.parametrize("client", ["auto", "psycopg"])
def test_insert_loop_commits_one_row_per_transaction_on_a_real_cluster(pg_cluster, client):
    pg_bench.prepare_loop(pg_cluster)
    r = pg_bench.run_loop(pg_cluster, transactions=60, client=client)
    expected = "pgbench" if client == "auto" and pg_bench.pgbench_path(pg_cluster) else "psycopg"
    assert r["client"] == expected
    assert r["jobs"] == 60 and r["errors"] == 0
    assert r["rate"] > 0 and r["p50"] > 0 and r["client_cpu"] >= 0
    assert pg_cluster.sql(f"SELECT count(*), min(length(body)) FROM {pg_bench.LOOP_TABLE}") \
        == [(60, 100)]


def _run_script(tmp_path, script: str, *args: str) -> str:
    """Run ``bench/<script>`` with ``args`` on its own cluster and the C
    generator (skips without them); its output."""
    from pgcluster import unavailable
    why = unavailable()
    if why:
        pytest.skip(why)
    try:
        gen = pg_bench.generator()
    except (OSError, subprocess.CalledProcessError) as e:  # no gcc
        pytest.skip(f"cannot build the load generator: {e}")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    done = subprocess.run(
        [sys.executable, os.path.join(root, "bench", script), *args],
        capture_output=True, text=True, timeout=180, cwd=tmp_path,
        env=dict(os.environ, BSTALK_LOAD=gen, PYTHONPATH=root))
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_the_script_prints_the_loop_row_and_wake_20_as_a_ratio_to_it(tmp_path):
    """The whole script, one wake-20 row bounded to a second."""
    out = _run_script(tmp_path, "pg_bench.py", "--targets", "pg-1", "--rows", "wake-20",
                      "--cap", "1", "--insert-secs", "1", "--no-explain")
    loop = re.search(r"^\| one connection, (pgbench|psycopg) \| insert-loop \| ([\d,]+) \| "
                     r"([\d.]+) \| ([\d.]+) \|", out, re.M)
    assert loop, out
    rate = float(loop.group(2).replace(",", ""))
    assert rate > 0 and float(loop.group(3)) > 0
    assert 0.99 <= float(loop.group(4)) <= 1.01  # one commit per INSERT
    wake = re.search(r"^- pg-1 wake-20 / one-connection INSERT loop: ([\d,]+) / ([\d,]+) "
                     r"per second = ([\d.]+)x$", out, re.M)
    assert wake, out
    assert wake.group(2) == loop.group(2)
    # The generator's CPU per job and the cores the row kept busy, last.
    row = re.search(r"^\| pg-1 \| wake-20 \| .* \| ([\d,]+) \| ([\d.]+) \|$", out, re.M)
    assert row, out
    assert float(row.group(1).replace(",", "")) > 0 and 0 < float(row.group(2)) < 2 * os.cpu_count()
    assert float(wake.group(3)) == pytest.approx(
        float(wake.group(1).replace(",", "")) / rate, rel=0.01, abs=0.01)


def test_the_floor_relay_serves_wake_20_beside_the_engine_and_the_loop(tmp_path):
    """bench/pg_floor.py end to end, small: the relay answers every job of
    both rows (the generator fails a run that loses or garbles one), and the
    ratios below the table are those of its rows."""
    out = _run_script(tmp_path, "pg_floor.py", "--jobs", "300", "--insert-secs", "1")
    rates = {(name, row): float(rate.replace(",", "") or 0) for name, row, rate in re.findall(
        r"^\| 1 \| (\S+) \| (\S*) \| ([\d,]*) \| [\d.]+ \|", out, re.M)}
    assert set(rates) == {("insert-loop", ""), ("relay", "wake-20"), ("relay", "latency"),
                          ("engine", "wake-20"), ("engine", "latency")}, out
    assert all(rates[k] > 0 for k in rates if k[1] != "latency")
    ratio = re.search(r"relay ([\d.]+)x, engine ([\d.]+)x; engine / relay ([\d.]+)x", out)
    assert ratio, out
    assert float(ratio.group(1)) == pytest.approx(
        rates["relay", "wake-20"] / rates["insert-loop", ""], abs=0.01)
    assert float(ratio.group(3)) == pytest.approx(
        rates["engine", "wake-20"] / rates["relay", "wake-20"], abs=0.01)


def test_the_ab_pair_runs_both_engine_builds_through_the_shared_driver(tmp_path):
    """bench/pg_compare.py end to end, small: both sides are ``stalkd
    --engine`` on their own schema, and the side-by-side driver's table has a row
    with both sides' rates for each scenario asked."""
    out = _run_script(tmp_path, "pg_compare.py", "--rounds", "1", "--warmup", "0",
                      "--scenarios", "put-seq,mixed-50c", "--scale", "0.02", "--retries", "0")
    assert "stalk_schema=side_a" in out and "stalk_schema=side_b" in out, out
    for scenario in ("put-seq", "mixed-50c"):
        row = re.search(rf"^{scenario} +\S+ +100 +([\d,]+) +([\d,]+) +([\d.]+) ", out, re.M)
        assert row, out
        assert all(float(row.group(i).replace(",", "")) > 0 for i in (1, 2, 3))


def test_the_relay_drains_the_backlog_with_batched_deletes_that_take_the_next_jobs(tmp_path):
    """pg_bench's ``relay`` target in the drain row (bench/pg_floor.py
    ``--drain``), bounded to a second: every job put is reserved and deleted
    (the generator fails a run that loses or garbles one, and the row then has
    no rate).  (Its per-job counts need the whole backlog: with the cap the
    boundary between put and drain is never reached.)"""
    out = _run_script(tmp_path, "pg_bench.py", "--targets", "relay", "--rows", "drain",
                      "--cap", "1", "--no-explain")
    row = re.search(r"^\| relay \| drain \| ([\d,]+) \| [\d.]+ \|", out, re.M)
    assert row, out
    assert float(row.group(1).replace(",", "")) > 0


def test_the_relay_runs_the_closed_loop_batched_and_on_the_engines_job_record(tmp_path):
    """pg_bench's ``relay`` and ``relay-record`` targets in the closed row
    (bench/pg_floor.py ``--closed``, ``--record``), bounded to a second each:
    every job is put, reserved by its putter and deleted (the generator fails
    a run that loses or garbles one, and the row then has no rate); puts and
    deletes go in batches (fewer statements than jobs), and ``relay-record``
    writes each job as the engine's wider row with its deadline's index entry
    (more WAL per job than the relay's four-column table)."""
    out = _run_script(tmp_path, "pg_bench.py", "--targets", "relay,relay-record",
                      "--rows", "closed", "--cap", "1", "--no-explain")
    figures = {}
    for name in ("relay", "relay-record"):
        row = re.search(rf"^\| {name} \| closed \| ([\d,]+) \| [\d.]+ \| [\d.]+ \| [\d.]+ \| "
                        r"([\d.]+) \| ([\d,]+) \|", out, re.M)
        assert row, out
        rate, statements, wal = (float(row.group(i).replace(",", "")) for i in (1, 2, 3))
        assert rate > 0 and 0 < statements < 1, out
        figures[name] = wal
    assert figures["relay-record"] > 1.2 * figures["relay"], out
