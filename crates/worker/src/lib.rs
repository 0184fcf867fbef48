//! The worker node: leases jobs from a [`JobSource`], runs each in the [`Runtime`], keeps
//! its lease alive, forwards its progress, and reports how it ended.
//!
//! The only room that knows both the queue and the runtime. Shutdown is a parameter:
//! when it resolves the node stops leasing, lets running jobs finish for a grace period,
//! then cancels the rest and hands them back to the source.

pub mod builder;
mod children;
pub mod deployed;
pub mod metrics;
pub mod plugins;
pub mod scheduler;
pub mod source;

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio::task::JoinSet;
use tracing::Instrument;

pub use builder::{BuildError, LoadedWorker, Worker, WorkerBuilder};
pub use metrics::Metrics;
pub use source::{JobSource, SourceError};
use tokio_util::sync::CancellationToken;

use wasmgear_client as queue;
use wasmgear_proto as job;
use wasmgear_runtime as runtime;

use crate::job::{
    AttemptNotes, Completion, DEFAULT_MAX_ATTEMPTS, DEFAULT_TIMEOUT, ErrorClass, FunctionName,
    JobFailure, JobId, Lease, LeaseRequest, LeaseStatus, LogLevel, Outcome, Progress, WorkerAd,
};
use crate::plugins::PluginRegistry;
use crate::runtime::{CancelReason, CancelSignal, InFlight, JobHooks, Plugin, Runtime};

/// Jobs run at once when nothing else is said.
pub const DEFAULT_CONCURRENCY: usize = 16;
/// The most lease calls on their way at once.
const MAX_LEASE_CALLS: usize = 2;

/// A job's report on its way: the jobs leased with it, and how many it asked for.
type Report = std::pin::Pin<Box<dyn Future<Output = (Vec<Lease>, usize)> + Send>>;

/// The longest a job leased ahead waits in its slot (at most a quarter of the lease): once
/// it has waited this long, it and those behind it are handed back for another slot or
/// worker to take. Only a job that ran for less than half of it leases ahead. Short: jobs
/// held ahead only bridge round trips to Redis, and a job handed back more than once (Redis
/// gives the oldest ready job first) must still start well within a lease.
pub const HOLD_AHEAD_MAX: Duration = Duration::from_millis(100);

/// The most jobs a slot runs or holds at once, the one running included. A slot whose jobs
/// are short keeps as many as would run in a quarter of [`HOLD_AHEAD_MAX`] (two at least):
/// it never waits on Redis, and each `complete` call reports and leases several jobs, which
/// costs Redis far less per job than one at a time.
pub const AHEAD_MAX: usize = 16;

/// A job that has stopped running, to be reported.
struct Finished {
    lease: Lease,
    outcome: Outcome,
    cancelled: Option<CancelReason>,
    notes: AttemptNotes,
}

/// A lease call on its way, with the slots it leases for.
type LeaseCall = std::pin::Pin<
    Box<dyn Future<Output = (Vec<OwnedSemaphorePermit>, Result<Vec<Lease>, SourceError>)> + Send>,
>;
/// How long a lease lasts without a heartbeat when nothing else is said.
pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(30);
/// How often an idle worker looks for work even without a wake-up event.
pub const DEFAULT_IDLE_POLL: Duration = Duration::from_secs(1);
/// How long running jobs may go on after shutdown starts, when nothing else is said.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(30);

/// How a worker node behaves.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// The most jobs running at once.
    pub concurrency: usize,
    /// How long a lease lasts; heartbeats renew it every third of that.
    pub lease_ttl: Duration,
    /// The safety-net poll interval of an idle worker.
    pub idle_poll: Duration,
    /// How long running jobs may finish after shutdown starts before they are cancelled
    /// and handed back.
    pub shutdown_grace: Duration,
    /// The functions to serve, in this order; empty: every plugin in the registry.
    pub functions: Vec<FunctionName>,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            concurrency: DEFAULT_CONCURRENCY,
            lease_ttl: DEFAULT_LEASE_TTL,
            idle_poll: DEFAULT_IDLE_POLL,
            shutdown_grace: DEFAULT_SHUTDOWN_GRACE,
            functions: Vec::new(),
        }
    }
}

/// Everything a job task needs, shared by all of them.
struct Node<S> {
    source: S,
    runtime: Arc<Runtime>,
    registry: Arc<PluginRegistry>,
    config: WorkerConfig,
    /// The jobs running now, by lease token (after an outage longer than the lease, one
    /// worker may hold two leases of the same job), with their cancel signals.
    running: Mutex<HashMap<String, (JobId, CancelSignal)>>,
    slot_freed: tokio::sync::Notify,
    /// Shutdown has begun: a finished job's result leases nothing more.
    stopping_leases: std::sync::atomic::AtomicBool,
    metrics: Arc<Metrics>,
    children: Option<queue::Client>,
    /// The tokens of the leases started here lately: a token starts at most once (a copy of
    /// a hand-off message is dropped).
    started: Mutex<wasmgear_proto::recent::Recent>,
    /// Shutdown has gone so far that the source hands this worker nothing more: the worker
    /// says it is not ready from then on.
    draining: std::sync::atomic::AtomicBool,
}

/// The most lease tokens a worker remembers having started (per slot, many times what a
/// slot starts in the time a copy of a message can take to come).
const STARTED_REMEMBERED_PER_SLOT: usize = 64;

/// Runs the worker node until `shutdown` resolves and every job has ended or been handed back.
pub async fn run<S: JobSource>(
    source: S,
    runtime: Arc<Runtime>,
    registry: Arc<PluginRegistry>,
    config: WorkerConfig,
    shutdown: impl Future<Output = ()>,
) {
    let observe = Observe {
        metrics: Arc::default(),
        listener: None,
        children: None,
    };
    run_observed(source, runtime, registry, config, observe, shutdown).await
}

/// Where a node's measurements go: into `metrics`, served on `listener` (when given) as
/// `/metrics`, `/healthz` and `/readyz` while the node runs.
pub struct Observe {
    /// The metrics the node updates.
    pub metrics: Arc<Metrics>,
    /// The address that serves them.
    pub listener: Option<tokio::net::TcpListener>,
    /// The queue jobs' children go to (`wasmgear:job/jobs`); `None`: a job that enqueues a
    /// child is told there is no queue.
    pub children: Option<queue::Client>,
}

/// [`run`], with the node's metrics in `observe.metrics`, served on `observe.listener`.
pub async fn run_observed<S: JobSource>(
    source: S,
    runtime: Arc<Runtime>,
    registry: Arc<PluginRegistry>,
    config: WorkerConfig,
    observe: Observe,
    shutdown: impl Future<Output = ()>,
) {
    let concurrency = config
        .concurrency
        .clamp(1, wasmgear_proto::limits::MAX_CONCURRENCY as usize);
    let node = Arc::new(Node {
        source,
        runtime,
        registry,
        config,
        running: Mutex::default(),
        slot_freed: tokio::sync::Notify::new(),
        stopping_leases: std::sync::atomic::AtomicBool::new(false),
        metrics: observe.metrics,
        children: observe.children,
        started: Mutex::new(wasmgear_proto::recent::Recent::new(
            concurrency * STARTED_REMEMBERED_PER_SLOT,
        )),
        draining: std::sync::atomic::AtomicBool::new(false),
    });
    let slots = Arc::new(Semaphore::new(concurrency));
    let mut tasks = JoinSet::new();
    tokio::pin!(shutdown);
    // Stops the background tasks at the end; they finish what they are doing first.
    let stopping = CancellationToken::new();
    let metrics_server = observe.listener.map(|listener| {
        tokio::spawn(metrics::serve(
            listener,
            node.clone(),
            slots.clone(),
            stopping.clone(),
        ))
    });
    let cancel_listener = tokio::spawn(forward_cancel_requests(node.clone(), stopping.clone()));
    if let Err(error) = node.source.serve(&node.serving()).await {
        tracing::warn!(%error, "cannot subscribe to new work and cancellations yet; polling until Redis answers");
    }
    let upkeep = tokio::spawn(upkeep(node.clone(), stopping.clone()));

    tracing::info!(functions = ?node.serving(), concurrency, "worker started");
    // A plugin added or swapped in: an idle worker leases again at once.
    let mut plugin_changes = node.registry.changes();
    // Lease calls on their way, each holding the slots it leases for. Usually one; a second
    // starts when a quarter of the slots are free again before the first has returned
    // (Redis far away, or busy), so that slots do not sit idle for a whole round trip.
    let mut leasing: FuturesUnordered<LeaseCall> = FuturesUnordered::new();
    let min_batch = (concurrency / 4).max(1);
    // The last lease found nothing: wait for work (or a plugin slot) before asking again.
    let mut idle = false;
    // Leasing failed: ask again after a pause.
    let mut retry_at: Option<tokio::time::Instant> = None;
    // Free slots the source keeps for jobs it may hand this worker without a lease call
    // (JobSource::reserved_slots): out of other use, they go to the next lease call, which
    // takes what was handed.
    let mut kept: Vec<OwnedSemaphorePermit> = Vec::new();
    loop {
        while tasks.try_join_next().is_some() {}
        let may_lease = !idle
            && retry_at.is_none()
            && (leasing.is_empty()
                || (leasing.len() < MAX_LEASE_CALLS
                    && kept.is_empty()
                    && slots.available_permits() >= min_batch
                    && node.plugins_unlimited()));
        tokio::select! {
            biased;
            _ = &mut shutdown => {
                node.stopping_leases.store(true, std::sync::atomic::Ordering::SeqCst);
                break;
            }
            Some((permits, leases)) = leasing.next(), if !leasing.is_empty() => {
                let left = match leases {
                    Ok(leases) => {
                        idle = leases.is_empty();
                        node.start_jobs(&mut tasks, leases, permits)
                    }
                    Err(error) => {
                        tracing::warn!(%error, "leasing failed; retrying in a second");
                        retry_at = Some(tokio::time::Instant::now() + Duration::from_secs(1));
                        permits
                    }
                };
                node.keep_reserved(&mut kept, left);
            }
            // With slots kept for hand-offs, lease at once (with them and every free one);
            // otherwise wait for at least one free slot, then take every free one.
            permit = acquire_or_kept(&slots, &mut kept), if may_lease => {
                let Some(mut permits) = permit else { break };
                while let Ok(permit) = slots.clone().try_acquire_owned() {
                    permits.push(permit);
                }
                let requests = node.lease_requests(permits.len());
                let node = node.clone();
                leasing.push(Box::pin(async move {
                    let sent = std::time::Instant::now();
                    let leases = node
                        .source
                        .lease(&requests, permits.len(), node.config.lease_ttl)
                        .await;
                    node.metrics.round_trip("lease", sent.elapsed());
                    match &leases {
                        Ok(_) => node.metrics.leased(),
                        Err(_) => node.metrics.source_error("lease"),
                    }
                    (permits, leases)
                }));
            }
            _ = tokio::time::sleep_until(retry_at.unwrap_or_else(tokio::time::Instant::now)), if retry_at.is_some() => {
                retry_at = None;
            }
            _ = node.source.wait_for_work(node.config.idle_poll), if idle && leasing.is_empty() => {
                idle = false;
            }
            Ok(()) = plugin_changes.changed(), if idle => {
                idle = false;
            }
            // A plugin at its concurrency limit got a free slot, or enough slots may have
            // freed for a second lease call.
            _ = node.slot_freed.notified(), if idle || (!may_lease && leasing.len() < MAX_LEASE_CALLS) => {
                idle = false;
            }
        }
    }
    // Not raced against shutdown: a lease call dropped halfway may have leased jobs that
    // nobody here would run. Leased jobs go through the shutdown below.
    while let Some((permits, leases)) = leasing.next().await {
        if let Ok(leases) = leases {
            node.start_jobs(&mut tasks, leases, permits);
        }
    }
    // A stopping worker is handed nothing: its registrations go, and what it was handed
    // and has not started goes back.
    node.source.stop_leasing().await;
    drop(kept);
    node.draining
        .store(true, std::sync::atomic::Ordering::SeqCst);

    let running = tasks.len();
    if running > 0 {
        tracing::info!(
            running,
            grace_ms = node.config.shutdown_grace.as_millis() as u64,
            "shutting down: letting running jobs finish"
        );
        let drained = tokio::time::timeout(node.config.shutdown_grace, async {
            while tasks.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            let signals: Vec<_> = node
                .running
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .values()
                .map(|(_, signal)| signal.clone())
                .collect();
            tracing::info!(
                jobs = signals.len(),
                "grace period over: cancelling and handing back"
            );
            for signal in signals {
                signal.cancel(CancelReason::Shutdown);
            }
            while tasks.join_next().await.is_some() {}
        }
    }
    stopping.cancel();
    let _ = cancel_listener.await;
    if let Some(server) = metrics_server {
        let _ = server.await;
    }
    // The last advertisement lands before the one that takes the worker out.
    let _ = upkeep.await;
    if let Err(error) = node
        .source
        .advertise(&WorkerAd::default(), &node.serving(), Duration::ZERO)
        .await
    {
        tracing::warn!(%error, "could not take this worker out of the worker list");
    }
    tracing::info!("worker stopped");
}

/// Waits for a free slot, or takes the slots kept for hand-offs at once when there are any;
/// `None` once the slots are closed.
async fn acquire_or_kept(
    slots: &Arc<Semaphore>,
    kept: &mut Vec<OwnedSemaphorePermit>,
) -> Option<Vec<OwnedSemaphorePermit>> {
    if !kept.is_empty() {
        return Some(std::mem::take(kept));
    }
    slots
        .clone()
        .acquire_owned()
        .await
        .ok()
        .map(|permit| vec![permit])
}

/// How often a worker renews its entry in the worker list.
pub const ADVERTISE_EVERY: Duration = Duration::from_secs(2);
/// How long an entry lives without renewal: a dead worker disappears after this.
pub const ADVERTISE_TTL: Duration = Duration::from_secs(10);

/// A new worker id, `HOST-PID-RANDOM`: unique among the workers of one queue.
pub fn new_worker_id() -> String {
    let mut random = [0u8; 3];
    // Without an OS entropy source the clock still tells apart workers started apart.
    if getrandom::fill(&mut random).is_err() {
        random = (wasmgear_proto::units::now_ms() as u32).to_le_bytes()[..3]
            .try_into()
            .unwrap_or_default();
    }
    let random: String = random.iter().map(|b| format!("{b:02x}")).collect();
    format!("{}-{}-{random}", host_name(), std::process::id())
}

/// This machine's host name, as the worker list shows it.
fn host_name() -> String {
    gethostname::gethostname()
        .into_string()
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "worker".into())
}

/// Keeps the worker's subscriptions and its worker-list entry up to date.
async fn upkeep<S: JobSource>(node: Arc<Node<S>>, stopping: CancellationToken) {
    let started_ms = wasmgear_proto::units::now_ms();
    let mut changes = node.registry.changes();
    let mut served = node.serving();
    loop {
        let current = node.serving();
        if current != served {
            if let Err(error) = node.source.serve(&current).await {
                tracing::warn!(%error, "cannot subscribe to the events of the new functions");
            }
            // Leave the roll call of functions no longer served.
            let gone: Vec<_> = served
                .iter()
                .filter(|f| !current.contains(f))
                .cloned()
                .collect();
            if !gone.is_empty() {
                let _ = node.source.leave(&gone).await;
            }
            served = current;
        }
        let ad = WorkerAd {
            host: host_name(),
            pid: std::process::id(),
            version: env!("CARGO_PKG_VERSION").to_string(),
            started_ms,
            concurrency: node.config.concurrency,
            functions: served
                .iter()
                .filter_map(|f| {
                    node.registry
                        .get(f)
                        .map(|p| (f.to_string(), p.version().to_string()))
                })
                .collect(),
            running: node
                .running
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .values()
                .map(|(id, _)| id.to_string())
                .collect(),
            plugin_errors: node
                .registry
                .errors()
                .into_iter()
                .map(|(p, e)| format!("{p:?}: {e}"))
                .collect(),
            sources: Vec::new(),
            deployed: served
                .iter()
                .filter(|f| node.registry.is_deployed(f))
                .map(|f| f.to_string())
                .collect(),
        };
        if let Err(error) = node.source.advertise(&ad, &served, ADVERTISE_TTL).await {
            node.metrics.source_error("advertise");
            tracing::warn!(%error, "cannot renew this worker's entry in the worker list");
        }
        if let Err(error) = node.source.maintain(&served).await {
            node.metrics.source_error("maintain");
            tracing::warn!(%error, "queue housekeeping failed; trying again shortly");
        }
        tokio::select! {
            _ = changes.changed() => {}
            _ = tokio::time::sleep(ADVERTISE_EVERY) => {}
            _ = stopping.cancelled() => return,
        }
    }
}

/// Fires the cancel signal of each running job whose cancellation the source reports.
async fn forward_cancel_requests<S: JobSource>(node: Arc<Node<S>>, stopping: CancellationToken) {
    let mut requests = node.source.cancel_requests();
    loop {
        let request = tokio::select! {
            request = requests.recv() => request,
            _ = stopping.cancelled() => return,
        };
        match request {
            Ok(request) => {
                let running = node.running.lock().unwrap_or_else(|e| e.into_inner());
                let meant = running
                    .iter()
                    .filter(|(token, (job, _))| request.matches(job, token));
                for (_, (id, signal)) in meant {
                    tracing::info!(job_id = %id, "cancel requested: asking the job to stop");
                    signal.cancel(CancelReason::Requested);
                }
            }
            // Missed some: heartbeats will catch those jobs.
            Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
            Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
        }
    }
}

/// Forwards a running job's reports: progress to a watch channel (coalescing), logs to
/// tracing under the job's span.
struct Reporter {
    progress: watch::Sender<Option<Progress>>,
    lines: Arc<Mutex<String>>,
    metrics: Arc<Metrics>,
    function: Arc<metrics::PerFunction>,
    children: Option<Arc<dyn runtime::ChildJobs>>,
}

/// The most bytes of one attempt's log kept for the queue.
pub const MAX_ATTEMPT_LOG_BYTES: usize = 64 * 1024;
/// The line that ends an attempt's log once it is full.
const ATTEMPT_LOG_FULL: &str = "WARN  … [the attempt's log is full: further lines were dropped]\n";

impl JobHooks for Reporter {
    fn progress(&self, progress: Progress) {
        self.progress.send_replace(Some(progress));
    }

    fn instantiated(&self, took: Duration) {
        self.metrics.instantiated(took);
    }

    fn memory(&self, peak_bytes: usize) {
        self.function.memory(peak_bytes);
    }

    fn children(&self) -> Option<Arc<dyn runtime::ChildJobs>> {
        self.children.clone()
    }

    fn log(&self, level: LogLevel, message: String) {
        {
            let mut lines = self.lines.lock().unwrap_or_else(|e| e.into_inner());
            let line = format!("{:<5} {message}\n", format!("{level:?}").to_uppercase());
            if lines.len() + line.len() + ATTEMPT_LOG_FULL.len() <= MAX_ATTEMPT_LOG_BYTES {
                lines.push_str(&line);
            } else if !lines.ends_with(ATTEMPT_LOG_FULL) {
                lines.push_str(ATTEMPT_LOG_FULL);
            }
        }
        match level {
            LogLevel::Trace => tracing::trace!(target: "wasmgear::guest", "{message}"),
            LogLevel::Debug => tracing::debug!(target: "wasmgear::guest", "{message}"),
            LogLevel::Info => tracing::info!(target: "wasmgear::guest", "{message}"),
            LogLevel::Warn => tracing::warn!(target: "wasmgear::guest", "{message}"),
            LogLevel::Error => tracing::error!(target: "wasmgear::guest", "{message}"),
        }
    }
}

/// The longest a running job waits for its first heartbeat, which confirms its lease.
const FIRST_BEAT_MAX: Duration = Duration::from_secs(1);

/// The shortest time between two progress writes of one job (a guest reporting faster is
/// coalesced: at most 20 writes per second per job reach the queue).
pub const PROGRESS_INTERVAL: Duration = Duration::from_millis(50);

/// How often reporting to the source is tried when the source is unreachable.
const REPORT_ATTEMPTS: usize = 5;
/// The wait before the first retry of a report; it doubles (with jitter) on each next one.
const REPORT_RETRY_FIRST: Duration = Duration::from_millis(400);

impl<S: JobSource> Node<S> {
    /// The functions to lease for: the configured ones that have a plugin, or every plugin.
    fn serving(&self) -> Vec<FunctionName> {
        let available = self.registry.functions();
        if self.config.functions.is_empty() {
            return available;
        }
        self.config
            .functions
            .iter()
            .filter(|f| available.contains(f))
            .cloned()
            .collect()
    }

    /// Whether no served plugin limits its own concurrency (then two lease calls may be on
    /// their way at once without leasing more of a plugin's jobs than it may run).
    fn plugins_unlimited(&self) -> bool {
        self.serving().iter().all(|function| {
            self.registry
                .get(function)
                .is_none_or(|plugin| plugin.free_slots() == usize::MAX)
        })
    }

    /// Runs each of `leases` in a task of its own, holding one of `permits` (the slots
    /// leased for); returns those left over.
    fn start_jobs(
        self: &Arc<Self>,
        tasks: &mut JoinSet<()>,
        leases: Vec<Lease>,
        mut permits: Vec<OwnedSemaphorePermit>,
    ) -> Vec<OwnedSemaphorePermit> {
        for lease in leases {
            let Some(permit) = permits.pop() else {
                // More leases than slots: never from a source keeping count, but a job
                // without a slot is handed back, not left to run out its lease.
                let node = self.clone();
                tasks.spawn(async move { node.hand_back(vec![lease]).await });
                continue;
            };
            // Counted against the plugin's concurrency before the next lease call.
            let plugin = self.registry.get(&lease.info.id.function);
            let in_flight = plugin.as_ref().map(|p| p.start_job());
            tasks.spawn(self.clone().serve_slot(lease, (plugin, in_flight), permit));
        }
        permits
    }

    /// Keeps in `kept` as many of the free slots `left` (and those kept before) as the
    /// source keeps for hand-offs; frees the rest.
    fn keep_reserved(&self, kept: &mut Vec<OwnedSemaphorePermit>, left: Vec<OwnedSemaphorePermit>) {
        kept.extend(left);
        // (The slots let go return to the semaphore, where the loop's next lease finds
        // them: nothing else waits for them, so nothing is woken.)
        kept.truncate(self.source.reserved_slots());
    }

    /// Whether `lease`'s token starts here for the first time (noting it).
    fn first_start(&self, lease: &Lease) -> bool {
        let fresh = self
            .started
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            // (A token is unique within its function: one lease call leasing jobs of two
            // functions gives `CALL:1:1` to the first job of each.)
            .insert(&format!("{}\0{}", lease.info.id.function, lease.token));
        if !fresh {
            tracing::warn!(job_id = %lease.info.id, "dropped a lease whose token has started here already");
        }
        fresh
    }

    /// Runs `first` in the slot `permit` holds, then the jobs leased with its result and
    /// theirs, one at a time, for as long as the source hands them (see
    /// [`JobSource::complete_and_lease`]); frees the slot when none is left.
    ///
    /// A short job asks for the next one and more that wait here (see [`AHEAD_MAX`]), so
    /// that the slot goes on at once when a job ends while the results and the next leases
    /// make their round trips. Jobs waiting here are handed back once the oldest has waited
    /// [`HOLD_AHEAD_MAX`]: none waits behind a long job, its lease running.
    async fn serve_slot(
        self: Arc<Self>,
        first: Lease,
        prepared: (Option<Arc<Plugin>>, Option<InFlight>),
        permit: OwnedSemaphorePermit,
    ) {
        let mut permit = Some(permit);
        let mut prepared = Some(prepared);
        // The jobs to run here, each with when it came: a job waits here at most `hold`.
        let hold = HOLD_AHEAD_MAX.min(self.config.lease_ttl / 4);
        let mut queue = std::collections::VecDeque::from([(first, tokio::time::Instant::now())]);
        // Reports on their way, each answering the jobs it leased and how many it asked for.
        let mut reports: FuturesUnordered<Report> = FuturesUnordered::new();
        // Jobs the reports on their way may bring.
        let mut asked = 0;
        loop {
            let Some((lease, _)) = queue.pop_front() else {
                match reports.next().await {
                    Some((leases, wanted)) => {
                        asked -= wanted;
                        let now = tokio::time::Instant::now();
                        queue.extend(leases.into_iter().map(|lease| (lease, now)));
                        continue;
                    }
                    None => break,
                }
            };
            // A token starts at most once (a copy of a hand-off is dropped), and only while it
            // can be renewed before the worker's own fence stops it: with at least half of
            // its lease left (else it goes back for another worker, unrun).
            let fresh = self.first_start(&lease);
            let left = lease
                .expires
                .saturating_duration_since(std::time::Instant::now());
            if !fresh || left < lease.ttl / 2 {
                drop(prepared.take());
                if fresh {
                    let node = self.clone();
                    reports.push(Box::pin(async move {
                        node.hand_back(vec![lease]).await;
                        (Vec::new(), 0)
                    }));
                }
                continue;
            }
            let (plugin, in_flight) = prepared.take().unwrap_or_else(|| {
                let plugin = self.registry.get(&lease.info.id.function);
                let in_flight = plugin.as_ref().map(|p| p.start_job());
                (plugin, in_flight)
            });
            let function = lease.info.id.function.clone();
            let limited = plugin
                .as_ref()
                .is_some_and(|p| p.free_slots() != usize::MAX);
            let span =
                tracing::info_span!("job", job_id = %lease.info.id, attempt = lease.info.attempt);
            let started = tokio::time::Instant::now();
            let run = self.run_attempt(lease, plugin).instrument(span.clone());
            tokio::pin!(run);
            // Reports that come back while the job runs add to the queue; once the oldest
            // job there has waited `hold`, what waits there is handed back.
            let finished = loop {
                let hand_back_at = queue.front().map(|(_, came)| *came + hold);
                tokio::select! {
                    finished = &mut run => break finished,
                    Some((leases, wanted)) = reports.next(), if !reports.is_empty() => {
                        asked -= wanted;
                        let now = tokio::time::Instant::now();
                        queue.extend(leases.into_iter().map(|lease| (lease, now)));
                    }
                    () = tokio::time::sleep_until(hand_back_at.unwrap_or(started)), if hand_back_at.is_some() => {}
                }
                if hand_back_at.is_some_and(|at| tokio::time::Instant::now() >= at) {
                    let held: Vec<Lease> = queue.drain(..).map(|(lease, _)| lease).collect();
                    let node = self.clone();
                    reports.push(Box::pin(async move {
                        node.hand_back(held).await;
                        (Vec::new(), 0)
                    }));
                }
            };
            // A plugin limiting its own concurrency gets no job ahead: its jobs are recorded
            // one strictly after the other.
            let ran = started.elapsed();
            let target = if limited || ran >= hold / 2 {
                1
            } else {
                // The more the shorter the job: as many as would run in a quarter of the
                // hold, two at least and AHEAD_MAX at most.
                let fit = (hold / 4).as_nanos() / ran.as_nanos().max(1);
                usize::try_from(fit)
                    .unwrap_or(AHEAD_MAX)
                    .clamp(2, AHEAD_MAX)
            };
            let pending = queue.len() + asked;
            let next = match (&finished.outcome, finished.cancelled) {
                (Outcome::Succeeded(_), None) if pending < target => {
                    self.next_request(&function, target - pending)
                }
                _ => None,
            };
            let wanted = next.as_ref().map_or(0, |n| n.max);
            asked += wanted;
            if queue.is_empty() && asked == 0 {
                // Nothing more for this slot: it frees as soon as the job has stopped
                // running, while its result is on the way, so that the next lease overlaps
                // the report.
                drop(permit.take());
                self.slot_freed.notify_one();
            }
            let node = self.clone();
            reports.push(Box::pin(
                async move {
                    let leases = node.report(finished, next).await;
                    // A plugin's own concurrency counts the job until its result is stored.
                    drop(in_flight);
                    node.slot_freed.notify_one();
                    (leases, wanted)
                }
                .instrument(span),
            ));
        }
        drop(permit.take());
        self.slot_freed.notify_one();
    }

    /// Hands back jobs leased ahead that waited too long here (unrun, their attempt not
    /// counted), so that another slot or worker takes them at once.
    async fn hand_back(&self, leases: Vec<Lease>) {
        for lease in leases {
            match self.source.release(&lease).await {
                Ok(_) => tracing::debug!(job_id = %lease.info.id, "handed back a job leased ahead"),
                Err(error) => {
                    tracing::warn!(job_id = %lease.info.id, %error, "cannot hand back a job leased ahead; it runs again once its lease expires")
                }
            }
        }
    }

    /// What to ask the source for: each served function with a free slot in its plugin,
    /// at most `free` jobs, with the plugin's defaults for jobs that set none.
    fn lease_requests(&self, free: usize) -> Vec<LeaseRequest> {
        self.serving()
            .into_iter()
            .filter_map(|function| {
                let plugin = self.registry.get(&function)?;
                let max = plugin.free_slots().min(free);
                (max > 0).then(|| lease_request(function, &plugin, max))
            })
            .collect()
    }

    /// Runs the job, keeping its lease and forwarding its progress, until it has stopped.
    async fn run_attempt(&self, lease: Lease, plugin: Option<Arc<Plugin>>) -> Finished {
        let id = lease.info.id.clone();
        let cancel = CancelSignal::new();
        self.running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(lease.token.clone(), (id.clone(), cancel.clone()));

        let lines = Arc::new(Mutex::new(String::new()));
        let plugin_version = plugin.as_ref().map(|p| p.version().to_string());
        let waited = wasmgear_proto::units::now_ms().saturating_sub(lease.info.enqueued_at_ms);
        let measured = self.metrics.function(&id.function);
        measured.started(lease.info.attempt, waited);
        let started = std::time::Instant::now();
        // A cancel the source heard before the job got here (it was leased, held in its slot
        // or on its way) counts: the job never starts. (Registered as running first, so that
        // a cancel heard from now on reaches it through its signal.)
        if self.source.cancel_heard(&lease) {
            cancel.cancel(CancelReason::Requested);
        }
        let outcome = match plugin {
            // Its cancel came before it started: it never does.
            _ if cancel.fired().is_some() => Outcome::Failed(JobFailure::new(
                ErrorClass::Cancelled,
                "cancelled before it started",
            )),
            None => Outcome::Failed(JobFailure::new(
                ErrorClass::PluginMissing,
                format!("no plugin serves function {} on this worker", id.function),
            )),
            Some(plugin) => {
                let (progress_tx, progress_rx) = watch::channel(None);
                let hooks: Arc<dyn JobHooks> = Arc::new(Reporter {
                    progress: progress_tx,
                    lines: lines.clone(),
                    metrics: self.metrics.clone(),
                    function: measured.clone(),
                    children: self.children.as_ref().map(|client| {
                        Arc::new(children::Children::new(
                            client.clone(),
                            lease.info.id.clone(),
                        )) as Arc<dyn runtime::ChildJobs>
                    }),
                });
                let run =
                    self.runtime
                        .run(&plugin, &lease.info, &lease.input, hooks, cancel.clone());
                let mut run = std::pin::pin!(run);
                // A job that ends at its first poll without reporting progress needs no
                // keeper (its lease is fresh): no heartbeat timers are set for it.
                let first =
                    std::future::poll_fn(|cx| std::task::Poll::Ready(run.as_mut().poll(cx))).await;
                match first {
                    std::task::Poll::Ready(outcome) if progress_rx.borrow().is_none() => outcome,
                    first => {
                        let keeper = self.keep_lease(&lease, progress_rx, cancel.clone());
                        // The keeper ends once the run has dropped the reporter and the last
                        // progress report is stored, so progress always lands before the
                        // finish.
                        match first {
                            std::task::Poll::Ready(outcome) => {
                                keeper.await;
                                outcome
                            }
                            std::task::Poll::Pending => tokio::join!(run, keeper).0,
                        }
                    }
                }
            }
        };
        measured.ran(started.elapsed());
        self.running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&lease.token);
        let notes = AttemptNotes {
            log: std::mem::take(&mut *lines.lock().unwrap_or_else(|e| e.into_inner())),
            plugin_version,
        };
        let cancelled = cancel.fired().map(|(reason, _)| reason);
        Finished {
            lease,
            outcome,
            cancelled,
            notes,
        }
    }

    /// What a finished job of `function` leases with its result for the slot it frees: up
    /// to `max` more jobs of its function with the plugin's defaults, unless shutdown has
    /// begun or the plugin is gone.
    fn next_request(&self, function: &FunctionName, max: usize) -> Option<LeaseRequest> {
        if self
            .stopping_leases
            .load(std::sync::atomic::Ordering::SeqCst)
        {
            return None;
        }
        let plugin = self.registry.get(function)?;
        Some(lease_request(function.clone(), &plugin, max))
    }

    /// Renews the lease every third of its TTL and stores progress reports, until the
    /// job's reporter is dropped. A lost lease cancels the job; so does a lease about to run
    /// out without a successful renewal (the worker may be cut off from the queue, which
    /// will soon give the job to another worker): the job is asked to stop a quarter of the
    /// TTL before the lease ends, and stopped hard when it ends.
    async fn keep_lease(
        &self,
        lease: &Lease,
        mut progress: watch::Receiver<Option<Progress>>,
        cancel: CancelSignal,
    ) {
        let ttl = lease.ttl;
        let period = ttl / 3;
        // A failed renewal is tried again sooner, while the lease still has time.
        let retry = (ttl / 12).max(Duration::from_millis(20));
        let (held_tx, mut held_rx) = watch::channel(lease.expires);
        let fence = async {
            loop {
                let until = *held_rx.borrow_and_update();
                let notice = tokio::time::Instant::from_std(until) - ttl / 4;
                tokio::select! {
                    () = tokio::time::sleep_until(notice) => {
                        tracing::warn!("the lease runs out without a renewal: stopping the job");
                        cancel.cancel_by(CancelReason::LeaseLost, until);
                        return std::future::pending().await;
                    }
                    changed = held_rx.changed() => if changed.is_err() {
                        return std::future::pending().await;
                    },
                }
            }
        };
        let keep = async {
            // The first beat is due a third of the TTL from now, within FIRST_BEAT_MAX (it
            // confirms the lease: one that runs out unconfirmed gives its attempt back), and
            // by the time half of the lease is left at the latest (a handed job's lease counts
            // from its registering call; a job starts only with half left): so it is renewed
            // before the fence's notice, a quarter of the TTL before the end. (No timer is
            // awaited on a short job's path: a timer costs a millisecond of tokio's clock.)
            let now = tokio::time::Instant::now();
            let half_left = tokio::time::Instant::from_std(lease.expires) - ttl / 2;
            let mut next_beat = (now + period)
                .min(now + FIRST_BEAT_MAX)
                .min(half_left.max(now));
            let mut next_report = tokio::time::Instant::now();
            let lost = |why: &str| {
                tracing::warn!("{why}: stopping the job");
                cancel.cancel_by(CancelReason::LeaseLost, *held_tx.borrow());
            };
            loop {
                tokio::select! {
                    changed = progress.changed() => {
                        // At most one write per interval: reports in between are coalesced
                        // into the latest, and the last one always lands.
                        if next_report > tokio::time::Instant::now() {
                            tokio::time::sleep_until(next_report).await;
                        }
                        if changed.is_err() && !progress.has_changed().unwrap_or(false) {
                            return;
                        }
                        let Some(report) = progress.borrow_and_update().clone() else { continue };
                        next_report = tokio::time::Instant::now() + PROGRESS_INTERVAL;
                        match self.source.progress(lease, &report).await {
                            Ok(true) => {}
                            Ok(false) => lost("lease lost"),
                            Err(error) => {
                                self.metrics.source_error("progress");
                                tracing::warn!(%error, "could not store progress");
                            }
                        }
                    }
                    () = tokio::time::sleep_until(next_beat) => {
                        let sent = tokio::time::Instant::now().into_std();
                        match self.source.heartbeat(lease, ttl).await {
                            Ok(status) => {
                                next_beat = tokio::time::Instant::now() + period;
                                match status {
                                    LeaseStatus::Held => {}
                                    LeaseStatus::CancelRequested => cancel.cancel(CancelReason::Requested),
                                    LeaseStatus::Lost => {
                                        lost("lease lost");
                                        continue;
                                    }
                                }
                                held_tx.send_replace(sent + ttl);
                            }
                            Err(error) => {
                                self.metrics.source_error("heartbeat");
                                tracing::warn!(%error, "heartbeat failed; retrying");
                                next_beat = tokio::time::Instant::now() + retry;
                            }
                        }
                    }
                }
            }
        };
        tokio::select! {
            () = keep => {}
            () = fence => {}
        }
    }

    /// Tells the source how the job ended, retrying while the source is unreachable. A
    /// success's first try also leases `next` (when given and the source is willing), and
    /// the lease made is returned.
    async fn report(&self, finished: Finished, next: Option<LeaseRequest>) -> Vec<Lease> {
        let Finished {
            lease,
            outcome,
            cancelled,
            notes,
        } = finished;
        let (lease, notes) = (&lease, &notes);
        let handed_back = matches!(
            (&outcome, cancelled),
            (Outcome::Failed(_), Some(CancelReason::Shutdown))
        );
        // Asked for on the first try only: a retry reports the result alone.
        let next = Mutex::new(next);
        let leased = Mutex::new(Vec::new());
        let send = || async {
            let sent = std::time::Instant::now();
            let result = async {
                match &outcome {
                    _ if handed_back => self.source.release(lease).await,
                    Outcome::Succeeded(output) => {
                        let next = next.lock().unwrap_or_else(|e| e.into_inner()).take();
                        let Some(next) = next else {
                            return self.source.complete(lease, output, notes).await;
                        };
                        let ttl = self.config.lease_ttl;
                        let (completion, lease) = self
                            .source
                            .complete_and_lease(lease, output, notes, &next, ttl)
                            .await?;
                        *leased.lock().unwrap_or_else(|e| e.into_inner()) = lease;
                        Ok(completion)
                    }
                    Outcome::Failed(failure) => self.source.fail(lease, failure, notes).await,
                }
            }
            .await;
            self.metrics.round_trip("report", sent.elapsed());
            if result.is_err() {
                self.metrics.source_error("report");
            }
            result
        };
        let backoff = backon::ExponentialBuilder::default()
            .with_min_delay(REPORT_RETRY_FIRST)
            .with_max_times(REPORT_ATTEMPTS - 1)
            .with_jitter();
        let result = backon::Retryable::retry(send, backoff)
            .sleep(tokio::time::sleep)
            .notify(|error, wait| {
                tracing::warn!(%error, ?wait, "could not report the job; retrying");
            })
            .await;
        let state = match &result {
            Ok(Completion::Accepted(state)) => state.as_str(),
            Ok(Completion::Stale | Completion::Missing) => "refused",
            Err(_) => "unreported",
        };
        let class = match &outcome {
            Outcome::Succeeded(_) => "none",
            Outcome::Failed(failure) => failure.class.as_str(),
        };
        self.metrics
            .job_finished(&lease.info.id.function, state, class);
        log_report(result, &outcome, handed_back);
        leased.into_inner().unwrap_or_else(|e| e.into_inner())
    }
}

/// Asks for at most `max` jobs of `function`, with `plugin`'s defaults for jobs that set none.
/// (Within the queue's bounds, which a manifest is held to: a lease call outside them would be
/// refused, for every function the worker serves.)
fn lease_request(function: FunctionName, plugin: &Plugin, max: usize) -> LeaseRequest {
    use wasmgear_proto::limits::{MAX_ATTEMPTS, MAX_DURATION_MS};
    let defaults = plugin.defaults();
    let timeout_ms = defaults.timeout.unwrap_or(DEFAULT_TIMEOUT).as_millis() as u64;
    let attempts = defaults.max_attempts.unwrap_or(DEFAULT_MAX_ATTEMPTS);
    LeaseRequest {
        function,
        max,
        default_timeout_ms: timeout_ms.clamp(1, MAX_DURATION_MS),
        default_max_attempts: attempts.clamp(1, MAX_ATTEMPTS as u32),
    }
}

/// Logs how the report of a job that ended with `outcome` went.
fn log_report(result: Result<Completion, SourceError>, outcome: &Outcome, handed_back: bool) {
    match result {
        Ok(Completion::Accepted(state)) => match &outcome {
            Outcome::Failed(failure) if !handed_back => tracing::info!(
                %state,
                class = %failure.class,
                error = %failure.message,
                "job ended without output"
            ),
            _ => tracing::info!(%state, "job reported"),
        },
        Ok(Completion::Stale) => {
            tracing::warn!("the queue refused the result: this worker no longer holds the lease");
        }
        Ok(Completion::Missing) => {
            tracing::warn!("the queue refused the result: the job no longer exists");
        }
        Err(error) => {
            tracing::error!(%error, "could not report the job; its lease will expire and it will run again");
        }
    }
}
