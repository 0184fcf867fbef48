//! What a job is enqueued with: [`EnqueueOptions`], its [`Priority`] and [`Tick`], and
//! the bounds they are checked against before anything is sent (from
//! `wasmgear_proto::limits`, the one home of every limit).

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::{QueueError, Result};
pub use wasmgear_proto::{DEFAULT_MAX_ATTEMPTS, DEFAULT_TIMEOUT};
use wasmgear_proto::{JobId, OnFailure};

/// How long a finished job is kept when the client does not say (GearMonkey's 25 hours).
pub const DEFAULT_RETENTION: Duration =
    Duration::from_millis(wasmgear_proto::limits::DEFAULT_RETENTION_MS);
/// How long a failed job is kept when the client does not say: a week, so that someone
/// can look at it and retry it.
pub const DEFAULT_FAILED_RETENTION: Duration =
    Duration::from_millis(wasmgear_proto::limits::DEFAULT_FAILED_RETENTION_MS);
/// The most tags one job may have.
pub const MAX_TAGS: usize = wasmgear_proto::limits::MAX_TAGS as usize;
/// The most dependencies one job may have.
pub const MAX_DEPENDENCIES: usize = wasmgear_proto::limits::MAX_DEPENDENCIES as usize;
/// The longest uniq key or tag, in bytes.
pub const MAX_KEY_BYTES: usize = wasmgear_proto::limits::MAX_KEY_BYTES as usize;
/// The largest input accepted, in bytes.
pub const MAX_INPUT_BYTES: usize = wasmgear_proto::limits::MAX_INPUT_BYTES as usize;
/// The most attempts a job may be given.
pub const MAX_ATTEMPTS_LIMIT: u32 = wasmgear_proto::limits::MAX_ATTEMPTS as u32;
/// The longest timeout, retention or delay accepted (10 years).
pub const MAX_DURATION: Duration = Duration::from_millis(wasmgear_proto::limits::MAX_DURATION_MS);

/// A job's priority: higher runs first; FIFO within one priority.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Priority(i32);

impl Priority {
    /// The lowest priority.
    pub const MIN: i32 = wasmgear_proto::limits::MIN_PRIORITY as i32;
    /// The highest priority.
    pub const MAX: i32 = wasmgear_proto::limits::MAX_PRIORITY as i32;
    /// `low`.
    pub const LOW: Priority = Priority(wasmgear_proto::limits::PRIORITY_LOW as i32);
    /// `normal`, the default.
    pub const NORMAL: Priority = Priority(0);
    /// `high`.
    pub const HIGH: Priority = Priority(wasmgear_proto::limits::PRIORITY_HIGH as i32);

    /// A numeric priority, checked against [`Priority::MIN`]..=[`Priority::MAX`].
    pub fn new(value: i32) -> Result<Self> {
        if (Self::MIN..=Self::MAX).contains(&value) {
            Ok(Priority(value))
        } else {
            Err(QueueError::BadOption(format!(
                "priority {value} is out of range {}..={}",
                Self::MIN,
                Self::MAX
            )))
        }
    }

    /// The numeric value.
    pub fn value(self) -> i32 {
        self.0
    }
}

impl FromStr for Priority {
    type Err = QueueError;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "low" => Ok(Self::LOW),
            "normal" => Ok(Self::NORMAL),
            "high" => Ok(Self::HIGH),
            other => other
                .parse::<i32>()
                .map_err(|_| {
                    QueueError::BadOption(format!(
                        "priority {other:?} is neither low, normal, high nor a number"
                    ))
                })
                .and_then(Priority::new),
        }
    }
}

impl fmt::Display for Priority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// How a job is to be run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnqueueOptions {
    /// Higher runs first.
    pub priority: Priority,
    /// Attempts in all, retries included (>= 1); `None`: the serving plugin's default
    /// (its manifest's `max_attempts`, else [`DEFAULT_MAX_ATTEMPTS`]).
    pub max_attempts: Option<u32>,
    /// How long one attempt may run; `None`: the serving plugin's default (its manifest's
    /// `timeout`, else [`DEFAULT_TIMEOUT`]).
    pub timeout: Option<Duration>,
    /// How long the finished job (and its output) is kept.
    pub retention: Duration,
    /// How long the job is kept if it fails for good (the longer of this and `retention`
    /// applies).
    pub failed_retention: Duration,
    /// How long to wait before the job may run (zero: at once).
    pub delay: Duration,
    /// The time before which the job may not run (queue clock); must not be in the past.
    /// Not together with `delay`.
    pub at: Option<SystemTime>,
    /// Gearman's unique key: while an unfinished job of the same function holds this key,
    /// enqueueing returns that job instead of a new one.
    pub uniq: Option<String>,
    /// Tags to find the job by (qless).
    pub tags: Vec<String>,
    /// Jobs (of any function) that must succeed before this one runs (qless). If one of them
    /// fails or is cancelled, this job is cancelled.
    pub after: Vec<JobId>,
    /// The policies of those of `after` whose failure (or cancellation, or absence) does not
    /// cancel this job: [`OnFailure::Ignore`] or [`OnFailure::Continue`]. Each must be in
    /// `after`; the others' is [`OnFailure::Cancel`].
    pub on_failure: BTreeMap<JobId, OnFailure>,
    /// The tick of a recurring schedule this job is for: the queue enqueues no job for a
    /// tick of that schedule it has had (or one earlier), and returns that job instead.
    pub tick: Option<Tick>,
    /// The job that enqueues this one as its child (see [`Client::enqueue_child`](crate::Client::enqueue_child)).
    pub parent: Option<JobId>,
    /// A key enqueued once ever: enqueueing again with it returns the first job instead.
    pub once: Option<String>,
    /// The job's group (a tenant, customer or document key): the function's ready jobs are
    /// leased round robin across their groups, each within its own limits (see
    /// [`Admin::configure_group`](crate::Admin::configure_group)); jobs without one form a
    /// group of their own.
    pub group: Option<String>,
    /// With `uniq`: once the job holding the key has succeeded, the key goes on answering
    /// with it for this long (the same work is not done twice within the window).
    pub uniq_for: Option<Duration>,
    /// With `uniq`: the job waits this long; enqueued again with the key before it has
    /// started, that job takes the new input and waits this long again (the last one of a
    /// burst runs, once it has been quiet for this long).
    pub debounce: Option<Duration>,
    /// With `uniq`: at most this many jobs are made with the key per this long; beyond, the
    /// latest one made is returned (and the key does not join unfinished jobs).
    pub throttle: Option<(u64, Duration)>,
    /// A job that has not started this long after it was enqueued (queue clock) ends
    /// `expired` and never runs: stale work is worse than none.
    pub expires_in: Option<Duration>,
    /// The same as a time (queue clock); must not have passed. Not with `expires_in`.
    pub expires_at: Option<SystemTime>,
    /// The W3C trace context the job carries to its worker, whose spans for it join that
    /// trace. `None`: the client's own `send` span's when `tracing-opentelemetry` exports
    /// it, else the current OpenTelemetry context's, else none.
    pub trace: Option<wasmgear_proto::TraceContext>,
}

/// How [`crate::Client::retry_with`] runs a job again.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RetryOptions {
    /// Drop the job's checkpoint, so that it starts from the beginning instead of resuming
    /// where its last attempt saved one.
    pub fresh: bool,
}

impl RetryOptions {
    /// The arguments `retry` takes after the job or group: `fresh`, or none.
    pub(crate) fn args(self) -> &'static [&'static str] {
        if self.fresh { &["fresh"] } else { &[] }
    }
}

/// A tick of a recurring schedule (see [`EnqueueOptions::tick`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tick {
    /// The schedule's name.
    pub schedule: String,
    /// The tick's time, ms since the epoch (Redis clock).
    pub at_ms: u64,
}

impl Default for EnqueueOptions {
    fn default() -> Self {
        EnqueueOptions {
            priority: Priority::NORMAL,
            max_attempts: None,
            timeout: None,
            retention: DEFAULT_RETENTION,
            failed_retention: DEFAULT_FAILED_RETENTION,
            delay: Duration::ZERO,
            at: None,
            uniq: None,
            tags: Vec::new(),
            after: Vec::new(),
            on_failure: BTreeMap::new(),
            tick: None,
            parent: None,
            once: None,
            group: None,
            uniq_for: None,
            debounce: None,
            throttle: None,
            expires_in: None,
            expires_at: None,
            trace: None,
        }
    }
}

impl EnqueueOptions {
    /// Checks every option, naming the first one out of range.
    pub fn validate(&self) -> Result<()> {
        // (`at` in the past is refused by the enqueue script, against the queue's clock.)
        let bad = |what: String| Err(QueueError::BadOption(what));
        if let Some(attempts) = self.max_attempts
            && !(1..=MAX_ATTEMPTS_LIMIT).contains(&attempts)
        {
            return bad(format!(
                "max attempts {attempts} is out of range 1..={MAX_ATTEMPTS_LIMIT}"
            ));
        }
        if let Some(timeout) = self.timeout
            && (timeout < Duration::from_millis(1) || timeout > MAX_DURATION)
        {
            return bad(format!(
                "timeout {timeout:?} is out of range 1ms..=10 years"
            ));
        }
        if self.retention < Duration::from_millis(wasmgear_proto::limits::MIN_RETENTION_MS)
            || self.retention > MAX_DURATION
        {
            return bad(format!(
                "retention {:?} is out of range 1s..=10 years",
                self.retention
            ));
        }
        if self.failed_retention > MAX_DURATION {
            return bad(format!(
                "failed retention {:?} is longer than 10 years",
                self.failed_retention
            ));
        }
        if let Some(uniq) = &self.uniq {
            check_key("uniq key", uniq)?;
        }
        if let Some(group) = &self.group {
            check_group(group)?;
        }
        self.check_dedup()?;
        if self.expires_in.is_some() && self.expires_at.is_some() {
            return bad("give expires_in or expires_at, not both".into());
        }
        if self
            .expires_in
            .is_some_and(|d| d < Duration::from_millis(1) || d > MAX_DURATION)
        {
            return bad("expires_in must be 1ms to 10 years".into());
        }
        if self.expires_at.is_some_and(|at| system_time_ms(at) == 0) {
            return bad("expires_at is not after 1970".into());
        }
        if self.expires_at.is_some_and(|at| {
            system_time_ms(at) > wasmgear_proto::units::now_ms() + MAX_DURATION.as_millis() as u64
        }) {
            return Err(QueueError::Conflict(
                "invalid job option: expires_at is more than 10 years ahead; give a nearer one"
                    .into(),
            ));
        }
        if self.tags.len() > MAX_TAGS {
            return bad(format!(
                "{} tags are more than the limit of {MAX_TAGS}",
                self.tags.len()
            ));
        }
        for tag in &self.tags {
            check_key("tag", tag)?;
        }
        if self.after.len() > MAX_DEPENDENCIES {
            return bad(format!(
                "{} dependencies are more than the limit of {MAX_DEPENDENCIES}",
                self.after.len()
            ));
        }
        if let Some(id) = self.on_failure.keys().find(|id| !self.after.contains(id)) {
            return bad(format!(
                "on_failure names {id}, which is not a dependency (add it to after)"
            ));
        }
        if self.delay > MAX_DURATION {
            return bad(format!("delay {:?} is longer than 10 years", self.delay));
        }
        if self.at.is_some() && !self.delay.is_zero() {
            return bad("give a delay or a time to run at, not both".to_string());
        }
        if let Some(at) = self.at {
            let ms = at
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_millis())
                .unwrap_or(0);
            if ms == 0 {
                return bad("the time to run at is not after 1970".into());
            }
            // Too far ahead by this clock: a conflict with the time, as a time already
            // passed by the queue's clock is.
            if ms > (wasmgear_proto::units::now_ms() as u128) + MAX_DURATION.as_millis() {
                return Err(QueueError::Conflict(
                    "invalid job option: the time to run at is more than 10 years ahead; give a nearer one".into(),
                ));
            }
        }
        Ok(())
    }
}

impl EnqueueOptions {
    /// Checks `uniq_for`, `debounce` and `throttle`: each with `uniq`, one at most, within
    /// bounds; `debounce` without a delay or time to run at (it is the delay).
    fn check_dedup(&self) -> Result<()> {
        let bad = |what: &str| Err(QueueError::BadOption(what.to_string()));
        let modes = [
            self.uniq_for.is_some(),
            self.debounce.is_some(),
            self.throttle.is_some(),
        ];
        let given = modes.iter().filter(|m| **m).count();
        if given > 0 && self.uniq.is_none() {
            return bad("uniq_for, debounce and throttle work on a uniq key: give uniq too");
        }
        if given > 1 {
            return bad("give one of uniq_for, debounce and throttle");
        }
        let in_range = |d: Duration| d >= Duration::from_millis(1) && d <= MAX_DURATION;
        if self.uniq_for.is_some_and(|d| !in_range(d)) {
            return bad("uniq_for must be 1ms to 10 years");
        }
        if self.debounce.is_some_and(|d| !in_range(d)) {
            return bad("debounce must be 1ms to 10 years");
        }
        if self.debounce.is_some() && (!self.delay.is_zero() || self.at.is_some()) {
            return bad("debounce is the job's delay: give no delay or time to run at with it");
        }
        if let Some((n, every)) = self.throttle
            && (n == 0 || n > wasmgear_proto::limits::MAX_WHOLE || !in_range(every))
        {
            return bad("throttle must be 1 or more jobs per 1ms to 10 years");
        }
        Ok(())
    }
}

/// Checks a uniq key or tag: 1 to [`MAX_KEY_BYTES`] bytes, no control characters.
pub fn check_key(what: &str, key: &str) -> Result<()> {
    if key.is_empty() || key.len() > MAX_KEY_BYTES {
        return Err(QueueError::BadOption(format!(
            "{what} {key:?} must be 1 to {MAX_KEY_BYTES} bytes long"
        )));
    }
    if key.chars().any(char::is_control) {
        return Err(QueueError::BadOption(format!(
            "{what} {key:?} contains a control character"
        )));
    }
    Ok(())
}

/// Checks a group key: 1 to [`MAX_KEY_BYTES`] bytes of printable ASCII but space, `"`, `\`
/// and `|` (the queue keeps it as is in its records and indexes).
pub fn check_group(group: &str) -> Result<()> {
    if group.is_empty() || group.len() > MAX_KEY_BYTES {
        return Err(QueueError::BadOption(format!(
            "group {group:?} must be 1 to {MAX_KEY_BYTES} bytes long"
        )));
    }
    if let Some(c) = group
        .chars()
        .find(|c| !c.is_ascii_graphic() || matches!(c, '"' | '\\' | '|'))
    {
        return Err(QueueError::BadOption(format!(
            "group {group:?} holds {c:?}: a group key is printable ASCII without spaces, '\"', '\\' or '|'"
        )));
    }
    Ok(())
}

/// Milliseconds since the Unix epoch of `time` (0 before 1970).
pub(crate) fn system_time_ms(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
