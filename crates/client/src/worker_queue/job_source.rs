//! wasmgear's own queue as a [`JobSource`]: what a worker node calls, forwarded to the
//! [`WorkerQueue`]'s methods.

use std::time::Duration;

use tokio::sync::broadcast;
use wasmgear_source::{JobSource, SourceError};

use super::WorkerQueue;
use wasmgear_proto::crypto::Field;
use wasmgear_proto::{
    AttemptNotes, CancelRequest, Completion, FunctionName, JobFailure, Lease, LeaseRequest,
    LeaseStatus, Progress, WorkerAd,
};

impl JobSource for WorkerQueue {
    async fn lease(
        &self,
        requests: &[LeaseRequest],
        max: usize,
        ttl: Duration,
    ) -> Result<Vec<Lease>, SourceError> {
        let leases = WorkerQueue::lease(self, requests, max, ttl).await?;
        Ok(self.open_leases(leases).await?)
    }

    async fn wait_for_work(&self, timeout: Duration) {
        WorkerQueue::wait_for_work(self, timeout).await
    }

    async fn heartbeat(&self, lease: &Lease, ttl: Duration) -> Result<LeaseStatus, SourceError> {
        let status = WorkerQueue::heartbeat(self, lease, ttl).await?;
        if status == LeaseStatus::Lost {
            self.forget_sealed(lease);
        }
        Ok(status)
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

    fn keeps_checkpoints(&self, _lease: &Lease) -> bool {
        true
    }

    async fn save_checkpoint(&self, lease: &Lease, data: &[u8]) -> Result<bool, SourceError> {
        if self.is_sealed_job(lease) {
            let sealed = self.seal_for(lease, Field::Checkpoint, data)?;
            return Ok(WorkerQueue::save_checkpoint(self, lease, &sealed).await?);
        }
        Ok(WorkerQueue::save_checkpoint(self, lease, data).await?)
    }

    async fn checkpoint(&self, lease: &Lease) -> Result<Option<Vec<u8>>, SourceError> {
        match WorkerQueue::checkpoint(self, lease).await? {
            Some(data) => Ok(Some(self.open_checkpoint(lease, data)?)),
            None => Ok(None),
        }
    }

    async fn complete(
        &self,
        lease: &Lease,
        output: &[u8],
        notes: &AttemptNotes,
    ) -> Result<Completion, SourceError> {
        if self.is_sealed_job(lease) {
            let output = self.seal_for(lease, Field::Output, output)?;
            let notes = self.sealed_notes(lease, notes)?;
            let done = WorkerQueue::complete(self, lease, &output, &notes).await?;
            self.forget_sealed(lease);
            return Ok(done);
        }
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
        let (done, next) = if self.is_sealed_job(lease) {
            let output = self.seal_for(lease, Field::Output, output)?;
            let notes = self.sealed_notes(lease, notes)?;
            let done =
                WorkerQueue::complete_and_lease(self, lease, &output, &notes, next, ttl).await?;
            self.forget_sealed(lease);
            done
        } else {
            WorkerQueue::complete_and_lease(self, lease, output, notes, next, ttl).await?
        };
        Ok((done, self.open_leases(next).await?))
    }

    async fn fail(
        &self,
        lease: &Lease,
        failure: &JobFailure,
        notes: &AttemptNotes,
    ) -> Result<Completion, SourceError> {
        if self.is_sealed_job(lease) {
            let failure = JobFailure {
                message: self.seal_text_for(lease, Field::Error, &failure.message)?,
                ..failure.clone()
            };
            let notes = self.sealed_notes(lease, notes)?;
            let done = WorkerQueue::fail(self, lease, &failure, &notes).await?;
            self.forget_sealed(lease);
            return Ok(done);
        }
        Ok(WorkerQueue::fail(self, lease, failure, notes).await?)
    }

    async fn release(&self, lease: &Lease) -> Result<Completion, SourceError> {
        self.forget_sealed(lease);
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
        WorkerQueue::relink(self, functions).await?;
        WorkerQueue::forget_done_flows(self).await?;
        Ok(WorkerQueue::check_batches(self).await?)
    }
}
