//! Per-job cost and end-to-end throughput, printed as a table (`cargo bench -p wasmgear`).
//!
//! 1. runtime only: a fresh instance of the trivial `echo` component, one call, drop, with
//!    every limit on (pooling allocator, epoch deadline, memory limiter);
//! 2. the same through the worker node and a private `redis-server`: jobs enqueued in bulk,
//!    leased, run and completed, measured from the first enqueue to the last completion;
//! 3. the queue alone: enqueue one by one and in bulk, leases per second, and the pick-up
//!    latency of an idle worker (enqueue to start, on Redis' own clock).

use std::sync::Arc;
use std::time::{Duration, Instant};

use wasmgear::job::{CancelSignal, FunctionName, JobId, JobInfo, LogLevel, Outcome, Progress};
use wasmgear::plugins::PluginRegistry;
use wasmgear::queue::{Client, EnqueueOptions, JobState, WorkerQueue};
use wasmgear::redis_server::RedisServer;
use wasmgear::runtime::{JobHooks, Runtime, RuntimeConfig};
use wasmgear::worker::{self, WorkerConfig};

struct Quiet;

impl JobHooks for Quiet {
    fn progress(&self, _: Progress) {}
    fn log(&self, _: LogLevel, _: String) {}
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        per_job().await;
        end_to_end().await;
        queue_alone().await;
    });
}

async fn per_job() {
    let runtime = Runtime::new(RuntimeConfig {
        max_instances: 4,
        ..RuntimeConfig::default()
    })
    .unwrap();
    let echo = FunctionName::new("echo").unwrap();
    let plugin = runtime
        .load_plugin(
            echo.clone(),
            std::path::Path::new(wasmgear_test_artifacts::ECHO),
        )
        .unwrap();
    let info = JobInfo {
        id: JobId {
            function: echo,
            seq: 1,
        },
        attempt: 1,
        max_attempts: 1,
        enqueued_at_ms: 0,
        timeout_ms: 60_000,
    };
    let hooks: Arc<dyn JobHooks> = Arc::new(Quiet);
    let input = vec![7u8; 64];
    for _ in 0..200 {
        runtime
            .run(&plugin, &info, &input, hooks.clone(), CancelSignal::new())
            .await;
    }
    let n = 5000;
    let started = Instant::now();
    for _ in 0..n {
        let outcome = runtime
            .run(&plugin, &info, &input, hooks.clone(), CancelSignal::new())
            .await;
        assert!(matches!(outcome, Outcome::Succeeded(ref o) if o == &input));
    }
    let per = started.elapsed() / n;
    println!(
        "runtime: fresh instance + call + drop of echo, limits on: {:>8.1} µs/job ({n} jobs)",
        per.as_secs_f64() * 1e6
    );
}

async fn end_to_end() {
    let dir = tempfile::tempdir().unwrap();
    let redis = RedisServer::start(dir.path(), 0, &[]).unwrap();
    let plugins = tempfile::tempdir().unwrap();
    std::fs::copy(
        wasmgear_test_artifacts::ECHO,
        plugins.path().join("echo.wasm"),
    )
    .unwrap();
    for concurrency in [1usize, 16] {
        let runtime = Arc::new(
            Runtime::new(RuntimeConfig {
                max_instances: concurrency as u32 + 1,
                ..RuntimeConfig::default()
            })
            .unwrap(),
        );
        let (registry, _) = PluginRegistry::load_dir(&runtime, plugins.path()).unwrap();
        let mut queue = WorkerQueue::connect(&redis.url(), "bench").await.unwrap();
        queue.listen(&registry.functions()).await.unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let config = WorkerConfig {
            concurrency,
            ..WorkerConfig::default()
        };
        let node = tokio::spawn(worker::run(
            queue,
            runtime,
            Arc::new(registry),
            config,
            async {
                let _ = stopped.await;
            },
        ));

        let client = Client::connect(&redis.url()).await.unwrap();
        let echo = FunctionName::new("echo").unwrap();
        let n = 2000;
        let inputs: Vec<Vec<u8>> = (0..n).map(|i| format!("job {i}").into_bytes()).collect();
        let batch: Vec<(&[u8], EnqueueOptions)> = inputs
            .iter()
            .map(|i| (i.as_slice(), EnqueueOptions::default()))
            .collect();
        let started = Instant::now();
        let ids = client.enqueue_many(&echo, &batch).await.unwrap();
        let last = ids.last().unwrap().clone();
        let status = client
            .wait(&last, Some(Duration::from_secs(120)), |_| {})
            .await
            .unwrap();
        assert_eq!(status.record.state, JobState::Succeeded);
        // FIFO: when the last job is done every other one is leased; wait for them too.
        for id in &ids {
            while !client.status(id).await.unwrap().record.state.is_final() {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
        let elapsed = started.elapsed();
        println!(
            "end to end: {n} echo jobs, concurrency {concurrency:>2}: {:>8.0} jobs/s ({:.1} ms/job)",
            n as f64 / elapsed.as_secs_f64(),
            elapsed.as_secs_f64() * 1e3 / n as f64
        );
        let _ = stop.send(());
        node.await.unwrap();
    }
}

async fn queue_alone() {
    let dir = tempfile::tempdir().unwrap();
    let redis = RedisServer::start(dir.path(), 0, &[]).unwrap();
    let client = Client::connect(&redis.url()).await.unwrap();
    let options = EnqueueOptions::default();

    let single = FunctionName::new("single").unwrap();
    let n = 5000;
    let started = Instant::now();
    for _ in 0..n {
        client.enqueue(&single, b"x", &options).await.unwrap();
    }
    rate("enqueue, one at a time", n, started.elapsed());

    let parallel = FunctionName::new("parallel").unwrap();
    let started = Instant::now();
    let tasks: Vec<_> = (0..16)
        .map(|_| {
            let (client, f, options) = (client.clone(), parallel.clone(), options.clone());
            tokio::spawn(async move {
                for _ in 0..n / 16 {
                    client.enqueue(&f, b"x", &options).await.unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    rate(
        "enqueue, 16 clients at once",
        n / 16 * 16,
        started.elapsed(),
    );

    let bulk = FunctionName::new("bulk").unwrap();
    let batch: Vec<(&[u8], EnqueueOptions)> =
        (0..1000).map(|_| (&b"x"[..], options.clone())).collect();
    let started = Instant::now();
    for _ in 0..50 {
        client.enqueue_many(&bulk, &batch).await.unwrap();
    }
    rate("enqueue in bulk, 1000 per call", 50_000, started.elapsed());

    let worker = WorkerQueue::connect(&redis.url(), "bench").await.unwrap();
    let ttl = Duration::from_secs(60);
    let started = Instant::now();
    for _ in 0..n {
        let leases = worker
            .lease(std::slice::from_ref(&single), 1, ttl)
            .await
            .unwrap();
        assert_eq!(leases.len(), 1);
    }
    rate("lease, one job per call", n, started.elapsed());
    let started = Instant::now();
    let mut leased = 0;
    while leased < 50_000 {
        leased += worker
            .lease(std::slice::from_ref(&bulk), 100, ttl)
            .await
            .unwrap()
            .len();
    }
    rate("lease, 100 jobs per call", leased as u32, started.elapsed());

    // Pick-up latency: an idle worker node, one job at a time.
    let plugins = tempfile::tempdir().unwrap();
    std::fs::copy(
        wasmgear_test_artifacts::ECHO,
        plugins.path().join("echo.wasm"),
    )
    .unwrap();
    let runtime = Arc::new(
        Runtime::new(RuntimeConfig {
            max_instances: 4,
            ..RuntimeConfig::default()
        })
        .unwrap(),
    );
    let (registry, _) = PluginRegistry::load_dir(&runtime, plugins.path()).unwrap();
    let mut queue = WorkerQueue::connect(&redis.url(), "idle").await.unwrap();
    queue.listen(&registry.functions()).await.unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let node = tokio::spawn(worker::run(
        queue,
        runtime,
        Arc::new(registry),
        WorkerConfig::default(),
        async {
            let _ = stopped.await;
        },
    ));
    let echo = FunctionName::new("echo").unwrap();
    let mut latencies = Vec::new();
    for _ in 0..200 {
        tokio::time::sleep(Duration::from_millis(5)).await;
        let id = client.enqueue(&echo, b"x", &options).await.unwrap();
        let status = client
            .wait(&id, Some(Duration::from_secs(30)), |_| {})
            .await
            .unwrap();
        let started = status.record.history[0].started_ms.unwrap();
        latencies.push(started.saturating_sub(status.record.created_ms));
    }
    latencies.sort();
    println!(
        "pick-up latency of an idle worker (enqueue to start, Redis clock): median {} ms, p99 {} ms, max {} ms",
        latencies[latencies.len() / 2],
        latencies[latencies.len() * 99 / 100],
        latencies[latencies.len() - 1]
    );
    let _ = stop.send(());
    node.await.unwrap();
}

fn rate(what: &str, n: u32, elapsed: Duration) {
    println!(
        "{what:<40} {:>9.0} /s ({n} in {:.2} s)",
        n as f64 / elapsed.as_secs_f64(),
        elapsed.as_secs_f64()
    );
}
