// Graphile Worker rows for bench/pg_bench.py (run by it; not a test).
//
// Usage: node pg_bench_graphile.js MODULES_DIR CONNECTION_STRING
// MODULES_DIR holds node_modules/graphile-worker, installed by pg_bench.py
// into a temporary folder.  The worker settings are Graphile Worker's own
// performance-test settings (perfTest/graphile.config.js in its repository:
// 24 concurrent jobs, a pool of 25, localQueue 500 with a 10 ms refetch
// delay, completeJobBatchDelay 0, failJobBatchDelay 0) and its trivial task
// (perfTest/tasks/log_if_999.js).
//
// Driven over stdin/stdout, one row at a time, so that the harness can
// measure the database between READY and DONE:
//   <- "drain N" | "enqueue N CLIENTS" | "closed N CLIENTS" | "latency N"
//   -> "READY"   (jobs queued, pools connected, nothing running)
//   <- "GO"
//   -> "DONE {json}"  (jobs, secs, p50_ms; every job completed and committed)
"use strict";
const path = require("path");
const readline = require("readline");

const [modulesDir, connectionString] = process.argv.slice(2);
const gw = require(path.join(modulesDir, "node_modules", "graphile-worker"));
const { Pool } = require(path.join(modulesDir, "node_modules", "pg"));

const CONCURRENT_JOBS = 24;
const preset = {
  worker: {
    connectionString,
    concurrentJobs: CONCURRENT_JOBS,
    maxPoolSize: CONCURRENT_JOBS + 1,
    localQueue: { size: 500, refetchDelay: { durationMs: 10 } },
    completeJobBatchDelay: 0,
    failJobBatchDelay: 0,
    gracefulShutdownAbortTimeout: 2500,
  },
};
const silent = new gw.Logger(() => () => {});
const ADD = "select graphile_worker.add_job('log_if_999', json_build_object('id', $1::int))";

const lines = readline.createInterface({ input: process.stdin })[Symbol.asyncIterator]();
async function expect(word) {
  const { value, done } = await lines.next();
  if (done || value.trim() !== word) throw new Error(`expected ${word}, got ${value}`);
}

async function connected(max) {
  // A pool with all its connections open, so that no connection is made while measured.
  const pool = new Pool({ connectionString, max });
  const clients = await Promise.all(Array.from({ length: max }, () => pool.connect()));
  clients.forEach((c) => c.release());
  return pool;
}

async function emptyQueue(pool) {
  for (;;) {
    const { rows } = await pool.query("select count(*)::int n from graphile_worker.jobs");
    if (rows[0].n === 0) return;
    await new Promise((r) => setTimeout(r, 20));
  }
}

function p50(values) {
  if (!values.length) return null;
  const s = values.slice().sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
}

// Runs `body(tasks)` with a worker pool on `pool`, between READY/GO and DONE.
async function measured(pool, tasks, body) {
  console.log("READY");
  await expect("GO");
  const start = process.hrtime.bigint();
  const workerPool = tasks ? gw.runTaskList({ preset, logger: silent }, tasks, pool) : null;
  const extra = await body();
  if (workerPool) await workerPool.gracefulShutdown();
  const secs = Number(process.hrtime.bigint() - start) / 1e9;
  return { secs, ...extra };
}

async function drain(n) {
  const pool = await connected(CONCURRENT_JOBS + 1);
  const jobs = Array.from({ length: n }, (_, i) => ({ identifier: "log_if_999", payload: { id: i } }));
  await pool.query(
    "select 1 from graphile_worker.add_jobs(array(select json_populate_recordset(null::graphile_worker.job_spec, $1::json)))",
    [JSON.stringify(jobs)],
  );
  let done = 0;
  let finished;
  const all = new Promise((r) => (finished = r));
  const tasks = { log_if_999: () => { if (++done === n) finished(); } };
  const out = await measured(pool, tasks, async () => { await all; return {}; });
  await emptyQueue(pool);
  await pool.end();
  return { jobs: n, ...out };
}

async function enqueue(n, clients) {
  const pool = await connected(clients);
  let next = 0;
  const out = await measured(pool, null, async () => {
    await Promise.all(Array.from({ length: clients }, async () => {
      while (next < n) await pool.query(ADD, [next++]);
    }));
    return {};
  });
  await pool.query("delete from graphile_worker._private_jobs");
  await pool.end();
  return { jobs: n, ...out };
}

// Closed loop: each client adds a job and waits until a worker has run it.
async function closed(n, clients) {
  const pool = await connected(clients + CONCURRENT_JOBS + 1);
  const waiting = new Map();
  const started = new Map();
  const latencies = [];
  const tasks = {
    log_if_999: ({ id }) => {
      latencies.push(Number(process.hrtime.bigint() - started.get(id)) / 1e6);
      waiting.get(id)();
    },
  };
  let next = 0;
  const out = await measured(pool, tasks, async () => {
    await Promise.all(Array.from({ length: clients }, async () => {
      while (next < n) {
        const id = next++;
        const ran = new Promise((r) => waiting.set(id, r));
        started.set(id, process.hrtime.bigint());
        await pool.query(ADD, [id]);
        await ran;
      }
    }));
    return {};
  });
  await emptyQueue(pool);
  await pool.end();
  return { jobs: n, p50_ms: p50(latencies), ...out };
}

async function main() {
  for (;;) {
    const { value, done } = await lines.next();
    if (done) break;
    const [what, a, b] = value.trim().split(/\s+/);
    const n = parseInt(a, 10);
    let result;
    if (what === "drain") result = await drain(n);
    else if (what === "enqueue") result = await enqueue(n, parseInt(b, 10));
    else if (what === "closed") result = await closed(n, parseInt(b, 10));
    else if (what === "latency") result = await closed(n, 1);
    else throw new Error(`unknown row ${what}`);
    console.log("DONE " + JSON.stringify(result));
  }
}

(async () => {
  await gw.runMigrations({ connectionString, logger: silent });
  console.log("MIGRATED");
  await main();
})().catch((e) => {
  console.error(String(e && e.stack || e));
  process.exit(1);
});
