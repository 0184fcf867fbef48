//! The queue behind a running job's child jobs (`wasmgear:job/jobs`): the runtime checks the
//! grant and the cap, this enqueues and waits through wasmgear's own queue.

use std::time::Duration;

use wasmgear_client::{Client, EnqueueOptions, JobState, Priority, QueueError};

use wasmgear_proto::{JobId, TraceContext};
use wasmgear_runtime::{ChildFuture, ChildJobs, ChildOutcome, ChildRequest};

/// The children of one running job.
pub(crate) struct Children {
    client: Client,
    parent: JobId,
    /// The trace context the parent's attempt passes on: its children join that trace.
    trace: Option<TraceContext>,
}

impl Children {
    pub(crate) fn new(client: Client, parent: JobId, trace: Option<TraceContext>) -> Self {
        Children {
            client,
            parent,
            trace,
        }
    }
}

impl ChildJobs for Children {
    fn enqueue(&self, request: ChildRequest) -> ChildFuture<Result<String, String>> {
        let (client, parent) = (self.client.clone(), self.parent.clone());
        let trace = self.trace.clone();
        Box::pin(async move {
            let priority = match request.priority {
                Some(p) => Priority::new(p).map_err(|e| e.to_string())?,
                None => Priority::NORMAL,
            };
            let options = EnqueueOptions {
                priority,
                max_attempts: request.max_attempts,
                timeout: request.timeout,
                trace,
                ..EnqueueOptions::default()
            };
            let enqueued = client
                .enqueue_child(
                    &parent,
                    &request.key,
                    &request.function,
                    &request.input,
                    options,
                )
                .await
                .map_err(|e| format!("cannot enqueue the child job: {e}"))?;
            Ok(enqueued.id.to_string())
        })
    }

    fn wait(&self, id: String, timeout: Duration) -> ChildFuture<Result<ChildOutcome, String>> {
        let client = self.client.clone();
        Box::pin(async move {
            let id: JobId = id
                .parse()
                .map_err(|e: wasmgear_proto::NameError| e.to_string())?;
            match client.wait_ended(&id, timeout).await {
                Ok(status) => Ok(match status.record.state {
                    JobState::Succeeded => {
                        ChildOutcome::Succeeded(status.output.unwrap_or_default())
                    }
                    JobState::Cancelled => ChildOutcome::Cancelled,
                    _ => ChildOutcome::Failed(
                        status
                            .record
                            .error
                            .map(|e| e.message)
                            .unwrap_or_else(|| "failed".into()),
                    ),
                }),
                Err(QueueError::WaitTimedOut(_)) => Err(format!(
                    "job {id} has not ended within {} ms (it goes on)",
                    timeout.as_millis()
                )),
                Err(error) => Err(error.to_string()),
            }
        })
    }
}
