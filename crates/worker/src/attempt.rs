//! One attempt of a job in its slot: the instance runs while its lease is renewed, its
//! progress and log are forwarded ([`Reporter`]), and its end is reported to the source.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use tokio::sync::{OwnedSemaphorePermit, mpsc, watch};
use tracing::Instrument;
use wasmgear_proto::{
    AttemptNotes, ErrorClass, JobFailure, Lease, LeaseStatus, LogLevel, Outcome, Progress,
};
use wasmgear_runtime::{CancelReason, CancelSignal, InFlight, JobHooks, Plugin};

use crate::checkpoints::{Checkpoints, LoadReply, Reports};
use crate::node::*;
use crate::*;
use wasmgear_proto::sync::Locked;

/// Forwards a running job's reports: progress to a watch channel (coalescing, with its
/// checkpoints), logs to tracing under the job's span.
pub(crate) struct Reporter {
    pub(crate) reports: watch::Sender<Reports>,
    pub(crate) lines: Arc<Mutex<String>>,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) function: Arc<metrics::PerFunction>,
    pub(crate) children: Option<Arc<dyn wasmgear_runtime::ChildJobs>>,
    pub(crate) dependencies: Option<Arc<dyn wasmgear_runtime::JobDependencies>>,
    pub(crate) checkpoints: Option<Arc<dyn wasmgear_runtime::JobCheckpoints>>,
    /// Whether the attempt's span records (its events are added then only).
    pub(crate) recording: bool,
}

/// The most bytes of one attempt's log kept for the queue.
pub const MAX_ATTEMPT_LOG_BYTES: usize = 64 * 1024;

/// The line that ends an attempt's log once it is full.
pub(crate) const ATTEMPT_LOG_FULL: &str =
    "WARN  … [the attempt's log is full: further lines were dropped]\n";

impl JobHooks for Reporter {
    fn progress(&self, progress: Progress) {
        self.reports
            .send_modify(|reports| reports.progress(progress));
    }

    fn instantiated(&self, took: Duration) {
        self.metrics.instantiated(took);
        self.function.instance();
        crate::spans::event(
            self.recording,
            "instance ready",
            "took_us",
            took.as_micros() as u64,
        );
    }

    fn memory(&self, peak_bytes: usize) {
        self.function.memory(peak_bytes);
    }

    fn children(&self) -> Option<Arc<dyn wasmgear_runtime::ChildJobs>> {
        self.children.clone()
    }

    fn dependencies(&self) -> Option<Arc<dyn wasmgear_runtime::JobDependencies>> {
        self.dependencies.clone()
    }

    fn checkpoints(&self) -> Option<Arc<dyn wasmgear_runtime::JobCheckpoints>> {
        self.checkpoints.clone()
    }

    /// Keeps the line in the attempt's log and passes it to `tracing` (the worker's log, and
    /// an event of the attempt's span when spans are exported) while the log has room: past
    /// [`MAX_ATTEMPT_LOG_BYTES`], one line says the rest was dropped.
    fn log(&self, level: LogLevel, message: String) {
        {
            let mut lines = self.lines.locked();
            let line = format!("{:<5} {message}\n", format!("{level:?}").to_uppercase());
            if lines.len() + line.len() + ATTEMPT_LOG_FULL.len() <= MAX_ATTEMPT_LOG_BYTES {
                lines.push_str(&line);
            } else {
                if !lines.ends_with(ATTEMPT_LOG_FULL) {
                    lines.push_str(ATTEMPT_LOG_FULL);
                    tracing::warn!(target: "wasmgear::guest", "{}", ATTEMPT_LOG_FULL.trim_end());
                }
                return;
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
pub(crate) const FIRST_BEAT_MAX: Duration = Duration::from_secs(1);

/// The shortest time between two progress writes of one job (a guest reporting faster is
/// coalesced: at most 20 writes per second per job reach the queue).
pub const PROGRESS_INTERVAL: Duration = Duration::from_millis(50);

/// How often reporting to the source is tried when the source is unreachable.
pub(crate) const REPORT_ATTEMPTS: usize = 5;

/// The wait before the first retry of a report; it doubles (with jitter) on each next one.
pub(crate) const REPORT_RETRY_FIRST: Duration = Duration::from_millis(400);

impl<S: JobSource> Node<S> {
    /// Runs `first` in the slot `permit` holds, then the jobs leased with its result and
    /// theirs, one at a time, for as long as the source hands them (see
    /// [`JobSource::complete_and_lease`]); frees the slot when none is left.
    ///
    /// A short job asks for the next one and more that wait here (see [`AHEAD_MAX`]), so
    /// that the slot goes on at once when a job ends while the results and the next leases
    /// make their round trips. Jobs waiting here are handed back once the oldest has waited
    /// [`HOLD_AHEAD_MAX`]: none waits behind a long job, its lease running.
    pub(crate) async fn serve_slot(
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
            let attempt = crate::spans::attempt_span(&lease, self.source.worker_id());
            let span = attempt.span.clone();
            let started = tokio::time::Instant::now();
            let run = self
                .run_attempt(lease, plugin, attempt)
                .instrument(span.clone());
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

    /// Runs the job, keeping its lease and forwarding its progress, until it has stopped.
    pub(crate) async fn run_attempt(
        &self,
        lease: Lease,
        plugin: Option<Arc<Plugin>>,
        attempt: crate::spans::Attempt,
    ) -> Finished {
        let crate::spans::Attempt {
            trace, recording, ..
        } = attempt;
        let id = lease.info.id.clone();
        let cancel = CancelSignal::new();
        self.running
            .locked()
            .insert(lease.token.clone(), (id.clone(), cancel.clone()));

        let lines = Arc::new(Mutex::new(String::new()));
        let plugin_version = plugin.as_ref().map(|p| p.version().to_string());
        let waited = wasmgear_proto::units::now_ms().saturating_sub(lease.info.enqueued_at_ms);
        let measured = self.metrics.function(&id.function);
        measured.started(lease.info.attempt, waited);
        crate::spans::event(recording, "left the queue", "wait_ms", waited);
        if let Some(version) = &plugin_version {
            crate::spans::record_version(recording, version);
        }
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
                let (reports_tx, reports_rx) = watch::channel(Reports::default());
                // Only a plugin that imports checkpoints has them, and a channel for their
                // loads (no cost for the others).
                let (checkpoints, loads_rx) = if plugin.saves_checkpoints() {
                    let (loads_tx, loads_rx) = mpsc::unbounded_channel();
                    let checkpoints = Arc::new(Checkpoints::new(
                        reports_tx.clone(),
                        loads_tx,
                        self.source.keeps_checkpoints(&lease),
                    ))
                        as Arc<dyn wasmgear_runtime::JobCheckpoints>;
                    (Some(checkpoints), Some(loads_rx))
                } else {
                    (None, None)
                };
                let hooks: Arc<dyn JobHooks> = Arc::new(Reporter {
                    reports: reports_tx,
                    lines: lines.clone(),
                    metrics: self.metrics.clone(),
                    function: measured.clone(),
                    children: self.children.as_ref().map(|client| {
                        Arc::new(children::Children::new(
                            client.clone(),
                            lease.info.id.clone(),
                            trace.clone(),
                        )) as Arc<dyn wasmgear_runtime::ChildJobs>
                    }),
                    dependencies: self.children.as_ref().map(|client| {
                        Arc::new(dependencies::Dependencies::new(
                            client.clone(),
                            lease.info.id.clone(),
                            self.source.worker_id().to_string(),
                            lease.info.attempt,
                        )) as Arc<dyn wasmgear_runtime::JobDependencies>
                    }),
                    checkpoints,
                    recording,
                });
                // The job's own info, unless the attempt passes on a context of its own (its
                // exported span's): no copy per job with tracing off.
                let info = if trace == lease.info.trace {
                    std::borrow::Cow::Borrowed(&lease.info)
                } else {
                    std::borrow::Cow::Owned(wasmgear_proto::JobInfo {
                        trace: trace.clone(),
                        ..lease.info.clone()
                    })
                };
                let run = self
                    .runtime
                    .run(&plugin, &info, &lease.input, hooks, cancel.clone())
                    .instrument(crate::spans::run_span(recording));
                let mut run = std::pin::pin!(run);
                // A job that ends at its first poll without reporting progress or saving a
                // checkpoint needs no keeper (its lease is fresh): no heartbeat timers are
                // set for it.
                let first =
                    std::future::poll_fn(|cx| std::task::Poll::Ready(run.as_mut().poll(cx))).await;
                match first {
                    std::task::Poll::Ready(outcome) if reports_rx.borrow().is_empty() => outcome,
                    first => {
                        let keeper = self.keep_lease(&lease, reports_rx, loads_rx, cancel.clone());
                        // The keeper ends once the run has dropped the reporter and the last
                        // progress report and checkpoint are stored, so they always land
                        // before the finish.
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
        self.running.locked().remove(&lease.token);
        let notes = AttemptNotes {
            log: std::mem::take(&mut *lines.locked()),
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

    /// Renews the lease every third of its TTL, stores progress reports and checkpoints
    /// (coalesced: at most one write of each per [`PROGRESS_INTERVAL`]) and answers the
    /// job's checkpoint loads, until the job's reporter is dropped. A lost lease cancels the job; so does a lease about to run
    /// out without a successful renewal (the worker may be cut off from the queue, which
    /// will soon give the job to another worker): the job is asked to stop a quarter of the
    /// TTL before the lease ends, and stopped hard when it ends.
    pub(crate) async fn keep_lease(
        &self,
        lease: &Lease,
        mut reports: watch::Receiver<Reports>,
        mut loads: Option<mpsc::UnboundedReceiver<LoadReply>>,
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
            // How many progress reports and checkpoints were written.
            let (mut progress_written, mut checkpoints_written) = (0, 0);
            loop {
                tokio::select! {
                    changed = reports.changed() => {
                        // At most one write per interval: reports in between are coalesced
                        // into the latest, and the last one always lands.
                        if next_report > tokio::time::Instant::now() {
                            tokio::time::sleep_until(next_report).await;
                        }
                        if changed.is_err() && !reports.has_changed().unwrap_or(false) {
                            return;
                        }
                        let (progress, checkpoint) = {
                            let latest = reports.borrow_and_update();
                            (
                                latest.progress.clone().filter(|(n, _)| *n > progress_written),
                                latest.checkpoint.clone().filter(|(n, _)| *n > checkpoints_written),
                            )
                        };
                        next_report = tokio::time::Instant::now() + PROGRESS_INTERVAL;
                        if let Some((n, report)) = progress {
                            progress_written = n;
                            match self.source.progress(lease, &report).await {
                                Ok(true) => {}
                                Ok(false) => lost("lease lost"),
                                Err(error) => {
                                    self.metrics.source_error("progress");
                                    tracing::warn!(%error, "could not store progress");
                                }
                            }
                        }
                        if let Some((n, data)) = checkpoint {
                            checkpoints_written = n;
                            match self.source.save_checkpoint(lease, &data).await {
                                Ok(true) => {}
                                Ok(false) => lost("lease lost"),
                                Err(error) => {
                                    self.metrics.source_error("checkpoint");
                                    tracing::warn!(%error, "could not store the checkpoint");
                                }
                            }
                        }
                    }
                    Some(reply) = async {
                        match loads.as_mut() {
                            Some(loads) => loads.recv().await,
                            None => std::future::pending().await,
                        }
                    } => {
                        let read = self
                            .source
                            .checkpoint(lease)
                            .await
                            .map_err(|error| format!("the job's checkpoint cannot be read: {error}"));
                        if read.is_err() {
                            self.metrics.source_error("checkpoint");
                        }
                        let _ = reply.send(read);
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
}
