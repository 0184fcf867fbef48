//! redis-work-queue (MeVitae's; the Python and Node.js libraries 0.1.5): items a producer
//! adds under a key prefix `P`, run by a wasmgear worker as jobs of one function.
//!
//! As the libraries do: an item is `P:item:ID` (its data) and its id in `P:queue`; a lease
//! moves the id to `P:processing` (`RPOPLPUSH`) and sets `P:leased_by_session:ID` to the
//! holder's session with an expiry (renewed while the job runs), so that the libraries'
//! `light_clean` leaves a live lease alone and puts a dead worker's item back; completing
//! takes the id out of `P:processing` and deletes the data and the lease.
//!
//! Added: the protocol keeps no outcome, so the worker writes one to `P:result:ID` (a hash:
//! `status` success or failed, and `output` or `error`), kept for a day. A failure that may
//! pass is retried the protocol's only way, by letting the lease lapse (after the retry
//! backoff) so that a cleaner puts the item back; the worker runs that cleaning itself too.
//! Attempts are counted in `P:wasmgear:attempts`; when they run out the item is completed
//! with a failed result.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::broadcast;
use wasmgear_client::connection::Connection;
use wasmgear_proto::{
    AttemptNotes, CancelRequest, Completion, FunctionName, JobFailure, JobId, JobInfo, JobState,
    Lease, LeaseRequest, LeaseStatus, Progress,
};
use wasmgear_source::{JobSource, SourceError};

use crate::redis_source::{lease_status, lua_scripts};
use crate::{ConnectError, RetryBackoff, settled};

/// How long an item's outcome is kept in `P:result:ID`, in seconds.
pub const RESULT_TTL_SECS: u64 = 86_400;
/// Ids of `P:processing` looked at per housekeeping round.
const RECLAIM_BATCH: isize = 200;

/// Every key this source touches, under one prefix.
#[derive(Debug, Clone)]
pub struct WorkQueueKeys {
    prefix: String,
}

impl WorkQueueKeys {
    /// The keys under `prefix`.
    pub fn new(prefix: impl Into<String>) -> Self {
        WorkQueueKeys {
            prefix: prefix.into(),
        }
    }

    /// `P:queue`: ids waiting (pushed left, leased from the right).
    pub fn queue(&self) -> String {
        format!("{}:queue", self.prefix)
    }

    /// `P:processing`: ids leased.
    pub fn processing(&self) -> String {
        format!("{}:processing", self.prefix)
    }

    /// `P:item:ID`: the item's data; it exists while the item is incomplete.
    pub fn item(&self, id: &str) -> String {
        format!("{}:item:{id}", self.prefix)
    }

    /// `P:leased_by_session:ID`: the holder's session, expiring with the lease.
    pub fn lease(&self, id: &str) -> String {
        format!("{}:leased_by_session:{id}", self.prefix)
    }

    /// `P:result:ID`: the outcome wasmgear keeps for producers.
    pub fn result(&self, id: &str) -> String {
        format!("{}:result:{id}", self.prefix)
    }

    /// `P:wasmgear:attempts`: id → attempts started.
    pub fn attempts(&self) -> String {
        format!("{}:wasmgear:attempts", self.prefix)
    }
}

lua_scripts!("rwq":
    START = "start.lua",
    RENEW = "renew.lua",
    COMPLETE = "complete.lua",
    LAPSE = "lapse.lua",
    RECLAIM = "reclaim.lua",
);

/// A worker's connection to one redis-work-queue prefix, whose items are jobs of one
/// function.
pub struct WorkQueue {
    conn: Connection,
    keys: WorkQueueKeys,
    function: FunctionName,
    worker_id: String,
    /// This worker's session at the queue (a fresh random hex), as the libraries have one.
    session: String,
    leases: AtomicU64,
    cancels: broadcast::Sender<CancelRequest>,
    backoff: RetryBackoff,
}

/// A lease's token: `SESSION-N|ITEM_ID` (the part before `|` is what the lease key holds).
fn split_token(token: &str) -> Result<(&str, &str), SourceError> {
    token
        .split_once('|')
        .ok_or_else(|| format!("lease token {token:?} is no redis-work-queue token").into())
}

impl WorkQueue {
    /// Connects to the Redis at `url` to serve the items under `prefix` as jobs of
    /// `function`.
    pub async fn connect(
        url: &str,
        prefix: &str,
        function: FunctionName,
        worker_id: impl Into<String>,
        backoff: RetryBackoff,
    ) -> Result<Self, ConnectError> {
        let (_, conn) = crate::redis_source::connect_standalone(url, "redis-work-queue").await?;
        Ok(WorkQueue {
            conn,
            keys: WorkQueueKeys::new(prefix),
            function,
            worker_id: worker_id.into(),
            session: format!("wasmgear-{}", wasmgear_proto::sync::random_hex(8)),
            leases: AtomicU64::new(0),
            cancels: broadcast::channel(1).0,
            backoff,
        })
    }

    /// The function its items are jobs of.
    pub fn function(&self) -> &FunctionName {
        &self.function
    }

    async fn lease_one(
        &self,
        request: &LeaseRequest,
        ttl: Duration,
    ) -> Result<Option<Option<Lease>>, SourceError> {
        let sent = tokio::time::Instant::now().into_std();
        let id: Option<String> = redis::cmd("RPOPLPUSH")
            .arg(self.keys.queue())
            .arg(self.keys.processing())
            .query_async(&mut self.conn.clone())
            .await?;
        let Some(id) = id else { return Ok(None) };
        let n = self.leases.fetch_add(1, Ordering::Relaxed) + 1;
        let session = format!("{}-{n}", self.session);
        let started: Option<(Vec<u8>, u32)> = START
            .key(self.keys.item(&id))
            .key(self.keys.lease(&id))
            .key(self.keys.processing())
            .key(self.keys.attempts())
            .arg(&id)
            .arg(&session)
            .arg(ttl.as_millis() as u64)
            .invoke_async(&mut self.conn.clone())
            .await?;
        let Some((input, attempt)) = started else {
            tracing::warn!(
                prefix = self.keys.prefix,
                id,
                "a redis-work-queue id without its item data; skipped"
            );
            return Ok(Some(None));
        };
        tracing::info!(function = %self.function, item = id, job = n, "leased a redis-work-queue item");
        Ok(Some(Some(Lease {
            info: JobInfo {
                id: JobId {
                    function: request.function.clone(),
                    seq: n,
                },
                attempt,
                max_attempts: request.default_max_attempts,
                enqueued_at_ms: wasmgear_proto::units::now_ms(),
                timeout_ms: request.default_timeout_ms,
                trace: None,
            },
            input,
            token: format!("{session}|{id}"),
            expires: sent + ttl,
            ttl,
        })))
    }

    async fn complete_as(
        &self,
        lease: &Lease,
        status: &str,
        outcome: &[u8],
    ) -> Result<Completion, SourceError> {
        let (session, id) = split_token(&lease.token)?;
        let done: i64 = COMPLETE
            .key(self.keys.item(id))
            .key(self.keys.lease(id))
            .key(self.keys.processing())
            .key(self.keys.attempts())
            .key(self.keys.result(id))
            .arg(id)
            .arg(session)
            .arg(status)
            .arg(outcome)
            .arg(RESULT_TTL_SECS)
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok(match done {
            1 => Completion::Accepted(match status {
                "success" => JobState::Succeeded,
                _ => JobState::Failed,
            }),
            0 => Completion::Stale,
            _ => Completion::Missing,
        })
    }

    async fn lapse(&self, lease: &Lease, mode: &str, delay: Duration) -> Result<bool, SourceError> {
        let (session, id) = split_token(&lease.token)?;
        let done: i64 = LAPSE
            .key(self.keys.lease(id))
            .key(self.keys.processing())
            .key(self.keys.queue())
            .key(self.keys.attempts())
            .arg(id)
            .arg(session)
            .arg(mode)
            .arg(delay.as_millis() as u64)
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok(done == 1)
    }
}

impl JobSource for WorkQueue {
    async fn lease(
        &self,
        requests: &[LeaseRequest],
        max: usize,
        ttl: Duration,
    ) -> Result<Vec<Lease>, SourceError> {
        let Some(request) = requests.iter().find(|r| r.function == self.function) else {
            return Ok(Vec::new());
        };
        let wanted = request.max.min(max);
        let mut leases = Vec::new();
        // Ids without data are skipped; a bounded number of them per call.
        let mut tries = 0;
        while leases.len() < wanted && tries < wanted + 100 {
            tries += 1;
            match self.lease_one(request, ttl).await? {
                None => break,
                Some(None) => continue,
                Some(Some(lease)) => leases.push(lease),
            }
        }
        Ok(leases)
    }

    async fn wait_for_work(&self, timeout: Duration) {
        // The protocol announces nothing: look again after the idle poll.
        tokio::time::sleep(timeout).await;
    }

    async fn heartbeat(&self, lease: &Lease, ttl: Duration) -> Result<LeaseStatus, SourceError> {
        let (session, id) = split_token(&lease.token)?;
        let held: i64 = RENEW
            .key(self.keys.lease(id))
            .arg(session)
            .arg(ttl.as_millis() as u64)
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok(lease_status(held))
    }

    fn cancel_requests(&self) -> broadcast::Receiver<CancelRequest> {
        self.cancels.subscribe()
    }

    async fn progress(&self, lease: &Lease, _progress: &Progress) -> Result<bool, SourceError> {
        // The protocol has no place for progress; the lease is what matters.
        let (session, id) = split_token(&lease.token)?;
        let holder: Option<String> = redis::cmd("GET")
            .arg(self.keys.lease(id))
            .query_async(&mut self.conn.clone())
            .await?;
        Ok(holder.as_deref() == Some(session))
    }

    async fn complete(
        &self,
        lease: &Lease,
        output: &[u8],
        _notes: &AttemptNotes,
    ) -> Result<Completion, SourceError> {
        self.complete_as(lease, "success", output).await
    }

    async fn fail(
        &self,
        lease: &Lease,
        failure: &JobFailure,
        _notes: &AttemptNotes,
    ) -> Result<Completion, SourceError> {
        if let Some(delay) = self.backoff.retry_after(lease, failure) {
            return Ok(settled(
                self.lapse(lease, "retry", delay).await?,
                JobState::Scheduled,
            ));
        }
        let error = format!("[{}] {}", failure.class, failure.message);
        self.complete_as(lease, "failed", error.as_bytes()).await
    }

    fn worker_id(&self) -> &str {
        &self.worker_id
    }

    async fn release(&self, lease: &Lease) -> Result<Completion, SourceError> {
        Ok(settled(
            self.lapse(lease, "release", Duration::ZERO).await?,
            JobState::Queued,
        ))
    }

    /// The libraries' light clean: items of `P:processing` with no lease go back to the
    /// queue (a dead worker's, and those whose retry backoff has run out).
    async fn maintain(&self, _functions: &[FunctionName]) -> Result<(), SourceError> {
        let ids: Vec<String> = redis::cmd("LRANGE")
            .arg(self.keys.processing())
            .arg(0)
            .arg(RECLAIM_BATCH - 1)
            .query_async(&mut self.conn.clone())
            .await?;
        for id in ids {
            let put_back: i64 = RECLAIM
                .key(self.keys.item(&id))
                .key(self.keys.lease(&id))
                .key(self.keys.processing())
                .key(self.keys.queue())
                .arg(&id)
                .invoke_async(&mut self.conn.clone())
                .await?;
            if put_back == 1 {
                tracing::info!(
                    prefix = self.keys.prefix,
                    id,
                    "a redis-work-queue item without a lease is queued again"
                );
            }
        }
        Ok(())
    }
}
