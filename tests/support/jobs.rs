//! Small builders and waits of jobs that several of the queue's tests share.

use std::time::Duration;

use wasmgear_client::{Client, EnqueueOptions, JobState};
use wasmgear_proto::JobId;
use wasmgear_testkit::eventually;

/// The state job `id` is in now.
pub async fn state(client: &Client, id: &JobId) -> JobState {
    client.status(id).await.unwrap().record.state
}

/// Options that make a job wait for `ids` to succeed.
pub fn after(ids: &[&JobId]) -> EnqueueOptions {
    EnqueueOptions {
        after: ids.iter().map(|id| (*id).clone()).collect(),
        ..EnqueueOptions::default()
    }
}

/// Options of a job with one attempt and `timeout`.
pub fn once(timeout: Duration) -> EnqueueOptions {
    EnqueueOptions {
        max_attempts: Some(1),
        timeout: Some(timeout),
        ..EnqueueOptions::default()
    }
}

/// Returns once job `id` is running (half a minute at most).
pub async fn running(client: &Client, id: &JobId) {
    eventually(Duration::from_secs(30), "the job to start", || async {
        (client.status(id).await.unwrap().record.state == JobState::Running).then_some(())
    })
    .await;
}

/// `n` jobs with `input` and the default options, for `enqueue_many`.
pub fn plain_jobs(input: &'static [u8], n: usize) -> Vec<(&'static [u8], EnqueueOptions)> {
    (0..n).map(|_| (input, EnqueueOptions::default())).collect()
}

/// Options of a job with one attempt and an hour to run.
pub fn long_job() -> EnqueueOptions {
    EnqueueOptions {
        max_attempts: Some(1),
        timeout: Some(Duration::from_secs(3600)),
        ..EnqueueOptions::default()
    }
}
