//! Cancellation: waiting jobs at once, running jobs cooperatively or, failing that, hard;
//! a cancel heard after the lease and before the start wins (the job never starts).

use std::time::{Duration, Instant};

use wasmgear_client::{CancelOutcome, EnqueueOptions, JobState, WorkerQueue};
use wasmgear_proto::{JobId, LeaseRequest};
use wasmgear_runtime::{Limits, RuntimeConfig};
use wasmgear_worker::WorkerConfig;

use crate::support::jobs::long_job;
use wasmgear_testkit::{
    TestRedis, TestWorker, TestWorkerOptions, eventually, function, plugin_dir,
};

const WAIT: Duration = Duration::from_secs(30);

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

/// The real queue, with its leases held (not given to the worker) until the test lets them
/// go: the time between a lease and the job's start, stretched.
struct HeldLeases {
    queue: WorkerQueue,
    leased: tokio::sync::mpsc::UnboundedSender<Vec<JobId>>,
    go: std::sync::Arc<tokio::sync::Semaphore>,
}

impl wasmgear_worker::JobSource for HeldLeases {
    async fn lease(
        &self,
        requests: &[LeaseRequest],
        max: usize,
        ttl: Duration,
    ) -> Result<Vec<wasmgear_proto::Lease>, wasmgear_worker::SourceError> {
        let leases = self.queue.lease(requests, max, ttl).await?;
        if !leases.is_empty() {
            let _ = self
                .leased
                .send(leases.iter().map(|l| l.info.id.clone()).collect());
            self.go.acquire().await?.forget();
        }
        Ok(leases)
    }
    async fn wait_for_work(&self, timeout: Duration) {
        self.queue.wait_for_work(timeout).await
    }
    async fn heartbeat(
        &self,
        lease: &wasmgear_proto::Lease,
        ttl: Duration,
    ) -> Result<wasmgear_proto::LeaseStatus, wasmgear_worker::SourceError> {
        Ok(self.queue.heartbeat(lease, ttl).await?)
    }
    fn cancel_requests(&self) -> tokio::sync::broadcast::Receiver<wasmgear_proto::CancelRequest> {
        self.queue.cancel_requests()
    }
    fn cancel_heard(&self, lease: &wasmgear_proto::Lease) -> bool {
        self.queue.cancel_heard(lease)
    }
    async fn progress(
        &self,
        lease: &wasmgear_proto::Lease,
        progress: &wasmgear_proto::Progress,
    ) -> Result<bool, wasmgear_worker::SourceError> {
        Ok(self.queue.progress(lease, progress).await?)
    }
    async fn complete(
        &self,
        lease: &wasmgear_proto::Lease,
        output: &[u8],
        notes: &wasmgear_proto::AttemptNotes,
    ) -> Result<wasmgear_proto::Completion, wasmgear_worker::SourceError> {
        Ok(self.queue.complete(lease, output, notes).await?)
    }
    async fn fail(
        &self,
        lease: &wasmgear_proto::Lease,
        failure: &wasmgear_proto::JobFailure,
        notes: &wasmgear_proto::AttemptNotes,
    ) -> Result<wasmgear_proto::Completion, wasmgear_worker::SourceError> {
        Ok(self.queue.fail(lease, failure, notes).await?)
    }
    fn worker_id(&self) -> &str {
        self.queue.worker_id()
    }
    async fn serve(
        &self,
        functions: &[wasmgear_proto::FunctionName],
    ) -> Result<(), wasmgear_worker::SourceError> {
        Ok(self.queue.listen(functions).await?)
    }
    async fn release(
        &self,
        lease: &wasmgear_proto::Lease,
    ) -> Result<wasmgear_proto::Completion, wasmgear_worker::SourceError> {
        Ok(self.queue.release(lease).await?)
    }
}

/// A job whose cancel the worker heard after leasing it and before starting it never
/// starts: it ends cancelled "before it started", its plugin never run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_heard_before_a_job_starts_wins() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let hostile = function("hostile");
    let queue = WorkerQueue::connect(&redis.url(), "held").await.unwrap();
    let mut cancels = queue.cancel_requests();
    let (leased_tx, mut leased) = tokio::sync::mpsc::unbounded_channel();
    let go = std::sync::Arc::new(tokio::sync::Semaphore::new(0));
    let source = HeldLeases {
        queue,
        leased: leased_tx,
        go: go.clone(),
    };
    let dir = plugin_dir(&["hostile"]);
    let worker = wasmgear_worker::WorkerBuilder::new(dir.path())
        .config(WorkerConfig {
            concurrency: 1,
            ..WorkerConfig::default()
        })
        .load()
        .unwrap()
        .with_source(source);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(worker.run(async {
        let _ = stopped.await;
    }));
    let id = client
        .enqueue(&hostile, b"sleep 3600", &long_job())
        .await
        .unwrap();
    let held = tokio::time::timeout(WAIT, leased.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(held, std::slice::from_ref(&id));
    // Cancelled while the lease is held: the worker hears it before the job starts.
    client.cancel(&id).await.unwrap();
    loop {
        let request = tokio::time::timeout(WAIT, cancels.recv())
            .await
            .unwrap()
            .unwrap();
        if request.job == id {
            break;
        }
    }
    // The lease goes on to the worker.
    go.add_permits(1);
    let status = client.wait(&id, Some(WAIT), |_| {}).await.unwrap();
    assert_eq!(status.record.state, JobState::Cancelled);
    let error = status.record.error.unwrap();
    assert_eq!(error.message, "cancelled before it started", "{error:?}");
    let _ = stop.send(());
    tokio::time::timeout(WAIT, task).await.unwrap().unwrap();
}
