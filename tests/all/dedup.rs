//! Keys that outlive their job, through the library: a uniq key's window after its job
//! succeeded (`uniq_for`), debounce (the last input of a burst runs, once), throttle (at
//! most N jobs per window); bad combinations refused before anything is written; on one
//! Redis and on a Cluster (`check_dedup`); what they keep goes when their windows end.

use std::time::Duration;

use wasmgear_client::{Client, EnqueueOptions, JobState};
use wasmgear_proto::{ErrorClass, FunctionName, JobId};

use crate::support::hand::Hand;
use crate::support::library::Library;
use wasmgear_testkit::{TestRedis, eventually, function};

const WAIT: Duration = Duration::from_secs(30);

fn keyed(key: &str) -> EnqueueOptions {
    EnqueueOptions {
        uniq: Some(key.to_string()),
        ..EnqueueOptions::default()
    }
}

/// Enqueues one job; its id and whether it was made (not answered by the key's job).
async fn enqueue(
    client: &Client,
    f: &FunctionName,
    input: &str,
    options: &EnqueueOptions,
) -> (JobId, bool) {
    let enqueued = client
        .submit(f, &[(input.as_bytes(), options.clone())])
        .await
        .unwrap()
        .remove(0);
    (enqueued.id, enqueued.created)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dedup_windows_debounce_and_throttle() {
    let redis = TestRedis::start();
    check_dedup(&redis.url()).await;
    // The queue refuses them too, for a client that does not check first.
    let library = Library::new(redis.raw().await, &function("dedup"));
    for job in [
        vec!["1", "uniq_for", "1000"],
        vec!["2", "uniq", "k", "throttle", "1"],
        vec!["3", "uniq", "k", "debounce", "5", "delay", "5"],
        vec!["3", "uniq", "k", "uniq_for", "5", "debounce", "5"],
    ] {
        let mut args = vec!["0", "1"];
        args.extend(job.iter().copied());
        args.push("input");
        let error = library
            .call::<redis::Value>("enqueue", &args)
            .await
            .unwrap_err();
        assert_eq!(error.code(), Some("BADJOB"), "{job:?}: {error}");
    }
    // Nothing is kept once the windows are over (a lease call tidies up).
    let mut conn = redis.raw().await;
    let hand = Hand::connect(&redis.url(), "tidy").await;
    let f = function("dedup");
    eventually(WAIT, "the windows to be forgotten", || {
        let mut conn = conn.clone();
        let hand = &hand;
        let f = &f;
        async move {
            for lease in hand.take(f, 10).await {
                hand.succeed(&lease, b"").await;
            }
            let kept: (u64, u64) = redis::pipe()
                .hlen("wg:{dedup}:dedup")
                .zcard("wg:{dedup}:dedup-exp")
                .query_async(&mut conn)
                .await
                .unwrap();
            (kept == (0, 0)).then_some(())
        }
    })
    .await;
    let uniq: Vec<String> = redis::cmd("HKEYS")
        .arg("wg:{dedup}:uniq")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(uniq.is_empty(), "{uniq:?}");
}

/// The checks of [`dedup_windows_debounce_and_throttle`] on the Redis at `url`.
pub(crate) async fn check_dedup(url: &str) {
    let client = Client::connect(url).await.unwrap();
    let hand = Hand::connect(url, "hand").await;
    let f = function("dedup");

    // A window: the job succeeded, and the key still answers with it for a while.
    let windowed = EnqueueOptions {
        uniq_for: Some(Duration::from_millis(1500)),
        ..keyed("report-2026-11")
    };
    let (first, made) = enqueue(&client, &f, "build", &windowed).await;
    assert!(made);
    let lease = hand.next(&f).await;
    hand.succeed(&lease, b"done").await;
    let (again, made) = enqueue(&client, &f, "build", &windowed).await;
    assert_eq!(
        (again.clone(), made),
        (first.clone(), false),
        "the window did not hold"
    );
    // A plain uniq enqueue with the key is answered by the window too.
    assert_eq!(
        enqueue(&client, &f, "build", &keyed("report-2026-11")).await,
        (first.clone(), false)
    );
    let after = eventually(WAIT, "the window to end", || async {
        let (id, made) = enqueue(&client, &f, "build", &windowed).await;
        made.then_some(id)
    })
    .await;
    assert_ne!(after, first);
    hand.succeed(&hand.next(&f).await, b"").await;
    // A job that failed keeps no window.
    let failing = EnqueueOptions {
        uniq_for: Some(Duration::from_secs(600)),
        max_attempts: Some(1),
        ..keyed("flaky")
    };
    let (failed, _) = enqueue(&client, &f, "x", &failing).await;
    hand.fail(&hand.next(&f).await, ErrorClass::Trap, false)
        .await;
    let (next, made) = enqueue(&client, &f, "x", &failing).await;
    assert!(made && next != failed, "a failed job held its key");
    hand.fail(&hand.next(&f).await, ErrorClass::Trap, false)
        .await;

    // Debounce: the job waits; each enqueue before it starts replaces its input and
    // restarts the wait; the last input runs, once.
    let debounced = EnqueueOptions {
        debounce: Some(Duration::from_millis(400)),
        ..keyed("search-index")
    };
    let (job, made) = enqueue(&client, &f, "v1", &debounced).await;
    assert!(made);
    let first_run_at = client.status(&job).await.unwrap().record.run_at_ms.unwrap();
    assert_eq!(
        client.status(&job).await.unwrap().record.state,
        JobState::Scheduled
    );
    for input in ["v2", "v3"] {
        let (same, made) = enqueue(&client, &f, input, &debounced).await;
        assert_eq!((same, made), (job.clone(), false));
    }
    let record = client.status(&job).await.unwrap().record;
    assert!(
        record.run_at_ms.unwrap() >= first_run_at,
        "the wait did not restart"
    );
    assert!(
        hand.take(&f, 10).await.is_empty(),
        "a debounced job ran before its quiet period"
    );
    let ran = eventually(WAIT, "the debounced job to be due", || async {
        let mut leases = hand.take(&f, 10).await;
        (!leases.is_empty()).then(|| leases.remove(0))
    })
    .await;
    assert_eq!(
        (ran.info.id.clone(), ran.input.as_slice()),
        (job.clone(), &b"v3"[..])
    );
    // Started: the next enqueue with the key is a new job.
    let (later, made) = enqueue(&client, &f, "v4", &debounced).await;
    assert!(made && later != job);
    hand.succeed(&ran, b"").await;

    // Throttle: two jobs per window; the third is answered by the latest made.
    let throttled = EnqueueOptions {
        throttle: Some((2, Duration::from_millis(1500))),
        ..keyed("sync-acme")
    };
    let (one, made_one) = enqueue(&client, &f, "1", &throttled).await;
    let (two, made_two) = enqueue(&client, &f, "2", &throttled).await;
    let (three, made_three) = enqueue(&client, &f, "3", &throttled).await;
    assert!(made_one && made_two && !made_three);
    assert_ne!(one, two, "a throttled key joined an unfinished job");
    assert_eq!(three, two);
    let fourth = eventually(WAIT, "the throttle window to end", || async {
        let (id, made) = enqueue(&client, &f, "4", &throttled).await;
        made.then_some(id)
    })
    .await;
    assert!(fourth != two && fourth != one);

    // Bad combinations are refused by the client and by the queue, writing nothing.
    let refused = [
        EnqueueOptions {
            uniq_for: Some(Duration::from_secs(1)),
            ..EnqueueOptions::default()
        },
        EnqueueOptions {
            debounce: Some(Duration::from_secs(1)),
            delay: Duration::from_secs(1),
            ..keyed("k")
        },
        EnqueueOptions {
            debounce: Some(Duration::from_secs(1)),
            throttle: Some((1, Duration::from_secs(1))),
            ..keyed("k")
        },
        EnqueueOptions {
            throttle: Some((0, Duration::from_secs(1))),
            ..keyed("k")
        },
    ];
    for options in &refused {
        let error = client.enqueue(&f, b"", options).await.unwrap_err();
        assert!(
            error.to_string().contains("uniq")
                || error.to_string().contains("throttle")
                || error.to_string().contains("debounce"),
            "{error}"
        );
    }
}

/// Over HTTP and from the CLI: a throttled key makes at most its limit of jobs per window
/// (the rest answered with the latest, `created` false), a debounced one takes the last
/// input, a windowed one answers after its job succeeded; a bad combination is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dedup_over_http_and_from_the_cli() {
    use crate::http_api::{Server, post};
    use serde_json::json;
    use wasmgear_testkit::{stderr, stdout, wasmgear};

    let redis = TestRedis::start();
    let server = Server::with_token(&redis);
    let throttled =
        json!({ "input": "x", "uniq": "sync", "throttle": { "limit": 2, "interval_ms": 60000 } });
    let mut answers = Vec::new();
    for _ in 0..3 {
        let answer = post(&server, "/v1/functions/dedup/jobs", throttled.clone()).await;
        assert_eq!(answer.status, 201, "{}", answer.json());
        answers.push(answer.json());
    }
    let made: Vec<bool> = answers
        .iter()
        .map(|a| a["created"].as_bool().unwrap())
        .collect();
    assert_eq!(made, [true, true, false]);
    assert_eq!(answers[2]["id"], answers[1]["id"]);
    let debounced = |input: &str| json!({ "input": input, "uniq": "idx", "debounce_ms": 60000 });
    let first = post(&server, "/v1/functions/dedup/jobs", debounced("a"))
        .await
        .json();
    let second = post(&server, "/v1/functions/dedup/jobs", debounced("b"))
        .await
        .json();
    assert_eq!(first["id"], second["id"]);
    assert_eq!(second["created"], false);
    let client = redis.client().await;
    let id: JobId = second["id"].as_str().unwrap().parse().unwrap();
    assert_eq!(
        client.status(&id).await.unwrap().record.state,
        JobState::Scheduled
    );
    let bad = post(
        &server,
        "/v1/functions/dedup/jobs",
        json!({ "input": "x", "uniq_for_ms": 1000 }),
    )
    .await;
    assert_eq!(bad.status, 400, "{}", bad.json());

    let url = redis.url();
    let env = [("WASMGEAR_REDIS_URL", url.as_str())];
    let first = wasmgear(
        &["enqueue", "cli", "--uniq", "k", "--uniq-for", "10m", "one"],
        &env,
    );
    assert!(first.status.success(), "{}", stderr(&first));
    let hand = Hand::connect(&url, "hand").await;
    hand.succeed(&hand.next(&function("cli")).await, b"").await;
    let again = wasmgear(
        &["enqueue", "cli", "--uniq", "k", "--uniq-for", "10m", "two"],
        &env,
    );
    assert_eq!(stdout(&again), stdout(&first));
    assert!(
        stderr(&again).contains("within its --uniq-for window"),
        "{}",
        stderr(&again)
    );
    let throttle = |input: &str| {
        wasmgear(
            &["enqueue", "cli", "--uniq", "t", "--throttle", "1/1m", input],
            &env,
        )
    };
    let (one, two) = (throttle("1"), throttle("2"));
    assert_eq!(stdout(&one), stdout(&two));
    assert!(stderr(&two).contains("throttled"), "{}", stderr(&two));
    let refused = wasmgear(&["enqueue", "cli", "--debounce", "5s", "x"], &env);
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
}
