//! What a wasmgear worker needs from a queue: the [`JobSource`] trait (leases, heartbeats,
//! results, cancellations, hand-offs), and [`DynJobSource`], its twin with boxed futures, so
//! that a worker can hold sources of several protocols as trait objects
//! (`Box<dyn DynJobSource>` is itself a [`JobSource`]). No I/O and no wasmtime: the queue
//! (`wasmgear-client`), the foreign protocols (`wasmgear-sources`) and the worker node
//! (`wasmgear-worker`) all build on it.
//!
//! Implementing a source: implement [`JobSource`] (the methods with bodies have defaults a
//! source without push, roll calls or hand-offs keeps); it is a [`DynJobSource`] at once.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use tokio::sync::broadcast;

use wasmgear_proto::{
    AttemptNotes, CancelRequest, Completion, FunctionName, JobFailure, Lease, LeaseRequest,
    LeaseStatus, Progress, WorkerAd,
};

/// The error a job source reports: the worker logs it and carries on (retrying later).
pub type SourceError = Box<dyn std::error::Error + Send + Sync>;

/// What a source that keeps no checkpoints answers a save with.
pub const NO_CHECKPOINTS: &str =
    "this job's queue keeps no checkpoints (only wasmgear's own queue does)";

/// What the worker needs from a queue.
pub trait JobSource: Send + Sync + 'static {
    /// Leases up to `max` jobs in all, at most `request.max` of each requested function;
    /// each lease lasts `ttl` unless renewed.
    fn lease(
        &self,
        requests: &[LeaseRequest],
        max: usize,
        ttl: Duration,
    ) -> impl Future<Output = Result<Vec<Lease>, SourceError>> + Send;

    /// Returns when work may have arrived, or after `timeout` at the latest.
    fn wait_for_work(&self, timeout: Duration) -> impl Future<Output = ()> + Send;

    /// Renews `lease` for `ttl`, and says whether it is still held and whether the job's
    /// cancellation was asked for.
    fn heartbeat(
        &self,
        lease: &Lease,
        ttl: Duration,
    ) -> impl Future<Output = Result<LeaseStatus, SourceError>> + Send;

    /// Ids of jobs whose cancellation was asked for, pushed as soon as the source hears of
    /// it (heartbeats report it too, later). A source without push never sends.
    fn cancel_requests(&self) -> broadcast::Receiver<CancelRequest>;

    /// Records progress; `Ok(false)` means the lease is lost.
    fn progress(
        &self,
        lease: &Lease,
        progress: &Progress,
    ) -> impl Future<Output = Result<bool, SourceError>> + Send;

    /// Whether the source keeps checkpoints for `lease`'s job (a running job's saves are
    /// refused at once when not). By default it keeps none.
    fn keeps_checkpoints(&self, lease: &Lease) -> bool {
        let _ = lease;
        false
    }

    /// Keeps `data` as the checkpoint of `lease`'s job, in place of the one before, for its
    /// next attempts to resume from; `Ok(false)` means the lease is lost. By default the
    /// source keeps none, and says so.
    fn save_checkpoint(
        &self,
        lease: &Lease,
        data: &[u8],
    ) -> impl Future<Output = Result<bool, SourceError>> + Send {
        let _ = (lease, data);
        async { Err(NO_CHECKPOINTS.into()) }
    }

    /// The checkpoint `lease`'s job keeps (an earlier attempt's), if any. By default none.
    fn checkpoint(
        &self,
        lease: &Lease,
    ) -> impl Future<Output = Result<Option<Vec<u8>>, SourceError>> + Send {
        let _ = lease;
        async { Ok(None) }
    }

    /// Finishes the job with its output; `notes` say what the attempt
    /// logged and which plugin version ran it.
    fn complete(
        &self,
        lease: &Lease,
        output: &[u8],
        notes: &AttemptNotes,
    ) -> impl Future<Output = Result<Completion, SourceError>> + Send;

    /// Finishes the job as [`JobSource::complete`] does and may, in the same round trip,
    /// lease up to `next.max` more jobs of its function for the slot it frees (`next` says
    /// with which defaults, `ttl` for how long). The source decides whether to (it keeps
    /// functions and sources served in turn); by default it does not.
    fn complete_and_lease(
        &self,
        lease: &Lease,
        output: &[u8],
        notes: &AttemptNotes,
        next: &LeaseRequest,
        ttl: Duration,
    ) -> impl Future<Output = Result<(Completion, Vec<Lease>), SourceError>> + Send {
        let _ = (next, ttl);
        async move { Ok((self.complete(lease, output, notes).await?, Vec::new())) }
    }

    /// Records a failed attempt (the source decides between retry and failure for good);
    /// `notes` say what the attempt logged and which plugin version ran it.
    fn fail(
        &self,
        lease: &Lease,
        failure: &JobFailure,
        notes: &AttemptNotes,
    ) -> impl Future<Output = Result<Completion, SourceError>> + Send;

    /// This worker's id at the source.
    fn worker_id(&self) -> &str;

    /// Tells the source which functions this worker serves now (it listens for their new
    /// work and cancellations). By default there is nothing to tell.
    fn serve(
        &self,
        functions: &[FunctionName],
    ) -> impl Future<Output = Result<(), SourceError>> + Send {
        let _ = functions;
        async { Ok(()) }
    }

    /// Advertises the worker (`ad`) and its functions for `ttl`; zero takes it out. By
    /// default the source has no place for that.
    fn advertise(
        &self,
        ad: &WorkerAd,
        functions: &[FunctionName],
        ttl: Duration,
    ) -> impl Future<Output = Result<(), SourceError>> + Send {
        let _ = (ad, functions, ttl);
        async { Ok(()) }
    }

    /// Takes the worker out of the roll call of `functions` (it no longer serves them). By
    /// default there is no roll call.
    fn leave(
        &self,
        functions: &[FunctionName],
    ) -> impl Future<Output = Result<(), SourceError>> + Send {
        let _ = functions;
        async { Ok(()) }
    }

    /// Hands the job back unrun (the worker is shutting down).
    fn release(
        &self,
        lease: &Lease,
    ) -> impl Future<Output = Result<Completion, SourceError>> + Send;

    /// Whether the source answers within `timeout`, for the worker's readiness check. By
    /// default it is taken to.
    fn ping(&self, timeout: Duration) -> impl Future<Output = Result<(), SourceError>> + Send {
        let _ = timeout;
        async { Ok(()) }
    }

    /// How often the source's connection came back after it was lost. By default none is
    /// counted.
    fn reconnects(&self) -> u64 {
        0
    }

    /// Whether the source has heard, since `lease` was made, a cancel meant for its job
    /// (asked for before the worker started it): the worker then never starts it. By
    /// default none is heard but through [`JobSource::cancel_requests`].
    fn cancel_heard(&self, lease: &Lease) -> bool {
        let _ = lease;
        false
    }

    /// The slots the source keeps for jobs it may hand this worker without a lease call
    /// (hand-offs it registered for, jobs handed and not yet taken): the worker keeps that
    /// many of its free slots out of other use, and gives them to its next
    /// [`JobSource::lease`] in `max`. By default none.
    fn reserved_slots(&self) -> usize {
        0
    }

    /// Shutdown has begun: the source stops handing this worker jobs, and hands back those
    /// it was handed and has not given out. By default there is nothing to stop.
    fn stop_leasing(&self) -> impl Future<Output = ()> + Send {
        async {}
    }

    /// Housekeeping the source needs now and then for the functions served (the worker
    /// calls it with each advertisement). By default there is none.
    fn maintain(
        &self,
        functions: &[FunctionName],
    ) -> impl Future<Output = Result<(), SourceError>> + Send {
        let _ = functions;
        async { Ok(()) }
    }
}

/// A future of a [`DynJobSource`] method.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// [`JobSource`] with boxed futures, so that it can be a trait object: every `JobSource` is
/// one, and `Box<dyn DynJobSource>` is a `JobSource` again.
#[allow(missing_docs)]
pub trait DynJobSource: Send + Sync + 'static {
    fn lease_dyn<'a>(
        &'a self,
        requests: &'a [LeaseRequest],
        max: usize,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<Vec<Lease>, SourceError>>;
    fn wait_for_work_dyn(&self, timeout: Duration) -> BoxFuture<'_, ()>;
    fn heartbeat_dyn<'a>(
        &'a self,
        lease: &'a Lease,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<LeaseStatus, SourceError>>;
    fn cancel_requests_dyn(&self) -> broadcast::Receiver<CancelRequest>;
    fn progress_dyn<'a>(
        &'a self,
        lease: &'a Lease,
        progress: &'a Progress,
    ) -> BoxFuture<'a, Result<bool, SourceError>>;
    fn keeps_checkpoints_dyn(&self, lease: &Lease) -> bool;
    fn save_checkpoint_dyn<'a>(
        &'a self,
        lease: &'a Lease,
        data: &'a [u8],
    ) -> BoxFuture<'a, Result<bool, SourceError>>;
    fn checkpoint_dyn<'a>(
        &'a self,
        lease: &'a Lease,
    ) -> BoxFuture<'a, Result<Option<Vec<u8>>, SourceError>>;
    fn complete_dyn<'a>(
        &'a self,
        lease: &'a Lease,
        output: &'a [u8],
        notes: &'a AttemptNotes,
    ) -> BoxFuture<'a, Result<Completion, SourceError>>;
    fn complete_and_lease_dyn<'a>(
        &'a self,
        lease: &'a Lease,
        output: &'a [u8],
        notes: &'a AttemptNotes,
        next: &'a LeaseRequest,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<(Completion, Vec<Lease>), SourceError>>;
    fn fail_dyn<'a>(
        &'a self,
        lease: &'a Lease,
        failure: &'a JobFailure,
        notes: &'a AttemptNotes,
    ) -> BoxFuture<'a, Result<Completion, SourceError>>;
    fn worker_id_dyn(&self) -> &str;
    fn serve_dyn<'a>(
        &'a self,
        functions: &'a [FunctionName],
    ) -> BoxFuture<'a, Result<(), SourceError>>;
    fn advertise_dyn<'a>(
        &'a self,
        ad: &'a WorkerAd,
        functions: &'a [FunctionName],
        ttl: Duration,
    ) -> BoxFuture<'a, Result<(), SourceError>>;
    fn leave_dyn<'a>(
        &'a self,
        functions: &'a [FunctionName],
    ) -> BoxFuture<'a, Result<(), SourceError>>;
    fn release_dyn<'a>(
        &'a self,
        lease: &'a Lease,
    ) -> BoxFuture<'a, Result<Completion, SourceError>>;
    fn ping_dyn(&self, timeout: Duration) -> BoxFuture<'_, Result<(), SourceError>>;
    fn reconnects_dyn(&self) -> u64;
    fn cancel_heard_dyn(&self, lease: &Lease) -> bool;
    fn reserved_slots_dyn(&self) -> usize;
    fn stop_leasing_dyn(&self) -> BoxFuture<'_, ()>;
    fn maintain_dyn<'a>(
        &'a self,
        functions: &'a [FunctionName],
    ) -> BoxFuture<'a, Result<(), SourceError>>;
}

impl<S: JobSource> DynJobSource for S {
    fn lease_dyn<'a>(
        &'a self,
        requests: &'a [LeaseRequest],
        max: usize,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<Vec<Lease>, SourceError>> {
        Box::pin(self.lease(requests, max, ttl))
    }
    fn wait_for_work_dyn(&self, timeout: Duration) -> BoxFuture<'_, ()> {
        Box::pin(self.wait_for_work(timeout))
    }
    fn heartbeat_dyn<'a>(
        &'a self,
        lease: &'a Lease,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<LeaseStatus, SourceError>> {
        Box::pin(self.heartbeat(lease, ttl))
    }
    fn cancel_requests_dyn(&self) -> broadcast::Receiver<CancelRequest> {
        self.cancel_requests()
    }
    fn progress_dyn<'a>(
        &'a self,
        lease: &'a Lease,
        progress: &'a Progress,
    ) -> BoxFuture<'a, Result<bool, SourceError>> {
        Box::pin(self.progress(lease, progress))
    }
    fn keeps_checkpoints_dyn(&self, lease: &Lease) -> bool {
        self.keeps_checkpoints(lease)
    }
    fn save_checkpoint_dyn<'a>(
        &'a self,
        lease: &'a Lease,
        data: &'a [u8],
    ) -> BoxFuture<'a, Result<bool, SourceError>> {
        Box::pin(self.save_checkpoint(lease, data))
    }
    fn checkpoint_dyn<'a>(
        &'a self,
        lease: &'a Lease,
    ) -> BoxFuture<'a, Result<Option<Vec<u8>>, SourceError>> {
        Box::pin(self.checkpoint(lease))
    }
    fn complete_dyn<'a>(
        &'a self,
        lease: &'a Lease,
        output: &'a [u8],
        notes: &'a AttemptNotes,
    ) -> BoxFuture<'a, Result<Completion, SourceError>> {
        Box::pin(self.complete(lease, output, notes))
    }
    fn complete_and_lease_dyn<'a>(
        &'a self,
        lease: &'a Lease,
        output: &'a [u8],
        notes: &'a AttemptNotes,
        next: &'a LeaseRequest,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<(Completion, Vec<Lease>), SourceError>> {
        Box::pin(self.complete_and_lease(lease, output, notes, next, ttl))
    }
    fn fail_dyn<'a>(
        &'a self,
        lease: &'a Lease,
        failure: &'a JobFailure,
        notes: &'a AttemptNotes,
    ) -> BoxFuture<'a, Result<Completion, SourceError>> {
        Box::pin(self.fail(lease, failure, notes))
    }
    fn worker_id_dyn(&self) -> &str {
        self.worker_id()
    }
    fn serve_dyn<'a>(
        &'a self,
        functions: &'a [FunctionName],
    ) -> BoxFuture<'a, Result<(), SourceError>> {
        Box::pin(self.serve(functions))
    }
    fn advertise_dyn<'a>(
        &'a self,
        ad: &'a WorkerAd,
        functions: &'a [FunctionName],
        ttl: Duration,
    ) -> BoxFuture<'a, Result<(), SourceError>> {
        Box::pin(self.advertise(ad, functions, ttl))
    }
    fn leave_dyn<'a>(
        &'a self,
        functions: &'a [FunctionName],
    ) -> BoxFuture<'a, Result<(), SourceError>> {
        Box::pin(self.leave(functions))
    }
    fn release_dyn<'a>(
        &'a self,
        lease: &'a Lease,
    ) -> BoxFuture<'a, Result<Completion, SourceError>> {
        Box::pin(self.release(lease))
    }
    fn ping_dyn(&self, timeout: Duration) -> BoxFuture<'_, Result<(), SourceError>> {
        Box::pin(self.ping(timeout))
    }
    fn reconnects_dyn(&self) -> u64 {
        self.reconnects()
    }
    fn cancel_heard_dyn(&self, lease: &Lease) -> bool {
        self.cancel_heard(lease)
    }
    fn reserved_slots_dyn(&self) -> usize {
        self.reserved_slots()
    }
    fn stop_leasing_dyn(&self) -> BoxFuture<'_, ()> {
        Box::pin(self.stop_leasing())
    }
    fn maintain_dyn<'a>(
        &'a self,
        functions: &'a [FunctionName],
    ) -> BoxFuture<'a, Result<(), SourceError>> {
        Box::pin(self.maintain(functions))
    }
}

/// A source of any protocol, held as a trait object.
pub type AnySource = Box<dyn DynJobSource>;

impl JobSource for AnySource {
    async fn lease(
        &self,
        requests: &[LeaseRequest],
        max: usize,
        ttl: Duration,
    ) -> Result<Vec<Lease>, SourceError> {
        (**self).lease_dyn(requests, max, ttl).await
    }
    async fn wait_for_work(&self, timeout: Duration) {
        (**self).wait_for_work_dyn(timeout).await
    }
    async fn heartbeat(&self, lease: &Lease, ttl: Duration) -> Result<LeaseStatus, SourceError> {
        (**self).heartbeat_dyn(lease, ttl).await
    }
    fn cancel_requests(&self) -> broadcast::Receiver<CancelRequest> {
        (**self).cancel_requests_dyn()
    }
    async fn progress(&self, lease: &Lease, progress: &Progress) -> Result<bool, SourceError> {
        (**self).progress_dyn(lease, progress).await
    }
    fn keeps_checkpoints(&self, lease: &Lease) -> bool {
        (**self).keeps_checkpoints_dyn(lease)
    }
    async fn save_checkpoint(&self, lease: &Lease, data: &[u8]) -> Result<bool, SourceError> {
        (**self).save_checkpoint_dyn(lease, data).await
    }
    async fn checkpoint(&self, lease: &Lease) -> Result<Option<Vec<u8>>, SourceError> {
        (**self).checkpoint_dyn(lease).await
    }
    async fn complete(
        &self,
        lease: &Lease,
        output: &[u8],
        notes: &AttemptNotes,
    ) -> Result<Completion, SourceError> {
        (**self).complete_dyn(lease, output, notes).await
    }
    async fn complete_and_lease(
        &self,
        lease: &Lease,
        output: &[u8],
        notes: &AttemptNotes,
        next: &LeaseRequest,
        ttl: Duration,
    ) -> Result<(Completion, Vec<Lease>), SourceError> {
        (**self)
            .complete_and_lease_dyn(lease, output, notes, next, ttl)
            .await
    }
    async fn fail(
        &self,
        lease: &Lease,
        failure: &JobFailure,
        notes: &AttemptNotes,
    ) -> Result<Completion, SourceError> {
        (**self).fail_dyn(lease, failure, notes).await
    }
    fn worker_id(&self) -> &str {
        (**self).worker_id_dyn()
    }
    async fn serve(&self, functions: &[FunctionName]) -> Result<(), SourceError> {
        (**self).serve_dyn(functions).await
    }
    async fn advertise(
        &self,
        ad: &WorkerAd,
        functions: &[FunctionName],
        ttl: Duration,
    ) -> Result<(), SourceError> {
        (**self).advertise_dyn(ad, functions, ttl).await
    }
    async fn leave(&self, functions: &[FunctionName]) -> Result<(), SourceError> {
        (**self).leave_dyn(functions).await
    }
    async fn release(&self, lease: &Lease) -> Result<Completion, SourceError> {
        (**self).release_dyn(lease).await
    }
    async fn ping(&self, timeout: Duration) -> Result<(), SourceError> {
        (**self).ping_dyn(timeout).await
    }
    fn reconnects(&self) -> u64 {
        (**self).reconnects_dyn()
    }
    fn cancel_heard(&self, lease: &Lease) -> bool {
        (**self).cancel_heard_dyn(lease)
    }
    fn reserved_slots(&self) -> usize {
        (**self).reserved_slots_dyn()
    }
    async fn stop_leasing(&self) {
        (**self).stop_leasing_dyn().await
    }
    async fn maintain(&self, functions: &[FunctionName]) -> Result<(), SourceError> {
        (**self).maintain_dyn(functions).await
    }
}
