//! The job record as stored in Redis, and what a status query returns.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::job::{JobId, Progress};

/// Where a job is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JobState {
    /// Waiting in the ready set for a worker.
    Queued,
    /// Waiting for its time: delayed, or backing off before a retry.
    Scheduled,
    /// Waiting for its dependencies to succeed.
    Waiting,
    /// Leased by a worker and running.
    Running,
    /// Finished with an output.
    Succeeded,
    /// Finished without an output, for good.
    Failed,
    /// Cancelled before it finished.
    Cancelled,
    /// Not started by its deadline (`expires_ms`): it never ran.
    Expired,
}

impl JobState {
    /// Whether the job has ended (and will not change again).
    pub fn is_final(self) -> bool {
        matches!(
            self,
            JobState::Succeeded | JobState::Failed | JobState::Cancelled | JobState::Expired
        )
    }

    /// The state's name as stored.
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Queued => "queued",
            JobState::Scheduled => "scheduled",
            JobState::Waiting => "waiting",
            JobState::Running => "running",
            JobState::Succeeded => "succeeded",
            JobState::Failed => "failed",
            JobState::Cancelled => "cancelled",
            JobState::Expired => "expired",
        }
    }
}

impl std::str::FromStr for JobState {
    type Err = String;
    /// Reads a state's name as stored; the error names what was found.
    fn from_str(text: &str) -> Result<Self, String> {
        Ok(match text {
            "queued" => JobState::Queued,
            "scheduled" => JobState::Scheduled,
            "waiting" => JobState::Waiting,
            "running" => JobState::Running,
            "succeeded" => JobState::Succeeded,
            "failed" => JobState::Failed,
            "cancelled" => JobState::Cancelled,
            "expired" => JobState::Expired,
            _ => return Err(format!("{text:?} is not a job state")),
        })
    }
}

impl fmt::Display for JobState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The error a failed attempt left.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredError {
    /// The error class (the failure group): `guest-error`, `trap`, `timed-out`, ...
    pub class: String,
    /// What went wrong.
    pub message: String,
}

/// One attempt of a job, as kept in its history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attempt {
    /// Which attempt (1-based).
    pub attempt: u32,
    /// The worker that ran it.
    #[serde(default)]
    pub worker: Option<String>,
    /// When it started, ms since the epoch.
    #[serde(default)]
    pub started_ms: Option<u64>,
    /// When it ended, ms since the epoch.
    pub ended_ms: u64,
    /// `succeeded`, or the error class it ended with.
    pub outcome: String,
    /// The error message, for failed attempts.
    #[serde(default)]
    pub message: Option<String>,
    /// The version (content hash prefix) of the plugin that ran the attempt.
    #[serde(default)]
    pub version: Option<String>,
}

/// A job's record in `wg:{F}:jobs` (JSON written by the Lua scripts).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobRecord {
    /// Where the job is in its life.
    pub state: JobState,
    /// Higher runs first; -1000..=1000.
    pub priority: i32,
    /// Attempts started so far.
    pub attempt: u32,
    /// Attempts allowed in all.
    pub max_attempts: u32,
    /// How long one attempt may run, ms.
    pub timeout_ms: u64,
    /// How long the finished job is kept, ms.
    pub retention_ms: u64,
    /// How long the job is kept if it fails, ms (the longer of this and `retention_ms`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_retention_ms: Option<u64>,
    /// The uniq key the job holds while unfinished: enqueueing another job of the function
    /// with the same key returns this one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uniq: Option<String>,
    /// Its deadline (ms since the epoch): not started by then, it ends `expired`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_ms: Option<u64>,
    /// The job's group (a tenant, customer or document key): see `EnqueueOptions::group`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_id: Option<String>,
    /// The W3C traceparent of the span the job was enqueued in (its worker's spans join that
    /// trace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<String>,
    /// The W3C tracestate that came with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracestate: Option<String>,
    /// The job that enqueued this one as its child.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// The jobs this one enqueued as its children, in order.
    #[serde(
        default,
        deserialize_with = "lua_array",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub children: Vec<String>,
    /// The recurring schedule whose tick enqueued the job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<String>,
    /// That tick's time, ms since the epoch (Redis clock).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tick_ms: Option<u64>,
    /// The job's tags.
    #[serde(
        default,
        deserialize_with = "lua_array",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub tags: Vec<String>,
    /// The jobs that had to succeed before this one could run.
    #[serde(
        default,
        deserialize_with = "lua_array",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub after: Vec<String>,
    /// The policies of those whose failure does not cancel this job (dependency id →
    /// `ignore` or `continue`; the others' is `cancel`).
    #[serde(
        default,
        deserialize_with = "lua_map",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub on_failure: BTreeMap<String, OnFailure>,
    /// The flow the job belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flow: Option<u64>,
    /// The batch the job belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch: Option<String>,
    /// Of those, the ones that have not succeeded yet (while `waiting`).
    #[serde(
        default,
        deserialize_with = "lua_array",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub waiting_on: Vec<String>,
    /// The jobs waiting on this one.
    #[serde(
        default,
        deserialize_with = "lua_array",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub dependents: Vec<String>,
    /// When it was enqueued, ms since the epoch (queue clock).
    pub created_ms: u64,
    /// For a scheduled job: when it becomes ready.
    #[serde(default)]
    pub run_at_ms: Option<u64>,
    /// When the current or last attempt started.
    #[serde(default)]
    pub started_ms: Option<u64>,
    /// When the job ended.
    #[serde(default)]
    pub finished_ms: Option<u64>,
    /// The worker holding the lease, while running.
    #[serde(default)]
    pub worker: Option<String>,
    /// The lease's expiry, while running.
    #[serde(default)]
    pub lease_until_ms: Option<u64>,
    /// The last progress reported by the current attempt.
    #[serde(default)]
    pub progress: Option<Progress>,
    /// How many progress reports the job has made over all its attempts.
    #[serde(default)]
    pub progress_seq: u64,
    /// The last error.
    #[serde(default)]
    pub error: Option<StoredError>,
    /// When a client asked to cancel the job while it ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancel_requested_ms: Option<u64>,
    /// The checkpoint the job keeps for its next attempt to resume from, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<CheckpointInfo>,
    /// Every ended attempt, oldest first.
    #[serde(default, deserialize_with = "lua_array")]
    pub history: Vec<Attempt>,
}

/// A job's checkpoint, as its record tells of it (the bytes are read apart).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointInfo {
    /// Its size in bytes.
    pub bytes: u64,
    /// When it was saved, ms since the epoch (queue clock).
    pub ms: u64,
}

/// What becomes of a job when one of its dependencies fails, is cancelled or is gone: the
/// policy of that edge.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnFailure {
    /// The job is cancelled (the default).
    #[default]
    Cancel,
    /// The job runs without it (when its other dependencies let it), and reads it as failed,
    /// with its error where its output would be.
    Ignore,
    /// The job runs once every one of its dependencies has ended, whatever became of them.
    Continue,
}

impl OnFailure {
    /// The policy's name, as flows and the API write it.
    pub fn as_str(self) -> &'static str {
        match self {
            OnFailure::Cancel => "cancel",
            OnFailure::Ignore => "ignore",
            OnFailure::Continue => "continue",
        }
    }
}

impl fmt::Display for OnFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for OnFailure {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "cancel" => Ok(OnFailure::Cancel),
            "ignore" => Ok(OnFailure::Ignore),
            "continue" => Ok(OnFailure::Continue),
            other => Err(format!(
                "on_failure {other:?} is none of cancel, ignore and continue"
            )),
        }
    }
}

/// Lua's cjson writes an empty table as `[]` or `{}`; read either as an empty map.
fn lua_map<'de, D, T>(d: D) -> Result<BTreeMap<String, T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum MapOrEmpty<T> {
        Map(BTreeMap<String, T>),
        Empty([(); 0]),
    }
    Ok(match MapOrEmpty::deserialize(d)? {
        MapOrEmpty::Map(map) => map,
        MapOrEmpty::Empty(_) => BTreeMap::new(),
    })
}

/// Lua's cjson writes an empty table as `{}`; read that as an empty list.
fn lua_array<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum ListOrEmpty<T> {
        List(Vec<T>),
        Empty {},
    }
    Ok(match ListOrEmpty::deserialize(d)? {
        ListOrEmpty::List(list) => list,
        ListOrEmpty::Empty {} => Vec::new(),
    })
}

/// Everything known about a job: its record, and its output once it succeeded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct JobStatus {
    /// The job's id.
    pub id: JobId,
    /// The stored record.
    #[serde(flatten)]
    pub record: JobRecord,
    /// The output bytes of a succeeded job.
    #[serde(skip)]
    pub output: Option<Vec<u8>>,
}
