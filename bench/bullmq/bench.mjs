// BullMQ throughput / latency benchmark, the BullMQ side of the wasmgear
// comparison. Run it through run.sh, which installs the pinned bullmq/ioredis
// outside the repo and runs this file from there.
//
// Env:
//   REDIS_URL      redis://[user:pass@]host:port[/db]   (required; rediss:// => TLS)
//   JOBS           jobs for add_bulk and each drain (default 50000)
//   SANDBOX_JOBS   jobs per sandbox_process / sandbox_threads drain (default = JOBS)
//   SINGLE_N       sequential queue.add calls for add_single (default 5000)
//   LAT_N          pickup-latency samples (default 300)
//   CONCURRENCIES  worker concurrencies for drain (default "1,10,100")
//   MODES          drain modes (default "inprocess,sandbox_process,sandbox_threads")
//   FLOW_CHILDREN  children of the flows' parent (default 1000)
//   FLOW_RUNS      flows submitted, and flows run end to end (default 5; QUICK: 2)
//   QUICK=1        smoke-test defaults: JOBS=2000, SINGLE_N=500, LAT_N=50
//
// Output: one JSON object on stdout. Everything else goes to stderr.

import { Queue, Worker, QueueEvents, FlowProducer } from 'bullmq';
import IORedis from 'ioredis';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';

// Keep stdout clean for the final JSON, whatever a library prints.
const writeStdout = process.stdout.write.bind(process.stdout);
console.log = (...a) => console.error(...a);
console.info = (...a) => console.error(...a);
const log = (...a) => console.error('[bullmq-bench]', ...a);
// BullMQ pipes every sandbox child's stdout/stderr into ours; with 100 children
// that trips Node's MaxListeners warning (harmless) on every drain.
process.stdout.setMaxListeners(0);
process.stderr.setMaxListeners(0);

const require = createRequire(import.meta.url);
const BULLMQ_VERSION = require('bullmq/package.json').version;
const HERE = path.dirname(fileURLToPath(import.meta.url));
const PROCESSOR_FILE = path.join(HERE, 'processor.mjs');

const QUICK = process.env.QUICK === '1';
const envInt = (k, dflt) => {
  const v = process.env[k];
  if (v === undefined || v === '') return dflt;
  const n = Number.parseInt(v, 10);
  if (!Number.isFinite(n) || n <= 0) throw new Error(`bad ${k}=${v}`);
  return n;
};
const JOBS = envInt('JOBS', QUICK ? 2000 : 50000);
const SANDBOX_JOBS = envInt('SANDBOX_JOBS', JOBS);
const SINGLE_N = envInt('SINGLE_N', QUICK ? 500 : 5000);
const LAT_N = envInt('LAT_N', QUICK ? 50 : 300);
const CONCURRENCIES = (process.env.CONCURRENCIES || '1,10,100')
  .split(',').map((s) => Number.parseInt(s.trim(), 10)).filter((n) => n > 0);
const MODES = (process.env.MODES || 'inprocess,sandbox_process,sandbox_threads')
  .split(',').map((s) => s.trim()).filter(Boolean);
const FLOW_CHILDREN = envInt('FLOW_CHILDREN', 1000);
const FLOW_RUNS = envInt('FLOW_RUNS', QUICK ? 2 : 5);
const BULK_CHUNK = 1000;
const STALL_TIMEOUT_MS = 60_000; // abort a drain that makes no progress for this long

function connectionFromUrl(raw) {
  if (!raw) throw new Error('REDIS_URL is not set');
  const u = new URL(raw);
  if (u.protocol !== 'redis:' && u.protocol !== 'rediss:') {
    throw new Error(`unsupported REDIS_URL scheme ${u.protocol}`);
  }
  const c = {
    host: u.hostname || '127.0.0.1',
    port: u.port ? Number(u.port) : 6379,
    maxRetriesPerRequest: null, // required by BullMQ workers
  };
  if (u.username) c.username = decodeURIComponent(u.username);
  if (u.password) c.password = decodeURIComponent(u.password);
  const db = u.pathname.replace(/^\//, '');
  if (db) c.db = Number(db);
  if (u.protocol === 'rediss:') c.tls = {};
  return c;
}

const connection = connectionFromUrl(process.env.REDIS_URL);
// Unique key prefix per run so parallel/leftover runs never collide.
const PREFIX = `bmqbench-${process.pid}-${Date.now().toString(36)}`;
const JOB_OPTS = { removeOnComplete: true, removeOnFail: true };

const round = (x, d = 1) => Math.round(x * 10 ** d) / 10 ** d;

function makeQueue(name) {
  return new Queue(name, { connection, prefix: PREFIX, defaultJobOptions: JOB_OPTS });
}

async function destroyQueue(q) {
  try {
    await q.obliterate({ force: true });
  } catch (e) {
    log(`obliterate ${q.name} failed: ${e.message}`);
  }
  await q.close();
}

async function addBulk(q, n) {
  for (let i = 0; i < n; i += BULK_CHUNK) {
    const m = Math.min(BULK_CHUNK, n - i);
    const batch = new Array(m);
    for (let j = 0; j < m; j++) batch[j] = { name: 'noop', data: { i: i + j } };
    await q.addBulk(batch);
  }
}

async function benchAddSingle() {
  const q = makeQueue('add_single');
  await q.waitUntilReady();
  try {
    const t0 = performance.now();
    for (let i = 0; i < SINGLE_N; i++) await q.add('noop', { i });
    const s = (performance.now() - t0) / 1000;
    const rate = SINGLE_N / s;
    log(`add_single: ${SINGLE_N} jobs in ${s.toFixed(2)}s = ${rate.toFixed(0)} jobs/s`);
    return rate;
  } finally {
    await destroyQueue(q);
  }
}

async function benchAddBulk() {
  const q = makeQueue('add_bulk');
  await q.waitUntilReady();
  try {
    const t0 = performance.now();
    await addBulk(q, JOBS);
    const s = (performance.now() - t0) / 1000;
    const rate = JOBS / s;
    log(`add_bulk: ${JOBS} jobs (chunks of ${BULK_CHUNK}) in ${s.toFixed(2)}s = ${rate.toFixed(0)} jobs/s`);
    return rate;
  } finally {
    await destroyQueue(q);
  }
}

function childCount(worker) {
  // Internal, read-only peek at the sandbox ChildPool (retained + free).
  const pool = worker.childPool;
  if (!pool) return null;
  try {
    return Object.keys(pool.retained || {}).length + pool.getAllFree().length;
  } catch {
    return null;
  }
}

async function benchDrain(mode, concurrency) {
  const jobs = mode === 'inprocess' ? JOBS : SANDBOX_JOBS;
  const q = makeQueue(`drain_${mode}_c${concurrency}`);
  await q.waitUntilReady();
  let worker;
  try {
    await addBulk(q, jobs); // not timed
    let processor;
    const sandbox = {};
    if (mode === 'inprocess') {
      processor = async () => {};
    } else if (mode === 'sandbox_process') {
      processor = PROCESSOR_FILE;
      sandbox.useWorkerThreads = false;
    } else if (mode === 'sandbox_threads') {
      processor = PROCESSOR_FILE;
      sandbox.useWorkerThreads = true;
    } else {
      throw new Error(`unknown mode ${mode}`);
    }
    worker = new Worker(q.name, processor, {
      connection,
      prefix: PREFIX,
      autorun: false,
      concurrency,
      removeOnComplete: { count: 0 },
      removeOnFail: { count: 0 },
      ...sandbox,
    });
    worker.on('error', (e) => log(`worker error (${mode} c${concurrency}): ${e.message}`));
    await worker.waitUntilReady();

    let completed = 0;
    let failed = 0;
    let maxChildren = 0;
    let lastProgress = performance.now();
    let watchdog;
    const done = new Promise((resolve, reject) => {
      const finish = () => {
        if (completed + failed >= jobs) resolve();
      };
      worker.on('completed', () => {
        completed++;
        lastProgress = performance.now();
        finish();
      });
      worker.on('failed', (_job, err) => {
        if (failed++ === 0) log(`first failure (${mode} c${concurrency}): ${err && err.message}`);
        lastProgress = performance.now();
        finish();
      });
      watchdog = setInterval(() => {
        if (mode !== 'inprocess') maxChildren = Math.max(maxChildren, childCount(worker) ?? 0);
        if (performance.now() - lastProgress > STALL_TIMEOUT_MS) {
          clearInterval(watchdog);
          reject(new Error(`drain ${mode} c${concurrency} stalled at ${completed}+${failed}/${jobs}`));
        }
      }, 250);
    });

    const t0 = performance.now();
    const running = worker.run().catch((e) => log(`worker.run rejected: ${e.message}`));
    try {
      await done;
    } finally {
      clearInterval(watchdog);
    }
    const s = (performance.now() - t0) / 1000;
    if (mode !== 'inprocess') maxChildren = Math.max(maxChildren, childCount(worker) ?? 0);

    const rate = jobs / s;
    const entry = { mode, concurrency, jobs, per_s: round(rate) };
    if (mode !== 'inprocess') entry.children = maxChildren;
    if (failed) entry.failed = failed;
    log(`drain ${mode} c=${concurrency}: ${jobs} jobs in ${s.toFixed(2)}s = ${rate.toFixed(0)} jobs/s` +
      (mode !== 'inprocess' ? `, ${maxChildren} ${sandbox.useWorkerThreads ? 'worker threads' : 'child processes'}` : '') +
      (failed ? `, ${failed} FAILED` : ''));
    await worker.close();
    await running;
    worker = undefined;
    return entry;
  } finally {
    if (worker) await worker.close(true).catch(() => {});
    await destroyQueue(q);
  }
}

function pct(sorted, p) {
  // nearest-rank percentile
  const idx = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[idx];
}

async function benchLatency() {
  const q = makeQueue('latency');
  await q.waitUntilReady();
  const entry = new Map(); // job.id -> hrtime at processor entry
  const resultAt = new Map(); // job.id -> hrtime at producer-side 'completed'
  const worker = new Worker(q.name, async (job) => {
    entry.set(job.id, process.hrtime.bigint());
  }, {
    connection,
    prefix: PREFIX,
    concurrency: 1,
    removeOnComplete: { count: 0 },
    removeOnFail: { count: 0 },
  });
  worker.on('error', (e) => log(`latency worker error: ${e.message}`));
  const qe = new QueueEvents(q.name, { connection, prefix: PREFIX });
  qe.on('error', (e) => log(`queue events error: ${e.message}`));
  let allDone;
  const allDonePromise = new Promise((r) => { allDone = r; });
  qe.on('completed', ({ jobId }) => {
    resultAt.set(jobId, process.hrtime.bigint());
    if (resultAt.size >= LAT_N) allDone();
  });
  try {
    await Promise.all([worker.waitUntilReady(), qe.waitUntilReady()]);
    await sleep(500); // let the worker settle into its blocking wait (idle)

    const sentAt = new Map(); // job.id -> hrtime right before add()
    for (let i = 0; i < LAT_N; i++) {
      const t = process.hrtime.bigint();
      const job = await q.add('lat', { i });
      sentAt.set(job.id, t);
      await sleep(5);
    }
    await Promise.race([
      allDonePromise,
      sleep(30_000).then(() => log(`latency: timed out, got ${resultAt.size}/${LAT_N} completions`)),
    ]);

    const pick = [];
    const res = [];
    for (const [id, t0] of sentAt) {
      const e = entry.get(id);
      const r = resultAt.get(id);
      if (e !== undefined) pick.push(Number(e - t0) / 1e6);
      if (r !== undefined) res.push(Number(r - t0) / 1e6);
    }
    pick.sort((a, b) => a - b);
    res.sort((a, b) => a - b);
    const out = {
      pickup_ms: { p50: round(pct(pick, 50), 3), p99: round(pct(pick, 99), 3), n: pick.length },
      result_ms: { p50: round(pct(res, 50), 3), p99: round(pct(res, 99), 3), n: res.length },
    };
    log(`latency: pickup p50=${out.pickup_ms.p50}ms p99=${out.pickup_ms.p99}ms; ` +
      `result p50=${out.result_ms.p50}ms p99=${out.result_ms.p99}ms (n=${LAT_N})`);
    return out;
  } finally {
    await worker.close().catch(() => {});
    await qe.close().catch(() => {});
    await destroyQueue(q);
  }
}

const median = (xs) => {
  const sorted = [...xs].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)];
};

// A parent whose FLOW_CHILDREN children must all complete first (BullMQ's FlowProducer),
// every job a no-op.
function flowTree(tag, run) {
  const children = new Array(FLOW_CHILDREN);
  for (let i = 0; i < FLOW_CHILDREN; i++) {
    children[i] = { name: 'child', queueName: `flow_child_${tag}`, data: { run, i } };
  }
  return { name: 'parent', queueName: `flow_parent_${tag}`, data: { run }, children };
}

// Submit time of a flow of FLOW_CHILDREN + 1 jobs (no worker running), and the end-to-end
// time of one (FlowProducer.add until the parent has completed) with in-process workers:
// 100 at once on the children, 1 on the parent. The median of FLOW_RUNS each.
async function benchFlows() {
  const producer = new FlowProducer({ connection, prefix: PREFIX });
  const submits = [];
  const e2e = [];
  let childWorker;
  let parentWorker;
  let events;
  try {
    for (let run = 0; run < FLOW_RUNS; run++) {
      const t0 = performance.now();
      await producer.add(flowTree('submit', run));
      submits.push(performance.now() - t0);
    }
    childWorker = new Worker('flow_child_e2e', async () => {}, { connection, prefix: PREFIX, concurrency: 100 });
    parentWorker = new Worker('flow_parent_e2e', async () => {}, { connection, prefix: PREFIX, concurrency: 1 });
    events = new QueueEvents('flow_parent_e2e', { connection, prefix: PREFIX });
    for (const w of [childWorker, parentWorker]) w.on('error', (e) => log(`flow worker error: ${e.message}`));
    await Promise.all([childWorker.waitUntilReady(), parentWorker.waitUntilReady(), events.waitUntilReady()]);
    for (let run = 0; run < FLOW_RUNS; run++) {
      const t0 = performance.now();
      const tree = await producer.add(flowTree('e2e', run));
      await tree.job.waitUntilFinished(events, 120_000);
      e2e.push(performance.now() - t0);
    }
  } finally {
    await childWorker?.close().catch(() => {});
    await parentWorker?.close().catch(() => {});
    await events?.close().catch(() => {});
    await producer.close().catch(() => {});
  }
  const out = { children: FLOW_CHILDREN, submit_ms: round(median(submits), 2), e2e_ms: round(median(e2e), 2) };
  log(`flows: submit ${out.submit_ms} ms, fan-out/fan-in end to end ${out.e2e_ms} ms (${FLOW_CHILDREN} children, median of ${FLOW_RUNS})`);
  return out;
}

async function sweepLeftovers() {
  // Belt and braces: remove any key still under this run's prefix.
  const r = new IORedis({ ...connection, maxRetriesPerRequest: 3, lazyConnect: false });
  let removed = 0;
  try {
    let cursor = '0';
    do {
      const [next, keys] = await r.scan(cursor, 'MATCH', `${PREFIX}:*`, 'COUNT', 1000);
      cursor = next;
      if (keys.length) removed += await r.unlink(...keys);
    } while (cursor !== '0');
  } finally {
    r.disconnect();
  }
  if (removed) log(`swept ${removed} leftover keys under ${PREFIX}`);
}

async function main() {
  const tStart = performance.now();
  log(`bullmq ${BULLMQ_VERSION}, node ${process.version}, redis ${connection.host}:${connection.port}, ` +
    `prefix ${PREFIX}, JOBS=${JOBS} SANDBOX_JOBS=${SANDBOX_JOBS} SINGLE_N=${SINGLE_N} LAT_N=${LAT_N}` +
    ` CONCURRENCIES=${CONCURRENCIES.join(',')}${QUICK ? ' (QUICK)' : ''}`);
  const result = {
    bullmq_version: BULLMQ_VERSION,
    node_version: process.version,
    quick: QUICK,
  };
  try {
    result.add_single_per_s = round(await benchAddSingle());
    result.add_bulk_per_s = round(await benchAddBulk());
    result.drain = [];
    for (const mode of MODES) {
      for (const c of CONCURRENCIES) result.drain.push(await benchDrain(mode, c));
    }
    Object.assign(result, await benchLatency());
    if (process.env.FLOWS !== '0') result.flows = await benchFlows();
  } finally {
    await sweepLeftovers().catch((e) => log(`sweep failed: ${e.message}`));
  }
  result.elapsed_s = round((performance.now() - tStart) / 1000);
  log(`done in ${result.elapsed_s}s`);
  writeStdout(JSON.stringify(result) + '\n');
}

main().then(
  () => process.exit(0),
  (e) => {
    log(`FAILED: ${e && e.stack ? e.stack : e}`);
    process.exit(1);
  },
);
