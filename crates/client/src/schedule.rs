//! Recurring jobs (`wasmgear schedule`): schedules kept in the `{schedules}` slot, fired by
//! the workers.
//!
//! A worker's scheduler reads the schedules due on Redis' clock (`schedule_due`), enqueues
//! each tick's job on the function's queue with the schedule's name and tick time (the
//! queue keeps the last tick each schedule had, so a tick is enqueued once however many
//! workers fire it), then moves the schedule on to its next tick (`schedule_advance`, only
//! if no other worker has). Workers' own clocks never matter.

use std::collections::HashMap;
use std::time::Duration;

use wasmgear_proto::keys::ScheduleKeys;
use wasmgear_proto::schedule::{CatchUp, Recurrence, ScheduleDef, ScheduleError, check_name};

use super::client::{Client, EnqueueOptions, Enqueued, Priority, Tick};
use super::{QueueError, Result, scripts};
use crate::job::FunctionName;

/// The three hashes of the schedules as read: definitions, inputs, next ticks.
type Stored = (
    Vec<(String, String)>,
    HashMap<String, Vec<u8>>,
    HashMap<String, u64>,
);

/// The most due schedules one scheduler pass takes.
const DUE_BATCH: usize = 100;

/// A schedule as listed: its definition, its next tick and its jobs' input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    /// What it is.
    pub def: ScheduleDef,
    /// Its next tick (ms, Redis clock); `None` while paused.
    pub next_ms: Option<u64>,
    /// Its jobs' input.
    pub input: Vec<u8>,
}

/// What one scheduler pass did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SchedulerPass {
    /// Jobs enqueued now (or found enqueued for their tick already), by schedule.
    pub fired: Vec<(String, Enqueued)>,
    /// Schedules whose missed ticks were skipped (`--catch-up none`).
    pub skipped: Vec<String>,
    /// Schedules that could not fire, and why.
    pub failed: Vec<(String, String)>,
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
        if input.len() > crate::client::MAX_INPUT_BYTES {
            return Err(QueueError::BadOption(format!(
                "an input of {} bytes is more than the limit of {}",
                input.len(),
                crate::client::MAX_INPUT_BYTES
            )));
        }
        job_options(&def, 0)?.validate()?;
        let now = self.redis_now_ms().await?;
        let next = match def.paused {
            true => None,
            false => Some(next_after(&def.recurrence, now)?),
        };
        let text = serde_json::to_string(&def).unwrap_or_default();
        let (status, created): (String, String) = scripts::SCHEDULE_SET
            .with_keys(&[
                ScheduleKeys::defs(),
                ScheduleKeys::inputs(),
                ScheduleKeys::next(),
            ])
            .arg(&def.name)
            .arg(text)
            .arg(input)
            .arg(next.map(|n| n.to_string()).unwrap_or_default())
            .arg(if replace { "1" } else { "0" })
            .invoke_async(&mut self.conn.clone())
            .await?;
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
        })
    }

    /// Every schedule, by name.
    pub async fn schedules(&self) -> Result<Vec<Schedule>> {
        let (defs, inputs, next): Stored = redis::pipe()
            .hgetall(ScheduleKeys::defs())
            .hgetall(ScheduleKeys::inputs())
            .cmd("ZRANGE")
            .arg(ScheduleKeys::next())
            .arg(0)
            .arg(-1)
            .arg("WITHSCORES")
            .query_async(&mut self.conn.clone())
            .await?;
        let mut list: Vec<Schedule> = defs
            .into_iter()
            .filter_map(|(name, text)| {
                let def: ScheduleDef = serde_json::from_str(&text).ok()?;
                Some(Schedule {
                    next_ms: next.get(&name).copied(),
                    input: inputs.get(&name).cloned().unwrap_or_default(),
                    def,
                })
            })
            .collect();
        list.sort_by(|a, b| a.def.name.cmp(&b.def.name));
        Ok(list)
    }

    /// Removes schedule `name` (the jobs it enqueued stay). Fails if there is none.
    pub async fn schedule_remove(&self, name: &str) -> Result<()> {
        let removed: i64 = scripts::SCHEDULE_REMOVE
            .with_keys(&[
                ScheduleKeys::defs(),
                ScheduleKeys::inputs(),
                ScheduleKeys::next(),
            ])
            .arg(name)
            .invoke_async(&mut self.conn.clone())
            .await?;
        match removed {
            0 => Err(no_such_schedule(name)),
            _ => Ok(()),
        }
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
            .with_keys(&[ScheduleKeys::defs(), ScheduleKeys::next()])
            .arg(name)
            .arg(if paused { "1" } else { "0" })
            .arg(next)
            .invoke_async(&mut self.conn.clone())
            .await?;
        match done {
            0 => Err(no_such_schedule(name)),
            _ => Ok(()),
        }
    }

    /// One pass of a worker's scheduler: fires every schedule due now (at most one job per
    /// tick whoever else fires it), and says when the next one is due.
    pub async fn run_due_schedules(&self) -> Result<SchedulerPass> {
        let reply: Vec<Vec<u8>> = scripts::SCHEDULE_DUE
            .with_keys(&[
                ScheduleKeys::defs(),
                ScheduleKeys::inputs(),
                ScheduleKeys::next(),
            ])
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
        for due in reply.get(2..).unwrap_or_default().chunks_exact(4) {
            let (name, tick) = (text(&due[0]), number(&due[1]).unwrap_or_default());
            match self.fire(&name, tick, now, &due[2], &due[3]).await {
                Ok(Some(enqueued)) => pass.fired.push((name, enqueued)),
                Ok(None) => pass.skipped.push(name),
                Err(QueueError::Redis(e)) => return Err(e.into()),
                Err(error) => pass.failed.push((name, error.to_string())),
            }
        }
        Ok(pass)
    }

    /// Fires schedule `name`, due at `tick`, at `now`: enqueues the tick's job (unless its
    /// missed ticks are skipped), then moves the schedule on.
    async fn fire(
        &self,
        name: &str,
        tick: u64,
        now: u64,
        def: &[u8],
        input: &[u8],
    ) -> Result<Option<Enqueued>> {
        let def: ScheduleDef = serde_json::from_slice(def).map_err(|e| {
            QueueError::BadOption(format!("schedule {name} has an unreadable definition: {e}"))
        })?;
        let firing = def
            .recurrence
            .firing(tick, now, def.catch_up)
            .map_err(bad)?;
        let function = FunctionName::new(&def.function)?;
        let enqueued = match firing.and_then(|f| f.fire) {
            Some(at) => self
                .submit(&function, &[(input, job_options(&def, at)?)])
                .await?
                .into_iter()
                .next(),
            None => None,
        };
        // A schedule that never ticks again is left where it is (listed, never due again
        // once its tick is past: it is moved far ahead).
        let next = firing.map_or(u64::MAX / 2, |f| f.next);
        let _: i64 = scripts::SCHEDULE_ADVANCE
            .with_keys(&[ScheduleKeys::next()])
            .arg(name)
            .arg(tick)
            .arg(next)
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok(enqueued)
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
