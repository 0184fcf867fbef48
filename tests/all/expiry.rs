//! Deadlines: a job that has not started by its deadline ends `expired` (failure group
//! `expired`) and never runs; one that started in time runs to its end; an expired job's
//! dependents are cancelled, its group's slot is not kept, and a retry runs it; on one
//! Redis and a Cluster (`check_expiry`), from the CLI and over HTTP.

use std::time::Duration;

use wasmgear_client::{Client, EnqueueOptions, JobState, Setting};

use crate::support::hand::Hand;
use wasmgear_testkit::{TestRedis, eventually, function};

const WAIT: Duration = Duration::from_secs(30);

fn deadline(ms: u64) -> EnqueueOptions {
    EnqueueOptions {
        expires_in: Some(Duration::from_millis(ms)),
        ..EnqueueOptions::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_not_started_by_its_deadline_expires_and_never_runs() {
    let redis = TestRedis::start();
    check_expiry(&redis.url()).await;
    // More fall due at once than one call's housekeeping ends (100): the lease that takes
    // the others past their deadline ends them instead of leasing them.
    let client = redis.client().await;
    let hand = Hand::connect(&redis.url(), "many").await;
    let f = function("many-stale");
    let jobs = vec![(&b""[..], deadline(1)); 150];
    let ids = client.enqueue_many(&f, &jobs).await.unwrap();
    let last = client
        .status(&ids[149])
        .await
        .unwrap()
        .record
        .expires_ms
        .unwrap();
    let conn = redis.raw().await;
    redis_clock_past(&conn, last).await;
    assert!(
        hand.take(&f, 200).await.is_empty(),
        "a job past its deadline was leased"
    );
    for id in &ids {
        assert_eq!(
            client.status(id).await.unwrap().record.state,
            JobState::Expired,
            "{id}"
        );
    }
}

/// Waits until Redis' clock (`TIME`) is past `ms`.
async fn redis_clock_past(conn: &redis::aio::MultiplexedConnection, ms: u64) {
    eventually(WAIT, "Redis' clock to pass the deadline", || {
        let mut conn = conn.clone();
        async move {
            let (secs, micros): (u64, u64) =
                redis::cmd("TIME").query_async(&mut conn).await.unwrap();
            (secs * 1000 + micros / 1000 > ms).then_some(())
        }
    })
    .await;
}

/// The checks of [`a_job_not_started_by_its_deadline_expires_and_never_runs`] on the Redis
/// at `url`.
pub(crate) async fn check_expiry(url: &str) {
    let client = Client::connect(url).await.unwrap();
    let hand = Hand::connect(url, "hand").await;
    let f = function("stale");
    client
        .configure(&f, &[Setting::Paused(true)])
        .await
        .unwrap();
    let stale = client.enqueue(&f, b"late", &deadline(200)).await.unwrap();
    let grouped = EnqueueOptions {
        group: Some("acme".into()),
        ..deadline(200)
    };
    let stale_grouped = client.enqueue(&f, b"late too", &grouped).await.unwrap();
    let dependent = EnqueueOptions {
        after: vec![stale.clone()],
        ..EnqueueOptions::default()
    };
    let waiting = client.enqueue(&f, b"after", &dependent).await.unwrap();
    let fresh = client
        .enqueue(&f, b"on time", &deadline(600_000))
        .await
        .unwrap();
    client
        .configure(&f, &[Setting::GroupConcurrency(Some(1))])
        .await
        .unwrap();
    // Past the deadline (the function paused all along), a lease call ends them: its
    // housekeeping runs while the function is paused.
    eventually(WAIT, "the jobs past their deadline to expire", || async {
        hand.take(&f, 10).await;
        let states = [
            client.status(&stale).await.unwrap().record.state,
            client.status(&stale_grouped).await.unwrap().record.state,
        ];
        (states == [JobState::Expired, JobState::Expired]).then_some(())
    })
    .await;
    client
        .configure(&f, &[Setting::Paused(false)])
        .await
        .unwrap();
    let leased = hand.take(&f, 10).await;
    let ids: Vec<_> = leased.iter().map(|l| l.info.id.clone()).collect();
    assert_eq!(
        ids,
        std::slice::from_ref(&fresh),
        "an expired job was leased"
    );
    for id in [&stale, &stale_grouped] {
        let record = client.status(id).await.unwrap().record;
        assert_eq!(record.state, JobState::Expired, "{id}");
        assert_eq!(record.error.unwrap().class, "expired");
        assert!(record.history.is_empty(), "{id} ran");
    }
    let cancelled = client.status(&waiting).await.unwrap().record;
    assert_eq!(cancelled.state, JobState::Cancelled);
    assert!(cancelled.error.unwrap().message.contains("expired"));
    let groups = client.failure_groups(Some(&f)).await.unwrap();
    assert!(
        groups.iter().any(|g| g.group == "expired" && g.count == 2),
        "{groups:?}"
    );
    // A job that started in time runs to its end, whatever the deadline.
    hand.succeed(&leased[0], b"ok").await;
    assert_eq!(
        client.status(&fresh).await.unwrap().record.state,
        JobState::Succeeded
    );
    // The expired grouped job kept no slot of its group (concurrency 1): a new job of the
    // group runs.
    let next = client
        .enqueue(
            &f,
            b"next",
            &EnqueueOptions {
                group: Some("acme".into()),
                ..EnqueueOptions::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(hand.next(&f).await.info.id, next);
    // Retried, an expired job runs (its deadline is gone).
    assert!(client.retry(&stale).await.unwrap());
    let again = eventually(WAIT, "the retried job", || async {
        let mut leases = hand.take(&f, 10).await;
        (!leases.is_empty()).then(|| leases.remove(0))
    })
    .await;
    assert_eq!(again.info.id, stale);
    hand.succeed(&again, b"").await;
    // A deadline already passed is refused, writing nothing.
    let passed = EnqueueOptions {
        expires_at: Some(std::time::UNIX_EPOCH + Duration::from_secs(1)),
        ..EnqueueOptions::default()
    };
    let before = client.queue(&f).await.unwrap();
    assert!(client.enqueue(&f, b"", &passed).await.is_err());
    assert_eq!(client.queue(&f).await.unwrap(), before);
    assert_eq!(client.queue(&f).await.unwrap(), before);
}

/// From the CLI (`--expires-in`; `wait` exits as for a failure) and over HTTP
/// (`expires_in_ms`), and on a Redis Cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deadlines_from_the_cli_over_http_and_on_a_cluster() {
    use crate::http_api::{Server, post};
    use wasmgear_testkit::{TestCluster, stderr, stdout, wasmgear};
    let redis = TestRedis::start();
    let url = redis.url();
    let env = [("WASMGEAR_REDIS_URL", url.as_str())];
    let out = wasmgear(&["enqueue", "cli", "--expires-in", "100ms", "x"], &env);
    assert!(out.status.success(), "{}", stderr(&out));
    let id = stdout(&out).trim().to_string();
    // Until Redis' clock has passed the job's deadline (a lease before it would run it).
    let deadline = redis
        .client()
        .await
        .status(&id.parse().unwrap())
        .await
        .unwrap()
        .record
        .expires_ms
        .unwrap();
    redis_clock_past(&redis.raw().await, deadline).await;
    let hand = Hand::connect(&url, "hand").await;
    assert!(hand.take(&function("cli"), 10).await.is_empty());
    let shown = stdout(&wasmgear(&["status", &id], &env));
    assert!(shown.contains("expired"), "{shown}");
    let waited = wasmgear(&["wait", &id], &env);
    assert_eq!(waited.status.code(), Some(1), "{}", stderr(&waited));
    let server = Server::with_token(&redis);
    let answer = post(
        &server,
        "/v1/functions/http/jobs",
        serde_json::json!({ "input": "x", "expires_in_ms": 100 }),
    )
    .await;
    assert_eq!(answer.status, 201, "{}", answer.json());
    let both = post(
        &server,
        "/v1/functions/http/jobs",
        serde_json::json!({ "input": "x", "expires_in_ms": 100, "expires_at_ms": 1 }),
    )
    .await;
    assert_eq!(both.status, 400);
    drop(server);
    let cluster = TestCluster::start();
    check_expiry(&cluster.url()).await;
}

/// A deadline (or a time to run at) more than 10 years ahead is refused, by the client and
/// by the library, writing nothing: a record keeps its times exactly only that far (cjson
/// writes 14 digits; a deadline of 2^53 - 1 came back as a float, and its job's record could
/// not be read: schemathesis found it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_time_more_than_ten_years_ahead_is_refused() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let f = function("far");
    let far = EnqueueOptions {
        expires_at: Some(std::time::SystemTime::now() + Duration::from_secs(11 * 365 * 86_400)),
        ..EnqueueOptions::default()
    };
    let refused = client.enqueue(&f, b"", &far).await.unwrap_err();
    assert!(
        refused.to_string().contains("more than 10 years ahead"),
        "{refused}"
    );
    let library = crate::support::library::Library::new(redis.raw().await, &f);
    for option in ["expires_at", "at"] {
        let error = library
            .call::<redis::Value>("enqueue", &["0", "1", "1", option, "9007199254740991", "x"])
            .await
            .unwrap_err();
        assert!(
            error.to_string().contains("more than 10 years ahead"),
            "{option}: {error}"
        );
    }
    let near = (wasmgear_proto::units::now_ms() + 3_600_000).to_string();
    let _: redis::Value = library
        .ok("enqueue", &["0", "1", "1", "expires_at", &near, "x"])
        .await;
    assert_eq!(client.queue(&f).await.unwrap().queued, 1);
}
