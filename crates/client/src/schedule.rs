//! Recurring jobs (`wasmgear schedule`): schedules kept in the `{schedules}` slot, fired by
//! the workers.
//!
//! A worker's scheduler reads the schedules due on Redis' clock (`schedule_due`), enqueues
//! each tick's job on the function's queue with the schedule's name and tick time (the
//! queue keeps the last tick each schedule had, so a tick is enqueued once however many
//! workers fire it), then moves the schedule on to its next tick (`schedule_advance`, only
//! if no other worker has). A tick whose enqueue is refused delays only its own schedule:
//! the reason is kept where `schedule list` reads it and the tick is tried again after a
//! bounded backoff (`schedule_failed`), while the other schedules go on. A schedule whose
//! next tick was set on a clock that has gone back since is brought back to the first tick
//! after now (`schedule_rewind`). Workers' own clocks never matter.

use std::collections::HashMap;
use std::time::Duration;

use wasmgear_proto::keys::{FunctionKeys, ScheduleKeys};
use wasmgear_proto::schedule::{
    CatchUp, NEVER_MS, Recurrence, ScheduleDef, ScheduleError, ScheduleFailure, check_name,
    retry_after,
};

use super::client::{Client, Enqueued};
use super::connection::is_transient;
use super::options::{EnqueueOptions, Priority, Tick};
use super::{QueueError, Result, scripts};
use wasmgear_proto::FunctionName;
use wasmgear_proto::crypto::{self, Field};

/// The schedules as read: definitions, inputs, next ticks, errors.
type Stored = (
    Vec<(String, String)>,
    HashMap<String, Vec<u8>>,
    HashMap<String, u64>,
    HashMap<String, String>,
);

/// The most bytes of a refusal kept as a schedule's error.
const MAX_ERROR_BYTES: usize = 1000;

/// The most due schedules one scheduler pass takes.
const DUE_BATCH: usize = 100;

/// A schedule as listed: its definition, its next tick and its jobs' input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    /// What it is.
    pub def: ScheduleDef,
    /// Its next tick (ms, Redis clock), or when a tick that could not fire is tried again;
    /// `None` while paused.
    pub next_ms: Option<u64>,
    /// Its jobs' input.
    pub input: Vec<u8>,
    /// Why its due tick could not fire, if it could not.
    pub error: Option<ScheduleFailure>,
}

/// A schedule whose due tick could not fire in a scheduler pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailedTick {
    /// The schedule.
    pub name: String,
    /// Why, and when it is tried again.
    pub failure: ScheduleFailure,
    /// Whether the reason differs from the one its last failure had (or it had none): a
    /// scheduler logs a failure once per change of its reason, not at every try.
    pub new_reason: bool,
}

/// What one scheduler pass did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SchedulerPass {
    /// Jobs enqueued now (or found enqueued for their tick already), by schedule.
    pub fired: Vec<(String, Enqueued)>,
    /// Schedules whose missed ticks were skipped (`--catch-up none`).
    pub skipped: Vec<String>,
    /// Schedules whose due tick could not fire (each waits; the others went on).
    pub failed: Vec<FailedTick>,
    /// Schedules that fired after failing before.
    pub recovered: Vec<String>,
    /// Schedules brought back to their first tick after now, with that tick: their next
    /// tick had been set on a clock that has gone back since.
    pub rewound: Vec<(String, u64)>,
    /// How long until the next schedule is due, by Redis' clock (`None`: nothing scheduled).
    pub next_in: Option<Duration>,
}

fn bad(error: ScheduleError) -> QueueError {
    QueueError::BadOption(error.to_string())
}

impl Client {
    /// Redis' clock, ms since the epoch.
    pub async fn redis_now_ms(&self) -> Result<u64> {
        let (secs, micros): (u64, u64) = redis::cmd("TIME")
            .query_async(&mut self.conn.clone())
            .await?;
        Ok(secs * 1000 + micros / 1000)
    }

    /// Adds schedule `def` (its jobs with `input`), or replaces one of the same name if
    /// `replace`. Checks the name, the function, the recurrence and the jobs' options first;
    /// refused, nothing is written. Returns it as stored.
    pub async fn schedule_add(
        &self,
        def: ScheduleDef,
        input: &[u8],
        replace: bool,
    ) -> Result<Schedule> {
        check_name(&def.name).map_err(bad)?;
        FunctionName::new(&def.function)?;
        if input.len() > crate::options::MAX_INPUT_BYTES {
            return Err(QueueError::BadOption(format!(
                "an input of {} bytes is more than the limit of {}",
                input.len(),
                crate::options::MAX_INPUT_BYTES
            )));
        }
        job_options(&def, 0)?.validate()?;
        // Ticks link to the trace the schedule was added in.
        let added_in = crate::propagation::current();
        let def = ScheduleDef {
            trace: added_in.as_ref().map(|t| t.traceparent().to_string()),
            tracestate: added_in.and_then(|t| t.tracestate().map(str::to_string)),
            ..def
        };
        let now = self.redis_now_ms().await?;
        let next = match def.paused {
            true => None,
            false => Some(next_after(&def.recurrence, now)?),
        };
        // It starts anew: a last tick its function's queue keeps for the name from a clock
        // that was ahead dedupes nothing (nor one of the function of the schedule it
        // replaces). Forgotten first: refused there, nothing is written.
        let replaced: Option<String> = redis::cmd("HGET")
            .arg(ScheduleKeys::defs())
            .arg(&def.name)
            .query_async(&mut self.conn.clone())
            .await?;
        if replace || replaced.is_none() {
            let mut functions = vec![def.function.clone()];
            if let Some(old) = replaced.and_then(|r| serde_json::from_str::<ScheduleDef>(&r).ok())
                && old.function != def.function
            {
                functions.push(old.function);
            }
            for function in functions {
                self.forget_tick(&function, &def.name, false).await?;
            }
        }
        let text = serde_json::to_string(&def).unwrap_or_default();
        let stored = self.sealed_schedule_input(&def, input).await?;
        let (status, created): (String, String) = scripts::SCHEDULE_SET
            .with_keys(&ScheduleKeys::all())
            .arg(&def.name)
            .arg(text)
            .arg(stored.as_ref())
            .arg(next.map(|n| n.to_string()).unwrap_or_default())
            .arg(if replace { "1" } else { "0" })
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(refused)?;
        if status == "exists" {
            return Err(QueueError::BadOption(format!(
                "schedule {} exists already (remove it first, or replace it with --replace)",
                def.name
            )));
        }
        Ok(Schedule {
            def: ScheduleDef {
                created_ms: created.parse().unwrap_or_default(),
                ..def
            },
            next_ms: next,
            input: input.to_vec(),
            error: None,
        })
    }

    /// Forgets the last tick of schedule `name` that `function`'s queue keeps: whatever it
    /// is if `always`, else only if it is later than Redis' clock now.
    async fn forget_tick(&self, function: &str, name: &str, always: bool) -> Result<()> {
        let Ok(function) = FunctionName::new(function) else {
            return Ok(());
        };
        let _: i64 = scripts::SCHEDULE_FORGET
            .with_keys(&[FunctionKeys::new(&function).ticks()])
            .arg(name)
            .arg(if always { "1" } else { "0" })
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(refused)?;
        Ok(())
    }

    /// `input` as schedule `def` keeps it: sealed (bound to the schedule's name) when this
    /// client has keys and encrypts everything or `def`'s function stores only encrypted
    /// input; each tick's job has its own sealed copy.
    async fn sealed_schedule_input<'a>(
        &self,
        def: &ScheduleDef,
        input: &'a [u8],
    ) -> Result<std::borrow::Cow<'a, [u8]>> {
        let Some(keys) = self.keys.as_deref() else {
            return Ok(input.into());
        };
        let function = FunctionName::new(&def.function)?;
        if !self.encrypt_all && !self.config(&function).await?.encrypt {
            return Ok(input.into());
        }
        let binding = crypto::schedule_binding(&def.name);
        Ok(keys
            .seal(&binding, Field::Input, input)
            .map_err(|e| QueueError::Encryption(e.to_string()))?
            .into())
    }

    /// Schedule `name`'s kept `input` opened if it is sealed; without keys, a sealed one is
    /// an error that says so.
    fn opened_schedule_input<'a>(
        &self,
        name: &str,
        input: &'a [u8],
    ) -> Result<std::borrow::Cow<'a, [u8]>> {
        let binding = crypto::schedule_binding(name);
        match self.keys.as_deref() {
            Some(keys) => keys
                .open(&binding, Field::Input, input)
                .map_err(|e| QueueError::Encryption(format!("schedule {name}: {e}"))),
            None if input.starts_with(crypto::MAGIC) => {
                let key = crypto::sealed_with(input).unwrap_or_else(|| "?".into());
                Err(QueueError::Encryption(format!(
                    "schedule {name}: {}",
                    crypto::CryptoError::NoKeys(key)
                )))
            }
            None => Ok(input.into()),
        }
    }

    /// Every schedule, by name (a sealed input opened where this client has the key, else
    /// as it is kept).
    pub async fn schedules(&self) -> Result<Vec<Schedule>> {
        let (defs, inputs, next, errors): Stored = redis::pipe()
            .hgetall(ScheduleKeys::defs())
            .hgetall(ScheduleKeys::inputs())
            .cmd("ZRANGE")
            .arg(ScheduleKeys::next())
            .arg(0)
            .arg(-1)
            .arg("WITHSCORES")
            .hgetall(ScheduleKeys::errors())
            .query_async(&mut self.conn.clone())
            .await?;
        let mut list: Vec<Schedule> = defs
            .into_iter()
            .filter_map(|(name, text)| {
                let def: ScheduleDef = serde_json::from_str(&text).ok()?;
                let input = inputs.get(&name).map(Vec::as_slice).unwrap_or_default();
                let input = match self.opened_schedule_input(&name, input) {
                    Ok(opened) => opened.into_owned(),
                    Err(_) => input.to_vec(),
                };
                Some(Schedule {
                    next_ms: next.get(&name).copied(),
                    input,
                    error: errors.get(&name).and_then(|e| serde_json::from_str(e).ok()),
                    def,
                })
            })
            .collect();
        list.sort_by(|a, b| a.def.name.cmp(&b.def.name));
        Ok(list)
    }

    /// Removes schedule `name` (the jobs it enqueued stay). Fails if there is none.
    pub async fn schedule_remove(&self, name: &str) -> Result<()> {
        let removed: String = scripts::SCHEDULE_REMOVE
            .with_keys(&ScheduleKeys::all())
            .arg(name)
            .invoke_async(&mut self.conn.clone())
            .await?;
        if removed.is_empty() {
            return Err(no_such_schedule(name));
        }
        // Its function's queue forgets its last tick (one field per schedule, else kept
        // for ever).
        if let Ok(def) = serde_json::from_str::<ScheduleDef>(&removed) {
            self.forget_tick(&def.function, name, true).await?;
        }
        Ok(())
    }

    /// Pauses schedule `name` (no tick fires), or resumes it from its next tick after now.
    pub async fn schedule_pause(&self, name: &str, paused: bool) -> Result<()> {
        let list = self.schedules().await?;
        let Some(schedule) = list.iter().find(|s| s.def.name == name) else {
            return Err(no_such_schedule(name));
        };
        let next = match paused {
            true => String::new(),
            false => next_after(&schedule.def.recurrence, self.redis_now_ms().await?)?.to_string(),
        };
        let done: i64 = scripts::SCHEDULE_PAUSE
            .with_keys(&ScheduleKeys::all())
            .arg(name)
            .arg(if paused { "1" } else { "0" })
            .arg(next)
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(refused)?;
        match done {
            0 => Err(no_such_schedule(name)),
            _ => Ok(()),
        }
    }

    /// One pass of a worker's scheduler: fires every schedule due now (at most one job per
    /// tick whoever else fires it), notes the schedules whose tick could not fire (each
    /// waits on its own), brings back those whose next tick was set on a clock that has
    /// gone back, and says when the next one is due. Fails only when Redis cannot be
    /// reached.
    pub async fn run_due_schedules(&self) -> Result<SchedulerPass> {
        let reply: Vec<Vec<u8>> = scripts::SCHEDULE_DUE
            .with_keys(&ScheduleKeys::all())
            .arg(DUE_BATCH)
            .invoke_async(&mut self.conn.clone())
            .await?;
        let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
        let number = |bytes: &[u8]| text(bytes).parse::<f64>().ok().map(|n| n as u64);
        let now = reply.first().and_then(|b| number(b)).unwrap_or_default();
        let mut pass = SchedulerPass {
            next_in: reply
                .get(1)
                .and_then(|b| number(b))
                .map(|at| Duration::from_millis(at.saturating_sub(now))),
            ..SchedulerPass::default()
        };
        let due_count = reply
            .get(2)
            .and_then(|b| number(b))
            .and_then(|n| usize::try_from(n).ok())
            .unwrap_or_default();
        let rest = reply.get(3..).unwrap_or_default();
        let (due, behind) = rest.split_at((due_count * 5).min(rest.len()));
        for due in due.chunks_exact(5) {
            let (name, score) = (text(&due[0]), number(&due[1]).unwrap_or_default());
            let prior: Option<ScheduleFailure> = serde_json::from_slice(&due[4]).ok();
            // A tick that could not fire is tried again at `retry_ms`: its score then.
            let tick = match &prior {
                Some(failure) if failure.retry_ms == score => failure.tick_ms,
                _ => score,
            };
            match self.fire(&name, score, tick, now, &due[2], &due[3]).await {
                Ok((enqueued, recovered)) => {
                    match enqueued {
                        Some(enqueued) => pass.fired.push((name.clone(), enqueued)),
                        None => pass.skipped.push(name.clone()),
                    }
                    if recovered {
                        pass.recovered.push(name);
                    }
                }
                Err(QueueError::Redis(e)) if is_transient(&e) => return Err(e.into()),
                Err(error) => {
                    let failure = ScheduleFailure {
                        error: reason(&error),
                        tick_ms: tick,
                        since_ms: prior.as_ref().map_or(now, |p| p.since_ms),
                        failures: prior.as_ref().map_or(1, |p| p.failures.saturating_add(1)),
                        retry_ms: 0,
                    };
                    if let Some(failed) = self.note_failure(&name, score, now, failure).await? {
                        pass.failed.push(FailedTick {
                            new_reason: prior.is_none_or(|p| p.error != failed.error),
                            name,
                            failure: failed,
                        });
                    }
                }
            }
        }
        for behind in behind.chunks_exact(3) {
            let (name, score) = (text(&behind[0]), number(&behind[1]).unwrap_or_default());
            let Ok(def) = serde_json::from_slice::<ScheduleDef>(&behind[2]) else {
                continue;
            };
            let Ok(Some(next)) = def.recurrence.next_after(now) else {
                continue;
            };
            let rewound: i64 = scripts::SCHEDULE_REWIND
                .with_keys(&ScheduleKeys::all())
                .arg(&name)
                .arg(score)
                .arg(next.min(score))
                .invoke_async(&mut self.conn.clone())
                .await?;
            if rewound == 1 && next < score {
                pass.rewound.push((name, next));
                let wait = Duration::from_millis(next.saturating_sub(now));
                pass.next_in = Some(pass.next_in.map_or(wait, |n| n.min(wait)));
            }
        }
        Ok(pass)
    }

    /// Notes that schedule `name` (score `score` as read) could not fire `failure.tick_ms`
    /// at `now`, and when it is tried again. Returns the failure as noted, or `None` if
    /// another worker moved the schedule meanwhile.
    async fn note_failure(
        &self,
        name: &str,
        score: u64,
        now: u64,
        failure: ScheduleFailure,
    ) -> Result<Option<ScheduleFailure>> {
        let failure = ScheduleFailure {
            retry_ms: now + retry_after(failure.failures).as_millis() as u64,
            ..failure
        };
        let noted: i64 = scripts::SCHEDULE_FAILED
            .with_keys(&ScheduleKeys::all())
            .arg(name)
            .arg(score)
            .arg(failure.retry_ms)
            .arg(serde_json::to_string(&failure).unwrap_or_default())
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok((noted == 1).then_some(failure))
    }

    /// Fires schedule `name`, whose score `score` has come, at `now`: enqueues the job of
    /// `tick` (its due tick) unless its missed ticks are skipped, then moves the schedule
    /// on. Returns the job, and whether the schedule had failed before.
    async fn fire(
        &self,
        name: &str,
        score: u64,
        tick: u64,
        now: u64,
        def: &[u8],
        input: &[u8],
    ) -> Result<(Option<Enqueued>, bool)> {
        let def: ScheduleDef = serde_json::from_slice(def).map_err(|e| {
            QueueError::BadOption(format!(
                "schedule {name} has an unreadable definition: {e} (replace it with \
                 `schedule add --replace`, or remove it)"
            ))
        })?;
        let firing = def
            .recurrence
            .firing(tick, now, def.catch_up)
            .map_err(bad)?;
        let function = FunctionName::new(&def.function)?;
        let enqueued = match firing.and_then(|f| f.fire) {
            Some(at) => {
                let options = job_options(&def, at)?;
                let input = self.opened_schedule_input(name, input)?;
                let input = input.as_ref();
                let tick = crate::propagation::tick_span(&def);
                tracing::Instrument::instrument(self.submit(&function, &[(input, options)]), tick)
                    .await?
                    .into_iter()
                    .next()
            }
            None => None,
        };
        // A schedule that never ticks again is left where it is (listed, never due again
        // once its tick is past: it is moved far ahead).
        let next = firing.map_or(NEVER_MS, |f| f.next.min(NEVER_MS));
        let moved: i64 = scripts::SCHEDULE_ADVANCE
            .with_keys(&ScheduleKeys::all())
            .arg(name)
            .arg(score)
            .arg(next)
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok((enqueued, moved == 2))
    }
}

/// A refusal in one line of at most [`MAX_ERROR_BYTES`], as a schedule's error keeps it.
fn reason(error: &QueueError) -> String {
    let text = error.to_string().replace(['\r', '\n'], " ");
    if text.len() <= MAX_ERROR_BYTES {
        return text;
    }
    let mut end = MAX_ERROR_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &text[..end])
}

/// A refusal of a schedule function of the library (`BADSCHEDULE why`) as the option it
/// refuses; other errors as they are.
fn refused(error: redis::RedisError) -> QueueError {
    match (error.code(), error.detail()) {
        (Some("BADSCHEDULE"), Some(detail)) => QueueError::BadOption(detail.to_string()),
        _ => QueueError::Redis(error),
    }
}

/// The first tick of `recurrence` after `now`, or why there is none.
fn next_after(recurrence: &Recurrence, now: u64) -> Result<u64> {
    match recurrence.next_after(now).map_err(bad)? {
        Some(next) => Ok(next),
        None => Err(bad(ScheduleError::Never(match recurrence {
            Recurrence::Cron { expression, .. } => expression.clone(),
            Recurrence::Every { every_ms } => format!("every {every_ms}ms"),
        }))),
    }
}

/// The options of the job of `def`'s tick `at` (0: no tick, for checking them).
fn job_options(def: &ScheduleDef, at: u64) -> Result<EnqueueOptions> {
    Ok(EnqueueOptions {
        priority: Priority::new(def.priority)?,
        max_attempts: def.max_attempts,
        timeout: def.timeout_ms.map(Duration::from_millis),
        uniq: def.uniq.clone(),
        tags: def.tags.clone(),
        group: def.group.clone(),
        tick: (at > 0).then(|| Tick {
            schedule: def.name.clone(),
            at_ms: at,
        }),
        ..EnqueueOptions::default()
    })
}

fn no_such_schedule(name: &str) -> QueueError {
    QueueError::NoSuchSchedule(name.to_string())
}

/// Whether a missed tick fires, as the CLI's `--catch-up` says it.
pub fn catch_up_text(catch_up: CatchUp) -> &'static str {
    match catch_up {
        CatchUp::One => "one",
        CatchUp::None => "none",
    }
}
