//! The lease protocol through `WorkerQueue` directly: fencing, reclaim, order, delay.

use std::time::Duration;

use wasmgear::job::{Completion, ErrorClass, JobFailure, LeaseStatus, Progress};
use wasmgear::queue::{EnqueueOptions, JobState, Priority, WorkerQueue};

use crate::support::{TestRedis, eventually, function};

const TTL: Duration = Duration::from_secs(30);

/// A completion is accepted once; a second one, or one after the lease was taken over
/// by another worker, is refused and changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completion_is_fenced_by_the_lease_token() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let f = function("echo");
    let id = client
        .enqueue(&f, b"in", &EnqueueOptions::default())
        .await
        .unwrap();
    let a = WorkerQueue::connect(&redis.url(), "worker-a")
        .await
        .unwrap();
    let b = WorkerQueue::connect(&redis.url(), "worker-b")
        .await
        .unwrap();

    let lease_a = a
        .lease(std::slice::from_ref(&f), 5, Duration::from_millis(300))
        .await
        .unwrap();
    assert_eq!(lease_a.len(), 1);
    let lease_a = lease_a.into_iter().next().unwrap();
    assert_eq!(lease_a.info.id, id);
    assert_eq!(lease_a.input, b"in");
    assert!(
        b.lease(std::slice::from_ref(&f), 5, TTL)
            .await
            .unwrap()
            .is_empty(),
        "leased twice"
    );

    // A's lease expires; B reclaims the job (a second attempt).
    let lease_b = eventually(Duration::from_secs(5), "the reclaim", || async {
        b.lease(std::slice::from_ref(&f), 5, TTL)
            .await
            .unwrap()
            .into_iter()
            .next()
    })
    .await;
    assert_eq!(lease_b.info.attempt, 2);
    assert_eq!(
        a.heartbeat(&lease_a, TTL).await.unwrap(),
        LeaseStatus::Lost,
        "a stale heartbeat must fail"
    );
    assert_eq!(b.heartbeat(&lease_b, TTL).await.unwrap(), LeaseStatus::Held);
    assert!(!a.progress(&lease_a, &Progress::default()).await.unwrap());
    assert_eq!(
        a.complete(&lease_a, b"from a").await.unwrap(),
        Completion::Stale
    );
    assert_eq!(
        b.complete(&lease_b, b"from b").await.unwrap(),
        Completion::Accepted("succeeded".into())
    );
    assert_eq!(
        b.complete(&lease_b, b"again").await.unwrap(),
        Completion::Stale
    );
    let failure = JobFailure::new(ErrorClass::Trap, "late");
    assert_eq!(a.fail(&lease_a, &failure).await.unwrap(), Completion::Stale);

    let status = client.status(&id).await.unwrap();
    assert_eq!(status.record.state, JobState::Succeeded);
    assert_eq!(status.output.as_deref(), Some(&b"from b"[..]));
    let outcomes: Vec<_> = status
        .record
        .history
        .iter()
        .map(|h| h.outcome.as_str())
        .collect();
    assert_eq!(outcomes, ["lease-lost", "succeeded"]);
}

/// Higher priorities are leased first, and jobs of one priority in the order enqueued.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_follow_priority_then_fifo() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let f = function("echo");
    let mut expected = Vec::new();
    for (i, priority) in ["low", "normal", "high", "normal", "7", "low"]
        .iter()
        .enumerate()
    {
        let options = EnqueueOptions {
            priority: priority.parse().unwrap(),
            ..EnqueueOptions::default()
        };
        let id = client
            .enqueue(&f, i.to_string().as_bytes(), &options)
            .await
            .unwrap();
        expected.push((std::cmp::Reverse(options.priority), id));
    }
    expected.sort();
    let worker = WorkerQueue::connect(&redis.url(), "w").await.unwrap();
    let mut order = Vec::new();
    for _ in 0..expected.len() {
        order.extend(
            worker
                .lease(std::slice::from_ref(&f), 1, TTL)
                .await
                .unwrap()
                .into_iter()
                .map(|l| l.info.id),
        );
    }
    assert_eq!(
        order,
        expected.into_iter().map(|(_, id)| id).collect::<Vec<_>>()
    );
    assert!(Priority::new(1001).is_err() && "urgent".parse::<Priority>().is_err());
}

/// A delayed job is not leased before its time, and is leased once it is due.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delayed_job_waits_for_its_time() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let f = function("echo");
    let options = EnqueueOptions {
        delay: Duration::from_millis(700),
        ..EnqueueOptions::default()
    };
    let started = std::time::Instant::now();
    let id = client.enqueue(&f, b"later", &options).await.unwrap();
    assert_eq!(
        client.status(&id).await.unwrap().record.state,
        JobState::Scheduled
    );
    let worker = WorkerQueue::connect(&redis.url(), "w").await.unwrap();
    let lease = eventually(Duration::from_secs(5), "the delayed job", || async {
        worker
            .lease(std::slice::from_ref(&f), 1, TTL)
            .await
            .unwrap()
            .into_iter()
            .next()
    })
    .await;
    assert!(
        started.elapsed() >= Duration::from_millis(650),
        "leased after {:?}",
        started.elapsed()
    );
    assert_eq!(lease.info.id, id);
}

/// Invalid options are refused with a message naming them, and nothing is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_options_write_nothing() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let f = function("echo");
    let bad = [
        EnqueueOptions {
            max_attempts: 0,
            ..EnqueueOptions::default()
        },
        EnqueueOptions {
            timeout: Duration::ZERO,
            ..EnqueueOptions::default()
        },
    ];
    for options in bad {
        let error = client
            .enqueue(&f, b"x", &options)
            .await
            .unwrap_err()
            .to_string();
        assert!(error.contains("invalid job option"), "{error}");
    }
    let too_big = vec![0u8; wasmgear::queue::client::MAX_INPUT_BYTES + 1];
    let error = client
        .enqueue(&f, &too_big, &EnqueueOptions::default())
        .await
        .unwrap_err()
        .to_string();
    assert!(error.contains("larger than the limit"), "{error}");
    let ok = client
        .enqueue(&f, b"x", &EnqueueOptions::default())
        .await
        .unwrap();
    assert_eq!(ok.seq, 1, "a refused job must not use up a job number");
}
