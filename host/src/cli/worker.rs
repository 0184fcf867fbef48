//! `wasmgear worker`: run a worker node.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use super::{REDIS_URL_FILE, RedisArgs, parse_duration};
use wasmgear_client::worker_queue::DEFAULT_BACKOFF_MAX;
use wasmgear_proto::FunctionName;
use wasmgear_redis_server::RedisServer;
use wasmgear_runtime::{CompileCache, Limits, RuntimeConfig};
use wasmgear_sources::{
    ConnectError, ConnectOptions, RetryBackoff, SourceSpec, Sources, SourcesError,
};
use wasmgear_worker::{
    BuildError, DEFAULT_CONCURRENCY, JobSource, LoadedWorker, Worker, WorkerBuilder, WorkerConfig,
};

/// Options of `wasmgear worker`.
#[derive(Debug, clap::Args)]
pub struct WorkerArgs {
    #[command(flatten)]
    redis: RedisArgs,

    #[command(flatten)]
    replicas: super::ReplicaArgs,

    /// Plugin directory: every FUNCTION.wasm in it serves jobs of FUNCTION. It may start
    /// empty (a volume synced after the start, a drop-in directory): the worker then serves
    /// nothing until plugins appear there (unless --no-watch).
    #[arg(
        long,
        env = "WASMGEAR_PLUGINS",
        required_unless_present = "plugins_from_redis"
    )]
    plugins: Option<PathBuf>,

    /// Also serve the plugins deployed in Redis with `wasmgear deploy`, swapped in as soon
    /// as a new version is deployed; a function the --plugins directory also has is served
    /// from the directory.
    #[arg(long, env = "WASMGEAR_PLUGINS_FROM_REDIS")]
    plugins_from_redis: bool,

    #[command(flatten)]
    trust: super::signing::TrustArgs,

    /// A queue to serve: `wasmgear` (wasmgear's own), `gearmonkey`,
    /// `redis-work-queue:PREFIX=FUNCTION` (the items under key prefix PREFIX are jobs of
    /// FUNCTION), `worqr:QUEUE=FUNCTION` (the tasks of worqr queue QUEUE;
    /// `worqr:PREFIX:QUEUE=FUNCTION` under another key prefix than `worqr`) or
    /// `qless:QUEUE[,QUEUE...]` (qless queues, popped in that order; a job's klass names its
    /// function), each optionally followed by `@redis://HOST:PORT` to read it from another
    /// Redis than --redis; or `gearman://HOST[:PORT][,HOST[:PORT]...]` (a Gearman worker of
    /// those gearmand servers). Repeatable (the variable takes specs separated by spaces);
    /// default: wasmgear's own queue alone.
    #[arg(long = "source", env = "WASMGEAR_SOURCES", value_delimiter = ' ')]
    sources: Vec<SourceSpec>,

    /// Serve only these functions (comma-separated), leased in this order; default: every
    /// plugin in the directory.
    #[arg(long, env = "WASMGEAR_FUNCTIONS", value_delimiter = ',')]
    functions: Vec<FunctionName>,

    /// Lease strictly in the order of --functions (all jobs of the first before any of the
    /// second) instead of taking the functions in turn.
    #[arg(long, env = "WASMGEAR_STRICT_ORDER")]
    strict_order: bool,

    /// Do not watch the plugin directory (by default a new, changed or removed plugin is
    /// loaded, swapped in or dropped while the worker runs).
    #[arg(long, env = "WASMGEAR_NO_WATCH")]
    no_watch: bool,

    /// The most jobs run at once (1 to 1024).
    #[arg(long, env = "WASMGEAR_CONCURRENCY", default_value_t = DEFAULT_CONCURRENCY)]
    concurrency: usize,

    /// How long a lease lasts without a heartbeat; a job whose worker died runs again
    /// elsewhere after about this long.
    #[arg(long, env = "WASMGEAR_LEASE_TTL", default_value = "30s", value_parser = parse_duration)]
    lease_ttl: Duration,

    /// On SIGINT/SIGTERM, how long running jobs may finish before they are cancelled and
    /// handed back to the queue.
    #[arg(long, env = "WASMGEAR_SHUTDOWN_GRACE", default_value = "30s", value_parser = parse_duration)]
    shutdown_grace: Duration,

    /// How long a job asked to stop (cancelled, lease lost, shutdown) may keep running
    /// before it is stopped hard.
    #[arg(long, env = "WASMGEAR_CANCEL_GRACE", default_value = "5s", value_parser = parse_duration)]
    cancel_grace: Duration,

    /// The most memory a job's linear memory may grow to (`256MiB`, `1GiB`, or bytes);
    /// plugin manifests may only lower it.
    #[arg(long, env = "WASMGEAR_MEMORY_LIMIT", default_value_t = super::Size::of(wasmgear_runtime::engine::DEFAULT_MEMORY_BYTES))]
    memory_limit: super::Size,

    /// Where compiled plugins are cached, keyed by content and engine configuration
    /// [default: WASMGEAR_HOME/cache].
    #[arg(long, env = "WASMGEAR_CACHE_DIR")]
    cache_dir: Option<PathBuf>,

    /// The most disk the compile cache may use (`512MiB`, `2GiB`, or bytes); beyond it, the
    /// least recently used compiled plugins are deleted.
    #[arg(long, env = "WASMGEAR_CACHE_MAX_SIZE", default_value = "1GiB")]
    cache_max_size: super::Size,

    /// Compile every plugin instead of using the compile cache.
    #[arg(long, env = "WASMGEAR_NO_CACHE")]
    no_cache: bool,

    /// Meter fuel, so that plugin manifests can give jobs an instruction budget
    /// (`limits.fuel`); slows every job down somewhat.
    #[arg(long, env = "WASMGEAR_FUEL")]
    fuel: bool,

    /// The wait before the first retry of a failed job; it doubles on every further retry
    /// (at most an hour), and each wait is, at random, between half and all of that.
    #[arg(long, env = "WASMGEAR_RETRY_BACKOFF", default_value = "1s", value_parser = parse_duration)]
    retry_backoff: Duration,

    /// Serve Prometheus metrics at http://ADDR/metrics, and health checks at /healthz (the
    /// process is up) and /readyz (Redis answers and leasing is not stalled), e.g.
    /// `127.0.0.1:9464` (port 0: any free port; the address is logged).
    #[arg(long, env = "WASMGEAR_METRICS", value_name = "ADDR")]
    metrics: Option<std::net::SocketAddr>,

    /// Port of the embedded Redis (used when no Redis URL is given); 0 picks a free one.
    #[arg(long, env = "WASMGEAR_EMBEDDED_PORT", default_value_t = 0)]
    embedded_port: u16,
}

pub async fn run(args: WorkerArgs) -> anyhow::Result<i32> {
    let most = wasmgear_proto::limits::MAX_CONCURRENCY as usize;
    if args.concurrency == 0 || args.concurrency > most {
        return Err(super::usage(format!(
            "--concurrency must be 1 to {most} (jobs run at once by this worker; run more workers for more)"
        )));
    }
    if args.lease_ttl < Duration::from_millis(300)
        || args.lease_ttl > Duration::from_millis(wasmgear_proto::limits::MAX_DURATION_MS)
    {
        return Err(super::usage(
            "--lease-ttl must be 300ms to 10 years (heartbeats run every third of it)",
        ));
    }
    let runtime = RuntimeConfig {
        max_instances: u32::try_from(args.concurrency + 1).unwrap_or(u32::MAX),
        limits: Limits {
            cancel_grace: args.cancel_grace,
            memory_bytes: args.memory_limit.bytes(),
            ..Limits::default()
        },
        fuel: args.fuel,
        cache: (!args.no_cache).then(|| {
            CompileCache::new(
                args.cache_dir
                    .clone()
                    .unwrap_or_else(|| args.redis.home.join("cache")),
            )
            .with_max_bytes(args.cache_max_size.0)
        }),
    };
    // Empty --functions: every plugin, including those added to the directory later.
    let config = WorkerConfig {
        concurrency: args.concurrency,
        lease_ttl: args.lease_ttl,
        shutdown_grace: args.shutdown_grace,
        functions: args.functions.clone(),
        ..WorkerConfig::default()
    };
    // Plugins first: a directory that cannot be read, or that is empty and not watched,
    // starts no Redis.
    let builder = match &args.plugins {
        Some(dir) => WorkerBuilder::new(dir),
        None => WorkerBuilder::without_directory(),
    };
    let trust = args.trust.policy()?;
    let keys = args.redis.keys()?;
    if trust.is_enforced() {
        tracing::info!(keys = %trust, "running only plugins signed by these keys (--trust)");
    }
    let builder = match keys {
        Some(keys) => {
            tracing::info!(
                key = keys.current(),
                encrypt_all = args.redis.encrypt_all,
                "opening encrypted jobs and sealing what is written of them"
            );
            builder.encryption(keys, args.redis.encrypt_all)
        }
        None => builder,
    };
    let loaded = builder
        .plugins_from_redis(args.plugins_from_redis)
        .trust(trust)
        .runtime(runtime)
        .config(config)
        .retry_backoff(args.retry_backoff, DEFAULT_BACKOFF_MAX)
        .strict_order(args.strict_order)
        .min_replicas(args.replicas.min_replicas()?)
        .watch(!args.no_watch)
        .load()?;
    for problem in loaded.problems() {
        tracing::error!("{problem}");
    }
    // Bound before Redis is reached, so that a bad address stops the worker at once.
    let metrics = match args.metrics {
        Some(address) => {
            let listener = tokio::net::TcpListener::bind(address).await.map_err(|e| {
                super::usage(format!(
                    "--metrics {address}: cannot listen there: {e} (give a free port, or port 0 for any)"
                ))
            })?;
            let bound = listener.local_addr()?;
            tracing::info!(
                metrics = %format!("http://{bound}/metrics"),
                health = %format!("http://{bound}/healthz, http://{bound}/readyz"),
                "serving metrics and health checks"
            );
            Some(listener)
        }
        None => None,
    };

    let embedded = match &args.redis.url {
        Some(_) => None,
        None => Some(start_embedded(&args).await?),
    };
    let url = match &embedded {
        Some(server) => server.url(),
        None => args.redis.resolve()?,
    };
    if args.sources.is_empty() {
        let worker = loaded.connect(&url).await.map_err(|error| match error {
            // Unwrapped, so that the exit code says why.
            BuildError::Queue(error) => anyhow::Error::from(error),
            error => error.into(),
        })?;
        run_worker(with_metrics(worker, metrics), embedded, &args).await;
    } else {
        let loaded = loaded
            .load_deployed(&url)
            .await
            .map_err(|error| match error {
                BuildError::Queue(error) => anyhow::Error::from(error),
                error => error.into(),
            })?;
        let sources = connect_sources(&args, &loaded, &url).await?;
        let worker = with_metrics(loaded.with_source(sources), metrics);
        run_worker(worker, embedded, &args).await;
    }
    Ok(0)
}

/// `worker`, serving its metrics on `listener` when given.
fn with_metrics<S: JobSource>(
    worker: Worker<S>,
    listener: Option<tokio::net::TcpListener>,
) -> Worker<S> {
    match listener {
        Some(listener) => worker.with_metrics(listener),
        None => worker,
    }
}

/// Connects to every `--source`. Each one's jobs are served alike; the worker is listed in
/// the worker list of `url` even when wasmgear's own queue there is not among them.
async fn connect_sources(
    args: &WorkerArgs,
    loaded: &LoadedWorker,
    url: &str,
) -> anyhow::Result<Sources> {
    for function in args.sources.iter().filter_map(SourceSpec::bound_function) {
        if loaded.registry().get(function).is_none() {
            tracing::warn!(
                "no plugin serves {function} yet: its jobs wait until {function}.wasm appears"
            );
        }
    }
    let (base, max) = loaded.retry_backoff();
    let options = ConnectOptions {
        worker_id: loaded.id(),
        redis: url,
        backoff: RetryBackoff { base, max },
        strict_order: args.strict_order,
        min_replicas: args.replicas.min_replicas()?,
    };
    Sources::connect(&args.sources, options)
        .await
        .map_err(|error| match error {
            SourcesError::Twice(_) => super::usage(error.to_string()),
            SourcesError::Connect { label, error } => connect_error(error, &label),
            // Unwrapped, so that the exit code says why.
            SourcesError::WorkerList(ConnectError::Queue(error)) => error.into(),
            SourcesError::WorkerList(error) => error.into(),
        })
}

/// Why the source `label` did not start, with the exit code that says so.
fn connect_error(error: ConnectError, label: &str) -> anyhow::Error {
    match error {
        // Kept whole, so that the exit code says why.
        ConnectError::Queue(error) => anyhow::Error::from(error).context(format!("source {label}")),
        error @ ConnectError::Unreachable { .. } => {
            anyhow::Error::from(error).context(format!("source {label}"))
        }
        error => super::usage(format!("source {label}: {error}")),
    }
}

/// Runs `worker` until SIGINT or SIGTERM, keeping the embedded Redis (if any) up meanwhile,
/// and stops that Redis afterwards.
async fn run_worker<S: JobSource>(
    worker: Worker<S>,
    embedded: Option<Arc<RedisServer>>,
    args: &WorkerArgs,
) {
    let stop_supervising = tokio_util::sync::CancellationToken::new();
    let supervisor = embedded
        .clone()
        .map(|server| tokio::spawn(supervise(server, stop_supervising.clone())));
    worker.run(shutdown_signal()).await;

    // The supervisor stops between checks (never during a restart), before Redis is stopped.
    stop_supervising.cancel();
    if let Some(supervisor) = supervisor {
        supervisor.await.ok();
    }
    if let Some(server) = embedded {
        let _ = std::fs::remove_file(args.redis.home.join(REDIS_URL_FILE));
        tokio::task::spawn_blocking(move || server.stop())
            .await
            .ok();
        tracing::info!("embedded Redis stopped");
    }
}

/// Starts the embedded Redis and writes its URL where the CLI looks for it.
async fn start_embedded(args: &WorkerArgs) -> anyhow::Result<Arc<RedisServer>> {
    let dir = args.redis.home.join("redis");
    let port = args.embedded_port;
    let server = tokio::task::spawn_blocking(move || {
        RedisServer::start(
            &dir,
            port,
            &["--appendonly", "yes", "--appendfsync", "everysec"],
        )
    })
    .await??;
    let url_file = args.redis.home.join(REDIS_URL_FILE);
    std::fs::write(&url_file, server.url())
        .with_context(|| format!("cannot write {url_file:?}"))?;
    eprintln!(
        "wasmgear: started an embedded Redis at {url} (data in {dir:?}).\n\
         wasmgear: the CLI finds it through {url_file:?}; other clients: export WASMGEAR_REDIS_URL={url}",
        url = server.url(),
        dir = server.dir(),
    );
    Ok(Arc::new(server))
}

/// Restarts the embedded Redis whenever it dies, checking every second until `stop`.
async fn supervise(server: Arc<RedisServer>, stop: tokio_util::sync::CancellationToken) {
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
        let check = server.clone();
        match tokio::task::spawn_blocking(move || check.ensure_running()).await {
            Ok(Ok(true)) => tracing::warn!(
                url = server.url(),
                "the embedded Redis had died and was restarted"
            ),
            Ok(Ok(false)) => {}
            Ok(Err(error)) => tracing::error!(%error, "cannot restart the embedded Redis"),
            Err(_) => {}
        }
    }
}

/// Resolves on SIGINT (Ctrl-C) or SIGTERM.
pub(crate) async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    let terminate = async {
        match term.as_mut() {
            Some(term) => {
                term.recv().await;
            }
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = ctrl_c => {},
        _ = terminate => {},
    }
    tracing::info!("shutdown requested");
}
