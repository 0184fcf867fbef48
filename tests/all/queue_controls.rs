//! The queue's controls, through the library: finished jobs expire and are capped, a pause
//! stops leasing until resume, a rate limit and a concurrency cap hold across workers.

use std::time::Duration;

use wasmgear_client::{EnqueueOptions, JobState, Setting};
use wasmgear_proto::ErrorClass;

use crate::support::hand::Hand;
use crate::support::jobs::state;
use wasmgear_testkit::{TestRedis, eventually, function};

/// Finished jobs go after their retention, failed ones after their longer one; a cap per
/// function forgets the oldest beyond it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finished_jobs_expire_and_are_capped() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let hand = Hand::connect(&redis.url(), "hand").await;
    let f = function("short");
    let options = EnqueueOptions {
        retention: Duration::from_secs(1),
        failed_retention: Duration::from_secs(60),
        max_attempts: Some(1),
        ..EnqueueOptions::default()
    };
    let ids = client
        .enqueue_many(
            &f,
            &[(&b""[..], options.clone()), (&b""[..], options.clone())],
        )
        .await
        .unwrap();
    let leases = hand.take(&f, 2).await;
    hand.succeed(&leases[0], b"out").await;
    hand.fail(&leases[1], ErrorClass::Trap, false).await;
    eventually(Duration::from_secs(10), "the retention over", || async {
        hand.take(&f, 1).await;
        client.status(&ids[0]).await.is_err().then_some(())
    })
    .await;
    assert_eq!(
        state(&client, &ids[1]).await,
        JobState::Failed,
        "the failed job went too soon"
    );
    let q = client.queue(&f).await.unwrap();
    assert_eq!((q.succeeded, q.failed), (0, 1));

    let g = function("capped");
    client
        .configure(&g, &[Setting::KeepFinished(Some(3))])
        .await
        .unwrap();
    let ids = client
        .enqueue_many(&g, &vec![(&b""[..], EnqueueOptions::default()); 8])
        .await
        .unwrap();
    for lease in hand.take(&g, 8).await {
        hand.succeed(&lease, b"").await;
    }
    hand.take(&g, 1).await;
    let kept: Vec<bool> = {
        let mut kept = Vec::new();
        for id in &ids {
            kept.push(client.status(id).await.is_ok());
        }
        kept
    };
    assert_eq!(kept, [false, false, false, false, false, true, true, true]);
    assert_eq!(client.queue(&g).await.unwrap().succeeded, 3);
}

/// A paused function's jobs are not leased (enqueueing goes on); resumed, they are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_stops_leasing_until_resume() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let hand = Hand::connect(&redis.url(), "hand").await;
    let f = function("paused");
    client
        .configure(&f, &[Setting::Paused(true)])
        .await
        .unwrap();
    let id = client
        .enqueue(&f, b"", &EnqueueOptions::default())
        .await
        .unwrap();
    assert!(hand.take(&f, 5).await.is_empty());
    assert!(client.queue(&f).await.unwrap().paused);
    client
        .configure(&f, &[Setting::Paused(false)])
        .await
        .unwrap();
    assert_eq!(hand.next(&f).await.info.id, id);
}

/// The rate limit and the concurrency cap hold over all workers together.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limit_and_concurrency_cap_hold_across_workers() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let one = Hand::connect(&redis.url(), "one").await;
    let two = Hand::connect(&redis.url(), "two").await;

    let f = function("limited");
    client
        .configure(&f, &[Setting::RateLimit(Some((3, Duration::from_secs(2))))])
        .await
        .unwrap();
    client
        .enqueue_many(&f, &vec![(&b""[..], EnqueueOptions::default()); 10])
        .await
        .unwrap();
    let first = one.take(&f, 2).await.len() + two.take(&f, 10).await.len();
    assert_eq!(first, 3);
    assert!(one.take(&f, 10).await.is_empty());
    // The next window opens with three more.
    let next = eventually(Duration::from_secs(10), "the next window", || async {
        let taken = two.take(&f, 10).await.len();
        (taken > 0).then_some(taken)
    })
    .await;
    assert_eq!(next, 3);
    client
        .configure(&f, &[Setting::RateLimit(None)])
        .await
        .unwrap();
    assert_eq!(one.take(&f, 10).await.len(), 4);

    let g = function("capped");
    client
        .configure(&g, &[Setting::Concurrency(Some(2))])
        .await
        .unwrap();
    client
        .enqueue_many(&g, &vec![(&b""[..], EnqueueOptions::default()); 5])
        .await
        .unwrap();
    let a = one.take(&g, 5).await;
    assert_eq!(a.len(), 2);
    assert!(
        two.take(&g, 5).await.is_empty(),
        "the cap must hold across workers"
    );
    one.succeed(&a[0], b"").await;
    let b = two.take(&g, 5).await;
    assert_eq!(b.len(), 1);
    assert!(
        client
            .configure(&g, &[Setting::Concurrency(Some(0))])
            .await
            .is_err()
    );
}
