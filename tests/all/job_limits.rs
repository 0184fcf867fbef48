//! Limits a job cannot get around: every deadline holds whatever it is doing (asleep in a
//! host call, waiting on a silent server), what a guest sends is capped before it reaches
//! Redis, and a trap's error holds the guest's frames only.

use std::time::{Duration, Instant};

use wasmgear_client::{Client, EnqueueOptions, JobState, JobStatus};
use wasmgear_proto::JobId;
use wasmgear_runtime::{Limits, RuntimeConfig};
use wasmgear_worker::WorkerConfig;

use crate::support::jobs::{once, running};
use wasmgear_testkit::{TestRedis, TestWorker, TestWorkerOptions, function, plugin_dir};

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

/// The status of job `id` once it ended (a minute at most).
async fn ended(client: &Client, id: &JobId) -> JobStatus {
    client
        .wait(id, Some(Duration::from_secs(60)), |_| {})
        .await
        .unwrap_or_else(|e| panic!("{id} did not end: {e}"))
}
