//! Child jobs: jobs a running job enqueues (`wasmgear:job/jobs`), each recording its parent,
//! the parent listing them; enqueued once per parent and key, whichever attempt of the parent
//! asks; cancelled with their parent.

use std::time::Duration;

use super::client::{Client, Enqueued};
use super::options::EnqueueOptions;
use super::{QueueError, Result, scripts};
use wasmgear_proto::crypto;
use wasmgear_proto::model::{JobState, JobStatus};
use wasmgear_proto::{FunctionName, JobId};

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
        // A parent whose cancel was asked for, or that has ended, gets no new child. A child
        // joins its parent's group (a tenant's fan-out stays the tenant's) unless given one.
        let (status, group) = self.adopt_asking(parent).await?;
        if status != "running" {
            return Err(QueueError::ParentGone(
                parent.clone(),
                parent_status(&status),
            ));
        }
        let options = EnqueueOptions {
            group: options.group.or((!group.is_empty()).then_some(group)),
            ..options
        };
        let enqueued = self
            .submit(function, &[(input, options)])
            .await?
            .into_iter()
            .next()
            .ok_or_else(|| QueueError::BadOption("the child was not enqueued".into()))?;
        // Also when it existed already: its parent may have died between the two calls.
        let status = self.adopt(parent, &enqueued.id.to_string()).await?;
        if status != "running" {
            // The parent's cancel came (or it ended) while the child was enqueued: the child
            // goes too, and its own children.
            match self.cancel_one(&enqueued.id).await {
                Ok(_) | Err(QueueError::NoSuchJob(_)) => {}
                Err(error) => return Err(error),
            }
            self.cancel_children(&enqueued.id).await?;
            return Err(QueueError::ParentGone(
                parent.clone(),
                parent_status(&status),
            ));
        }
        Ok(enqueued)
    }

    /// Asks `parent`'s record whether it may have children (`child` empty), or lists `child`
    /// in it; returns the parent's status as `adopt` answers it.
    /// Asks whether `parent` may have a new child: its status (as `adopt` answers) and its
    /// group (`""`: none).
    async fn adopt_asking(&self, parent: &JobId) -> Result<(String, String)> {
        let (_, status, group): (u64, String, String) =
            scripts::on_function(&scripts::ADOPT, &parent.function)
                .arg(parent.seq)
                .arg("")
                .arg("group")
                .invoke_async(&mut self.conn.clone())
                .await
                .map_err(|e| match e.code() {
                    Some("NOJOB") => QueueError::NoSuchJob(parent.clone()),
                    _ => QueueError::Redis(e),
                })?;
        Ok((status, group))
    }

    async fn adopt(&self, parent: &JobId, child: &str) -> Result<String> {
        let (_, status): (u64, String) = scripts::on_function(&scripts::ADOPT, &parent.function)
            .arg(parent.seq)
            .arg(child)
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(|e| match e.code() {
                Some("NOJOB") => QueueError::NoSuchJob(parent.clone()),
                _ => QueueError::Redis(e),
            })?;
        Ok(status)
    }

    /// Cancels the unfinished children of job `id`, and theirs, down the tree: each job once
    /// however often records list it (a record made by hand may hold a cycle), at most
    /// [`wasmgear_proto::limits::MAX_CHILDREN`] children read per job.
    pub(crate) async fn cancel_children(&self, id: &JobId) -> Result<()> {
        let mut seen = std::collections::HashSet::from([id.clone()]);
        let mut todo = vec![id.clone()];
        while let Some(parent) = todo.pop() {
            let children = match self.status(&parent).await {
                Ok(status) => status.record.children,
                Err(QueueError::NoSuchJob(_)) => continue,
                Err(error) => return Err(error),
            };
            let most = wasmgear_proto::limits::MAX_CHILDREN as usize;
            for child in children.into_iter().take(most) {
                let Ok(child) = child.parse::<JobId>() else {
                    continue;
                };
                if !seen.insert(child.clone()) {
                    continue;
                }
                match self.cancel_one(&child).await {
                    Ok(_) | Err(QueueError::NoSuchJob(_)) => {}
                    Err(error) => return Err(error),
                }
                todo.push(child);
            }
        }
        Ok(())
    }

    /// Waits up to `timeout` for job `id` to end (for a parent waiting on its child). A
    /// sealed output this client has no keys to open is an error that says so (a sealed
    /// error message says so itself: [`Client::status`]).
    pub async fn wait_ended(&self, id: &JobId, timeout: Duration) -> Result<JobStatus> {
        let status = self.wait(id, Some(timeout), |_| {}).await?;
        let output = status
            .output
            .as_deref()
            .filter(|o| o.starts_with(crypto::MAGIC));
        if let Some(sealed) = output.filter(|_| self.keys.is_none()) {
            let key = crypto::sealed_with(sealed).unwrap_or_else(|| "?".into());
            return Err(QueueError::Encryption(format!(
                "job {id}: {}",
                crypto::CryptoError::NoKeys(key)
            )));
        }
        match status.record.state {
            JobState::Succeeded | JobState::Failed | JobState::Cancelled | JobState::Expired => {
                Ok(status)
            }
            _ => Err(QueueError::WaitTimedOut(id.clone())),
        }
    }
}

/// Why a parent can have no new child, from the status `adopt` answers.
fn parent_status(status: &str) -> String {
    match status {
        "cancelling" => "its cancel has been asked for".into(),
        "full" => format!(
            "it has {} children already, the most one job may have",
            wasmgear_proto::limits::MAX_CHILDREN
        ),
        state => format!("it is {state}, not running"),
    }
}
