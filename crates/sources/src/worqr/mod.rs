//! worqr (droplit's; `../shared/seeds/worqr.txt` in the repository's lineage, the npm
//! package no longer published): the tasks of one queue, run by a wasmgear worker as jobs of
//! one function.
//!
//! As worqr's workers do: the worker registers (`P:workers`, `P:expiringWorkers`,
//! `P:workingQueues:W`) and keeps its liveness key `P:workerTimers:W` alive (`SET ... EX 3
//! XX` every second); it listens on `P_Q_work` (new tasks) and `P_Q_cancel` (a task to
//! stop); a dequeue moves the task at the tail of `P:queues:Q` to a process list
//! `P:processes:Q_ID` (`RPOPLPUSH`) and adds the process to `P:workingProcesses:Q`;
//! finishing deletes the process and the task's unique marker `P:uniqueTasks:MD5` and
//! publishes `{workerId, task}` on `P_Q_done`; a process handed back goes to its queue again.
//!
//! Added: the outcome travels in the `_done` message (`status` success, failed or cancelled,
//! and `output` or `error`; worqr keeps no history). A failure that may pass is retried:
//! after the backoff its task goes back to the queue (worqr's `stopProcess`), up to the
//! attempt limit, counted per task text in `P:wasmgear:attempts`. Each dequeue is one script
//! (worqr's is two steps), and `P:wasmgear:owners` names the wasmgear worker holding each
//! process, so that a dead wasmgear worker's clean-up puts back its processes only.
//!
//! worqr's hazard, which no worker can remove: `P:workingProcesses:Q` is one set per queue,
//! and worqr's `failWorker` and `stopWork` put back *every* process in it, a live worker's
//! too. When a worqr peer fails some dead worker of the queue, a wasmgear worker's running
//! jobs of that queue lose their process: the next heartbeat sees it, the job is stopped and
//! its task, back in the queue, runs again. wasmgear's own clean-up and exit do not do this.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::Value;
use tokio::sync::{Notify, broadcast};
use tokio_util::task::AbortOnDropHandle;
use wasmgear_client::connection::Connection;
use wasmgear_client::subscriber::{Delivery, Subscriber, Subscription, Topic};
use wasmgear_proto::{
    AttemptNotes, CancelRequest, Completion, ErrorClass, FunctionName, JobFailure, JobId, JobInfo,
    JobState, Lease, LeaseRequest, LeaseStatus, Progress, WorkerAd,
};
use wasmgear_source::{JobSource, SourceError};

use crate::redis_source::lua_scripts;
use wasmgear_proto::sync::Locked;

mod keys;

use crate::{ConnectError, RetryBackoff, settled};
pub use keys::{DEFAULT_PREFIX, WorqrKeys, split_queue};

lua_scripts!("worqr":
    BEAT = "beat.lua",
    DEQUEUE = "dequeue.lua",
    RENEW = "renew.lua",
    FINISH = "finish.lua",
    REQUEUE = "requeue.lua",
    RETRY = "retry.lua",
    DUE = "due.lua",
    BURY = "bury.lua",
    LEAVE = "leave.lua",
);

/// How long a worker's liveness key lives without renewal (worqr's `workerTimeout`).
pub const LIVENESS_SECS: u64 = 3;
/// How often the liveness key is renewed (worqr's `workerHeartbeatInterval`).
pub const BEAT_EVERY: Duration = Duration::from_secs(1);
/// Retries requeued per housekeeping round.
const DUE_BATCH: usize = 100;
/// A dead worker's processes looked at per housekeeping round.
const BURY_BATCH: usize = 500;

/// A process this worker holds: running, or waiting for its retry.
struct Held {
    job: JobId,
    task: Vec<u8>,
    waiting_retry: bool,
    /// A producer's cancelTasks named this task; the job's next heartbeat says so, in case
    /// the broadcast came before the worker was running the job.
    cancelled: bool,
}

/// What the source and its background tasks share.
struct Inner {
    conn: Connection,
    keys: WorqrKeys,
    function: FunctionName,
    worker_id: String,
    /// Names this worker's processes (`Q_SESSION-N`), as worqr's carry a uuid.
    session: String,
    leases: AtomicU64,
    registered: AtomicBool,
    held: Mutex<HashMap<String, Held>>,
    /// Processes whose dequeue script is under way, with the tasks cancelled meanwhile (a
    /// cancel may arrive before the dequeue's reply). Locked after `held`, never before.
    dequeuing: Mutex<HashMap<String, Vec<Vec<u8>>>>,
    work: Notify,
    cancels: broadcast::Sender<CancelRequest>,
}

/// A worker's connection to one worqr queue, whose tasks are jobs of one function.
pub struct Worqr {
    inner: Arc<Inner>,
    backoff: RetryBackoff,
    beat: Mutex<Option<AbortOnDropHandle<()>>>,
    _listener: AbortOnDropHandle<()>,
}

/// The failure of a task a producer's cancelTasks stopped.
fn cancelled_by_producer() -> JobFailure {
    JobFailure::new(ErrorClass::Cancelled, "cancelled by worqr's cancelTasks")
}

/// How a process ends.
enum Ending<'a> {
    Output(&'a [u8]),
    Failed(&'a JobFailure),
}

impl Inner {
    fn held(&self) -> std::sync::MutexGuard<'_, HashMap<String, Held>> {
        self.held.locked()
    }

    fn dequeuing(&self) -> std::sync::MutexGuard<'_, HashMap<String, Vec<Vec<u8>>>> {
        self.dequeuing.locked()
    }

    /// worqr's keepWorkerAlive; registers afresh when the liveness key is gone.
    async fn beat(&self) -> Result<(), SourceError> {
        let renewed: i64 = BEAT
            .key(self.keys.workers())
            .key(self.keys.expiring_workers())
            .key(self.keys.worker_timer(&self.worker_id))
            .key(self.keys.working_queues(&self.worker_id))
            .key(self.keys.wasmgear_workers())
            .arg(&self.worker_id)
            .arg(LIVENESS_SECS)
            .arg(self.keys.queue_name())
            .invoke_async(&mut self.conn.clone())
            .await?;
        if renewed == 0 {
            match self.registered.swap(true, Ordering::Relaxed) {
                true => tracing::warn!(
                    queue = self.keys.queue_name(),
                    worker = self.worker_id,
                    "a worqr peer failed this worker (its liveness key ran out), so its \
                     tasks went back to the queue; registered again"
                ),
                false => tracing::info!(
                    queue = self.keys.queue_name(),
                    worker = self.worker_id,
                    "registered as a worqr worker"
                ),
            }
        }
        Ok(())
    }

    async fn dequeue(
        &self,
        request: &LeaseRequest,
        ttl: Duration,
    ) -> Result<Option<Lease>, SourceError> {
        let sent = tokio::time::Instant::now().into_std();
        let n = self.leases.fetch_add(1, Ordering::Relaxed) + 1;
        let pid = format!("{}_{}-{n}", self.keys.queue_name(), self.session);
        self.dequeuing().insert(pid.clone(), Vec::new());
        let taken: Result<Value, _> = DEQUEUE
            .key(self.keys.queue())
            .key(self.keys.process(&pid))
            .key(self.keys.working_processes())
            .key(self.keys.working_queues(&self.worker_id))
            .key(self.keys.owners())
            .key(self.keys.attempts())
            .arg(&pid)
            .arg(&self.worker_id)
            .arg(self.keys.queue_name())
            .invoke_async(&mut self.conn.clone())
            .await;
        let taken = match taken {
            Ok(Value::Nil) | Ok(Value::Int(_)) | Err(_) => {
                self.dequeuing().remove(&pid);
                taken?
            }
            Ok(taken) => taken,
        };
        let (task, attempt): (Vec<u8>, u32) = match taken {
            Value::Nil => return Ok(None),
            Value::Int(_) => {
                // Failed by a peer since the last beat: register again before taking work.
                self.beat().await?;
                return Ok(None);
            }
            other => redis::from_redis_value(other)?,
        };
        let job = JobId {
            function: request.function.clone(),
            seq: n,
        };
        tracing::info!(queue = self.keys.queue_name(), process = pid, %job, "dequeued a worqr task");
        let cancelled = {
            let mut held = self.held();
            let meanwhile = self.dequeuing().remove(&pid).unwrap_or_default();
            let cancelled = meanwhile.contains(&task);
            held.insert(
                pid.clone(),
                Held {
                    job: job.clone(),
                    task: task.clone(),
                    waiting_retry: false,
                    cancelled,
                },
            );
            cancelled
        };
        if cancelled {
            // Not handed to the worker: it ends here, as a cancel of a running task does.
            tracing::info!(
                process = pid,
                "worqr's cancelTasks named this task as it was dequeued"
            );
            self.finish(&pid, &task, Ending::Failed(&cancelled_by_producer()))
                .await?;
            return Ok(None);
        }
        Ok(Some(Lease {
            info: JobInfo {
                id: job,
                attempt,
                max_attempts: request.default_max_attempts,
                enqueued_at_ms: wasmgear_proto::units::now_ms(),
                timeout_ms: request.default_timeout_ms,
                trace: None,
            },
            input: task,
            token: pid,
            expires: sent + ttl,
            ttl,
        }))
    }

    /// Whether this worker still holds process `pid`.
    async fn renew(&self, pid: &str) -> Result<bool, SourceError> {
        let held: i64 = RENEW
            .key(self.keys.process(pid))
            .key(self.keys.working_processes())
            .key(self.keys.owners())
            .arg(pid)
            .arg(&self.worker_id)
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok(held == 1)
    }

    /// The task of process `pid` held here (a lease passed back to the source may come
    /// without its input: the composite source drops it).
    fn task_of(&self, pid: &str) -> Vec<u8> {
        self.held()
            .get(pid)
            .map(|held| held.task.clone())
            .unwrap_or_default()
    }

    /// worqr's finishProcess, with the outcome in the `_done` message.
    async fn finish(
        &self,
        pid: &str,
        task: &[u8],
        ending: Ending<'_>,
    ) -> Result<bool, SourceError> {
        let mut message = serde_json::json!({
            "workerId": self.worker_id,
            "task": String::from_utf8_lossy(task),
        });
        match ending {
            Ending::Output(output) => {
                message["status"] = "success".into();
                message["output"] = String::from_utf8_lossy(output).into();
            }
            Ending::Failed(failure) => {
                message["status"] = match failure.class {
                    ErrorClass::Cancelled => "cancelled",
                    _ => "failed",
                }
                .into();
                message["error"] = format!("[{}] {}", failure.class, failure.message).into();
            }
        }
        let done: i64 = FINISH
            .key(self.keys.process(pid))
            .key(self.keys.working_processes())
            .key(self.keys.owners())
            .key(self.keys.attempts())
            .key(self.keys.unique_task(task))
            .key(self.keys.retries())
            .arg(pid)
            .arg(&self.worker_id)
            .arg(self.keys.channel("done"))
            .arg(message.to_string())
            .invoke_async(&mut self.conn.clone())
            .await?;
        self.held().remove(pid);
        Ok(done == 1)
    }

    /// worqr's stopProcess: the task goes back to the queue, at the `front` or `back`.
    async fn requeue(&self, pid: &str, end: &str) -> Result<bool, SourceError> {
        let done: i64 = REQUEUE
            .key(self.keys.process(pid))
            .key(self.keys.working_processes())
            .key(self.keys.owners())
            .key(self.keys.queue())
            .key(self.keys.retries())
            .key(self.keys.attempts())
            .arg(pid)
            .arg(&self.worker_id)
            .arg(end)
            .arg(self.keys.channel("work"))
            .invoke_async(&mut self.conn.clone())
            .await?;
        self.held().remove(pid);
        Ok(done == 1)
    }

    /// A producer's cancelTasks: running jobs of the task are cancelled, retries of it
    /// waiting here are finished as cancelled.
    async fn cancel_task(&self, task: &[u8]) {
        let mut waiting = Vec::new();
        {
            let mut held = self.held();
            for (pid, held) in held.iter_mut().filter(|(_, h)| h.task == task) {
                match held.waiting_retry {
                    true => waiting.push(pid.clone()),
                    false => {
                        held.cancelled = true;
                        let _ = self.cancels.send(CancelRequest::any(held.job.clone()));
                    }
                }
            }
            for cancelled in self.dequeuing().values_mut() {
                cancelled.push(task.to_vec());
            }
        }
        let failure = cancelled_by_producer();
        for pid in waiting {
            if let Err(error) = self.finish(&pid, task, Ending::Failed(&failure)).await {
                tracing::warn!(%error, process = pid, "could not finish a cancelled worqr task");
            }
        }
    }

    /// This worker's retries that are due go back to the queue.
    async fn requeue_due(&self) -> Result<(), SourceError> {
        let due: Vec<String> = DUE
            .key(self.keys.retries())
            .arg(DUE_BATCH)
            .invoke_async(&mut self.conn.clone())
            .await?;
        for pid in due {
            let ours = self.held().contains_key(&pid);
            if ours && self.requeue(&pid, "back").await? {
                tracing::info!(
                    process = pid,
                    "a worqr task goes back to its queue for a retry"
                );
            }
        }
        Ok(())
    }

    /// worqr's cleanupWorkers for this queue: each dead worker's processes go back (see
    /// `bury.lua` for which).
    async fn bury_dead(&self) -> Result<(), SourceError> {
        let mut conn = self.conn.clone();
        let workers: Vec<String> = redis::cmd("SMEMBERS")
            .arg(self.keys.expiring_workers())
            .query_async(&mut conn)
            .await?;
        let others: Vec<&String> = workers.iter().filter(|w| **w != self.worker_id).collect();
        if others.is_empty() {
            return Ok(());
        }
        let mut pipe = redis::pipe();
        for worker in &others {
            pipe.cmd("EXISTS").arg(self.keys.worker_timer(worker));
            pipe.cmd("SISMEMBER")
                .arg(self.keys.working_queues(worker))
                .arg(self.keys.queue_name());
        }
        let answers: Vec<i64> = pipe.query_async(&mut conn).await?;
        for (worker, answer) in others.iter().zip(answers.chunks(2)) {
            if answer != [0, 1] {
                continue;
            }
            let mut processes: Vec<String> = redis::cmd("SMEMBERS")
                .arg(self.keys.working_processes())
                .query_async(&mut conn)
                .await?;
            processes.truncate(BURY_BATCH);
            let mut call = BURY.prepare_invoke();
            call.key(self.keys.workers())
                .key(self.keys.expiring_workers())
                .key(self.keys.permanent_workers())
                .key(self.keys.worker_timer(worker))
                .key(self.keys.working_queues(worker))
                .key(self.keys.working_processes())
                .key(self.keys.queue())
                .key(self.keys.owners())
                .key(self.keys.wasmgear_workers())
                .key(self.keys.retries())
                .arg(worker.as_str())
                .arg(self.keys.queue_name())
                .arg(self.keys.channel("work"));
            for pid in &processes {
                call.key(self.keys.process(pid)).arg(pid);
            }
            let moved: i64 = call.invoke_async(&mut conn).await?;
            if moved >= 0 {
                tracing::info!(
                    queue = self.keys.queue_name(),
                    worker = worker.as_str(),
                    tasks = moved,
                    "a dead worqr worker's tasks went back to the queue"
                );
            }
        }
        Ok(())
    }

    /// A clean exit: retries waiting here go back to the queue, and the worker stops working
    /// on the queue (and leaves the worker lists when it works on no other).
    async fn leave(&self) -> Result<(), SourceError> {
        let waiting: Vec<String> = self
            .held()
            .iter()
            .filter(|(_, h)| h.waiting_retry)
            .map(|(pid, _)| pid.clone())
            .collect();
        for pid in waiting {
            self.requeue(&pid, "back").await?;
        }
        let _: i64 = LEAVE
            .key(self.keys.workers())
            .key(self.keys.expiring_workers())
            .key(self.keys.worker_timer(&self.worker_id))
            .key(self.keys.working_queues(&self.worker_id))
            .key(self.keys.wasmgear_workers())
            .arg(&self.worker_id)
            .arg(self.keys.queue_name())
            .invoke_async(&mut self.conn.clone())
            .await?;
        tracing::info!(queue = self.keys.queue_name(), "left worqr's workers");
        Ok(())
    }
}

/// Renews the liveness key every second while the worker serves the queue.
async fn keep_alive(inner: Arc<Inner>) {
    let mut every = tokio::time::interval(BEAT_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        if let Err(error) = inner.beat().await {
            tracing::warn!(%error, queue = inner.keys.queue_name(), "could not renew this worker's worqr liveness key");
        }
    }
}

/// Wakes the worker on `_work` (and when the subscription is back after a drop), and
/// cancels on `_cancel`.
async fn listen(mut subscription: Subscription, inner: Arc<Inner>) {
    let cancel = inner.keys.channel("cancel");
    while let Some(delivery) = subscription.next().await {
        match delivery {
            Delivery::Message(message) if message.channel == cancel => {
                inner.cancel_task(&message.payload).await;
            }
            Delivery::Message(_) | Delivery::Resubscribed => inner.work.notify_one(),
            Delivery::Lost => {}
        }
    }
}

impl Worqr {
    /// Connects to the Redis at `url` to serve worqr queue `queue` under `prefix` as jobs
    /// of `function`, as worqr worker `worker_id`.
    pub async fn connect(
        url: &str,
        (prefix, queue): (&str, &str),
        function: FunctionName,
        worker_id: impl Into<String>,
        backoff: RetryBackoff,
    ) -> Result<Self, ConnectError> {
        let (client, conn) = crate::redis_source::connect_standalone(url, "worqr").await?;
        let inner = Arc::new(Inner {
            conn,
            keys: WorqrKeys::new(prefix, queue),
            function,
            worker_id: worker_id.into(),
            session: format!("wasmgear-{}", wasmgear_proto::sync::random_hex(8)),
            leases: AtomicU64::new(0),
            registered: AtomicBool::new(false),
            held: Mutex::new(HashMap::new()),
            dequeuing: Mutex::new(HashMap::new()),
            work: Notify::new(),
            cancels: broadcast::channel(crate::multi::CANCEL_BUFFER).0,
        });
        let subscription = Subscriber::new(client).open();
        for kind in ["work", "cancel"] {
            if let Err(error) = subscription
                .subscribe(Topic::Channel(inner.keys.channel(kind)))
                .await
            {
                tracing::warn!(%error, "not subscribed to worqr's channels yet; polling meanwhile");
            }
        }
        Ok(Worqr {
            beat: Mutex::new(None),
            _listener: AbortOnDropHandle::new(tokio::spawn(listen(subscription, inner.clone()))),
            inner,
            backoff,
        })
    }

    /// The function its tasks are jobs of.
    pub fn function(&self) -> &FunctionName {
        &self.inner.function
    }

    /// The keys it uses.
    pub fn keys(&self) -> &WorqrKeys {
        &self.inner.keys
    }
}

impl JobSource for Worqr {
    async fn lease(
        &self,
        requests: &[LeaseRequest],
        max: usize,
        ttl: Duration,
    ) -> Result<Vec<Lease>, SourceError> {
        let Some(request) = requests.iter().find(|r| r.function == self.inner.function) else {
            return Ok(Vec::new());
        };
        let mut leases = Vec::new();
        while leases.len() < request.max.min(max) {
            match self.inner.dequeue(request, ttl).await? {
                Some(lease) => leases.push(lease),
                None => break,
            }
        }
        Ok(leases)
    }

    async fn wait_for_work(&self, timeout: Duration) {
        let _ = tokio::time::timeout(timeout, self.inner.work.notified()).await;
    }

    async fn heartbeat(&self, lease: &Lease, _ttl: Duration) -> Result<LeaseStatus, SourceError> {
        if !self.inner.renew(&lease.token).await? {
            return Ok(LeaseStatus::Lost);
        }
        let cancelled = self
            .inner
            .held()
            .get(&lease.token)
            .is_some_and(|held| held.cancelled);
        Ok(match cancelled {
            true => LeaseStatus::CancelRequested,
            false => LeaseStatus::Held,
        })
    }

    fn cancel_requests(&self) -> broadcast::Receiver<CancelRequest> {
        self.inner.cancels.subscribe()
    }

    async fn progress(&self, lease: &Lease, _progress: &Progress) -> Result<bool, SourceError> {
        // worqr has no place for progress; whether the process is still held is what counts.
        self.inner.renew(&lease.token).await
    }

    async fn complete(
        &self,
        lease: &Lease,
        output: &[u8],
        _notes: &AttemptNotes,
    ) -> Result<Completion, SourceError> {
        let done = self
            .inner
            .finish(
                &lease.token,
                &self.inner.task_of(&lease.token),
                Ending::Output(output),
            )
            .await?;
        Ok(settled(done, JobState::Succeeded))
    }

    async fn fail(
        &self,
        lease: &Lease,
        failure: &JobFailure,
        _notes: &AttemptNotes,
    ) -> Result<Completion, SourceError> {
        let pid = &lease.token;
        if let Some(delay) = self.backoff.retry_after(lease, failure) {
            let inner = &self.inner;
            let waiting: i64 = RETRY
                .key(inner.keys.process(pid))
                .key(inner.keys.owners())
                .key(inner.keys.retries())
                .arg(pid)
                .arg(&inner.worker_id)
                .arg(delay.as_millis() as u64)
                .invoke_async(&mut inner.conn.clone())
                .await?;
            let mut held = inner.held();
            return Ok(match (waiting, held.get_mut(pid)) {
                (1, Some(entry)) => {
                    entry.waiting_retry = true;
                    Completion::Accepted(JobState::Scheduled)
                }
                _ => {
                    held.remove(pid);
                    Completion::Stale
                }
            });
        }
        let done = self
            .inner
            .finish(pid, &self.inner.task_of(pid), Ending::Failed(failure))
            .await?;
        Ok(match done {
            true => Completion::Accepted(match failure.class {
                ErrorClass::Cancelled => JobState::Cancelled,
                _ => JobState::Failed,
            }),
            false => Completion::Stale,
        })
    }

    fn worker_id(&self) -> &str {
        &self.inner.worker_id
    }

    /// Registers as a worqr worker on the queue, and keeps the liveness key alive.
    async fn serve(&self, _functions: &[FunctionName]) -> Result<(), SourceError> {
        self.inner.beat().await?;
        let mut beat = self.beat.locked();
        if beat.is_none() {
            *beat = Some(AbortOnDropHandle::new(tokio::spawn(keep_alive(
                self.inner.clone(),
            ))));
        }
        Ok(())
    }

    /// A zero `ttl` (the worker is stopping) takes the worker out of worqr's worker lists.
    async fn advertise(
        &self,
        _ad: &WorkerAd,
        _functions: &[FunctionName],
        ttl: Duration,
    ) -> Result<(), SourceError> {
        if !ttl.is_zero() {
            return Ok(());
        }
        // No beat may register the worker again once it has left.
        drop(self.beat.locked().take());
        self.inner.leave().await
    }

    async fn leave(&self, _functions: &[FunctionName]) -> Result<(), SourceError> {
        // Without its plugin the worker stays registered: the tasks wait in the queue.
        Ok(())
    }

    async fn release(&self, lease: &Lease) -> Result<Completion, SourceError> {
        Ok(settled(
            self.inner.requeue(&lease.token, "front").await?,
            JobState::Queued,
        ))
    }

    /// Due retries go back to the queue, and dead workers' tasks too.
    async fn maintain(&self, _functions: &[FunctionName]) -> Result<(), SourceError> {
        self.inner.requeue_due().await?;
        self.inner.bury_dead().await
    }
}
