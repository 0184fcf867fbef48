//! Flows: graphs of jobs of any functions submitted in one call, whose jobs wait on one
//! another (`after` links) and read their dependencies' outputs
//! (`wasmgear:job/dependencies`).
//!
//! A [`Flow`] is checked whole before anything is written ([`Flow::check`]: names, unknown
//! jobs, cycles, size, every job's options). Then each function's jobs get numbers reserved
//! at once (`reserve`), so every job's id is known before any is written; the flow's record
//! is written (`flow_create`, in the `{flows}` slot); each function's jobs are written in one
//! atomic `enqueue` call (dependencies in the function first); and the links across functions
//! are made last, with the safety net they always have (`links`). [`document`] reads a flow
//! from JSON (the HTTP API's and the CLI's format).

pub mod document;
mod ops;
mod status;

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};
use wasmgear_proto::limits::{MAX_DEPENDENCIES, MAX_FLOW_JOBS, MAX_FLOW_NAME_BYTES};
use wasmgear_proto::{FunctionName, OnFailure};

use crate::options::EnqueueOptions;
use crate::{QueueError, Result};

pub use ops::SubmittedFlow;
pub(crate) use ops::forget_done_flows;
pub(crate) use ops::reserve as ops_reserve;
pub use status::{FlowJobStatus, FlowStatus, FlowSummary};

/// A graph of jobs to submit in one call ([`Client::submit_flow`](crate::Client::submit_flow)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Flow {
    /// What the flow is called (shown with its status): 1 to 200 bytes.
    pub name: String,
    /// Its jobs, each named once.
    pub jobs: Vec<FlowJob>,
}

/// One job of a [`Flow`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowJob {
    /// Its name in the flow: 1 to 200 letters, digits, `_`, `-` or `.`.
    pub name: String,
    /// The function that runs it.
    pub function: FunctionName,
    /// Its input.
    pub input: Vec<u8>,
    /// Its options. `after` and `on_failure` may name jobs outside the flow (by id); a
    /// flow's jobs are always new, so `uniq`, `once`, `tick` and `parent` are refused.
    pub options: EnqueueOptions,
    /// The jobs of the flow it waits on, each with what becomes of it when that one fails.
    pub after: Vec<FlowEdge>,
}

/// An edge of a flow: the job waited on, and the waiting job's policy when it fails.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlowEdge {
    /// The name of the job waited on.
    pub job: String,
    /// What becomes of the waiting job when it fails, is cancelled or is gone.
    #[serde(default)]
    pub on_failure: OnFailure,
}

impl FlowEdge {
    /// An edge to `job` with the default policy (a failure cancels the waiting job).
    pub fn to(job: impl Into<String>) -> Self {
        FlowEdge {
            job: job.into(),
            on_failure: OnFailure::Cancel,
        }
    }
}

impl FlowJob {
    /// A job `name` of `function` with `input` and the default options, waiting on nothing.
    pub fn new(name: impl Into<String>, function: FunctionName, input: impl Into<Vec<u8>>) -> Self {
        FlowJob {
            name: name.into(),
            function,
            input: input.into(),
            options: EnqueueOptions::default(),
            after: Vec::new(),
        }
    }

    /// This job, waiting on the jobs `names` of the flow (default policy).
    pub fn after<S: Into<String>>(mut self, names: impl IntoIterator<Item = S>) -> Self {
        self.after.extend(names.into_iter().map(FlowEdge::to));
        self
    }
}

/// Whether `name` can name a job of a flow.
fn fits_job_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_FLOW_NAME_BYTES as usize
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

fn refuse(what: String) -> QueueError {
    QueueError::BadOption(what)
}

impl Flow {
    /// Checks the whole graph, naming the first thing wrong in one sentence: the flow's
    /// name, a job's name (or one given twice), an edge to a job the flow does not have, a
    /// cycle, more than 10,000 jobs, an option out of range or an input too large. Returns
    /// the jobs' positions in an order where every job comes after those it waits on.
    pub fn check(&self, max_input_bytes: usize) -> Result<Vec<usize>> {
        if self.name.is_empty()
            || self.name.len() > MAX_FLOW_NAME_BYTES as usize
            || self.name.chars().any(char::is_control)
        {
            return Err(refuse(format!(
                "the flow's name {:?} must be 1 to {MAX_FLOW_NAME_BYTES} bytes without control characters",
                self.name
            )));
        }
        if self.jobs.is_empty() {
            return Err(refuse(format!("flow {:?} has no jobs", self.name)));
        }
        if self.jobs.len() > MAX_FLOW_JOBS as usize {
            return Err(refuse(format!(
                "flow {:?} has {} jobs, more than the {MAX_FLOW_JOBS} a flow may have",
                self.name,
                self.jobs.len()
            )));
        }
        let mut position: HashMap<&str, usize> = HashMap::with_capacity(self.jobs.len());
        for (i, job) in self.jobs.iter().enumerate() {
            if !fits_job_name(&job.name) {
                return Err(refuse(format!(
                    "job name {:?} must be 1 to {MAX_FLOW_NAME_BYTES} letters, digits, '_', '-' or '.'",
                    job.name
                )));
            }
            if position.insert(&job.name, i).is_some() {
                return Err(refuse(format!("job {:?} is named twice", job.name)));
            }
        }
        for job in &self.jobs {
            self.check_job(job, &position, max_input_bytes)?;
        }
        topological_order(&self.jobs, &position)
    }

    fn check_job(
        &self,
        job: &FlowJob,
        position: &HashMap<&str, usize>,
        max_input_bytes: usize,
    ) -> Result<()> {
        let name = &job.name;
        let options = &job.options;
        let refused = [
            ("uniq", options.uniq.is_some()),
            ("once", options.once.is_some()),
            ("a schedule's tick", options.tick.is_some()),
            ("parent", options.parent.is_some()),
        ];
        if let Some((option, _)) = refused.iter().find(|(_, given)| *given) {
            return Err(refuse(format!(
                "job {name:?}: a flow's jobs are always new, so they take no {option}"
            )));
        }
        options
            .validate()
            .map_err(|e| refuse(format!("job {name:?}: {}", option_error(e))))?;
        if job.input.len() > max_input_bytes {
            return Err(refuse(format!(
                "job {name:?}: input of {} bytes is larger than the limit of {max_input_bytes} bytes",
                job.input.len()
            )));
        }
        let mut seen = std::collections::HashSet::new();
        for edge in &job.after {
            if !position.contains_key(edge.job.as_str()) {
                return Err(refuse(format!(
                    "job {name:?} waits on {:?}, which the flow does not have",
                    edge.job
                )));
            }
            if edge.job == *name {
                return Err(refuse(format!("job {name:?} waits on itself")));
            }
            if !seen.insert(edge.job.as_str()) {
                return Err(refuse(format!(
                    "job {name:?} waits on {:?} twice",
                    edge.job
                )));
            }
        }
        if job.after.len() + options.after.len() > MAX_DEPENDENCIES as usize {
            return Err(refuse(format!(
                "job {name:?} has {} dependencies, more than the limit of {MAX_DEPENDENCIES}",
                job.after.len() + options.after.len()
            )));
        }
        Ok(())
    }
}

/// An option's error without the "invalid job option: " a [`QueueError::BadOption`] adds.
fn option_error(error: QueueError) -> String {
    match error {
        QueueError::BadOption(what) => what,
        other => other.to_string(),
    }
}

/// The jobs' positions with every job after those it waits on (Kahn's algorithm, stable:
/// jobs keep their given order where the edges allow), or the refusal naming a job on a
/// cycle.
fn topological_order(jobs: &[FlowJob], position: &HashMap<&str, usize>) -> Result<Vec<usize>> {
    let mut waits = vec![0usize; jobs.len()];
    let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); jobs.len()];
    for (i, job) in jobs.iter().enumerate() {
        for edge in &job.after {
            let dependency = position[edge.job.as_str()];
            waits[i] += 1;
            dependents[dependency].push(i);
        }
    }
    let mut ready: std::collections::BTreeSet<usize> =
        (0..jobs.len()).filter(|&i| waits[i] == 0).collect();
    let mut order = Vec::with_capacity(jobs.len());
    while let Some(i) = ready.pop_first() {
        order.push(i);
        for &d in &dependents[i] {
            waits[d] -= 1;
            if waits[d] == 0 {
                ready.insert(d);
            }
        }
    }
    if let Some(stuck) = (0..jobs.len()).find(|&i| waits[i] > 0) {
        // Follow unfinished dependencies from a stuck job until one repeats: a cycle.
        let mut path = vec![stuck];
        let mut on_path = BTreeMap::from([(stuck, 0usize)]);
        loop {
            let last = path[path.len() - 1];
            let next = jobs[last]
                .after
                .iter()
                .map(|e| position[e.job.as_str()])
                .find(|&d| waits[d] > 0)
                .unwrap_or(stuck);
            if let Some(&start) = on_path.get(&next) {
                let mut names: Vec<&str> = path[start..]
                    .iter()
                    .map(|&i| jobs[i].name.as_str())
                    .collect();
                names.push(jobs[next].name.as_str());
                return Err(refuse(format!(
                    "the flow has a cycle: {} (each waits on the next)",
                    names.join(" → ")
                )));
            }
            on_path.insert(next, path.len());
            path.push(next);
        }
    }
    Ok(order)
}

/// The flow as its record keeps it (`wg:{flows}:records`): its name and its jobs in the
/// order they were written (every job after those it waits on), each with its id and edges.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct StoredFlow {
    pub name: String,
    pub jobs: Vec<StoredJob>,
}

/// One job in a [`StoredFlow`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct StoredJob {
    pub name: String,
    pub id: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<FlowEdge>,
}
