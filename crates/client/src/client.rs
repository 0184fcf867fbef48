//! The producer side of the queue: enqueue jobs, look them up, wait for them.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::connection::{self, Connection};
use super::options::{
    DEFAULT_FAILED_RETENTION, DEFAULT_RETENTION, EnqueueOptions, MAX_INPUT_BYTES, system_time_ms,
};
use super::replication::{self, MinReplicas};
use super::subscriber::Subscriber;
use super::watch::{Seen, Watches};
use super::{QueueError, Result, links, propagation, scripts};
use wasmgear_proto::crypto::KeyRing;
use wasmgear_proto::keys::{self, FunctionKeys, WorkerListKeys};
use wasmgear_proto::model::{JobRecord, JobState, JobStatus};
use wasmgear_proto::{Event, LiveWorker};
use wasmgear_proto::{FunctionName, JobId, OnFailure, Progress};

use wasmgear_proto::sync::Locked;
/// The most plugin problems [`Client::service`] reports.
const MAX_PLUGIN_PROBLEMS: usize = 5;

/// Who serves a function (see [`Client::service`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Service {
    /// Live workers serving the function.
    pub live_workers: u64,
    /// When none does: what live workers say about plugins they could not load.
    pub plugin_problems: Vec<String>,
}

/// How often `wait` re-reads a job's record while it cannot hear events (Redis is
/// reconnecting).
pub const WAIT_POLL: Duration = Duration::from_millis(wasmgear_proto::limits::WAIT_POLL_MS);
/// How often `wait` re-reads a job's record while it hears its events (a safety net only).
pub const WAIT_RECHECK: Duration = Duration::from_millis(wasmgear_proto::limits::WAIT_RECHECK_MS);

/// A job handed to `enqueue`: its id, and whether it is new.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Enqueued {
    /// The job's id.
    pub id: JobId,
    /// `false` when the uniq key returned an unfinished job enqueued before.
    pub created: bool,
}

/// Where [`Client::write_jobs`] puts a job of a flow or a batch.
#[derive(Debug, Clone, Default)]
pub(crate) struct Placement {
    /// The number `reserve` reserved for it.
    pub number: Option<u64>,
    /// The flow's id.
    pub flow: Option<u64>,
    /// The batch's id.
    pub batch: Option<String>,
    /// Jobs of other functions, written already, that wait on it (a flow's).
    pub dependents: Vec<JobId>,
}

/// What `cancel` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelOutcome {
    /// The job was waiting and is now cancelled.
    Cancelled,
    /// The job is running; its worker has been asked to stop it.
    Stopping,
    /// The job had already ended in this state; nothing changed.
    AlreadyEnded(JobState),
}

/// A connection to the queue for producers and operators.
#[derive(Clone)]
pub struct Client {
    pub(crate) conn: Connection,
    max_input_bytes: usize,
    registered: Arc<Mutex<HashSet<FunctionName>>>,
    pub(crate) subscriber: Subscriber,
    watches: Arc<Watches>,
    answered: scripts::Answered,
    min_replicas: MinReplicas,
    /// The keys that seal the inputs this client writes and open what it reads.
    pub(crate) keys: Option<Arc<KeyRing>>,
    /// Seal every input, not only those of functions that store only encrypted input.
    pub(crate) encrypt_all: bool,
    /// The functions found to store only encrypted input.
    sealed_functions: Arc<Mutex<HashSet<FunctionName>>>,
}

impl Client {
    /// Connects to the Redis at `url` (`redis://HOST:PORT[/DB]`).
    pub async fn connect(url: &str) -> Result<Self> {
        let (redis, conn) = connection::connect(url).await?;
        let subscriber = Subscriber::new(redis);
        Ok(Client {
            watches: Arc::new(Watches::new(&subscriber)),
            subscriber,
            conn,
            max_input_bytes: MAX_INPUT_BYTES,
            registered: Arc::default(),
            answered: scripts::Answered::default(),
            min_replicas: MinReplicas::default(),
            keys: None,
            encrypt_all: false,
            sealed_functions: Arc::default(),
        })
    }

    /// Seals the inputs this client writes with `keys` (the first key) for the functions
    /// that store only encrypted input (`config F --encrypt`), or for every function if
    /// `all`; opens what it reads that was sealed with any of them. See
    /// [`wasmgear_proto::crypto`].
    pub fn with_keys(mut self, keys: Arc<KeyRing>, all: bool) -> Self {
        self.keys = Some(keys);
        self.encrypt_all = all;
        self
    }

    /// The keys this client seals and opens job data with, if any.
    pub fn keys(&self) -> Option<&KeyRing> {
        self.keys.as_deref()
    }

    /// Has every write of jobs (enqueue, bulk, flows, batches) confirmed by `min` replicas
    /// before it returns (see [`crate::replication`]); a function's own `min_replicas`
    /// setting can ask for more.
    pub fn with_min_replicas(mut self, min: MinReplicas) -> Self {
        self.min_replicas = min;
        self
    }

    /// How many replicas confirm this client's writes of jobs.
    pub fn min_replicas(&self) -> MinReplicas {
        self.min_replicas
    }

    /// Sets the largest input this client accepts (default [`MAX_INPUT_BYTES`]).
    pub fn with_max_input_bytes(mut self, limit: usize) -> Self {
        self.max_input_bytes = limit;
        self
    }

    /// The largest input this client sends.
    pub(crate) fn max_input_bytes(&self) -> usize {
        self.max_input_bytes
    }

    /// Enqueues one job for `function` and returns its id.
    pub async fn enqueue(
        &self,
        function: &FunctionName,
        input: &[u8],
        options: &EnqueueOptions,
    ) -> Result<JobId> {
        let ids = self
            .enqueue_many(function, &[(input, options.clone())])
            .await?;
        Ok(ids.into_iter().next().expect("one job in, one id out"))
    }

    /// Enqueues many jobs for one function in one round trip, atomically: either all are
    /// enqueued or, when one is invalid, none. Returns their ids in order.
    pub async fn enqueue_many(
        &self,
        function: &FunctionName,
        jobs: &[(&[u8], EnqueueOptions)],
    ) -> Result<Vec<JobId>> {
        Ok(self
            .submit(function, jobs)
            .await?
            .into_iter()
            .map(|job| job.id)
            .collect())
    }

    /// Like [`Client::enqueue_many`], and says for each job whether it is new or an
    /// unfinished job that held the same uniq key.
    pub async fn submit(
        &self,
        function: &FunctionName,
        jobs: &[(&[u8], EnqueueOptions)],
    ) -> Result<Vec<Enqueued>> {
        let (enqueued, links) = self.write_jobs(function, jobs, &[]).await?;
        links::link_many(&self.conn, self.keys.as_deref(), links).await?;
        Ok(enqueued)
    }

    /// Checks and writes jobs of one function in one atomic call, each placed as
    /// `placements` says (a flow's: its reserved number and the flow's id; none for the
    /// jobs past its end). Returns them, and the links to dependencies in other functions
    /// the caller must make (`(dependent, dependency)`: [`links::link`]).
    pub(crate) async fn write_jobs(
        &self,
        function: &FunctionName,
        jobs: &[(&[u8], EnqueueOptions)],
        placements: &[Placement],
    ) -> Result<(Vec<Enqueued>, Vec<(JobId, JobId)>)> {
        for (i, (input, options)) in jobs.iter().enumerate() {
            options.validate().map_err(|e| match e {
                QueueError::BadOption(what) if jobs.len() > 1 => {
                    QueueError::BadOption(format!("job {} of the batch: {what}", i + 1))
                }
                e => e,
            })?;
            if input.len() > self.max_input_bytes {
                return Err(QueueError::BadOption(format!(
                    "input of {} bytes is larger than the limit of {} bytes",
                    input.len(),
                    self.max_input_bytes
                )));
            }
        }
        if jobs.is_empty() {
            return Ok((Vec::new(), Vec::new()));
        }
        let span = propagation::producer_span(function, jobs.len());
        let trace = propagation::context_of(&span);
        let seal = self.keys.is_some()
            && (self.encrypt_all || self.sealed_functions.locked().contains(function));
        let sent = tracing::Instrument::instrument(
            self.send_sealed_or_plain(function, jobs, placements, trace.as_ref(), seal),
            span.clone(),
        )
        .await;
        match sent {
            // The function stores only encrypted input: sealed, they go again (the refusal
            // wrote nothing).
            Err(QueueError::Encryption(_)) if !seal && self.keys.is_some() => {
                self.sealed_functions.locked().insert(function.clone());
                tracing::Instrument::instrument(
                    self.send_sealed_or_plain(function, jobs, placements, trace.as_ref(), true),
                    span,
                )
                .await
            }
            sent => sent,
        }
    }

    /// Writes checked jobs (see [`Client::write_jobs`]), those that name no trace context
    /// carrying `trace`.
    pub(crate) async fn send_jobs(
        &self,
        function: &FunctionName,
        jobs: &[(&[u8], EnqueueOptions)],
        placements: &[Placement],
        trace: Option<&wasmgear_proto::TraceContext>,
    ) -> Result<(Vec<Enqueued>, Vec<(JobId, JobId)>)> {
        // Dependencies in this function are checked by the script; the others here (but a
        // flow's, whose jobs are written in any order, and those whose failure is
        // tolerated).
        for (i, (_, options)) in jobs.iter().enumerate() {
            if placements.get(i).is_some_and(|p| p.flow.is_some()) {
                continue;
            }
            for dependency in options
                .after
                .iter()
                .filter(|d| d.function != *function && !options.on_failure.contains_key(d))
            {
                self.check_dependency(dependency).await?;
            }
        }
        let mut call = scripts::on_function(&scripts::ENQUEUE, function);
        // The call id makes the call safe to send again when its reply is lost.
        let call_id = wasmgear_proto::sync::random_hex(12);
        let acked = self.answered.take(function);
        call.arg(1 + acked.len()).option("call", &call_id);
        for id in &acked {
            call.option("acked", id);
        }
        call.arg(jobs.len());
        for (i, (input, options)) in jobs.iter().enumerate() {
            // Only what differs from the defaults goes: a plain job is "0" and its input.
            let ms = |d: Duration| d.as_millis() as u64;
            let mut named: Vec<(&str, String)> = Vec::new();
            if options.priority.value() != 0 {
                named.push(("priority", options.priority.value().to_string()));
            }
            if let Some(attempts) = options.max_attempts {
                named.push(("attempts", attempts.to_string()));
            }
            if let Some(timeout) = options.timeout {
                named.push(("timeout", ms(timeout).max(1).to_string()));
            }
            if options.retention != DEFAULT_RETENTION {
                named.push(("retention", ms(options.retention).to_string()));
            }
            if options.failed_retention != DEFAULT_FAILED_RETENTION {
                named.push(("failed_retention", ms(options.failed_retention).to_string()));
            }
            if !options.delay.is_zero() {
                named.push(("delay", ms(options.delay).to_string()));
            }
            if let Some(at) = options.at {
                named.push(("at", system_time_ms(at).to_string()));
            }
            if let Some(uniq) = &options.uniq {
                named.push(("uniq", uniq.clone()));
            }
            named.extend(options.tags.iter().map(|tag| ("tag", tag.clone())));
            named.extend(options.after.iter().map(|id| ("after", id.to_string())));
            named.extend(options.on_failure.iter().filter_map(|(id, policy)| {
                let name = match policy {
                    OnFailure::Cancel => return None,
                    OnFailure::Ignore => "after_ignore",
                    OnFailure::Continue => "after_continue",
                };
                Some((name, id.to_string()))
            }));
            if let Some(tick) = &options.tick {
                named.push(("schedule", tick.schedule.clone()));
                named.push(("tick", tick.at_ms.to_string()));
            }
            if let Some(parent) = &options.parent {
                named.push(("parent", parent.to_string()));
            }
            if let Some(once) = &options.once {
                named.push(("once", once.clone()));
            }
            if let Some(group) = &options.group {
                named.push(("group", group.clone()));
            }
            if let Some(window) = options.uniq_for {
                named.push(("uniq_for", ms(window).to_string()));
            }
            if let Some(quiet) = options.debounce {
                named.push(("debounce", ms(quiet).to_string()));
            }
            if let Some((n, every)) = options.throttle {
                named.push(("throttle", n.to_string()));
                named.push(("throttle_ms", ms(every).to_string()));
            }
            if let Some(within) = options.expires_in {
                named.push(("expires_in", ms(within).max(1).to_string()));
            }
            if let Some(at) = options.expires_at {
                named.push(("expires_at", system_time_ms(at).to_string()));
            }
            if let Some(trace) = options.trace.as_ref().or(trace) {
                named.push(("trace", trace.traceparent().to_string()));
                named.extend(trace.tracestate().map(|s| ("tracestate", s.to_string())));
            }
            if let Some(placement) = placements.get(i) {
                named.extend(placement.number.map(|n| ("number", n.to_string())));
                named.extend(placement.flow.map(|f| ("flow", f.to_string())));
                named.extend(placement.batch.clone().map(|b| ("batch", b)));
                named.extend(
                    placement
                        .dependents
                        .iter()
                        .map(|d| ("dependent", d.to_string())),
                );
            }
            call.arg(named.len());
            for (name, value) in &named {
                call.option(name, value);
            }
            call.arg(*input);
        }
        // Per job its number; one character per job, 1 if it is new; pairs of a job's
        // position and a dependency in another function to link; the function's
        // min_replicas.
        type Reply = (Vec<u64>, Vec<u8>, Vec<String>, u32);
        let what = || match jobs.len() {
            1 => format!("the enqueue of a job of {function}"),
            n => format!("the enqueue of {n} jobs of {function}"),
        };
        let (numbers, created, links, _) = replication::invoke_confirmed(
            what,
            &self.conn,
            &call,
            self.min_replicas,
            |r: &Reply| r.3,
        )
        .await
        .map_err(|e| {
            // The script refuses a batch (writing nothing) with `BADJOB job I: ...`,
            // or `CONFLICT job I: ...` when it is the queue's state that refuses it.
            let QueueError::Redis(e) = e else { return e };
            match (e.code(), e.detail()) {
                (Some("BADJOB"), Some(detail)) => QueueError::BadOption(detail.to_string()),
                (Some("CONFLICT"), Some(detail)) => QueueError::Conflict(detail.to_string()),
                (Some("ENCRYPT"), Some(detail)) => {
                    QueueError::Encryption(format!("{detail} (WASMGEAR_ENCRYPTION_KEY_FILE)"))
                }
                _ => QueueError::Redis(e),
            }
        })?;
        self.answered.note(function, call_id);
        // Listed for operators once something was written (a refused batch leaves no trace).
        self.register(function).await?;
        let mut enqueued: Vec<Enqueued> = numbers
            .into_iter()
            .enumerate()
            .map(|(i, seq)| Enqueued {
                id: JobId {
                    function: function.clone(),
                    seq,
                },
                created: created.get(i) == Some(&b'1'),
            })
            .collect();
        let mut to_link = Vec::with_capacity(links.len() / 2);
        for pair in links.chunks(2) {
            let [position, dependency] = pair else {
                return Err(QueueError::Redis(redis::RedisError::from((
                    redis::ErrorKind::UnexpectedReturnType,
                    "enqueue answered links that are not pairs",
                ))));
            };
            let job = position
                .parse::<usize>()
                .ok()
                .and_then(|p| enqueued.get_mut(p.wrapping_sub(1)))
                .ok_or_else(|| {
                    QueueError::Redis(redis::RedisError::from((
                        redis::ErrorKind::UnexpectedReturnType,
                        "enqueue answered a link for a job it was not given",
                        position.clone(),
                    )))
                })?;
            to_link.push((job.id.clone(), dependency.parse::<JobId>()?));
        }
        Ok((enqueued, to_link))
    }

    /// Refuses a dependency that does not exist or has already failed.
    async fn check_dependency(&self, dependency: &JobId) -> Result<()> {
        let Some((record, _)) = self.get(dependency).await? else {
            return Err(QueueError::Conflict(format!(
                "dependency {dependency} does not exist (never enqueued, or its retention is over)"
            )));
        };
        if matches!(
            record.state,
            JobState::Failed | JobState::Cancelled | JobState::Expired
        ) {
            return Err(QueueError::Conflict(format!(
                "dependency {dependency} has already {}, so the job could never run",
                record.state
            )));
        }
        Ok(())
    }

    /// Job `id`'s record and output (`get`), or `None` when there is no such job.
    async fn get(&self, id: &JobId) -> Result<Option<(JobRecord, Option<Vec<u8>>)>> {
        self.read_job(&scripts::GET, id).await
    }

    /// Job `id`'s record and output by `get` or `watch` (which also marks the job as waited
    /// on, so its finish event carries them), or `None` when there is no such job.
    async fn read_job(
        &self,
        script: &'static scripts::Function,
        id: &JobId,
    ) -> Result<Option<(JobRecord, Option<Vec<u8>>)>> {
        let mut call = scripts::on_function(script, &id.function);
        call.arg(id.seq);
        let reply: Option<(String, Option<Vec<u8>>)> =
            call.invoke_async(&mut self.conn.clone()).await?;
        let Some((raw, output)) = reply else {
            return Ok(None);
        };
        let record = serde_json::from_str(&raw).map_err(|e| QueueError::Corrupt {
            id: id.clone(),
            reason: e.to_string(),
        })?;
        Ok(Some((record, output)))
    }

    /// Adds `function` to the directory of functions (once per client).
    pub(crate) async fn register(&self, function: &FunctionName) -> Result<()> {
        if self.registered.locked().contains(function) {
            return Ok(());
        }
        let _: i64 = redis::cmd("SADD")
            .arg(keys::functions())
            .arg(function.as_str())
            .query_async(&mut self.conn.clone())
            .await?;
        self.registered.locked().insert(function.clone());
        Ok(())
    }

    /// Enqueues jobs of any functions: one atomic call per function, the functions in
    /// parallel. Returns the ids in the order given. Every job is checked before any is
    /// written; an error while writing can leave the batches of other functions written.
    pub async fn enqueue_batch(
        &self,
        jobs: &[(FunctionName, &[u8], EnqueueOptions)],
    ) -> Result<Vec<JobId>> {
        let mut groups: Vec<(&FunctionName, Vec<usize>)> = Vec::new();
        for (i, (function, input, options)) in jobs.iter().enumerate() {
            options
                .validate()
                .map_err(|e| QueueError::BadOption(format!("job {}: {e}", i + 1)))?;
            if input.len() > self.max_input_bytes {
                return Err(QueueError::BadOption(format!(
                    "job {}: input of {} bytes is larger than the limit of {} bytes",
                    i + 1,
                    input.len(),
                    self.max_input_bytes
                )));
            }
            match groups.iter_mut().find(|(f, _)| *f == function) {
                Some((_, members)) => members.push(i),
                None => groups.push((function, vec![i])),
            }
        }
        let calls = groups.iter().map(|(function, members)| {
            let batch: Vec<(&[u8], EnqueueOptions)> = members
                .iter()
                .map(|&i| (jobs[i].1, jobs[i].2.clone()))
                .collect();
            async move { self.enqueue_many(function, &batch).await }
        });
        let results = futures_util::future::join_all(calls).await;
        let mut ids: Vec<Option<JobId>> = vec![None; jobs.len()];
        for ((_, members), result) in groups.iter().zip(results) {
            for (&i, id) in members.iter().zip(result?) {
                ids[i] = Some(id);
            }
        }
        Ok(ids.into_iter().flatten().collect())
    }

    /// Whether Redis answers `PING` within `timeout` (for readiness checks).
    pub async fn ping(&self, timeout: Duration) -> Result<()> {
        connection::ping(&self.conn, timeout).await
    }

    /// A warning when Redis may evict keys (its `maxmemory-policy` is not `noeviction`):
    /// an evicted job is a lost job. `None` when it will not, or cannot be asked.
    pub async fn eviction_warning(&self) -> Option<String> {
        connection::eviction_warning(&self.conn).await
    }

    /// Everything known about job `id`.
    pub async fn status(&self, id: &JobId) -> Result<JobStatus> {
        self.status_by(&scripts::GET, id).await
    }

    /// Job `id`'s status read by `script` (`get`, or `watch` for a wait).
    async fn status_by(&self, script: &'static scripts::Function, id: &JobId) -> Result<JobStatus> {
        let (record, output) = self
            .read_job(script, id)
            .await?
            .ok_or_else(|| QueueError::NoSuchJob(id.clone()))?;
        self.opened(JobStatus {
            id: id.clone(),
            record,
            output,
        })
    }

    /// Waits until job `id` has ended and returns its final status. Each progress report
    /// is handed to `on_progress` once, in order, as it happens. Gives up after `timeout`
    /// (if one is given) with [`QueueError::WaitTimedOut`].
    pub async fn wait(
        &self,
        id: &JobId,
        timeout: Option<Duration>,
        mut on_progress: impl FnMut(&Progress),
    ) -> Result<JobStatus> {
        let deadline = timeout.map(|t| tokio::time::Instant::now() + t);
        let keys = FunctionKeys::new(&id.function);
        let (mut watch, subscribed) = self.watches.watch(keys.events(), id.clone()).await;
        // Without events (Redis unreachable for now), polling finds the end until the
        // subscription is back.
        let mut hearing = subscribed.is_ok();
        let mut last_seq = 0;
        let mut unreachable = false;
        // The job's status, once read (by `watch`, which makes its finish event carry the
        // record and a small output) or heard with its finish event.
        let mut heard: Option<JobStatus> = None;
        loop {
            // Subscribed first, then read: nothing that happens after this read is missed.
            let read = match heard.take() {
                Some(status) => Ok(status),
                None => self.status_by(&scripts::WATCH, id).await,
            };
            let status = match read {
                Ok(status) => status,
                // Redis restarting or out of reach for a moment: a wait outlasts it (up to
                // its timeout) rather than fail the caller.
                Err(QueueError::Redis(error)) if connection::is_transient(&error) => {
                    if !unreachable {
                        tracing::warn!(%error, job_id = %id, "cannot read the job's status; trying again");
                        unreachable = true;
                    }
                    let pause = deadline.map_or(WAIT_POLL, |deadline| {
                        WAIT_POLL
                            .min(deadline.saturating_duration_since(tokio::time::Instant::now()))
                    });
                    if pause.is_zero() {
                        return Err(QueueError::WaitTimedOut(id.clone()));
                    }
                    tokio::time::sleep(pause).await;
                    continue;
                }
                Err(error) => return Err(error),
            };
            unreachable = false;
            if let Some(progress) = &status.record.progress
                && status.record.progress_seq > last_seq
            {
                last_seq = status.record.progress_seq;
                on_progress(progress);
            }
            if status.record.state.is_final() {
                return Ok(status);
            }
            // Read events until one says the job finished, the subscription was lost and
            // is back (events may have been missed), or nothing came for a while.
            loop {
                let mut wait = if hearing { WAIT_RECHECK } else { WAIT_POLL };
                if let Some(deadline) = deadline {
                    let left = deadline.saturating_duration_since(tokio::time::Instant::now());
                    if left.is_zero() {
                        return Err(QueueError::WaitTimedOut(id.clone()));
                    }
                    wait = wait.min(left);
                }
                let Ok(seen) = tokio::time::timeout(wait, watch.events.recv()).await else {
                    break;
                };
                match seen {
                    // The client is being dropped: poll.
                    None => {
                        tokio::time::sleep(wait).await;
                        break;
                    }
                    Some(Seen::Lost) => hearing = false,
                    Some(Seen::Resubscribed) => {
                        hearing = true;
                        break;
                    }
                    Some(Seen::Event(Event::Progress {
                        seq,
                        done,
                        total,
                        message,
                        ..
                    })) if seq > last_seq => {
                        last_seq = seq;
                        on_progress(&Progress {
                            done,
                            total,
                            message,
                        });
                    }
                    // A watched job's end comes with its record (and a small output):
                    // no read needed.
                    Some(Seen::Event(Event::Finish {
                        record: Some(record),
                        output,
                        output_omitted: false,
                        ..
                    })) => {
                        heard = Some(self.opened(JobStatus {
                            id: id.clone(),
                            record: *record,
                            output: output.map(String::into_bytes),
                        })?);
                        break;
                    }
                    Some(Seen::Event(Event::Finish { .. })) => break,
                    Some(Seen::Event(_)) => {}
                }
            }
        }
    }

    /// The log of job `id`: what each attempt logged and printed (the newest 256 KiB);
    /// empty when it logged nothing or has not finished an attempt yet.
    pub async fn logs(&self, id: &JobId) -> Result<String> {
        let keys = FunctionKeys::new(&id.function);
        let (exists, log): (bool, Option<String>) = redis::pipe()
            .hexists(keys.jobs(), id.seq)
            .hget(keys.logs(), id.seq)
            .query_async(&mut self.conn.clone())
            .await?;
        if !exists {
            return Err(QueueError::NoSuchJob(id.clone()));
        }
        self.opened_log(id, log.unwrap_or_default())
    }

    /// Job `id`'s input, while it is kept (`None` once the job is forgotten).
    pub async fn input(&self, id: &JobId) -> Result<Option<Vec<u8>>> {
        let keys = FunctionKeys::new(&id.function);
        let input: Option<Vec<u8>> = redis::cmd("HGET")
            .arg(keys.input())
            .arg(id.seq)
            .query_async(&mut self.conn.clone())
            .await?;
        input
            .map(|input| self.opened_bytes(id, wasmgear_proto::crypto::Field::Input, input))
            .transpose()
    }

    /// How many live workers serve `function` (GearMonkey's roll call).
    pub async fn live_workers(&self, function: &FunctionName) -> Result<u64> {
        Ok(scripts::ROLLCALL
            .with_keys(&[FunctionKeys::new(function).workers()])
            .arg("")
            .arg(0)
            .invoke_async(&mut self.conn.clone())
            .await?)
    }

    /// Whether any live worker serves `function`, and, when none does, what the live
    /// workers report about plugins they could not load (those whose file is named after
    /// the function first): why its jobs may wait.
    pub async fn service(&self, function: &FunctionName) -> Result<Service> {
        let live_workers = self.live_workers(function).await?;
        let mut plugin_problems = Vec::new();
        if live_workers == 0 {
            let mine = [format!("/{function}.wasm"), format!("/{function}.toml")];
            let mut others = Vec::new();
            for worker in self.workers().await? {
                let Ok(ad) = &worker.ad else { continue };
                for error in &ad.plugin_errors {
                    let problem = format!("worker {}: {error}", worker.id);
                    if mine.iter().any(|m| error.contains(m.as_str())) {
                        plugin_problems.push(problem);
                    } else {
                        others.push(problem);
                    }
                }
            }
            if plugin_problems.is_empty() {
                plugin_problems = others;
            }
            plugin_problems.truncate(MAX_PLUGIN_PROBLEMS);
        }
        Ok(Service {
            live_workers,
            plugin_problems,
        })
    }

    /// Every live worker and what it advertises.
    pub async fn workers(&self) -> Result<Vec<LiveWorker>> {
        let entries: Vec<(String, String, u64)> = scripts::WORKERS
            .with_keys(&[WorkerListKeys::expiry(), WorkerListKeys::info()])
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok(entries
            .into_iter()
            .map(|(id, ad, expires_ms)| LiveWorker::read(id, &ad, expires_ms))
            .collect())
    }

    /// Cancels job `id`: a waiting job at once, a running one by asking its worker to stop
    /// (it ends `cancelled` when the worker has stopped it, within the grace period).
    pub async fn cancel(&self, id: &JobId) -> Result<CancelOutcome> {
        let outcome = self.cancel_one(id).await?;
        // Its unfinished children too (and theirs), whatever the parent's own outcome.
        self.cancel_children(id).await?;
        Ok(outcome)
    }

    /// Cancels job `id` alone.
    pub(crate) async fn cancel_one(&self, id: &JobId) -> Result<CancelOutcome> {
        let (done, word, notify): (i64, String, Vec<String>) =
            scripts::on_function(&scripts::CANCEL, &id.function)
                .arg(id.seq)
                .invoke_async(&mut self.conn.clone())
                .await?;
        links::deliver(&self.conn, self.keys.as_deref(), notify).await?;
        match (done, word.as_str()) {
            (1, "cancelled") => Ok(CancelOutcome::Cancelled),
            (1, _) => Ok(CancelOutcome::Stopping),
            (_, "missing") => Err(QueueError::NoSuchJob(id.clone())),
            (_, state) => {
                let state = state.parse().map_err(|reason| QueueError::Corrupt {
                    id: id.clone(),
                    reason,
                })?;
                Ok(CancelOutcome::AlreadyEnded(state))
            }
        }
    }
}
