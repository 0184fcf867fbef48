//! Cancellation: waiting jobs at once, running jobs cooperatively or, failing that, hard.

use std::time::{Duration, Instant};

use wasmgear_client::{CancelOutcome, EnqueueOptions, JobState};
use wasmgear_runtime::{Limits, RuntimeConfig};

use wasmgear_testkit::{TestRedis, TestWorker, TestWorkerOptions, eventually, function};

/// A worker whose cancel grace period is `grace`.
async fn worker_with_grace(redis: &TestRedis, plugins: &[&str], grace: Duration) -> TestWorker {
    let options = TestWorkerOptions {
        runtime: RuntimeConfig {
            max_instances: 8,
            limits: Limits {
                cancel_grace: grace,
                ..Limits::default()
            },
            fuel: false,
            cache: None,
        },
        ..TestWorkerOptions::default()
    };
    TestWorker::start_with(redis, plugins, options).await
}

/// Queued and scheduled jobs are cancelled at once and never run; cancelling again changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_jobs_are_cancelled_at_once() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let echo = function("echo");
    let queued = client
        .enqueue(&echo, b"q", &EnqueueOptions::default())
        .await
        .unwrap();
    let delayed = EnqueueOptions {
        delay: Duration::from_millis(200),
        ..EnqueueOptions::default()
    };
    let scheduled = client.enqueue(&echo, b"s", &delayed).await.unwrap();
    assert_eq!(
        client.cancel(&queued).await.unwrap(),
        CancelOutcome::Cancelled
    );
    assert_eq!(
        client.cancel(&scheduled).await.unwrap(),
        CancelOutcome::Cancelled
    );
    assert_eq!(
        client.cancel(&queued).await.unwrap(),
        CancelOutcome::AlreadyEnded(JobState::Cancelled)
    );

    let worker = TestWorker::start(&redis, &["echo"]).await;
    redis.until_subscribed("wg:{echo}:work", 1).await;
    let last = client
        .enqueue(&echo, b"after", &EnqueueOptions::default())
        .await
        .unwrap();
    client
        .wait(&last, Some(Duration::from_secs(30)), |_| {})
        .await
        .unwrap();
    for id in [queued, scheduled] {
        let status = client.status(&id).await.unwrap();
        assert_eq!(status.record.state, JobState::Cancelled, "{id}");
        assert_eq!(status.record.attempt, 0, "{id} must never have run");
        assert_eq!(status.record.error.unwrap().class, "cancelled");
    }
    worker.stop().await;
}

/// A running job that checks `cancelled()` stops soon after the cancel, well within the grace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_job_that_checks_stops_at_once() {
    let redis = TestRedis::start();
    let worker = worker_with_grace(&redis, &["count"], Duration::from_secs(60)).await;
    let client = redis.client().await;
    let id = client
        .enqueue(&function("count"), b"100000 20", &EnqueueOptions::default())
        .await
        .unwrap();
    eventually(Duration::from_secs(20), "progress", || async {
        client
            .status(&id)
            .await
            .unwrap()
            .record
            .progress
            .filter(|p| p.done >= 2)
    })
    .await;
    let asked = Instant::now();
    assert_eq!(client.cancel(&id).await.unwrap(), CancelOutcome::Stopping);
    let status = client
        .wait(&id, Some(Duration::from_secs(30)), |_| {})
        .await
        .unwrap();
    assert!(
        asked.elapsed() < Duration::from_secs(10),
        "took {:?}",
        asked.elapsed()
    );
    assert_eq!(status.record.state, JobState::Cancelled);
    let error = status.record.error.unwrap();
    assert_eq!(error.class, "cancelled");
    assert!(
        error.message.contains("cancelled after"),
        "{}",
        error.message
    );
    worker.stop().await;
}

/// A running job that never checks is stopped hard once the grace period is over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_job_that_ignores_cancel_is_stopped_after_the_grace_period() {
    let redis = TestRedis::start();
    let worker = worker_with_grace(&redis, &["spin", "echo"], Duration::from_millis(300)).await;
    let client = redis.client().await;
    let id = client
        .enqueue(&function("spin"), b"forever", &EnqueueOptions::default())
        .await
        .unwrap();
    eventually(Duration::from_secs(20), "the job to run", || async {
        (client.status(&id).await.unwrap().record.state == JobState::Running).then_some(())
    })
    .await;
    assert_eq!(client.cancel(&id).await.unwrap(), CancelOutcome::Stopping);
    let status = client
        .wait(&id, Some(Duration::from_secs(30)), |_| {})
        .await
        .unwrap();
    assert_eq!(status.record.state, JobState::Cancelled);
    let error = status.record.error.unwrap();
    assert_eq!(error.class, "cancelled");
    assert!(
        error.message.contains("did not stop within 300 ms"),
        "{}",
        error.message
    );
    // The worker is fine: it still runs jobs.
    let echo = client
        .enqueue(&function("echo"), b"alive", &EnqueueOptions::default())
        .await
        .unwrap();
    let status = client
        .wait(&echo, Some(Duration::from_secs(30)), |_| {})
        .await
        .unwrap();
    assert_eq!(status.output.as_deref(), Some(&b"alive"[..]));
    worker.stop().await;
}

/// A job that runs past its timeout is stopped and retried, then fails as `timed-out`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_past_its_timeout_is_stopped() {
    let redis = TestRedis::start();
    let worker = TestWorker::start(&redis, &["spin"]).await;
    let client = redis.client().await;
    let options = EnqueueOptions {
        timeout: Some(Duration::from_millis(200)),
        max_attempts: Some(2),
        ..EnqueueOptions::default()
    };
    let id = client
        .enqueue(&function("spin"), b"forever", &options)
        .await
        .unwrap();
    let status = client
        .wait(&id, Some(Duration::from_secs(30)), |_| {})
        .await
        .unwrap();
    assert_eq!(status.record.state, JobState::Failed);
    assert_eq!(status.record.attempt, 2);
    assert_eq!(status.record.error.unwrap().class, "timed-out");
    worker.stop().await;
}
