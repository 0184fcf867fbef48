//! End to end through the library: enqueue → Redis → worker node → component → result.

use std::time::Duration;

use wasmgear_proto::LeaseRequest;

use wasmgear_client::{EnqueueOptions, JobState};
use wasmgear_proto::Progress;

use wasmgear_testkit::{TestRedis, TestWorker, function};

const WAIT: Option<Duration> = Some(Duration::from_secs(30));

/// A job's input goes through the echo plugin and comes back as its output.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn echo_returns_its_input() {
    let redis = TestRedis::start();
    let worker = TestWorker::start(&redis, &["echo", "reverse"]).await;
    let client = redis.client().await;
    let input = b"hello \x00\xff bytes".to_vec();
    let id = client
        .enqueue(&function("echo"), &input, &EnqueueOptions::default())
        .await
        .unwrap();
    let status = client.wait(&id, WAIT, |_| {}).await.unwrap();
    assert_eq!(status.record.state, JobState::Succeeded);
    assert_eq!(status.output.as_deref(), Some(&input[..]));
    assert_eq!(status.record.attempt, 1);
    assert_eq!(status.record.history.len(), 1);
    worker.stop().await;
}

/// Several functions are served by one node and each job reaches its own plugin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_reach_the_plugin_of_their_function() {
    let redis = TestRedis::start();
    let worker = TestWorker::start(&redis, &["echo", "reverse"]).await;
    let client = redis.client().await;
    let mut ids = Vec::new();
    for i in 0..20 {
        let text = format!("job number {i}");
        let f = if i % 2 == 0 { "reverse" } else { "echo" };
        ids.push((
            f,
            text.clone(),
            client
                .enqueue(&function(f), text.as_bytes(), &EnqueueOptions::default())
                .await
                .unwrap(),
        ));
    }
    for (f, text, id) in ids {
        let status = client.wait(&id, WAIT, |_| {}).await.unwrap();
        let expected: String = if f == "reverse" {
            text.chars().rev().collect()
        } else {
            text
        };
        assert_eq!(
            String::from_utf8(status.output.unwrap()).unwrap(),
            expected,
            "{id}"
        );
    }
    worker.stop().await;
}

/// A plugin's permanent error reaches the client as a failed job with its message, at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_error_reaches_the_client() {
    let redis = TestRedis::start();
    let worker = TestWorker::start(&redis, &["fail"]).await;
    let client = redis.client().await;
    let id = client
        .enqueue(&function("fail"), b"bad input", &EnqueueOptions::default())
        .await
        .unwrap();
    let status = client.wait(&id, WAIT, |_| {}).await.unwrap();
    assert_eq!(status.record.state, JobState::Failed);
    let error = status.record.error.expect("an error is stored");
    assert_eq!(error.class, "guest-error");
    assert!(
        error.message.contains("failed on purpose: bad input"),
        "{}",
        error.message
    );
    assert_eq!(status.record.attempt, 1, "a permanent error is not retried");
    assert!(status.output.is_none());
    worker.stop().await;
}

/// A retryable error is retried until the attempts run out; every attempt is in the history.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retryable_error_is_retried_then_fails() {
    let redis = TestRedis::start();
    let worker = TestWorker::start(&redis, &["fail"]).await;
    let client = redis.client().await;
    let options = EnqueueOptions {
        max_attempts: Some(3),
        ..EnqueueOptions::default()
    };
    let id = client
        .enqueue(&function("fail"), b"retry", &options)
        .await
        .unwrap();
    let status = client.wait(&id, WAIT, |_| {}).await.unwrap();
    assert_eq!(status.record.state, JobState::Failed);
    assert_eq!(status.record.attempt, 3);
    let outcomes: Vec<_> = status
        .record
        .history
        .iter()
        .map(|a| (a.attempt, a.outcome.as_str()))
        .collect();
    assert_eq!(
        outcomes,
        [(1, "guest-error"), (2, "guest-error"), (3, "guest-error")]
    );
    worker.stop().await;
}

/// Progress reports of a long job arrive while it runs, in the order they were made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_is_observed_in_order() {
    let redis = TestRedis::start();
    let worker = TestWorker::start(&redis, &["count"]).await;
    let client = redis.client().await;
    let id = client
        .enqueue(&function("count"), b"8 40", &EnqueueOptions::default())
        .await
        .unwrap();
    let mut seen: Vec<Progress> = Vec::new();
    let status = client
        .wait(&id, WAIT, |p| seen.push(p.clone()))
        .await
        .unwrap();
    assert_eq!(status.record.state, JobState::Succeeded);
    assert_eq!(status.output.as_deref(), Some(&b"counted to 8"[..]));
    let done: Vec<u64> = seen.iter().map(|p| p.done).collect();
    assert!(done.len() >= 4, "too few progress reports seen: {done:?}");
    assert!(
        done.windows(2).all(|w| w[0] < w[1]),
        "out of order: {done:?}"
    );
    let last = seen.last().unwrap();
    assert_eq!((last.done, last.total), (8, 8));
    assert_eq!(last.message.as_deref(), Some("step 8 of 8"));
    // A later status query sees the last report.
    let progress = client.status(&id).await.unwrap().record.progress.unwrap();
    assert_eq!((progress.done, progress.total), (8, 8));
    worker.stop().await;
}

/// A job that reports progress and ends at once (no pause: it finishes within its first
/// poll, when the worker sets no lease keeper for a job that reported nothing) still has
/// its last report stored before it finishes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_of_a_job_that_ends_at_once_is_kept() {
    let redis = TestRedis::start();
    let worker = TestWorker::start(&redis, &["count"]).await;
    let client = redis.client().await;
    let id = client
        .enqueue(&function("count"), b"3 0", &EnqueueOptions::default())
        .await
        .unwrap();
    let status = client.wait(&id, WAIT, |_| {}).await.unwrap();
    assert_eq!(status.output.as_deref(), Some(&b"counted to 3"[..]));
    let progress = status.record.progress.expect("the last progress report");
    assert_eq!((progress.done, progress.total), (3, 3));
    worker.stop().await;
}

/// A job for a function no worker serves stays queued (it is not lost or failed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_for_an_unserved_function_waits() {
    let redis = TestRedis::start();
    let worker = TestWorker::start(&redis, &["echo"]).await;
    let client = redis.client().await;
    let id = client
        .enqueue(
            &function("nobody-serves-this"),
            b"x",
            &EnqueueOptions::default(),
        )
        .await
        .unwrap();
    let echo = client
        .enqueue(&function("echo"), b"x", &EnqueueOptions::default())
        .await
        .unwrap();
    client.wait(&echo, WAIT, |_| {}).await.unwrap();
    assert_eq!(
        client.status(&id).await.unwrap().record.state,
        JobState::Queued
    );
    worker.stop().await;
}

/// On shutdown, running jobs get the grace period; then they are cancelled and handed back
/// to the queue without using up an attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_hands_back_jobs_that_do_not_finish_in_the_grace_period() {
    let redis = TestRedis::start();
    let mut options = wasmgear_testkit::TestWorkerOptions::default();
    options.config.shutdown_grace = Duration::from_millis(300);
    let worker = TestWorker::start_with(&redis, &["count"], options).await;
    let client = redis.client().await;
    let id = client
        .enqueue(&function("count"), b"1000 50", &EnqueueOptions::default())
        .await
        .unwrap();
    wasmgear_testkit::eventually(Duration::from_secs(20), "the job to run", || async {
        (client.status(&id).await.unwrap().record.state == JobState::Running).then_some(())
    })
    .await;
    worker.stop().await;
    let status = client.status(&id).await.unwrap();
    assert_eq!(status.record.state, JobState::Queued, "{:?}", status.record);
    assert_eq!(
        status.record.attempt, 0,
        "a handed-back job keeps its attempts"
    );
}

/// On shutdown, a job that finishes within the grace period completes normally.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_lets_running_jobs_finish_within_the_grace_period() {
    let redis = TestRedis::start();
    let worker = TestWorker::start(&redis, &["count"]).await;
    let client = redis.client().await;
    let id = client
        .enqueue(&function("count"), b"10 50", &EnqueueOptions::default())
        .await
        .unwrap();
    wasmgear_testkit::eventually(Duration::from_secs(20), "the job to run", || async {
        (client.status(&id).await.unwrap().record.state == JobState::Running).then_some(())
    })
    .await;
    worker.stop().await;
    let status = client.status(&id).await.unwrap();
    assert_eq!(status.record.state, JobState::Succeeded);
    assert_eq!(status.output.as_deref(), Some(&b"counted to 10"[..]));
}

/// A worker whose lease was taken over (here: expired and reclaimed by another worker)
/// learns it from its next heartbeat and stops the job, freeing its slot at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_lease_stops_the_job() {
    let redis = TestRedis::start();
    let mut options = wasmgear_testkit::TestWorkerOptions::default();
    options.config.concurrency = 1;
    options.config.lease_ttl = Duration::from_millis(600);
    options.runtime.limits.cancel_grace = Duration::from_millis(300);
    // `spin` neither reports progress nor checks for cancellation: only the heartbeat can
    // find out, and only the hard stop after the grace period can end it.
    let worker = TestWorker::start_with(&redis, &["spin", "echo"], options).await;
    let client = redis.client().await;
    let spin = function("spin");
    let id = client
        .enqueue(&spin, b"forever", &EnqueueOptions::default())
        .await
        .unwrap();
    wasmgear_testkit::eventually(Duration::from_secs(20), "the job to run", || async {
        (client.status(&id).await.unwrap().record.state == JobState::Running).then_some(())
    })
    .await;
    // Expire the lease by hand and let another worker reclaim the job.
    let expired = std::process::Command::new("redis-cli")
        .args([
            "-u",
            &redis.url(),
            "ZADD",
            "wg:{spin}:leased",
            "0",
            &id.seq.to_string(),
        ])
        .output()
        .unwrap();
    assert!(expired.status.success());
    let thief = wasmgear_client::WorkerQueue::connect(&redis.url(), "thief")
        .await
        .unwrap();
    let stolen = thief
        .lease(
            &[LeaseRequest::new(spin.clone())],
            1,
            Duration::from_secs(60),
        )
        .await
        .unwrap();
    assert_eq!(stolen.len(), 1);
    // The one slot of the first worker comes free only if it stopped the spinning job.
    let echo = client
        .enqueue(&function("echo"), b"next", &EnqueueOptions::default())
        .await
        .unwrap();
    let status = client
        .wait(&echo, Some(Duration::from_secs(10)), |_| {})
        .await
        .unwrap();
    assert_eq!(status.record.state, JobState::Succeeded);
    // The stolen job still belongs to the thief: the first worker's result was refused.
    let status = client.status(&id).await.unwrap();
    assert_eq!(status.record.state, JobState::Running);
    assert_eq!(status.record.worker.as_deref(), Some("thief"));
    worker.stop().await;
}

/// An idle worker runs a delayed job when it falls due, never before, and a retry waits for
/// its backoff. The worker's safety poll is an hour, so only its own due-time wake-up can
/// start either within the test's bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delayed_jobs_and_retries_run_when_due() {
    let redis = TestRedis::start();
    let mut options = wasmgear_testkit::TestWorkerOptions {
        retry_backoff: Duration::from_millis(200),
        ..Default::default()
    };
    options.config.idle_poll = Duration::from_secs(3600);
    let worker = TestWorker::start_with(&redis, &["echo", "fail"], options).await;
    let client = redis.client().await;
    redis.until_subscribed("wg:{echo}:work", 1).await;

    let delayed = EnqueueOptions {
        delay: Duration::from_millis(400),
        ..EnqueueOptions::default()
    };
    let id = client
        .enqueue(&function("echo"), b"later", &delayed)
        .await
        .unwrap();
    let status = client.wait(&id, WAIT, |_| {}).await.unwrap();
    let waited = status.record.history[0].started_ms.unwrap() - status.record.created_ms;
    assert!(
        waited >= 400,
        "started {waited} ms after enqueue, before its delay"
    );

    let twice = EnqueueOptions {
        max_attempts: Some(2),
        ..EnqueueOptions::default()
    };
    let id = client
        .enqueue(&function("fail"), b"retry", &twice)
        .await
        .unwrap();
    let status = client.wait(&id, WAIT, |_| {}).await.unwrap();
    let history = &status.record.history;
    assert_eq!(history.len(), 2);
    let gap = history[1].started_ms.unwrap() - history[0].ended_ms;
    // 200 ms base backoff with ±50 % jitter: 100..300 ms.
    assert!(
        gap >= 100,
        "retried {gap} ms after the failure, before its backoff"
    );
    worker.stop().await;
}

/// How many `FCALL`s the Redis behind `conn` has served.
async fn fcall_calls(conn: &mut redis::aio::MultiplexedConnection) -> u64 {
    wasmgear_testkit::command_calls(conn, "fcall").await
}

/// An idle worker serving many functions picks a job up with one lease call, not one call
/// per function, and it listens on the functions' quiet work channels, not on the events
/// channels that carry a message for every job started and finished.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_worker_asks_only_the_function_that_got_work() {
    let redis = TestRedis::start();
    let names: Vec<String> = (0..6).map(|i| format!("echo{i}")).collect();
    let dir = wasmgear_testkit::plugin_copies("echo", &names);
    // Wake-ups bring every job here: the idle poll (which asks every function, as it
    // should) is kept out of the count by a poll longer than the jobs take, also on a
    // loaded machine (with the default second, a slow run polled between jobs: 6.0 calls
    // per job in a CI run).
    let options = wasmgear_testkit::TestWorkerOptions {
        config: wasmgear_worker::WorkerConfig {
            idle_poll: Duration::from_secs(10),
            ..wasmgear_worker::WorkerConfig::default()
        },
        ..wasmgear_testkit::TestWorkerOptions::default()
    };
    let worker = TestWorker::start_on(&redis.url(), dir, options).await;
    let client = redis.client().await;
    let mut conn = redis.raw().await;
    for name in &names {
        redis
            .until_subscribed(&format!("wg:{{{name}}}:work"), 1)
            .await;
    }

    assert_eq!(subscribers(&mut conn, "wg:{echo3}:events").await, 0);
    assert_eq!(subscribers(&mut conn, "wg:{echo3}:work").await, 1);

    let jobs = 24;
    let before = fcall_calls(&mut conn).await;
    for i in 0..jobs {
        let id = client
            .enqueue(
                &function(&names[i % names.len()]),
                b"x",
                &EnqueueOptions::default(),
            )
            .await
            .unwrap();
        let status = client.wait(&id, WAIT, |_| {}).await.unwrap();
        assert_eq!(status.output.as_deref(), Some(&b"x"[..]));
    }
    let calls = (fcall_calls(&mut conn).await - before) as f64 / jobs as f64;
    // enqueue + lease + complete is 3; asking all six functions each time would be 8 or more
    // (the worker also renews its entry and roll calls every 2 s).
    assert!(calls < 5.0, "{calls:.1} script calls per job");
    worker.stop().await;
}

/// A worker running one job at a time reports finished jobs and leases the next in one
/// call, several at a time when the jobs are short: well under one script call per job at
/// steady state, not a `complete` and a `lease` per job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_job_leases_the_next_in_the_same_call() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let mut conn = redis.raw().await;
    let echo = function("echo");
    let jobs = 60;
    let inputs: Vec<Vec<u8>> = (0..jobs).map(|i| format!("job {i}").into_bytes()).collect();
    let batch: Vec<(&[u8], EnqueueOptions)> = inputs
        .iter()
        .map(|input| (&input[..], EnqueueOptions::default()))
        .collect();
    let published = wasmgear_testkit::command_calls(&mut conn, "publish").await;
    let ids = client.enqueue_many(&echo, &batch).await.unwrap();
    // The bulk's `create` events go out together (with the workers' wake-up).
    let enqueue_publishes = wasmgear_testkit::command_calls(&mut conn, "publish").await - published;
    assert!(
        enqueue_publishes <= 2,
        "{enqueue_publishes} PUBLISH for one enqueue call"
    );
    // The waits start first: each reads (and marks) its job with one `watch` call, and then
    // hears the end with the job, making no call of its own while the worker runs.
    let waits: Vec<_> = ids
        .iter()
        .map(|id| {
            let client = client.clone();
            let id = id.clone();
            tokio::spawn(async move { client.wait(&id, WAIT, |_| {}).await })
        })
        .collect();
    let jobs_key = wasmgear_proto::keys::FunctionKeys::new(&echo).jobs();
    wasmgear_testkit::eventually(
        Duration::from_secs(30),
        "every wait marks its job",
        || async {
            let records: Vec<String> = redis::cmd("HVALS")
                .arg(&jobs_key)
                .query_async(&mut redis.raw().await)
                .await
                .ok()?;
            (records.len() == jobs && records.iter().all(|r| r.contains("\"watched\"")))
                .then_some(())
        },
    )
    .await;
    let before = fcall_calls(&mut conn).await;
    let published = wasmgear_testkit::command_calls(&mut conn, "publish").await;
    let mut options = wasmgear_testkit::TestWorkerOptions::default();
    options.config.concurrency = 1;
    let worker = TestWorker::start_with(&redis, &["echo"], options).await;
    for ((id, input), wait) in ids.iter().zip(&inputs).zip(waits) {
        let status = wait.await.unwrap().unwrap();
        assert_eq!(status.record.state, JobState::Succeeded, "{id}");
        assert_eq!(status.output.as_deref(), Some(&input[..]));
        assert_eq!(status.record.attempt, 1, "{id} ran once");
    }
    let calls = (fcall_calls(&mut conn).await - before) as f64 / jobs as f64;
    // A `lease` and a `complete` per job would be 2, a `complete` leasing the next job 1.
    // Jobs this short are leased several ahead (AHEAD_MAX), so that each call reports and
    // leases several: well under one call per job (0.17 when written), although the
    // worker also loads the library, advertises itself and re-checks links now and then.
    assert!(calls < 0.5, "{calls:.2} script calls per job");
    // A call's events (the `finish` of the job it reports, the `start` of the one it
    // leases) go out in one message: one PUBLISH per call, not one per event.
    let publishes = (wasmgear_testkit::command_calls(&mut conn, "publish").await - published)
        as f64
        / jobs as f64;
    assert!(publishes < 0.5, "{publishes:.2} PUBLISH per job");
    // Each call writes the wait time of the jobs it leased and the run time of those it
    // completed together: every one is counted once.
    let today = (std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        / 86_400) as i64;
    // (Yesterday's too, should the run have crossed midnight.)
    let (mut waits, mut runs, mut buckets) = (0, 0, 0);
    for day in [today - 1, today] {
        let stats = client.stats(&echo, day).await.unwrap();
        waits += stats.wait.count;
        runs += stats.run.count;
        buckets += stats.run.histogram.iter().map(|(_, n)| n).sum::<u64>();
    }
    assert_eq!(
        (waits, runs, buckets),
        (jobs as u64, jobs as u64, jobs as u64)
    );
    // What Redis keeps to answer a call sent again is forgotten once the worker has the
    // reply (each call says which it has): not one entry per call for ten minutes.
    let kept: u64 = redis::cmd("HLEN")
        .arg(wasmgear_proto::keys::FunctionKeys::new(&echo).calls())
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(kept <= 3, "{kept} replies kept for calls sent again");
    worker.stop().await;
}

/// A worker whose slots go on to the next job of the function they just finished still
/// serves its functions in turn: a function with many jobs does not keep the slots from
/// another with a few.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_function_does_not_keep_the_slots_from_another() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let names = ["busy".to_string(), "quiet".to_string()];
    let dir = wasmgear_testkit::plugin_copies("echo", &names);
    let (busy, quiet) = (function("busy"), function("quiet"));
    let many: Vec<(&[u8], EnqueueOptions)> = (0..40)
        .map(|_| (&b"b"[..], EnqueueOptions::default()))
        .collect();
    let busy_ids = client.enqueue_many(&busy, &many).await.unwrap();
    let few: Vec<(&[u8], EnqueueOptions)> = (0..4)
        .map(|_| (&b"q"[..], EnqueueOptions::default()))
        .collect();
    let quiet_ids = client.enqueue_many(&quiet, &few).await.unwrap();
    let mut options = wasmgear_testkit::TestWorkerOptions::default();
    options.config.concurrency = 1;
    let worker = TestWorker::start_on(&redis.url(), dir, options).await;
    let mut quiet_done = 0;
    for id in &quiet_ids {
        let status = client.wait(id, WAIT, |_| {}).await.unwrap();
        assert_eq!(status.record.state, JobState::Succeeded);
        quiet_done = quiet_done.max(status.record.finished_ms.unwrap());
    }
    let mut busy_before = 0;
    for id in &busy_ids {
        let status = client.wait(id, WAIT, |_| {}).await.unwrap();
        assert_eq!(status.record.state, JobState::Succeeded);
        if status.record.finished_ms.unwrap() < quiet_done {
            busy_before += 1;
        }
    }
    // Taken in turn, the quiet function's four jobs are done after about four of the busy
    // one's; kept by the busy function, after all forty.
    assert!(
        busy_before <= 12,
        "{busy_before} of the busy function's jobs finished before the quiet one's four"
    );
    worker.stop().await;
}

/// How many clients subscribe to `channel`.
async fn subscribers(conn: &mut redis::aio::MultiplexedConnection, channel: &str) -> u64 {
    let counts: Vec<(String, u64)> = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(channel)
        .query_async(conn)
        .await
        .unwrap();
    counts[0].1
}

/// A client's concurrent waits share one subscription (one subscriber however many jobs
/// are awaited, gone once no wait needs it), and each wait still ends with its own job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waits_share_one_subscription() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let mut conn = redis.raw().await;
    let unserved = function("nobody-serves-this");
    let channel = "wg:{nobody-serves-this}:events";
    let mut waits = Vec::new();
    for i in 0..8u8 {
        let id = client
            .enqueue(&unserved, &[i], &EnqueueOptions::default())
            .await
            .unwrap();
        let waiting = client.clone();
        let awaited = id.clone();
        waits.push((
            id,
            tokio::spawn(async move { waiting.wait(&awaited, WAIT, |_| {}).await }),
        ));
    }
    wasmgear_testkit::eventually(Duration::from_secs(10), "the waits to subscribe", || {
        let mut conn = conn.clone();
        async move { (subscribers(&mut conn, channel).await == 1).then_some(()) }
    })
    .await;
    // Nothing else subscribed alongside (one connection, not one per wait).
    let clients: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query_async(&mut conn)
        .await
        .unwrap();
    let subscribed = clients
        .lines()
        .filter(|line| line.contains(" sub=1 "))
        .count();
    assert_eq!(subscribed, 1, "{clients}");

    for (id, wait) in waits {
        client.cancel(&id).await.unwrap();
        let status = wait.await.unwrap().unwrap();
        assert_eq!(status.id, id);
        assert_eq!(status.record.state, JobState::Cancelled);
    }
    wasmgear_testkit::eventually(Duration::from_secs(10), "the subscription to end", || {
        let mut conn = conn.clone();
        async move { (subscribers(&mut conn, channel).await == 0).then_some(()) }
    })
    .await;
}

/// The calls go to wasmgear's Functions library, loaded once per server: a server that lost
/// it (flushed, or restarted without persistence) gets it again from the next call of a
/// client or a worker, and a different library of the same name (another build) is replaced
/// when a client connects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_function_library_is_loaded_again_where_it_is_missing_or_different() {
    let redis = TestRedis::start();
    let worker = TestWorker::start(&redis, &["echo"]).await;
    let client = redis.client().await;
    let mut conn = redis.raw().await;
    let run = |input: &'static [u8]| {
        let client = &client;
        async move {
            let id = client
                .enqueue(&function("echo"), input, &EnqueueOptions::default())
                .await
                .unwrap();
            let status = client.wait(&id, WAIT, |_| {}).await.unwrap();
            assert_eq!(status.output.as_deref(), Some(input));
        }
    };
    let version = |conn: &mut redis::aio::MultiplexedConnection| {
        let mut conn = conn.clone();
        async move {
            redis::cmd("FCALL")
                .arg("wg2_version")
                .arg(0)
                .query_async::<String>(&mut conn)
                .await
        }
    };
    run(b"one").await;
    let loaded = version(&mut conn).await.unwrap();
    assert_eq!(loaded.len(), 40, "{loaded}");

    // Flushed: the client's enqueue and the worker's lease load it again.
    let _: () = redis::cmd("FUNCTION")
        .arg("FLUSH")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(version(&mut conn).await.is_err());
    run(b"two").await;
    assert_eq!(version(&mut conn).await.unwrap(), loaded);

    // Another build's library under the same name is replaced by the next client.
    let _: String = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg("REPLACE")
        .arg("#!lua name=wasmgear_v2\nredis.register_function('wg2_version', function() return 'other' end)")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(version(&mut conn).await.unwrap(), "other");
    let fresh = redis.client().await;
    assert_eq!(version(&mut conn).await.unwrap(), loaded);
    drop(fresh);
    run(b"three").await;
    worker.stop().await;
}

/// A server that will not run the library (here a user the ACL denies `FCALL` and `FUNCTION`;
/// Redis older than 7.0 alike) is refused at connect with an error that says what is needed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_cannot_run_the_library_is_refused_clearly() {
    let redis = TestRedis::start();
    let mut conn = redis.raw().await;
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("nofunctions")
        .arg("on")
        .arg(">secret")
        .arg("~*")
        .arg("&*")
        .arg("+@all")
        .arg("-fcall")
        .arg("-function")
        .query_async(&mut conn)
        .await
        .unwrap();
    let url = format!("redis://nofunctions:secret@127.0.0.1:{}", redis.port());
    match wasmgear_client::Client::connect(&url).await {
        Err(wasmgear_client::QueueError::Library { url, reason }) => {
            assert!(url.contains("***") && !url.contains("secret"), "{url}");
            assert!(reason.contains("FUNCTION and FCALL"), "{reason}");
        }
        Err(other) => panic!("refused for another reason: {other}"),
        Ok(_) => panic!("connected without the library"),
    }
    // Nothing was loaded by the refused client.
    let libraries: Vec<redis::Value> = redis::cmd("FUNCTION")
        .arg("LIST")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(libraries.is_empty());
}
