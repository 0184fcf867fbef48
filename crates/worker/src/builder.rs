//! One way to assemble a worker node from a Redis URL and a plugin directory, used alike by
//! `wasmgear worker`, the tests and the benchmarks.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::plugins::{self, LoadProblem, PluginRegistry, RegistryError};
use crate::{JobSource, Metrics, WorkerConfig, new_worker_id};
use wasmgear_client::{QueueError, WorkerQueue};
use wasmgear_proto::crypto::KeyRing;
use wasmgear_proto::signing::Trust;
use wasmgear_runtime::{Runtime, RuntimeConfig};

/// The longest retry backoff when nothing else is said.
const DEFAULT_BACKOFF_MAX: Duration = wasmgear_client::worker_queue::DEFAULT_BACKOFF_MAX;

/// What can stop a worker node from being assembled.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// The WebAssembly engine could not be set up.
    #[error("cannot start the WebAssembly runtime: {0}")]
    Runtime(String),
    /// The plugin directory could not be read, or held no usable plugin while nothing could
    /// come later (not watched, no deployed plugins).
    #[error(transparent)]
    Plugins(#[from] RegistryError),
    /// A function to serve has no plugin in the directory, and none can come later.
    #[error(
        "function {function} is to be served (--functions), but {dir:?} has no {function}.wasm that loads"
    )]
    UnknownFunction {
        /// The function asked for.
        function: String,
        /// The plugin directory.
        dir: PathBuf,
    },
    /// Redis could not be reached.
    #[error(transparent)]
    Queue(#[from] QueueError),
    /// Neither a plugin directory nor the deployed plugins were given.
    #[error(
        "no plugins to serve: give a plugin directory (--plugins) or serve deployed plugins (--plugins-from-redis)"
    )]
    NoPlugins,
}

/// Sets up a [`Worker`]: where its jobs come from, its plugins, and how it behaves.
#[derive(Debug, Clone)]
pub struct WorkerBuilder {
    plugins: Option<PathBuf>,
    from_redis: bool,
    trust: Trust,
    keys: Option<(Arc<KeyRing>, bool)>,
    id: Option<String>,
    runtime: RuntimeConfig,
    config: WorkerConfig,
    backoff: (Duration, Duration),
    strict_order: bool,
    min_replicas: wasmgear_client::MinReplicas,
    watch: bool,
}

impl WorkerBuilder {
    /// A worker serving the plugins in `plugins` (watched for changes), with the default
    /// runtime and node settings.
    pub fn new(plugins: impl Into<PathBuf>) -> Self {
        WorkerBuilder {
            plugins: Some(plugins.into()),
            from_redis: false,
            trust: Trust::default(),
            keys: None,
            id: None,
            runtime: RuntimeConfig::default(),
            config: WorkerConfig::default(),
            backoff: (
                wasmgear_client::worker_queue::DEFAULT_BACKOFF_BASE,
                DEFAULT_BACKOFF_MAX,
            ),
            strict_order: false,
            min_replicas: wasmgear_client::MinReplicas::default(),
            watch: true,
        }
    }

    /// A worker with no plugin directory: call [`plugins_from_redis`](Self::plugins_from_redis).
    pub fn without_directory() -> Self {
        WorkerBuilder {
            plugins: None,
            ..WorkerBuilder::new(PathBuf::new())
        }
    }

    /// Also serves the plugins deployed in Redis (`wasmgear deploy`), kept up to date while
    /// the worker runs; the directory's plugin wins for a function both have (see
    /// [`crate::deployed`]).
    pub fn plugins_from_redis(mut self, yes: bool) -> Self {
        self.from_redis = yes;
        self
    }

    /// Loads only plugins signed by a key `trust` names, from the directory and from the
    /// store alike (default: every plugin); see [`wasmgear_proto::signing`].
    pub fn trust(mut self, trust: Trust) -> Self {
        self.trust = trust;
        self
    }

    /// Opens encrypted jobs' inputs with `keys` and seals what it writes of them (output,
    /// error, log, checkpoint); seals the inputs of the jobs it enqueues (children,
    /// schedules' jobs) for functions that store only encrypted input, or for all if
    /// `all`. See [`wasmgear_proto::crypto`].
    pub fn encryption(mut self, keys: Arc<KeyRing>, all: bool) -> Self {
        self.keys = Some((keys, all));
        self
    }

    /// The worker's id in the queue (default: [`new_worker_id`]).
    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }

    /// The runtime's settings (instances, limits, fuel, compile cache).
    pub fn runtime(mut self, config: RuntimeConfig) -> Self {
        self.runtime = config;
        self
    }

    /// The node's settings (concurrency, lease time, grace, functions).
    pub fn config(mut self, config: WorkerConfig) -> Self {
        self.config = config;
        self
    }

    /// The retry backoff of failed jobs: about `base` before the second attempt, doubling,
    /// at most `max`.
    pub fn retry_backoff(mut self, base: Duration, max: Duration) -> Self {
        self.backoff = (base, max);
        self
    }

    /// Has each completion (and each schedule's enqueue) confirmed by `min` replicas before
    /// it counts (see [`wasmgear_client::replication`]).
    pub fn min_replicas(mut self, min: wasmgear_client::MinReplicas) -> Self {
        self.min_replicas = min;
        self
    }

    /// Leases from the functions strictly in the order of [`WorkerConfig::functions`].
    pub fn strict_order(mut self, strict: bool) -> Self {
        self.strict_order = strict;
        self
    }

    /// Whether to watch the plugin directory and load, swap or drop plugins as they change
    /// (default: yes).
    pub fn watch(mut self, watch: bool) -> Self {
        self.watch = watch;
        self
    }

    /// Starts the runtime and loads the plugin directory: everything that can be checked
    /// before Redis is reached. A directory with no usable plugin (empty, or every file
    /// refused) is an error only when nothing can come later: it is not watched and no
    /// deployed plugins are served. Otherwise the worker starts serving nothing (it says so)
    /// and serves each plugin as it appears; likewise for a function of
    /// [`WorkerConfig::functions`] that has no plugin yet.
    pub fn load(self) -> Result<LoadedWorker, BuildError> {
        let runtime = Arc::new(
            Runtime::new(self.runtime).map_err(|e| BuildError::Runtime(format!("{e:#}")))?,
        );
        // Plugins may come later: deployed, or put into the watched directory (a volume
        // synced after the start, a drop-in directory).
        let later = self.from_redis || self.watch;
        let (registry, problems) = match &self.plugins {
            Some(dir) => {
                PluginRegistry::load_dir_trusting(&runtime, dir, later, self.trust.clone())?
            }
            None if self.from_redis => (PluginRegistry::trusting(self.trust.clone()), Vec::new()),
            None => return Err(BuildError::NoPlugins),
        };
        let available = registry.functions();
        if let Some(dir) = &self.plugins {
            let missing: Vec<String> = (self.config.functions.iter())
                .filter(|f| !available.contains(f))
                .map(|f| f.to_string())
                .collect();
            match missing.first() {
                None => {}
                Some(function) if !later => {
                    return Err(BuildError::UnknownFunction {
                        function: function.clone(),
                        dir: dir.clone(),
                    });
                }
                Some(_) => tracing::warn!(
                    functions = ?missing,
                    dir = ?dir,
                    "functions to be served (--functions) have no plugin yet: each is served once FUNCTION.wasm appears in the directory{}",
                    if self.from_redis { " or is deployed" } else { "" }
                ),
            }
            if available.is_empty() && !self.from_redis {
                tracing::warn!(
                    dir = ?dir,
                    "no plugin in the directory yet: serving nothing until a FUNCTION.wasm that loads appears there"
                );
            }
        }
        Ok(LoadedWorker {
            id: self.id.clone().unwrap_or_else(new_worker_id),
            builder: WorkerBuilder {
                runtime: RuntimeConfig::default(),
                ..self
            },
            runtime,
            registry: Arc::new(registry),
            problems,
            deployed: None,
            scheduler: None,
        })
    }

    /// [`load`](Self::load)s, then [`connect`](LoadedWorker::connect)s to the Redis at `url`.
    pub async fn build(self, url: &str) -> Result<Worker, BuildError> {
        self.load()?.connect(url).await
    }
}

/// A worker whose runtime and plugins are ready, not yet connected to Redis.
pub struct LoadedWorker {
    id: String,
    builder: WorkerBuilder,
    runtime: Arc<Runtime>,
    registry: Arc<PluginRegistry>,
    problems: Vec<LoadProblem>,
    deployed: Option<wasmgear_client::Client>,
    scheduler: Option<wasmgear_client::Client>,
}

impl LoadedWorker {
    /// If the worker serves deployed plugins, connects to the store in the Redis at `url`
    /// and loads the current versions, so that the worker serves them from its first lease.
    /// A version that cannot be loaded is reported (see [`PluginRegistry::errors`]) and
    /// does not stop the worker.
    pub async fn load_deployed(mut self, url: &str) -> Result<Self, BuildError> {
        if !self.builder.from_redis || self.deployed.is_some() {
            return Ok(self);
        }
        let client = wasmgear_client::Client::connect(url).await?;
        let report = crate::deployed::sync(&client, &self.runtime, &self.registry).await?;
        crate::deployed::log(&report);
        if self.registry.functions().is_empty() {
            match (&self.builder.plugins, self.builder.watch) {
                (Some(dir), true) => tracing::warn!(
                    dir = ?dir,
                    "no plugin deployed nor in the directory yet: serving nothing until `wasmgear deploy FUNCTION.wasm`, or until a FUNCTION.wasm that loads appears in the directory"
                ),
                _ => tracing::warn!(
                    "no plugin deployed yet: serving nothing until `wasmgear deploy FUNCTION.wasm`"
                ),
            }
        }
        self.deployed = Some(client);
        Ok(self)
    }

    /// The files of the plugin directory that were not loaded, and why.
    pub fn problems(&self) -> &[LoadProblem] {
        &self.problems
    }

    /// The plugins loaded.
    pub fn registry(&self) -> &Arc<PluginRegistry> {
        &self.registry
    }

    /// The worker's id, for the sources it connects to.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The retry backoff of failed jobs (base, max), for sources that schedule retries.
    pub fn retry_backoff(&self) -> (Duration, Duration) {
        self.builder.backoff
    }

    /// Connects to wasmgear's own queue on the Redis (or Redis Cluster) at `url` (and to
    /// its deployed plugins, when asked: [`load_deployed`](Self::load_deployed)).
    pub async fn connect(self, url: &str) -> Result<Worker, BuildError> {
        let mut this = self.load_deployed(url).await?;
        // Workers of wasmgear's own queue fire the recurring schedules.
        let scheduler = match &this.deployed {
            Some(client) => client.clone(),
            None => wasmgear_client::Client::connect(url).await?,
        };
        let mut scheduler = scheduler.with_min_replicas(this.builder.min_replicas);
        let mut queue = WorkerQueue::connect(url, this.id.clone())
            .await?
            .with_backoff(this.builder.backoff.0, this.builder.backoff.1)
            .with_strict_order(this.builder.strict_order)
            .with_min_replicas(this.builder.min_replicas);
        if let Some((keys, all)) = &this.builder.keys {
            scheduler = scheduler.with_keys(keys.clone(), *all);
            queue = queue.with_keys(keys.clone());
        }
        this.scheduler = Some(scheduler);
        tracing::info!(
            worker_id = this.id,
            redis = wasmgear_client::connection::redact(url),
            plugins = ?this.builder.plugins,
            from_redis = this.builder.from_redis,
            "connected"
        );
        Ok(this.with_source(queue))
    }

    /// Serves the jobs of `source` (connected with this worker's [`id`](Self::id)).
    pub fn with_source<S: JobSource>(self, source: S) -> Worker<S> {
        let LoadedWorker {
            id,
            builder,
            runtime,
            registry,
            problems,
            deployed,
            scheduler,
        } = self;
        Worker {
            deployed,
            scheduler,
            id,
            queue: source,
            runtime,
            registry,
            problems,
            config: builder.config,
            plugins: builder.plugins,
            watch: builder.watch,
            metrics: Arc::default(),
            metrics_listener: None,
        }
    }
}

/// A worker node ready to run, serving the jobs of `S`.
pub struct Worker<S: JobSource = WorkerQueue> {
    id: String,
    queue: S,
    runtime: Arc<Runtime>,
    registry: Arc<PluginRegistry>,
    problems: Vec<LoadProblem>,
    config: WorkerConfig,
    plugins: Option<PathBuf>,
    watch: bool,
    metrics: Arc<Metrics>,
    metrics_listener: Option<tokio::net::TcpListener>,
    deployed: Option<wasmgear_client::Client>,
    scheduler: Option<wasmgear_client::Client>,
}

impl<S: JobSource> Worker<S> {
    /// Serves the worker's metrics (`/metrics`), `/healthz` and `/readyz` on `listener`
    /// while it runs (see [`crate::metrics`]).
    pub fn with_metrics(mut self, listener: tokio::net::TcpListener) -> Self {
        self.metrics_listener = Some(listener);
        self
    }

    /// Its metrics, as `/metrics` serves them.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// Its id in the queue.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The plugins it serves.
    pub fn registry(&self) -> &Arc<PluginRegistry> {
        &self.registry
    }

    /// Its runtime.
    pub fn runtime(&self) -> &Arc<Runtime> {
        &self.runtime
    }

    /// The plugin directory, if it has one.
    pub fn plugins(&self) -> Option<&Path> {
        self.plugins.as_deref()
    }

    /// The files of the plugin directory that were not loaded, and why.
    pub fn problems(&self) -> &[LoadProblem] {
        &self.problems
    }

    /// Runs the node (and the directory watch) until `shutdown` resolves and every job has
    /// ended or been handed back; then stops watching.
    pub async fn run(self, shutdown: impl Future<Output = ()>) {
        let stop_watching = CancellationToken::new();
        let deployed = self.deployed.map(|client| {
            let (runtime, registry) = (self.runtime.clone(), self.registry.clone());
            let stop = stop_watching.clone();
            tokio::spawn(async move {
                tokio::select! {
                    () = crate::deployed::watch(client, runtime, registry) => {},
                    () = stop.cancelled() => {}
                }
            })
        });
        let children = self.scheduler.clone();
        let scheduler = self.scheduler.map(|client| {
            let stop = stop_watching.clone();
            tokio::spawn(async move {
                tokio::select! {
                    () = crate::scheduler::run(client) => {},
                    () = stop.cancelled() => {}
                }
            })
        });
        let watcher = self.plugins.clone().filter(|_| self.watch).map(|dir| {
            let (runtime, registry) = (self.runtime.clone(), self.registry.clone());
            let stop = stop_watching.clone();
            tokio::spawn(async move {
                tokio::select! {
                    result = plugins::watch(runtime, registry, dir) => if let Err(error) = result {
                        tracing::error!(%error, "plugin directory not watched: restart the worker to load changes");
                    },
                    _ = stop.cancelled() => {}
                }
            })
        });
        let observe = crate::Observe {
            metrics: self.metrics,
            listener: self.metrics_listener,
            children,
        };
        crate::run_observed(
            self.queue,
            self.runtime,
            self.registry,
            self.config,
            observe,
            shutdown,
        )
        .await;
        stop_watching.cancel();
        if let Some(watcher) = watcher {
            let _ = watcher.await;
        }
        if let Some(deployed) = deployed {
            let _ = deployed.await;
        }
        if let Some(scheduler) = scheduler {
            let _ = scheduler.await;
        }
    }
}
