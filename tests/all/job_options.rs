//! Job options through the library against a real Redis, with a `Hand` (a `WorkerQueue`)
//! standing in for a worker's plugin: uniq keys coalesce unfinished jobs, dependencies hold
//! jobs until theirs succeed (a lost link is repaired), tags find jobs.

use std::time::Duration;

use wasmgear_client::{Client, EnqueueOptions, JobState};
use wasmgear_proto::{ErrorClass, JobId};

use crate::support::hand::Hand;
use crate::support::jobs::{after, state};
use wasmgear_testkit::{TestRedis, eventually, function};

fn uniq(key: &str) -> EnqueueOptions {
    EnqueueOptions {
        uniq: Some(key.into()),
        ..EnqueueOptions::default()
    }
}

/// Enqueueing with a uniq key while a job of the same function holds it (queued or
/// running) returns that job; other functions and other keys are separate; once it has
/// finished, the key makes a new job. Within one bulk call, too.
pub async fn check_uniq_coalescing(url: &str) {
    let client = Client::connect(url).await.unwrap();
    let hand = Hand::connect(url, "hand").await;
    let f = function("thumbs");
    let g = function("other");

    let first = client
        .submit(&f, &[(&b"a"[..], uniq("img-1"))])
        .await
        .unwrap();
    assert!(first[0].created);
    let again = client
        .submit(&f, &[(&b"b"[..], uniq("img-1"))])
        .await
        .unwrap();
    assert_eq!(again[0].id, first[0].id);
    assert!(!again[0].created, "the second enqueue must coalesce");
    let other_key = client.enqueue(&f, b"c", &uniq("img-2")).await.unwrap();
    let other_fn = client.enqueue(&g, b"d", &uniq("img-1")).await.unwrap();
    assert_ne!(other_key, first[0].id);
    assert_eq!(other_fn.function, g);
    let batch = client
        .submit(
            &f,
            &[(&b"e"[..], uniq("img-3")), (&b"f"[..], uniq("img-3"))],
        )
        .await
        .unwrap();
    assert_eq!(batch[0].id, batch[1].id);
    assert_eq!((batch[0].created, batch[1].created), (true, false));

    // Running: still coalesces; the one input is the first one's.
    let lease = hand.next(&f).await;
    assert_eq!(lease.info.id, first[0].id);
    assert_eq!(lease.input, b"a");
    assert_eq!(
        client.enqueue(&f, b"x", &uniq("img-1")).await.unwrap(),
        first[0].id
    );
    // Waiters on "either" are waiting on the same job and see the same output.
    let waiter = {
        let client = client.clone();
        let id = first[0].id.clone();
        tokio::spawn(async move {
            client
                .wait(&id, Some(Duration::from_secs(20)), |_| {})
                .await
        })
    };
    hand.succeed(&lease, b"thumbnail").await;
    let waited = waiter.await.unwrap().unwrap();
    assert_eq!(waited.output.as_deref(), Some(&b"thumbnail"[..]));

    // Finished: the key is free again.
    let fresh = client.enqueue(&f, b"y", &uniq("img-1")).await.unwrap();
    assert_ne!(fresh, first[0].id);
    assert_eq!(state(&client, &fresh).await, JobState::Queued);
    // A failed holder frees the key too.
    let _ = hand.take(&f, 10).await; // img-2, img-3 and the fresh one, in order
    let failing = client.enqueue(&f, b"z", &uniq("img-9")).await.unwrap();
    let lease = hand.next(&f).await;
    assert_eq!(lease.info.id, failing);
    hand.fail(&lease, ErrorClass::GuestError, false).await;
    assert_ne!(
        client.enqueue(&f, b"z", &uniq("img-9")).await.unwrap(),
        failing
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uniq_keys_coalesce_unfinished_jobs() {
    let redis = TestRedis::start();
    check_uniq_coalescing(&redis.url()).await;
}

/// A job with dependencies waits until all have succeeded, in its own function and in
/// others; a failed or cancelled dependency cancels it (naming the dependency), and the
/// cancellation reaches the dependents of the dependents.
pub async fn check_dependencies(url: &str) {
    let client = Client::connect(url).await.unwrap();
    let hand = Hand::connect(url, "hand").await;
    let fetch = function("fetch");
    let build = function("build");
    let ship = function("ship");

    let a = client
        .enqueue(&fetch, b"a", &EnqueueOptions::default())
        .await
        .unwrap();
    let b = client
        .enqueue(&build, b"b", &EnqueueOptions::default())
        .await
        .unwrap();
    // c (build) waits on a (fetch: another function) and b (build: its own); d on c.
    let c = client
        .enqueue(&build, b"c", &after(&[&a, &b]))
        .await
        .unwrap();
    let d = client.enqueue(&ship, b"d", &after(&[&c])).await.unwrap();
    assert_eq!(state(&client, &c).await, JobState::Waiting);
    assert_eq!(state(&client, &d).await, JobState::Waiting);
    let record = client.status(&c).await.unwrap().record;
    assert_eq!(record.waiting_on.len(), 2);

    // Only b is leasable in build: c waits.
    let lease_b = hand.next(&build).await;
    assert_eq!(lease_b.info.id, b);
    assert!(
        hand.take(&build, 5).await.is_empty(),
        "c ran before its dependencies"
    );
    hand.succeed(&lease_b, b"").await;
    assert_eq!(
        state(&client, &c).await,
        JobState::Waiting,
        "a has not run yet"
    );
    let lease_a = hand.next(&fetch).await;
    hand.succeed(&lease_a, b"").await;
    assert_eq!(state(&client, &c).await, JobState::Queued);
    let lease_c = hand.next(&build).await;
    assert_eq!(lease_c.info.id, c);
    hand.succeed(&lease_c, b"").await;
    assert_eq!(state(&client, &d).await, JobState::Queued);
    hand.succeed(&hand.next(&ship).await, b"").await;

    // A dependency that has already succeeded holds nothing up.
    let e = client
        .enqueue(&ship, b"e", &after(&[&a, &c]))
        .await
        .unwrap();
    assert_eq!(state(&client, &e).await, JobState::Queued);
    hand.succeed(&hand.next(&ship).await, b"").await;

    // A failure cancels the chain: f fails, g (other function) and h (g's dependent) end
    // cancelled, naming their dependency.
    let f = client
        .enqueue(&fetch, b"f", &EnqueueOptions::default())
        .await
        .unwrap();
    let g = client.enqueue(&build, b"g", &after(&[&f])).await.unwrap();
    let h = client.enqueue(&build, b"h", &after(&[&g])).await.unwrap();
    let i = client.enqueue(&ship, b"i", &after(&[&h])).await.unwrap();
    let lease_f = hand.next(&fetch).await;
    assert_eq!(
        hand.fail(&lease_f, ErrorClass::Trap, false).await,
        JobState::Failed
    );
    for (job, cause) in [(&g, &f), (&h, &g), (&i, &h)] {
        let status = client.status(job).await.unwrap();
        assert_eq!(status.record.state, JobState::Cancelled, "{job}");
        let error = status.record.error.unwrap();
        assert_eq!(error.class, "dependency");
        assert!(
            error.message.contains(&cause.to_string()),
            "{job}: {}",
            error.message
        );
    }
    assert!(hand.take(&build, 5).await.is_empty());

    // Cancelling a dependency cancels its dependents too.
    let j = client
        .enqueue(&fetch, b"j", &EnqueueOptions::default())
        .await
        .unwrap();
    let k = client.enqueue(&ship, b"k", &after(&[&j])).await.unwrap();
    client.cancel(&j).await.unwrap();
    let error = client.status(&k).await.unwrap().record.error.unwrap();
    assert!(
        error.message.contains(&format!("{j} cancelled")),
        "{}",
        error.message
    );

    // Bad dependencies are refused, and nothing is written.
    let before = client.queue(&ship).await.unwrap();
    for bad in [
        &f,
        &JobId {
            function: fetch.clone(),
            seq: 999,
        },
        &JobId {
            function: ship.clone(),
            seq: 999,
        },
    ] {
        let err = client
            .enqueue(&ship, b"x", &after(&[bad]))
            .await
            .unwrap_err();
        assert!(err.to_string().contains(&bad.to_string()), "{err}");
    }
    assert_eq!(client.queue(&ship).await.unwrap(), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dependencies_hold_jobs_until_they_succeed() {
    let redis = TestRedis::start();
    check_dependencies(&redis.url()).await;
}

/// A link to another function lost between the two steps (a client that died) is repaired
/// by a worker's housekeeping: the waiting job still runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_dependency_link_is_repaired() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let hand = Hand::connect(&redis.url(), "hand").await;
    let (up, down) = (function("up"), function("down"));
    let a = client
        .enqueue(&up, b"a", &EnqueueOptions::default())
        .await
        .unwrap();
    let b = client.enqueue(&down, b"b", &after(&[&a])).await.unwrap();

    // Lose the link: the dependency forgets its dependent, as if the client had died
    // before linking, and the waiting job is due for a re-check.
    let mut conn = redis::Client::open(redis.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    // The record is written back as one JSON object, the layout records had before the
    // hot fields were kept apart: the scripts still read it.
    let jobs = format!("wg:{{{up}}}:jobs");
    let raw = redis.record_json(&up, a.seq).await.unwrap();
    let mut record: serde_json::Value = serde_json::from_str(&raw).unwrap();
    assert!(
        record
            .as_object_mut()
            .unwrap()
            .remove("dependents")
            .is_some()
    );
    let _: () = redis::cmd("HSET")
        .arg(&jobs)
        .arg(a.seq)
        .arg(record.to_string())
        .query_async(&mut conn)
        .await
        .unwrap();
    let _: () = redis::cmd("ZADD")
        .arg(format!("wg:{{{down}}}:waiting"))
        .arg(0)
        .arg(b.seq)
        .query_async(&mut conn)
        .await
        .unwrap();

    hand.succeed(&hand.next(&up).await, b"").await;
    assert_eq!(
        state(&client, &b).await,
        JobState::Waiting,
        "the link was not lost"
    );
    hand.queue
        .relink(std::slice::from_ref(&down))
        .await
        .unwrap();
    assert_eq!(state(&client, &b).await, JobState::Queued);
    assert_eq!(hand.next(&down).await.info.id, b);
}

/// Tags are kept on the job, found across functions, added and removed later, and
/// forgotten with the job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_are_found_by_tag() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let (f, g) = (function("resize"), function("upload"));
    let tagged = |tags: &[&str]| EnqueueOptions {
        tags: tags.iter().map(|t| t.to_string()).collect(),
        retention: Duration::from_secs(1),
        ..EnqueueOptions::default()
    };
    let a = client
        .enqueue(&f, b"", &tagged(&["customer-7", "urgent"]))
        .await
        .unwrap();
    let b = client
        .enqueue(&g, b"", &tagged(&["customer-7"]))
        .await
        .unwrap();
    let _c = client
        .enqueue(&f, b"", &tagged(&["customer-8"]))
        .await
        .unwrap();
    assert_eq!(
        client.tagged("customer-7", None, 100).await.unwrap(),
        vec![a.clone(), b.clone()]
    );
    assert_eq!(
        client.tagged("customer-7", Some(&g), 100).await.unwrap(),
        vec![b.clone()]
    );
    assert_eq!(
        client.tagged("urgent", None, 100).await.unwrap(),
        vec![a.clone()]
    );
    assert!(
        client
            .tagged("customer", None, 100)
            .await
            .unwrap()
            .is_empty(),
        "a tag matched a prefix"
    );
    assert_eq!(
        client.status(&a).await.unwrap().record.tags,
        vec!["customer-7", "urgent"]
    );

    let tags = client.tag(&b, true, &["urgent".into()]).await.unwrap();
    assert_eq!(tags, vec!["customer-7", "urgent"]);
    client.tag(&a, false, &["urgent".into()]).await.unwrap();
    assert_eq!(
        client.tagged("urgent", None, 100).await.unwrap(),
        vec![b.clone()]
    );
    let missing = JobId {
        function: f.clone(),
        seq: 99,
    };
    assert!(client.tag(&missing, true, &["x".into()]).await.is_err());
    assert!(client.tag(&a, true, &["bad\u{0}tag".into()]).await.is_err());

    // Finished and past retention, the job leaves the index.
    let hand = Hand::connect(&redis.url(), "hand").await;
    for lease in hand.take(&g, 5).await {
        hand.succeed(&lease, b"").await;
    }
    // A lease call forgets expired jobs: once the retention is over, one empties the index.
    eventually(Duration::from_secs(10), "the tag index emptied", || async {
        assert!(hand.take(&g, 5).await.is_empty());
        client
            .tagged("urgent", None, 100)
            .await
            .unwrap()
            .is_empty()
            .then_some(())
    })
    .await;
}
