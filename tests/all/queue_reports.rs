//! What the queue tells operators, through the library: failure groups and their retry,
//! statistics per day (sums past what integers hold, both layouts, the upgrade day, a clock
//! stepped back), and the overview of jobs by state.

use std::time::Duration;

use wasmgear_client::{EnqueueOptions, JobState};
use wasmgear_proto::{ErrorClass, JobId};

use crate::support::hand::Hand;
use crate::support::jobs::after;
use crate::support::library::Library;
use wasmgear_testkit::{TestRedis, eventually, function};

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

/// Statistics on the day the code that keeps them as sums replaced the code that kept
/// Welford's mean (a day written both ways), and after Redis' clock stepped back a day, are
/// one day each with the right mean.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statistics_survive_the_upgrade_day_and_a_clock_step_back() {
    let redis = TestRedis::start();
    let f = function("stats");
    let library = Library::new(redis.raw().await, &f);
    let client = redis.client().await;
    let mut conn = redis.raw().await;
    let (secs, _): (u64, u64) = redis::cmd("TIME").query_async(&mut conn).await.unwrap();
    let today = secs * 1000 / wasmgear_proto::units::DAY_MS;
    // Today as the code before sums left it: 4 runs of mean 1000 ms, squared deviations 0;
    // and tomorrow already started (the clock was a day ahead, then stepped back).
    let stats = library.key("stats");
    let _: () = redis::cmd("HSET")
        .arg(&stats)
        .arg(&[
            (format!("{today}:run:count"), "4".to_string()),
            (format!("{today}:run:mean"), "1000".to_string()),
            (format!("{today}:run:vk"), "0".to_string()),
            ("today".to_string(), (today + 1).to_string()),
            ("days".to_string(), format!("[{today},{}]", today + 1)),
        ])
        .query_async(&mut conn)
        .await
        .unwrap();
    // One more run today, of about 0 ms.
    client
        .enqueue(&f, b"x", &EnqueueOptions::default())
        .await
        .unwrap();
    let (_, token) = library
        .lease_rows(&["w", "w/1", "1", "30000", "1000", "3"])
        .await
        .remove(0);
    let _: redis::Value = library
        .ok("complete", &["0", "1", "1", &token, "", "", ""])
        .await;
    let days: String = redis::cmd("HGET")
        .arg(&stats)
        .arg("days")
        .query_async(&mut conn)
        .await
        .unwrap();
    let days: Vec<u64> = serde_json::from_str(&days).unwrap();
    assert_eq!(days, [today, today + 1], "each day once, in order");
    let day = client.stats(&f, today as i64).await.unwrap();
    assert_eq!(day.run.count, 5);
    // (4 × 1000 + ~0) / 5: the day's sum covers the runs its count does.
    assert!(
        (day.run.mean_ms - 800.0).abs() < 50.0,
        "mean {}",
        day.run.mean_ms
    );
}
