//! [`Hand`]: a worker without plugins, a `WorkerQueue` that leases jobs and ends them as
//! the test says, for tests of the queue's library that need no component.

use std::time::Duration;

use wasmgear_client::{JobState, WorkerQueue};
use wasmgear_proto::{
    AttemptNotes, Completion, ErrorClass, FunctionName, JobFailure, Lease, LeaseRequest,
};

const TTL: Duration = Duration::from_secs(30);

/// A worker without plugins: leases jobs and ends them as the test says.
pub struct Hand {
    pub queue: WorkerQueue,
}

impl Hand {
    pub async fn connect(url: &str, name: &str) -> Self {
        let queue = WorkerQueue::connect(url, name).await.unwrap();
        Hand {
            queue: queue.with_backoff(Duration::from_millis(1), Duration::from_millis(1)),
        }
    }

    /// Leases up to `max` jobs of `f`.
    pub async fn take(&self, f: &FunctionName, max: usize) -> Vec<Lease> {
        self.queue
            .lease(&[LeaseRequest::new(f.clone())], max, TTL)
            .await
            .unwrap()
    }

    /// Leases exactly the next job of `f`.
    pub async fn next(&self, f: &FunctionName) -> Lease {
        let mut leases = self.take(f, 1).await;
        assert_eq!(leases.len(), 1, "expected a job of {f} to lease");
        leases.remove(0)
    }

    pub async fn succeed(&self, lease: &Lease, output: &[u8]) {
        let done = self
            .queue
            .complete(lease, output, &AttemptNotes::default())
            .await
            .unwrap();
        assert!(matches!(done, Completion::Accepted(_)), "{done:?}");
    }

    /// Fails the attempt (for good unless `retryable` and attempts remain).
    pub async fn fail(&self, lease: &Lease, class: ErrorClass, retryable: bool) -> JobState {
        let mut failure = JobFailure::new(class, format!("{} failed on purpose", lease.info.id));
        failure.retryable = retryable;
        match self
            .queue
            .fail(lease, &failure, &AttemptNotes::default())
            .await
            .unwrap()
        {
            Completion::Accepted(state) => state,
            other => panic!("failure refused: {other:?}"),
        }
    }
}
