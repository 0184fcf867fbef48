//! The queue behind a running job's dependencies (`wasmgear:job/dependencies`): the runtime
//! bounds each read, this reads wasmgear's own queue. The job's `after` list is read once, at
//! the first call, from its record, and only when that record is of this very run (running
//! here, in this attempt): a job of another protocol (Gearman, qless...) whose id happens to
//! name a job of wasmgear's queue has no dependencies.
//!
//! A dependency's sealed output is opened whole at its first read and kept until another
//! dependency's is read (one at a time), so a handler reading it a piece at a time does not
//! open it once per piece; plain outputs are read a piece at a time as stored.

use std::collections::HashSet;
use std::sync::Arc;

use tokio::sync::OnceCell;
use wasmgear_client::{Client, JobState, KeptOutput, QueueError};
use wasmgear_proto::JobId;
use wasmgear_proto::sync::Locked;
use wasmgear_runtime::{ChildFuture, Dependency, DependencyState, JobDependencies};

/// The dependencies of one running job.
#[derive(Clone)]
pub(crate) struct Dependencies(Arc<Inner>);

struct Inner {
    client: Client,
    job: JobId,
    /// This worker's id and the attempt running: the record must say both.
    worker: String,
    attempt: u32,
    after: OnceCell<Vec<JobId>>,
    /// The positions of dependencies whose outputs were found plain.
    plain: std::sync::Mutex<HashSet<u32>>,
    /// The last sealed output opened, and its dependency's position.
    opened: std::sync::Mutex<Option<(u32, Arc<Vec<u8>>)>>,
}

impl Dependencies {
    pub(crate) fn new(client: Client, job: JobId, worker: String, attempt: u32) -> Self {
        Dependencies(Arc::new(Inner {
            client,
            job,
            worker,
            attempt,
            after: OnceCell::new(),
            plain: Default::default(),
            opened: Default::default(),
        }))
    }
}

impl Inner {
    /// The job's `after` list, read at the first call.
    async fn after(&self) -> Result<&[JobId], String> {
        self.after
            .get_or_try_init(|| async {
                let record = match self.client.status(&self.job).await {
                    Ok(status) => status.record,
                    Err(QueueError::NoSuchJob(_)) => return Ok(Vec::new()),
                    Err(error) => {
                        return Err(format!("cannot read the job's dependencies: {error}"));
                    }
                };
                let this_run = record.state == JobState::Running
                    && record.worker.as_deref() == Some(self.worker.as_str())
                    && record.attempt == self.attempt;
                if !this_run {
                    return Ok(Vec::new());
                }
                record
                    .after
                    .iter()
                    .map(|id| {
                        id.parse::<JobId>().map_err(|e| {
                            format!("the job's dependency {id:?} is not a job id: {e}")
                        })
                    })
                    .collect()
            })
            .await
            .map(Vec::as_slice)
    }

    /// At most `max` bytes from `offset` of the output of dependency `id` (at `position`),
    /// opened if it is sealed; `None` when none is kept.
    async fn piece(
        &self,
        position: u32,
        id: &JobId,
        offset: u64,
        max: u32,
    ) -> Result<Option<Vec<u8>>, QueueError> {
        let cached = self.opened.locked().clone();
        let whole = match cached {
            Some((at, whole)) if at == position => whole,
            _ if self.plain.locked().contains(&position) => {
                return self.client.output_piece(id, offset, u64::from(max)).await;
            }
            _ => match self.client.open_output(id).await? {
                KeptOutput::Missing => return Ok(None),
                KeptOutput::Plain => {
                    self.plain.locked().insert(position);
                    return self.client.output_piece(id, offset, u64::from(max)).await;
                }
                KeptOutput::Opened(whole) => {
                    let whole = Arc::new(whole);
                    *self.opened.locked() = Some((position, whole.clone()));
                    whole
                }
            },
        };
        let start = usize::try_from(offset)
            .unwrap_or(usize::MAX)
            .min(whole.len());
        let end = start.saturating_add(max as usize).min(whole.len());
        Ok(Some(whole[start..end].to_vec()))
    }
}

impl JobDependencies for Dependencies {
    fn count(&self) -> ChildFuture<Result<u32, String>> {
        let inner = self.0.clone();
        Box::pin(async move {
            let after = inner.after().await?;
            Ok(u32::try_from(after.len()).unwrap_or(u32::MAX))
        })
    }

    fn page(&self, start: u32, max: u32) -> ChildFuture<Result<Vec<Dependency>, String>> {
        let inner = self.0.clone();
        Box::pin(async move {
            let after = inner.after().await?;
            let start = (start as usize).min(after.len());
            let end = start.saturating_add(max as usize).min(after.len());
            let outcomes = inner
                .client
                .outcomes(&after[start..end])
                .await
                .map_err(|e| format!("cannot read the dependencies: {e}"))?;
            Ok(outcomes
                .into_iter()
                .map(|o| Dependency {
                    id: o.id.to_string(),
                    function: o.id.function.to_string(),
                    state: match o.state {
                        Some(JobState::Succeeded) => DependencyState::Succeeded,
                        // (An expired dependency never ran: it failed to.)
                        Some(JobState::Failed | JobState::Expired) => DependencyState::Failed,
                        Some(JobState::Cancelled) => DependencyState::Cancelled,
                        Some(_) => DependencyState::Unfinished,
                        None => DependencyState::Missing,
                    },
                    output_size: o.output_bytes,
                    error: o.error,
                })
                .collect())
        })
    }

    fn output(&self, position: u32, offset: u64, max: u32) -> ChildFuture<Result<Vec<u8>, String>> {
        let inner = self.0.clone();
        Box::pin(async move {
            let after = inner.after().await?;
            let Some(id) = after.get(position as usize) else {
                return Err(format!(
                    "the job has {} dependencies: none at position {position} (they count from 0)",
                    after.len()
                ));
            };
            match inner.piece(position, id, offset, max).await {
                Ok(Some(piece)) => Ok(piece),
                Ok(None) => Err(format!(
                    "dependency {id} has no output kept: it has not succeeded, or it was forgotten after its retention"
                )),
                Err(error) => Err(format!(
                    "cannot read the output of dependency {id}: {error}"
                )),
            }
        })
    }
}
