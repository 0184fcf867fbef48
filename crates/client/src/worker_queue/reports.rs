//! What a worker tells the queue about a job it holds: heartbeats, progress, and its end
//! (`complete`, batched with other completions by the [`Completer`], `fail`, `release`).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio_util::task::AbortOnDropHandle;
use wasmgear_proto::{
    AttemptNotes, Completion, FunctionName, JobFailure, JobState, Lease, LeaseRequest, LeaseStatus,
    Progress,
};

use super::*;
use crate::connection::{self, Connection};
use crate::replication::{self, MinReplicas};
use crate::{QueueError, Result, links, scripts};
use wasmgear_proto::sync::Locked;

/// Reads the `{accepted, word}` reply of `complete`, `fail` and `release`.
pub(super) fn completion((accepted, word): (i64, String)) -> redis::RedisResult<Completion> {
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
pub(super) const COMPLETE_BATCH: usize = 128;

/// A completion on its way to Redis.
pub(super) struct PendingCompletion {
    pub(super) function: FunctionName,
    pub(super) seq: u64,
    pub(super) token: String,
    pub(super) output: Vec<u8>,
    pub(super) log: String,
    pub(super) version: String,
    /// The next job to lease in the same call, for the slot the finished job frees.
    pub(super) next: Option<NextLease>,
    pub(super) reply:
        oneshot::Sender<std::result::Result<(Completion, Vec<Lease>), redis::RedisError>>,
}

/// What a completion asks to lease next: jobs of its function.
pub(super) struct NextLease {
    pub(super) want: usize,
    pub(super) ttl: Duration,
    pub(super) default_timeout_ms: u64,
    pub(super) default_max_attempts: u32,
}

/// A result of `complete`, one letter: s(ucceeded), c(ancelled), x (stale) or m(issing).
pub(super) fn completion_of(letter: u8) -> redis::RedisResult<Completion> {
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
pub(super) struct Completer {
    pub(super) conn: Connection,
    pub(super) worker_id: String,
    pub(super) hints: Hints,
    pub(super) answered: scripts::Answered,
    /// How many replicas must confirm a completion before it counts.
    pub(super) min_replicas: MinReplicas,
    /// The worker's keys, for a batch callback its completions make due that must be sealed.
    pub(super) keys: Option<Arc<wasmgear_proto::crypto::KeyRing>>,
}

/// How a worker's completions reach Redis: the sender task batching those that come
/// while calls are on their way, or, when nothing is on its way, the finishing job's own
/// task (no hop to the sender task on an idle worker's path to the result).
pub(super) struct Completions {
    sender: mpsc::UnboundedSender<PendingCompletion>,
    completer: Arc<Completer>,
    /// Completions sent either way and not yet answered.
    outstanding: AtomicUsize,
    _task: AbortOnDropHandle<()>,
}

/// One completion counted in [`Completions::outstanding`] until it is dropped (also when
/// the finishing task is).
struct Outstanding<'a>(&'a AtomicUsize);

impl<'a> Outstanding<'a> {
    /// Counts one more; true when it is the only one.
    fn count(outstanding: &'a AtomicUsize) -> (Self, bool) {
        let alone = outstanding.fetch_add(1, Ordering::AcqRel) == 0;
        (Outstanding(outstanding), alone)
    }
}

impl Drop for Outstanding<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The most `complete` calls on their way at once: a second is sent while the first is
/// answered (they run in the order sent), so that Redis and the worker work at once.
pub(super) const COMPLETE_CALLS: usize = 2;

/// Sends completions as they come: whatever has queued up while the previous calls were on
/// their way goes in the next call, one per function, with the next jobs those completions
/// asked for.
pub(super) async fn send_completions(
    completer: Arc<Completer>,
    mut pending: mpsc::UnboundedReceiver<PendingCompletion>,
) {
    use futures_util::StreamExt;
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
    pub(super) async fn send(&self, function: &FunctionName, group: Vec<PendingCompletion>) {
        let mut call = scripts::on_function(&scripts::COMPLETE, function);
        // The call id makes the call safe to send again: a resent call gets the first
        // one's results and leases.
        let call_id = format!("{}/{}", self.worker_id, wasmgear_proto::sync::random_hex(8));
        // What they ask for together, up to what one call may lease (each completion
        // asks for a few jobs ahead: a full batch of them asks for more): the first ones
        // get theirs, the rest fewer or none, their slots leasing in turn as usual.
        let want: usize = group
            .iter()
            .filter_map(|p| p.next.as_ref())
            .map(|n| n.want)
            .sum::<usize>()
            .min(wasmgear_proto::limits::MAX_CONCURRENCY as usize);
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
        // Per job (code, state); the dependents to tell; the leases; wait_ms; capped; the
        // function's min_replicas.
        type Reply = (Vec<u8>, Vec<String>, LeaseRows, i64, i64, u32);
        let min = self.min_replicas;
        let reply: redis::RedisResult<(Reply, u32)> = if min.count() > 0 {
            connection::retrying("complete", || {
                let mut conn = self.conn.clone();
                let timeout_ms = min.timeout().as_millis() as u64;
                let call = &call;
                async move {
                    call.invoke_waiting(&mut conn, min.count(), timeout_ms.max(1))
                        .await
                }
            })
            .await
        } else {
            connection::invoke_retrying("complete", &self.conn, &call)
                .await
                .map(|reply| (reply, 0))
        };
        let ((results, notify, LeaseRows(rows), wait_ms, capped, function_min), replicas) =
            match reply {
                Ok(reply) => reply,
                Err(e) => {
                    for p in group {
                        let _ = p.reply.send(Err(e.clone()));
                    }
                    return;
                }
            };
        // Confirmed by as many replicas as the worker and the function ask for, or reported
        // as not stored (the worker sends it again: answered as the first time, then
        // confirmed again), its leases handed back.
        let wanted = min.count().max(function_min);
        let replicas = if wanted > replicas {
            let key = wasmgear_proto::keys::FunctionKeys::new(function).jobs();
            replication::confirm(&self.conn, &key, wanted, min)
                .await
                .unwrap_or(replicas)
        } else {
            replicas
        };
        if replicas < wanted {
            let error = redis::RedisError::from((
                redis::ErrorKind::Io,
                "replicas fell short of confirming the completion",
                format!(
                    "{replicas} of {wanted} confirmed within {} ms",
                    min.timeout().as_millis()
                ),
            ));
            for row in rows {
                release_lease(&self.conn, &lease_of(function, row, sent, ttl)).await;
            }
            for p in group {
                let _ = p.reply.send(Err(error.clone()));
            }
            return;
        }
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
        // The dependents (and batches) of the completed jobs are told before the jobs are
        // reported done: whoever waits on a completion finds them told.
        if let Err(e) = links::deliver(&self.conn, self.keys.as_deref(), notify).await {
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

/// Hands back `lease`, handed to this worker and not run (unrun: its attempt is not
/// counted); says so when it cannot (the job runs elsewhere once its lease runs out, its
/// attempt given back then).
pub(super) async fn release_lease(conn: &Connection, lease: &Lease) {
    let released: redis::RedisResult<(i64, String, Vec<String>)> =
        scripts::on_function(&scripts::RELEASE, &lease.info.id.function)
            .arg(lease.info.id.seq)
            .arg(&lease.token)
            .invoke_async(&mut conn.clone())
            .await;
    match released {
        Ok((_, _, notify)) => {
            // (A job handed back unrun ends only when its cancel was asked for; a batch
            // callback that makes due and must be sealed is fired by the upkeep.)
            if let Err(error) = links::deliver(conn, None, notify).await {
                tracing::warn!(%error, "cannot tell the dependents of a job handed back; they re-check later");
            }
        }
        Err(error) => {
            tracing::warn!(%error, job = %lease.info.id, "cannot hand back a job handed to this worker; it runs elsewhere once its lease runs out")
        }
    }
}

impl WorkerQueue {
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
    pub(super) fn only_one_has_work(&self, function: &FunctionName) -> bool {
        if !self.listening.load(Ordering::SeqCst) {
            return false;
        }
        let now = tokio::time::Instant::now();
        let served = self.served.locked();
        let hints = lock_hints(&self.hints);
        served
            .iter()
            .filter(|f| *f != function)
            .all(|other| hints.get(other).is_some_and(|hint| !hint.worth_asking(now)))
    }

    /// Sends the completion (and what to lease next) to the completion sender.
    pub(super) async fn finish_job(
        &self,
        lease: &Lease,
        output: &[u8],
        notes: &AttemptNotes,
        next: Option<NextLease>,
    ) -> Result<(Completion, Vec<Lease>)> {
        let (reply, replied) = oneshot::channel();
        let function = &lease.info.id.function;
        let pending = PendingCompletion {
            function: function.clone(),
            seq: lease.info.id.seq,
            token: lease.token.clone(),
            output: output.to_vec(),
            log: notes.log.clone(),
            version: notes.plugin_version.clone().unwrap_or_default(),
            next,
            reply,
        };
        let completions = self.completions.get_or_init(|| {
            let (sender, receiver) = mpsc::unbounded_channel();
            let completer = Arc::new(Completer {
                conn: self.conn.clone(),
                worker_id: self.worker_id.clone(),
                hints: self.hints.clone(),
                answered: self.answered.clone(),
                min_replicas: self.min_replicas,
                keys: self.keys.clone(),
            });
            let task = tokio::spawn(send_completions(completer.clone(), receiver));
            Completions {
                sender,
                completer,
                outstanding: AtomicUsize::new(0),
                _task: AbortOnDropHandle::new(task),
            }
        });
        let stopped = || {
            QueueError::Redis(redis::RedisError::from((
                redis::ErrorKind::Client,
                "the completion sender stopped",
            )))
        };
        let (_counted, alone) = Outstanding::count(&completions.outstanding);
        if alone {
            // Nothing on its way to batch with: sent from here, answered in `reply`.
            completions.completer.send(function, vec![pending]).await;
        } else if completions.sender.send(pending).is_err() {
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
    pub(super) async fn settle(
        &self,
        (accepted, word, notify): (i64, String, Vec<String>),
    ) -> Result<(i64, String)> {
        links::deliver(&self.conn, self.keys.as_deref(), notify).await?;
        Ok((accepted, word))
    }
}
