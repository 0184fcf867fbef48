//! The seed features through the library against a real Redis, with `WorkerQueue` standing
//! in for a worker's plugin: uniq coalescing, dependencies, tags, failure groups and retry,
//! statistics, the queue overview, retention, pause, rate limit and concurrency cap.

use std::time::Duration;

use wasmgear_client::{Client, EnqueueOptions, JobState, Setting, WorkerQueue};
use wasmgear_proto::{
    AttemptNotes, Completion, ErrorClass, FunctionName, JobFailure, JobId, Lease, LeaseRequest,
};

use wasmgear_testkit::{TestRedis, eventually, function};

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

async fn state(client: &Client, id: &JobId) -> JobState {
    client.status(id).await.unwrap().record.state
}

fn uniq(key: &str) -> EnqueueOptions {
    EnqueueOptions {
        uniq: Some(key.into()),
        ..EnqueueOptions::default()
    }
}

fn after(ids: &[&JobId]) -> EnqueueOptions {
    EnqueueOptions {
        after: ids.iter().map(|id| (*id).clone()).collect(),
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

/// Failed jobs are grouped by error class with counts; a group lists its jobs with their
/// errors; retry requeues one job or the whole group, with its attempts again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failure_groups_list_and_retry_failed_jobs() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let hand = Hand::connect(&redis.url(), "hand").await;
    let f = function("import");
    let options = EnqueueOptions {
        max_attempts: Some(2),
        ..EnqueueOptions::default()
    };
    let ids = client
        .enqueue_many(
            &f,
            &[
                (&b"1"[..], options.clone()),
                (&b"2"[..], options.clone()),
                (&b"3"[..], options.clone()),
            ],
        )
        .await
        .unwrap();
    let leases = hand.take(&f, 3).await;
    hand.fail(&leases[0], ErrorClass::Trap, false).await;
    hand.fail(&leases[1], ErrorClass::TimedOut, false).await;
    hand.fail(&leases[2], ErrorClass::TimedOut, false).await;

    let mut groups: Vec<(String, u64)> = client
        .failure_groups(None)
        .await
        .unwrap()
        .into_iter()
        .map(|g| (g.group, g.count))
        .collect();
    groups.sort();
    assert_eq!(
        groups,
        vec![("timed-out".to_string(), 2), ("trap".to_string(), 1)]
    );
    let (total, jobs) = client.failed_jobs(&f, "timed-out", 0, 10).await.unwrap();
    assert_eq!(total, 2);
    assert_eq!(
        jobs.iter().map(|j| j.id.clone()).collect::<Vec<_>>(),
        ids[1..].to_vec()
    );
    assert!(
        jobs[0]
            .record
            .error
            .as_ref()
            .unwrap()
            .message
            .contains("failed on purpose")
    );
    let (_, page) = client.failed_jobs(&f, "timed-out", 1, 10).await.unwrap();
    assert_eq!(page.len(), 1);

    // One job: runs again with two more attempts.
    assert!(client.retry(&ids[0]).await.unwrap());
    let record = client.status(&ids[0]).await.unwrap().record;
    assert_eq!((record.state, record.max_attempts), (JobState::Queued, 3));
    assert!(
        !client.retry(&ids[0]).await.unwrap(),
        "a queued job cannot be retried"
    );
    let lease = hand.next(&f).await;
    assert_eq!((lease.info.attempt, lease.info.max_attempts), (2, 3));
    hand.succeed(&lease, b"ok").await;

    // A whole group.
    let moved = client
        .retry_group(&f, "timed-out", usize::MAX)
        .await
        .unwrap();
    assert_eq!(moved, ids[1..].to_vec());
    assert!(client.failure_groups(Some(&f)).await.unwrap().is_empty());
    let overview = client.queue(&f).await.unwrap();
    assert_eq!(
        (overview.queued, overview.failed, overview.succeeded),
        (2, 0, 1)
    );
    let missing = JobId {
        function: f.clone(),
        seq: 42,
    };
    assert!(client.retry(&missing).await.is_err());
}

/// Statistics count wait and run times (mean, variance, histogram), failures, retries and
/// jobs failed for good, per day.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statistics_are_kept_per_day() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let hand = Hand::connect(&redis.url(), "hand").await;
    let f = function("report");
    let options = EnqueueOptions {
        max_attempts: Some(2),
        ..EnqueueOptions::default()
    };
    client
        .enqueue_many(
            &f,
            &[(&b""[..], options.clone()), (&b""[..], options.clone())],
        )
        .await
        .unwrap();
    // Times for the statistics to count, not synchronisation: each job waits at least
    // 300 ms and runs at least 200 ms.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let leases = hand.take(&f, 2).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    hand.succeed(&leases[0], b"").await;
    assert_eq!(
        hand.fail(&leases[1], ErrorClass::Trap, true).await,
        JobState::Scheduled
    );
    let retry = eventually(Duration::from_secs(5), "the retry", || async {
        hand.take(&f, 1).await.pop()
    })
    .await;
    hand.fail(&retry, ErrorClass::Trap, true).await;

    let today = (std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        / 86_400) as i64;
    let stats = client.stats(&f, today).await.unwrap();
    assert_eq!(stats.wait.count, 3);
    assert!(stats.wait.mean_ms >= 200.0, "{stats:?}");
    assert_eq!(stats.run.count, 3);
    assert!(stats.run.mean_ms >= 130.0, "{stats:?}");
    assert!(stats.wait.std_dev_ms > 0.0);
    let buckets: u64 = stats.wait.histogram.iter().map(|(_, n)| n).sum();
    assert_eq!(buckets, 3);
    assert_eq!(stats.wait.histogram[0].0, "s0");
    assert_eq!((stats.failures, stats.retries, stats.failed), (2, 1, 1));
    let yesterday = client.stats(&f, today - 1).await.unwrap();
    assert_eq!((yesterday.wait.count, yesterday.failed), (0, 0));
}

/// The sum of squared times is a whole number until it would pass what Redis' integers
/// hold; then it goes on as a float, and the call that crossed the line still succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sum_of_squares_goes_on_as_a_float_past_integers() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let hand = Hand::connect(&redis.url(), "hand").await;
    let f = function("long");
    let today = (std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        / 86_400) as i64;
    let squares = format!("{today}:run:squares");
    let stats_key = wasmgear_proto::keys::FunctionKeys::new(&f).stats();
    let _: () = redis::cmd("HSET")
        .arg(&stats_key)
        .arg(&squares)
        .arg(i64::MAX - 10)
        .query_async(&mut redis.raw().await)
        .await
        .unwrap();
    client
        .enqueue(&f, b"", &EnqueueOptions::default())
        .await
        .unwrap();
    let lease = hand.take(&f, 1).await.pop().unwrap();
    // A run of at least 10 ms: its square passes what is left below 2^63.
    tokio::time::sleep(Duration::from_millis(20)).await;
    hand.succeed(&lease, b"").await;
    let stored: String = redis::cmd("HGET")
        .arg(&stats_key)
        .arg(&squares)
        .query_async(&mut redis.raw().await)
        .await
        .unwrap();
    // Past i64::MAX: no longer an integer Redis could have incremented.
    assert!(stored.parse::<i64>().is_err(), "{stored}");
    assert!(
        stored.parse::<f64>().unwrap() >= i64::MAX as f64,
        "{stored}"
    );
    assert_eq!(client.stats(&f, today).await.unwrap().run.count, 1);
}

/// Days are read whether their times were kept as sums (count, sum, squares: what the
/// scripts write) or, as earlier versions wrote them, as Welford's running mean and sum of
/// squared deviations; both give the same mean and standard deviation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statistics_of_both_layouts_are_read() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let f = function("report");
    // Three runs of 100, 200 and 300 ms: mean 200, variance (100² + 0 + 100²) / 2.
    let _: () = redis::cmd("HSET")
        .arg(wasmgear_proto::keys::FunctionKeys::new(&f).stats())
        .arg(&[
            ("100:run:count", "3"),
            ("100:run:sum", "600"),
            ("100:run:squares", "140000"),
            ("100:run:s0", "3"),
            ("99:run:count", "3"),
            ("99:run:mean", "200"),
            ("99:run:vk", "20000"),
            ("99:run:s0", "3"),
        ])
        .query_async(&mut redis.raw().await)
        .await
        .unwrap();
    for day in [100, 99] {
        let run = client.stats(&f, day).await.unwrap().run;
        assert_eq!(run.count, 3, "day {day}");
        assert_eq!(run.mean_ms, 200.0, "day {day}");
        assert_eq!(run.std_dev_ms, 100.0, "day {day}");
        assert_eq!(run.histogram, vec![("s0".to_string(), 3)], "day {day}");
    }
}

/// The overview counts each function's jobs by where they are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_queue_overview_counts_jobs_by_state() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let hand = Hand::connect(&redis.url(), "hand").await;
    let f = function("mix");
    let later = EnqueueOptions {
        delay: Duration::from_secs(600),
        ..EnqueueOptions::default()
    };
    let ids = client
        .enqueue_many(&f, &vec![(&b""[..], EnqueueOptions::default()); 5])
        .await
        .unwrap();
    client.enqueue(&f, b"", &later).await.unwrap();
    client.enqueue(&f, b"", &after(&[&ids[4]])).await.unwrap();
    let leases = hand.take(&f, 3).await;
    hand.succeed(&leases[0], b"").await;
    hand.fail(&leases[1], ErrorClass::Trap, false).await;
    client.cancel(&ids[3]).await.unwrap();
    let q = client.queue(&f).await.unwrap();
    assert_eq!(
        (
            q.queued,
            q.scheduled,
            q.running,
            q.waiting,
            q.succeeded,
            q.failed,
            q.cancelled
        ),
        (1, 1, 1, 1, 1, 1, 1),
        "{q:?}"
    );
    let all = client.queues().await.unwrap();
    assert_eq!(
        all.iter().map(|q| q.function.as_str()).collect::<Vec<_>>(),
        vec!["mix"]
    );
}

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
