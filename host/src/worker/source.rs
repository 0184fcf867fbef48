//! Where a worker gets its jobs: the [`JobSource`] trait, and wasmgear's own Redis queue
//! as the first implementation. Another protocol (Gearman, qless, ...) is one more
//! implementation of this trait; nothing else in the worker changes.

use std::future::Future;
use std::time::Duration;

use tokio::sync::broadcast;

use crate::job::{Completion, JobFailure, JobId, Lease, LeaseRequest, LeaseStatus, Progress};
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
    fn cancel_requests(&self) -> broadcast::Receiver<JobId>;

    /// Records progress; `Ok(false)` means the lease is lost.
    fn progress(
        &self,
        lease: &Lease,
        progress: &Progress,
    ) -> impl Future<Output = Result<bool, SourceError>> + Send;

    /// Finishes the job with its output; `log` is what the attempt logged.
    fn complete(
        &self,
        lease: &Lease,
        output: &[u8],
        log: &str,
    ) -> impl Future<Output = Result<Completion, SourceError>> + Send;

    /// Records a failed attempt (the source decides between retry and failure for good);
    /// `log` is what the attempt logged.
    fn fail(
        &self,
        lease: &Lease,
        failure: &JobFailure,
        log: &str,
    ) -> impl Future<Output = Result<Completion, SourceError>> + Send;

    /// Hands the job back unrun (the worker is shutting down).
    fn release(
        &self,
        lease: &Lease,
    ) -> impl Future<Output = Result<Completion, SourceError>> + Send;
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

    fn cancel_requests(&self) -> broadcast::Receiver<JobId> {
        WorkerQueue::cancel_requests(self)
    }

    async fn progress(&self, lease: &Lease, progress: &Progress) -> Result<bool, SourceError> {
        Ok(WorkerQueue::progress(self, lease, progress).await?)
    }

    async fn complete(
        &self,
        lease: &Lease,
        output: &[u8],
        log: &str,
    ) -> Result<Completion, SourceError> {
        Ok(WorkerQueue::complete(self, lease, output, log).await?)
    }

    async fn fail(
        &self,
        lease: &Lease,
        failure: &JobFailure,
        log: &str,
    ) -> Result<Completion, SourceError> {
        Ok(WorkerQueue::fail(self, lease, failure, log).await?)
    }

    async fn release(&self, lease: &Lease) -> Result<Completion, SourceError> {
        Ok(WorkerQueue::release(self, lease).await?)
    }
}
