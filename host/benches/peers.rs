//! wasmgear against its peers, in one run on one machine and one Redis (`scripts/bench`):
//!
//! 1. isolation per job: a fresh instance + call + drop of the trivial `echo` plugin (and of
//!    the Python and JavaScript examples) against fork + exit and fork + exec of /bin/true;
//! 2. end-to-end throughput: 50,000 no-op jobs enqueued in bulk, then drained by one worker
//!    node at several concurrencies, against BullMQ's in-process and sandboxed processors;
//! 3. enqueue one at a time and in bulk, against BullMQ `add` and `addBulk`;
//! 4. latency of an idle worker: enqueue → guest entry and enqueue → result seen by a waiting
//!    client;
//! 5. the Redis ceiling: `redis-benchmark` of EVALSHA of a trivial script, and wasmgear's
//!    Redis calls and Redis CPU per job;
//! 6. the throughput again with ~1 ms of added latency between the worker and Redis;
//! 7. the queues people already run: the same no-op jobs put in GearMonkey's lists by the
//!    spec's commands, in a redis-work-queue by its libraries' commands and in a worqr queue
//!    by worqr's `enqueue`, in a qless queue as qless' `put` stores them and in a gearmand by
//!    `SUBMIT_JOB_BG`, drained through `--source`, next to wasmgear's own queue, one node at
//!    concurrency 16 each; and an idle node's latency through qless and gearmand next to the
//!    same on wasmgear's own queue;
//! 8. enqueue one at a time and in bulk through the Python and Node client libraries and
//!    the HTTP API, against BullMQ `add` and `addBulk`, and enqueue + wait through the HTTP
//!    API against the Rust client's direct wait.
//!
//! BullMQ runs from `bench/bullmq/run.sh` (Node.js); set `WASMGEAR_BENCH_SKIP_BULLMQ=1` to
//! leave it out, `WASMGEAR_BENCH_QUICK=1` for a short smoke run, and
//! `WASMGEAR_BENCH_ONLY=queue,remote` to run only some sections (isolation, bullmq, queue,
//! clients, ceiling, remote, cluster, steady, sources).

#[path = "peers/clients.rs"]
mod clients;
mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use wasmgear_client::redis_server::RedisServer;
use wasmgear_client::{Client, EnqueueOptions};
use wasmgear_proto::{FunctionName, Outcome};
use wasmgear_runtime::CancelSignal;
use wasmgear_runtime::{JobHooks, Runtime, RuntimeConfig};
use wasmgear_sources::gearman::{self as gm, Command as Gm};
use wasmgear_sources::{GearMonkey, Gearman, Qless, RetryBackoff, WorkQueue, Worqr};
use wasmgear_worker::WorkerConfig;
use wasmgear_worker::{JobSource, Worker, WorkerBuilder};

use common::{Quiet, job_info};

/// Sizes of the run: full, or a quick smoke run.
struct Plan {
    jobs: usize,
    single: usize,
    isolation: usize,
    latency: usize,
    concurrencies: Vec<usize>,
    /// Jobs of the steady-state run.
    steady: usize,
}

fn plan() -> Plan {
    let mut plan = match std::env::var_os("WASMGEAR_BENCH_QUICK").is_some() {
        true => Plan {
            jobs: 2000,
            single: 500,
            isolation: 300,
            latency: 50,
            concurrencies: vec![1, 100],
            steady: 20_000,
        },
        false => Plan {
            jobs: 50_000,
            single: 5000,
            isolation: 3000,
            latency: 300,
            concurrencies: vec![1, 10, 100],
            steady: 1_000_000,
        },
    };
    // WASMGEAR_BENCH_CONCURRENCIES=100 drains at those concurrencies only.
    if let Ok(list) = std::env::var("WASMGEAR_BENCH_CONCURRENCIES") {
        plan.concurrencies = list
            .split(',')
            .filter_map(|c| c.trim().parse().ok())
            .collect();
    }
    plan
}

/// One line of the final table.
struct Row {
    what: String,
    wasmgear: String,
    peer: String,
    ratio: String,
}

fn row(
    what: impl Into<String>,
    wasmgear: impl Into<String>,
    peer: impl Into<String>,
    ratio: impl Into<String>,
) -> Row {
    Row {
        what: what.into(),
        wasmgear: wasmgear.into(),
        peer: peer.into(),
        ratio: ratio.into(),
    }
}

/// p50 and p99 of `samples` (sorted here).
fn percentiles(samples: &mut [Duration]) -> (Duration, Duration) {
    samples.sort();
    let at = |q: f64| samples[((samples.len() as f64 * q) as usize).min(samples.len() - 1)];
    (at(0.50), at(0.99))
}

fn us(d: Duration) -> String {
    format!("{:.1} µs", d.as_secs_f64() * 1e6)
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

fn main() {
    let plan = plan();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let redis = RedisServer::start(&dir.path().join("redis"), 0, &[]).unwrap();
    let url = redis.url();
    let mut rows = Vec::new();
    let started = Instant::now();

    // WASMGEAR_BENCH_ONLY=queue,remote (any of isolation, bullmq, queue, clients, ceiling,
    // remote, cluster, steady, sources) runs only those sections.
    let only = std::env::var("WASMGEAR_BENCH_ONLY").ok();
    let runs = |section: &str| {
        only.as_deref()
            .is_none_or(|o| o.split(',').any(|s| s.trim() == section))
    };
    if runs("isolation") {
        eprintln!("[1/7] isolation per job");
        isolation(&plan, &rt, &mut rows);
    }
    let bullmq = match std::env::var_os("WASMGEAR_BENCH_SKIP_BULLMQ") {
        Some(_) => None,
        None if !runs("bullmq") => None,
        None => {
            eprintln!("[2/7] BullMQ (node bench/bullmq/run.sh)");
            run_bullmq(&url, &plan)
        }
    };
    if runs("queue") {
        eprintln!("[3/7] wasmgear: enqueue, drain, latency");
        rt.block_on(queue_numbers(&plan, &url, bullmq.as_ref(), &mut rows));
    }
    if runs("clients") {
        eprintln!("[clients] enqueue through the Python and Node clients and the HTTP API");
        rt.block_on(clients::clients(&plan, &url, bullmq.as_ref(), &mut rows));
    }
    if runs("ceiling") {
        eprintln!("[4/7] Redis ceiling");
        redis_ceiling(redis.port(), &mut rows);
    }
    if runs("remote") {
        eprintln!("[5/7] remote Redis (~1 ms added latency)");
        rt.block_on(remote(&plan, redis.port(), &mut rows));
    }
    if runs("cluster") {
        eprintln!("[cluster] Redis Cluster of 3 masters, jobs over 30 functions");
        rt.block_on(cluster(&plan, &mut rows));
    }
    if runs("steady") {
        eprintln!(
            "[steady] {} jobs through one function, enqueued as they drain",
            plan.steady
        );
        rt.block_on(steady(&plan, &mut rows));
    }
    if runs("sources") {
        eprintln!(
            "[6/7] sources: GearMonkey, redis-work-queue, worqr, qless and Gearman next to wasmgear's own queue"
        );
        rt.block_on(sources(&plan, &url, &mut rows));
    }
    eprintln!("[7/7] done in {:.0} s", started.elapsed().as_secs_f64());

    let width = rows
        .iter()
        .map(|r| r.what.chars().count())
        .max()
        .unwrap_or(0);
    let w2 = rows
        .iter()
        .map(|r| r.wasmgear.chars().count())
        .max()
        .unwrap_or(0)
        .max(8);
    let w3 = rows
        .iter()
        .map(|r| r.peer.chars().count())
        .max()
        .unwrap_or(0)
        .max(4);
    println!(
        "{:<width$}  {:>w2$}  {:>w3$}  ratio",
        "measure", "wasmgear", "peer"
    );
    for r in &rows {
        println!(
            "{:<width$}  {:>w2$}  {:>w3$}  {}",
            r.what, r.wasmgear, r.peer, r.ratio
        );
    }
    if let Some(bullmq) = &bullmq {
        println!(
            "(peer: BullMQ {} on Node {}; same Redis {}, same machine, {} CPUs)",
            bullmq["bullmq_version"].as_str().unwrap_or("?"),
            bullmq["node_version"].as_str().unwrap_or("?"),
            redis_version(redis.port()),
            std::thread::available_parallelism().map_or(0, |n| n.get())
        );
    }
}

/// 1. A fresh instance + call + drop, against fork + exit and fork + exec.
fn isolation(plan: &Plan, rt: &tokio::runtime::Runtime, rows: &mut Vec<Row>) {
    let runtime = Runtime::new(RuntimeConfig {
        max_instances: 4,
        ..RuntimeConfig::default()
    })
    .unwrap();
    let hooks: Arc<dyn JobHooks> = Arc::new(Quiet);
    let measure = |path: &Path, name: &str, input: &[u8], n: usize| {
        let plugin = runtime.load_plugin(path).unwrap();
        let info = job_info(name);
        rt.block_on(async {
            let mut samples = Vec::with_capacity(n);
            for i in 0..n + n / 10 {
                let started = Instant::now();
                let outcome = runtime
                    .run(&plugin, &info, input, hooks.clone(), CancelSignal::new())
                    .await;
                let took = started.elapsed();
                assert!(
                    matches!(outcome, Outcome::Succeeded(_)),
                    "{name}: {outcome:?}"
                );
                if i >= n / 10 {
                    samples.push(took);
                }
            }
            percentiles(&mut samples)
        })
    };
    let (echo50, echo99) = measure(
        Path::new(wasmgear_test_artifacts::ECHO),
        "echo",
        b"x",
        // Cheap enough for many samples, which steadies the median on a noisy machine.
        plan.isolation * 10,
    );

    let mut fork_exit = Vec::with_capacity(plan.isolation);
    for _ in 0..plan.isolation {
        let started = Instant::now();
        // SAFETY: the child calls only `_exit`, which is async-signal-safe. (The one unsafe
        // block of the benchmarks: fork is what this row measures.)
        #[allow(unsafe_code)]
        unsafe {
            let pid = libc::fork();
            if pid == 0 {
                libc::_exit(0);
            }
            assert!(pid > 0, "fork failed");
            let mut status = 0;
            libc::waitpid(pid, &mut status, 0);
        }
        fork_exit.push(started.elapsed());
    }
    let (fork50, fork99) = percentiles(&mut fork_exit);
    let mut fork_exec = Vec::with_capacity(plan.isolation);
    for _ in 0..plan.isolation.min(2000) {
        let started = Instant::now();
        let status = std::process::Command::new("/bin/true").status().unwrap();
        assert!(status.success());
        fork_exec.push(started.elapsed());
    }
    let (exec50, exec99) = percentiles(&mut fork_exec);
    let ratio = |ours: Duration, theirs: Duration| {
        format!("{:.0}× cheaper", theirs.as_secs_f64() / ours.as_secs_f64())
    };
    rows.push(row(
        "isolation: echo instance+call+drop vs fork+exit, p50",
        us(echo50),
        us(fork50),
        ratio(echo50, fork50),
    ));
    rows.push(row(
        "  same, p99",
        us(echo99),
        us(fork99),
        ratio(echo99, fork99),
    ));
    rows.push(row(
        "isolation: echo vs fork+exec /bin/true, p50",
        us(echo50),
        us(exec50),
        ratio(echo50, exec50),
    ));
    rows.push(row(
        "  same, p99",
        us(echo99),
        us(exec99),
        ratio(echo99, exec99),
    ));

    // The Python and JavaScript examples (built here; their toolchains come from setup).
    let out = tempfile::tempdir().unwrap();
    for name in ["wordcount-python", "wordcount-js"] {
        if let Err(why) = common::build_plugin(name, out.path(), true) {
            rows.push(row(
                format!("isolation: {name}"),
                format!("not built: {why}"),
                "",
                "",
            ));
            continue;
        }
        let path = out.path().join(format!("{name}.wasm"));
        let n = (plan.isolation / 10).max(50);
        let (p50, p99) = measure(&path, name, br#"{"text": "a b c"}"#, n);
        rows.push(row(
            format!("isolation: {name} instance+call+drop, p50 / p99"),
            format!("{} / {}", us(p50), us(p99)),
            us(exec50),
            ratio(p50, exec50),
        ));
    }
}

/// Runs BullMQ's benchmark against the same Redis; `None` when Node or npm is missing.
fn run_bullmq(url: &str, plan: &Plan) -> Option<serde_json::Value> {
    let mut command = std::process::Command::new("bash");
    command
        .arg(common::repo().join("bench/bullmq/run.sh"))
        .env("REDIS_URL", url)
        .env("JOBS", plan.jobs.to_string())
        .env("SINGLE_N", plan.single.to_string())
        .env(
            "CONCURRENCIES",
            plan.concurrencies
                .iter()
                .map(|c| c.to_string())
                .collect::<Vec<_>>()
                .join(","),
        );
    if std::env::var_os("WASMGEAR_BENCH_QUICK").is_some() {
        command.env("QUICK", "1");
    }
    let out = command
        .stderr(std::process::Stdio::inherit())
        .output()
        .ok()?;
    if !out.status.success() {
        eprintln!(
            "BullMQ's benchmark failed: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        return None;
    }
    serde_json::from_slice(&out.stdout).ok()
}

/// A worker node in this process serving the plugins in `dir`.
struct Node {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

/// The builder of every node of the benchmark: the plugins in `dir`, `concurrency` jobs at
/// once, no directory watch.
fn node_builder(dir: &Path, concurrency: usize) -> WorkerBuilder {
    WorkerBuilder::new(dir)
        .id(format!("bench-{concurrency}"))
        .runtime(RuntimeConfig {
            max_instances: concurrency as u32 + 4,
            ..RuntimeConfig::default()
        })
        .config(WorkerConfig {
            concurrency,
            ..WorkerConfig::default()
        })
        .watch(false)
}

async fn start_node(url: &str, dir: &Path, concurrency: usize) -> Node {
    let worker = node_builder(dir, concurrency).build(url).await.unwrap();
    run_node(worker)
}

/// A node serving GearMonkey's queues on the Redis at `url`.
async fn start_gearmonkey_node(url: &str, dir: &Path, concurrency: usize) -> Node {
    let loaded = node_builder(dir, concurrency).load().unwrap();
    let source = GearMonkey::connect(url, loaded.id(), RetryBackoff::default())
        .await
        .unwrap();
    run_node(loaded.with_source(source))
}

/// A node serving the redis-work-queue items under `prefix` as jobs of `function`.
async fn start_work_queue_node(
    url: &str,
    dir: &Path,
    concurrency: usize,
    prefix: &str,
    function: FunctionName,
) -> Node {
    let loaded = node_builder(dir, concurrency).load().unwrap();
    let source = WorkQueue::connect(url, prefix, function, loaded.id(), RetryBackoff::default())
        .await
        .unwrap();
    run_node(loaded.with_source(source))
}

/// A node serving worqr queue `queue` (default prefix) as jobs of `function`.
async fn start_worqr_node(
    url: &str,
    dir: &Path,
    concurrency: usize,
    queue: &str,
    function: FunctionName,
) -> Node {
    let loaded = node_builder(dir, concurrency).load().unwrap();
    let source = Worqr::connect(
        url,
        ("worqr", queue),
        function,
        loaded.id(),
        RetryBackoff::default(),
    )
    .await
    .unwrap();
    run_node(loaded.with_source(source))
}

/// A node serving qless queue `queue`.
async fn start_qless_node(url: &str, dir: &Path, concurrency: usize, queue: &str) -> Node {
    let loaded = node_builder(dir, concurrency).load().unwrap();
    let queues = [queue.to_string()];
    let source = Qless::connect(url, &queues, loaded.id(), RetryBackoff::default())
        .await
        .unwrap();
    run_node(loaded.with_source(source))
}

/// A node working for the gearmand at `address`.
async fn start_gearman_node(address: &str, dir: &Path, concurrency: usize) -> Node {
    let loaded = node_builder(dir, concurrency).load().unwrap();
    let source = Gearman::connect(&[address.to_string()], loaded.id())
        .await
        .unwrap();
    run_node(loaded.with_source(source))
}

/// A `gearmand` of the benchmark's own on a free port (killed when dropped), or `None` when
/// it is not installed.
struct BenchGearmand(std::process::Child, u16);

impl BenchGearmand {
    fn start() -> Option<Self> {
        let port = wasmgear_client::redis_server::free_port();
        let program = match Path::new("/usr/sbin/gearmand").exists() {
            true => "/usr/sbin/gearmand",
            false => "gearmand",
        };
        let child = std::process::Command::new(program)
            .args(["--listen", "127.0.0.1", "--port", &port.to_string()])
            .args(["--log-file=none", "--threads", "1"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .ok()?;
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Some(BenchGearmand(child, port))
    }

    fn address(&self) -> String {
        format!("127.0.0.1:{}", self.1)
    }

    /// The jobs of `function` gearmand still holds (queued or running), by its `status`
    /// admin command.
    fn jobs_of(&self, function: &str) -> u64 {
        let mut admin = TcpStream::connect(("127.0.0.1", self.1)).unwrap();
        admin.write_all(b"status\n").unwrap();
        let mut text = String::new();
        let mut buf = [0u8; 4096];
        while !text.ends_with(".\n") {
            let n = admin.read(&mut buf).unwrap();
            assert!(n > 0, "gearmand closed the admin connection");
            text.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
        text.lines()
            .find_map(|line| {
                let mut fields = line.split('\t');
                (fields.next() == Some(function)).then(|| fields.next()?.parse().ok())?
            })
            .unwrap_or(0)
    }
}

impl Drop for BenchGearmand {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// qless' `put` of a job into `queue`, stored as qless stores one (job hash, history entry,
/// the queue's work set, the `put` event), added to `pipe`.
fn qless_put(pipe: &mut redis::Pipeline, queue: &str, jid: &str, klass: &str) {
    let now = epoch_ns(std::time::SystemTime::now()) as f64 / 1e9;
    pipe.cmd("HSET")
        .arg(format!("ql:j:{jid}"))
        .arg(&[
            ("jid", jid),
            ("klass", klass),
            ("data", "\"x\""),
            ("priority", "0"),
            ("tags", "{}"),
            ("state", "waiting"),
            ("worker", ""),
            ("expires", "0"),
            ("queue", queue),
            ("retries", "5"),
            ("remaining", "5"),
        ])
        .arg("time")
        .arg(format!("{now:.6}"))
        .ignore();
    let put = serde_json::json!([now.floor() as i64, "put", {"q": queue}]);
    pipe.cmd("RPUSH")
        .arg(format!("ql:j:{jid}-history"))
        .arg(put.to_string())
        .ignore();
    pipe.cmd("ZADD")
        .arg(format!("ql:q:{queue}-work"))
        .arg(-now / 1e10)
        .arg(jid)
        .ignore();
    let event = serde_json::json!({"jid": jid, "event": "put", "queue": queue});
    pipe.cmd("PUBLISH")
        .arg("ql:log")
        .arg(event.to_string())
        .ignore();
}

fn run_node<S: JobSource>(worker: Worker<S>) -> Node {
    assert!(worker.problems().is_empty(), "{:?}", worker.problems());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(worker.run(async {
        let _ = stopped.await;
    }));
    Node { stop, task }
}

impl Node {
    async fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.task.await;
    }
}

/// Enqueues `jobs` no-op jobs of `function` in bulk (1000 per call); returns the time taken.
async fn bulk_enqueue(client: &Client, function: &FunctionName, jobs: usize) -> Duration {
    let options = EnqueueOptions::default();
    let started = Instant::now();
    let mut left = jobs;
    while left > 0 {
        let n = left.min(1000);
        let batch: Vec<(&[u8], EnqueueOptions)> =
            (0..n).map(|_| (&b"x"[..], options.clone())).collect();
        client.enqueue_many(function, &batch).await.unwrap();
        left -= n;
    }
    started.elapsed()
}

/// Drains `jobs` echo jobs (already queued under `function`) with one node; jobs/s.
async fn drain(
    url: &str,
    plugins: &Path,
    function: &FunctionName,
    jobs: usize,
    concurrency: usize,
) -> f64 {
    let client = Client::connect(url).await.unwrap();
    let started = Instant::now();
    let node = start_node(url, plugins, concurrency).await;
    loop {
        let done = client.queue(function).await.unwrap().succeeded as usize;
        if done >= jobs {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let rate = jobs as f64 / started.elapsed().as_secs_f64();
    node.stop().await;
    rate
}

/// INFO cpu: the CPU time the server has used so far (user + system), in µs: what a job
/// really costs Redis, its network handling included.
fn server_cpu_us(port: u16) -> f64 {
    redis_info(port, "cpu")
        .lines()
        .filter_map(|l| {
            let (name, value) = l.trim().split_once(':')?;
            matches!(name, "used_cpu_user" | "used_cpu_sys")
                .then(|| value.parse::<f64>().ok())
                .flatten()
        })
        .sum::<f64>()
        * 1e6
}

/// The CPU time this process has used so far (user + system, from /proc/self/stat, in
/// clock ticks of 10 ms), in µs: with the worker node in this process, what a drained job
/// costs the worker (the bench's own polling aside).
fn own_cpu_us() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The fields after the command name (which is in parentheses): utime and stime are the
    // 12th and 13th of them.
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let ticks: f64 = after
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|t| t.parse::<f64>().ok())
        .sum();
    ticks * 10_000.0
}

async fn client_conn(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// WASMGEAR_BENCH_PROFILE=1: where Redis spent its time in the last drain (after a
/// CONFIG RESETSTAT), per job and command; a function's time includes its inner commands.
fn print_command_profile(port: u16, jobs: usize) {
    let mut rows: Vec<(String, f64, f64)> = redis_info(port, "commandstats")
        .lines()
        .filter_map(|line| {
            let (name, fields) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let field = |key: &str| {
                fields
                    .split(',')
                    .find_map(|f| f.strip_prefix(key))
                    .and_then(|v| v.parse::<f64>().ok())
            };
            Some((
                name.to_string(),
                field("calls=")? / jobs as f64,
                field("usec=")? / jobs as f64,
            ))
        })
        .collect();
    rows.sort_by(|a, b| b.2.total_cmp(&a.2));
    for (name, calls, usec) in rows {
        println!("[profile]   {name:<28} {calls:>8.3} calls/job {usec:>8.2} µs/job");
    }
}

/// INFO commandstats: how many commands the server has run so far (those called inside
/// functions included).
fn command_stats(port: u16) -> u64 {
    redis_info(port, "commandstats")
        .lines()
        .filter(|l| l.starts_with("cmdstat_"))
        .filter_map(|line| {
            let fields = line.split(':').nth(1)?;
            fields
                .split(',')
                .find_map(|f| f.strip_prefix("calls="))?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

fn per_s(rate: f64) -> String {
    format!("{:.0} /s", rate)
}

fn times(ours: f64, theirs: f64) -> String {
    format!("{:.2}×", ours / theirs)
}

/// 2-4: enqueue, drain and latency, with BullMQ's numbers beside them.
async fn queue_numbers(
    plan: &Plan,
    url: &str,
    bullmq: Option<&serde_json::Value>,
    rows: &mut Vec<Row>,
) {
    let peer = |path: &[&str]| -> Option<f64> {
        let mut value = bullmq?;
        for key in path {
            value = value.get(key)?;
        }
        value.as_f64()
    };
    let client = Client::connect(url).await.unwrap();
    let port: u16 = url.rsplit(':').next().unwrap().parse().unwrap();

    // Enqueue.
    let single = FunctionName::new("bench-single").unwrap();
    let started = Instant::now();
    for _ in 0..plan.single {
        client
            .enqueue(&single, b"x", &EnqueueOptions::default())
            .await
            .unwrap();
    }
    let single_rate = plan.single as f64 / started.elapsed().as_secs_f64();
    let bullmq_single = peer(&["add_single_per_s"]);
    rows.push(row(
        "enqueue one at a time (BullMQ add)",
        per_s(single_rate),
        bullmq_single.map_or("-".into(), per_s),
        bullmq_single.map_or("-".into(), |b| times(single_rate, b)),
    ));
    let bulk = FunctionName::new("bench-bulk").unwrap();
    let took = bulk_enqueue(&client, &bulk, plan.jobs).await;
    let bulk_rate = plan.jobs as f64 / took.as_secs_f64();
    let bullmq_bulk = peer(&["add_bulk_per_s"]);
    rows.push(row(
        format!("enqueue {} in bulk (BullMQ addBulk)", plan.jobs),
        per_s(bulk_rate),
        bullmq_bulk.map_or("-".into(), per_s),
        bullmq_bulk.map_or("-".into(), |b| times(bulk_rate, b)),
    ));

    // Drain at each concurrency.
    // One function per concurrency (the count of finished jobs is per function).
    let plugins = tempfile::tempdir().unwrap();
    for &concurrency in &plan.concurrencies {
        std::fs::copy(
            wasmgear_test_artifacts::ECHO,
            plugins.path().join(format!("echo-{concurrency}.wasm")),
        )
        .unwrap();
    }
    std::fs::copy(
        wasmgear_test_artifacts::CLOCK,
        plugins.path().join("clock.wasm"),
    )
    .unwrap();
    let bullmq_drain = |mode: &str, concurrency: usize| -> Option<f64> {
        bullmq?.get("drain")?.as_array()?.iter().find_map(|d| {
            (d["mode"] == mode && d["concurrency"] == concurrency).then(|| d["per_s"].as_f64())?
        })
    };
    let mut calls_per_job = None;
    for &concurrency in &plan.concurrencies {
        let echo = FunctionName::new(format!("echo-{concurrency}")).unwrap();
        bulk_enqueue(&client, &echo, plan.jobs).await;
        if std::env::var_os("WASMGEAR_BENCH_PROFILE").is_some() {
            let _: () = redis::cmd("CONFIG")
                .arg("RESETSTAT")
                .query_async(&mut client_conn(url).await)
                .await
                .unwrap();
        }
        let before = (command_stats(port), server_cpu_us(port), own_cpu_us());
        let rate = drain(url, plugins.path(), &echo, plan.jobs, concurrency).await;
        let after = (command_stats(port), server_cpu_us(port), own_cpu_us());
        let per_job = |before: f64, after: f64| (after - before) / plan.jobs as f64;
        calls_per_job = Some((
            per_job(before.0 as f64, after.0 as f64),
            per_job(before.1, after.1),
            per_job(before.2, after.2),
        ));
        if std::env::var_os("WASMGEAR_BENCH_PROFILE").is_some() {
            print_command_profile(port, plan.jobs);
        }
        println!(
            "[bench] drain c={concurrency}: {rate:.0} jobs/s, Redis {:.2} commands and {:.1} µs CPU per job, worker {:.1} µs CPU per job",
            per_job(before.0 as f64, after.0 as f64),
            per_job(before.1, after.1),
            per_job(before.2, after.2),
        );
        for (mode, label) in [
            ("inprocess", "in-process"),
            ("sandbox_threads", "sandboxed, worker threads"),
            ("sandbox_process", "sandboxed, child process"),
        ] {
            let theirs = bullmq_drain(mode, concurrency);
            rows.push(row(
                format!(
                    "drain {} no-op jobs, concurrency {concurrency} (BullMQ {label})",
                    plan.jobs
                ),
                if mode == "inprocess" {
                    per_s(rate)
                } else {
                    String::new()
                },
                theirs.map_or("-".into(), per_s),
                theirs.map_or("-".into(), |b| times(rate, b)),
            ));
        }
    }
    if let Some((calls, usec, worker_usec)) = calls_per_job {
        rows.push(row(
            "Redis commands (inner ones included) and Redis CPU per job (last drain)",
            format!("{calls:.2} commands, {usec:.1} µs"),
            "",
            format!(
                "→ at most {:.0} jobs/s on one Redis core",
                1e6 / usec.max(0.001)
            ),
        ));
        rows.push(row(
            "the worker node's CPU per job (last drain: instance, Redis client, tasks)",
            format!("{worker_usec:.1} µs"),
            "",
            format!(
                "→ at most {:.0} jobs/s on one core",
                1e6 / worker_usec.max(0.001)
            ),
        ));
    }

    // Latency: an idle node, one job at a time.
    let node = start_node(url, plugins.path(), 4).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (mut entry, mut result) = own_latency(&client, plan.latency).await;
    node.stop().await;
    let (e50, e99) = percentiles(&mut entry);
    let (r50, r99) = percentiles(&mut result);
    let bull = |key: &str, p: &str| peer(&[key, p]).map(|v| Duration::from_secs_f64(v / 1e3));
    let show = |d: Option<Duration>| d.map_or("-".into(), ms);
    let ratio = |ours: Duration, theirs: Option<Duration>| {
        theirs.map_or("-".into(), |t| {
            format!("{:.2}× the time", ours.as_secs_f64() / t.as_secs_f64())
        })
    };
    for (what, ours, key, p) in [
        (
            "latency: enqueue → guest entry, p50 (BullMQ: → processor)",
            e50,
            "pickup_ms",
            "p50",
        ),
        ("  same, p99", e99, "pickup_ms", "p99"),
        (
            "latency: enqueue → result seen by a waiting client, p50",
            r50,
            "result_ms",
            "p50",
        ),
        ("  same, p99", r99, "result_ms", "p99"),
    ] {
        let theirs = bull(key, p);
        rows.push(row(what, ms(ours), show(theirs), ratio(ours, theirs)));
    }
}

/// An idle node's latency on wasmgear's own queue, one `clock` job at a time: enqueue →
/// guest entry and enqueue → result seen by a waiting client, `samples` of each.
async fn own_latency(client: &Client, samples: usize) -> (Vec<Duration>, Vec<Duration>) {
    let clock = FunctionName::new("clock").unwrap();
    let (mut entry, mut result) = (Vec::new(), Vec::new());
    for _ in 0..samples {
        tokio::time::sleep(Duration::from_millis(5)).await;
        let sent = std::time::SystemTime::now();
        let started = Instant::now();
        let id = client
            .enqueue(&clock, b"", &EnqueueOptions::default())
            .await
            .unwrap();
        let status = client
            .wait(&id, Some(Duration::from_secs(10)), |_| {})
            .await
            .unwrap();
        result.push(started.elapsed());
        let entered: u128 = String::from_utf8_lossy(status.output.as_deref().unwrap_or_default())
            .parse()
            .unwrap();
        let sent_ns = epoch_ns(sent);
        entry.push(Duration::from_nanos(entered.saturating_sub(sent_ns) as u64));
        if std::env::var_os("WASMGEAR_BENCH_DEBUG").is_some() {
            let leased = status.record.history[0].started_ms.unwrap_or(0) as u128 * 1_000_000;
            eprintln!(
                "enqueue→lease {:.2} ms, lease→entry {:.2} ms, created→lease {} ms",
                (leased as f64 - sent_ns as f64) / 1e6,
                (entered as f64 - leased as f64) / 1e6,
                status.record.history[0].started_ms.unwrap_or(0) - status.record.created_ms
            );
        }
    }
    (entry, result)
}

/// Nanoseconds since the epoch at `sent`.
fn epoch_ns(sent: std::time::SystemTime) -> u128 {
    sent.duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos()
}

/// 5. What one Redis core does with a trivial script.
fn redis_ceiling(port: u16, rows: &mut Vec<Row>) {
    let cli = |args: &[&str]| {
        let out = std::process::Command::new("redis-cli")
            .arg("-p")
            .arg(port.to_string())
            .args(args)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    let sha = cli(&["SCRIPT", "LOAD", "return 1"]);
    for (clients, pipeline) in [("1", "1"), ("50", "1"), ("50", "16")] {
        let out = std::process::Command::new("redis-benchmark")
            .args([
                "-p",
                &port.to_string(),
                "-n",
                "200000",
                "-c",
                clients,
                "-P",
                pipeline,
                "-q",
                "EVALSHA",
                &sha,
                "0",
            ])
            .output();
        let text = out
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        let rate = text
            .split_whitespace()
            .find_map(|w| {
                w.replace(',', "")
                    .parse::<f64>()
                    .ok()
                    .filter(|v| *v > 100.0)
            })
            .unwrap_or(0.0);
        rows.push(row(
            format!("Redis ceiling: redis-benchmark EVALSHA 'return 1', {clients} client(s), pipeline {pipeline}"),
            "",
            per_s(rate),
            "",
        ));
    }
}

/// One section of the server's INFO, through redis-cli.
fn redis_info(port: u16, section: &str) -> String {
    let out = std::process::Command::new("redis-cli")
        .args(["-p", &port.to_string(), "INFO", section])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn redis_version(port: u16) -> String {
    redis_info(port, "server")
        .lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .unwrap_or("?")
        .trim()
        .to_string()
}

/// A TCP proxy to `127.0.0.1:target` that delays every chunk by `delay` in each direction
/// (threads, so that the delay is precise to microseconds). Returns its port.
fn delaying_proxy(target: u16, delay: Duration) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for client in listener.incoming().map_while(Result::ok) {
            let Ok(server) = TcpStream::connect(("127.0.0.1", target)) else {
                continue;
            };
            let _ = client.set_nodelay(true);
            let _ = server.set_nodelay(true);
            for (from, to) in [
                (client.try_clone().unwrap(), server.try_clone().unwrap()),
                (server.try_clone().unwrap(), client.try_clone().unwrap()),
            ] {
                let (tx, rx) = std::sync::mpsc::channel::<(Instant, Vec<u8>)>();
                let mut from = from;
                std::thread::spawn(move || {
                    let mut buf = vec![0u8; 64 * 1024];
                    while let Ok(n) = from.read(&mut buf) {
                        if n == 0
                            || tx
                                .send((Instant::now() + delay, buf[..n].to_vec()))
                                .is_err()
                        {
                            break;
                        }
                    }
                });
                let mut to = to;
                std::thread::spawn(move || {
                    for (due, bytes) in rx {
                        let now = Instant::now();
                        if due > now {
                            std::thread::sleep(due - now);
                        }
                        if to.write_all(&bytes).is_err() {
                            break;
                        }
                    }
                    let _ = to.shutdown(std::net::Shutdown::Write);
                });
            }
        }
    });
    port
}

/// 6. The drain again through a proxy adding ~1 ms round trip.
async fn remote(plan: &Plan, redis_port: u16, rows: &mut Vec<Row>) {
    let proxy = delaying_proxy(
        redis_port,
        Duration::from_micros(
            std::env::var("PROXY_US")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(500),
        ),
    );
    let url = format!("redis://127.0.0.1:{proxy}");
    let direct = format!("redis://127.0.0.1:{redis_port}");
    let client = Client::connect(&direct).await.unwrap();
    // The round trip through the proxy, as measured.
    let mut conn = redis::Client::open(url.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let mut rtts = Vec::new();
    for _ in 0..50 {
        let started = Instant::now();
        let _: String = redis::cmd("PING").query_async(&mut conn).await.unwrap();
        rtts.push(started.elapsed());
    }
    let (rtt, _) = percentiles(&mut rtts);
    let plugins = tempfile::tempdir().unwrap();
    for name in ["remote", "local"] {
        std::fs::copy(
            wasmgear_test_artifacts::ECHO,
            plugins.path().join(format!("{name}.wasm")),
        )
        .unwrap();
    }
    let concurrency = *plan.concurrencies.last().unwrap();
    let remote = FunctionName::new("remote").unwrap();
    bulk_enqueue(&client, &remote, plan.jobs).await;
    let slow = drain(&url, plugins.path(), &remote, plan.jobs, concurrency).await;
    let local = FunctionName::new("local").unwrap();
    bulk_enqueue(&client, &local, plan.jobs).await;
    let fast = drain(&direct, plugins.path(), &local, plan.jobs, concurrency).await;
    rows.push(row(
        format!(
            "drain {} jobs, concurrency {concurrency}, Redis {} away (local: {})",
            plan.jobs,
            ms(rtt),
            per_s(fast)
        ),
        per_s(slow),
        "",
        format!("{:.2}× slower than local", fast / slow),
    ));
}

/// Jobs waiting to run during the steady-state run: the producer tops the queue up to this.
const STEADY_DEPTH: usize = 20_000;
/// The steady-state run reports throughput and memory every this many jobs.
const STEADY_SEGMENTS: usize = 10;

/// Runs `plan.steady` jobs through one function at the highest concurrency on a Redis of its
/// own, with the default retention and cap (50 000 finished jobs kept), a producer keeping
/// about [`STEADY_DEPTH`] jobs queued: throughput and Redis memory per tenth of the run, to
/// see that forgetting finished jobs keeps both flat once the cap is reached.
async fn steady(plan: &Plan, rows: &mut Vec<Row>) {
    let dir = tempfile::tempdir().unwrap();
    let redis = RedisServer::start(&dir.path().join("redis"), 0, &[]).unwrap();
    let url = redis.url();
    let function = FunctionName::new("steady").unwrap();
    let stats_key = wasmgear_proto::keys::FunctionKeys::new(&function).stats();
    let plugins = tempfile::tempdir().unwrap();
    std::fs::copy(
        wasmgear_test_artifacts::ECHO,
        plugins.path().join("steady.wasm"),
    )
    .unwrap();
    let client = Client::connect(&url).await.unwrap();
    let mut conn = client_conn(&url).await;
    let concurrency = *plan.concurrencies.last().unwrap();
    let total = plan.steady;
    let segment = (total / STEADY_SEGMENTS).max(1);
    // Jobs finished so far: the run counts of the function's daily statistics (retained
    // finished jobs stop growing at the cap).
    async fn finished(conn: &mut redis::aio::MultiplexedConnection, key: &str) -> usize {
        let stats: Vec<(String, String)> = redis::cmd("HGETALL")
            .arg(key)
            .query_async(conn)
            .await
            .unwrap();
        stats
            .iter()
            .filter(|(field, _)| field.ends_with(":run:count"))
            .filter_map(|(_, n)| n.parse::<usize>().ok())
            .sum()
    }
    let memory = |port: u16| -> f64 {
        redis_info(port, "memory")
            .lines()
            .find_map(|l| l.strip_prefix("used_memory:"))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or(0.0)
            / 1048576.0
    };
    let started = Instant::now();
    let node = start_node(&url, plugins.path(), concurrency).await;
    let (mut enqueued, mut done) = (0, 0);
    let mut segments: Vec<(f64, f64)> = Vec::new();
    let mut segment_started = Instant::now();
    let options = EnqueueOptions::default();
    let batch: Vec<(&[u8], EnqueueOptions)> =
        (0..1000).map(|_| (&b"x"[..], options.clone())).collect();
    while done < total {
        if enqueued < total && enqueued - done < STEADY_DEPTH {
            let n = (total - enqueued).min(batch.len());
            client.enqueue_many(&function, &batch[..n]).await.unwrap();
            enqueued += n;
        } else {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        done = finished(&mut conn, &stats_key).await;
        while done >= (segments.len() + 1) * segment && segments.len() < STEADY_SEGMENTS {
            let rate = segment as f64 / segment_started.elapsed().as_secs_f64();
            segments.push((rate, memory(redis.port())));
            eprintln!(
                "[steady] {} jobs: {:.0} jobs/s over the last {segment}, Redis memory {:.1} MiB",
                (segments.len()) * segment,
                rate,
                segments.last().map_or(0.0, |s| s.1)
            );
            segment_started = Instant::now();
        }
    }
    let rate = total as f64 / started.elapsed().as_secs_f64();
    node.stop().await;
    let rates: Vec<String> = segments
        .iter()
        .map(|(r, _)| format!("{:.0}", r / 1000.0))
        .collect();
    let memories: Vec<String> = segments.iter().map(|(_, m)| format!("{m:.0}")).collect();
    rows.push(row(
        format!(
            "{total} jobs at concurrency {concurrency}, enqueued as they drain (default retention and cap): thousand jobs/s per tenth [{}], Redis MiB [{}]",
            rates.join(" "),
            memories.join(" ")
        ),
        per_s(rate),
        "",
        "",
    ));
}

/// Functions the Cluster row spreads its jobs over.
const CLUSTER_FUNCTIONS: usize = 30;

/// Drains `plan.jobs` echo jobs spread over 30 functions from a Redis Cluster of three
/// masters (started here, as `redis-cli --cluster create` makes one), with one node at the
/// highest concurrency.
async fn cluster(plan: &Plan, rows: &mut Vec<Row>) {
    let dir = tempfile::tempdir().unwrap();
    let nodes: Vec<RedisServer> = (0..3)
        .map(|i| {
            let bus = std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .unwrap()
                .port()
                .to_string();
            let args = [
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
            ];
            let mut args: Vec<&str> = args.to_vec();
            args.extend(["--cluster-port", &bus]);
            RedisServer::start(&dir.path().join(format!("node{i}")), 0, &args).unwrap()
        })
        .collect();
    let created = std::process::Command::new("redis-cli")
        .args(["--cluster", "create"])
        .args(nodes.iter().map(|n| format!("127.0.0.1:{}", n.port())))
        .arg("--cluster-yes")
        .output()
        .unwrap();
    assert!(
        created.status.success(),
        "redis-cli --cluster create: {}",
        String::from_utf8_lossy(&created.stdout)
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    for node in &nodes {
        while !redis_info(node.port(), "cluster").contains("cluster_enabled:1")
            || !cluster_ok(node.port())
        {
            assert!(Instant::now() < deadline, "the cluster never came up");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    let url = nodes[0].url();
    let client = Client::connect(&url).await.unwrap();
    let plugins = tempfile::tempdir().unwrap();
    let functions: Vec<FunctionName> = (0..CLUSTER_FUNCTIONS)
        .map(|i| FunctionName::new(format!("c{i}")).unwrap())
        .collect();
    for function in &functions {
        std::fs::copy(
            wasmgear_test_artifacts::ECHO,
            plugins.path().join(format!("{function}.wasm")),
        )
        .unwrap();
        bulk_enqueue(&client, function, plan.jobs / CLUSTER_FUNCTIONS).await;
    }
    let jobs = plan.jobs / CLUSTER_FUNCTIONS * CLUSTER_FUNCTIONS;
    let concurrency = *plan.concurrencies.last().unwrap();
    let cpu = || nodes.iter().map(|n| server_cpu_us(n.port())).sum::<f64>();
    let cpu_before = cpu();
    let started = Instant::now();
    let node = start_node(&url, plugins.path(), concurrency).await;
    loop {
        let mut done = 0;
        for function in &functions {
            done += client.queue(function).await.unwrap().succeeded as usize;
        }
        if done >= jobs {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let rate = jobs as f64 / started.elapsed().as_secs_f64();
    let cpu_per_job = (cpu() - cpu_before) / jobs as f64;
    node.stop().await;
    rows.push(row(
        format!(
            "drain {jobs} jobs over {CLUSTER_FUNCTIONS} functions, concurrency {concurrency}, Redis Cluster of 3 masters ({cpu_per_job:.1} µs Redis CPU per job)"
        ),
        per_s(rate),
        "",
        "",
    ));
}

/// Whether the cluster node on `port` says the cluster is up.
fn cluster_ok(port: u16) -> bool {
    let mut conn = redis::Client::open(format!("redis://127.0.0.1:{port}"))
        .and_then(|c| c.get_connection())
        .unwrap();
    let info: String = redis::cmd("CLUSTER").arg("INFO").query(&mut conn).unwrap();
    info.contains("cluster_state:ok")
}

/// Waits until each `(command, key)` (a length: `LLEN`, `ZCARD`) answers 0: every job taken
/// and finished.
async fn until_empty(conn: &mut redis::aio::MultiplexedConnection, lengths: [(&str, &str); 2]) {
    loop {
        let mut pipe = redis::pipe();
        for (command, key) in lengths {
            pipe.cmd(command).arg(key);
        }
        let counts: Vec<u64> = pipe.query_async(conn).await.unwrap();
        if counts.iter().all(|&n| n == 0) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Section 7: the same no-op jobs from GearMonkey's lists (put there with the spec's
/// commands), a redis-work-queue, a worqr queue and wasmgear's own queue, each drained by one
/// node at concurrency 16.
async fn sources(plan: &Plan, url: &str, rows: &mut Vec<Row>) {
    const CONCURRENCY: usize = 16;
    let jobs = plan.jobs / 5;
    let plugins = tempfile::tempdir().unwrap();
    for name in [
        "own-queue",
        "gearmonkey",
        "work-queue",
        "worqr",
        "qless",
        "gearman",
    ] {
        std::fs::copy(
            wasmgear_test_artifacts::ECHO,
            plugins.path().join(format!("{name}.wasm")),
        )
        .unwrap();
    }
    std::fs::copy(
        wasmgear_test_artifacts::CLOCK,
        plugins.path().join("clock.wasm"),
    )
    .unwrap();
    let client = Client::connect(url).await.unwrap();
    let own = FunctionName::new("own-queue").unwrap();
    bulk_enqueue(&client, &own, jobs).await;
    let own_rate = drain(url, plugins.path(), &own, jobs, CONCURRENCY).await;

    // The spec's `Client.run`, pipelined: the job hash, then the id in the normal queue.
    let mut conn = redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let ids: Vec<usize> = (1..=jobs).collect();
    for chunk in ids.chunks(1000) {
        let mut pipe = redis::pipe();
        for id in chunk {
            pipe.cmd("HSET")
                .arg(format!("job:gearmonkey:{id}"))
                .arg("status")
                .arg("idle")
                .arg("input")
                .arg("x")
                .ignore();
            pipe.cmd("LPUSH")
                .arg("queue:gearmonkey:normal")
                .arg(id)
                .ignore();
        }
        let () = pipe.query_async(&mut conn).await.unwrap();
    }
    let started = Instant::now();
    let node = start_gearmonkey_node(url, plugins.path(), CONCURRENCY).await;
    until_empty(
        &mut conn,
        [
            ("LLEN", "queue:gearmonkey:normal"),
            ("ZCARD", "wasmgear:gearmonkey:gearmonkey:leases"),
        ],
    )
    .await;
    let gearmonkey_rate = jobs as f64 / started.elapsed().as_secs_f64();
    node.stop().await;
    let done: String = redis::cmd("HGET")
        .arg(format!("job:gearmonkey:{jobs}"))
        .arg("status")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(done, "success");
    rows.push(row(
        format!(
            "drain {jobs} jobs, concurrency {CONCURRENCY}: --source gearmonkey (peer: wasmgear's own queue)"
        ),
        per_s(gearmonkey_rate),
        per_s(own_rate),
        times(gearmonkey_rate, own_rate),
    ));

    // redis-work-queue: the libraries' `add_item` (data, then the id), pipelined.
    for chunk in ids.chunks(1000) {
        let mut pipe = redis::pipe();
        for id in chunk {
            pipe.cmd("SET")
                .arg(format!("rwq:item:{id}"))
                .arg("x")
                .ignore();
            pipe.cmd("LPUSH").arg("rwq:queue").arg(id).ignore();
        }
        let () = pipe.query_async(&mut conn).await.unwrap();
    }
    let started = Instant::now();
    let function = FunctionName::new("work-queue").unwrap();
    let node = start_work_queue_node(url, plugins.path(), CONCURRENCY, "rwq", function).await;
    until_empty(
        &mut conn,
        [("LLEN", "rwq:queue"), ("LLEN", "rwq:processing")],
    )
    .await;
    let work_queue_rate = jobs as f64 / started.elapsed().as_secs_f64();
    node.stop().await;
    let done: String = redis::cmd("HGET")
        .arg(format!("rwq:result:{jobs}"))
        .arg("status")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(done, "success");
    rows.push(row(
        format!(
            "drain {jobs} jobs, concurrency {CONCURRENCY}: --source redis-work-queue (peer: wasmgear's own queue)"
        ),
        per_s(work_queue_rate),
        per_s(own_rate),
        times(work_queue_rate, own_rate),
    ));

    // worqr: `enqueue` (LPUSH and a `work` message), pipelined.
    for chunk in ids.chunks(1000) {
        let mut pipe = redis::pipe();
        for _ in chunk {
            pipe.cmd("LPUSH")
                .arg("worqr:queues:bench")
                .arg("x")
                .ignore();
        }
        pipe.cmd("PUBLISH")
            .arg("worqr_bench_work")
            .arg(chunk.len())
            .ignore();
        let () = pipe.query_async(&mut conn).await.unwrap();
    }
    let started = Instant::now();
    let function = FunctionName::new("worqr").unwrap();
    let node = start_worqr_node(url, plugins.path(), CONCURRENCY, "bench", function).await;
    until_empty(
        &mut conn,
        [
            ("LLEN", "worqr:queues:bench"),
            ("SCARD", "worqr:workingProcesses:bench"),
        ],
    )
    .await;
    let worqr_rate = jobs as f64 / started.elapsed().as_secs_f64();
    node.stop().await;
    let held: u64 = redis::cmd("HLEN")
        .arg("worqr:wasmgear:owners")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(held, 0, "worqr processes left unfinished");
    rows.push(row(
        format!(
            "drain {jobs} jobs, concurrency {CONCURRENCY}: --source worqr (peer: wasmgear's own queue)"
        ),
        per_s(worqr_rate),
        per_s(own_rate),
        times(worqr_rate, own_rate),
    ));

    // qless: jobs stored as qless' `put` stores them, klass `jobs.qless`.
    for chunk in ids.chunks(1000) {
        let mut pipe = redis::pipe();
        for id in chunk {
            qless_put(&mut pipe, "bench", &format!("bench-{id}"), "jobs.qless");
        }
        let () = pipe.query_async(&mut conn).await.unwrap();
    }
    let started = Instant::now();
    let node = start_qless_node(url, plugins.path(), CONCURRENCY, "bench").await;
    until_empty(
        &mut conn,
        [("ZCARD", "ql:q:bench-work"), ("ZCARD", "ql:q:bench-locks")],
    )
    .await;
    let qless_rate = jobs as f64 / started.elapsed().as_secs_f64();
    node.stop().await;
    let state: String = redis::cmd("HGET")
        .arg(format!("ql:j:bench-{jobs}"))
        .arg("state")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(state, "complete");
    rows.push(row(
        format!(
            "drain {jobs} jobs, concurrency {CONCURRENCY}: --source qless (peer: wasmgear's own queue)"
        ),
        per_s(qless_rate),
        per_s(own_rate),
        times(qless_rate, own_rate),
    ));

    // Gearman: background jobs submitted to a gearmand, pipelined.
    let gearman_latency = match BenchGearmand::start() {
        Some(gearmand) => {
            let address = gearmand.address();
            let mut client = tokio::net::TcpStream::connect(&address).await.unwrap();
            // In batches, reading the replies of each: gearmand stops reading a client whose
            // replies it cannot write.
            for chunk in ids.chunks(500) {
                let mut batch = Vec::new();
                for _ in chunk {
                    batch.extend(gm::request(Gm::SubmitJobBg, &[b"gearman", b"", b"x"]));
                }
                tokio::io::AsyncWriteExt::write_all(&mut client, &batch)
                    .await
                    .unwrap();
                for _ in chunk {
                    let created = gm::read_packet(&mut client).await.unwrap();
                    assert_eq!(created.kind, Gm::JobCreated as u32);
                }
            }
            let started = Instant::now();
            let node = start_gearman_node(&address, plugins.path(), CONCURRENCY).await;
            while gearmand.jobs_of("gearman") > 0 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            let gearman_rate = jobs as f64 / started.elapsed().as_secs_f64();
            node.stop().await;
            rows.push(row(
                format!(
                    "drain {jobs} jobs, concurrency {CONCURRENCY}: --source gearman (peer: wasmgear's own queue)"
                ),
                per_s(gearman_rate),
                per_s(own_rate),
                times(gearman_rate, own_rate),
            ));
            Some(gearmand)
        }
        None => {
            eprintln!("gearmand is not installed (scripts/setup installs it): Gearman left out");
            None
        }
    };

    // Latency of an idle node, one `clock` job at a time: qless' put → guest entry and → the
    // `completed` event, next to the same on wasmgear's own queue.
    let samples = plan.latency.min(200);
    let node = start_node(url, plugins.path(), 4).await;
    let (own_entry, own_result) = own_latency(&client, samples).await;
    node.stop().await;
    let node = start_qless_node(url, plugins.path(), 4, "tick").await;
    let mut events = redis::Client::open(url)
        .unwrap()
        .get_async_pubsub()
        .await
        .unwrap();
    events.subscribe("ql:log").await.unwrap();
    let mut events = events.into_on_message();
    let (mut entry, mut result) = (Vec::new(), Vec::new());
    for n in 0..samples {
        tokio::time::sleep(Duration::from_millis(5)).await;
        let jid = format!("tick-{n}");
        let sent = std::time::SystemTime::now();
        let started = Instant::now();
        let mut pipe = redis::pipe();
        qless_put(pipe.atomic(), "tick", &jid, "clock");
        let () = pipe.query_async(&mut conn).await.unwrap();
        loop {
            let message = tokio::time::timeout(
                Duration::from_secs(10),
                futures_util::StreamExt::next(&mut events),
            )
            .await
            .expect("a qless event in time")
            .expect("the subscription open");
            let event: serde_json::Value =
                serde_json::from_str(&message.get_payload::<String>().unwrap()).unwrap();
            if event["event"] == "completed" && event["jid"] == jid.as_str() {
                break;
            }
        }
        result.push(started.elapsed());
        let output: String = redis::cmd("HGET")
            .arg(format!("ql:j:{jid}"))
            .arg("output")
            .query_async(&mut conn)
            .await
            .unwrap();
        let entered: u128 = output.parse().unwrap();
        entry.push(Duration::from_nanos(
            entered.saturating_sub(epoch_ns(sent)) as u64
        ));
    }
    node.stop().await;
    // The same through gearmand: SUBMIT_JOB, then its WORK_COMPLETE.
    let (mut gm_entry, mut gm_result) = (Vec::new(), Vec::new());
    if let Some(gearmand) = &gearman_latency {
        let address = gearmand.address();
        let node = start_gearman_node(&address, plugins.path(), 4).await;
        let mut client = tokio::net::TcpStream::connect(&address).await.unwrap();
        client.set_nodelay(true).unwrap();
        for _ in 0..samples {
            tokio::time::sleep(Duration::from_millis(5)).await;
            let sent = std::time::SystemTime::now();
            let started = Instant::now();
            let submit = gm::request(Gm::SubmitJob, &[b"clock", b"", b""]);
            tokio::io::AsyncWriteExt::write_all(&mut client, &submit)
                .await
                .unwrap();
            let output = loop {
                let packet = gm::read_packet(&mut client).await.unwrap();
                if packet.kind == Gm::WorkComplete as u32 {
                    break packet.args(2).unwrap()[1].to_vec();
                }
            };
            gm_result.push(started.elapsed());
            let entered: u128 = String::from_utf8_lossy(&output).parse().unwrap();
            gm_entry.push(Duration::from_nanos(
                entered.saturating_sub(epoch_ns(sent)) as u64
            ));
        }
        node.stop().await;
    }
    let mut pairs = vec![
        (
            "latency: qless put → guest entry, p50 (peer: own queue)",
            entry,
            own_entry.clone(),
        ),
        (
            "latency: qless put → completed event, p50 (peer: own queue's result)",
            result,
            own_result.clone(),
        ),
    ];
    if !gm_entry.is_empty() {
        pairs.push((
            "latency: Gearman SUBMIT_JOB → guest entry, p50 (peer: own queue)",
            gm_entry,
            own_entry,
        ));
        pairs.push((
            "latency: Gearman SUBMIT_JOB → WORK_COMPLETE, p50 (peer: own queue's result)",
            gm_result,
            own_result,
        ));
    }
    for (what, mut ours, mut own) in pairs {
        let (ours, own) = (&mut ours, &mut own);
        let (p50, p99) = percentiles(ours);
        let (own50, own99) = percentiles(own);
        let the_time = |ours: Duration, own: Duration| {
            format!("{:.2}× the time", ours.as_secs_f64() / own.as_secs_f64())
        };
        rows.push(row(what, ms(p50), ms(own50), the_time(p50, own50)));
        rows.push(row("  same, p99", ms(p99), ms(own99), the_time(p99, own99)));
    }
}
