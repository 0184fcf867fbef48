//! GearMonkey (`../shared/seeds/gearmonkey-protocol.txt` in the repository's lineage): jobs
//! that clients put in plain Redis lists and hashes, run by a wasmgear worker.
//!
//! Kept from the spec, exactly: jobs of function `FN` are read from `queue:FN:high`,
//! `:normal` and `:low` in that order, and due ones from `queue:FN:scheduled` first; the job
//! hash `job:FN:ID` gets `status` busy, then success or error with `output`, progress as
//! `status:dividend` and `status:divisor`, and a 25-hour expiry; `start:ID` and `finish:ID`
//! are published on `channel:FN`; `lock:FN:ID` is pushed (kept 10 s) for blocking clients;
//! `count:FN` counts the worker in while it serves `FN`.
//!
//! Added, without changing what clients see: a lease. The spec's worker takes an id with
//! `BRPOP`, so a worker that dies loses the job; here an id moves atomically into
//! `wasmgear:gearmonkey:FN:leases` with a fencing token, renewed while the job runs, and a
//! lease that runs out puts the job back at the front of its queue (status idle again). A
//! failed job is retried (status idle, in `queue:FN:scheduled` at its due time) while
//! attempts are left, then ends as `error`. A worker that dies without leaving is taken out
//! of `count:FN` when its entry runs out. Ids that are no job number are set aside in
//! `wasmgear:gearmonkey:FN:rejected`, not run.
//!
//! Not possible: the spec's key names have no hash tag, so a function's keys spread over
//! the slots of a Redis Cluster; this source needs one Redis server. The spec knows no
//! cancellation.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::Value;
use tokio::sync::{Notify, broadcast};
use tokio_util::task::AbortOnDropHandle;
use wasmgear_client::connection::Connection;
use wasmgear_client::subscriber::{Delivery, Subscriber, Subscription, Topic};
use wasmgear_proto::{
    AttemptNotes, CancelRequest, Completion, FunctionName, JobFailure, JobId, JobInfo, JobState,
    Lease, LeaseRequest, LeaseStatus, Progress, WorkerAd,
};
use wasmgear_source::{JobSource, SourceError};

use crate::redis_source::{lease_status, lua_scripts};
use crate::{ConnectError, RetryBackoff, settled};
use wasmgear_proto::sync::Locked;

/// How long a job hash is kept after the job ends (the spec's 25 hours).
pub const JOB_EXPIRY_SECS: u64 = 90_000;

/// Every key this source touches for one function: the spec's, then wasmgear's own.
#[derive(Debug, Clone)]
pub struct GearMonkeyKeys {
    function: String,
}

impl GearMonkeyKeys {
    /// The keys of `function`.
    pub fn new(function: &FunctionName) -> Self {
        GearMonkeyKeys {
            function: function.to_string(),
        }
    }

    /// `count:FN`: the roll call.
    pub fn count(&self) -> String {
        format!("count:{}", self.function)
    }

    /// `uid:FN`: the last job id handed out (clients `INCR` it).
    pub fn uid(&self) -> String {
        format!("uid:{}", self.function)
    }

    /// `job:FN:ID`: the job hash.
    pub fn job(&self, id: u64) -> String {
        format!("job:{}:{id}", self.function)
    }

    /// `lock:FN:ID`: pushed when the job ends, for blocking clients.
    pub fn lock(&self, id: u64) -> String {
        format!("lock:{}:{id}", self.function)
    }

    /// `channel:FN`: create, start and finish events.
    pub fn channel(&self) -> String {
        format!("channel:{}", self.function)
    }

    /// `queue:FN:PRIO` for `high`, `normal`, `low` or `scheduled`.
    pub fn queue(&self, priority: &str) -> String {
        format!("queue:{}:{priority}", self.function)
    }

    /// wasmgear's own keys, beside the spec's: `wasmgear:gearmonkey:FN:WHAT`.
    fn ours(&self, what: &str) -> String {
        format!("wasmgear:gearmonkey:{}:{what}", self.function)
    }

    /// Leased ids → when their lease ends (ms, Redis clock).
    pub fn leases(&self) -> String {
        self.ours("leases")
    }

    /// Leased ids → the holder's fencing token.
    pub fn tokens(&self) -> String {
        self.ours("tokens")
    }

    /// Leased ids → the queue they came from.
    pub fn prios(&self) -> String {
        self.ours("prios")
    }

    /// Ids → attempts started.
    pub fn attempts(&self) -> String {
        self.ours("attempts")
    }

    /// Ids found in a queue that are no job number, set aside.
    pub fn rejected(&self) -> String {
        self.ours("rejected")
    }

    /// Live wasmgear workers counted in `count:FN` → when their entry ends.
    pub fn workers(&self) -> String {
        self.ours("workers")
    }
}

lua_scripts!("gearmonkey":
    LEASE = "lease.lua",
    START = "start.lua",
    RENEW = "renew.lua",
    PROGRESS = "progress.lua",
    FINISH = "finish.lua",
    REQUEUE = "requeue.lua",
    ROLL = "roll.lua",
);

/// How long a worker's entry in `count:FN` lives without renewal (the worker renews it with
/// each advertisement, every 2 s).
const ROLL_TTL: Duration = Duration::from_secs(10);
/// Expired leases given back per function per housekeeping round.
const RECLAIM_BATCH: usize = 100;
/// The output recorded for a job hash without input.
const NO_INPUT: &str = "wasmgear: the job hash has no `input` field; nothing was run";

/// A worker's connection to GearMonkey queues.
pub struct GearMonkey {
    conn: Connection,
    subscriber: Subscriber,
    listener: Mutex<Option<AbortOnDropHandle<()>>>,
    work: Arc<Notify>,
    worker_id: String,
    calls: AtomicU64,
    cancels: broadcast::Sender<CancelRequest>,
    backoff: RetryBackoff,
}

impl GearMonkey {
    /// Connects to the Redis at `url` as worker `worker_id`. A Redis Cluster is refused: the
    /// spec's keys of one function do not share a slot.
    pub async fn connect(
        url: &str,
        worker_id: impl Into<String>,
        backoff: RetryBackoff,
    ) -> Result<Self, ConnectError> {
        let (client, conn) = crate::redis_source::connect_standalone(url, "gearmonkey").await?;
        Ok(GearMonkey {
            conn,
            subscriber: Subscriber::new(client),
            listener: Mutex::new(None),
            work: Arc::new(Notify::new()),
            worker_id: worker_id.into(),
            calls: AtomicU64::new(0),
            cancels: broadcast::channel(1).0,
            backoff,
        })
    }

    async fn lease_function(
        &self,
        request: &LeaseRequest,
        max: usize,
        ttl: Duration,
    ) -> Result<Vec<Lease>, SourceError> {
        let keys = GearMonkeyKeys::new(&request.function);
        let call = self.calls.fetch_add(1, Ordering::Relaxed);
        let sent = tokio::time::Instant::now().into_std();
        let (leased, rejected): (Vec<(String, String, u32)>, Vec<String>) = LEASE
            .key(keys.queue("scheduled"))
            .key(keys.queue("high"))
            .key(keys.queue("normal"))
            .key(keys.queue("low"))
            .key(keys.leases())
            .key(keys.tokens())
            .key(keys.prios())
            .key(keys.attempts())
            .key(keys.rejected())
            .arg(max)
            .arg(ttl.as_millis() as u64)
            .arg(format!("{}:{call}:", self.worker_id))
            .invoke_async(&mut self.conn.clone())
            .await?;
        for id in rejected {
            tracing::warn!(
                function = %request.function,
                id,
                set_aside = keys.rejected(),
                "a GearMonkey queue held something that is no job id; set aside, not run"
            );
        }
        let mut leases = Vec::new();
        for (id, token, attempt) in leased {
            // The script checked the shape: digits, no more than 15 of them.
            let Ok(seq) = id.parse::<u64>() else { continue };
            let reply: Vec<Value> = START
                .key(keys.job(seq))
                .key(keys.lock(seq))
                .key(keys.leases())
                .key(keys.tokens())
                .key(keys.prios())
                .key(keys.attempts())
                .arg(&id)
                .arg(&token)
                .arg(keys.channel())
                .arg(NO_INPUT)
                .invoke_async(&mut self.conn.clone())
                .await?;
            let state: String = match reply.first() {
                Some(value) => redis::from_redis_value_ref(value)?,
                None => continue,
            };
            match (state.as_str(), reply.get(1)) {
                ("ok", Some(input)) => leases.push(Lease {
                    info: JobInfo {
                        id: JobId {
                            function: request.function.clone(),
                            seq,
                        },
                        attempt,
                        max_attempts: request.default_max_attempts,
                        enqueued_at_ms: wasmgear_proto::units::now_ms(),
                        timeout_ms: request.default_timeout_ms,
                        trace: None,
                    },
                    input: redis::from_redis_value_ref(input)?,
                    token,
                    expires: sent + ttl,
                    ttl,
                }),
                ("missing", _) => tracing::warn!(
                    function = %request.function,
                    id,
                    "a GearMonkey job id was queued without its job hash; skipped"
                ),
                ("no-input", _) => tracing::warn!(
                    function = %request.function,
                    id,
                    "a GearMonkey job hash has no input; finished as an error"
                ),
                _ => {}
            }
        }
        Ok(leases)
    }

    async fn finish(&self, lease: &Lease, status: &str, output: &[u8]) -> Result<i64, SourceError> {
        let id = &lease.info.id;
        let keys = GearMonkeyKeys::new(&id.function);
        Ok(FINISH
            .key(keys.job(id.seq))
            .key(keys.lock(id.seq))
            .key(keys.leases())
            .key(keys.tokens())
            .key(keys.prios())
            .key(keys.attempts())
            .arg(id.seq)
            .arg(&lease.token)
            .arg(status)
            .arg(output)
            .arg(keys.channel())
            .invoke_async(&mut self.conn.clone())
            .await?)
    }

    async fn requeue(
        &self,
        function: &FunctionName,
        seq: u64,
        token: &str,
        mode: &str,
        delay: Duration,
    ) -> Result<bool, SourceError> {
        let keys = GearMonkeyKeys::new(function);
        let done: i64 = REQUEUE
            .key(keys.job(seq))
            .key(keys.leases())
            .key(keys.tokens())
            .key(keys.prios())
            .key(keys.attempts())
            .key(keys.queue("scheduled"))
            .key(keys.queue("high"))
            .key(keys.queue("normal"))
            .key(keys.queue("low"))
            .arg(seq)
            .arg(token)
            .arg(mode)
            .arg(delay.as_millis() as u64)
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok(done == 1)
    }

    async fn roll(&self, function: &FunctionName, ttl: Duration) -> Result<(), SourceError> {
        let keys = GearMonkeyKeys::new(function);
        let _: i64 = ROLL
            .key(keys.count())
            .key(keys.workers())
            .arg(&self.worker_id)
            .arg(ttl.as_millis() as u64)
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok(())
    }

    /// Gives back the jobs of leases that ran out (their worker died or was cut off).
    async fn reclaim(&self, function: &FunctionName) -> Result<(), SourceError> {
        let keys = GearMonkeyKeys::new(function);
        let now: (u64, u64) = redis::cmd("TIME")
            .query_async(&mut self.conn.clone())
            .await?;
        let now_ms = now.0 * 1000 + now.1 / 1000;
        let expired: Vec<String> = redis::cmd("ZRANGEBYSCORE")
            .arg(keys.leases())
            .arg(0)
            .arg(now_ms)
            .arg("LIMIT")
            .arg(0)
            .arg(RECLAIM_BATCH)
            .query_async(&mut self.conn.clone())
            .await?;
        for id in expired {
            let Ok(seq) = id.parse::<u64>() else { continue };
            if self
                .requeue(function, seq, "", "expired", Duration::ZERO)
                .await?
            {
                tracing::warn!(function = %function, id, "a GearMonkey job's lease ran out (its worker is gone); queued again");
            }
        }
        Ok(())
    }
}

/// Wakes the worker when a client publishes `create:ID` on a served channel, and when the
/// subscription is back after a drop (jobs created meanwhile were not heard of).
async fn forward_creates(mut subscription: Subscription, work: Arc<Notify>) {
    while let Some(delivery) = subscription.next().await {
        match delivery {
            Delivery::Message(message) if message.payload.starts_with(b"create:") => {
                work.notify_one()
            }
            Delivery::Resubscribed => work.notify_one(),
            _ => {}
        }
    }
}

impl JobSource for GearMonkey {
    async fn lease(
        &self,
        requests: &[LeaseRequest],
        max: usize,
        ttl: Duration,
    ) -> Result<Vec<Lease>, SourceError> {
        let mut leases = Vec::new();
        for request in requests {
            let room = request.max.min(max.saturating_sub(leases.len()));
            if room == 0 {
                continue;
            }
            leases.extend(self.lease_function(request, room, ttl).await?);
        }
        Ok(leases)
    }

    async fn wait_for_work(&self, timeout: Duration) {
        let _ = tokio::time::timeout(timeout, self.work.notified()).await;
    }

    async fn heartbeat(&self, lease: &Lease, ttl: Duration) -> Result<LeaseStatus, SourceError> {
        let keys = GearMonkeyKeys::new(&lease.info.id.function);
        let held: i64 = RENEW
            .key(keys.leases())
            .key(keys.tokens())
            .arg(lease.info.id.seq)
            .arg(&lease.token)
            .arg(ttl.as_millis() as u64)
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok(lease_status(held))
    }

    fn cancel_requests(&self) -> broadcast::Receiver<CancelRequest> {
        self.cancels.subscribe()
    }

    async fn progress(&self, lease: &Lease, progress: &Progress) -> Result<bool, SourceError> {
        let id = &lease.info.id;
        let keys = GearMonkeyKeys::new(&id.function);
        let held: i64 = PROGRESS
            .key(keys.job(id.seq))
            .key(keys.tokens())
            .arg(id.seq)
            .arg(&lease.token)
            .arg(progress.done)
            .arg(progress.total)
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok(held == 1)
    }

    async fn complete(
        &self,
        lease: &Lease,
        output: &[u8],
        _notes: &AttemptNotes,
    ) -> Result<Completion, SourceError> {
        Ok(match self.finish(lease, "success", output).await? {
            1 => Completion::Accepted(JobState::Succeeded),
            0 => Completion::Stale,
            _ => Completion::Missing,
        })
    }

    async fn fail(
        &self,
        lease: &Lease,
        failure: &JobFailure,
        _notes: &AttemptNotes,
    ) -> Result<Completion, SourceError> {
        if let Some(delay) = self.backoff.retry_after(lease, failure) {
            let id = &lease.info.id;
            return Ok(settled(
                self.requeue(&id.function, id.seq, &lease.token, "retry", delay)
                    .await?,
                JobState::Scheduled,
            ));
        }
        let output = format!("[{}] {}", failure.class, failure.message);
        Ok(
            match self.finish(lease, "error", output.as_bytes()).await? {
                1 => Completion::Accepted(JobState::Failed),
                0 => Completion::Stale,
                _ => Completion::Missing,
            },
        )
    }

    fn worker_id(&self) -> &str {
        &self.worker_id
    }

    async fn serve(&self, functions: &[FunctionName]) -> Result<(), SourceError> {
        let subscription = self.subscriber.open();
        for function in functions {
            let channel = GearMonkeyKeys::new(function).channel();
            if let Err(error) = subscription.subscribe(Topic::Channel(channel)).await {
                tracing::warn!(%error, "not subscribed to GearMonkey channels yet; polling meanwhile");
            }
            self.roll(function, ROLL_TTL).await?;
        }
        let task = tokio::spawn(forward_creates(subscription, self.work.clone()));
        // The listener replaced, if any, stops as it is dropped.
        *self.listener.locked() = Some(AbortOnDropHandle::new(task));
        Ok(())
    }

    async fn advertise(
        &self,
        _ad: &WorkerAd,
        functions: &[FunctionName],
        ttl: Duration,
    ) -> Result<(), SourceError> {
        let ttl = match ttl.is_zero() {
            true => Duration::ZERO,
            false => ROLL_TTL,
        };
        for function in functions {
            self.roll(function, ttl).await?;
        }
        Ok(())
    }

    async fn leave(&self, functions: &[FunctionName]) -> Result<(), SourceError> {
        for function in functions {
            self.roll(function, Duration::ZERO).await?;
        }
        Ok(())
    }

    async fn release(&self, lease: &Lease) -> Result<Completion, SourceError> {
        let id = &lease.info.id;
        Ok(settled(
            self.requeue(
                &id.function,
                id.seq,
                &lease.token,
                "release",
                Duration::ZERO,
            )
            .await?,
            JobState::Queued,
        ))
    }

    async fn maintain(&self, functions: &[FunctionName]) -> Result<(), SourceError> {
        for function in functions {
            self.reclaim(function).await?;
        }
        Ok(())
    }
}
