//! The shared vocabulary of a job: names, ids, progress, outcomes and error classes.
//!
//! Both the queue (which stores jobs) and the runtime (which runs them) speak these types,
//! so this module depends on neither.

use std::fmt;
use std::str::FromStr;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// Attempts a job gets when neither its client nor its plugin says.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 3;
/// How long one attempt may run when neither its client nor its plugin says.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// The longest function name accepted, in bytes.
pub const MAX_FUNCTION_NAME_LEN: usize = crate::limits::MAX_FUNCTION_NAME_LEN as usize;

/// Why a name or id given by a user was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    /// The function name is empty, too long or has a character outside `[A-Za-z0-9_.-]`.
    #[error(
        "invalid function name {0:?}: use 1 to {MAX_FUNCTION_NAME_LEN} characters from A-Z, a-z, 0-9, '_', '-' and '.'"
    )]
    Function(String),
    /// The job id is not of the form `FUNCTION:NUMBER`.
    #[error("invalid job id {0:?}: a job id looks like `echo:42` (function, colon, number)")]
    JobId(String),
}

/// The name of a function: which plugin serves a job. Also the Redis hash tag of its keys.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct FunctionName(String);

impl FunctionName {
    /// Checks `name` and wraps it.
    pub fn new(name: impl Into<String>) -> Result<Self, NameError> {
        let name = name.into();
        let valid = !name.is_empty()
            && name.len() <= MAX_FUNCTION_NAME_LEN
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
        if valid {
            Ok(Self(name))
        } else {
            Err(NameError::Function(name))
        }
    }

    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for FunctionName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for FunctionName {
    type Err = NameError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::new(s)
    }
}

impl TryFrom<String> for FunctionName {
    type Error = NameError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        Self::new(s)
    }
}

impl From<FunctionName> for String {
    fn from(name: FunctionName) -> String {
        name.0
    }
}

/// A job's id: its function and its sequence number within that function, written
/// `function:number`. The id alone is enough to find the job.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct JobId {
    /// The function the job was enqueued for.
    pub function: FunctionName,
    /// The job's number, counted per function from 1.
    pub seq: u64,
}

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.function, self.seq)
    }
}

impl FromStr for JobId {
    type Err = NameError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || NameError::JobId(s.to_string());
        let (function, seq) = s.rsplit_once(':').ok_or_else(bad)?;
        let function = FunctionName::new(function).map_err(|_| bad())?;
        if seq.is_empty() || !seq.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        let seq = seq.parse().map_err(|_| bad())?;
        if seq == 0 {
            return Err(bad());
        }
        Ok(JobId { function, seq })
    }
}

impl Serialize for JobId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for JobId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// A progress report: `done` of `total` units, with an optional message.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Progress {
    /// Units of work finished.
    #[serde(deserialize_with = "whole_number")]
    pub done: u64,
    /// Units of work in all; 0 when unknown.
    #[serde(deserialize_with = "whole_number")]
    pub total: u64,
    /// A short human-readable note ("page 3 of 10").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// A `u64` written as a JSON number or as a decimal string (the queue stores large counts as
/// strings so that no digit is lost).
pub fn whole_number<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Whole {
        Number(u64),
        Text(String),
    }
    match Whole::deserialize(d)? {
        Whole::Number(n) => Ok(n),
        Whole::Text(text) => text.parse().map_err(|_| {
            serde::de::Error::custom(format!("{text:?} is not a whole number from 0 to 2^64-1"))
        }),
    }
}

/// How important a log line from a job is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogLevel {
    /// Very detailed tracing.
    Trace,
    /// Debugging detail.
    Debug,
    /// Normal operation.
    Info,
    /// Something unexpected that was handled.
    Warn,
    /// Something failed.
    Error,
}

/// What a job needs to know about itself while it runs (mirrors the WIT `job-info`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobInfo {
    /// The job's id.
    pub id: JobId,
    /// 1 for the first attempt, 2 for the first retry, ...
    pub attempt: u32,
    /// How many attempts the job may have in all.
    pub max_attempts: u32,
    /// When the job was enqueued, in ms since the Unix epoch (queue clock).
    pub enqueued_at_ms: u64,
    /// How long the job may run, in ms.
    pub timeout_ms: u64,
    /// The trace the job runs in: its producer's context as the queue stored it, or (on a
    /// worker that exports spans) the context of the attempt's own span.
    pub trace: Option<crate::TraceContext>,
}

/// The class of a failure: what kind of thing went wrong. Failed jobs are grouped by it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ErrorClass {
    /// The handler returned an error.
    GuestError,
    /// The guest trapped (a panic, `unreachable`, a stack overflow, ...).
    Trap,
    /// The job ran past its deadline and was stopped.
    TimedOut,
    /// The guest asked for more memory than its limit allows.
    MemoryLimit,
    /// The guest used up its fuel (instruction budget).
    OutOfFuel,
    /// The guest returned an output larger than the limit.
    OutputTooLarge,
    /// The job was cancelled.
    Cancelled,
    /// The worker lost the job's lease (it expired or was taken over).
    LeaseLost,
    /// No plugin serves the job's function on this worker.
    PluginMissing,
    /// The plugin could not be instantiated for this job.
    PluginInvalid,
    /// The job's encrypted input could not be opened on this worker (no key file, a key
    /// it lacks, or data that was changed): another worker may hold the key.
    Undecryptable,
}

impl ErrorClass {
    /// The class's name as stored and shown: `guest-error`, `timed-out`, ...
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorClass::GuestError => "guest-error",
            ErrorClass::Trap => "trap",
            ErrorClass::TimedOut => "timed-out",
            ErrorClass::MemoryLimit => "memory-limit",
            ErrorClass::OutOfFuel => "out-of-fuel",
            ErrorClass::OutputTooLarge => "output-too-large",
            ErrorClass::Cancelled => "cancelled",
            ErrorClass::LeaseLost => "lease-lost",
            ErrorClass::PluginMissing => "plugin-missing",
            ErrorClass::PluginInvalid => "plugin-invalid",
            ErrorClass::Undecryptable => "undecryptable",
        }
    }
}

impl fmt::Display for ErrorClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a run produced no output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobFailure {
    /// What kind of failure it was.
    pub class: ErrorClass,
    /// What went wrong, in words.
    pub message: String,
    /// Whether another attempt may succeed.
    pub retryable: bool,
}

impl JobFailure {
    /// A failure of `class` with `message`; whether it is retryable follows from the class.
    pub fn new(class: ErrorClass, message: impl Into<String>) -> Self {
        let retryable = matches!(
            class,
            ErrorClass::Trap
                | ErrorClass::TimedOut
                | ErrorClass::MemoryLimit
                | ErrorClass::LeaseLost
                | ErrorClass::PluginMissing
                | ErrorClass::Undecryptable
        );
        JobFailure {
            class,
            message: message.into(),
            retryable,
        }
    }
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The handler returned these output bytes.
    Succeeded(Vec<u8>),
    /// The handler did not produce an output.
    Failed(JobFailure),
}

/// A job leased to a worker: what to run and the token that proves the lease.
#[derive(Debug, Clone)]
pub struct Lease {
    /// The job's metadata.
    pub info: JobInfo,
    /// The job's input bytes.
    pub input: Vec<u8>,
    /// The fencing token: only the holder of the current token can finish the job.
    pub token: String,
    /// When the lease runs out unless renewed, by this machine's clock, counted from when
    /// the lease call was sent (never later than the queue's own expiry): the worker must
    /// not run the job past it.
    pub expires: Instant,
    /// How long each renewal lasts: the worker renews every third of it. Usually the TTL
    /// the worker asked for; a protocol with its own setting (qless' `heartbeat`) says so.
    pub ttl: Duration,
}

/// What a worker asks of one function when it leases.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseRequest {
    /// The function.
    pub function: FunctionName,
    /// The most jobs of it to lease now.
    pub max: usize,
    /// The timeout of jobs enqueued without one.
    pub default_timeout_ms: u64,
    /// The attempts of jobs enqueued without a number.
    pub default_max_attempts: u32,
    /// Whether the queue may hand the function's next jobs to this worker without a lease
    /// call when it finds none now (a batch plugin's jobs are gathered by lease calls only).
    pub hand_off: bool,
}

impl LeaseRequest {
    /// Asks for any number of jobs of `function`, with the queue-wide defaults.
    pub fn new(function: FunctionName) -> Self {
        LeaseRequest {
            function,
            max: usize::MAX,
            default_timeout_ms: DEFAULT_TIMEOUT.as_millis() as u64,
            default_max_attempts: DEFAULT_MAX_ATTEMPTS,
            hand_off: true,
        }
    }
}

/// What the worker tells the queue about an attempt besides its result.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AttemptNotes {
    /// What the attempt logged and printed.
    pub log: String,
    /// The version (content hash) of the plugin that ran it.
    pub plugin_version: Option<String>,
}

/// What a heartbeat learned about a lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseStatus {
    /// Still held, and renewed.
    Held,
    /// Still held and renewed, but a client asked for the job to be cancelled.
    CancelRequested,
    /// No longer held: stop the job, its result would be refused.
    Lost,
}

/// A source's request to cancel a running job. `token_prefix` narrows it to the leases whose
/// token starts with it: a worker serving several sources tells their jobs apart by token,
/// as two sources may number jobs of one function alike.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CancelRequest {
    /// The job.
    pub job: JobId,
    /// Only leases whose token starts with this (empty: any).
    pub token_prefix: String,
}

impl CancelRequest {
    /// Cancels `job`, whatever lease runs it.
    pub fn any(job: JobId) -> Self {
        CancelRequest {
            job,
            token_prefix: String::new(),
        }
    }

    /// Whether it is meant for the job `job` run under lease `token`.
    pub fn matches(&self, job: &JobId, token: &str) -> bool {
        self.job == *job && token.starts_with(&self.token_prefix)
    }
}

/// The answer to `complete`, `fail` or `release`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Completion {
    /// Accepted; the job is now in this state (`succeeded`, `scheduled` for a retry,
    /// `failed`, `cancelled`, or `queued` after a release).
    Accepted(crate::model::JobState),
    /// Refused: this worker no longer holds the job's lease; nothing changed.
    Stale,
    /// Refused: the job does not exist (any more).
    Missing,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cancel_requests_reach_only_the_leases_they_name() {
        let job: JobId = "echo:1".parse().unwrap();
        let other: JobId = "echo:2".parse().unwrap();
        let any = CancelRequest::any(job.clone());
        assert!(any.matches(&job, "0/w1:abc"));
        assert!(!any.matches(&other, "0/w1:abc"));
        let scoped = CancelRequest {
            job: job.clone(),
            token_prefix: "0/".into(),
        };
        assert!(scoped.matches(&job, "0/w1:abc"));
        assert!(
            !scoped.matches(&job, "1/w1:3:1"),
            "the same id from another source"
        );
    }

    #[test]
    fn job_ids_round_trip_and_bad_ones_are_refused() {
        let id: JobId = "resize.v2:42".parse().unwrap();
        assert_eq!(id.function.as_str(), "resize.v2");
        assert_eq!(id.seq, 42);
        assert_eq!(id.to_string(), "resize.v2:42");
        for bad in [
            "", "echo", "echo:", ":3", "echo:0", "echo:-1", "ec ho:1", "echo:1x", "a{b}:1",
        ] {
            assert!(bad.parse::<JobId>().is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn function_names_exclude_hash_tag_characters() {
        assert!(FunctionName::new("echo").is_ok());
        assert!(FunctionName::new("a".repeat(MAX_FUNCTION_NAME_LEN)).is_ok());
        assert!(FunctionName::new("a".repeat(MAX_FUNCTION_NAME_LEN + 1)).is_err());
        for bad in ["", "{echo}", "echo:1", "é", "a b"] {
            assert!(FunctionName::new(bad).is_err(), "{bad:?} accepted");
        }
    }
}
