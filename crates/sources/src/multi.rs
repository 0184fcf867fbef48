//! One worker, several queues: [`Sources`] serves the jobs of every source it holds as one
//! [`JobSource`]. Leases are taken from each source in turn; a lease's token starts with
//! its source's place (`0/`, `1/`, ...) so that heartbeats, results and cancellations go
//! back to the source it came from, even when two sources number jobs of one function
//! alike.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures_util::future::select_all;
use tokio::sync::broadcast;
use tokio_util::task::AbortOnDropHandle;
use wasmgear_client::WorkerQueue;
use wasmgear_proto::{
    AttemptNotes, CancelRequest, Completion, FunctionName, JobFailure, Lease, LeaseRequest,
    LeaseStatus, Progress, WorkerAd,
};
use wasmgear_source::{AnySource, BoxFuture, DynJobSource, JobSource, SourceError};

use crate::spec::own_queue;
use crate::{ConnectError, ConnectOptions, SourceSpec};

/// Cancellations buffered for a slow listener (heartbeats catch the ones missed).
pub(crate) const CANCEL_BUFFER: usize = 1024;

/// Several sources served as one, each under a label (`wasmgear`, `gearmonkey@...`) that
/// the worker list shows.
pub struct Sources {
    sources: Vec<(String, AnySource)>,
    worker_id: String,
    /// Where leasing starts next time, so that no source goes first every time.
    next: AtomicUsize,
    cancels: broadcast::Sender<CancelRequest>,
    _forwarders: Vec<AbortOnDropHandle<()>>,
    /// wasmgear's worker list, when no source is wasmgear's own queue: the worker is
    /// listed there all the same (`wasmgear workers`), and leases nothing from it.
    registry: Option<WorkerQueue>,
}

/// Why a worker's sources did not all connect.
#[derive(Debug, thiserror::Error)]
pub enum SourcesError {
    /// One spec is given twice.
    #[error("--source {0} is given twice: give each source once")]
    Twice(String),
    /// A source did not connect.
    #[error("source {label}: {error}")]
    Connect {
        /// The source's label (its spec, password hidden).
        label: String,
        /// Why.
        #[source]
        error: ConnectError,
    },
    /// wasmgear's own Redis, where the worker is listed, did not connect.
    #[error(transparent)]
    WorkerList(ConnectError),
}

impl Sources {
    /// Connects every source `specs` name (in order; none given twice), and wasmgear's own
    /// queue at `options.redis` for the worker list when no spec serves it.
    pub async fn connect(
        specs: &[SourceSpec],
        options: ConnectOptions<'_>,
    ) -> Result<Self, SourcesError> {
        let labels: Vec<String> = specs.iter().map(SourceSpec::to_string).collect();
        if let Some(twice) = labels
            .iter()
            .enumerate()
            .find_map(|(i, label)| labels[..i].contains(label).then_some(label))
        {
            return Err(SourcesError::Twice(twice.clone()));
        }
        let mut list = Vec::with_capacity(specs.len());
        for (spec, label) in specs.iter().zip(labels) {
            let source = spec
                .connect(options)
                .await
                .map_err(|error| SourcesError::Connect {
                    label: label.clone(),
                    error,
                })?;
            tracing::info!(source = label, "serving");
            list.push((label, source));
        }
        let sources = Sources::new(options.worker_id, list);
        if specs.iter().any(SourceSpec::is_own_queue) {
            return Ok(sources);
        }
        let registry = own_queue(options.redis, options)
            .await
            .map_err(SourcesError::WorkerList)?;
        Ok(sources.with_registry(registry))
    }

    /// Serves `sources` (at least one) as worker `worker_id`. Must be called within a tokio
    /// runtime: each source's cancellations are forwarded by a task.
    pub fn new(worker_id: impl Into<String>, sources: Vec<(String, AnySource)>) -> Self {
        let cancels = broadcast::channel(CANCEL_BUFFER).0;
        let forwarders = sources
            .iter()
            .enumerate()
            .map(|(place, (_, source))| {
                let mut from = source.cancel_requests();
                let to = cancels.clone();
                AbortOnDropHandle::new(tokio::spawn(async move {
                    loop {
                        match from.recv().await {
                            Ok(request) => {
                                let _ = to.send(CancelRequest {
                                    job: request.job,
                                    token_prefix: format!("{place}/{}", request.token_prefix),
                                });
                            }
                            Err(broadcast::error::RecvError::Lagged(_)) => continue,
                            Err(broadcast::error::RecvError::Closed) => return,
                        }
                    }
                }))
            })
            .collect();
        Sources {
            sources,
            worker_id: worker_id.into(),
            next: AtomicUsize::new(0),
            cancels,
            _forwarders: forwarders,
            registry: None,
        }
    }

    /// Lists the worker in `queue`'s worker list as well (for a worker none of whose
    /// sources is wasmgear's own queue).
    pub fn with_registry(mut self, queue: WorkerQueue) -> Self {
        self.registry = Some(queue);
        self
    }

    /// The labels of the sources, in order.
    pub fn labels(&self) -> Vec<String> {
        self.sources
            .iter()
            .map(|(label, _)| label.clone())
            .collect()
    }

    /// The source a lease came from, and the lease as that source made it.
    fn route(&self, lease: &Lease) -> Result<(&AnySource, Lease), SourceError> {
        let unknown = || {
            format!(
                "lease token {:?} names no source of this worker",
                lease.token
            )
        };
        let (place, token) = lease.token.split_once('/').ok_or_else(unknown)?;
        let source = place
            .parse::<usize>()
            .ok()
            .and_then(|place| self.sources.get(place))
            .ok_or_else(unknown)?;
        // The input is not needed after the lease: it is not copied for every heartbeat.
        let inner = Lease {
            info: lease.info.clone(),
            input: Vec::new(),
            token: token.to_string(),
            expires: lease.expires,
            ttl: lease.ttl,
        };
        Ok((&source.1, inner))
    }

    /// Calls `call` on every source in turn, logging each failure with `what` (when given);
    /// returns the first error, after all were called.
    async fn on_all<'a>(
        &'a self,
        what: Option<&str>,
        call: impl Fn(&'a AnySource) -> BoxFuture<'a, Result<(), SourceError>>,
    ) -> Option<SourceError> {
        let mut first_error = None;
        for (label, source) in &self.sources {
            if let Err(error) = call(source).await {
                if let Some(what) = what {
                    tracing::warn!(source = label, %error, "{what}");
                }
                first_error.get_or_insert(error);
            }
        }
        first_error
    }
}

impl JobSource for Sources {
    async fn lease(
        &self,
        requests: &[LeaseRequest],
        max: usize,
        ttl: Duration,
    ) -> Result<Vec<Lease>, SourceError> {
        let count = self.sources.len();
        let first = self.next.fetch_add(1, Ordering::Relaxed) % count.max(1);
        let mut wanted = requests.to_vec();
        let mut leases = Vec::new();
        let mut first_error = None;
        // What a source keeps for its hand-offs is in `max`: the others may lease into it, and
        // that source then withdraws registrations until what it keeps fits in what it is
        // given (jobs leased come before slots kept for jobs that may come).
        for step in 0..count {
            let place = (first + step) % count;
            let room = max.saturating_sub(leases.len());
            if room == 0 {
                break;
            }
            wanted.retain(|request| request.max > 0);
            if wanted.is_empty() {
                break;
            }
            let (label, source) = &self.sources[place];
            match JobSource::lease(source, &wanted, room, ttl).await {
                Ok(got) => {
                    for mut lease in got {
                        if let Some(request) = wanted
                            .iter_mut()
                            .find(|r| r.function == lease.info.id.function)
                        {
                            request.max = request.max.saturating_sub(1);
                        }
                        lease.token = format!("{place}/{}", lease.token);
                        leases.push(lease);
                    }
                }
                Err(error) => {
                    tracing::warn!(source = label, %error, "leasing failed; trying again shortly");
                    first_error.get_or_insert(error);
                }
            }
        }
        match (leases.is_empty(), first_error) {
            (true, Some(error)) => Err(error),
            _ => Ok(leases),
        }
    }

    async fn wait_for_work(&self, timeout: Duration) {
        let waits = self
            .sources
            .iter()
            .map(|(_, source)| source.wait_for_work_dyn(timeout))
            .collect::<Vec<_>>();
        if !waits.is_empty() {
            select_all(waits).await;
        }
    }

    async fn heartbeat(&self, lease: &Lease, ttl: Duration) -> Result<LeaseStatus, SourceError> {
        let (source, inner) = self.route(lease)?;
        JobSource::heartbeat(source, &inner, ttl).await
    }

    fn cancel_requests(&self) -> broadcast::Receiver<CancelRequest> {
        self.cancels.subscribe()
    }

    async fn progress(&self, lease: &Lease, progress: &Progress) -> Result<bool, SourceError> {
        let (source, inner) = self.route(lease)?;
        JobSource::progress(source, &inner, progress).await
    }

    fn keeps_checkpoints(&self, lease: &Lease) -> bool {
        self.route(lease)
            .is_ok_and(|(source, inner)| JobSource::keeps_checkpoints(source, &inner))
    }

    async fn save_checkpoint(&self, lease: &Lease, data: &[u8]) -> Result<bool, SourceError> {
        let (source, inner) = self.route(lease)?;
        JobSource::save_checkpoint(source, &inner, data).await
    }

    async fn checkpoint(&self, lease: &Lease) -> Result<Option<Vec<u8>>, SourceError> {
        let (source, inner) = self.route(lease)?;
        JobSource::checkpoint(source, &inner).await
    }

    async fn complete(
        &self,
        lease: &Lease,
        output: &[u8],
        notes: &AttemptNotes,
    ) -> Result<Completion, SourceError> {
        let (source, inner) = self.route(lease)?;
        JobSource::complete(source, &inner, output, notes).await
    }

    /// Leases the next job in the same call only when this worker has a single source:
    /// with several, each free slot is leased for from the sources in turn.
    async fn complete_and_lease(
        &self,
        lease: &Lease,
        output: &[u8],
        notes: &AttemptNotes,
        next: &LeaseRequest,
        ttl: Duration,
    ) -> Result<(Completion, Vec<Lease>), SourceError> {
        let (source, inner) = self.route(lease)?;
        if self.sources.len() != 1 {
            let completion = JobSource::complete(source, &inner, output, notes).await?;
            return Ok((completion, Vec::new()));
        }
        let (completion, next) =
            JobSource::complete_and_lease(source, &inner, output, notes, next, ttl).await?;
        Ok((
            completion,
            next.into_iter()
                .map(|mut lease| {
                    lease.token = format!("0/{}", lease.token);
                    lease
                })
                .collect(),
        ))
    }

    async fn fail(
        &self,
        lease: &Lease,
        failure: &JobFailure,
        notes: &AttemptNotes,
    ) -> Result<Completion, SourceError> {
        let (source, inner) = self.route(lease)?;
        JobSource::fail(source, &inner, failure, notes).await
    }

    fn worker_id(&self) -> &str {
        &self.worker_id
    }

    async fn serve(&self, functions: &[FunctionName]) -> Result<(), SourceError> {
        let what = Some("cannot listen for new jobs; polling meanwhile");
        self.on_all(what, |s| s.serve_dyn(functions))
            .await
            .map_or(Ok(()), Err)
    }

    async fn advertise(
        &self,
        ad: &WorkerAd,
        functions: &[FunctionName],
        ttl: Duration,
    ) -> Result<(), SourceError> {
        let ad = WorkerAd {
            sources: self.labels(),
            ..ad.clone()
        };
        let mut first_error = self
            .on_all(None, |s| s.advertise_dyn(&ad, functions, ttl))
            .await;
        if let Some(registry) = &self.registry
            && let Err(error) = registry.advertise(&ad, functions, ttl).await
        {
            first_error.get_or_insert(error.into());
        }
        first_error.map_or(Ok(()), Err)
    }

    async fn leave(&self, functions: &[FunctionName]) -> Result<(), SourceError> {
        self.on_all(None, |s| s.leave_dyn(functions))
            .await
            .map_or(Ok(()), Err)
    }

    async fn release(&self, lease: &Lease) -> Result<Completion, SourceError> {
        let (source, inner) = self.route(lease)?;
        JobSource::release(source, &inner).await
    }

    /// Every source must answer (and the worker list's queue, when it is apart).
    async fn ping(&self, timeout: Duration) -> Result<(), SourceError> {
        for (label, source) in &self.sources {
            if let Err(error) = JobSource::ping(source, timeout).await {
                return Err(format!("source {label}: {error}").into());
            }
        }
        if let Some(registry) = &self.registry {
            registry.ping(timeout).await?;
        }
        Ok(())
    }

    fn reconnects(&self) -> u64 {
        let sources: u64 = self
            .sources
            .iter()
            .map(|(_, source)| JobSource::reconnects(source))
            .sum();
        sources + self.registry.as_ref().map_or(0, |r| r.reconnects())
    }

    fn cancel_heard(&self, lease: &Lease) -> bool {
        match self.route(lease) {
            Ok((source, inner)) => JobSource::cancel_heard(source, &inner),
            Err(_) => false,
        }
    }

    fn reserved_slots(&self) -> usize {
        self.sources
            .iter()
            .map(|(_, source)| JobSource::reserved_slots(source))
            .sum()
    }

    async fn stop_leasing(&self) {
        for (_, source) in &self.sources {
            JobSource::stop_leasing(source).await;
        }
    }

    async fn maintain(&self, functions: &[FunctionName]) -> Result<(), SourceError> {
        let what = Some("housekeeping failed; trying again shortly");
        self.on_all(what, |s| s.maintain_dyn(functions))
            .await
            .map_or(Ok(()), Err)
    }
}
