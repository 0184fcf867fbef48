//! Child jobs: jobs a running job enqueues (`wasmgear:job/jobs`), each recording its parent,
//! the parent listing them; enqueued once per parent and key, whichever attempt of the parent
//! asks; cancelled with their parent.

use std::time::Duration;

use super::client::{Client, EnqueueOptions, Enqueued};
use super::{QueueError, Result, scripts};
use crate::job::{FunctionName, JobId};
use crate::model::{JobState, JobStatus};

impl Client {
    /// Enqueues a job of `function` as a child of job `parent`, named `key` within it: the
    /// same parent and key return the same child however often they are asked (a retried
    /// parent does not enqueue its children twice). The parent's record lists it.
    pub async fn enqueue_child(
        &self,
        parent: &JobId,
        key: &str,
        function: &FunctionName,
        input: &[u8],
        options: EnqueueOptions,
    ) -> Result<Enqueued> {
        let options = EnqueueOptions {
            parent: Some(parent.clone()),
            once: Some(format!("{parent}/{key}")),
            ..options
        };
        options.validate()?;
        let enqueued = self
            .submit(function, &[(input, options)])
            .await?
            .into_iter()
            .next()
            .ok_or_else(|| QueueError::BadOption("the child was not enqueued".into()))?;
        // Also when it existed already: its parent may have died between the two calls.
        let _: i64 = scripts::on_function(&scripts::ADOPT, &parent.function)
            .arg(parent.seq)
            .arg(enqueued.id.to_string())
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(|e| match e.code() {
                Some("NOJOB") => QueueError::NoSuchJob(parent.clone()),
                _ => QueueError::Redis(e),
            })?;
        Ok(enqueued)
    }

    /// Cancels the unfinished children of job `id`, and theirs. (Boxed: it calls itself for
    /// the children's children.)
    pub(crate) fn cancel_children<'a>(
        &'a self,
        id: &'a JobId,
    ) -> std::pin::Pin<Box<dyn Future<Output = Result<()>> + Send + 'a>> {
        Box::pin(async move {
            let children = match self.status(id).await {
                Ok(status) => status.record.children,
                Err(QueueError::NoSuchJob(_)) => return Ok(()),
                Err(error) => return Err(error),
            };
            for child in children {
                let Ok(child) = child.parse::<JobId>() else {
                    continue;
                };
                match self.cancel_one(&child).await {
                    Ok(_) | Err(QueueError::NoSuchJob(_)) => {}
                    Err(error) => return Err(error),
                }
                self.cancel_children(&child).await?;
            }
            Ok(())
        })
    }

    /// Waits up to `timeout` for job `id` to end (for a parent waiting on its child).
    pub async fn wait_ended(&self, id: &JobId, timeout: Duration) -> Result<JobStatus> {
        let status = self.wait(id, Some(timeout), |_| {}).await?;
        match status.record.state {
            JobState::Succeeded | JobState::Failed | JobState::Cancelled => Ok(status),
            _ => Err(QueueError::WaitTimedOut(id.clone())),
        }
    }
}
