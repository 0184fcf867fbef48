//! The worker nodes of the benchmark, in this process: one on wasmgear's own queue or on
//! any `--source` spec, and what feeding and draining them takes.

use std::path::Path;
use std::time::{Duration, Instant};

use wasmgear_client::{Client, EnqueueOptions};
use wasmgear_proto::FunctionName;
use wasmgear_runtime::RuntimeConfig;
use wasmgear_sources::RetryBackoff;
use wasmgear_sources::spec::{ConnectOptions, SourceSpec};
use wasmgear_worker::{JobSource, Worker, WorkerBuilder, WorkerConfig};

/// A worker node in this process serving the plugins in `dir`.
pub(crate) struct Node {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

/// The builder of every node of the benchmark: the plugins in `dir`, `concurrency` jobs at
/// once, no directory watch.
pub(crate) fn node_builder(dir: &Path, concurrency: usize) -> WorkerBuilder {
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

pub(crate) async fn start_node(url: &str, dir: &Path, concurrency: usize) -> Node {
    let worker = node_builder(dir, concurrency).build(url).await.unwrap();
    run_node(worker)
}

/// A node serving the queue `spec` names, as `wasmgear worker --source SPEC` would (the
/// same spec parser and the same trait object), on the Redis at `url` unless the spec
/// names another.
pub(crate) async fn start_source_node(
    url: &str,
    dir: &Path,
    concurrency: usize,
    spec: &str,
) -> Node {
    let spec: SourceSpec = spec.parse().unwrap();
    let loaded = node_builder(dir, concurrency).load().unwrap();
    let source = spec
        .connect(ConnectOptions {
            worker_id: loaded.id(),
            redis: url,
            backoff: RetryBackoff::default(),
            strict_order: false,
            min_replicas: Default::default(),
        })
        .await
        .unwrap();
    run_node(loaded.with_source(source))
}

pub(crate) fn run_node<S: JobSource>(worker: Worker<S>) -> Node {
    assert!(worker.problems().is_empty(), "{:?}", worker.problems());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(worker.run(async {
        let _ = stopped.await;
    }));
    Node { stop, task }
}

impl Node {
    pub(crate) async fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.task.await;
    }
}

/// Serves function `f` with the `echo` plugin from `dir`, paused until [`resume_and_drain`]
/// (its jobs are enqueued first, then drained in one go).
pub(crate) async fn paused_echo(client: &Client, dir: &Path, f: &FunctionName) {
    std::fs::copy(wasmgear_test_artifacts::ECHO, dir.join(format!("{f}.wasm"))).unwrap();
    client
        .configure(f, &[wasmgear_client::Setting::Paused(true)])
        .await
        .unwrap();
}

/// Resumes `f` and waits until none of its jobs is queued or running; the time it took.
pub(crate) async fn resume_and_drain(client: &Client, f: &FunctionName) -> Duration {
    let started = Instant::now();
    client
        .configure(f, &[wasmgear_client::Setting::Paused(false)])
        .await
        .unwrap();
    loop {
        let queue = client.queue(f).await.unwrap();
        if queue.queued == 0 && queue.running == 0 {
            return started.elapsed();
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Enqueues `jobs` no-op jobs of `function` in bulk (1000 per call); returns the time taken.
pub(crate) async fn bulk_enqueue(
    client: &Client,
    function: &FunctionName,
    jobs: usize,
) -> Duration {
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
pub(crate) async fn drain(
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
