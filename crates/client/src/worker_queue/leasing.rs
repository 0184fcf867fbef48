//! Leasing: one `lease` call per served function with news of work, the hand-offs this
//! worker registers for and takes, and the slots it keeps for them.

use std::sync::atomic::Ordering;
use std::time::Duration;

use wasmgear_proto::{FunctionName, JobId, JobInfo, Lease, LeaseRequest};

use super::*;
use crate::connection::{self};
use crate::handoff::{HandOffs, LeaseRow};
use crate::{Result, links, scripts};
use wasmgear_proto::sync::Locked;

/// The leases of a `lease` or `complete` reply: per job, one string
/// `NUMBER|ATTEMPT|MAX_ATTEMPTS|TIMEOUT_MS|CREATED_MS|TOKEN[|TRACEPARENT[|TRACESTATE]]`, then
/// its input.
pub(super) struct LeaseRows(pub(super) Vec<LeaseRow>);

impl redis::FromRedisValue for LeaseRows {
    fn from_redis_value(value: redis::Value) -> std::result::Result<Self, redis::ParsingError> {
        let items: Vec<Vec<u8>> = redis::FromRedisValue::from_redis_value(value)?;
        let bad = |row: &[u8]| {
            redis::ParsingError::from(format!(
                "a lease row is not NUMBER|ATTEMPT|MAX_ATTEMPTS|TIMEOUT_MS|CREATED_MS|TOKEN[|TRACEPARENT[|TRACESTATE]]: {:?}",
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
pub(super) fn lease_of(
    function: &FunctionName,
    row: LeaseRow,
    sent: std::time::Instant,
    ttl: Duration,
) -> Lease {
    Lease {
        info: JobInfo {
            id: JobId {
                function: function.clone(),
                seq: row.seq,
            },
            attempt: row.attempt,
            max_attempts: row.max_attempts,
            enqueued_at_ms: row.created_ms,
            timeout_ms: row.timeout_ms,
            trace: row.trace,
        },
        input: row.input,
        token: row.token,
        expires: sent + ttl,
        ttl,
    }
}

/// Reads one lease row,
/// `NUMBER|ATTEMPT|MAX_ATTEMPTS|TIMEOUT_MS|CREATED_MS|TOKEN[|TRACEPARENT[|TRACESTATE]]`, with
/// the job's `input`. A trace context the queue holds but this build cannot read (the
/// queue checked it when it was enqueued) is left out rather than the lease refused.
pub(super) fn lease_row(row: &[u8], input: Vec<u8>) -> Option<LeaseRow> {
    let text = std::str::from_utf8(row).ok()?;
    // (The tracestate, last, may itself hold '|'.)
    let mut fields = text.splitn(8, '|');
    let mut number = || fields.next().and_then(|f| f.parse::<u64>().ok());
    let (seq, attempt, max_attempts, timeout_ms, created_ms) =
        (number()?, number()?, number()?, number()?, number()?);
    let token = fields.next().filter(|t| !t.is_empty())?;
    let trace = fields
        .next()
        .and_then(|parent| wasmgear_proto::TraceContext::new(parent, fields.next()).ok());
    Some(LeaseRow {
        seq,
        attempt: u32::try_from(attempt).ok()?,
        max_attempts: u32::try_from(max_attempts).ok()?,
        timeout_ms,
        created_ms,
        token: token.to_string(),
        trace,
        input,
    })
}

/// How long an idle worker stays registered to be handed jobs (lease.lua, ARGV[9]) after a
/// lease call that found nothing, at most. An idle worker asks again at least every second
/// (the default idle poll), renewing it; a worker that died is handed jobs for at most this
/// long (they start elsewhere once their lease runs out, the attempt not counted).
pub(super) const HANDOFF_HOLD: Duration = Duration::from_secs(3);

/// How long a registration for leases of `ttl` lasts: [`HANDOFF_HOLD`], and at most a
/// quarter of the lease, so that a job handed over has at least three quarters of its lease
/// left by the worker's count (which starts at the registering call).
pub(super) fn handoff_hold(ttl: Duration) -> Duration {
    HANDOFF_HOLD.min(ttl / 4).max(Duration::from_millis(1))
}

pub(super) fn lock_handoffs(
    handoffs: &std::sync::Mutex<HandOffs>,
) -> std::sync::MutexGuard<'_, HandOffs> {
    handoffs.locked()
}

impl WorkerQueue {
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
        tracing::trace!(max, handed = leases.len(), "lease");
        if !leases.is_empty() || requests.is_empty() || max == 0 {
            return Ok(leases);
        }
        let start = match self.strict_order {
            true => 0,
            false => self.next_function.fetch_add(1, Ordering::Relaxed),
        };
        let token_prefix = format!("{}/{}", self.worker_id, wasmgear_proto::sync::random_hex(8));
        let mut next_due = Duration::MAX;
        let listening = self.listening.load(Ordering::SeqCst);
        // Only a call alone on its way registers: its `max` is then all the free slots.
        let registering = listening
            && requests.iter().any(|request| request.hand_off)
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
                tracing::trace!(%function, ?hint, "lease skipped");
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
            // A registration leaves a slot for each function still to be asked in this call
            // that may have work: one serving a single slot would otherwise keep it for a
            // function that found nothing while another, asked next, has jobs ready (a
            // worker of concurrency 1 started beside a full queue waited two idle polls).
            let later = (i + 1..requests.len())
                .filter(|j| {
                    let other = &requests[(start + j) % requests.len()].function;
                    !listening
                        || lock_hints(&self.hints)
                            .get(other)
                            .is_none_or(|h| h.worth_asking(now))
                })
                .count();
            // (A function whose jobs are gathered by lease calls only never registers.)
            let registers = registering && request.hand_off;
            let register = if registers {
                share.min(want).min(budget.saturating_sub(later))
            } else {
                0
            };
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
            if registers || own.is_some() {
                call.arg(if registers {
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
            tracing::trace!(%function, want, register, own_slots, got = rows.len(), wait_ms, capped, withdrawn = %withdrawn, max, reserved, "lease call");
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
            } else if registers && register + regained > 0 {
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
            if let Err(error) = links::deliver(&self.conn, self.keys.as_deref(), notify).await {
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
        *self.next_due.locked() =
            (next_due != Duration::MAX).then(|| tokio::time::Instant::now() + next_due);
        Ok(leases)
    }

    /// Withdraws registrations until at most `limit` slots are kept for them (those already
    /// used or lapsed keep theirs until their hand-off is heard or their time is up).
    pub(super) async fn withdraw_until(&self, limit: usize) {
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
    pub(super) async fn take_back_slots(&self, function: &FunctionName, needed: usize) -> usize {
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
    pub(super) async fn take_handed(&self, requests: &[LeaseRequest], max: usize) -> Vec<Lease> {
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
        let leases = |jobs: Vec<crate::handoff::HandedJob>| -> Vec<Lease> {
            jobs.into_iter()
                .map(|job| lease_of(&job.function, job.row, job.sent, job.ttl))
                .collect()
        };
        self.hand_back(leases(unwanted)).await;
        leases(taken)
    }

    /// Hands back jobs handed to this worker that it will not run.
    pub(super) async fn hand_back(&self, leases: Vec<Lease>) {
        for lease in leases {
            release_lease(&self.conn, &lease).await;
        }
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
    pub(super) async fn withdraw(&self, function: &FunctionName, call_id: &str) -> Result<bool> {
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
}
