//! What a worker node measures, and the address that serves it (`wasmgear worker --metrics
//! ADDR`): `/metrics` in the Prometheus text format, `/healthz` (the process is up) and
//! `/readyz` (the source answers and leasing is not stalled), for Prometheus and for an
//! orchestrator that restarts a wedged worker.
//!
//! A worker that serves nothing yet (an empty plugin directory, no plugin deployed) is
//! ready as long as its source answers: it is working as configured, waiting for plugins,
//! and a restart would not bring them sooner. `wasmgear_functions_served` is 0 meanwhile
//! (and its worker-list entry lists no function), for an alert that should fire.
//!
//! Counters and histograms on the job path are updated as jobs go (a label lookup and an
//! atomic add each); what can be read at any time (running jobs, free slots, plugins, memory,
//! reconnections) is read when scraped.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use prometheus_client::encoding::prometheus_text;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::JobSource;
use crate::node::Node;
use wasmgear_proto::FunctionName;
use wasmgear_proto::sync::{Locked, RwLocked};

/// The content type of the Prometheus text format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// How long `/readyz` waits for the source to answer.
const READY_TIMEOUT: Duration = Duration::from_secs(2);

/// Leasing counts as stalled (and `/readyz` says so) when a worker with free slots has not
/// completed a lease call for this many lease periods.
pub const STALLED_AFTER_LEASES: u32 = 3;

type Labels = Vec<(&'static str, String)>;

/// The calls to the source whose failures are counted, by `operation`.
const SOURCE_OPERATIONS: [&str; 6] = [
    "lease",
    "report",
    "heartbeat",
    "progress",
    "advertise",
    "maintain",
];

/// Upper bounds of the job run and queue-wait histograms, in seconds: 100 µs to an hour.
const JOB_SECONDS: [f64; 16] = [
    0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0, 30.0, 120.0, 600.0,
    3600.0,
];

fn job_histogram() -> Histogram {
    Histogram::new(JOB_SECONDS)
}

fn memory_histogram() -> Histogram {
    // 64 KiB to 4 GiB.
    Histogram::new(exponential_buckets(65536.0, 4.0, 9))
}

fn batch_histogram() -> Histogram {
    // 1 to 1024 jobs.
    Histogram::new(exponential_buckets(1.0, 2.0, 11))
}

fn round_trip_histogram() -> Histogram {
    // 50 µs to about 13 s.
    Histogram::new(exponential_buckets(0.000_05, 2.0, 19))
}

/// One function's metrics on the job path, looked up once per job event without allocating.
#[derive(Debug)]
pub(crate) struct PerFunction {
    started: Counter,
    succeeded: Counter,
    run: Histogram,
    wait: Histogram,
    memory: Histogram,
    instances: Counter,
    batch: Histogram,
}

impl PerFunction {
    /// A job starts, `waited_ms` after it was enqueued (first attempts only).
    pub(crate) fn started(&self, attempt: u32, waited_ms: u64) {
        self.started.inc();
        if attempt <= 1 {
            self.wait.observe(waited_ms as f64 / 1000.0);
        }
    }

    /// A job stopped running after `ran`.
    pub(crate) fn ran(&self, ran: Duration) {
        self.run.observe(ran.as_secs_f64());
    }

    /// A fresh instance was made for a job (or a batch) of the function.
    pub(crate) fn instance(&self) {
        self.instances.inc();
    }

    /// A batch of `jobs` jobs starts (a batch plugin's call).
    pub(crate) fn batch(&self, jobs: usize) {
        self.batch.observe(jobs as f64);
    }

    /// A job's linear memory reached `peak_bytes` at most.
    pub(crate) fn memory(&self, peak_bytes: usize) {
        self.memory.observe(peak_bytes as f64);
    }
}

/// A worker node's metrics.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    jobs_started: Family<Labels, Counter>,
    jobs_finished: Family<Labels, Counter>,
    run_seconds: Family<Labels, Histogram, fn() -> Histogram>,
    wait_seconds: Family<Labels, Histogram, fn() -> Histogram>,
    memory_bytes: Family<Labels, Histogram, fn() -> Histogram>,
    instances: Family<Labels, Counter>,
    batch_jobs: Family<Labels, Histogram, fn() -> Histogram>,
    instantiate_seconds: Histogram,
    round_trip_seconds: Family<Labels, Histogram, fn() -> Histogram>,
    source_errors: Family<Labels, Counter>,
    /// Each function's handles into the families above.
    functions: std::sync::RwLock<std::collections::HashMap<FunctionName, Arc<PerFunction>>>,
    lease_round_trip: Histogram,
    report_round_trip: Histogram,
    /// When the node started, for the age of the last lease.
    started: Instant,
    /// When the last lease call came back without an error, in ms since `started`.
    last_lease_ok_ms: AtomicU64,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// Fresh metrics, every counter at zero.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("wasmgear");
        let jobs_started = Family::<Labels, Counter>::default();
        registry.register(
            "jobs_started",
            "Jobs started on this worker, by function",
            jobs_started.clone(),
        );
        let jobs_finished = Family::<Labels, Counter>::default();
        registry.register(
            "jobs_finished",
            "Jobs that stopped running on this worker, by function, the state the queue put \
             them in (succeeded, scheduled for a retry, failed, cancelled, queued when handed \
             back; refused when the lease was lost; unreported when the queue could not be \
             told) and error class (none for a success)",
            jobs_finished.clone(),
        );
        let run_seconds = Family::new_with_constructor(job_histogram as fn() -> Histogram);
        registry.register(
            "job_run_seconds",
            "How long jobs ran on this worker (instance, call and drop), by function",
            run_seconds.clone(),
        );
        let wait_seconds = Family::new_with_constructor(job_histogram as fn() -> Histogram);
        registry.register(
            "job_queue_wait_seconds",
            "From a job's enqueue to the start of its first attempt here, by function (a \
             delayed job's delay included)",
            wait_seconds.clone(),
        );
        let memory_bytes = Family::new_with_constructor(memory_histogram as fn() -> Histogram);
        registry.register(
            "job_memory_bytes",
            "The most linear memory a job's instance had (all its memories together), by \
             function",
            memory_bytes.clone(),
        );
        let instances = Family::<Labels, Counter>::default();
        registry.register(
            "instances",
            "Fresh instances made on this worker, by function: one per job, one per batch for \
             a batch plugin",
            instances.clone(),
        );
        let batch_jobs = Family::new_with_constructor(batch_histogram as fn() -> Histogram);
        registry.register(
            "batch_jobs",
            "How many jobs each call of a batch plugin took, by function",
            batch_jobs.clone(),
        );
        // 2 µs to about 0.3 s.
        let instantiate_seconds = Histogram::new(exponential_buckets(0.000_002, 2.0, 18));
        registry.register(
            "instantiate_seconds",
            "From a job's start to its fresh instance being ready (store, WASI context, \
             instantiation)",
            instantiate_seconds.clone(),
        );
        let round_trip_seconds =
            Family::new_with_constructor(round_trip_histogram as fn() -> Histogram);
        registry.register(
            "source_round_trip_seconds",
            "Round trips to the queue, by operation: lease (a lease call) and report (a \
             finished job's result, with the next jobs it leases)",
            round_trip_seconds.clone(),
        );
        let source_errors = Family::<Labels, Counter>::default();
        // At zero from the start, so that a rate over them is defined before the first error.
        for operation in SOURCE_OPERATIONS {
            source_errors.get_or_create_owned(&vec![("operation", operation.to_string())]);
        }
        registry.register(
            "source_errors",
            "Calls to the queue (Redis, or another source) that failed, by operation \
             (lease, report, heartbeat, progress, advertise, maintain)",
            source_errors.clone(),
        );
        let operation = |name: &str| vec![("operation", name.to_string())];
        Metrics {
            registry,
            lease_round_trip: round_trip_seconds.get_or_create_owned(&operation("lease")),
            report_round_trip: round_trip_seconds.get_or_create_owned(&operation("report")),
            jobs_started,
            jobs_finished,
            run_seconds,
            wait_seconds,
            memory_bytes,
            instances,
            batch_jobs,
            instantiate_seconds,
            round_trip_seconds,
            source_errors,
            functions: Default::default(),
            started: Instant::now(),
            last_lease_ok_ms: AtomicU64::new(0),
        }
    }

    /// `function`'s handles, made on its first job.
    pub(crate) fn function(&self, function: &FunctionName) -> Arc<PerFunction> {
        let known = self.functions.read_locked();
        if let Some(handles) = known.get(function) {
            return handles.clone();
        }
        drop(known);
        let labels = function_labels(function);
        let mut finished = labels.clone();
        finished.push(("state", "succeeded".into()));
        finished.push(("error_class", "none".into()));
        let handles = Arc::new(PerFunction {
            started: self.jobs_started.get_or_create_owned(&labels),
            succeeded: self.jobs_finished.get_or_create_owned(&finished),
            run: self.run_seconds.get_or_create_owned(&labels),
            wait: self.wait_seconds.get_or_create_owned(&labels),
            memory: self.memory_bytes.get_or_create_owned(&labels),
            instances: self.instances.get_or_create_owned(&labels),
            batch: self.batch_jobs.get_or_create_owned(&labels),
        });
        self.functions
            .write_locked()
            .entry(function.clone())
            .or_insert(handles)
            .clone()
    }

    /// A job of `function` ended in `state` (as the queue says) with `error_class`.
    pub(crate) fn job_finished(&self, function: &FunctionName, state: &str, error_class: &str) {
        if state == "succeeded" && error_class == "none" {
            self.function(function).succeeded.inc();
            return;
        }
        self.jobs_finished
            .get_or_create(&vec![
                ("function", function.to_string()),
                ("state", state.to_string()),
                ("error_class", error_class.to_string()),
            ])
            .inc();
    }

    /// A job's instance was ready `took` after its start.
    pub(crate) fn instantiated(&self, took: Duration) {
        self.instantiate_seconds.observe(took.as_secs_f64());
    }

    /// A call to the source for `operation` took `took`.
    pub(crate) fn round_trip(&self, operation: &'static str, took: Duration) {
        let seconds = took.as_secs_f64();
        match operation {
            "lease" => self.lease_round_trip.observe(seconds),
            "report" => self.report_round_trip.observe(seconds),
            other => self
                .round_trip_seconds
                .get_or_create(&vec![("operation", other.to_string())])
                .observe(seconds),
        }
    }

    /// A call to the source for `operation` failed.
    pub(crate) fn source_error(&self, operation: &'static str) {
        self.source_errors
            .get_or_create(&vec![("operation", operation.to_string())])
            .inc();
    }

    /// A lease call came back without an error.
    pub(crate) fn leased(&self) {
        let ms = self.started.elapsed().as_millis() as u64;
        self.last_lease_ok_ms.store(ms, Ordering::Relaxed);
    }

    /// How long ago the last lease call came back without an error (or the node started).
    fn since_last_lease(&self) -> Duration {
        let last = Duration::from_millis(self.last_lease_ok_ms.load(Ordering::Relaxed));
        self.started.elapsed().saturating_sub(last)
    }
}

fn function_labels(function: &FunctionName) -> Labels {
    vec![("function", function.to_string())]
}

/// What the metrics address serves: the node, its slots, and how to reach its metrics.
struct Served<S> {
    node: Arc<Node<S>>,
    slots: Arc<Semaphore>,
}

impl<S> Clone for Served<S> {
    fn clone(&self) -> Self {
        Served {
            node: self.node.clone(),
            slots: self.slots.clone(),
        }
    }
}

/// Serves `/metrics`, `/healthz` and `/readyz` of `node` on `listener` until `stop`.
pub(crate) async fn serve<S: JobSource>(
    listener: tokio::net::TcpListener,
    node: Arc<Node<S>>,
    slots: Arc<Semaphore>,
    stop: CancellationToken,
) {
    let app = Router::new()
        .route("/metrics", axum::routing::get(scrape::<S>))
        .route("/healthz", axum::routing::get(healthz))
        .route("/readyz", axum::routing::get(readyz::<S>))
        .with_state(Served { node, slots });
    let served = axum::serve(listener, app)
        .with_graceful_shutdown(async move { stop.cancelled().await })
        .await;
    if let Err(error) = served {
        tracing::error!(%error, "the metrics address stopped serving");
    }
}

async fn scrape<S: JobSource>(State(served): State<Served<S>>) -> Response {
    let node = &served.node;
    // What is read now rather than counted as it happens.
    let mut now = Registry::with_prefix("wasmgear");
    let gauge = |value: i64| {
        let gauge = Gauge::<i64>::default();
        gauge.set(value);
        gauge
    };
    let running = node.running.locked().len();
    now.register(
        "running_jobs",
        "Jobs running on this worker now",
        gauge(running as i64),
    );
    now.register(
        "free_slots",
        "Slots free for more jobs now: concurrency minus the jobs running",
        gauge(node.config.concurrency.saturating_sub(running) as i64),
    );
    now.register(
        "concurrency",
        "The most jobs this worker runs at once",
        gauge(node.config.concurrency as i64),
    );
    now.register(
        "plugins_loaded",
        "Plugins loaded and serving now",
        gauge(node.registry.plugins().len() as i64),
    );
    now.register(
        "functions_served",
        "Functions this worker serves now (0: it serves nothing yet, e.g. an empty plugin \
         directory waiting for its first plugin)",
        gauge(node.serving().len() as i64),
    );
    let scans = Counter::<u64>::default();
    scans.inc_by(node.registry.scans());
    now.register(
        "plugin_dir_scans",
        "Scans of the plugin directory: at the start, after each change in it, and every 30 s",
        scans,
    );
    let loads = Family::<Labels, Counter>::default();
    let counts = node.registry.load_counts();
    for (result, count) in [
        ("loaded", counts.loaded),
        ("reloaded", counts.reloaded),
        ("failed", counts.failed),
    ] {
        loads
            .get_or_create(&vec![("result", result.to_string())])
            .inc_by(count);
    }
    now.register(
        "plugin_loads",
        "Plugin loads by result: loaded (first version of a file), reloaded (a new version \
         swapped in), failed (the previous version, if any, kept serving; a file that failed \
         is loaded again only once it has changed)",
        loads,
    );
    let reconnects = Counter::<u64>::default();
    reconnects.inc_by(node.source.reconnects());
    now.register(
        "source_reconnects",
        "How often the connection to the queue came back after it was lost",
        reconnects,
    );
    if let Some(spans) = wasmgear_telemetry::span_counts() {
        let counted = Family::<Labels, Counter>::default();
        for (result, count) in [
            ("exported", spans.exported()),
            ("dropped", spans.dropped()),
            ("failed", spans.failed()),
        ] {
            counted
                .get_or_create(&vec![("result", result.to_string())])
                .inc_by(count);
        }
        now.register(
            "trace_spans",
            "Spans this process exported over OTLP (only when the OTEL_* variables ask for it), \
             by result: exported, dropped (the queue to the collector was full: it is slow or \
             down; jobs never wait for it), failed (the collector refused them or did not \
             answer in time)",
            counted,
        );
    }
    if let Some(bytes) = resident_memory_bytes() {
        now.register(
            "resident_memory_bytes",
            "The worker process's resident memory",
            gauge(bytes as i64),
        );
    }
    let since_lease = Gauge::<f64, AtomicU64>::default();
    since_lease.set(node.metrics.since_last_lease().as_secs_f64());
    now.register(
        "seconds_since_last_lease",
        "Seconds since a lease call last came back without an error",
        since_lease,
    );
    let mut text = String::new();
    let encoded = prometheus_text::encode(&mut text, &node.metrics.registry)
        .and_then(|()| prometheus_text::encode(&mut text, &now));
    match encoded {
        Ok(()) => ([(header::CONTENT_TYPE, CONTENT_TYPE)], text).into_response(),
        Err(_) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            "the metrics could not be encoded",
        )
            .into_response(),
    }
}

/// 200 while the process serves requests.
async fn healthz() -> axum::Json<serde_json::Value> {
    axum::Json(serde_json::json!({ "status": "ok" }))
}

/// 200 when the source answers within [`READY_TIMEOUT`] and leasing is not stalled, else
/// 503 with the reason.
async fn readyz<S: JobSource>(
    State(served): State<Served<S>>,
) -> (StatusCode, axum::Json<serde_json::Value>) {
    let node = &served.node;
    let unready = |reason: String| {
        let body = serde_json::json!({ "status": "unready", "reason": reason });
        (StatusCode::SERVICE_UNAVAILABLE, axum::Json(body))
    };
    // (From the moment nothing more can be handed to the worker, a few milliseconds into
    // its shutdown.)
    if node.draining.load(std::sync::atomic::Ordering::SeqCst) {
        return unready(
            "shutting down: leasing and hand-offs have stopped; running jobs are finishing".into(),
        );
    }
    match tokio::time::timeout(READY_TIMEOUT, node.source.ping(READY_TIMEOUT)).await {
        Ok(Ok(())) => {}
        Ok(Err(error)) => return unready(format!("the queue does not answer: {error}")),
        Err(_) => {
            return unready(format!(
                "the queue did not answer within {} ms",
                READY_TIMEOUT.as_millis()
            ));
        }
    }
    let since = node.metrics.since_last_lease();
    if let Some(reason) = stalled(
        served.slots.available_permits(),
        since,
        node.config.lease_ttl,
    ) {
        return unready(reason);
    }
    (
        StatusCode::OK,
        axum::Json(serde_json::json!({ "status": "ready" })),
    )
}

/// Why leasing counts as stalled: slots are free, yet no lease call came back for more than
/// [`STALLED_AFTER_LEASES`] lease periods. (A worker whose every slot is busy leases nothing,
/// rightly.)
fn stalled(free_slots: usize, since_lease: Duration, lease_ttl: Duration) -> Option<String> {
    (free_slots > 0 && since_lease > lease_ttl * STALLED_AFTER_LEASES).then(|| {
        format!(
            "leasing is stalled: no lease call came back for {} s with {free_slots} slots free \
             (more than {STALLED_AFTER_LEASES} lease periods of {} s)",
            since_lease.as_secs(),
            lease_ttl.as_secs()
        )
    })
}

/// The process's resident memory, from `/proc/self/status` (Linux); `None` elsewhere.
fn resident_memory_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kib: u64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::stalled;

    #[test]
    fn leasing_is_stalled_only_with_free_slots_past_three_lease_periods() {
        let ttl = Duration::from_secs(30);
        assert_eq!(stalled(4, Duration::from_secs(90), ttl), None);
        let reason = stalled(4, Duration::from_secs(91), ttl).expect("stalled");
        assert!(reason.contains("91 s with 4 slots free"), "{reason}");
        // Every slot busy: nothing to lease for.
        assert_eq!(stalled(0, Duration::from_secs(3600), ttl), None);
    }

    #[test]
    fn a_fresh_node_counts_from_its_start() {
        let metrics = super::Metrics::new();
        assert!(metrics.since_last_lease() < Duration::from_secs(60));
        metrics.leased();
        assert!(metrics.since_last_lease() < Duration::from_secs(60));
    }
}
