//! A job's dependencies as its handler reads them (`wasmgear:job/dependencies`): the jobs of
//! its `after` list, how each stands, and their outputs a piece at a time, so that a job with
//! thousands of dependencies holds only what it asks for.

use std::collections::BTreeMap;

use wasmgear_proto::limits::{MAX_OUTCOMES, MAX_OUTPUT_PIECE};

use crate::client::Client;
use crate::connection::Connection;
use crate::{FunctionName, JobId, JobState, QueueError, Result, scripts};

/// How one dependency stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// The dependency.
    pub id: JobId,
    /// Its state; `None` when it is not kept (never made, or forgotten after its retention).
    pub state: Option<JobState>,
    /// The size of its output: 0 unless it succeeded with its output kept.
    pub output_bytes: u64,
    /// The message it failed or was cancelled with.
    pub error: Option<String>,
}

impl Client {
    /// Job `id`'s dependencies: its `after` list, in order.
    pub async fn dependencies(&self, id: &JobId) -> Result<Vec<JobId>> {
        let status = self.status(id).await?;
        status
            .record
            .after
            .iter()
            .map(|dependency| {
                dependency.parse().map_err(|e| QueueError::Corrupt {
                    id: id.clone(),
                    reason: format!("its dependency {dependency:?} is not a job id: {e}"),
                })
            })
            .collect()
    }

    /// How each of `ids` stands, in their order: one `outcomes` call per function (and
    /// per [`MAX_OUTCOMES`] jobs of it), none reading an output. Sealed error messages are
    /// opened; with keys, a sealed output's size is its size opened (which reads its head).
    pub async fn outcomes(&self, ids: &[JobId]) -> Result<Vec<Outcome>> {
        let mut outcomes = outcomes(&self.conn, ids).await?;
        for outcome in &mut outcomes {
            self.opened_outcome(&outcome.id, &mut outcome.output_bytes, &mut outcome.error)
                .await?;
        }
        Ok(outcomes)
    }

    /// At most `most` bytes (capped at [`MAX_OUTPUT_PIECE`]) of job `id`'s output from byte
    /// `offset`, as stored (a sealed output's envelope: [`Client::open_output`] opens it):
    /// empty past its end, `None` when no output of it is kept (it has not succeeded, or it
    /// was forgotten).
    pub async fn output_piece(
        &self,
        id: &JobId,
        offset: u64,
        most: u64,
    ) -> Result<Option<Vec<u8>>> {
        let most = most.clamp(1, MAX_OUTPUT_PIECE);
        let mut call = scripts::on_function(&scripts::OUTPUT, &id.function);
        call.arg(id.seq).arg(offset).arg(most);
        Ok(call.invoke_async(&mut self.conn.clone()).await?)
    }
}

/// How each of `ids` stands, in their order (see [`Client::outcomes`]).
pub(crate) async fn outcomes(conn: &Connection, ids: &[JobId]) -> Result<Vec<Outcome>> {
    let mut by_function: BTreeMap<&FunctionName, Vec<usize>> = BTreeMap::new();
    for (position, id) in ids.iter().enumerate() {
        by_function.entry(&id.function).or_default().push(position);
    }
    let mut outcomes: Vec<Option<Outcome>> = vec![None; ids.len()];
    for (function, positions) in by_function {
        for chunk in positions.chunks(MAX_OUTCOMES as usize) {
            let mut call = scripts::on_function(&scripts::OUTCOMES, function);
            call.arg(chunk.len());
            for &position in chunk {
                call.arg(ids[position].seq);
            }
            let replies: Vec<(String, u64, Option<String>)> =
                call.invoke_async(&mut conn.clone()).await?;
            if replies.len() != chunk.len() {
                return Err(QueueError::Corrupt {
                    id: ids[chunk[0]].clone(),
                    reason: format!(
                        "outcomes answered {} jobs of {function} for {} asked",
                        replies.len(),
                        chunk.len()
                    ),
                });
            }
            for (&position, (state, output_bytes, error)) in chunk.iter().zip(replies) {
                let id = ids[position].clone();
                let state = match state.as_str() {
                    "missing" => None,
                    known => Some(known.parse().map_err(|reason| QueueError::Corrupt {
                        id: id.clone(),
                        reason,
                    })?),
                };
                outcomes[position] = Some(Outcome {
                    id,
                    state,
                    output_bytes,
                    error,
                });
            }
        }
    }
    Ok(outcomes.into_iter().flatten().collect())
}
