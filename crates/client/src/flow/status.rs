//! How a flow stands: its record and its jobs' states ([`Client::flow`](crate::Client::flow)).

use serde::Serialize;
use wasmgear_proto::keys::FlowKeys;
use wasmgear_proto::{JobId, JobState};

use super::{FlowEdge, StoredFlow};
use crate::connection::Connection;
use crate::dependencies::outcomes;
use crate::{QueueError, Result, scripts};

/// A flow and how each of its jobs stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FlowStatus {
    /// The flow's id.
    pub id: u64,
    /// Its name.
    pub name: String,
    /// When it was submitted, ms since the epoch (Redis' clock).
    pub created_ms: u64,
    /// Its jobs, every one after those it waits on.
    pub jobs: Vec<FlowJobStatus>,
}

/// One job of a [`FlowStatus`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FlowJobStatus {
    /// Its name in the flow.
    pub name: String,
    /// Its id.
    #[serde(serialize_with = "as_text")]
    pub id: JobId,
    /// The jobs of the flow it waits on.
    pub after: Vec<FlowEdge>,
    /// Its state; `None` when it is not kept (forgotten after its retention, or never
    /// written: a submit that failed halfway).
    pub state: Option<JobState>,
    /// The size of its output, once it succeeded.
    pub output_bytes: u64,
    /// The message it failed or was cancelled with.
    pub error: Option<String>,
}

fn as_text<S: serde::Serializer>(id: &JobId, s: S) -> std::result::Result<S::Ok, S::Error> {
    s.collect_str(id)
}

impl FlowJobStatus {
    /// Whether it has ended (or is gone).
    pub fn ended(&self) -> bool {
        self.state.is_none_or(JobState::is_final)
    }
}

impl FlowStatus {
    /// Whether every job has ended.
    pub fn ended(&self) -> bool {
        self.jobs.iter().all(FlowJobStatus::ended)
    }

    /// The jobs no other job of the flow waits on (its results), in order.
    pub fn sinks(&self) -> Vec<&FlowJobStatus> {
        let waited: std::collections::HashSet<&str> = self
            .jobs
            .iter()
            .flat_map(|j| j.after.iter().map(|e| e.job.as_str()))
            .collect();
        self.jobs
            .iter()
            .filter(|j| !waited.contains(j.name.as_str()))
            .collect()
    }

    /// How many jobs are in each state (`missing` for those not kept), in a fixed order.
    pub fn counts(&self) -> Vec<(&'static str, usize)> {
        let mut counts: Vec<(&'static str, usize)> = Vec::new();
        for job in &self.jobs {
            let state = job.state.map_or("missing", JobState::as_str);
            match counts.iter_mut().find(|(s, _)| *s == state) {
                Some((_, n)) => *n += 1,
                None => counts.push((state, 1)),
            }
        }
        counts.sort_by_key(|(state, _)| STATE_ORDER.iter().position(|s| s == state));
        counts
    }
}

/// The states in the order counts are shown.
const STATE_ORDER: [&str; 9] = [
    "waiting",
    "scheduled",
    "queued",
    "running",
    "succeeded",
    "failed",
    "cancelled",
    "expired",
    "missing",
];

/// Flow `id`'s record: when it was created and what it holds.
pub(crate) async fn read_record(conn: &Connection, id: u64) -> Result<(u64, StoredFlow)> {
    let raw: Option<String> = scripts::FLOW_GET
        .with_keys(&[FlowKeys::records()])
        .arg(id)
        .invoke_async(&mut conn.clone())
        .await?;
    let raw = raw.ok_or(QueueError::NoSuchFlow(id))?;
    parse_record(id, &raw)
}

/// A record as `flow_get` and `flows_due` answer it: `CREATED_MS|JSON`.
pub(crate) fn parse_record(id: u64, raw: &str) -> Result<(u64, StoredFlow)> {
    let corrupt = |reason: String| QueueError::CorruptFlow { id, reason };
    let (created, json) = raw
        .split_once('|')
        .ok_or_else(|| corrupt("it has no creation time".into()))?;
    let created_ms = created
        .parse()
        .map_err(|_| corrupt(format!("its creation time {created:?} is not a number")))?;
    let flow = serde_json::from_str(json).map_err(|e| corrupt(e.to_string()))?;
    Ok((created_ms, flow))
}

/// Flow `id` and how its jobs stand.
pub(crate) async fn read(conn: &Connection, id: u64) -> Result<FlowStatus> {
    let (created_ms, stored) = read_record(conn, id).await?;
    with_outcomes(conn, id, created_ms, stored).await
}

/// Flow `id` as its record (read already: `created_ms`, `stored`) holds it, with how its
/// jobs stand now.
pub(crate) async fn with_outcomes(
    conn: &Connection,
    id: u64,
    created_ms: u64,
    stored: StoredFlow,
) -> Result<FlowStatus> {
    let ids = stored
        .jobs
        .iter()
        .map(|job| {
            job.id
                .parse::<JobId>()
                .map_err(|e| QueueError::CorruptFlow {
                    id,
                    reason: format!("job {:?} has id {:?}: {e}", job.name, job.id),
                })
        })
        .collect::<Result<Vec<_>>>()?;
    let outcomes = outcomes(conn, &ids).await?;
    let jobs = stored
        .jobs
        .into_iter()
        .zip(outcomes)
        .map(|(job, outcome)| FlowJobStatus {
            name: job.name,
            id: outcome.id,
            after: job.after,
            state: outcome.state,
            output_bytes: outcome.output_bytes,
            error: outcome.error,
        })
        .collect();
    Ok(FlowStatus {
        id,
        name: stored.name,
        created_ms,
        jobs,
    })
}

/// A flow in a list of flows: its id, name, when it was submitted and how many jobs it has.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FlowSummary {
    /// The flow's id.
    pub id: u64,
    /// Its name.
    pub name: String,
    /// When it was submitted, ms since the epoch (Redis' clock).
    pub created_ms: u64,
    /// How many jobs it has.
    pub jobs: usize,
}

/// The flows among the `most` submitted last that are still kept, newest first.
pub(crate) async fn recent(conn: &Connection, most: u64) -> Result<Vec<FlowSummary>> {
    let last: Option<u64> = redis::cmd("GET")
        .arg(FlowKeys::seq())
        .query_async(&mut conn.clone())
        .await?;
    let last = last.unwrap_or(0);
    let ids: Vec<u64> = (last.saturating_sub(most.saturating_sub(1)).max(1)..=last)
        .rev()
        .collect();
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let raws: Vec<Option<String>> = redis::cmd("HMGET")
        .arg(FlowKeys::records())
        .arg(&ids)
        .query_async(&mut conn.clone())
        .await?;
    let mut flows = Vec::new();
    for (id, raw) in ids.into_iter().zip(raws) {
        let Some(raw) = raw else { continue };
        let (created_ms, stored) = parse_record(id, &raw)?;
        flows.push(FlowSummary {
            id,
            name: stored.name,
            created_ms,
            jobs: stored.jobs.len(),
        });
    }
    Ok(flows)
}
