//! Hardening (issue 14): every deadline holds whatever a job is doing, nothing a plugin
//! sends grows without bound, and no script leaves the queue half-changed.

use std::time::{Duration, Instant};

use wasmgear_client::{Client, EnqueueOptions, JobState, JobStatus, Setting};
use wasmgear_proto::{ErrorClass, JobId, LeaseRequest, LeaseStatus};
use wasmgear_runtime::{Limits, RuntimeConfig};
use wasmgear_worker::WorkerConfig;

use crate::features::Hand;
use wasmgear_testkit::proxy::Proxy;
use wasmgear_testkit::{
    TestRedis, TestWorker, TestWorkerOptions, WorkerProcess, eventually, function, plugin_dir,
    wasmgear,
};

/// A worker whose jobs get `grace` to stop after a cancel, and `shutdown_grace` to finish
/// on shutdown.
fn options(grace: Duration, shutdown_grace: Duration) -> TestWorkerOptions {
    TestWorkerOptions {
        runtime: RuntimeConfig {
            max_instances: 8,
            limits: Limits {
                cancel_grace: grace,
                ..Limits::default()
            },
            fuel: false,
            cache: None,
        },
        config: WorkerConfig {
            concurrency: 4,
            shutdown_grace,
            ..WorkerConfig::default()
        },
        ..TestWorkerOptions::default()
    }
}

fn once(timeout: Duration) -> EnqueueOptions {
    EnqueueOptions {
        max_attempts: Some(1),
        timeout: Some(timeout),
        ..EnqueueOptions::default()
    }
}

/// A job asleep inside a host call (a `wasi:io` poll on a timer, never reaching an epoch
/// check) ends by its timeout, is stopped by a cancel after the grace period, and does not
/// hold up shutdown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_blocked_in_a_host_call_meets_every_deadline() {
    let redis = TestRedis::start();
    let worker = TestWorker::start_with(
        &redis,
        &["hostile"],
        options(Duration::from_millis(300), Duration::from_millis(500)),
    )
    .await;
    let client = redis.client().await;
    let hostile = function("hostile");

    // The timeout.
    let started = Instant::now();
    let id = client
        .enqueue(&hostile, b"sleep 3600", &once(Duration::from_secs(1)))
        .await
        .unwrap();
    let status = ended(&client, &id).await;
    assert_eq!(status.record.state, JobState::Failed);
    let error = status.record.error.unwrap();
    assert_eq!(error.class, "timed-out", "{}", error.message);
    assert!(started.elapsed() < Duration::from_secs(30));

    // A cancel.
    let id = client
        .enqueue(&hostile, b"sleep 3600", &once(Duration::from_secs(3600)))
        .await
        .unwrap();
    running(&client, &id).await;
    client.cancel(&id).await.unwrap();
    let status = ended(&client, &id).await;
    assert_eq!(status.record.state, JobState::Cancelled);

    // Shutdown: the grace period ends, the job is cancelled and handed back, the worker
    // returns (TestWorker::stop fails the test if it takes a minute).
    let id = client
        .enqueue(&hostile, b"sleep 3600", &once(Duration::from_secs(3600)))
        .await
        .unwrap();
    running(&client, &id).await;
    let stopping = Instant::now();
    worker.stop().await;
    assert!(
        stopping.elapsed() < Duration::from_secs(20),
        "shutdown took {:?}",
        stopping.elapsed()
    );
    assert_eq!(
        client.status(&id).await.unwrap().record.state,
        JobState::Queued,
        "the job is handed back"
    );
}

/// A job waiting for an HTTP response that never comes ends by its timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_waiting_on_a_silent_server_ends_by_its_timeout() {
    let redis = TestRedis::start();
    // A server that accepts connections and never answers.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    let _held = std::thread::spawn(move || {
        let mut open = Vec::new();
        for stream in silent.incoming().take(4) {
            open.push(stream);
        }
    });
    let dir = plugin_dir(&["hostile"]);
    std::fs::write(
        dir.path().join("hostile.toml"),
        format!("[http]\nallow = [\"127.0.0.1:{port}\"]\n"),
    )
    .unwrap();
    let worker = TestWorker::start_on(
        &redis.url(),
        dir,
        options(Duration::from_millis(300), Duration::from_secs(5)),
    )
    .await;
    let client = redis.client().await;
    let input = format!("http 127.0.0.1:{port}/never");
    let id = client
        .enqueue(
            &function("hostile"),
            input.as_bytes(),
            &once(Duration::from_secs(1)),
        )
        .await
        .unwrap();
    let status = ended(&client, &id).await;
    assert_eq!(status.record.state, JobState::Failed);
    assert_eq!(status.record.error.unwrap().class, "timed-out");
    worker.stop().await;
}

/// Whatever a guest sends is capped before it reaches Redis: a 32 MiB retry message is cut
/// to 16 KiB with a marker, a 4 KiB progress message to 1 KiB, and the job's record stays
/// quick to read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guest_messages_are_capped_with_a_marker() {
    let redis = TestRedis::start();
    let worker = TestWorker::start(&redis, &["hostile"]).await;
    let client = redis.client().await;
    let hostile = function("hostile");
    let retried = EnqueueOptions {
        max_attempts: Some(2),
        ..EnqueueOptions::default()
    };
    let id = client
        .enqueue(&hostile, format!("retry {}", 32 << 20).as_bytes(), &retried)
        .await
        .unwrap();
    let status = ended(&client, &id).await;
    assert_eq!(status.record.state, JobState::Failed);
    assert_eq!(status.record.attempt, 2);
    let message = status.record.error.unwrap().message;
    assert!(message.len() <= 16 * 1024, "{} bytes", message.len());
    assert!(message.starts_with("EEEE"), "{}", &message[..40]);
    assert!(
        message.ends_with(" bytes cut]"),
        "{}",
        &message[message.len() - 40..]
    );
    for attempt in &status.record.history {
        let kept = attempt.message.as_deref().unwrap_or_default();
        assert!(
            kept.len() <= 16 * 1024,
            "history holds {} bytes",
            kept.len()
        );
    }
    let mut conn = redis.raw().await;
    let raw: String = redis::cmd("HGET")
        .arg("wg:{hostile}:jobs")
        .arg(id.seq)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(
        raw.len() < 64 * 1024,
        "the record holds {} bytes",
        raw.len()
    );

    // A progress count past 2^53 and a long message: stored exactly and cut.
    let huge = u64::MAX - 1;
    let id = client
        .enqueue(&hostile, format!("progress {huge}").as_bytes(), &retried)
        .await
        .unwrap();
    let mut seen = None;
    let status = client
        .wait(&id, Some(Duration::from_secs(30)), |p| {
            seen = Some(p.clone())
        })
        .await
        .unwrap();
    assert_eq!(status.record.state, JobState::Succeeded);
    let progress = status.record.progress.expect("the last progress is kept");
    assert_eq!((progress.done, progress.total), (huge, huge));
    assert!(progress.message.unwrap().len() <= 1024);
    if let Some(seen) = seen {
        assert_eq!(
            seen.done, huge,
            "the progress event carries the exact count"
        );
    }
    worker.stop().await;
}

/// A trap's error holds the reason and the guest's wasm frames, not the host's Rust
/// backtrace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trap_error_holds_the_guest_frames_only() {
    let redis = TestRedis::start();
    let worker = TestWorker::start(&redis, &["hostile"]).await;
    let client = redis.client().await;
    let id = client
        .enqueue(
            &function("hostile"),
            b"divide",
            &once(Duration::from_secs(30)),
        )
        .await
        .unwrap();
    let status = ended(&client, &id).await;
    let error = status.record.error.unwrap();
    assert_eq!(error.class, "trap");
    assert!(error.message.starts_with("wasm trap"), "{}", error.message);
    assert!(
        error.message.contains("wasm backtrace"),
        "{}",
        error.message
    );
    assert!(error.message.contains("hostile.wasm!"), "{}", error.message);
    // The guest's own words (its panic message) are in the job's log.
    let log = client.logs(&id).await.unwrap();
    assert!(log.contains("divide by zero"), "{log}");
    for host_internal in ["Stack backtrace", "wasmtime_internal", "tokio::"] {
        assert!(
            !error.message.contains(host_internal),
            "{host_internal} in {}",
            error.message
        );
    }
    assert!(error.message.len() < 16 * 1024);
    worker.stop().await;
}

/// A job whose plugin no live worker can load: `status` and `enqueue --wait` say that no
/// worker serves its function, and what the workers report about the plugin file.
#[test]
fn jobs_nobody_serves_say_so() {
    let redis = TestRedis::start();
    let url = redis.url();
    let dir = plugin_dir(&["echo"]);
    // Half a component: refused at load.
    let echo = std::fs::read(dir.path().join("echo.wasm")).unwrap();
    std::fs::write(dir.path().join("broken.wasm"), &echo[..echo.len() / 2]).unwrap();
    let worker = WorkerProcess::builder(&url)
        .plugins(dir.path())
        .args(&["--no-watch"])
        .start();
    wasmgear_testkit::eventually_sync(Duration::from_secs(60), "the worker list", || {
        wasmgear_testkit::stdout(&wasmgear(&["workers", "--redis", &url], &[])).contains("echo")
    });
    let enqueued = wasmgear(&["enqueue", "broken", "x", "--redis", &url], &[]);
    assert_eq!(
        enqueued.status.code(),
        Some(0),
        "{}",
        wasmgear_testkit::stderr(&enqueued)
    );
    let id = wasmgear_testkit::stdout(&enqueued).trim().to_string();
    let status = wasmgear_testkit::stdout(&wasmgear(&["status", &id, "--redis", &url], &[]));
    assert!(status.contains("no live worker serves broken"), "{status}");
    assert!(status.contains("broken.wasm"), "{status}");
    let waited = wasmgear(
        &[
            "enqueue",
            "broken",
            "y",
            "--wait",
            "--wait-timeout",
            "3s",
            "--redis",
            &url,
        ],
        &[],
    );
    assert_eq!(waited.status.code(), Some(4), "gave up waiting");
    let said = wasmgear_testkit::stderr(&waited);
    assert!(said.contains("no live worker serves broken"), "{said}");
    assert!(said.contains("broken.wasm"), "{said}");
    // A served function's status says nothing of the kind.
    let served = wasmgear(&["enqueue", "echo", "z", "--wait", "--redis", &url], &[]);
    assert!(!wasmgear_testkit::stderr(&served).contains("no live worker"));
    drop(worker);
}

/// The call from the issue: with one finished job kept, enqueueing a tagged job, a job
/// after a job of another function and a uniq job after a finished job of this function
/// adds all three or nothing, and never leaves an entry without a record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enqueue_is_all_or_nothing() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let hand = Hand::connect(&redis.url(), "hand").await;
    let f = function("fx");
    let other = function("other");
    client
        .configure(&f, &[Setting::KeepFinished(Some(1))])
        .await
        .unwrap();
    let f1 = client
        .enqueue(&f, b"1", &EnqueueOptions::default())
        .await
        .unwrap();
    let _f2 = client
        .enqueue(&f, b"2", &EnqueueOptions::default())
        .await
        .unwrap();
    for _ in 0..2 {
        let lease = hand.next(&f).await;
        hand.succeed(&lease, b"").await;
    }
    let dependency = client
        .enqueue(&other, b"o", &EnqueueOptions::default())
        .await
        .unwrap();
    let tagged = EnqueueOptions {
        tags: vec!["t".into()],
        ..EnqueueOptions::default()
    };
    let after_other = EnqueueOptions {
        after: vec![dependency.clone()],
        ..EnqueueOptions::default()
    };
    let uniq_after = EnqueueOptions {
        uniq: Some("u".into()),
        after: vec![f1.clone()],
        ..EnqueueOptions::default()
    };
    let jobs = [
        (&b"x"[..], tagged),
        (&b"w"[..], after_other),
        (&b"y"[..], uniq_after),
    ];
    let result = client.submit(&f, &jobs).await;
    let mut conn = redis.raw().await;
    let records: std::collections::HashMap<String, String> = redis::cmd("HGETALL")
        .arg("wg:{fx}:jobs")
        .query_async(&mut conn)
        .await
        .unwrap();
    // Every entry of every index has a record.
    for set in ["ready", "scheduled", "leased", "waiting", "expires"] {
        let members: Vec<String> = redis::cmd("ZRANGE")
            .arg(format!("wg:{{fx}}:{set}"))
            .arg(0)
            .arg(-1)
            .query_async(&mut conn)
            .await
            .unwrap();
        for number in members {
            assert!(
                records.contains_key(&number),
                "{set} holds {number} without a record"
            );
        }
    }
    let tagged: Vec<String> = redis::cmd("ZRANGE")
        .arg("wg:{fx}:tagged")
        .arg(0)
        .arg(-1)
        .query_async(&mut conn)
        .await
        .unwrap();
    for member in tagged {
        let number = member
            .rsplit('\0')
            .next()
            .unwrap()
            .trim_start_matches('0')
            .to_string();
        assert!(
            records.contains_key(&number),
            "tagged holds {number} without a record"
        );
    }
    let holders: Vec<String> = redis::cmd("HVALS")
        .arg("wg:{fx}:uniq")
        .query_async(&mut conn)
        .await
        .unwrap();
    for number in holders {
        assert!(
            records.contains_key(&number),
            "uniq holds {number} without a record"
        );
    }
    let enqueued = result.expect("the three jobs are valid");
    assert_eq!(enqueued.len(), 3);
    for job in &enqueued {
        assert!(records.contains_key(&job.id.seq.to_string()));
    }
    // And the leases hand out the ready ones with their inputs.
    let leases = hand.take(&f, 10).await;
    let inputs: Vec<&[u8]> = leases.iter().map(|l| l.input.as_slice()).collect();
    assert_eq!(inputs, vec![&b"x"[..], &b"y"[..]]);
}

/// Waiting entries without a job behind them are cleaned up, and a re-check round ends
/// however many jobs are due, on the queue's clock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_relink_safety_net_ends_and_cleans_orphans() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let hand = Hand::connect(&redis.url(), "hand").await;
    let (up, down) = (function("up"), function("down"));
    let a = client
        .enqueue(&up, b"a", &EnqueueOptions::default())
        .await
        .unwrap();
    let after_a = EnqueueOptions {
        after: vec![a.clone()],
        ..EnqueueOptions::default()
    };
    let b = client.enqueue(&down, b"b", &after_a).await.unwrap();
    let mut conn = redis.raw().await;
    // 250 orphans, and the real waiting job, all due.
    let mut zadd = redis::cmd("ZADD");
    zadd.arg("wg:{down}:waiting");
    for n in 1000..1250 {
        zadd.arg(0).arg(n);
    }
    zadd.arg(0).arg(b.seq);
    let _: i64 = zadd.query_async(&mut conn).await.unwrap();
    tokio::time::timeout(
        Duration::from_secs(30),
        hand.queue.relink(std::slice::from_ref(&down)),
    )
    .await
    .expect("relink returns")
    .unwrap();
    tokio::time::timeout(
        Duration::from_secs(30),
        hand.queue.relink(std::slice::from_ref(&down)),
    )
    .await
    .expect("relink returns")
    .unwrap();
    let left: Vec<(String, f64)> = redis::cmd("ZRANGE")
        .arg("wg:{down}:waiting")
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(left.len(), 1, "the orphans are gone: {}", left.len());
    assert_eq!(left[0].0, b.seq.to_string());
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as f64;
    assert!(left[0].1 > now_ms, "the next re-check is pushed out");
    assert_eq!(
        client.status(&b).await.unwrap().record.state,
        JobState::Waiting
    );
    hand.succeed(&hand.next(&up).await, b"").await;
    assert_eq!(
        client.status(&b).await.unwrap().record.state,
        JobState::Queued
    );
}

/// `retry` of a cancelled job waits again for its dependencies (in this function and in
/// others), keeps its scheduled time, and gives a job enqueued without a number of attempts
/// the plugin's default again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_keeps_dependencies_delay_and_default_attempts() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let hand = Hand::connect(&redis.url(), "hand").await;
    let (f, g) = (function("rf"), function("rg"));

    // Dependencies in this function and in another.
    let here = client
        .enqueue(&f, b"here", &EnqueueOptions::default())
        .await
        .unwrap();
    let there = client
        .enqueue(&g, b"there", &EnqueueOptions::default())
        .await
        .unwrap();
    let both = EnqueueOptions {
        after: vec![here.clone(), there.clone()],
        ..EnqueueOptions::default()
    };
    let dependent = client.enqueue(&f, b"dependent", &both).await.unwrap();
    client.cancel(&dependent).await.unwrap();
    assert!(client.retry(&dependent).await.unwrap());
    assert_eq!(
        client.status(&dependent).await.unwrap().record.state,
        JobState::Waiting,
        "the retried job waits for its dependencies"
    );
    let here_lease = hand.next(&f).await;
    assert_eq!(here_lease.info.id, here, "only the dependency runs");
    assert!(
        hand.take(&f, 10).await.is_empty(),
        "the dependent must not run yet"
    );
    hand.succeed(&here_lease, b"").await;
    assert!(
        hand.take(&f, 10).await.is_empty(),
        "it still waits for {there}"
    );
    hand.succeed(&hand.next(&g).await, b"").await;
    assert_eq!(hand.next(&f).await.info.id, dependent);

    // A failed dependency in this function: the retry is refused, nothing changes.
    let doomed = client
        .enqueue(&f, b"doomed", &EnqueueOptions::default())
        .await
        .unwrap();
    let after_doomed = EnqueueOptions {
        after: vec![doomed.clone()],
        ..EnqueueOptions::default()
    };
    let orphan = client.enqueue(&f, b"orphan", &after_doomed).await.unwrap();
    hand.fail(&hand.next(&f).await, ErrorClass::GuestError, false)
        .await;
    assert_eq!(
        client.status(&orphan).await.unwrap().record.state,
        JobState::Cancelled
    );
    let refused = client.retry(&orphan).await.unwrap_err().to_string();
    assert!(
        refused.contains(&format!("dependency {doomed} has failed")),
        "{refused}"
    );
    assert_eq!(
        client.status(&orphan).await.unwrap().record.state,
        JobState::Cancelled
    );

    // A delayed job keeps its time.
    let later = EnqueueOptions {
        delay: Duration::from_secs(3600),
        ..EnqueueOptions::default()
    };
    let delayed = client.enqueue(&f, b"later", &later).await.unwrap();
    let run_at = client
        .status(&delayed)
        .await
        .unwrap()
        .record
        .run_at_ms
        .unwrap();
    client.cancel(&delayed).await.unwrap();
    assert!(client.retry(&delayed).await.unwrap());
    let record = client.status(&delayed).await.unwrap().record;
    assert_eq!(record.state, JobState::Scheduled);
    assert_eq!(record.run_at_ms, Some(run_at));

    // Default attempts: cancelled before its first lease, retried, then leased with the
    // plugin's default of 5.
    let plain = client
        .enqueue(&g, b"plain", &EnqueueOptions::default())
        .await
        .unwrap();
    client.cancel(&plain).await.unwrap();
    assert!(client.retry(&plain).await.unwrap());
    let request = LeaseRequest {
        default_max_attempts: 5,
        ..LeaseRequest::new(g.clone())
    };
    let leases = hand
        .queue
        .lease(&[request], 1, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(leases[0].info.id, plain);
    assert_eq!(
        leases[0].info.max_attempts, 5,
        "the plugin's default, not 1"
    );

    // A job that ran had its dependencies succeed first: after they are forgotten, it is
    // retried at once, alone or with its failure group.
    let h = function("rh");
    let brief = EnqueueOptions {
        retention: Duration::from_secs(1),
        ..EnqueueOptions::default()
    };
    let first = client.enqueue(&h, b"first", &brief).await.unwrap();
    let after_first = EnqueueOptions {
        after: vec![first.clone()],
        ..once(Duration::from_secs(30))
    };
    let ran = client.enqueue(&h, b"ran", &after_first).await.unwrap();
    hand.succeed(&hand.next(&h).await, b"").await;
    let lease = hand.next(&h).await;
    assert_eq!(lease.info.id, ran);
    hand.fail(&lease, ErrorClass::GuestError, false).await;
    // A lease that finds nothing still forgets `first` once its retention is over.
    eventually(
        Duration::from_secs(10),
        "the dependency to be forgotten",
        || async {
            let none = hand
                .queue
                .lease(&[LeaseRequest::new(h.clone())], 1, Duration::from_secs(30))
                .await
                .unwrap();
            assert!(none.is_empty(), "{ran} failed for good");
            client.status(&first).await.is_err().then_some(())
        },
    )
    .await;
    assert!(client.retry(&ran).await.unwrap());
    assert_eq!(
        client.status(&ran).await.unwrap().record.state,
        JobState::Queued
    );
    hand.fail(&hand.next(&h).await, ErrorClass::GuestError, false)
        .await;
    let groups = client.failure_groups(Some(&h)).await.unwrap();
    assert_eq!(groups.len(), 1, "{groups:?}");
    let moved = client.retry_group(&h, &groups[0].group, 10).await.unwrap();
    assert_eq!(moved, vec![ran.clone()]);
    assert_eq!(
        client.status(&ran).await.unwrap().record.state,
        JobState::Queued
    );
}

/// A lease that runs out before its worker showed it had the job (its reply was lost, or
/// the worker died at once) does not use up an attempt, however often; once a heartbeat
/// confirmed it, it does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unconfirmed_lease_gives_its_attempt_back() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let hand = Hand::connect(&redis.url(), "hand").await;
    let f = function("uf");
    let id = client
        .enqueue(&f, b"x", &once(Duration::from_secs(30)))
        .await
        .unwrap();
    let short = Duration::from_millis(200);
    let lease_short = || async {
        hand.queue
            .lease(&[LeaseRequest::new(f.clone())], 1, short)
            .await
            .unwrap()
    };
    let first = lease_short().await;
    assert_eq!(first[0].info.attempt, 1);
    // Never confirmed: after expiry it is leased again as attempt 1, not failed.
    let again = eventually(Duration::from_secs(10), "the lease to expire", || async {
        let leases = lease_short().await;
        (!leases.is_empty()).then_some(leases)
    })
    .await;
    assert_eq!(again[0].info.id, id);
    assert_eq!(again[0].info.attempt, 1, "the lost lease did not count");
    // However often (issue 36: a job is never failed by leases that ran out unconfirmed).
    let third = eventually(
        Duration::from_secs(10),
        "the lease to expire again",
        || async {
            let leases = lease_short().await;
            (!leases.is_empty()).then_some(leases)
        },
    )
    .await;
    assert_eq!(
        third[0].info.attempt, 1,
        "the second lost lease did not count"
    );
    assert_eq!(
        client.status(&id).await.unwrap().record.state,
        JobState::Running
    );

    // Confirmed by a heartbeat: the expiry counts at once.
    let confirmed = client
        .enqueue(&f, b"y", &once(Duration::from_secs(30)))
        .await
        .unwrap();
    let lease = lease_short().await.remove(0);
    assert_eq!(lease.info.id, confirmed);
    hand.queue.heartbeat(&lease, short).await.unwrap();
    eventually(
        Duration::from_secs(10),
        "the confirmed job to fail",
        || async {
            let _ = lease_short().await;
            let state = client.status(&confirmed).await.unwrap().record.state;
            (state == JobState::Failed).then_some(())
        },
    )
    .await;
}

/// Once a running job's cancel was asked for, the cancel wins: a result reported after it
/// ends the job `cancelled` (its output dropped), and an enqueue with its uniq key makes a
/// new job instead of joining it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_requested_cancel_wins_and_frees_the_uniq_key() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let hand = Hand::connect(&redis.url(), "hand").await;
    let f = function("cf");
    let keyed = EnqueueOptions {
        uniq: Some("k".into()),
        ..EnqueueOptions::default()
    };
    let id = client.enqueue(&f, b"x", &keyed).await.unwrap();
    let lease = hand.next(&f).await;
    assert_eq!(
        client.cancel(&id).await.unwrap(),
        wasmgear_client::CancelOutcome::Stopping
    );
    let fresh = client.enqueue(&f, b"y", &keyed).await.unwrap();
    assert_ne!(
        fresh, id,
        "a job being cancelled does not hold its uniq key"
    );
    let done = hand
        .queue
        .complete(&lease, b"late output", &Default::default())
        .await
        .unwrap();
    assert_eq!(
        done,
        wasmgear_proto::Completion::Accepted(JobState::Cancelled)
    );
    let status = client.status(&id).await.unwrap();
    assert_eq!(status.record.state, JobState::Cancelled);
    assert_eq!(status.output, None);
    // The new holder keeps the key.
    assert_eq!(client.enqueue(&f, b"z", &keyed).await.unwrap(), fresh);
}

/// A finished job outlives its retention while a dependent in another function has not been
/// told of its end (the notify was lost), so the dependent's re-check still finds it and
/// runs; once told, it is forgotten as usual.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dependency_is_kept_until_its_dependent_is_told() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let hand = Hand::connect(&redis.url(), "hand").await;
    let (up, down) = (function("up"), function("down"));
    let short = EnqueueOptions {
        retention: Duration::from_secs(1),
        ..EnqueueOptions::default()
    };
    let a = client.enqueue(&up, b"a", &short).await.unwrap();
    let after_a = EnqueueOptions {
        after: vec![a.clone()],
        ..EnqueueOptions::default()
    };
    let b = client.enqueue(&down, b"b", &after_a).await.unwrap();

    // The dependent's function cannot be reached while `a` completes: `resolve` fails there
    // (its jobs hash is briefly of the wrong type), so the news is lost.
    let mut conn = redis.raw().await;
    let _: () = redis::cmd("RENAME")
        .arg("wg:{down}:jobs")
        .arg("wg:{down}:jobs-away")
        .query_async(&mut conn)
        .await
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg("wg:{down}:jobs")
        .arg("in the way")
        .query_async(&mut conn)
        .await
        .unwrap();
    hand.succeed(&hand.next(&up).await, b"").await;
    let _: () = redis::cmd("DEL")
        .arg("wg:{down}:jobs")
        .query_async(&mut conn)
        .await
        .unwrap();
    let _: () = redis::cmd("RENAME")
        .arg("wg:{down}:jobs-away")
        .arg("wg:{down}:jobs")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(
        client.status(&b).await.unwrap().record.state,
        JobState::Waiting
    );

    // A job finished after `a` with the same retention: once it is forgotten, `a`'s
    // retention is over too.
    let c = client.enqueue(&up, b"c", &short).await.unwrap();
    hand.succeed(&hand.next(&up).await, b"").await;
    eventually(Duration::from_secs(20), "the retention to pass", || async {
        // Enqueueing runs the housekeeping.
        client.enqueue(&up, b"tick", &short).await.unwrap();
        client.status(&c).await.is_err().then_some(())
    })
    .await;
    assert!(
        client.status(&a).await.is_ok(),
        "{a} must wait for its dependent"
    );

    // The dependent's re-check finds `a` succeeded.
    let _: () = redis::cmd("ZADD")
        .arg("wg:{down}:waiting")
        .arg(0)
        .arg(b.seq)
        .query_async(&mut conn)
        .await
        .unwrap();
    hand.queue
        .relink(std::slice::from_ref(&down))
        .await
        .unwrap();
    assert_eq!(
        client.status(&b).await.unwrap().record.state,
        JobState::Queued
    );
    // Told now: `a` goes at the next housekeeping past its retention.
    eventually(
        Duration::from_secs(10),
        "the told dependency to go",
        || async {
            client.enqueue(&up, b"tick", &short).await.unwrap();
            client.status(&a).await.is_err().then_some(())
        },
    )
    .await;
}

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

/// The status of job `id` once it ended (a minute at most).
async fn ended(client: &Client, id: &JobId) -> JobStatus {
    client
        .wait(id, Some(Duration::from_secs(60)), |_| {})
        .await
        .unwrap_or_else(|e| panic!("{id} did not end: {e}"))
}

/// Returns once job `id` is running (half a minute at most).
async fn running(client: &Client, id: &JobId) {
    eventually(Duration::from_secs(30), "the job to start", || async {
        (client.status(id).await.unwrap().record.state == JobState::Running).then_some(())
    })
    .await;
}
