//! [`TestWorker`]: a worker node running in the test's own process on the library API
//! (`WorkerBuilder`), against a Redis or a Redis Cluster; stopped on request, aborted when
//! dropped.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use wasmgear_runtime::RuntimeConfig;
use wasmgear_worker::plugins::PluginRegistry;
use wasmgear_worker::{WorkerBuilder, WorkerConfig};

use crate::plugins::plugin_dir;
use crate::test_redis::TestRedis;

/// How long a stopping worker may take to let its jobs finish and deregister.
const STOPPED_WITHIN: Duration = Duration::from_secs(60);

/// A worker node running in this process on the library API.
pub struct TestWorker {
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
    /// The worker's plugin registry.
    pub registry: Arc<PluginRegistry>,
    /// The plugin directory, when the worker owns it.
    _plugins: Option<tempfile::TempDir>,
}

/// Knobs for [`TestWorker::start_with`].
#[derive(Clone)]
pub struct TestWorkerOptions {
    /// The node's configuration (concurrency, lease TTL, functions...).
    pub config: WorkerConfig,
    /// The first pause before a failed call to Redis is tried again (the longest is four
    /// times this).
    pub retry_backoff: Duration,
    /// The runtime's configuration (instances, limits, compile cache).
    pub runtime: RuntimeConfig,
    /// Watch the plugin directory (hot reload).
    pub watch: bool,
}

impl Default for TestWorkerOptions {
    fn default() -> Self {
        TestWorkerOptions {
            config: WorkerConfig {
                concurrency: 4,
                ..WorkerConfig::default()
            },
            retry_backoff: Duration::from_millis(50),
            runtime: RuntimeConfig {
                max_instances: 8,
                ..RuntimeConfig::default()
            },
            watch: false,
        }
    }
}

impl TestWorker {
    /// Starts a worker serving the named plugins against `redis`.
    pub async fn start(redis: &TestRedis, plugins: &[&str]) -> Self {
        Self::start_with(redis, plugins, TestWorkerOptions::default()).await
    }

    /// Starts a worker with explicit options.
    pub async fn start_with(
        redis: &TestRedis,
        plugins: &[&str],
        options: TestWorkerOptions,
    ) -> Self {
        Self::start_on(&redis.url(), plugin_dir(plugins), options).await
    }

    /// Starts a worker on the Redis (or cluster) at `url`, serving the plugins in `dir`,
    /// which it removes when dropped.
    pub async fn start_on(url: &str, dir: tempfile::TempDir, options: TestWorkerOptions) -> Self {
        let mut worker = Self::start_in(url, dir.path(), options).await;
        worker._plugins = Some(dir);
        worker
    }

    /// Starts a worker on the Redis (or cluster) at `url`, serving the plugins in `dir`,
    /// a directory the caller keeps (and may change: with `options.watch`, the worker
    /// reloads what changes there).
    pub async fn start_in(url: &str, dir: &Path, options: TestWorkerOptions) -> Self {
        let worker = WorkerBuilder::new(dir)
            .id("test-worker")
            .runtime(options.runtime)
            .config(options.config)
            .retry_backoff(options.retry_backoff, options.retry_backoff * 4)
            .watch(options.watch)
            .build(url)
            .await
            .expect("start the worker");
        assert!(
            worker.problems().is_empty(),
            "plugins refused: {:?}",
            worker.problems()
        );
        let registry = worker.registry().clone();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(worker.run(async {
            let _ = stopped.await;
        }));
        TestWorker {
            stop: Some(stop),
            task: Some(task),
            registry,
            _plugins: None,
        }
    }

    /// Asks the worker to shut down and waits until it has.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            tokio::time::timeout(STOPPED_WITHIN, task)
                .await
                .expect("worker stopped within 60 s")
                .expect("worker task did not panic");
        }
    }
}

impl Drop for TestWorker {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}
