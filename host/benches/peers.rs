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
//!    API against the Rust client's direct wait;
//! 9. flows: submitting a parent with 1,000 children, and running it end to end, against
//!    BullMQ's FlowProducer;
//! 10. groups: a drain over 10,000 groups against the same drain without groups, and how
//!     many leases until the jobs of 99 small groups have all started beside one of 100,000;
//! 11. replicas: enqueue and drain on a primary with one replica, with and without
//!     `--min-replicas 1`.
//! 12. batch: a batch plugin's drain, up to 100 jobs per instance against one per instance.
//! 13. tracing: a worker's CPU per job with span export off, on with every job sampled,
//!     and on with 10 % sampled.
//! 14. encryption: enqueue and drain with job data sealed (a key file, `config --encrypt`)
//!     against the same plain, and the node's CPU per job both ways.
//!
//! BullMQ runs from `bench/bullmq/run.sh` (Node.js); set `WASMGEAR_BENCH_SKIP_BULLMQ=1` to
//! leave it out, `WASMGEAR_BENCH_QUICK=1` for a short smoke run, and
//! `WASMGEAR_BENCH_ONLY=queue,remote` to run only some sections (isolation, bullmq, queue,
//! clients, ceiling, remote, cluster, steady, sources, flows, groups, replicas, batch,
//! tracing, encryption).

#[path = "peers/batch_plugins.rs"]
mod batch_plugins;
#[path = "peers/bullmq.rs"]
mod bullmq;
#[path = "peers/ceiling.rs"]
mod ceiling;
#[path = "peers/clients.rs"]
mod clients;
#[path = "peers/cluster.rs"]
mod cluster;
mod common;
#[path = "peers/encryption.rs"]
mod encryption;
#[path = "peers/flows.rs"]
mod flows;
#[path = "peers/groups.rs"]
mod groups;
#[path = "peers/isolation.rs"]
mod isolation;
#[path = "peers/node.rs"]
mod node;
#[path = "peers/queue.rs"]
mod queue;
#[path = "peers/remote.rs"]
mod remote;
#[path = "peers/replicas.rs"]
mod replicas;
#[path = "peers/sources.rs"]
mod sources;
#[path = "peers/steady.rs"]
mod steady;
#[path = "peers/tracing.rs"]
mod tracing;

use std::time::{Duration, Instant};

use wasmgear_redis_server::RedisServer;

use bullmq::run_bullmq;
use ceiling::{redis_ceiling, redis_version};
use cluster::cluster;
use isolation::isolation;
use node::start_node;
use queue::queue_numbers;
use remote::remote;
use sources::sources;
use steady::steady;

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
    eprintln!("[build] wasmgear's {} build", build_profile());

    // WASMGEAR_BENCH_ONLY=queue,remote (any of isolation, bullmq, queue, clients, ceiling,
    // remote, cluster, steady, sources, flows, groups, replicas, batch, tracing, encryption)
    // runs only those sections.
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
    if runs("flows") {
        eprintln!("[flows] a parent after 1,000 children: submit, and fan-out/fan-in end to end");
        rt.block_on(flows::flows(&plan, &url, bullmq.as_ref(), &mut rows));
    }
    if runs("groups") {
        eprintln!(
            "[groups] fairness inside a function: a drain over 10,000 groups, and one big group beside 99 small"
        );
        rt.block_on(groups::groups(&plan, &url, &mut rows));
    }
    if runs("replicas") {
        eprintln!("[replicas] what --min-replicas 1 costs: a primary with one replica");
        rt.block_on(replicas::replicas(&plan, &mut rows));
    }
    if runs("batch") {
        eprintln!(
            "[batch] a batch plugin: {} no-op jobs, up to 100 per instance vs one per instance",
            plan.jobs * 2
        );
        rt.block_on(batch_plugins::batch_plugins(
            &plan,
            &url,
            redis.port(),
            &mut rows,
        ));
    }
    if runs("tracing") {
        eprintln!("[tracing] a worker's CPU per job, span export off and on");
        rt.block_on(tracing::tracing(&plan, &url, &mut rows));
    }
    if runs("encryption") {
        eprintln!("[encryption] what sealing job data costs: enqueue and drain, sealed vs plain");
        rt.block_on(encryption::encryption(&plan, &url, redis.port(), &mut rows));
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
    println!(
        "(wasmgear: the {} build, scripts/bench; WASMGEAR_BENCH_BUILD=dev for the tests' build)",
        build_profile()
    );
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

/// Which profile built this benchmark (and the `wasmgear` it runs): `release` (opt-level
/// 3, thin LTO) or `dev` (the tests' build: our own code at opt-level 1).
fn build_profile() -> &'static str {
    if cfg!(debug_assertions) {
        "dev"
    } else {
        "release"
    }
}

fn per_s(rate: f64) -> String {
    format!("{:.0} /s", rate)
}

fn times(ours: f64, theirs: f64) -> String {
    format!("{:.2}×", ours / theirs)
}
