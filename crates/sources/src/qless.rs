//! qless (`../shared/seeds/qless-lua-api.txt` in the repository's lineage): the jobs of
//! qless queues, run by a wasmgear worker doing a qless worker's part.
//!
//! A job's `klass` names its function: `reverse`, or a dotted name whose last segment is
//! the function (`jobs.reverse`); its `data` (JSON text) is the plugin's input, except that
//! data that is one JSON string is passed as that string's text (`"hello"` as `hello`). The worker
//! pops, heartbeats, completes, fails and retries with qless' own semantics on qless' own
//! keys (`ql:j:JID`, `ql:q:Q-work`, ...): expired locks get a `lock_lost` warning and the
//! `grace-period` first, then cost the job one of its `remaining` retries; scheduled and
//! recurring jobs are promoted when due; a completed job releases its dependents and is
//! listed in `ql:completed`; the day's `wait` and `run` statistics are kept. Locks last the
//! `heartbeat` setting (or the queue's `QUEUE-heartbeat`), and the worker renews them every
//! third of it. Times are this machine's clock, as every qless client passes its own.
//!
//! Added: the plugin's output is kept in the job hash's `output` field (qless' `data` stays
//! the input). A failure the plugin marks as retryable is a qless `retry` after the worker's
//! backoff while retries remain; any other failure is a qless `fail` whose group is the
//! error class (`guest-error`, `timed-out`, ...). Jobs of functions no plugin serves stay
//! in their queue for a worker that can run them.
//!
//! The scripts are written here from the document and checked against the real qless-py
//! client; qless' layout has keys that depend on the data (other jobs, tags, a day's
//! statistics), so the source needs one Redis server, not a Cluster.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::{Notify, broadcast};
use tokio_util::task::AbortOnDropHandle;
use wasmgear_client::connection::Connection;
use wasmgear_client::subscriber::{Delivery, Subscriber, Subscription, Topic};
use wasmgear_proto::{
    AttemptNotes, CancelRequest, Completion, ErrorClass, JobFailure, JobId, JobInfo, JobState,
    Lease, LeaseRequest, LeaseStatus, Progress,
};
use wasmgear_source::{JobSource, SourceError};

use crate::redis_source::lua_scripts;
use crate::{ConnectError, RetryBackoff};
use wasmgear_proto::sync::Locked;

/// How many waiting jobs one pop looks at for jobs of the functions asked for.
const POP_SCAN: usize = 256;

/// qless' keys and channels, for one queue and one worker.
#[derive(Debug, Clone)]
pub struct QlessKeys {
    queue: String,
    worker: String,
}

impl QlessKeys {
    /// The keys of `queue` as seen by `worker`.
    pub fn new(queue: &str, worker: &str) -> Self {
        QlessKeys {
            queue: queue.to_string(),
            worker: worker.to_string(),
        }
    }

    /// The queue's name.
    pub fn queue_name(&self) -> &str {
        &self.queue
    }

    /// `ql:q:Q-KIND`: the queue's `work`, `locks`, `scheduled`, `depends` or `recur` set.
    pub fn queue(&self, kind: &str) -> String {
        format!("ql:q:{}-{kind}", self.queue)
    }

    /// `ql:j:JID`: a job's hash.
    pub fn job(jid: &str) -> String {
        format!("ql:j:{jid}")
    }

    /// `ql:j:JID-dependents`: the jobs waiting for a job.
    pub fn dependents(jid: &str) -> String {
        format!("ql:j:{jid}-dependents")
    }

    /// `ql:w:W:jobs`: the worker's jobs by lock expiry.
    pub fn worker_jobs(&self) -> String {
        format!("ql:w:{}:jobs", self.worker)
    }

    /// `ql:w:W`: the channel of the worker's lost locks and cancelled jobs.
    pub fn worker_channel(&self) -> String {
        format!("ql:w:{}", self.worker)
    }

    /// `ql:log`: the channel of every job's events.
    pub const LOG: &str = "ql:log";
    /// `ql:config`: the settings.
    pub const CONFIG: &str = "ql:config";
    /// `ql:paused_queues`.
    pub const PAUSED: &str = "ql:paused_queues";
    /// `ql:workers`: workers by last activity.
    pub const WORKERS: &str = "ql:workers";
    /// `ql:tracked`: the jobs whose events are published.
    pub const TRACKED: &str = "ql:tracked";
    /// `ql:failures`: the failure groups.
    pub const FAILURES: &str = "ql:failures";
    /// `ql:completed`: completed jobs by time.
    pub const COMPLETED: &str = "ql:completed";
}

lua_scripts!("qless" with "common.lua":
    POP = "pop.lua",
    HEARTBEAT = "heartbeat.lua",
    COMPLETE = "complete.lua",
    FAIL = "fail.lua",
    RETRY = "retry.lua",
    RELEASE = "release.lua",
);

/// Seconds since the epoch, as qless clients pass `now`.
fn now() -> String {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    format!("{:.6}", since.as_secs_f64())
}

/// A heartbeat setting in seconds, as a lease TTL (at least a second, at most a day, as a
/// setting outside that is a mistake the worker should not follow to extremes).
fn lock_ttl(seconds: &str) -> Duration {
    let seconds = seconds
        .parse::<f64>()
        .ok()
        .filter(|s| s.is_finite())
        .unwrap_or(60.0);
    Duration::from_secs_f64(seconds.clamp(1.0, 86_400.0))
}

/// The plugin's input for a job's `data`: the JSON text, or a JSON string's own text.
fn input_of(data: Vec<u8>) -> Vec<u8> {
    if data.first() == Some(&b'"')
        && let Ok(serde_json::Value::String(text)) = serde_json::from_slice(&data)
    {
        return text.into_bytes();
    }
    data
}

/// A job this worker holds, by its lease token `POP/JID`.
struct Held {
    queue: String,
    job: JobId,
}

/// What the scripts need to know of a held job.
struct Holding {
    keys: QlessKeys,
    jid: String,
    pop: String,
}

impl Holding {
    /// The arguments every script on a held job starts with: now, the jid, the worker, the
    /// queue and the pop that took it.
    fn args<'a>(
        &self,
        call: &'a mut redis::ScriptInvocation<'static>,
        worker: &str,
    ) -> &'a mut redis::ScriptInvocation<'static> {
        call.arg(now())
            .arg(&self.jid)
            .arg(worker)
            .arg(self.keys.queue_name())
            .arg(&self.pop)
    }
}

/// What the source and its listener share.
struct Inner {
    conn: Connection,
    queues: Vec<String>,
    worker_id: String,
    seq: AtomicU64,
    pops: AtomicU64,
    held: Mutex<HashMap<String, Held>>,
    work: Notify,
    cancels: broadcast::Sender<CancelRequest>,
}

impl Inner {
    fn held(&self) -> std::sync::MutexGuard<'_, HashMap<String, Held>> {
        self.held.locked()
    }

    /// The job held under lease token `token` (`POP/JID`), if it is held here.
    fn holding(&self, token: &str) -> Option<Holding> {
        let queue = self.held().get(token)?.queue.clone();
        let (pop, jid) = token.split_once('/')?;
        Some(Holding {
            keys: QlessKeys::new(&queue, &self.worker_id),
            jid: jid.to_string(),
            pop: pop.to_string(),
        })
    }

    /// Renews the lock of a held job: whether this pop still holds it, or it was cancelled.
    async fn renew(&self, held: &Holding) -> Result<LeaseStatus, SourceError> {
        let mut call = HEARTBEAT.prepare_invoke();
        call.key(QlessKeys::job(&held.jid))
            .key(held.keys.queue("locks"))
            .key(held.keys.worker_jobs())
            .key(QlessKeys::CONFIG);
        let reply: Vec<String> = held
            .args(&mut call, &self.worker_id)
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok(match reply.first().map(String::as_str) {
            Some("held") => LeaseStatus::Held,
            // Cancelled: the job hash is gone.
            Some("gone") => LeaseStatus::CancelRequested,
            _ => LeaseStatus::Lost,
        })
    }

    /// A qless pop of `queue` for the functions asked for.
    async fn pop(
        &self,
        queue: &str,
        wants: &mut [(LeaseRequest, usize)],
        room: usize,
    ) -> Result<Vec<Lease>, SourceError> {
        let keys = QlessKeys::new(queue, &self.worker_id);
        let sent = std::time::Instant::now();
        let pop = self.pops.fetch_add(1, Ordering::Relaxed) + 1;
        let mut call = POP.prepare_invoke();
        for kind in ["work", "locks", "scheduled", "recur"] {
            call.key(keys.queue(kind));
        }
        call.key(QlessKeys::CONFIG)
            .key(QlessKeys::PAUSED)
            .key(QlessKeys::WORKERS)
            .key(keys.worker_jobs())
            .key(QlessKeys::TRACKED)
            .key(QlessKeys::FAILURES)
            .arg(now())
            .arg(queue)
            .arg(&self.worker_id)
            .arg(room)
            .arg(POP_SCAN)
            .arg(pop);
        for (request, left) in wants.iter() {
            call.arg(request.function.as_str()).arg(*left);
        }
        type Popped = (String, String, Vec<u8>, u32, i64);
        let (heartbeat, popped, skipped): (String, Vec<Popped>, Vec<String>) =
            call.invoke_async(&mut self.conn.clone()).await?;
        for jid in skipped {
            tracing::warn!(
                queue,
                jid,
                "a qless queue listed a job that has no job hash; dropped from the queue"
            );
        }
        let ttl = lock_ttl(&heartbeat);
        let mut leases = Vec::new();
        for (jid, function, data, retries, remaining) in popped {
            let Some((request, left)) = wants
                .iter_mut()
                .find(|(r, _)| r.function.as_str() == function)
            else {
                continue;
            };
            *left = left.saturating_sub(1);
            let remaining = remaining.clamp(0, i64::from(retries)) as u32;
            let job = JobId {
                function: request.function.clone(),
                seq: self.seq.fetch_add(1, Ordering::Relaxed) + 1,
            };
            tracing::info!(queue, jid, %job, "popped a qless job");
            let token = format!("{pop}/{jid}");
            self.held().insert(
                token.clone(),
                Held {
                    queue: queue.to_string(),
                    job: job.clone(),
                },
            );
            leases.push(Lease {
                info: JobInfo {
                    id: job,
                    attempt: retries - remaining + 1,
                    max_attempts: retries + 1,
                    enqueued_at_ms: wasmgear_proto::units::now_ms(),
                    timeout_ms: request.default_timeout_ms,
                    trace: None,
                },
                input: input_of(data),
                token,
                expires: sent + ttl,
                ttl,
            });
        }
        Ok(leases)
    }

    /// The job held under `token` has ended here.
    fn forget(&self, token: &str) {
        self.held().remove(token);
    }

    /// A message on the worker's channel about a job (cancelled, its lock lost, moved to
    /// another queue): each run of it here that no longer holds it is stopped. (A run this
    /// worker popped again after its lock ran out is a new holder, and goes on.)
    async fn on_worker_event(&self, payload: &[u8]) {
        let Ok(event) = serde_json::from_slice::<serde_json::Value>(payload) else {
            tracing::warn!("a qless worker event that is not JSON; ignored");
            return;
        };
        let Some(jid) = event["jid"].as_str() else {
            return;
        };
        let what = event["event"].as_str().unwrap_or("an event");
        let suffix = format!("/{jid}");
        let runs: Vec<(String, JobId)> = self
            .held()
            .iter()
            .filter(|(token, _)| token.ends_with(&suffix))
            .map(|(token, held)| (token.clone(), held.job.clone()))
            .collect();
        for (token, job) in runs {
            let Some(held) = self.holding(&token) else {
                continue;
            };
            match self.renew(&held).await {
                Ok(LeaseStatus::Held) => {}
                Ok(_) => {
                    tracing::info!(jid, event = what, %job, "qless asks this worker to stop a job");
                    let _ = self.cancels.send(CancelRequest::any(job));
                }
                Err(error) => {
                    tracing::warn!(%error, jid, "could not check a qless job named in an event; its heartbeat will")
                }
            }
        }
    }

    /// A message on `ql:log`: a job put in one of the queues served wakes the worker.
    fn on_log(&self, payload: &[u8]) {
        let Ok(event) = serde_json::from_slice::<serde_json::Value>(payload) else {
            return;
        };
        let put = event["event"] == "put";
        if put && self.queues.iter().any(|q| event["queue"] == q.as_str()) {
            self.work.notify_one();
        }
    }
}

/// Wakes the worker on new jobs and stops the jobs qless takes away.
async fn listen(mut subscription: Subscription, inner: Arc<Inner>, worker_channel: String) {
    while let Some(delivery) = subscription.next().await {
        match delivery {
            Delivery::Message(message) if message.channel == worker_channel => {
                inner.on_worker_event(&message.payload).await
            }
            Delivery::Message(message) => inner.on_log(&message.payload),
            Delivery::Resubscribed => inner.work.notify_one(),
            Delivery::Lost => {}
        }
    }
}

/// A worker's connection to some qless queues, popped in the order given.
pub struct Qless {
    inner: Arc<Inner>,
    backoff: RetryBackoff,
    _listener: AbortOnDropHandle<()>,
}

impl Qless {
    /// Connects to the Redis at `url` to serve qless `queues` as qless worker `worker_id`.
    pub async fn connect(
        url: &str,
        queues: &[String],
        worker_id: impl Into<String>,
        backoff: RetryBackoff,
    ) -> Result<Self, ConnectError> {
        let (client, conn) = crate::redis_source::connect_standalone(url, "qless").await?;
        let worker_id = worker_id.into();
        let worker_channel = QlessKeys::new("", &worker_id).worker_channel();
        let inner = Arc::new(Inner {
            conn,
            queues: queues.to_vec(),
            worker_id,
            seq: AtomicU64::new(0),
            pops: AtomicU64::new(0),
            held: Mutex::new(HashMap::new()),
            work: Notify::new(),
            cancels: broadcast::channel(crate::multi::CANCEL_BUFFER).0,
        });
        let subscription = Subscriber::new(client).open();
        for channel in [worker_channel.clone(), QlessKeys::LOG.to_string()] {
            if let Err(error) = subscription.subscribe(Topic::Channel(channel)).await {
                tracing::warn!(%error, "not subscribed to qless' channels yet; polling meanwhile");
            }
        }
        let listener = tokio::spawn(listen(subscription, inner.clone(), worker_channel));
        Ok(Qless {
            inner,
            backoff,
            _listener: AbortOnDropHandle::new(listener),
        })
    }

    /// The job held as `lease`, or why there is none.
    fn holding(&self, lease: &Lease) -> Result<Holding, SourceError> {
        self.inner
            .holding(&lease.token)
            .ok_or_else(|| format!("qless lease {} is not held by this worker", lease.token).into())
    }
}

impl JobSource for Qless {
    async fn lease(
        &self,
        requests: &[LeaseRequest],
        max: usize,
        _ttl: Duration,
    ) -> Result<Vec<Lease>, SourceError> {
        let mut wants: Vec<(LeaseRequest, usize)> = requests
            .iter()
            .filter(|r| r.max > 0)
            .map(|r| (r.clone(), r.max.min(max)))
            .collect();
        let mut leases = Vec::new();
        for queue in &self.inner.queues {
            let room = max.saturating_sub(leases.len());
            if room == 0 || wants.iter().all(|(_, left)| *left == 0) {
                break;
            }
            wants.retain(|(_, left)| *left > 0);
            leases.extend(self.inner.pop(queue, &mut wants, room).await?);
        }
        Ok(leases)
    }

    async fn wait_for_work(&self, timeout: Duration) {
        let _ = tokio::time::timeout(timeout, self.inner.work.notified()).await;
    }

    async fn heartbeat(&self, lease: &Lease, _ttl: Duration) -> Result<LeaseStatus, SourceError> {
        self.inner.renew(&self.holding(lease)?).await
    }

    fn cancel_requests(&self) -> broadcast::Receiver<CancelRequest> {
        self.inner.cancels.subscribe()
    }

    async fn progress(&self, lease: &Lease, _progress: &Progress) -> Result<bool, SourceError> {
        // qless has no place for progress; whether the job is still held is what counts.
        // A cancelled job is still this worker's to stop.
        Ok(!matches!(
            self.heartbeat(lease, lease.ttl).await?,
            LeaseStatus::Lost
        ))
    }

    async fn complete(
        &self,
        lease: &Lease,
        output: &[u8],
        _notes: &AttemptNotes,
    ) -> Result<Completion, SourceError> {
        let held = self.holding(lease)?;
        let mut call = COMPLETE.prepare_invoke();
        call.key(QlessKeys::job(&held.jid))
            .key(held.keys.queue("work"))
            .key(held.keys.queue("locks"))
            .key(held.keys.queue("scheduled"))
            .key(held.keys.worker_jobs())
            .key(QlessKeys::COMPLETED)
            .key(QlessKeys::dependents(&held.jid))
            .key(QlessKeys::TRACKED)
            .key(QlessKeys::CONFIG);
        let done: i64 = held
            .args(&mut call, &self.inner.worker_id)
            .arg(output)
            .invoke_async(&mut self.inner.conn.clone())
            .await?;
        self.inner.forget(&lease.token);
        Ok(match done {
            1 => Completion::Accepted(JobState::Succeeded),
            _ => Completion::Stale,
        })
    }

    async fn fail(
        &self,
        lease: &Lease,
        failure: &JobFailure,
        _notes: &AttemptNotes,
    ) -> Result<Completion, SourceError> {
        let held = self.holding(lease)?;
        let group = failure.class.to_string();
        let outcome = match self.backoff.retry_after(lease, failure) {
            Some(delay) => {
                let mut call = RETRY.prepare_invoke();
                call.key(QlessKeys::job(&held.jid))
                    .key(held.keys.queue("work"))
                    .key(held.keys.queue("locks"))
                    .key(held.keys.queue("scheduled"))
                    .key(held.keys.worker_jobs())
                    .key(QlessKeys::FAILURES)
                    .key(QlessKeys::TRACKED);
                let left: Option<i64> = held
                    .args(&mut call, &self.inner.worker_id)
                    .arg(format!("{:.3}", delay.as_secs_f64()))
                    .arg(&group)
                    .arg(&failure.message)
                    .invoke_async(&mut self.inner.conn.clone())
                    .await?;
                match left {
                    Some(left) if left >= 0 => Completion::Accepted(JobState::Scheduled),
                    Some(_) => Completion::Accepted(JobState::Failed),
                    None => Completion::Stale,
                }
            }
            None => {
                let mut call = FAIL.prepare_invoke();
                call.key(QlessKeys::job(&held.jid))
                    .key(QlessKeys::FAILURES)
                    .key(QlessKeys::TRACKED);
                let done: i64 = held
                    .args(&mut call, &self.inner.worker_id)
                    .arg(&group)
                    .arg(&failure.message)
                    .invoke_async(&mut self.inner.conn.clone())
                    .await?;
                match (done, failure.class) {
                    (1, ErrorClass::Cancelled) => Completion::Accepted(JobState::Cancelled),
                    (1, _) => Completion::Accepted(JobState::Failed),
                    _ => Completion::Stale,
                }
            }
        };
        self.inner.forget(&lease.token);
        Ok(outcome)
    }

    fn worker_id(&self) -> &str {
        &self.inner.worker_id
    }

    async fn release(&self, lease: &Lease) -> Result<Completion, SourceError> {
        let held = self.holding(lease)?;
        let mut call = RELEASE.prepare_invoke();
        call.key(QlessKeys::job(&held.jid))
            .key(held.keys.queue("work"))
            .key(held.keys.queue("locks"))
            .key(held.keys.worker_jobs());
        let done: i64 = held
            .args(&mut call, &self.inner.worker_id)
            .invoke_async(&mut self.inner.conn.clone())
            .await?;
        self.inner.forget(&lease.token);
        Ok(match done {
            1 => Completion::Accepted(JobState::Queued),
            _ => Completion::Stale,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heartbeat_settings_become_lease_ttls_within_bounds() {
        assert_eq!(lock_ttl("60"), Duration::from_secs(60));
        assert_eq!(lock_ttl("2.5"), Duration::from_millis(2500));
        assert_eq!(lock_ttl("0"), Duration::from_secs(1));
        assert_eq!(lock_ttl("-3"), Duration::from_secs(1));
        assert_eq!(lock_ttl("1e9"), Duration::from_secs(86_400));
        assert_eq!(lock_ttl("soon"), Duration::from_secs(60));
        assert_eq!(lock_ttl("NaN"), Duration::from_secs(60));
        assert_eq!(lock_ttl("inf"), Duration::from_secs(60));
    }

    #[test]
    fn json_strings_are_passed_as_their_text() {
        assert_eq!(
            input_of(br#""h\u00e9 \"x\"""#.to_vec()),
            "hé \"x\"".as_bytes()
        );
        assert_eq!(input_of(br#"{"a": 1}"#.to_vec()), br#"{"a": 1}"#);
        assert_eq!(input_of(b"5".to_vec()), b"5");
        assert_eq!(input_of(br#""unterminated"#.to_vec()), br#""unterminated"#);
    }

    #[test]
    fn keys_are_qless_own() {
        let keys = QlessKeys::new("thumbs", "host-1");
        assert_eq!(keys.queue("work"), "ql:q:thumbs-work");
        assert_eq!(keys.worker_jobs(), "ql:w:host-1:jobs");
        assert_eq!(keys.worker_channel(), "ql:w:host-1");
        assert_eq!(QlessKeys::job("ab12"), "ql:j:ab12");
    }
}
