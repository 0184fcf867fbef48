//! Submitting a flow, and what an operator does with one: cancel it, retry it, wait for it;
//! and forgetting the records of flows whose jobs are all forgotten.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;
use wasmgear_proto::keys::FlowKeys;
use wasmgear_proto::{FunctionName, JobId, OnFailure};

use super::status::{self, FlowStatus};
use super::{Flow, StoredFlow, StoredJob};
use crate::client::{Client, Placement};
use crate::connection::Connection;
use crate::dependencies::outcomes;
use crate::options::EnqueueOptions;
use crate::{QueueError, Result, links, scripts};

/// A flow written by [`Client::submit_flow`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SubmittedFlow {
    /// The flow's id.
    pub id: u64,
    /// Each job's name and id, in the order the flow gave them.
    pub jobs: Vec<(String, JobId)>,
}

impl Client {
    /// Submits `flow`: checks the whole graph first (nothing is written when it is
    /// refused), then writes each function's jobs in one atomic call, those of a
    /// dependent's function before its dependencies' when it can (the dependencies then
    /// name their dependents as they are written), and links the jobs across functions that
    /// this order does not serve. Returns the flow's id and its jobs' ids.
    ///
    /// A failure after the first write (Redis lost halfway) cancels what was written, as
    /// far as it can; a job left waiting on one never written is cancelled by the links'
    /// safety net once the reservation of its number lapses (10 minutes).
    pub async fn submit_flow(&self, flow: &Flow) -> Result<SubmittedFlow> {
        let order = flow.check(self.max_input_bytes())?;
        // Each function's jobs, every one after those of the function it waits on.
        let mut groups: BTreeMap<&FunctionName, Vec<usize>> = BTreeMap::new();
        for &i in &order {
            groups.entry(&flow.jobs[i].function).or_default().push(i);
        }
        let firsts = futures_util::future::try_join_all(
            groups
                .iter()
                .map(|(function, members)| reserve(&self.conn, function, members.len())),
        )
        .await?;
        let mut ids: Vec<Option<JobId>> = vec![None; flow.jobs.len()];
        for ((function, members), first) in groups.iter().zip(&firsts) {
            for (k, &i) in members.iter().enumerate() {
                ids[i] = Some(JobId {
                    function: (*function).clone(),
                    seq: first + k as u64,
                });
            }
        }
        let ids: Vec<JobId> = ids.into_iter().flatten().collect();
        let stored = StoredFlow {
            name: flow.name.clone(),
            jobs: order
                .iter()
                .map(|&i| StoredJob {
                    name: flow.jobs[i].name.clone(),
                    id: ids[i].to_string(),
                    after: flow.jobs[i].after.clone(),
                })
                .collect(),
        };
        let record = serde_json::to_string(&stored)
            .map_err(|e| QueueError::BadOption(format!("the flow does not write as JSON: {e}")))?;
        let (flow_id, _created_ms): (u64, u64) = scripts::FLOW_CREATE
            .with_keys(&FlowKeys::all())
            .arg(record)
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(|e| match (e.code(), e.detail()) {
                (Some("BADFLOW"), Some(detail)) => QueueError::BadOption(detail.to_string()),
                _ => QueueError::Redis(e),
            })?;
        let written = self.write_flow(flow, flow_id, &groups, &ids).await;
        if let Err(error) = written {
            tracing::warn!(flow = flow_id, %error, "a flow's submit failed halfway; cancelling what was written");
            if let Err(cancel_error) = self.cancel_flow(flow_id).await {
                tracing::warn!(flow = flow_id, %cancel_error, "cannot cancel the jobs of a flow whose submit failed");
            }
            return Err(error);
        }
        Ok(SubmittedFlow {
            id: flow_id,
            jobs: flow
                .jobs
                .iter()
                .zip(ids)
                .map(|(job, id)| (job.name.clone(), id))
                .collect(),
        })
    }

    /// Writes the flow's jobs, one call per function, a function after those whose jobs
    /// wait on its jobs (see [`write_order`]): such a job is written naming its dependents,
    /// which exist already, so that nothing is left to link. The edges the order cannot
    /// serve (functions waiting on each other) are linked at the end, with the jobs named
    /// by id outside the flow.
    async fn write_flow(
        &self,
        flow: &Flow,
        flow_id: u64,
        groups: &BTreeMap<&FunctionName, Vec<usize>>,
        ids: &[JobId],
    ) -> Result<()> {
        let position: std::collections::HashMap<&str, usize> = flow
            .jobs
            .iter()
            .enumerate()
            .map(|(i, job)| (job.name.as_str(), i))
            .collect();
        let edges: Vec<(usize, usize)> = flow
            .jobs
            .iter()
            .enumerate()
            .flat_map(|(i, job)| {
                let position = &position;
                job.after
                    .iter()
                    .map(move |edge| (position[edge.job.as_str()], i))
            })
            .collect();
        let layers = write_order(flow, &edges);
        let layer_of: std::collections::HashMap<&FunctionName, usize> = layers
            .iter()
            .enumerate()
            .flat_map(|(n, layer)| layer.iter().map(move |f| (*f, n)))
            .collect();
        // The edges whose dependent is written first: named on the dependency's job.
        let mut dependents: Vec<Vec<JobId>> = vec![Vec::new(); flow.jobs.len()];
        let mut preset = std::collections::HashSet::new();
        for &(dependency, dependent) in &edges {
            let (of, by) = (
                &flow.jobs[dependency].function,
                &flow.jobs[dependent].function,
            );
            if of != by && layer_of[by] < layer_of[of] {
                dependents[dependency].push(ids[dependent].clone());
                preset.insert((ids[dependent].clone(), ids[dependency].clone()));
            }
        }
        let mut to_link: Vec<(JobId, JobId)> = Vec::new();
        for layer in &layers {
            let calls = layer.iter().map(|function| {
                let members = &groups[function];
                let jobs: Vec<(&[u8], EnqueueOptions)> = members
                    .iter()
                    .map(|&i| {
                        let job = &flow.jobs[i];
                        let mut options = job.options.clone();
                        for edge in &job.after {
                            let dependency = ids[position[edge.job.as_str()]].clone();
                            if edge.on_failure != OnFailure::Cancel {
                                options
                                    .on_failure
                                    .insert(dependency.clone(), edge.on_failure);
                            }
                            options.after.push(dependency);
                        }
                        (job.input.as_slice(), options)
                    })
                    .collect();
                let placements: Vec<Placement> = members
                    .iter()
                    .map(|&i| Placement {
                        number: Some(ids[i].seq),
                        flow: Some(flow_id),
                        dependents: dependents[i].clone(),
                        ..Placement::default()
                    })
                    .collect();
                async move { self.write_jobs(function, &jobs, &placements).await }
            });
            // (A flow's jobs are always new: each names its dependents.)
            for (_, links) in futures_util::future::try_join_all(calls).await? {
                to_link.extend(links.into_iter().filter(|pair| !preset.contains(pair)));
            }
        }
        links::link_many(&self.conn, self.keys.as_deref(), to_link).await
    }

    /// Flow `id` and how each of its jobs stands.
    pub async fn flow(&self, id: u64) -> Result<FlowStatus> {
        self.opened_flow(status::read(&self.conn, id).await?).await
    }

    /// `status` with its jobs' sealed errors opened, and their sealed outputs' sizes as they
    /// open (see [`Client::outcomes`]).
    async fn opened_flow(&self, mut status: FlowStatus) -> Result<FlowStatus> {
        for job in &mut status.jobs {
            self.opened_outcome(&job.id, &mut job.output_bytes, &mut job.error)
                .await?;
        }
        Ok(status)
    }

    /// The flows among the `most` submitted last that are still kept, newest first.
    pub async fn recent_flows(&self, most: u64) -> Result<Vec<status::FlowSummary>> {
        status::recent(&self.conn, most).await
    }

    /// Cancels every unfinished job of flow `id` (as [`Client::cancel`]: a running one is
    /// asked to stop), those waiting on others first. Returns how many were cancelled or
    /// asked to stop.
    pub async fn cancel_flow(&self, id: u64) -> Result<usize> {
        let status = self.flow(id).await?;
        let unfinished: Vec<JobId> = status
            .jobs
            .iter()
            .filter(|j| !j.ended())
            .map(|j| j.id.clone())
            .collect();
        let count = unfinished.len();
        // Dependents first: a job whose dependency is cancelled before it may be let run by
        // an `ignore` or `continue` edge.
        for job in unfinished.iter().rev() {
            match self.cancel(job).await {
                Ok(_) | Err(QueueError::NoSuchJob(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(count)
    }

    /// Runs flow `id`'s failed and cancelled jobs again, every one after those it waits on
    /// (a job cancelled because its dependency failed waits for it again); the succeeded
    /// jobs stay as they are, with their outputs. Returns the ids of the jobs run again.
    pub async fn retry_flow(&self, id: u64) -> Result<Vec<JobId>> {
        let status = self.flow(id).await?;
        let mut retried = Vec::new();
        // In the record's order, dependencies first: a job is retried only once those it
        // waits on in its function are no longer failed or cancelled.
        for job in &status.jobs {
            if matches!(
                job.state,
                Some(
                    wasmgear_proto::JobState::Failed
                        | wasmgear_proto::JobState::Cancelled
                        | wasmgear_proto::JobState::Expired
                )
            ) && self.retry(&job.id).await?
            {
                retried.push(job.id.clone());
            }
        }
        Ok(retried)
    }

    /// Waits until every job of flow `id` has ended (or is gone), at most `timeout` (none:
    /// for ever), and returns how it stands then.
    pub async fn wait_flow(&self, id: u64, timeout: Option<Duration>) -> Result<FlowStatus> {
        let deadline = timeout.map(|t| tokio::time::Instant::now() + t);
        let left = || deadline.map(|d| d.saturating_duration_since(tokio::time::Instant::now()));
        // The jobs no other job waits on usually end last: each is waited for alone before
        // the whole flow is read (one call per function, over every job), so that a big
        // flow is not read again and again while it runs.
        let (created_ms, stored) = status::read_record(&self.conn, id).await?;
        let waited: std::collections::HashSet<&str> = stored
            .jobs
            .iter()
            .flat_map(|j| j.after.iter().map(|e| e.job.as_str()))
            .collect();
        for sink in stored
            .jobs
            .iter()
            .filter(|j| !waited.contains(j.name.as_str()))
        {
            let Ok(sink) = sink.id.parse::<JobId>() else {
                continue;
            };
            match self.wait(&sink, left(), |_| {}).await {
                Ok(_) | Err(QueueError::NoSuchJob(_)) => {}
                Err(QueueError::WaitTimedOut(_)) => return Err(QueueError::FlowWaitTimedOut(id)),
                Err(e) => return Err(e),
            }
        }
        // Then how every job stands, from the record read already.
        let mut status = self
            .opened_flow(status::with_outcomes(&self.conn, id, created_ms, stored).await?)
            .await?;
        loop {
            // Dependents end after their dependencies: the last unfinished job in the
            // record's order is the one to wait for; then the flow is read again (one call
            // per function), until none is left.
            let Some(last) = status.jobs.iter().rev().find(|j| !j.ended()) else {
                return Ok(status);
            };
            match self.wait(&last.id, left(), |_| {}).await {
                Ok(_) | Err(QueueError::NoSuchJob(_)) => {}
                Err(QueueError::WaitTimedOut(_)) => return Err(QueueError::FlowWaitTimedOut(id)),
                Err(e) => return Err(e),
            }
            status = self.flow(id).await?;
        }
    }
}

/// The order a flow's functions are written in, as layers (the functions of a layer in
/// parallel): a function once every function with jobs waiting on its jobs (`edges`,
/// `(dependency, dependent)` positions) is written, so that its jobs can name their
/// dependents; functions waiting on each other are broken up by writing the first of them
/// alone.
fn write_order<'f>(flow: &'f Flow, edges: &[(usize, usize)]) -> Vec<Vec<&'f FunctionName>> {
    let mut waited_by: BTreeMap<&FunctionName, std::collections::BTreeSet<&FunctionName>> =
        BTreeMap::new();
    for job in &flow.jobs {
        waited_by.entry(&job.function).or_default();
    }
    for &(dependency, dependent) in edges {
        let (of, by) = (
            &flow.jobs[dependency].function,
            &flow.jobs[dependent].function,
        );
        if of != by {
            waited_by.entry(of).or_default().insert(by);
        }
    }
    let mut written = std::collections::BTreeSet::new();
    let mut left: Vec<&FunctionName> = waited_by.keys().copied().collect();
    let mut layers = Vec::new();
    while !left.is_empty() {
        let mut layer: Vec<&FunctionName> = left
            .iter()
            .copied()
            .filter(|f| waited_by[f].iter().all(|by| written.contains(by)))
            .collect();
        if layer.is_empty() {
            layer.push(left[0]);
        }
        written.extend(layer.iter().copied());
        left.retain(|f| !layer.contains(f));
        layers.push(layer);
    }
    layers
}

/// Reserves `count` numbers of `function` for a flow's or batch's jobs; returns the first.
pub(crate) async fn reserve(
    conn: &Connection,
    function: &FunctionName,
    count: usize,
) -> Result<u64> {
    Ok(scripts::on_function(&scripts::RESERVE, function)
        .arg(count)
        .invoke_async(&mut conn.clone())
        .await?)
}

/// The most flows one call of [`forget_done_flows`] looks at.
const FLOWS_PER_CHECK: usize = 20;

/// Forgets the records of flows due for a check whose jobs are all forgotten (the safety
/// of "nothing grows without bound": a flow's record goes with its jobs). Returns how many
/// it forgot. Workers call it in their upkeep.
pub(crate) async fn forget_done_flows(conn: &Connection) -> Result<usize> {
    let due: Vec<(u64, String)> = scripts::FLOWS_DUE
        .with_keys(&[FlowKeys::records(), FlowKeys::due()])
        .arg(FLOWS_PER_CHECK)
        .invoke_async(&mut conn.clone())
        .await?;
    let mut forgotten = 0;
    for (id, raw) in due {
        let gone = match status::parse_record(id, &raw) {
            Ok((_, stored)) => {
                let ids: Vec<JobId> = stored
                    .jobs
                    .iter()
                    .filter_map(|j| j.id.parse().ok())
                    .collect();
                outcomes(conn, &ids)
                    .await?
                    .iter()
                    .all(|o| o.state.is_none())
            }
            // A record that does not read names no job to keep it.
            Err(error) => {
                tracing::warn!(%error, "forgetting a flow record that does not read");
                true
            }
        };
        if gone {
            let _: i64 = scripts::FLOW_FORGET
                .with_keys(&[FlowKeys::records(), FlowKeys::due()])
                .arg(id)
                .invoke_async(&mut conn.clone())
                .await?;
            forgotten += 1;
        }
    }
    Ok(forgotten)
}

#[cfg(test)]
mod tests {
    use super::write_order;
    use crate::{Flow, FlowJob};
    use wasmgear_proto::FunctionName;

    fn f(name: &str) -> FunctionName {
        FunctionName::new(name).unwrap()
    }

    fn order(flow: &Flow) -> Vec<Vec<String>> {
        let position = |name: &str| flow.jobs.iter().position(|j| j.name == name).unwrap();
        let edges: Vec<(usize, usize)> = flow
            .jobs
            .iter()
            .enumerate()
            .flat_map(|(i, job)| job.after.iter().map(move |e| (position(&e.job), i)))
            .collect();
        write_order(flow, &edges)
            .into_iter()
            .map(|layer| layer.into_iter().map(|f| f.to_string()).collect())
            .collect()
    }

    /// A dependent's function is written before its dependencies' functions; functions
    /// with no edge between them go together.
    #[test]
    fn dependents_functions_are_written_first() {
        let flow = Flow {
            name: "etl".into(),
            jobs: vec![
                FlowJob::new("fetch", f("fetch"), ""),
                FlowJob::new("other", f("other"), ""),
                FlowJob::new("transform", f("transform"), "").after(["fetch"]),
                FlowJob::new("load", f("load"), "").after(["transform", "fetch"]),
            ],
        };
        assert_eq!(
            order(&flow),
            [vec!["load", "other"], vec!["transform"], vec!["fetch"]]
        );
    }

    /// Functions waiting on each other (a job of `a` waits on one of `b`, which waits on
    /// another of `a`) are written one at a time, every function once.
    #[test]
    fn functions_waiting_on_each_other_are_written_one_at_a_time() {
        let flow = Flow {
            name: "ping-pong".into(),
            jobs: vec![
                FlowJob::new("a1", f("a"), ""),
                FlowJob::new("b1", f("b"), "").after(["a1"]),
                FlowJob::new("a2", f("a"), "").after(["b1"]),
                FlowJob::new("c", f("c"), "").after(["a2"]),
            ],
        };
        assert_eq!(order(&flow), [vec!["c"], vec!["a"], vec!["b"]]);
    }
}
