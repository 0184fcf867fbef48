//! The consumer side of the queue: what a worker does with Redis.
//!
//! A worker leases jobs, keeps their leases alive with heartbeats, reports progress and
//! finishes each job with `complete` or `fail`, every call fenced by the lease token it got.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::{Notify, broadcast, mpsc, oneshot};
use tokio::task::JoinHandle;

use super::connection::{self, Connection};
use super::keys::{FunctionKeys, WorkerListKeys};
use super::subscriber::{Delivery, Subscriber, Subscription, Topic};
use super::{QueueError, Result, links, scripts};
use wasmgear_proto::{JobState, WorkerAd};

use crate::job::{
    AttemptNotes, CancelRequest, Completion, FunctionName, JobFailure, JobId, JobInfo, Lease,
    LeaseRequest, LeaseStatus, Progress,
};

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

/// Reads the `{accepted, word}` reply of `complete`, `fail` and `release`.
fn completion((accepted, word): (i64, String)) -> redis::RedisResult<Completion> {
    Ok(match (accepted, word.as_str()) {
        (1, _) => Completion::Accepted(word.parse().map_err(|error: String| {
            redis::RedisError::from((
                redis::ErrorKind::UnexpectedReturnType,
                "the script answered with an unknown job state",
                error,
            ))
        })?),
        (_, "missing") => Completion::Missing,
        _ => Completion::Stale,
    })
}

/// The most completions one `complete` call carries.
const COMPLETE_BATCH: usize = 128;

/// A completion on its way to Redis.
struct PendingCompletion {
    function: FunctionName,
    seq: u64,
    token: String,
    output: Vec<u8>,
    log: String,
    version: String,
    /// The next job to lease in the same call, for the slot the finished job frees.
    next: Option<NextLease>,
    reply: oneshot::Sender<std::result::Result<(Completion, Vec<Lease>), redis::RedisError>>,
}

/// What a completion asks to lease next: jobs of its function.
struct NextLease {
    want: usize,
    ttl: Duration,
    default_timeout_ms: u64,
    default_max_attempts: u32,
}

use super::handoff::{Arrival, HandOffs, LeaseRow};

/// The leases of a `lease` or `complete` reply: per job, one string
/// `NUMBER|ATTEMPT|MAX_ATTEMPTS|TIMEOUT_MS|CREATED_MS|TOKEN`, then its input.
struct LeaseRows(Vec<LeaseRow>);

impl redis::FromRedisValue for LeaseRows {
    fn from_redis_value(value: redis::Value) -> std::result::Result<Self, redis::ParsingError> {
        let items: Vec<Vec<u8>> = redis::FromRedisValue::from_redis_value(value)?;
        let bad = |row: &[u8]| {
            redis::ParsingError::from(format!(
                "a lease row is not NUMBER|ATTEMPT|MAX_ATTEMPTS|TIMEOUT_MS|CREATED_MS|TOKEN: {:?}",
                String::from_utf8_lossy(row)
            ))
        };
        let mut rows = Vec::with_capacity(items.len() / 2);
        let mut items = items.into_iter();
        while let Some(row) = items.next() {
            let input = items.next().ok_or_else(|| bad(&row))?;
            rows.push(lease_row(&row, input).ok_or_else(|| bad(&row))?);
        }
        Ok(LeaseRows(rows))
    }
}

/// The lease of `function`'s job `row`, made by a call sent at `sent`.
fn lease_of(
    function: &FunctionName,
    row: LeaseRow,
    sent: std::time::Instant,
    ttl: Duration,
) -> Lease {
    let (seq, attempt, max_attempts, timeout_ms, created_ms, token, input) = row;
    Lease {
        info: JobInfo {
            id: JobId {
                function: function.clone(),
                seq,
            },
            attempt,
            max_attempts,
            enqueued_at_ms: created_ms,
            timeout_ms,
        },
        input,
        token,
        expires: sent + ttl,
        ttl,
    }
}

/// Reads one lease row, `NUMBER|ATTEMPT|MAX_ATTEMPTS|TIMEOUT_MS|CREATED_MS|TOKEN`, with the
/// job's `input`.
fn lease_row(row: &[u8], input: Vec<u8>) -> Option<LeaseRow> {
    let text = std::str::from_utf8(row).ok()?;
    let mut fields = text.splitn(6, '|');
    let mut number = || fields.next().and_then(|f| f.parse::<u64>().ok());
    let (seq, attempt, max_attempts, timeout_ms, created_ms) =
        (number()?, number()?, number()?, number()?, number()?);
    let token = fields.next().filter(|t| !t.is_empty())?;
    Some((
        seq,
        u32::try_from(attempt).ok()?,
        u32::try_from(max_attempts).ok()?,
        timeout_ms,
        created_ms,
        token.to_string(),
        input,
    ))
}

/// How long an idle worker stays registered to be handed jobs (lease.lua, ARGV[9]) after a
/// lease call that found nothing, at most. An idle worker asks again at least every second
/// (the default idle poll), renewing it; a worker that died is handed jobs for at most this
/// long (they start elsewhere once their lease runs out, the attempt not counted).
const HANDOFF_HOLD: Duration = Duration::from_secs(3);

/// How long a registration for leases of `ttl` lasts: [`HANDOFF_HOLD`], and at most a
/// quarter of the lease, so that a job handed over has at least three quarters of its lease
/// left by the worker's count (which starts at the registering call).
fn handoff_hold(ttl: Duration) -> Duration {
    HANDOFF_HOLD.min(ttl / 4).max(Duration::from_millis(1))
}

/// A job handed to this idle worker, as published on the worker's channel (`lease FUNCTION
/// COUNT ROW` + '\n' + input, COUNT the jobs of that hand-off): its function, the count, its
/// lease row and input. `None` for anything else.
fn handed_job(payload: &[u8]) -> Option<(FunctionName, usize, LeaseRow)> {
    let rest = payload.strip_prefix(b"lease ")?;
    let line_end = rest.iter().position(|b| *b == b'\n')?;
    let (head, input) = (&rest[..line_end], &rest[line_end + 1..]);
    let head = std::str::from_utf8(head).ok()?;
    let mut parts = head.splitn(3, ' ');
    let function = FunctionName::new(parts.next()?).ok()?;
    let count = parts.next()?.parse::<usize>().ok().filter(|c| *c > 0)?;
    let row = lease_row(parts.next()?.as_bytes(), input.to_vec())?;
    Some((function, count, row))
}

/// A result of `complete`, one letter: s(ucceeded), c(ancelled), x (stale) or m(issing).
fn completion_of(letter: u8) -> redis::RedisResult<Completion> {
    Ok(match letter {
        b's' => Completion::Accepted(JobState::Succeeded),
        b'c' => Completion::Accepted(JobState::Cancelled),
        b'x' => Completion::Stale,
        b'm' => Completion::Missing,
        _ => {
            return Err(redis::RedisError::from((
                redis::ErrorKind::UnexpectedReturnType,
                "complete answered an unknown result",
                char::from(letter).to_string(),
            )));
        }
    })
}

/// What the completion sender shares with the queue.
struct Completer {
    conn: Connection,
    worker_id: String,
    hints: Hints,
    answered: scripts::Answered,
}

/// The most `complete` calls on their way at once: a second is sent while the first is
/// answered (they run in the order sent), so that Redis and the worker work at once.
const COMPLETE_CALLS: usize = 2;

/// Sends completions as they come: whatever has queued up while the previous calls were on
/// their way goes in the next call, one per function, with the next jobs those completions
/// asked for.
async fn send_completions(
    completer: Completer,
    mut pending: mpsc::UnboundedReceiver<PendingCompletion>,
) {
    use futures_util::StreamExt;
    let completer = Arc::new(completer);
    let mut calls = futures_util::stream::FuturesUnordered::new();
    loop {
        tokio::select! {
            biased;
            Some(()) = calls.next(), if !calls.is_empty() => {}
            first = pending.recv(), if calls.len() < COMPLETE_CALLS => {
                let Some(first) = first else { break };
                let mut batch = vec![first];
                while batch.len() < COMPLETE_BATCH {
                    match pending.try_recv() {
                        Ok(next) => batch.push(next),
                        Err(_) => break,
                    }
                }
                batch.sort_by(|a, b| a.function.as_str().cmp(b.function.as_str()));
                while !batch.is_empty() {
                    let function = batch[0].function.clone();
                    let split = batch
                        .iter()
                        .position(|p| p.function != function)
                        .unwrap_or(batch.len());
                    let group: Vec<PendingCompletion> = batch.drain(..split).collect();
                    let completer = completer.clone();
                    // Polled (sent) at the next turn of the loop, before any later call.
                    calls.push(Box::pin(async move { completer.send(&function, group).await }));
                }
            }
        }
    }
    while calls.next().await.is_some() {}
}

impl Completer {
    /// Completes `group` (jobs of `function`) in one call, leasing in it the jobs each
    /// completion asked for next, and answers each completion with its result and its jobs.
    async fn send(&self, function: &FunctionName, group: Vec<PendingCompletion>) {
        let mut call = scripts::on_function(&scripts::COMPLETE, function);
        // The call id makes the call safe to send again: a resent call gets the first
        // one's results and leases.
        let call_id = format!("{}/{}", self.worker_id, random_hex(8));
        let want: usize = group
            .iter()
            .filter_map(|p| p.next.as_ref())
            .map(|n| n.want)
            .sum();
        let next = group.iter().find_map(|p| p.next.as_ref());
        let ttl = next.map_or(Duration::ZERO, |n| n.ttl);
        let acked = self.answered.take(function);
        let leasing = next.filter(|_| want > 0);
        call.arg(1 + acked.len() + if leasing.is_some() { 5 } else { 0 })
            .option("call", &call_id);
        if let Some(next) = leasing {
            call.option("lease", want)
                .option("worker", &self.worker_id)
                .option("ttl", ttl.as_millis() as u64)
                .option("timeout", next.default_timeout_ms)
                .option("attempts", next.default_max_attempts);
        }
        for id in &acked {
            call.option("acked", id);
        }
        call.arg(group.len());
        for p in &group {
            call.arg(p.seq)
                .arg(&p.token)
                .arg(&p.output)
                .arg(&p.log)
                .arg(&p.version);
        }
        let events = lock_hints(&self.hints)
            .get(function)
            .map_or(0, |hint| hint.events);
        let now = tokio::time::Instant::now();
        let sent = std::time::Instant::now();
        // Per job (code, state); the dependents to tell; the leases; wait_ms; capped.
        type Reply = (Vec<u8>, Vec<String>, LeaseRows, i64, i64);
        let reply: redis::RedisResult<Reply> =
            connection::invoke_retrying("complete", &self.conn, &call).await;
        let (results, notify, LeaseRows(rows), wait_ms, capped) = match reply {
            Ok(reply) => reply,
            Err(e) => {
                for p in group {
                    let _ = p.reply.send(Err(e.clone()));
                }
                return;
            }
        };
        self.answered.note(function, call_id);
        if want > 0 && rows.is_empty() {
            // Nothing next: the worker's next `lease` asks, and so waits registered for the
            // next job to be handed to it, instead of for a `work` message.
            lock_hints(&self.hints).remove(function);
        } else if want > 0 {
            record_lease(
                &self.hints,
                function,
                events,
                want,
                rows.len(),
                wait_ms,
                capped,
                now,
            );
        }
        if let Err(e) = links::deliver(&self.conn, notify).await {
            tracing::warn!(%e, "cannot tell the dependents of completed jobs; workers re-check them later");
        }
        let mut leases = rows
            .into_iter()
            .map(|row| lease_of(function, row, sent, ttl));
        for (p, result) in group.into_iter().zip(results) {
            let want = p.next.as_ref().map_or(0, |n| n.want);
            let next: Vec<Lease> = leases.by_ref().take(want).collect();
            let _ = p.reply.send(completion_of(result).map(|c| (c, next)));
        }
    }
}

/// What a worker knows of one served function's ready jobs, so that it skips lease calls
/// that would find nothing (a worker serving many functions would otherwise make a round
/// trip per function for every job it picks up).
#[derive(Debug, Default, Clone, Copy)]
struct Hint {
    /// Wake-up events seen for the function (create, retry, ready, config, a finish that
    /// frees a capped slot).
    events: u64,
    /// The last lease found fewer jobs than it asked for, and no event came since the
    /// `events` count it started at.
    empty_as_of: Option<u64>,
    /// When something of the function falls due (a scheduled job, an expiring lease, a
    /// rate-limit slot), as that lease said.
    due: Option<tokio::time::Instant>,
    /// A hand-off used its registration: ask again (to register anew), though that is no
    /// news of more work.
    renew: bool,
    /// A wait for work ran out: ask again in case an event was missed, though that is no
    /// news of more work either (an event heard before stays news: it may be what the
    /// wait missed the wake-up of).
    recheck: bool,
}

impl Hint {
    fn worth_asking(&self, now: tokio::time::Instant) -> bool {
        self.renew || self.recheck || self.has_news(now)
    }

    /// Whether the function is known to have had work since its last lease: that lease got
    /// all it asked for, or a wake-up event came since, or something of it fell due (a hint
    /// cleared for want of news says nothing).
    fn has_news(&self, now: tokio::time::Instant) -> bool {
        self.empty_as_of != Some(self.events) || self.due.is_some_and(|due| due <= now)
    }
}

/// Cancels heard lately: job ids with when, the oldest forgotten first (past
/// [`HeardCancels::KEEP`] or [`HeardCancels::MAX`]).
#[derive(Default)]
struct HeardCancels(VecDeque<(JobId, std::time::Instant)>);

impl HeardCancels {
    /// How long a cancel is remembered: longer than any job waits between its lease and its
    /// start.
    const KEEP: Duration = Duration::from_secs(120);
    /// The most remembered.
    const MAX: usize = 4096;

    fn forget_old(&mut self, now: std::time::Instant) {
        while self
            .0
            .front()
            .is_some_and(|(_, at)| now.duration_since(*at) > Self::KEEP)
        {
            self.0.pop_front();
        }
    }

    fn note(&mut self, job: JobId, now: std::time::Instant) {
        self.forget_old(now);
        if self.0.len() >= Self::MAX {
            self.0.pop_front();
        }
        self.0.push_back((job, now));
    }

    /// Whether a cancel of `job` was heard at `since` or later.
    fn heard(&mut self, job: &JobId, since: std::time::Instant, now: std::time::Instant) -> bool {
        self.forget_old(now);
        self.0
            .iter()
            .any(|(heard, at)| heard == job && *at >= since)
    }
}

/// Takes one off the counter when dropped.
struct CountGuard<'a>(&'a AtomicUsize);

impl Drop for CountGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

type Hints = Arc<std::sync::Mutex<std::collections::HashMap<FunctionName, Hint>>>;

/// Updates `function`'s hint after a call that asked for `want` jobs and got `got`: a call
/// that found fewer, not held back by the cap, says the function has no more ready jobs as
/// of `events` (the count when the call was sent), and when something falls due (`wait_ms`,
/// from `now`).
#[allow(clippy::too_many_arguments)]
fn record_lease(
    hints: &Hints,
    function: &FunctionName,
    events: u64,
    want: usize,
    got: usize,
    wait_ms: i64,
    capped: i64,
    now: tokio::time::Instant,
) {
    let mut hints = lock_hints(hints);
    let entry = hints.entry(function.clone()).or_default();
    entry.renew = false;
    entry.recheck = false;
    // (A call that could ask for nothing learnt only when something falls due.)
    if (got < want || want == 0) && capped == 0 {
        entry.empty_as_of = Some(events);
        entry.due = u64::try_from(wait_ms)
            .ok()
            .map(|ms| now + Duration::from_millis(ms));
    } else {
        entry.empty_as_of = None;
    }
}

fn lock_hints(
    hints: &Hints,
) -> std::sync::MutexGuard<'_, std::collections::HashMap<FunctionName, Hint>> {
    hints.lock().unwrap_or_else(|e| e.into_inner())
}

/// Turns what arrives on the work channels into wake-ups and cancel requests; while the
/// subscription is lost, hints are not trusted (every function is asked), and once it is
/// back they are cleared (events may have been missed).
async fn forward_notifications(
    mut subscription: Subscription,
    channels: std::collections::HashMap<String, FunctionName>,
    work_arrived: Arc<Notify>,
    cancels: (
        broadcast::Sender<CancelRequest>,
        Arc<std::sync::Mutex<HeardCancels>>,
    ),
    hints: Hints,
    listening: Arc<AtomicBool>,
    handed: (String, Arc<std::sync::Mutex<HandOffs>>, Connection),
) {
    let (cancels, heard) = cancels;
    let (handoff_channel, handoffs, conn) = handed;
    while let Some(delivery) = subscription.next().await {
        match delivery {
            Delivery::Message(message) => {
                if message.channel == handoff_channel {
                    match handed_job(&message.payload) {
                        Some((function, count, row)) => {
                            let now = std::time::Instant::now();
                            let arrival =
                                lock_handoffs(&handoffs).arrived(function, count, row, now);
                            match arrival {
                                Arrival::Queued => work_arrived.notify_one(),
                                Arrival::Duplicate => {
                                    tracing::debug!("dropped a copy of a hand-off message");
                                }
                                Arrival::Unexpected(function, row) => {
                                    // No slot is kept for it: handed back at once, unrun.
                                    let lease = lease_of(&function, row, now, Duration::ZERO);
                                    let conn = conn.clone();
                                    tokio::spawn(async move {
                                        release_lease(&conn, &lease).await;
                                    });
                                }
                            }
                        }
                        None => tracing::warn!(
                            channel = %handoff_channel,
                            "ignoring a message on this worker's hand-off channel that is not a lease"
                        ),
                    }
                } else if message.payload == b"work" {
                    if let Some(function) = channels.get(&message.channel) {
                        lock_hints(&hints)
                            .entry(function.clone())
                            .or_default()
                            .events += 1;
                    }
                    work_arrived.notify_one();
                } else if let Some(id) = message.payload.strip_prefix(b"cancel ")
                    && let Ok(id) = std::str::from_utf8(id).unwrap_or("").parse::<JobId>()
                {
                    // Noted before it is passed on: a job that starts once the worker has
                    // heard it finds it ([`WorkerQueue::cancel_heard`]).
                    heard
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .note(id.clone(), std::time::Instant::now());
                    let _ = cancels.send(CancelRequest::any(id));
                }
            }
            Delivery::Lost => {
                listening.store(false, Ordering::SeqCst);
                // What Redis holds of this worker's registrations is unknown now (a restart
                // loses them, and what they hand is not heard while the connection is down):
                // their slots are free; a hand-off heard through one later goes back.
                lock_handoffs(&handoffs).forget_registrations();
            }
            Delivery::Resubscribed => {
                lock_hints(&hints).clear();
                listening.store(true, Ordering::SeqCst);
                work_arrived.notify_one();
            }
        }
    }
}

/// The keys `rollcall` takes from a worker: the roll call, and the idle workers handed jobs
/// (a worker that leaves is no longer handed any).
fn roll_call_keys(function: &FunctionName) -> [String; 3] {
    let keys = FunctionKeys::new(function);
    [keys.workers(), keys.idle(), keys.idle_args()]
}

fn lock_handoffs(handoffs: &std::sync::Mutex<HandOffs>) -> std::sync::MutexGuard<'_, HandOffs> {
    handoffs.lock().unwrap_or_else(|e| e.into_inner())
}

/// Hands back `lease`, handed to this worker and not run (unrun: its attempt is not
/// counted); says so when it cannot (the job runs elsewhere once its lease runs out, its
/// attempt given back then).
async fn release_lease(conn: &Connection, lease: &Lease) {
    let released: redis::RedisResult<(i64, String, Vec<String>)> =
        scripts::on_function(&scripts::RELEASE, &lease.info.id.function)
            .arg(lease.info.id.seq)
            .arg(&lease.token)
            .invoke_async(&mut conn.clone())
            .await;
    match released {
        Ok((_, _, notify)) => {
            if let Err(error) = links::deliver(conn, notify).await {
                tracing::warn!(%error, "cannot tell the dependents of a job handed back; they re-check later");
            }
        }
        Err(error) => {
            tracing::warn!(%error, job = %lease.info.id, "cannot hand back a job handed to this worker; it runs elsewhere once its lease runs out")
        }
    }
}

/// Aborts a background task when dropped.
struct TaskGuard(JoinHandle<()>);

impl Drop for TaskGuard {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A worker's connection to the queue.
pub struct WorkerQueue {
    subscriber: Subscriber,
    conn: Connection,
    worker_id: String,
    next_function: AtomicUsize,
    strict_order: bool,
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
    listener: std::sync::Mutex<Option<TaskGuard>>,
    completions: std::sync::OnceLock<(mpsc::UnboundedSender<PendingCompletion>, TaskGuard)>,
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
        })
    }

    /// Sets the retry backoff: about `base` before the second attempt, doubling, at most `max`.
    pub fn with_backoff(mut self, base: Duration, max: Duration) -> Self {
        self.backoff_base = base;
        self.backoff_max = max.max(base);
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
        *self.served.lock().unwrap_or_else(|e| e.into_inner()) = functions.to_vec();
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
        *self.listener.lock().unwrap_or_else(|e| e.into_inner()) = Some(TaskGuard(task));
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
        let due = *self.next_due.lock().unwrap_or_else(|e| e.into_inner());
        let now = tokio::time::Instant::now();
        let mut until_due = due.map(|at| at.saturating_duration_since(now));
        // Slots kept for a registration whose hand-off never came free when it lapses: the
        // lease call they held back is made again then.
        let wall = std::time::Instant::now();
        if let Some(lapse) = lock_handoffs(&self.handoffs).next_lapse(wall) {
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
            .lock()
            .unwrap_or_else(|e| e.into_inner())
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

    /// Stops every hand-off to this worker (it is stopping): its registrations are withdrawn,
    /// the jobs handed to it and not taken are handed back, and so are those a registration
    /// already gave whose message is on its way: the stop waits for them until the
    /// registration would lapse (a hand-off whose message never comes goes back when its
    /// lease runs out).
    pub async fn stop_leasing(&self) {
        let (mut unrun, registrations) = {
            let mut handoffs = lock_handoffs(&self.handoffs);
            (handoffs.stop(), handoffs.all_unheard())
        };
        for (function, call_id) in registrations {
            match self.withdraw(&function, &call_id).await {
                Ok(true) => lock_handoffs(&self.handoffs).withdrawn(&function, &call_id),
                Ok(false) => {}
                Err(error) => {
                    tracing::warn!(%error, %function, "cannot withdraw this worker's hand-off registration; it lapses within seconds, and what it is handed meanwhile is handed back")
                }
            }
        }
        // A registration not withdrawn was used (or lapsed in Redis): its jobs' messages are
        // on their way, and each arrival wakes this wait.
        loop {
            let wall = std::time::Instant::now();
            let Some(lapse) = lock_handoffs(&self.handoffs).next_lapse(wall) else {
                break;
            };
            let until = lapse.saturating_duration_since(wall);
            let _ = tokio::time::timeout(until, self.work_arrived.notified()).await;
        }
        unrun.extend(lock_handoffs(&self.handoffs).stop());
        self.hand_back(
            unrun
                .into_iter()
                .map(|job| lease_of(&job.function, job.row, job.sent, job.ttl))
                .collect(),
        )
        .await;
    }

    /// Takes registration `call_id` on `function` out of Redis unless it was used or lapsed;
    /// true when it was (no job can come through it now).
    async fn withdraw(&self, function: &FunctionName, call_id: &str) -> Result<bool> {
        let removed: i64 = scripts::on_function(&scripts::WITHDRAW, function)
            .arg(&self.worker_id)
            .arg(call_id)
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok(removed == 1)
    }

    /// The slots this worker must keep free for jobs Redis may hand it without a lease call
    /// (its hand-off registrations, and jobs handed and not yet taken): the next
    /// [`WorkerQueue::lease`] gets them in its `max`.
    pub fn reserved_slots(&self) -> usize {
        lock_handoffs(&self.handoffs).reserved(std::time::Instant::now())
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

    /// Leases up to `max` jobs, taking the functions in turn (round-robin across calls, as
    /// qless does) so that a busy function does not starve the others, or strictly in the
    /// order given (see [`WorkerQueue::with_strict_order`]). Each lease lasts `ttl`. `max`
    /// counts the worker's free slots, those it keeps for hand-offs
    /// ([`WorkerQueue::reserved_slots`]) included.
    ///
    /// While [`WorkerQueue::listen`]ing, a function whose last lease found fewer jobs than
    /// asked for is skipped until a `work` message for it arrives, something of it falls
    /// due, or [`WorkerQueue::wait_for_work`] times out: an idle pick-up is one round trip
    /// however many functions the worker serves. A function's call that finds nothing
    /// registers the worker to be handed its next jobs, keeping an even share of the free
    /// slots for that; a function with news of work takes back the slots kept for the
    /// others when it needs them.
    pub async fn lease(
        &self,
        requests: &[LeaseRequest],
        max: usize,
        ttl: Duration,
    ) -> Result<Vec<Lease>> {
        self.leasing.fetch_add(1, Ordering::SeqCst);
        let _leasing = CountGuard(&self.leasing);
        let mut leases = self.take_handed(requests, max).await;
        if !leases.is_empty() || requests.is_empty() || max == 0 {
            return Ok(leases);
        }
        let start = match self.strict_order {
            true => 0,
            false => self.next_function.fetch_add(1, Ordering::Relaxed),
        };
        let token_prefix = format!("{}/{}", self.worker_id, random_hex(8));
        let mut next_due = Duration::MAX;
        let listening = self.listening.load(Ordering::SeqCst);
        // Only a call alone on its way registers: its `max` is then all the free slots.
        let registering = listening
            && self.leasing.load(Ordering::SeqCst) == 1
            && !lock_handoffs(&self.handoffs).stopping();
        // After a wait that ran out, the slots kept for hand-offs are shared out anew (in
        // this call's order, which turns): a registration renewed round after round would
        // otherwise keep them from a function whose jobs' `work` this worker never heard
        // (it came before the worker listened).
        if registering && self.recheck.swap(false, Ordering::SeqCst) {
            self.withdraw_until(0).await;
        }
        // The slots kept for registrations are not this call's to lease (a function's own
        // registration comes back to its call when it was not used). When fewer slots are
        // free than are kept (another source of the worker leased some), registrations go
        // until they fit.
        let mut reserved = lock_handoffs(&self.handoffs).reserved(std::time::Instant::now());
        if reserved > max {
            self.withdraw_until(max).await;
            reserved = lock_handoffs(&self.handoffs).reserved(std::time::Instant::now());
        }
        let mut budget = max.saturating_sub(reserved);
        let share = match budget {
            0 => 0,
            free => (free / requests.len()).max(1),
        };
        for i in 0..requests.len() {
            let request = &requests[(start + i) % requests.len()];
            let function = &request.function;
            let now = tokio::time::Instant::now();
            let hint = lock_hints(&self.hints).get(function).copied();
            if listening && !hint.unwrap_or_default().worth_asking(now) {
                // Still counts for when to come back.
                if let Some(due) = hint.and_then(|h| h.due) {
                    next_due = next_due.min(due.saturating_duration_since(now));
                }
                continue;
            }
            if budget < request.max && hint.is_some_and(|h| h.has_news(now)) {
                budget += self.take_back_slots(function, request.max - budget).await;
            }
            let own = lock_handoffs(&self.handoffs).unheard(function);
            let want = request.max.min(budget);
            let own_slots = own.as_ref().map_or(0, |(_, slots)| *slots);
            if want == 0 && own_slots == 0 {
                continue;
            }
            let register = if registering { share.min(want) } else { 0 };
            // A lease runs out `ttl` after the call was sent, at the latest, by our clock.
            let sent = std::time::Instant::now();
            let mut call = scripts::on_function(&scripts::LEASE, function);
            call.arg(&self.worker_id)
                .arg(&token_prefix)
                .arg(want)
                .arg(ttl.as_millis() as u64)
                .arg(request.default_timeout_ms)
                .arg(request.default_max_attempts);
            // Listening (so a job handed over is heard): if nothing is ready, the next jobs
            // enqueued are leased to this worker at once and published on its channel; its
            // earlier registration here goes first, its slots back to this call if unused.
            if registering || own.is_some() {
                call.arg(if registering {
                    self.handoff_channel.as_str()
                } else {
                    ""
                })
                .arg(handoff_hold(ttl).as_millis() as u64)
                .arg(register)
                .arg(own.as_ref().map_or("", |(id, _)| id.as_str()))
                .arg(own_slots);
            }
            // The token prefix is the call's id: sent again after a lost reply, the call
            // returns the leases it made instead of making more (and orphaning the first).
            let reply: redis::RedisResult<(LeaseRows, i64, i64, Vec<String>, String)> =
                connection::invoke_retrying("lease", &self.conn, &call).await;
            let (LeaseRows(rows), wait_ms, capped, notify, withdrawn) = match reply {
                Ok(reply) => reply,
                // The leases taken from the functions before this one are held: run them.
                Err(error) if !leases.is_empty() => {
                    tracing::warn!(%error, %function, "leasing failed; running what was leased");
                    break;
                }
                Err(error) => return Err(error.into()),
            };
            let replied = std::time::Instant::now();
            let regained = match &own {
                Some((id, slots)) if *id == withdrawn => {
                    lock_handoffs(&self.handoffs).withdrawn(function, id);
                    *slots
                }
                _ => 0,
            };
            budget = (budget + regained).saturating_sub(rows.len());
            if !rows.is_empty() {
                self.answered.note(function, token_prefix.clone());
            } else if registering && register + regained > 0 {
                // Registered (lease.lua): the slots it asked for, and those regained.
                let slots = register + regained;
                lock_handoffs(&self.handoffs).register(
                    &token_prefix,
                    function,
                    slots,
                    sent,
                    ttl,
                    replied,
                    handoff_hold(ttl),
                );
                budget = budget.saturating_sub(slots);
            }
            record_lease(
                &self.hints,
                function,
                hint.unwrap_or_default().events,
                want + regained,
                rows.len(),
                wait_ms,
                capped,
                now,
            );
            if let Err(error) = links::deliver(&self.conn, notify).await {
                // Dependents whose news was lost are found by their re-check.
                tracing::warn!(%error, "cannot tell dependents of reclaimed jobs; they re-check later");
            }
            if let Ok(wait) = u64::try_from(wait_ms) {
                next_due = next_due.min(Duration::from_millis(wait));
            }
            leases.extend(
                rows.into_iter()
                    .map(|row| lease_of(function, row, sent, ttl)),
            );
        }
        *self.next_due.lock().unwrap_or_else(|e| e.into_inner()) =
            (next_due != Duration::MAX).then(|| tokio::time::Instant::now() + next_due);
        Ok(leases)
    }

    /// Withdraws registrations until at most `limit` slots are kept for them (those already
    /// used or lapsed keep theirs until their hand-off is heard or their time is up).
    async fn withdraw_until(&self, limit: usize) {
        let registrations = lock_handoffs(&self.handoffs).all_unheard();
        for (function, call_id) in registrations {
            if lock_handoffs(&self.handoffs).reserved(std::time::Instant::now()) <= limit {
                break;
            }
            match self.withdraw(&function, &call_id).await {
                Ok(true) => lock_handoffs(&self.handoffs).withdrawn(&function, &call_id),
                Ok(false) => {}
                Err(error) => {
                    tracing::warn!(%error, %function, "cannot withdraw a hand-off registration; its slots stay kept until it lapses")
                }
            }
        }
    }

    /// Takes back up to `needed` of the slots kept for other functions' registrations than
    /// `function`'s (withdrawing them from Redis); returns how many came back (a
    /// registration already used or lapsed keeps its slots until its hand-off is heard or
    /// its time is up).
    async fn take_back_slots(&self, function: &FunctionName, needed: usize) -> usize {
        let others = lock_handoffs(&self.handoffs).unheard_others(function);
        let mut regained = 0;
        for (other, call_id, slots) in others {
            if regained >= needed {
                break;
            }
            match self.withdraw(&other, &call_id).await {
                Ok(true) => {
                    lock_handoffs(&self.handoffs).withdrawn(&other, &call_id);
                    regained += slots;
                }
                Ok(false) => {}
                Err(error) => {
                    tracing::warn!(%error, function = %other, "cannot withdraw a hand-off registration; its slots stay kept until it lapses");
                }
            }
        }
        regained
    }

    /// The jobs handed to this worker since its last lease call: up to `max`, at most
    /// `request.max` of each requested function. A job of a function not asked for (or
    /// without room), or with less than half of its lease left (by the count from its
    /// registering call: its message came late), is handed back.
    async fn take_handed(&self, requests: &[LeaseRequest], max: usize) -> Vec<Lease> {
        let (taken, unwanted) = {
            let mut room: std::collections::HashMap<FunctionName, usize> = requests
                .iter()
                .map(|r| (r.function.clone(), r.max))
                .collect();
            lock_handoffs(&self.handoffs).take(&mut room, max, std::time::Instant::now())
        };
        if taken.is_empty() && unwanted.is_empty() {
            return Vec::new();
        }
        // The next `lease` of these functions asks Redis again (registering for the next
        // hand-off when it finds nothing). (That a hand-off came is no news of more work: the
        // `work` message is, when jobs were left.)
        {
            let mut hints = lock_hints(&self.hints);
            for job in &taken {
                hints.entry(job.function.clone()).or_default().renew = true;
            }
        }
        let leases = |jobs: Vec<super::handoff::HandedJob>| -> Vec<Lease> {
            jobs.into_iter()
                .map(|job| lease_of(&job.function, job.row, job.sent, job.ttl))
                .collect()
        };
        self.hand_back(leases(unwanted)).await;
        leases(taken)
    }

    /// Hands back jobs handed to this worker that it will not run.
    async fn hand_back(&self, leases: Vec<Lease>) {
        for lease in leases {
            release_lease(&self.conn, &lease).await;
        }
    }

    /// Extends `lease` by `ttl`, and says whether it is still held and whether a client
    /// asked for the job to be cancelled.
    pub async fn heartbeat(&self, lease: &Lease, ttl: Duration) -> Result<LeaseStatus> {
        let (until, cancel): (u64, i64) =
            scripts::on_function(&scripts::HEARTBEAT, &lease.info.id.function)
                .arg(lease.info.id.seq)
                .arg(&lease.token)
                .arg(ttl.as_millis() as u64)
                .invoke_async(&mut self.conn.clone())
                .await?;
        Ok(match (until, cancel) {
            (0, _) => LeaseStatus::Lost,
            (_, 1) => LeaseStatus::CancelRequested,
            _ => LeaseStatus::Held,
        })
    }

    /// Stores and publishes the job's progress. `false` means the lease is lost.
    pub async fn progress(&self, lease: &Lease, progress: &Progress) -> Result<bool> {
        let stored: i64 = scripts::on_function(&scripts::PROGRESS, &lease.info.id.function)
            .arg(lease.info.id.seq)
            .arg(&lease.token)
            .arg(progress.done)
            .arg(progress.total)
            .arg(progress.message.as_deref().unwrap_or(""))
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok(stored == 1)
    }

    /// Finishes the job with `output`, appending this attempt's log to the job's log and
    /// recording the plugin version that ran it. Accepted once; a stale lease is refused.
    ///
    /// Completions that arrive while another is on its way to Redis go together in the next
    /// call (one script call for many jobs of a function), so a busy worker makes far fewer
    /// round trips; an idle one sends each at once.
    pub async fn complete(
        &self,
        lease: &Lease,
        output: &[u8],
        notes: &AttemptNotes,
    ) -> Result<Completion> {
        Ok(self.finish_job(lease, output, notes, None).await?.0)
    }

    /// Completes the job as [`WorkerQueue::complete`] does and, in the same call, leases up
    /// to `next.max` more jobs of its function for the slot it frees (as
    /// [`WorkerQueue::lease`] would with `next` and `ttl`): at steady state, one round trip
    /// per job.
    ///
    /// The next job is asked for only while the other functions served have no ready jobs
    /// as far as this worker knows (their last lease found none and no work was announced
    /// since), so that a busy function does not keep the slots from the others: otherwise
    /// the answer has no lease and the slot is leased for in turn as usual.
    pub async fn complete_and_lease(
        &self,
        lease: &Lease,
        output: &[u8],
        notes: &AttemptNotes,
        next: &LeaseRequest,
        ttl: Duration,
    ) -> Result<(Completion, Vec<Lease>)> {
        let function = &lease.info.id.function;
        let next = (next.function == *function && next.max > 0 && self.only_one_has_work(function))
            .then(|| NextLease {
                want: next.max.min(COMPLETE_BATCH),
                ttl,
                default_timeout_ms: next.default_timeout_ms,
                default_max_attempts: next.default_max_attempts,
            });
        self.finish_job(lease, output, notes, next).await
    }

    /// Whether, as far as the hints tell, no served function but `function` has ready jobs.
    fn only_one_has_work(&self, function: &FunctionName) -> bool {
        if !self.listening.load(Ordering::SeqCst) {
            return false;
        }
        let now = tokio::time::Instant::now();
        let served = self.served.lock().unwrap_or_else(|e| e.into_inner());
        let hints = lock_hints(&self.hints);
        served
            .iter()
            .filter(|f| *f != function)
            .all(|other| hints.get(other).is_some_and(|hint| !hint.worth_asking(now)))
    }

    /// Sends the completion (and what to lease next) to the completion sender.
    async fn finish_job(
        &self,
        lease: &Lease,
        output: &[u8],
        notes: &AttemptNotes,
        next: Option<NextLease>,
    ) -> Result<(Completion, Vec<Lease>)> {
        let (reply, replied) = oneshot::channel();
        let pending = PendingCompletion {
            function: lease.info.id.function.clone(),
            seq: lease.info.id.seq,
            token: lease.token.clone(),
            output: output.to_vec(),
            log: notes.log.clone(),
            version: notes.plugin_version.clone().unwrap_or_default(),
            next,
            reply,
        };
        let sender = self.completions.get_or_init(|| {
            let (sender, receiver) = mpsc::unbounded_channel();
            let completer = Completer {
                conn: self.conn.clone(),
                worker_id: self.worker_id.clone(),
                hints: self.hints.clone(),
                answered: self.answered.clone(),
            };
            let task = tokio::spawn(send_completions(completer, receiver));
            (sender, TaskGuard(task))
        });
        let stopped = || {
            QueueError::Redis(redis::RedisError::from((
                redis::ErrorKind::Client,
                "the completion sender stopped",
            )))
        };
        if sender.0.send(pending).is_err() {
            return Err(stopped());
        }
        match replied.await {
            Ok(Ok(done)) => Ok(done),
            Ok(Err(e)) => Err(QueueError::Redis(e)),
            Err(_) => Err(stopped()),
        }
    }

    /// Records a failed attempt with its notes (log, plugin version): retried after backoff if `failure` is
    /// retryable and attempts remain, otherwise the job fails for good.
    pub async fn fail(
        &self,
        lease: &Lease,
        failure: &JobFailure,
        notes: &AttemptNotes,
    ) -> Result<Completion> {
        let backoff = self.backoff(lease.info.attempt);
        let reply = scripts::on_function(&scripts::FAIL, &lease.info.id.function)
            .arg(lease.info.id.seq)
            .arg(&lease.token)
            .arg(failure.class.as_str())
            .arg(&failure.message)
            .arg(if failure.retryable { 1 } else { 0 })
            .arg(backoff.as_millis() as u64)
            .arg(&notes.log)
            .arg(notes.plugin_version.as_deref().unwrap_or(""))
            .invoke_async(&mut self.conn.clone())
            .await?;
        let reply = self.settle(reply).await?;
        Ok(completion(reply)?)
    }

    /// Hands the job back unrun, without counting the attempt (used on shutdown). A job
    /// whose cancellation was asked for ends cancelled instead.
    pub async fn release(&self, lease: &Lease) -> Result<Completion> {
        let reply = scripts::on_function(&scripts::RELEASE, &lease.info.id.function)
            .arg(lease.info.id.seq)
            .arg(&lease.token)
            .invoke_async(&mut self.conn.clone())
            .await?;
        let reply = self.settle(reply).await?;
        Ok(completion(reply)?)
    }

    /// Tells the dependents in other functions that a finishing script named, and returns
    /// the rest of its `{accepted, word, notify}` reply.
    async fn settle(
        &self,
        (accepted, word, notify): (i64, String, Vec<String>),
    ) -> Result<(i64, String)> {
        links::deliver(&self.conn, notify).await?;
        Ok((accepted, word))
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
                if links::relink_due(&self.conn, function, RELINK_BATCH).await? < RELINK_BATCH {
                    break;
                }
            }
        }
        Ok(())
    }

    /// Adds `functions` to the directory of functions that operators list.
    pub async fn register(&self, functions: &[FunctionName]) -> Result<()> {
        if functions.is_empty() {
            return Ok(());
        }
        let mut cmd = redis::cmd("SADD");
        cmd.arg(super::keys::functions());
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

/// `bytes` random bytes as lowercase hex.
pub(crate) fn random_hex(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    // getrandom only fails without an OS entropy source; a clock-based fallback still gives
    // distinct tokens per call, which is all a token prefix needs.
    if getrandom::fill(&mut buf).is_err() {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        for (i, b) in buf.iter_mut().enumerate() {
            *b = (nanos >> (8 * (i % 16))) as u8;
        }
    }
    buf.iter().map(|b| format!("{b:02x}")).collect()
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
        assert_eq!(
            row,
            (
                7,
                1,
                3,
                1000,
                123,
                "w/ab:7:1".to_string(),
                b"in\nput".to_vec()
            )
        );
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
