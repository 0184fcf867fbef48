//! Where a worker gets its jobs: the [`JobSource`] trait, and wasmgear's own Redis queue
//! as the first implementation. Another protocol (Gearman, qless, ...) is one more
//! implementation of this trait; nothing else in the worker changes.

use std::future::Future;
use std::time::Duration;

use tokio::sync::broadcast;

use crate::job::{
    AttemptNotes, CancelRequest, Completion, FunctionName, JobFailure, Lease, LeaseRequest,
    LeaseStatus, Progress, WorkerAd,
};
use crate::queue::WorkerQueue;

/// The error a job source reports: the worker logs it and carries on (retrying later).
pub type SourceError = Box<dyn std::error::Error + Send + Sync>;

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

impl JobSource for WorkerQueue {
    async fn lease(
        &self,
        requests: &[LeaseRequest],
        max: usize,
        ttl: Duration,
    ) -> Result<Vec<Lease>, SourceError> {
        Ok(WorkerQueue::lease(self, requests, max, ttl).await?)
    }

    async fn wait_for_work(&self, timeout: Duration) {
        WorkerQueue::wait_for_work(self, timeout).await
    }

    async fn heartbeat(&self, lease: &Lease, ttl: Duration) -> Result<LeaseStatus, SourceError> {
        Ok(WorkerQueue::heartbeat(self, lease, ttl).await?)
    }

    fn cancel_requests(&self) -> broadcast::Receiver<CancelRequest> {
        WorkerQueue::cancel_requests(self)
    }

    fn worker_id(&self) -> &str {
        WorkerQueue::worker_id(self)
    }

    async fn serve(&self, functions: &[FunctionName]) -> Result<(), SourceError> {
        Ok(WorkerQueue::listen(self, functions).await?)
    }

    async fn leave(&self, functions: &[FunctionName]) -> Result<(), SourceError> {
        Ok(WorkerQueue::leave(self, functions).await?)
    }

    async fn advertise(
        &self,
        ad: &WorkerAd,
        functions: &[FunctionName],
        ttl: Duration,
    ) -> Result<(), SourceError> {
        Ok(WorkerQueue::advertise(self, ad, functions, ttl).await?)
    }

    async fn progress(&self, lease: &Lease, progress: &Progress) -> Result<bool, SourceError> {
        Ok(WorkerQueue::progress(self, lease, progress).await?)
    }

    async fn complete(
        &self,
        lease: &Lease,
        output: &[u8],
        notes: &AttemptNotes,
    ) -> Result<Completion, SourceError> {
        Ok(WorkerQueue::complete(self, lease, output, notes).await?)
    }

    async fn complete_and_lease(
        &self,
        lease: &Lease,
        output: &[u8],
        notes: &AttemptNotes,
        next: &LeaseRequest,
        ttl: Duration,
    ) -> Result<(Completion, Vec<Lease>), SourceError> {
        Ok(WorkerQueue::complete_and_lease(self, lease, output, notes, next, ttl).await?)
    }

    async fn fail(
        &self,
        lease: &Lease,
        failure: &JobFailure,
        notes: &AttemptNotes,
    ) -> Result<Completion, SourceError> {
        Ok(WorkerQueue::fail(self, lease, failure, notes).await?)
    }

    async fn release(&self, lease: &Lease) -> Result<Completion, SourceError> {
        Ok(WorkerQueue::release(self, lease).await?)
    }

    async fn ping(&self, timeout: Duration) -> Result<(), SourceError> {
        Ok(WorkerQueue::ping(self, timeout).await?)
    }

    fn reserved_slots(&self) -> usize {
        WorkerQueue::reserved_slots(self)
    }

    fn cancel_heard(&self, lease: &Lease) -> bool {
        WorkerQueue::cancel_heard(self, lease)
    }

    async fn stop_leasing(&self) {
        WorkerQueue::stop_leasing(self).await
    }

    fn reconnects(&self) -> u64 {
        WorkerQueue::reconnects(self)
    }

    /// Lists the functions in the directory operators read, and re-checks the links of jobs
    /// waiting on jobs of other functions.
    async fn maintain(&self, functions: &[FunctionName]) -> Result<(), SourceError> {
        WorkerQueue::register(self, functions).await?;
        Ok(WorkerQueue::relink(self, functions).await?)
    }
}
