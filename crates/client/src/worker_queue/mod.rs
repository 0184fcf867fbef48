//! The consumer side of the queue: what a worker does with Redis.
//!
//! A worker leases jobs, keeps their leases alive with heartbeats, reports progress and
//! finishes each job with `complete` or `fail`, every call fenced by the lease token it got.

//!
//! [`WorkerQueue`] is split by role: this module connects, listens and advertises;
//! `leasing` leases and takes hand-offs; `reports` carries heartbeats, progress and results;
//! `notifications` turns what the channels bring into hints, cancels and hand-offs.

mod job_source;
mod leasing;
mod notifications;
mod reports;
mod sealing;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::{Notify, broadcast};
use tokio_util::task::AbortOnDropHandle;
use wasmgear_proto::{CancelRequest, FunctionName, Lease, WorkerAd};

use self::leasing::*;
use self::notifications::*;
use self::reports::*;
use crate::connection::{self, Connection};
use crate::handoff::HandOffs;
use crate::subscriber::{Subscriber, Topic};
use crate::{Result, links, scripts};
use wasmgear_proto::keys::{FunctionKeys, WorkerListKeys};
use wasmgear_proto::sync::Locked;

/// The first retry waits about this long; each further one twice as long.
pub const DEFAULT_BACKOFF_BASE: Duration = Duration::from_secs(1);

/// No retry waits longer than this.
pub const DEFAULT_BACKOFF_MAX: Duration = Duration::from_secs(3600);

/// Cancel requests buffered for a slow listener; older ones are still caught by heartbeats.
const CANCEL_BUFFER: usize = 1024;

/// The shortest idle wait, however soon something falls due, so that an idle worker never
/// spins.
const MIN_IDLE_WAIT: Duration = Duration::from_millis(2);

/// Waiting jobs re-checked per call of `relink_due`.
const RELINK_BATCH: usize = 100;

/// The most `relink_due` calls per function in one upkeep round.
const RELINK_ROUNDS: usize = 10;

/// Takes one off the counter when dropped.
struct CountGuard<'a>(&'a AtomicUsize);

impl Drop for CountGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The keys `rollcall` takes from a worker: the roll call, and the idle workers handed jobs
/// (a worker that leaves is no longer handed any).
fn roll_call_keys(function: &FunctionName) -> [String; 3] {
    let keys = FunctionKeys::new(function);
    [keys.workers(), keys.idle(), keys.idle_args()]
}

/// A worker's connection to the queue.
pub struct WorkerQueue {
    subscriber: Subscriber,
    pub(crate) conn: Connection,
    worker_id: String,
    next_function: AtomicUsize,
    strict_order: bool,
    /// How many replicas must confirm a completion (see [`WorkerQueue::with_min_replicas`]).
    min_replicas: crate::replication::MinReplicas,
    backoff_base: Duration,
    backoff_max: Duration,
    work_arrived: Arc<Notify>,
    next_due: std::sync::Mutex<Option<tokio::time::Instant>>,
    hints: Hints,
    /// Whether the work channels are subscribed: only then can hints be trusted (an event
    /// clears them), so only then are lease calls skipped.
    listening: Arc<AtomicBool>,
    /// The functions listened to, in the order given.
    served: std::sync::Mutex<Vec<FunctionName>>,
    answered: scripts::Answered,
    cancel_requests: broadcast::Sender<CancelRequest>,
    /// The cancels heard lately, for jobs that had not started when they came.
    heard_cancels: Arc<std::sync::Mutex<HeardCancels>>,
    listener: std::sync::Mutex<Option<AbortOnDropHandle<()>>>,
    completions: std::sync::OnceLock<reports::Completions>,
    /// Jobs handed to this worker while it was idle (lease.lua, ARGV[8]), and the slots kept
    /// for them.
    handoffs: Arc<std::sync::Mutex<HandOffs>>,
    /// A wait for work ran out since the last lease call: share the kept slots out anew.
    recheck: AtomicBool,
    /// Lease calls on their way: a hand-off is registered for only by the one call on its
    /// way (its count of the worker's free slots is then the whole truth).
    leasing: AtomicUsize,
    /// Where they are published (`wg:handoff:WORKER`).
    handoff_channel: String,
    /// The keys that open sealed inputs and seal what is reported of those jobs.
    keys: Option<Arc<wasmgear_proto::crypto::KeyRing>>,
    /// The sealed jobs running here.
    sealed: Arc<std::sync::Mutex<sealing::SealedJobs>>,
}

impl WorkerQueue {
    /// Connects to the Redis at `url` as worker `worker_id`.
    pub async fn connect(url: &str, worker_id: impl Into<String>) -> Result<Self> {
        let (redis, conn) = connection::connect(url).await?;
        if let Some(warning) = connection::eviction_warning(&conn).await {
            tracing::warn!("{warning}");
        }
        let worker_id = worker_id.into();
        Ok(WorkerQueue {
            handoff_channel: wasmgear_proto::keys::handoff_channel(&worker_id),
            subscriber: Subscriber::new(redis),
            conn,
            worker_id,
            next_function: AtomicUsize::new(0),
            strict_order: false,
            min_replicas: crate::replication::MinReplicas::default(),
            backoff_base: DEFAULT_BACKOFF_BASE,
            backoff_max: DEFAULT_BACKOFF_MAX,
            work_arrived: Arc::new(Notify::new()),
            next_due: std::sync::Mutex::new(None),
            hints: Hints::default(),
            listening: Arc::default(),
            served: std::sync::Mutex::default(),
            answered: scripts::Answered::default(),
            cancel_requests: broadcast::channel(CANCEL_BUFFER).0,
            heard_cancels: Arc::default(),
            listener: std::sync::Mutex::new(None),
            completions: std::sync::OnceLock::new(),
            handoffs: Arc::default(),
            recheck: AtomicBool::new(false),
            leasing: AtomicUsize::new(0),
            keys: None,
            sealed: Arc::default(),
        })
    }

    /// Opens the sealed inputs of the jobs it leases with `keys`, and seals what it reports
    /// of those jobs (output, error message, log, checkpoint) with the first key.
    pub fn with_keys(mut self, keys: Arc<wasmgear_proto::crypto::KeyRing>) -> Self {
        self.keys = Some(keys);
        self
    }

    /// Sets the retry backoff: about `base` before the second attempt, doubling, at most `max`.
    pub fn with_backoff(mut self, base: Duration, max: Duration) -> Self {
        self.backoff_base = base;
        self.backoff_max = max.max(base);
        self
    }

    /// Has every completion confirmed by `min` replicas before it counts (see
    /// [`crate::replication`]); a function's own `min_replicas` setting can ask for more.
    /// A completion they fall short of is reported as failed, and the worker sends it
    /// again.
    pub fn with_min_replicas(mut self, min: crate::replication::MinReplicas) -> Self {
        self.min_replicas = min;
        self
    }

    /// Leases from the functions strictly in the order given (the first one's jobs before
    /// any of the second's) instead of taking them in turn.
    pub fn with_strict_order(mut self, strict: bool) -> Self {
        self.strict_order = strict;
        self
    }

    /// Subscribes to the work channels of `functions` (not their events channels: no
    /// message per job started or finished reaches the worker), so that [`WorkerQueue::wait_for_work`]
    /// wakes as soon as a job is enqueued for one of them and
    /// [`WorkerQueue::cancel_requests`] hears of cancellations at once.
    /// Calling it again replaces the subscription (when the served functions change).
    pub async fn listen(&self, functions: &[FunctionName]) -> Result<()> {
        let subscription = self.subscriber.open();
        let channels: std::collections::HashMap<String, FunctionName> = functions
            .iter()
            .map(|f| (FunctionKeys::new(f).work(), f.clone()))
            .collect();
        // Every channel is added even if one fails: the subscriber subscribes them all once
        // Redis answers, and says so.
        let mut result = Ok(());
        for channel in channels.keys().chain([&self.handoff_channel]) {
            if let Err(error) = subscription
                .subscribe(Topic::Channel(channel.clone()))
                .await
            {
                result = Err(error.into());
            }
        }
        self.listening.store(result.is_ok(), Ordering::SeqCst);
        *self.served.locked() = functions.to_vec();
        let task = tokio::spawn(forward_notifications(
            subscription,
            channels,
            self.work_arrived.clone(),
            (self.cancel_requests.clone(), self.heard_cancels.clone()),
            self.hints.clone(),
            self.listening.clone(),
            (
                self.handoff_channel.clone(),
                self.handoffs.clone(),
                self.conn.clone(),
            ),
        ));
        // The old subscription goes with its task; channels served before and now stay
        // subscribed throughout.
        *self.listener.locked() = Some(AbortOnDropHandle::new(task));
        if result.is_ok() {
            // Events may have been missed before: ask every function again.
            lock_hints(&self.hints).clear();
            self.work_arrived.notify_one();
        }
        result
    }

    /// Waits until a job may have arrived: an event said so, the next scheduled job or
    /// lease expiry the last [`WorkerQueue::lease`] saw falls due, or `timeout` passed (the
    /// safety net for missed events).
    pub async fn wait_for_work(&self, timeout: Duration) {
        let due = *self.next_due.locked();
        let now = tokio::time::Instant::now();
        let mut until_due = due.map(|at| at.saturating_duration_since(now));
        // Slots kept for a registration whose hand-off never came free when it lapses: the
        // lease call they held back is made again then.
        let wall = std::time::Instant::now();
        if let Some(lapse) = self.handoffs.locked().next_lapse(wall) {
            let until_lapse = lapse.saturating_duration_since(wall);
            until_due = Some(until_due.map_or(until_lapse, |d| d.min(until_lapse)));
        }
        let timeout = until_due.map_or(timeout, |d| d.max(MIN_IDLE_WAIT).min(timeout));
        if tokio::time::timeout(timeout, self.work_arrived.notified())
            .await
            .is_err()
        {
            // Nothing woke us: ask every function again, in case an event was missed. (Not
            // by forgetting the hints: a `work` heard as the wait ran out is news that lets
            // its function take back slots kept for the others' hand-offs.)
            for hint in lock_hints(&self.hints).values_mut() {
                hint.recheck = true;
            }
            self.recheck.store(true, Ordering::SeqCst);
        }
    }

    /// Ids of running jobs whose cancellation a client asked for, as the events arrive.
    pub fn cancel_requests(&self) -> broadcast::Receiver<CancelRequest> {
        self.cancel_requests.subscribe()
    }

    /// Whether a cancel of `lease`'s job was heard since the lease was made (noted before
    /// [`WorkerQueue::cancel_requests`] passes it on): a job leased but not yet started when
    /// its cancel came must not start.
    pub fn cancel_heard(&self, lease: &Lease) -> bool {
        let leased = lease
            .expires
            .checked_sub(lease.ttl)
            .unwrap_or(lease.expires);
        self.heard_cancels
            .locked()
            .heard(&lease.info.id, leased, std::time::Instant::now())
    }

    /// Puts this worker in the worker list with `ad` and in the roll call of each of
    /// `functions`, for `ttl`; renew before it runs out. A zero `ttl` takes it out of both
    /// (and out of the roll call of `functions`, and of their idle workers handed jobs),
    /// and hands back the jobs handed to it that it has not run.
    pub async fn advertise(
        &self,
        ad: &WorkerAd,
        functions: &[FunctionName],
        ttl: Duration,
    ) -> Result<()> {
        let ttl_ms = ttl.as_millis() as u64;
        let ad = serde_json::to_string(ad).unwrap_or_default();
        let _: i64 = scripts::ADVERTISE
            .with_keys(&[WorkerListKeys::expiry(), WorkerListKeys::info()])
            .arg(&self.worker_id)
            .arg(&ad)
            .arg(ttl_ms)
            .invoke_async(&mut self.conn.clone())
            .await?;
        for function in functions {
            let _: i64 = scripts::ROLLCALL
                .with_keys(&roll_call_keys(function))
                .arg(&self.worker_id)
                .arg(ttl_ms)
                .invoke_async(&mut self.conn.clone())
                .await?;
        }
        if ttl.is_zero() {
            self.stop_leasing().await;
        }
        Ok(())
    }

    /// Takes this worker out of the roll call of `functions`.
    pub async fn leave(&self, functions: &[FunctionName]) -> Result<()> {
        for function in functions {
            let _: i64 = scripts::ROLLCALL
                .with_keys(&roll_call_keys(function))
                .arg(&self.worker_id)
                .arg(0)
                .invoke_async(&mut self.conn.clone())
                .await?;
        }
        Ok(())
    }

    /// This worker's id, as recorded on the jobs it runs.
    pub fn worker_id(&self) -> &str {
        &self.worker_id
    }

    /// Whether Redis answers `PING` within `timeout` (for readiness checks).
    pub async fn ping(&self, timeout: Duration) -> Result<()> {
        connection::ping(&self.conn, timeout).await
    }

    /// How often the worker's pub/sub connection came back after it was lost.
    pub fn reconnects(&self) -> u64 {
        self.subscriber.reconnects()
    }

    /// A warning when Redis may evict keys (see [`crate::Client::eviction_warning`]).
    pub async fn eviction_warning(&self) -> Option<String> {
        connection::eviction_warning(&self.conn).await
    }

    /// Re-checks the links of jobs of `functions` that wait on jobs of other functions (the
    /// safety net for a client or worker that died between the two steps of a link; see
    /// `links`). Cheap when no job is due for a re-check.
    pub async fn relink(&self, functions: &[FunctionName]) -> Result<()> {
        for function in functions {
            // Each call pushes the jobs it hands out further into the future, so this ends;
            // the bound keeps one upkeep round short however many are due (the rest wait
            // for the next round).
            for _ in 0..RELINK_ROUNDS {
                if links::relink_due(&self.conn, self.keys.as_deref(), function, RELINK_BATCH)
                    .await?
                    < RELINK_BATCH
                {
                    break;
                }
            }
        }
        Ok(())
    }

    /// Forgets the records of flows whose jobs are all forgotten (a few flows per call;
    /// cheap when none is due for a check).
    pub async fn forget_done_flows(&self) -> Result<()> {
        crate::flow::forget_done_flows(&self.conn).await.map(drop)
    }

    /// Re-checks a few batches due for it (see [`crate::batch`]): counts the ends of jobs
    /// whose caller died before it could, and enqueues callbacks left due.
    pub async fn check_batches(&self) -> Result<()> {
        crate::batch::check_due(&self.conn, self.keys.as_deref()).await
    }

    /// Adds `functions` to the directory of functions that operators list.
    pub async fn register(&self, functions: &[FunctionName]) -> Result<()> {
        if functions.is_empty() {
            return Ok(());
        }
        let mut cmd = redis::cmd("SADD");
        cmd.arg(wasmgear_proto::keys::functions());
        for function in functions {
            cmd.arg(function.as_str());
        }
        let _: i64 = cmd.query_async(&mut self.conn.clone()).await?;
        Ok(())
    }

    /// The wait before attempt `attempt + 1`: [`retry_delay`] with this source's settings.
    fn backoff(&self, attempt: u32) -> Duration {
        retry_delay(self.backoff_base, self.backoff_max, attempt)
    }
}

/// The wait after failed attempt `attempt` (1 for the first): `base` doubling with each
/// further attempt, capped at `max`, of which backon's jitter keeps between half and all, so
/// that jobs failing together do not retry together.
pub fn retry_delay(base: Duration, max: Duration, attempt: u32) -> Duration {
    let retries = usize::try_from(attempt.max(1)).unwrap_or(usize::MAX);
    let half = |d: Duration| d / 2;
    backon::BackoffBuilder::build(
        backon::ExponentialBuilder::default()
            .with_min_delay(half(base))
            .with_max_delay(half(max.max(base)))
            .with_factor(2.0)
            .with_jitter()
            .without_max_times(),
    )
    .take(retries.min(64))
    .last()
    .unwrap_or(base)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::retry_delay;

    #[test]
    fn retries_wait_between_half_and_all_of_a_doubling_capped_delay() {
        let (base, max) = (Duration::from_millis(200), Duration::from_secs(1));
        for (attempt, full) in [
            (0, 200),
            (1, 200),
            (2, 400),
            (3, 800),
            (4, 1000),
            (40, 1000),
        ] {
            let full = Duration::from_millis(full);
            let waits: Vec<Duration> = (0..50).map(|_| retry_delay(base, max, attempt)).collect();
            for wait in &waits {
                assert!(
                    *wait >= full / 2 && *wait <= full,
                    "attempt {attempt}: {wait:?}"
                );
            }
            let first = waits[0];
            assert!(
                waits.iter().any(|w| *w != first),
                "attempt {attempt}: no jitter"
            );
        }
        assert_eq!(
            retry_delay(Duration::ZERO, Duration::ZERO, 3),
            Duration::ZERO
        );
        let huge = retry_delay(Duration::from_secs(1), Duration::MAX, u32::MAX);
        assert!(huge >= Duration::from_secs(1));
    }

    /// A registration lasts at most a quarter of the lease.
    #[test]
    fn registrations_last_a_quarter_of_the_lease_at_most() {
        use super::{HANDOFF_HOLD, handoff_hold};
        assert_eq!(handoff_hold(Duration::from_secs(30)), HANDOFF_HOLD);
        assert_eq!(
            handoff_hold(Duration::from_secs(3)),
            Duration::from_millis(750)
        );
        assert_eq!(handoff_hold(Duration::ZERO), Duration::from_millis(1));
    }

    /// A hand-off message: `lease FUNCTION COUNT ROW`, a line break, then the input (any
    /// bytes); anything else is not a lease.
    #[test]
    fn hand_off_messages_are_read_or_refused() {
        let (function, count, row) =
            super::handed_job(b"lease echo 2 7|1|3|1000|123|w/ab:7:1\nin\nput").unwrap();
        assert_eq!((function.as_str(), count), ("echo", 2));
        let expected = crate::handoff::LeaseRow {
            seq: 7,
            attempt: 1,
            max_attempts: 3,
            timeout_ms: 1000,
            created_ms: 123,
            token: "w/ab:7:1".to_string(),
            trace: None,
            input: b"in\nput".to_vec(),
        };
        assert_eq!(row, expected);
        // A traced job's row carries its traceparent, then its tracestate (which may hold
        // '|' and spaces); one this build cannot read is left out, the lease kept.
        let parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let message = format!("lease echo 2 7|1|3|1000|123|w/ab:7:1|{parent}|a=1 | b=2\nin\nput");
        let (_, _, traced) = super::handed_job(message.as_bytes()).unwrap();
        let trace = traced.trace.clone().unwrap();
        assert_eq!(
            (trace.traceparent(), trace.tracestate()),
            (parent, Some("a=1 | b=2"))
        );
        assert_eq!(
            crate::handoff::LeaseRow {
                trace: None,
                ..traced
            },
            expected
        );
        let unreadable = b"lease echo 2 7|1|3|1000|123|w/ab:7:1|00-zz\nin\nput";
        assert_eq!(super::handed_job(unreadable).unwrap().2, expected);
        for bad in [
            &b"work"[..],
            b"lease echo 1 7|1|3|1000|123|w/ab:7:1",
            b"lease echo 7|1|3|1000|123|w/ab:7:1\n",
            b"lease echo 0 7|1|3|1000|123|w/ab:7:1\n",
            b"lease echo 1 7|1|3|x|123|w/ab:7:1\n",
            b"lease bad name 1 7|1|3|1000|123|t\n",
            b"lease echo 1 7|1|3|1000|123|\n",
        ] {
            assert!(
                super::handed_job(bad).is_none(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
