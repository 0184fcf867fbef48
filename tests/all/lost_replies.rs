//! Calls whose reply is lost (the script ran, the answer never came back: a proxy loses it)
//! are sent again and answered as the first time: enqueues, leases, completions and reports;
//! what Redis keeps to answer them is forgotten once the client has its answer.

use std::time::Duration;

use wasmgear_client::{EnqueueOptions, JobState};
use wasmgear_proto::{JobId, LeaseRequest, LeaseStatus};

use crate::support::jobs::{once, plain_jobs};
use crate::support::library::Library;
use wasmgear_testkit::proxy::Proxy;
use wasmgear_testkit::{TestRedis, function};

/// An enqueue whose reply is lost (the script ran, the connection dropped before the answer
/// came back) is sent again with the same call id and answered from what the first one did:
/// one job, not two.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_enqueue_whose_reply_is_lost_is_applied_once() {
    let redis = TestRedis::start();
    let proxy = Proxy::start(redis.port()).await;
    let client = wasmgear_client::Client::connect(&proxy.url())
        .await
        .unwrap();
    let f = function("replayed");
    let first = client
        .enqueue(&f, b"a", &EnqueueOptions::default())
        .await
        .unwrap();
    proxy.lose_next_reply();
    let second = client
        .enqueue(&f, b"b", &EnqueueOptions::default())
        .await
        .unwrap();
    assert!(
        proxy.reply_lost(),
        "the reply to the second enqueue was thrown away"
    );
    assert_eq!((first.seq, second.seq), (1, 2));
    let mut conn = redis.raw().await;
    let jobs: u64 = redis::cmd("HLEN")
        .arg("wg:{replayed}:jobs")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(jobs, 2, "the enqueue was applied twice");
}

/// A lease whose reply is lost is sent again with the same call id and gets the leases the
/// first call made: the job is not left leased to nobody, and its attempt is the first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_whose_reply_is_lost_is_replayed() {
    let redis = TestRedis::start();
    let proxy = Proxy::start(redis.port()).await;
    let client = redis.client().await;
    let f = function("replayed");
    let queue = wasmgear_client::WorkerQueue::connect(&proxy.url(), "cut-worker")
        .await
        .unwrap();
    // Load the script first, so that the reply lost is the one of a lease that ran.
    assert!(
        queue
            .lease(&[LeaseRequest::new(f.clone())], 1, Duration::from_secs(30))
            .await
            .unwrap()
            .is_empty()
    );
    let id = client
        .enqueue(&f, b"x", &once(Duration::from_secs(30)))
        .await
        .unwrap();
    proxy.lose_next_reply();
    let leases = queue
        .lease(&[LeaseRequest::new(f.clone())], 1, Duration::from_secs(30))
        .await
        .unwrap();
    assert!(proxy.reply_lost(), "the reply to the lease was thrown away");
    assert_eq!(leases.len(), 1, "the lease made by the lost call came back");
    assert_eq!(leases[0].info.id, id);
    assert_eq!(leases[0].info.attempt, 1);
    let record = client.status(&id).await.unwrap().record;
    assert_eq!(record.state, JobState::Running);
    assert_eq!(record.worker.as_deref(), Some("cut-worker"));
    let beat = queue
        .heartbeat(&leases[0], Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(
        beat,
        LeaseStatus::Held,
        "the replayed lease is the one Redis holds"
    );
}

/// A completion that also leases the next job, whose reply is lost, is sent again and
/// answered as the first time: the job is reported accepted (not refused as stale), and the
/// next job comes back with the lease the lost call made, which Redis holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completion_whose_reply_is_lost_is_answered_the_same() {
    let redis = TestRedis::start();
    let proxy = Proxy::start(redis.port()).await;
    let client = redis.client().await;
    let f = function("completed-twice");
    let queue = wasmgear_client::WorkerQueue::connect(&proxy.url(), "cut-worker")
        .await
        .unwrap();
    // Listening to nothing: no pub/sub message can be the reply the proxy loses, and no
    // other function may have work.
    queue.listen(&[]).await.unwrap();
    let ttl = Duration::from_secs(30);
    let first = client.enqueue(&f, b"1", &once(ttl)).await.unwrap();
    let second = client.enqueue(&f, b"2", &once(ttl)).await.unwrap();
    let leases = queue
        .lease(&[LeaseRequest::new(f.clone())], 1, ttl)
        .await
        .unwrap();
    assert_eq!(leases.len(), 1);
    assert_eq!(leases[0].info.id, first);
    proxy.lose_next_reply();
    let (completion, next) = queue
        .complete_and_lease(
            &leases[0],
            b"out",
            &Default::default(),
            &LeaseRequest::new(f.clone()),
            ttl,
        )
        .await
        .unwrap();
    assert!(
        proxy.reply_lost(),
        "the reply to the completion was thrown away"
    );
    assert_eq!(
        completion,
        wasmgear_proto::Completion::Accepted(JobState::Succeeded)
    );
    let done = client.status(&first).await.unwrap();
    assert_eq!(done.record.state, JobState::Succeeded);
    assert_eq!(done.output.as_deref(), Some(&b"out"[..]));
    assert_eq!(done.record.history.len(), 1, "completed once");
    assert_eq!(next.len(), 1, "the job leased by the lost call came back");
    let next = &next[0];
    assert_eq!(next.info.id, second);
    assert_eq!(next.input, b"2");
    assert_eq!(next.info.attempt, 1);
    assert_eq!(
        queue.heartbeat(next, ttl).await.unwrap(),
        LeaseStatus::Held,
        "the replayed lease is the one Redis holds"
    );
    // The first job's report sent again (under a new call id) is answered as the first was,
    // its output kept.
    assert_eq!(
        queue
            .complete(&leases[0], b"again", &Default::default())
            .await
            .unwrap(),
        wasmgear_proto::Completion::Accepted(JobState::Succeeded)
    );
    let done = client.status(&first).await.unwrap();
    assert_eq!(done.output.as_deref(), Some(&b"out"[..]));
    assert_eq!(done.record.history.len(), 1, "completed once");
}

/// What Redis keeps to answer an `enqueue` sent again is forgotten once the client has the
/// reply (its next call on the function says so): a steady producer leaves one entry, not
/// one per call for ten minutes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replies_kept_for_calls_sent_again_are_forgotten_once_answered() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let f = function("producer");
    for _ in 0..5 {
        let batch: Vec<(&[u8], EnqueueOptions)> = (0..10)
            .map(|_| (&b"x"[..], EnqueueOptions::default()))
            .collect();
        client.enqueue_many(&f, &batch).await.unwrap();
    }
    let mut conn = redis.raw().await;
    let keys = wasmgear_proto::keys::FunctionKeys::new(&f);
    let kept: u64 = redis::cmd("HLEN")
        .arg(keys.calls())
        .query_async(&mut conn)
        .await
        .unwrap();
    let expiring: u64 = redis::cmd("ZCARD")
        .arg(keys.calls_expiry())
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(
        (kept, expiring),
        (1, 1),
        "only the last call's reply is kept"
    );
    assert_eq!(client.queue(&f).await.unwrap().queued, 50);
}

/// A result reported again under another call id (the worker's retry after a lost reply)
/// is answered as the first was: accepted, the output kept, nothing changed; the same for a
/// failure and a hand-back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_report_sent_again_is_answered_as_the_first() {
    let redis = TestRedis::start();
    let f = function("again");
    let library = Library::new(redis.raw().await, &f);
    let client = redis.client().await;
    client.enqueue_many(&f, &plain_jobs(b"x", 3)).await.unwrap();
    let (leases, ..): (Vec<Vec<u8>>, i64, i64, redis::Value, String) = library
        .ok("lease", &["w", "w/1", "3", "30000", "1000", "3"])
        .await;
    let rows: Vec<(String, String)> = leases
        .chunks(2)
        .map(|pair| {
            let row = String::from_utf8(pair[0].clone()).unwrap();
            let number = row.split('|').next().unwrap().to_string();
            (number, row.rsplit('|').next().unwrap().to_string())
        })
        .collect();
    let (one, two, three) = (&rows[0], &rows[1], &rows[2]);
    let complete = |call: &'static str, output: &'static str| {
        let library = library.clone();
        let (number, token) = one.clone();
        async move {
            let (results, ..): (String, redis::Value, redis::Value, i64, i64, u32) = library
                .ok(
                    "complete",
                    &["1", "call", call, "1", &number, &token, output, "", "v1"],
                )
                .await;
            results
        }
    };
    assert_eq!(complete("c1", "first").await, "s");
    assert_eq!(complete("c2", "second").await, "s");
    let status = client
        .status(&JobId {
            function: f.clone(),
            seq: one.0.parse().unwrap(),
        })
        .await
        .unwrap();
    assert_eq!(status.record.state, JobState::Succeeded);
    assert_eq!(status.output.as_deref(), Some(&b"first"[..]));
    let fail = |library: Library, number: String, token: String| async move {
        let reply: (i64, String, redis::Value) = library
            .ok("fail", &[&number, &token, "trap", "boom", "0", "0", "", ""])
            .await;
        (reply.0, reply.1)
    };
    let first = fail(library.clone(), two.0.clone(), two.1.clone()).await;
    assert_eq!(first, (1, "failed".to_string()));
    assert_eq!(
        fail(library.clone(), two.0.clone(), two.1.clone()).await,
        first
    );
    let release = |library: Library, number: String, token: String| async move {
        let reply: (i64, String, redis::Value) = library.ok("release", &[&number, &token]).await;
        (reply.0, reply.1)
    };
    let first = release(library.clone(), three.0.clone(), three.1.clone()).await;
    assert_eq!(first, (1, "queued".to_string()));
    assert_eq!(
        release(library.clone(), three.0.clone(), three.1.clone()).await,
        first
    );
    // A token that never held the lease is still refused.
    let (results, ..): (String, redis::Value, redis::Value, i64, i64, u32) = library
        .ok("complete", &["0", "1", &one.0, "w/other:1:1", "x", "", ""])
        .await;
    assert_eq!(results, "x");
}
