//! The node's loop: it leases as many jobs as it has free slots (and the source keeps none
//! for hand-offs), starts each in a slot, and hands back what it cannot start.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use wasmgear_proto::{
    AttemptNotes, Completion, DEFAULT_MAX_ATTEMPTS, DEFAULT_TIMEOUT, FunctionName, JobId, Lease,
    LeaseRequest, Outcome, WorkerAd,
};
use wasmgear_runtime::{CancelReason, CancelSignal, Plugin, Runtime};

use crate::attempt::*;
use crate::plugins::PluginRegistry;
use crate::upkeep::*;
use crate::*;
use wasmgear_proto::sync::Locked;

/// A job's report on its way: the jobs leased with it, and how many it asked for.
pub(crate) type Report = std::pin::Pin<Box<dyn Future<Output = (Vec<Lease>, usize)> + Send>>;

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

/// What a node logs, at level info (the binary's default), once it serves: its plugins
/// are loaded, it has asked its source for word of new work and cancellations, and it
/// leases from then on. A contract, not incidental text (README, "Monitoring"): a
/// supervisor or a test that starts `wasmgear worker` waits for a line containing it;
/// `/readyz` is the probe for orchestrators.
pub const READY_LINE: &str = "worker started";

/// A job that has stopped running, to be reported.
pub(crate) struct Finished {
    pub(crate) lease: Lease,
    pub(crate) outcome: Outcome,
    pub(crate) cancelled: Option<CancelReason>,
    pub(crate) notes: AttemptNotes,
}

/// What a lease round brought: jobs to run one per slot, and batches of batch plugins (a
/// slot each).
#[derive(Default)]
pub(crate) struct Leased {
    pub(crate) jobs: Vec<Lease>,
    pub(crate) batches: Vec<crate::batches::Gathered>,
}

impl Leased {
    fn is_empty(&self) -> bool {
        self.jobs.is_empty() && self.batches.is_empty()
    }
}

/// A lease round on its way (the batch plugins' batches gathered, then one lease call for
/// the other functions), with the slots it leases for.
pub(crate) type LeaseCall = std::pin::Pin<
    Box<dyn Future<Output = (Vec<OwnedSemaphorePermit>, Result<Leased, SourceError>)> + Send>,
>;

/// Everything a job task needs, shared by all of them.
pub(crate) struct Node<S> {
    pub(crate) source: S,
    pub(crate) runtime: Arc<Runtime>,
    pub(crate) registry: Arc<PluginRegistry>,
    pub(crate) config: WorkerConfig,
    /// The jobs running now, by lease token (after an outage longer than the lease, one
    /// worker may hold two leases of the same job), with their cancel signals.
    pub(crate) running: Mutex<HashMap<String, (JobId, CancelSignal)>>,
    pub(crate) slot_freed: tokio::sync::Notify,
    /// Shutdown has begun: a finished job's result leases nothing more.
    pub(crate) stopping_leases: std::sync::atomic::AtomicBool,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) children: Option<wasmgear_client::Client>,
    /// The tokens of the leases started here lately: a token starts at most once (a copy of
    /// a hand-off message is dropped).
    pub(crate) started: Mutex<wasmgear_proto::recent::Recent>,
    /// Shutdown has gone so far that the source hands this worker nothing more: the worker
    /// says it is not ready from then on.
    pub(crate) draining: std::sync::atomic::AtomicBool,
}

/// The most lease tokens a worker remembers having started (per slot, many times what a
/// slot starts in the time a copy of a message can take to come).
pub(crate) const STARTED_REMEMBERED_PER_SLOT: usize = 64;

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
    /// The queue jobs' children go to (`wasmgear:job/jobs`) and their dependencies are read
    /// from (`wasmgear:job/dependencies`); `None`: a job that enqueues a child is told there
    /// is no queue, and a job has no dependencies.
    pub children: Option<wasmgear_client::Client>,
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

    tracing::info!(functions = ?node.serving(), concurrency, "{READY_LINE}");
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
                    Ok(leased) => {
                        idle = leased.is_empty();
                        node.start_jobs(&mut tasks, leased, permits)
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
                let node = node.clone();
                leasing.push(Box::pin(async move {
                    let leased = node.lease_round(permits.len()).await;
                    (permits, leased)
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
    while let Some((permits, leased)) = leasing.next().await {
        if let Ok(leased) = leased {
            node.start_jobs(&mut tasks, leased, permits);
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
                .locked()
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
pub(crate) async fn acquire_or_kept(
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

impl<S: JobSource> Node<S> {
    /// The functions to lease for: the configured ones that have a plugin, or every plugin.
    pub(crate) fn serving(&self) -> Vec<FunctionName> {
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
    pub(crate) fn plugins_unlimited(&self) -> bool {
        self.serving().iter().all(|function| {
            self.registry
                .get(function)
                .is_none_or(|plugin| plugin.free_slots() == usize::MAX)
        })
    }

    /// One lease round for `free` slots: a batch for each batch plugin that has work (a slot
    /// each), then one lease call for the other functions with the slots left.
    pub(crate) async fn lease_round(&self, free: usize) -> Result<Leased, SourceError> {
        let mut leased = Leased::default();
        let mut left = free;
        for (function, plugin, settings) in self.batch_functions() {
            if left == 0 {
                break;
            }
            match self.gather(&function, &plugin, &settings).await {
                Ok(leases) if leases.is_empty() => {}
                Ok(leases) => {
                    left -= 1;
                    leased
                        .batches
                        .push(crate::batches::Gathered { plugin, leases });
                }
                // The batches gathered run; the error is told when nothing was leased.
                Err(error) if leased.batches.is_empty() => return Err(error),
                Err(error) => {
                    tracing::warn!(%error, %function, "leasing a batch failed");
                }
            }
        }
        let requests = self.lease_requests(left);
        if requests.is_empty() || left == 0 {
            return Ok(leased);
        }
        let sent = std::time::Instant::now();
        let leases = self
            .source
            .lease(&requests, left, self.config.lease_ttl)
            .await;
        self.metrics.round_trip("lease", sent.elapsed());
        match leases {
            Ok(jobs) => {
                self.metrics.leased();
                leased.jobs = jobs;
                Ok(leased)
            }
            Err(_) if !leased.batches.is_empty() => {
                self.metrics.source_error("lease");
                Ok(leased)
            }
            Err(error) => {
                self.metrics.source_error("lease");
                Err(error)
            }
        }
    }

    /// Runs each batch of `leased` and each of its jobs in a task of its own, holding one
    /// of `permits` (the slots leased for); returns those left over.
    pub(crate) fn start_jobs(
        self: &Arc<Self>,
        tasks: &mut JoinSet<()>,
        leased: Leased,
        mut permits: Vec<OwnedSemaphorePermit>,
    ) -> Vec<OwnedSemaphorePermit> {
        let Leased {
            jobs: leases,
            batches,
        } = leased;
        for batch in batches {
            let Some(permit) = permits.pop() else {
                let node = self.clone();
                tasks.spawn(async move { node.hand_back(batch.leases).await });
                continue;
            };
            // Counted against the plugin's concurrency before the next lease round.
            let in_flight = batch.plugin.start_job();
            tasks.spawn(self.clone().run_batch(batch, in_flight, permit));
        }
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
    pub(crate) fn keep_reserved(
        &self,
        kept: &mut Vec<OwnedSemaphorePermit>,
        left: Vec<OwnedSemaphorePermit>,
    ) {
        kept.extend(left);
        // (The slots let go return to the semaphore, where the loop's next lease finds
        // them: nothing else waits for them, so nothing is woken.)
        kept.truncate(self.source.reserved_slots());
    }

    /// Whether `lease`'s token starts here for the first time (noting it).
    pub(crate) fn first_start(&self, lease: &Lease) -> bool {
        let fresh = self
            .started
            .locked()
            // (A token is unique within its function: one lease call leasing jobs of two
            // functions gives `CALL:1:1` to the first job of each.)
            .insert(&format!("{}\0{}", lease.info.id.function, lease.token));
        if !fresh {
            tracing::warn!(job_id = %lease.info.id, "dropped a lease whose token has started here already");
        }
        fresh
    }

    /// Hands back jobs leased ahead that waited too long here (unrun, their attempt not
    /// counted), so that another slot or worker takes them at once.
    pub(crate) async fn hand_back(&self, leases: Vec<Lease>) {
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
    pub(crate) fn lease_requests(&self, free: usize) -> Vec<LeaseRequest> {
        self.serving()
            .into_iter()
            .filter(|function| !self.gathers(function))
            .filter_map(|function| {
                let plugin = self.registry.get(&function)?;
                let max = plugin.free_slots().min(free);
                (max > 0).then(|| lease_request(function, &plugin, max))
            })
            .collect()
    }

    /// What a finished job of `function` leases with its result for the slot it frees: up
    /// to `max` more jobs of its function with the plugin's defaults, unless shutdown has
    /// begun or the plugin is gone.
    pub(crate) fn next_request(&self, function: &FunctionName, max: usize) -> Option<LeaseRequest> {
        if self
            .stopping_leases
            .load(std::sync::atomic::Ordering::SeqCst)
        {
            return None;
        }
        let plugin = self.registry.get(function)?;
        Some(lease_request(function.clone(), &plugin, max))
    }

    /// Tells the source how the job ended, retrying while the source is unreachable. A
    /// success's first try also leases `next` (when given and the source is willing), and
    /// the lease made is returned.
    pub(crate) async fn report(
        &self,
        finished: Finished,
        next: Option<LeaseRequest>,
    ) -> Vec<Lease> {
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
                        let next = next.locked().take();
                        let Some(next) = next else {
                            return self.source.complete(lease, output, notes).await;
                        };
                        let ttl = self.config.lease_ttl;
                        let (completion, lease) = self
                            .source
                            .complete_and_lease(lease, output, notes, &next, ttl)
                            .await?;
                        *leased.locked() = lease;
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
        crate::spans::record_outcome(state, (class != "none").then_some(class));
        log_report(result, &outcome, handed_back);
        leased.into_inner().unwrap_or_else(|e| e.into_inner())
    }
}

/// Asks for at most `max` jobs of `function`, with `plugin`'s defaults for jobs that set none.
/// (Within the queue's bounds, which a manifest is held to: a lease call outside them would be
/// refused, for every function the worker serves.)
pub(crate) fn lease_request(function: FunctionName, plugin: &Plugin, max: usize) -> LeaseRequest {
    use wasmgear_proto::limits::{MAX_ATTEMPTS, MAX_DURATION_MS};
    let defaults = plugin.defaults();
    let timeout_ms = defaults.timeout.unwrap_or(DEFAULT_TIMEOUT).as_millis() as u64;
    let attempts = defaults.max_attempts.unwrap_or(DEFAULT_MAX_ATTEMPTS);
    LeaseRequest {
        function,
        max,
        default_timeout_ms: timeout_ms.clamp(1, MAX_DURATION_MS),
        default_max_attempts: attempts.clamp(1, MAX_ATTEMPTS as u32),
        hand_off: true,
    }
}

/// Logs how the report of a job that ended with `outcome` went.
pub(crate) fn log_report(
    result: Result<Completion, SourceError>,
    outcome: &Outcome,
    handed_back: bool,
) {
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
