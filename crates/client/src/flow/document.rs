//! A flow as JSON: what `POST /v1/flows` takes, what `wasmgear flow submit` reads (JSON, or
//! TOML of the same shape), and what the Python and Node clients send:
//!
//! ```json
//! {"name": "album",
//!  "jobs": {"a": {"function": "reverse", "input": "abc"},
//!           "b": {"function": "reverse", "input": "xyz"},
//!           "c": {"function": "join", "after": ["a", {"job": "b", "on_failure": "ignore"}]}}}
//! ```
//!
//! A job takes the HTTP API's job fields (`input`, `input_base64` or `input_json`;
//! `priority`, `delay_ms`, `at_ms`, `attempts`, `timeout_ms`, `retention_ms`,
//! `failed_retention_ms`, `tags`), its `function`, and `after`: names of jobs of the flow, or
//! ids (`FUNCTION:NUMBER`) of jobs outside it, each a string or `{"job": ..., "on_failure":
//! "cancel" | "ignore" | "continue"}`.

use std::collections::BTreeMap;
use std::time::{Duration, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde::Deserialize;
use serde_json::Value;
use wasmgear_proto::{FunctionName, JobId, OnFailure};

use super::{Flow, FlowEdge, FlowJob};
use crate::options::{EnqueueOptions, Priority};
use crate::{QueueError, Result};

/// A flow as JSON.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FlowDocument {
    /// What the flow is called.
    pub name: String,
    /// Its jobs by name (1 to 200 letters, digits, `_`, `-` or `.`).
    pub jobs: BTreeMap<String, FlowJobDocument>,
}

/// One job of a [`FlowDocument`].
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FlowJobDocument {
    /// The function that runs it.
    pub function: String,
    /// The input as text (UTF-8).
    pub input: Option<String>,
    /// The input as base64 bytes.
    pub input_base64: Option<String>,
    /// The input as any JSON value (the job gets its compact JSON text).
    pub input_json: Option<Value>,
    /// Higher runs first.
    pub priority: Option<i32>,
    /// Run no sooner than this many ms after it is written (not with `at_ms`).
    pub delay_ms: Option<u64>,
    /// Run no sooner than this time, ms since the epoch.
    pub at_ms: Option<u64>,
    /// Attempts in all, retries included.
    pub attempts: Option<u32>,
    /// How long one attempt may run, ms.
    pub timeout_ms: Option<u64>,
    /// How long the job is kept once it succeeded or was cancelled, ms.
    pub retention_ms: Option<u64>,
    /// How long the job is kept once it failed, ms.
    pub failed_retention_ms: Option<u64>,
    /// Labels to find the job by.
    #[serde(default)]
    pub tags: Vec<String>,
    /// Its group (a tenant, customer or document key): jobs are run round robin across
    /// groups, each within its own limits.
    pub group: Option<String>,
    /// The jobs it waits on: names in the flow, or ids of jobs outside it.
    #[serde(default)]
    pub after: Vec<AfterDocument>,
}

/// An entry of a job's `after`: a name (or id), or one with its policy.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum AfterDocument {
    /// A job waited on, with the default policy (`cancel`).
    Job(String),
    /// A job waited on, with its policy.
    Edge {
        /// The job's name in the flow, or the id of a job outside it.
        job: String,
        /// `cancel` (the default), `ignore` or `continue`.
        #[serde(default)]
        on_failure: Option<String>,
    },
}

impl FlowDocument {
    /// Reads a flow from JSON text, naming the field that is wrong.
    pub fn from_json(text: &str) -> Result<Self> {
        let mut deserializer = serde_json::Deserializer::from_str(text);
        serde_path_to_error::deserialize(&mut deserializer)
            .map_err(|e| QueueError::BadOption(format!("the flow does not read: {e}")))
    }

    /// The flow it describes, or what is wrong with a job (the graph itself is checked by
    /// [`Flow::check`]).
    pub fn into_flow(self) -> Result<Flow> {
        let jobs = self
            .jobs
            .into_iter()
            .map(|(name, job)| {
                job.into_job(&name)
                    .map_err(|e| QueueError::BadOption(format!("job {name:?}: {e}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Flow {
            name: self.name,
            jobs,
        })
    }
}

/// A job's input and options as the HTTP API and flow documents write them (the input in
/// one of three forms; times in ms), read into what [`crate::Client`] takes. One reading
/// for both, so that they cannot drift apart.
#[derive(Debug, Clone, Default)]
pub struct JobFields {
    /// The input as text.
    pub input: Option<String>,
    /// The input as base64.
    pub input_base64: Option<String>,
    /// The input as JSON (the job gets its compact text).
    pub input_json: Option<Value>,
    /// Higher runs first.
    pub priority: Option<i32>,
    /// ms before it may run.
    pub delay_ms: Option<u64>,
    /// The time before which it may not run, ms since the epoch.
    pub at_ms: Option<u64>,
    /// Attempts in all.
    pub attempts: Option<u32>,
    /// ms one attempt may run.
    pub timeout_ms: Option<u64>,
    /// ms the finished job is kept.
    pub retention_ms: Option<u64>,
    /// ms the failed job is kept.
    pub failed_retention_ms: Option<u64>,
    /// Its tags.
    pub tags: Vec<String>,
    /// Its group.
    pub group: Option<String>,
}

impl JobFields {
    /// The input bytes and the options (`after` empty), or what is wrong with them.
    pub fn into_job(self) -> Result<(Vec<u8>, EnqueueOptions), String> {
        let input = match (self.input, self.input_base64, self.input_json) {
            (None, None, None) => Vec::new(),
            (Some(text), None, None) => text.into_bytes(),
            (None, Some(encoded), None) => BASE64
                .decode(encoded.trim())
                .map_err(|e| format!("input_base64 is not base64: {e}"))?,
            (None, None, Some(value)) => value.to_string().into_bytes(),
            _ => return Err("give one of input, input_base64 and input_json, not several".into()),
        };
        let mut options = EnqueueOptions::default();
        if let Some(priority) = self.priority {
            options.priority = Priority::new(priority).map_err(|e| e.to_string())?;
        }
        options.max_attempts = self.attempts;
        options.timeout = self.timeout_ms.map(Duration::from_millis);
        if let Some(ms) = self.retention_ms {
            options.retention = Duration::from_millis(ms);
        }
        if let Some(ms) = self.failed_retention_ms {
            options.failed_retention = Duration::from_millis(ms);
        }
        if let Some(ms) = self.delay_ms {
            options.delay = Duration::from_millis(ms);
        }
        if let Some(ms) = self.at_ms {
            options.at = UNIX_EPOCH.checked_add(Duration::from_millis(ms));
        }
        options.tags = self.tags;
        options.group = self.group;
        Ok((input, options))
    }
}

impl FlowJobDocument {
    /// The job as one to enqueue on its own (a batch's): its function, input and options;
    /// it may wait only on jobs named by id.
    pub fn into_enqueue(self) -> Result<(FunctionName, Vec<u8>, EnqueueOptions), String> {
        let job = self.into_job("")?;
        if let Some(edge) = job.after.first() {
            return Err(format!(
                "after: {:?} is not a job id (FUNCTION:NUMBER); only a flow's jobs wait on names",
                edge.job
            ));
        }
        Ok((job.function, job.input, job.options))
    }

    fn into_job(self, name: &str) -> Result<FlowJob, String> {
        let function = FunctionName::new(self.function).map_err(|e| e.to_string())?;
        let (input, mut options) = JobFields {
            input: self.input,
            input_base64: self.input_base64,
            input_json: self.input_json,
            priority: self.priority,
            delay_ms: self.delay_ms,
            at_ms: self.at_ms,
            attempts: self.attempts,
            timeout_ms: self.timeout_ms,
            retention_ms: self.retention_ms,
            failed_retention_ms: self.failed_retention_ms,
            tags: self.tags,
            group: self.group,
        }
        .into_job()?;
        let mut after = Vec::new();
        for entry in self.after {
            let (job, policy) = match entry {
                AfterDocument::Job(job) => (job, OnFailure::Cancel),
                AfterDocument::Edge { job, on_failure } => {
                    let policy = match on_failure {
                        Some(policy) => policy.parse::<OnFailure>()?,
                        None => OnFailure::Cancel,
                    };
                    (job, policy)
                }
            };
            // A name has no ':'; an id outside the flow has.
            if job.contains(':') {
                let id: JobId = job
                    .parse()
                    .map_err(|e| format!("after: {job:?} is not a job id: {e}"))?;
                if policy != OnFailure::Cancel {
                    options.on_failure.insert(id.clone(), policy);
                }
                options.after.push(id);
            } else {
                after.push(FlowEdge {
                    job,
                    on_failure: policy,
                });
            }
        }
        Ok(FlowJob {
            name: name.to_string(),
            function,
            input,
            options,
            after,
        })
    }
}
