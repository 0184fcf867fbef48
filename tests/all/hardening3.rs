//! Hardening 3 (issue 36): hand-offs never oversubscribe a worker and a stopping worker is
//! handed nothing; no job leaves one set without entering another, whatever the arguments;
//! a lease token starts at most once; a cancel heard before a job starts wins; every check
//! that can refuse a call runs before its first write; the smaller findings.

use std::time::Duration;

use wasmgear_client::{EnqueueOptions, JobState, WorkerQueue};
use wasmgear_proto::{JobId, LeaseRequest};
use wasmgear_worker::WorkerConfig;

use crate::support::library::Library;
use wasmgear_testkit::{
    TestRedis, TestWorker, TestWorkerOptions, WorkerProcess, eventually, function, plugin_dir,
    wasmgear,
};

const WAIT: Duration = Duration::from_secs(30);

/// `n` jobs with `input` and the default options, for `enqueue_many`.
fn plain_jobs(input: &'static [u8], n: usize) -> Vec<(&'static [u8], EnqueueOptions)> {
    (0..n).map(|_| (input, EnqueueOptions::default())).collect()
}

fn long_job() -> EnqueueOptions {
    EnqueueOptions {
        max_attempts: Some(1),
        timeout: Some(Duration::from_secs(3600)),
        ..EnqueueOptions::default()
    }
}

async fn running_count(library: &Library) -> usize {
    library.members("leased").await.len()
}

/// A worker with two slots serving two functions keeps a slot for each function's hand-off
/// while idle; once both slots run jobs of one function, the other function's jobs are not
/// handed to it (they wait, queued, for a free slot), and they run once the slots free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_is_never_handed_more_jobs_than_it_has_free_slots() {
    let redis = TestRedis::start();
    let options = TestWorkerOptions {
        config: WorkerConfig {
            concurrency: 2,
            ..WorkerConfig::default()
        },
        ..TestWorkerOptions::default()
    };
    let worker = TestWorker::start_with(&redis, &["hostile", "echo"], options).await;
    let client = redis.client().await;
    let (hostile, echo) = (function("hostile"), function("echo"));
    let hostile_lib = Library::new(redis.raw().await, &hostile);
    let echo_lib = Library::new(redis.raw().await, &echo);
    // Idle: registered for both functions, their slots within the worker's two.
    let slots = eventually(WAIT, "the idle worker to register for both", || async {
        let a = hostile_lib.registration("test-worker").await?;
        let b = echo_lib.registration("test-worker").await?;
        Some(a.1 + b.1)
    })
    .await;
    assert!(
        slots <= 2,
        "{slots} slots kept for hand-offs by a worker with 2"
    );

    // Both slots taken by long jobs of one function.
    let long: Vec<JobId> = client
        .enqueue_many(
            &hostile,
            &[
                (&b"sleep 3600"[..], long_job()),
                (&b"sleep 3600"[..], long_job()),
            ],
        )
        .await
        .unwrap();
    eventually(WAIT, "both long jobs to run", || async {
        (running_count(&hostile_lib).await == 2).then_some(())
    })
    .await;
    // The hand-off happens inside `enqueue`: what it hands is leased when the call returns.
    let quick = client
        .enqueue_many(&echo, &plain_jobs(b"a", 3))
        .await
        .unwrap();
    let leased = echo_lib.members("leased").await;
    let mut records = Vec::new();
    for number in &leased {
        let raw: Option<String> = redis::cmd("HGET")
            .arg(echo_lib.key("jobs"))
            .arg(number)
            .query_async(&mut echo_lib.conn.clone())
            .await
            .unwrap();
        records.push(raw);
    }
    for number in hostile_lib.members("leased").await {
        let raw: Option<String> = redis::cmd("HGET")
            .arg(hostile_lib.key("jobs"))
            .arg(number)
            .query_async(&mut echo_lib.conn.clone())
            .await
            .unwrap();
        records.push(raw);
    }
    assert!(
        leased.is_empty(),
        "a worker with no free slot was handed jobs: {records:?}"
    );
    assert_eq!(echo_lib.registration("test-worker").await, None);
    for id in &quick {
        assert_eq!(
            client.status(id).await.unwrap().record.state,
            JobState::Queued
        );
    }
    // The slots free: the waiting jobs run.
    for id in &long {
        client.cancel(id).await.unwrap();
    }
    for id in &quick {
        let status = client.wait(id, Some(WAIT), |_| {}).await.unwrap();
        assert_eq!(status.record.state, JobState::Succeeded);
    }
    worker.stop().await;
}

/// A registration's slots bound what its hand-off gives, the message says how many it gave,
/// a lease call that replaces an unused registration gets its slots back, and `withdraw`
/// takes out only the call it names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_off_gives_at_most_the_slots_registered() {
    let redis = TestRedis::start();
    let f = function("handed");
    let library = Library::new(redis.raw().await, &f);
    let client = redis.client().await;
    let channel = "wg:handoff:w1";
    let mut pubsub = redis::Client::open(redis.url())
        .unwrap()
        .get_async_pubsub()
        .await
        .unwrap();
    pubsub.subscribe(channel).await.unwrap();
    // Nothing ready: registered for 2 slots.
    let lease = |call: &'static str,
                 want: &'static str,
                 slots: &'static str,
                 replaces: &'static str,
                 replaced: &'static str| {
        let library = library.clone();
        async move {
            library
                .ok::<redis::Value>(
                    "lease",
                    &[
                        "w1", call, want, "30000", "1000", "3", channel, "3000", slots, replaces,
                        replaced,
                    ],
                )
                .await
        }
    };
    lease("w1/a", "4", "2", "", "0").await;
    assert_eq!(
        library.registration("w1").await,
        Some(("w1/a".to_string(), 2))
    );
    client.enqueue_many(&f, &plain_jobs(b"x", 5)).await.unwrap();
    assert_eq!(running_count(&library).await, 2);
    assert_eq!(library.registration("w1").await, None);
    use futures_util::StreamExt;
    let mut messages = pubsub.on_message();
    for _ in 0..2 {
        let message: Vec<u8> = messages.next().await.unwrap().get_payload().unwrap();
        let text = String::from_utf8_lossy(&message);
        assert!(text.starts_with("lease handed 2 "), "{text}");
    }
    drop(messages);

    // A new registration replacing an unused one gets its slots back (2 + 1), and leases
    // with them when jobs are ready.
    let g = function("replaced");
    let other = Library::new(redis.raw().await, &g);
    other
        .ok::<redis::Value>(
            "lease",
            &[
                "w1", "w1/b", "2", "30000", "1000", "3", channel, "3000", "2", "", "0",
            ],
        )
        .await;
    let reply: (redis::Value, i64, i64, redis::Value, String) = other
        .ok(
            "lease",
            &[
                "w1", "w1/c", "1", "30000", "1000", "3", channel, "3000", "1", "w1/b", "2",
            ],
        )
        .await;
    assert_eq!(reply.4, "w1/b", "the unused registration was taken out");
    assert_eq!(
        other.registration("w1").await,
        Some(("w1/c".to_string(), 3))
    );
    // `withdraw` names the call: another's registration stays, its own goes.
    let removed: i64 = other.ok("withdraw", &["w1", "w1/b"]).await;
    assert_eq!(removed, 0);
    let removed: i64 = other.ok("withdraw", &["w1", "w1/c"]).await;
    assert_eq!(removed, 1);
    assert_eq!(other.registration("w1").await, None);
}

/// Once a worker is told to stop (it says it is not ready), it is handed nothing: its
/// registrations are gone before, and a job enqueued then waits for another worker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopping_worker_is_handed_nothing() {
    let redis = TestRedis::start();
    let dir = plugin_dir(&["hostile", "echo"]);
    let worker = WorkerProcess::builder(&redis.url())
        .plugins(dir.path())
        .args(&["--concurrency", "2"])
        .metrics()
        .start();
    let address = worker.metrics_address();
    let client = redis.client().await;
    let echo = function("echo");
    let echo_lib = Library::new(redis.raw().await, &echo);
    // One long job keeps the worker busy while it stops; one slot stays free.
    let long = client
        .enqueue(&function("hostile"), b"sleep 3600", &long_job())
        .await
        .unwrap();
    eventually(WAIT, "the long job to run", || async {
        (client.status(&long).await.ok()?.record.state == JobState::Running).then_some(())
    })
    .await;
    // Its free slot is kept for a hand-off of one function or the other.
    let hostile_lib = Library::new(redis.raw().await, &function("hostile"));
    eventually(WAIT, "the worker to register for a hand-off", || async {
        let mut registered = 0;
        for library in [&echo_lib, &hostile_lib] {
            let workers: Vec<String> = redis::cmd("HKEYS")
                .arg(library.key("idle-args"))
                .query_async(&mut library.conn.clone())
                .await
                .ok()?;
            registered += workers.len();
        }
        (registered == 1).then_some(())
    })
    .await;
    worker.signal("TERM");
    eventually(
        WAIT,
        "the stopping worker to say it is not ready",
        || async {
            let answer =
                crate::http::send_raw(&address, "GET", "/readyz", None, None, Vec::new()).await;
            let answer = crate::http::answer(answer).await;
            (answer.status == 503).then_some(())
        },
    )
    .await;
    let late = [
        client
            .enqueue(&echo, b"late", &EnqueueOptions::default())
            .await
            .unwrap(),
        client
            .enqueue(&function("hostile"), b"sleep 0", &EnqueueOptions::default())
            .await
            .unwrap(),
    ];
    for id in &late {
        assert_eq!(
            client.status(id).await.unwrap().record.state,
            JobState::Queued,
            "a stopping worker was handed {id}"
        );
    }
    assert_eq!(running_count(&echo_lib).await, 0);
    assert_eq!(hostile_lib.members("leased").await.len(), 1);
}

/// A lease that runs out unconfirmed (the worker never had the job) gives its attempt back
/// every time: a job with one attempt is never failed by such leases, however many.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_is_never_failed_by_leases_that_ran_out_unconfirmed() {
    let redis = TestRedis::start();
    let f = function("unconfirmed");
    let library = Library::new(redis.raw().await, &f);
    let client = redis.client().await;
    let options = EnqueueOptions {
        max_attempts: Some(1),
        ..EnqueueOptions::default()
    };
    let id = client.enqueue(&f, b"x", &options).await.unwrap();
    for round in 0..4 {
        // A lease of 50 ms that nobody confirms: leased again once it has run out.
        let call = format!("w/{round}");
        eventually(WAIT, "the job to be leased again", || async {
            let (leases, ..): (Vec<Vec<u8>>, i64, i64, redis::Value, String) = library
                .ok("lease", &["w", &call, "1", "50", "1000", "3"])
                .await;
            (!leases.is_empty()).then_some(())
        })
        .await;
        let state = client.status(&id).await.unwrap().record.state;
        assert_eq!(state, JobState::Running, "round {round}");
    }
    let record = library.record(id.seq).await.unwrap();
    assert_eq!(record["attempt"], 1, "{record}");
    assert_eq!(record["given_back"], 3, "{record}");
}

/// A lease asks for at most MAX_CONCURRENCY jobs (more is refused, changing nothing); a
/// lease of that many reads every job before it leaves the ready set, and every job is in
/// exactly one set afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_lease_loses_jobs_whatever_it_asks_for() {
    let redis = TestRedis::start();
    let f = function("many");
    let library = Library::new(redis.raw().await, &f);
    let client = redis.client().await;
    let jobs = 3000;
    let inputs: Vec<(&[u8], EnqueueOptions)> = (0..jobs)
        .map(|_| (&b"x"[..], EnqueueOptions::default()))
        .collect();
    client.enqueue_many(&f, &inputs).await.unwrap();
    let before = library.dump().await;
    let refused = library
        .call::<redis::Value>("lease", &["w", "w/big", "9000", "30000", "1000", "3"])
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Some("BADARGS"), "{refused}");
    assert_eq!(
        library.dump().await,
        before,
        "a refused lease changed something"
    );
    let most = wasmgear_proto::limits::MAX_CONCURRENCY.to_string();
    let (leases, ..): (Vec<Vec<u8>>, i64, i64, redis::Value, String) = library
        .ok("lease", &["w", "w/most", &most, "30000", "1000", "3"])
        .await;
    assert_eq!(
        leases.len() as u64,
        2 * wasmgear_proto::limits::MAX_CONCURRENCY
    );
    let ready = library.members("ready").await;
    let leased = library.members("leased").await;
    assert_eq!(ready.len() + leased.len(), jobs);
    let all: std::collections::HashSet<&String> = ready.iter().chain(&leased).collect();
    assert_eq!(all.len(), jobs, "a job is in two sets");
}

/// Cleaning up a great many lapsed hand-off registrations (dead workers') never fails an
/// `enqueue` after it has written: the call is answered, and sent again it is answered the
/// same (nothing written twice).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lapsed_registrations_never_fail_an_enqueue() {
    let redis = TestRedis::start();
    let f = function("crowded");
    let library = Library::new(redis.raw().await, &f);
    // (A client loads the library.)
    let _client = redis.client().await;
    let mut conn = redis.raw().await;
    // 20,000 registrations that lapsed long ago, as workers that died leave them.
    for chunk in 0..20 {
        let mut zadd = redis::cmd("ZADD");
        zadd.arg(library.key("idle"));
        let mut hset = redis::cmd("HSET");
        hset.arg(library.key("idle-args"));
        for i in 0..1000 {
            let worker = format!("dead-{chunk}-{i}");
            zadd.arg(1).arg(&worker);
            hset.arg(&worker)
                .arg(format!("{worker}/x|1|30000|1000|3|wg:handoff:{worker}"));
        }
        let _: () = zadd.query_async(&mut conn).await.unwrap();
        let _: () = hset.query_async(&mut conn).await.unwrap();
    }
    let call = ["1", "call", "c1", "1", "0", "input"];
    let first: (Vec<u64>, String, Vec<String>) = library.ok("enqueue", &call).await;
    let again: (Vec<u64>, String, Vec<String>) = library.ok("enqueue", &call).await;
    assert_eq!(first, again);
    assert_eq!(first.0, [1]);
    assert_eq!(library.state(1).await, "queued");
    assert_eq!(library.state(2).await, "missing");
}

/// `--concurrency` has an upper bound, said plainly.
#[test]
fn concurrency_past_the_limit_is_refused() {
    let too_many = (wasmgear_proto::limits::MAX_CONCURRENCY + 1).to_string();
    let output = wasmgear(
        &[
            "worker",
            "--plugins",
            "/nonexistent",
            "--concurrency",
            &too_many,
        ],
        &[],
    );
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--concurrency"), "{stderr}");
    assert!(
        stderr.contains(&wasmgear_proto::limits::MAX_CONCURRENCY.to_string()),
        "{stderr}"
    );
}

/// A copy of a hand-off message (as a worker re-subscribing can get) is dropped: the job
/// handed is taken once, its token started once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_off_heard_twice_is_taken_once() {
    let redis = TestRedis::start();
    let f = function("twice");
    let client = redis.client().await;
    let queue = WorkerQueue::connect(&redis.url(), "w2").await.unwrap();
    queue.listen(std::slice::from_ref(&f)).await.unwrap();
    redis.until_subscribed("wg:handoff:w2", 1).await;
    // Listen to the worker's channel too, to copy what it is handed.
    let mut pubsub = redis::Client::open(redis.url())
        .unwrap()
        .get_async_pubsub()
        .await
        .unwrap();
    pubsub.subscribe("wg:handoff:w2").await.unwrap();
    let request = LeaseRequest::new(f.clone());
    let ttl = Duration::from_secs(30);
    assert!(
        queue
            .lease(std::slice::from_ref(&request), 4, ttl)
            .await
            .unwrap()
            .is_empty()
    );
    let first = client
        .enqueue(&f, b"x", &EnqueueOptions::default())
        .await
        .unwrap();
    use futures_util::StreamExt;
    let message: Vec<u8> = pubsub
        .on_message()
        .next()
        .await
        .unwrap()
        .get_payload()
        .unwrap();
    let taken = eventually(WAIT, "the handed job", || async {
        let leases = queue
            .lease(std::slice::from_ref(&request), 4, ttl)
            .await
            .ok()?;
        (!leases.is_empty()).then_some(leases)
    })
    .await;
    assert_eq!(taken.len(), 1);
    assert_eq!(taken[0].info.id, first);
    // The copy comes; then another job is handed through a new registration, its message
    // after the copy's on the same channel: once it is taken, the copy has been heard.
    let mut conn = redis.raw().await;
    let _: i64 = redis::cmd("PUBLISH")
        .arg("wg:handoff:w2")
        .arg(&message)
        .query_async(&mut conn)
        .await
        .unwrap();
    let mut later = queue
        .lease(std::slice::from_ref(&request), 4, ttl)
        .await
        .unwrap();
    let second = client
        .enqueue(&f, b"y", &EnqueueOptions::default())
        .await
        .unwrap();
    while !later.iter().any(|lease| lease.info.id == second) {
        let leases = eventually(WAIT, "the second handed job", || async {
            let leases = queue
                .lease(std::slice::from_ref(&request), 4, ttl)
                .await
                .ok()?;
            (!leases.is_empty()).then_some(leases)
        })
        .await;
        later.extend(leases);
    }
    assert!(
        later.iter().all(|lease| lease.token != taken[0].token),
        "the same lease was taken twice: {:?}",
        later.iter().map(|l| &l.token).collect::<Vec<_>>()
    );
    assert_eq!(later.len(), 1);
    assert_eq!(
        client.status(&first).await.unwrap().record.state,
        JobState::Running,
        "the copy was handed back"
    );
}

/// Every number a call takes is checked before its first write: values `tonumber` lets
/// through (`inf`, `nan`, `1e999`, `0x10`, ` 7`, `1.5`) and values out of range are refused
/// with an error naming them, and the queue is left exactly as it was, in every function
/// that takes numbers. (A batch whose last job is bad writes none of the jobs before it.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_refused_call_changes_nothing() {
    let redis = TestRedis::start();
    let f = function("checked");
    let library = Library::new(redis.raw().await, &f);
    let client = redis.client().await;
    // Some state to leave alone: a queued job, a running one (its token), a failed one.
    client.enqueue_many(&f, &plain_jobs(b"q", 3)).await.unwrap();
    let (number, token) = library
        .lease_rows(&["w", "w/1", "1", "30000", "1000", "3"])
        .await
        .remove(0);
    const BAD: &[&str] = &[
        "inf",
        "-inf",
        "nan",
        "1e999",
        "0x10",
        " 7",
        "1.5",
        "",
        "99999999999999999999",
    ];
    let mut refused: Vec<(String, Vec<String>)> = Vec::new();
    let numeric_options = [
        "priority",
        "attempts",
        "timeout",
        "retention",
        "failed_retention",
        "delay",
        "at",
        "tick",
    ];
    for option in numeric_options {
        for bad in BAD {
            let mut args: Vec<String> = ["1", "call", "bad-call", "5"].map(String::from).to_vec();
            // Jobs that write before the bad one would in a call that checked late.
            for job in [
                vec!["1", "uniq", "u1", "in"],
                vec!["1", "tag", "t1", "in"],
                vec!["1", "once", "o1", "in"],
                vec!["0", "in"],
            ] {
                args.extend(job.into_iter().map(String::from));
            }
            let mut job: Vec<String> = vec!["1".into(), option.into(), bad.to_string()];
            if option == "tick" {
                job = vec![
                    "2".into(),
                    "schedule".into(),
                    "s".into(),
                    option.into(),
                    bad.to_string(),
                ];
            }
            args.extend(job);
            args.push("in".into());
            refused.push(("enqueue".into(), args));
        }
    }
    let calls: Vec<(&str, Vec<&str>)> = vec![
        (
            "enqueue",
            vec!["1", "call", "c", "1", "1", "priority", "1001", "x"],
        ),
        ("enqueue", vec!["1", "call", "c", "1", "1", "uniq", "", "x"]),
        ("lease", vec!["w", "w/2", "0x10", "30000", "1000", "3"]),
        ("lease", vec!["w", "w/2", "1", "inf", "1000", "3"]),
        ("lease", vec!["w", "w/2", "1", "30000", "nan", "3"]),
        ("lease", vec!["w", "w/2", "1", "30000", "1000", "1e999"]),
        (
            "lease",
            vec![
                "w", "w/2", "1", "30000", "1000", "3", "ch", "inf", "1", "", "0",
            ],
        ),
        ("complete", vec!["1", "lease", "inf", "0"]),
        (
            "complete",
            vec![
                "5", "call", "c", "lease", "1", "worker", "w", "ttl", "nan", "timeout", "1", "0",
            ],
        ),
        ("complete", vec!["0", "1", "x1", "tok", "", "", ""]),
        (
            "fail",
            vec![&number, &token, "trap", "boom", "1", "inf", "", ""],
        ),
        (
            "fail",
            vec![&number, &token, "trap", "boom", "2", "10", "", ""],
        ),
        ("heartbeat", vec![&number, &token, "1e999"]),
        ("progress", vec![&number, &token, "1.5", "10", ""]),
        ("priority", vec!["2", "nan"]),
        ("priority", vec!["2", "5000"]),
        ("configure", vec!["concurrency", "abc"]),
        ("configure", vec!["concurrency", "inf"]),
        ("configure", vec!["no_such_setting", "1"]),
        ("configure", vec!["paused", "yes"]),
        ("retry", vec!["group", "trap", "inf"]),
        ("recheck", vec!["1e999"]),
        ("resolve", vec!["2", "other:1", "bogus"]),
        ("link", vec!["2", "not-an-id"]),
        ("adopt", vec!["2", "not-an-id"]),
    ];
    for (name, args) in calls {
        refused.push((name.into(), args.into_iter().map(String::from).collect()));
    }
    // A job with the most tags refuses one more.
    let tags: Vec<String> = (0..wasmgear_proto::limits::MAX_TAGS)
        .map(|i| format!("t{i}"))
        .collect();
    let mut add = vec!["2".to_string(), "add".into()];
    add.extend(tags.iter().cloned());
    let _: Vec<String> = library
        .ok("tag", &add.iter().map(String::as_str).collect::<Vec<_>>())
        .await;
    refused.push((
        "tag".into(),
        vec!["2".into(), "add".into(), "one-more".into()],
    ));
    let before = library.dump().await;
    for (name, args) in &refused {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let error = library
            .call::<redis::Value>(name, &args)
            .await
            .expect_err(&format!("{name} {args:?} was not refused"));
        assert!(
            matches!(error.code(), Some("BADARGS" | "BADJOB")),
            "{name} {args:?}: {error}"
        );
        assert_eq!(
            library.dump().await,
            before,
            "{name} {args:?} was refused ({error}) but changed the queue"
        );
    }
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
            let (results, ..): (String, redis::Value, redis::Value, i64, i64) = library
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
    let (results, ..): (String, redis::Value, redis::Value, i64, i64) = library
        .ok("complete", &["0", "1", &one.0, "w/other:1:1", "x", "", ""])
        .await;
    assert_eq!(results, "x");
}

/// When a hand-off gives out older ready jobs instead of the call's new ones, the other
/// workers are still told there is work (`work` on the function's channel).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_is_announced_when_a_hand_off_gave_older_jobs() {
    let redis = TestRedis::start();
    let f = function("older");
    let library = Library::new(redis.raw().await, &f);
    let client = redis.client().await;
    client
        .configure(&f, &[wasmgear_client::Setting::Concurrency(Some(1))])
        .await
        .unwrap();
    client
        .enqueue(&f, b"1", &EnqueueOptions::default())
        .await
        .unwrap();
    let (_, token) = library
        .lease_rows(&["a", "a/1", "1", "30000", "1000", "3"])
        .await
        .remove(0);
    // An older job waits, held back by the cap; a worker registers for a hand-off.
    client
        .enqueue(&f, b"2", &EnqueueOptions::default())
        .await
        .unwrap();
    library
        .ok::<redis::Value>(
            "lease",
            &[
                "b",
                "b/1",
                "1",
                "30000",
                "1000",
                "3",
                "wg:handoff:b",
                "3000",
                "1",
                "",
                "0",
            ],
        )
        .await;
    assert!(library.registration("b").await.is_some());
    let _: redis::Value = library
        .ok("complete", &["0", "1", "1", &token, "", "", ""])
        .await;
    let mut pubsub = redis::Client::open(redis.url())
        .unwrap()
        .get_async_pubsub()
        .await
        .unwrap();
    let work = library.key("work");
    pubsub.subscribe(&work).await.unwrap();
    let new = client
        .enqueue(&f, b"3", &EnqueueOptions::default())
        .await
        .unwrap();
    // The older job went to the registered worker; the new one waits.
    assert_eq!(
        client.status(&new).await.unwrap().record.state,
        JobState::Queued
    );
    // A marker published after the call: `work` must come before it.
    let mut conn = redis.raw().await;
    let _: i64 = redis::cmd("PUBLISH")
        .arg(&work)
        .arg("marker")
        .query_async(&mut conn)
        .await
        .unwrap();
    use futures_util::StreamExt;
    let mut messages = pubsub.on_message();
    let mut seen = Vec::new();
    loop {
        let payload: String = messages.next().await.unwrap().get_payload().unwrap();
        if payload == "marker" {
            break;
        }
        seen.push(payload);
    }
    assert!(seen.iter().any(|m| m == "work"), "{seen:?}");
}

/// A job handed back unrun (a stopping worker) keeps the time it was first leased: when it
/// later fails, `retry` runs it again even after its dependency is gone (it has been leased,
/// so its dependencies had succeeded).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_handed_back_can_be_retried_after_its_dependency_is_gone() {
    let redis = TestRedis::start();
    let f = function("handback");
    let library = Library::new(redis.raw().await, &f);
    let client = redis.client().await;
    client
        .configure(&f, &[wasmgear_client::Setting::KeepFinished(Some(1))])
        .await
        .unwrap();
    let dependency = client
        .enqueue(&f, b"d", &EnqueueOptions::default())
        .await
        .unwrap();
    let lease_one = |call: &'static str| {
        let library = library.clone();
        async move {
            library
                .lease_rows(&["w", call, "1", "30000", "1000", "3"])
                .await
                .remove(0)
        }
    };
    let (d, d_token) = lease_one("w/1").await;
    let _: redis::Value = library
        .ok("complete", &["0", "1", &d, &d_token, "", "", ""])
        .await;
    let options = EnqueueOptions {
        after: vec![dependency.clone()],
        max_attempts: Some(1),
        ..EnqueueOptions::default()
    };
    let job = client.enqueue(&f, b"j", &options).await.unwrap();
    let (j, j_token) = lease_one("w/2").await;
    let _: (i64, String, redis::Value) = library.ok("release", &[&j, &j_token]).await;
    let (j2, j2_token) = lease_one("w/3").await;
    assert_eq!(j2, j);
    let _: (i64, String, redis::Value) = library
        .ok("fail", &[&j, &j2_token, "trap", "boom", "0", "0", "", ""])
        .await;
    // The dependency is forgotten (one finished job kept): the next call's housekeeping.
    client
        .enqueue(&function("other"), b"x", &EnqueueOptions::default())
        .await
        .unwrap();
    let _: redis::Value = library
        .ok("lease", &["w", "w/4", "1", "30000", "1000", "3"])
        .await;
    assert_eq!(library.state(dependency.seq).await, "missing");
    client.retry(&job).await.unwrap();
    assert_eq!(
        client.status(&job).await.unwrap().record.state,
        JobState::Queued
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

/// A job enqueued before a worker listens (its `work` message unheard) is leased within a
/// few rounds even when the worker has fewer slots than functions: after a wait that runs
/// out, the slots kept for hand-offs are shared out anew in the call's turning order, so
/// the function asked first cannot keep the only slot, renewing its registration round
/// after round, while the other has a job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_waiting_before_the_worker_listens_is_leased_with_one_slot_for_two_functions() {
    let redis = TestRedis::start();
    let (first, second) = (function("asked-first"), function("asked-second"));
    let client = redis.client().await;
    let waiting = client
        .enqueue(&second, b"x", &EnqueueOptions::default())
        .await
        .unwrap();
    let queue = WorkerQueue::connect(&redis.url(), "one-slot")
        .await
        .unwrap();
    queue
        .listen(&[first.clone(), second.clone()])
        .await
        .unwrap();
    redis.until_subscribed("wg:handoff:one-slot", 1).await;
    // The first call asks the functions in this order.
    let requests = [LeaseRequest::new(first.clone()), LeaseRequest::new(second)];
    let ttl = Duration::from_secs(30);
    let mut leased = Vec::new();
    // A few rounds, as the worker's loop makes them: a wait (running out) between calls.
    for _ in 0..6 {
        leased = queue.lease(&requests, 1, ttl).await.unwrap();
        if !leased.is_empty() {
            break;
        }
        queue.wait_for_work(Duration::from_millis(50)).await;
    }
    let ids: Vec<&JobId> = leased.iter().map(|lease| &lease.info.id).collect();
    assert_eq!(ids, [&waiting], "the waiting job is leased");
    let library = Library::new(redis.raw().await, &first);
    assert_eq!(
        library.registration("one-slot").await,
        None,
        "the slot kept for the other function's hand-off went to the job"
    );
}

/// A `work` message heard just before a wait for work runs out stays news: its function
/// takes back the slot kept for another function's hand-off and leases its job (a worker
/// that forgot it asked the function again with no slot to lease into, and the job waited
/// while the other function's registration was renewed round after round).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_heard_as_a_wait_runs_out_is_not_forgotten() {
    let redis = TestRedis::start();
    let functions = [function("one"), function("other")];
    let client = redis.client().await;
    let queue = WorkerQueue::connect(&redis.url(), "heard").await.unwrap();
    queue.listen(&functions).await.unwrap();
    redis.until_subscribed("wg:handoff:heard", 1).await;
    let requests: Vec<LeaseRequest> = functions.iter().cloned().map(LeaseRequest::new).collect();
    let ttl = Duration::from_secs(30);
    assert!(queue.lease(&requests, 1, ttl).await.unwrap().is_empty());
    // One function keeps the only slot for its hand-off; a job of the other is announced.
    let mut holders = Vec::new();
    for f in &functions {
        let library = Library::new(redis.raw().await, f);
        holders.push(library.registration("heard").await.is_some());
    }
    assert_eq!(holders.iter().filter(|h| **h).count(), 1, "{holders:?}");
    let other = &functions[holders.iter().position(|h| !h).unwrap()];
    // The wake-up `listen` left is spent first, so that the next wait ends on the `work`.
    queue.wait_for_work(Duration::from_millis(10)).await;
    queue.wait_for_work(Duration::from_millis(10)).await;
    let job = client
        .enqueue(other, b"x", &EnqueueOptions::default())
        .await
        .unwrap();
    queue.wait_for_work(WAIT).await;
    // A wait that runs out before the next lease call.
    queue.wait_for_work(Duration::from_millis(50)).await;
    let leased = queue.lease(&requests, 1, ttl).await.unwrap();
    let ids: Vec<&JobId> = leased.iter().map(|lease| &lease.info.id).collect();
    assert_eq!(ids, [&job]);
}
