//! A running job's checkpoints (`wasmgear:job/checkpoint`), the worker's side: a save joins
//! the attempt's [`Reports`], which its lease keeper writes to the source with the progress
//! (at most one write per [`PROGRESS_INTERVAL`](crate::PROGRESS_INTERVAL), the last one
//! before the attempt's result); a load asks the keeper, which reads the source. A source
//! that keeps no checkpoints (another protocol's) refuses every save at once.

use std::sync::Arc;

use tokio::sync::{mpsc, oneshot, watch};
use wasmgear_proto::Progress;
use wasmgear_runtime::{ChildFuture, JobCheckpoints};

/// What a running job has reported: its latest progress and checkpoint, each numbered by
/// how many the attempt made, so that its keeper writes each one that is new.
#[derive(Debug, Default)]
pub(crate) struct Reports {
    pub(crate) progress: Option<(u64, Progress)>,
    pub(crate) checkpoint: Option<(u64, Arc<Vec<u8>>)>,
}

impl Reports {
    /// Whether nothing was reported.
    pub(crate) fn is_empty(&self) -> bool {
        self.progress.is_none() && self.checkpoint.is_none()
    }

    /// Takes `progress` as the latest.
    pub(crate) fn progress(&mut self, progress: Progress) {
        let n = self.progress.as_ref().map_or(1, |(n, _)| n + 1);
        self.progress = Some((n, progress));
    }

    /// Takes `data` as the latest checkpoint.
    pub(crate) fn checkpoint(&mut self, data: Vec<u8>) {
        let n = self.checkpoint.as_ref().map_or(1, |(n, _)| n + 1);
        self.checkpoint = Some((n, Arc::new(data)));
    }
}

/// A load's answer, sent back by the keeper.
pub(crate) type LoadReply = oneshot::Sender<Result<Option<Vec<u8>>, String>>;

/// The checkpoints of one attempt, as the runtime sees them.
pub(crate) struct Checkpoints {
    reports: watch::Sender<Reports>,
    loads: mpsc::UnboundedSender<LoadReply>,
    /// Whether the job's source keeps checkpoints.
    keeps: bool,
}

impl Checkpoints {
    /// The checkpoints of an attempt whose reports go to `reports` and whose loads to
    /// `loads` (both read by its keeper); `keeps`: whether its source keeps any.
    pub(crate) fn new(
        reports: watch::Sender<Reports>,
        loads: mpsc::UnboundedSender<LoadReply>,
        keeps: bool,
    ) -> Self {
        Checkpoints {
            reports,
            loads,
            keeps,
        }
    }
}

impl JobCheckpoints for Checkpoints {
    fn load(&self) -> ChildFuture<Result<Option<Vec<u8>>, String>> {
        if !self.keeps {
            return Box::pin(async { Ok(None) });
        }
        let (reply, answer) = oneshot::channel();
        let asked = self.loads.send(reply).is_ok();
        Box::pin(async move {
            if !asked {
                return Err("the job's checkpoint cannot be read: its attempt is ending".into());
            }
            answer.await.unwrap_or_else(|_| {
                Err("the job's checkpoint cannot be read: its attempt is ending".into())
            })
        })
    }

    fn save(&self, data: Vec<u8>) -> Result<(), String> {
        if !self.keeps {
            return Err(wasmgear_source::NO_CHECKPOINTS.to_string());
        }
        self.reports.send_modify(|reports| reports.checkpoint(data));
        Ok(())
    }
}
