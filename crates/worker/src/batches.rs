//! Batch plugins: a node gathers up to `batch.max` jobs of a batch plugin's function into
//! one lease (waiting at most `batch.wait` for the batch to fill), runs them in one fresh
//! instance with one call, and reports each job on its own. A batch takes one slot of the
//! node (and counts once against the plugin's own concurrency): slots count instances.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::Either;
use tokio::sync::{OwnedSemaphorePermit, watch};
use wasmgear_proto::{AttemptNotes, FunctionName, Lease, LeaseRequest, LogLevel};
use wasmgear_runtime::{
    BatchEntry, BatchSettings, CancelReason, CancelSignal, InFlight, JobHooks, Plugin,
};

use crate::checkpoints::Reports;
use crate::node::*;
use crate::*;
use wasmgear_proto::sync::Locked;

/// How often a batch that is filling looks for more jobs while it waits (a look costs a
/// call to the queue only when work was announced meanwhile).
pub(crate) const GATHER_POLL: Duration = Duration::from_millis(2);

/// A batch gathered by a lease round: the plugin that runs it and its jobs.
pub(crate) struct Gathered {
    pub(crate) plugin: Arc<Plugin>,
    pub(crate) leases: Vec<Lease>,
}

/// What a batch's instance reports: its log goes to the worker's log (a batch's lines
/// belong to no one job), its timings to the function's metrics.
struct BatchHooks {
    metrics: Arc<Metrics>,
    function: Arc<metrics::PerFunction>,
    first: String,
    jobs: usize,
}

impl JobHooks for BatchHooks {
    fn progress(&self, _progress: wasmgear_proto::Progress) {}

    fn instantiated(&self, took: Duration) {
        self.metrics.instantiated(took);
        self.function.instance();
    }

    fn memory(&self, peak_bytes: usize) {
        self.function.memory(peak_bytes);
    }

    fn log(&self, level: LogLevel, message: String) {
        let (first, jobs) = (&self.first, self.jobs);
        match level {
            LogLevel::Trace => {
                tracing::trace!(target: "wasmgear::guest", batch = %first, jobs, "{message}")
            }
            LogLevel::Debug => {
                tracing::debug!(target: "wasmgear::guest", batch = %first, jobs, "{message}")
            }
            LogLevel::Info => {
                tracing::info!(target: "wasmgear::guest", batch = %first, jobs, "{message}")
            }
            LogLevel::Warn => {
                tracing::warn!(target: "wasmgear::guest", batch = %first, jobs, "{message}")
            }
            LogLevel::Error => {
                tracing::error!(target: "wasmgear::guest", batch = %first, jobs, "{message}")
            }
        }
    }
}

impl<S: JobSource> Node<S> {
    /// The served functions whose plugins take more than one job per call, with their
    /// plugins and settings, if their plugins may start another call now.
    pub(crate) fn batch_functions(&self) -> Vec<(FunctionName, Arc<Plugin>, BatchSettings)> {
        self.serving()
            .into_iter()
            .filter_map(|function| {
                let plugin = self.registry.get(&function)?;
                let settings = plugin.batch().filter(|b| b.max > 1)?.clone();
                (plugin.free_slots() > 0).then_some((function, plugin, settings))
            })
            .collect()
    }

    /// Whether `function`'s jobs are gathered in batches (its plugin takes more than one
    /// job per call): they are leased by [`Node::gather`] only.
    pub(crate) fn gathers(&self, function: &FunctionName) -> bool {
        self.registry
            .get(function)
            .is_some_and(|plugin| plugin.batch().is_some_and(|b| b.max > 1))
    }

    /// Leases a batch of `function`: up to `settings.max` jobs, and when the first lease
    /// finds some but fewer, more as they come for up to `settings.wait`. Empty when none
    /// is ready.
    pub(crate) async fn gather(
        &self,
        function: &FunctionName,
        plugin: &Plugin,
        settings: &BatchSettings,
    ) -> Result<Vec<Lease>, SourceError> {
        let ttl = self.config.lease_ttl;
        let deadline = tokio::time::Instant::now() + settings.wait;
        let mut leases: Vec<Lease> = Vec::new();
        loop {
            let want = settings.max - leases.len();
            let request = LeaseRequest {
                hand_off: false,
                ..lease_request(function.clone(), plugin, want)
            };
            let sent = std::time::Instant::now();
            let leased = self.source.lease(&[request], want, ttl).await;
            self.metrics.round_trip("lease", sent.elapsed());
            match leased {
                Ok(more) => {
                    self.metrics.leased();
                    leases.extend(more);
                }
                // What was gathered runs; the error is told when nothing was.
                Err(error) => {
                    self.metrics.source_error("lease");
                    if leases.is_empty() {
                        return Err(error);
                    }
                    tracing::warn!(%error, %function, "leasing more for a batch failed; running what was gathered");
                    return Ok(leases);
                }
            }
            let now = tokio::time::Instant::now();
            if leases.is_empty()
                || leases.len() >= settings.max
                || now >= deadline
                || self
                    .stopping_leases
                    .load(std::sync::atomic::Ordering::SeqCst)
            {
                return Ok(leases);
            }
            tokio::time::sleep_until(deadline.min(now + GATHER_POLL)).await;
        }
    }

    /// Runs a gathered batch in the slot `permit` holds: the jobs that may start (a token
    /// starts once, with half of its lease left) in one instance, their leases kept while
    /// it runs, then each job's result reported on its own.
    pub(crate) async fn run_batch(
        self: Arc<Self>,
        batch: Gathered,
        in_flight: InFlight,
        permit: OwnedSemaphorePermit,
    ) {
        let Gathered { plugin, leases } = batch;
        let now = std::time::Instant::now();
        let (mut run, mut late) = (Vec::new(), Vec::new());
        for lease in leases {
            if !self.first_start(&lease) {
                continue;
            }
            match lease.expires.saturating_duration_since(now) < lease.ttl / 2 {
                true => late.push(lease),
                false => run.push(lease),
            }
        }
        if !late.is_empty() {
            self.hand_back(late).await;
        }
        let Some(first) = run.first() else {
            drop(permit);
            self.slot_freed.notify_one();
            return;
        };
        let measured = self.metrics.function(&first.info.id.function);
        measured.batch(run.len());
        let signals: Vec<CancelSignal> = run.iter().map(|_| CancelSignal::new()).collect();
        {
            let mut running = self.running.locked();
            for (lease, signal) in run.iter().zip(&signals) {
                running.insert(lease.token.clone(), (lease.info.id.clone(), signal.clone()));
            }
        }
        for (lease, signal) in run.iter().zip(&signals) {
            if self.source.cancel_heard(lease) {
                signal.cancel(CancelReason::Requested);
            }
            let waited = wasmgear_proto::units::now_ms().saturating_sub(lease.info.enqueued_at_ms);
            measured.started(lease.info.attempt, waited);
        }
        let hooks: Arc<dyn JobHooks> = Arc::new(BatchHooks {
            metrics: self.metrics.clone(),
            function: measured.clone(),
            first: first.info.id.to_string(),
            jobs: run.len(),
        });
        let entries: Vec<BatchEntry<'_>> = run
            .iter()
            .zip(&signals)
            .map(|(lease, signal)| BatchEntry {
                job: &lease.info,
                input: &lease.input,
                cancel: signal.clone(),
            })
            .collect();
        // The whole batch is to stop once every job in it is (shutdown cancels them all).
        let batch_cancel = CancelSignal::new();
        let started = tokio::time::Instant::now();
        let outcomes = {
            let call = self
                .runtime
                .run_batch(&plugin, &entries, hooks, batch_cancel.clone());
            let mut call = std::pin::pin!(call);
            // A batch that ends at its first poll needs no keepers (its leases are fresh).
            let first_poll =
                std::future::poll_fn(|cx| std::task::Poll::Ready(call.as_mut().poll(cx))).await;
            match first_poll {
                std::task::Poll::Ready(outcomes) => outcomes,
                std::task::Poll::Pending => {
                    let (senders, receivers): (Vec<_>, Vec<_>) = run
                        .iter()
                        .map(|_| watch::channel(Reports::default()))
                        .unzip();
                    let keepers = futures_util::future::join_all(
                        run.iter().zip(receivers).zip(&signals).map(
                            |((lease, reports), signal)| {
                                self.keep_lease(lease, reports, None, signal.clone())
                            },
                        ),
                    );
                    let all_stopped = async {
                        for signal in &signals {
                            signal.fired_wait().await;
                        }
                        let reason = signals
                            .last()
                            .and_then(|signal| signal.fired())
                            .map_or(CancelReason::Requested, |(reason, _)| reason);
                        batch_cancel.cancel(reason);
                    };
                    let ran = async {
                        let outcomes = match futures_util::future::select(
                            call.as_mut(),
                            std::pin::pin!(all_stopped),
                        )
                        .await
                        {
                            Either::Left((outcomes, _)) => outcomes,
                            Either::Right(((), call)) => call.await,
                        };
                        // The keepers end once their reports' senders are gone.
                        drop(senders);
                        outcomes
                    };
                    tokio::join!(ran, keepers).0
                }
            }
        };
        drop(entries);
        let ran = started.elapsed();
        {
            let mut running = self.running.locked();
            for lease in &run {
                running.remove(&lease.token);
            }
        }
        // The slot frees as soon as the instance is gone, while the results are on their way.
        drop(permit);
        self.slot_freed.notify_one();
        let notes = AttemptNotes {
            log: String::new(),
            plugin_version: Some(plugin.version().to_string()),
        };
        let reports =
            run.into_iter()
                .zip(outcomes)
                .zip(&signals)
                .map(|((lease, outcome), signal)| {
                    measured.ran(ran);
                    let finished = Finished {
                        lease,
                        outcome,
                        cancelled: signal.fired().map(|(reason, _)| reason),
                        notes: notes.clone(),
                    };
                    self.report(finished, None)
                });
        futures_util::future::join_all(reports).await;
        // A plugin's own concurrency counts the batch until its results are stored.
        drop(in_flight);
        self.slot_freed.notify_one();
    }
}
