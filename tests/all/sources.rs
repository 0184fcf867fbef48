//! Queues people already run, served by a real `wasmgear worker --source ...` process and
//! driven by their own clients (GearMonkey's: `tests/support/gearmonkey.rs`, from the spec).

use std::time::Duration;

use futures_util::StreamExt;
use redis::AsyncCommands;

use crate::support::gearmonkey::GearMonkeyClient;
use crate::support::{TestRedis, WorkerProcess, eventually, plugin_dir, stderr, wasmgear};

const WAIT: Duration = Duration::from_secs(60);

/// Starts `wasmgear worker` on `plugins` against `redis` and waits until it serves.
fn start_worker(redis: &TestRedis, plugins: &std::path::Path, extra: &[&str]) -> WorkerProcess {
    WorkerProcess::serving(redis, plugins, extra)
}

/// Waits until GearMonkey's roll call for `function` says `n`.
async fn roll_call_is(redis: &TestRedis, function: &str, n: i64) {
    let url = redis.url();
    eventually(WAIT, &format!("{n} in the roll call of {function}"), || {
        let url = url.clone();
        async move {
            let mut client = GearMonkeyClient::connect(&url).await;
            (client.roll_call(function).await == n).then_some(())
        }
    })
    .await;
}

/// Waits until job `id` of `function` has `status`.
async fn status_is(redis: &TestRedis, function: &str, id: u64, status: &str) {
    let url = redis.url();
    eventually(WAIT, &format!("job {function}:{id} {status}"), || {
        let url = url.clone();
        async move {
            let mut client = GearMonkeyClient::connect(&url).await;
            (client.status(function, id).await == status).then_some(())
        }
    })
    .await;
}

fn text(hash: &std::collections::HashMap<String, Vec<u8>>, field: &str) -> String {
    String::from_utf8_lossy(hash.get(field).map(Vec::as_slice).unwrap_or_default()).into_owned()
}

/// A GearMonkey client's blocking run gets its output from a wasmgear plugin: the worker
/// answers the roll call, publishes `start:ID` and `finish:ID`, sets status and output,
/// pushes the lock list (kept 10 s) and keeps the hash 25 hours, as the spec says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gearmonkey_jobs_run_on_plugins_as_the_spec_says() {
    let redis = TestRedis::start();
    let plugins = plugin_dir(&["echo", "count"]);
    let _worker = start_worker(&redis, plugins.path(), &["--source", "gearmonkey"]);
    let mut client = GearMonkeyClient::connect(&redis.url()).await;
    roll_call_is(&redis, "echo", 1).await;

    let events = redis::Client::open(redis.url()).unwrap();
    let mut pubsub = events.get_async_pubsub().await.unwrap();
    pubsub.subscribe("channel:echo").await.unwrap();
    let (id, job) = client
        .run_blocking("echo", b"hello gearmonkey", 30)
        .await
        .unwrap();
    assert_eq!(text(&job, "status"), "success", "{job:?}");
    assert_eq!(text(&job, "output"), "hello gearmonkey");
    assert_eq!(text(&job, "input"), "hello gearmonkey");
    let mut seen = Vec::new();
    let mut messages = pubsub.on_message();
    while seen.len() < 3 {
        let message = tokio::time::timeout(WAIT, messages.next())
            .await
            .expect("events")
            .expect("a message");
        seen.push(message.get_payload::<String>().unwrap());
    }
    assert_eq!(
        seen,
        [
            format!("create:{id}"),
            format!("start:{id}"),
            format!("finish:{id}")
        ]
    );
    let mut conn = redis.raw().await;
    let ttl: i64 = conn.ttl(format!("job:echo:{id}")).await.unwrap();
    assert!((89_000..=90_000).contains(&ttl), "job hash TTL {ttl}");
    // The lock list was popped by the client; nothing of the lease is left behind.
    let leases: u64 = conn.zcard("wasmgear:gearmonkey:echo:leases").await.unwrap();
    assert_eq!(leases, 0);

    // Progress as the spec's dividend and divisor.
    let id = client.run("count", b"4 10", "normal").await;
    status_is(&redis, "count", id, "success").await;
    let job = client.get("count", id).await;
    assert_eq!(text(&job, "status:dividend"), "4", "{job:?}");
    assert_eq!(text(&job, "status:divisor"), "4", "{job:?}");
    assert_eq!(text(&job, "output"), "counted to 4");
}

/// Due scheduled jobs go first, then high, normal and low; a job scheduled for later waits
/// (status idle) until its time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gearmonkey_priorities_and_scheduled_jobs() {
    let redis = TestRedis::start();
    let mut client = GearMonkeyClient::connect(&redis.url()).await;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let low = client.run("echo", b"low", "low").await;
    let normal = client.run("echo", b"normal", "normal").await;
    let high = client.run("echo", b"high", "high").await;
    let due = client.schedule("echo", b"due", now - 10).await;
    let later = client.schedule("echo", b"later", now + 3).await;

    let events = redis::Client::open(redis.url()).unwrap();
    let mut pubsub = events.get_async_pubsub().await.unwrap();
    pubsub.subscribe("channel:echo").await.unwrap();
    let plugins = plugin_dir(&["echo"]);
    let _worker = start_worker(
        &redis,
        plugins.path(),
        &["--source", "gearmonkey", "--concurrency", "1"],
    );
    let mut starts = Vec::new();
    let mut messages = pubsub.on_message();
    while starts.len() < 4 {
        let message = tokio::time::timeout(WAIT, messages.next())
            .await
            .expect("events")
            .expect("a message");
        let payload: String = message.get_payload().unwrap();
        if let Some(id) = payload.strip_prefix("start:") {
            starts.push(id.parse::<u64>().unwrap());
        }
    }
    assert_eq!(starts, [due, high, normal, low]);
    assert_eq!(client.status("echo", later).await, "idle");
    status_is(&redis, "echo", later, "success").await;
    let ended = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!(ended >= now + 3, "ran before its time");
}

/// A failure the plugin says may pass is retried (status idle again, in the scheduled
/// queue) until the attempts run out, then ends as `error` with the message; a failure
/// for good ends at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gearmonkey_failures_are_retried_then_recorded() {
    let redis = TestRedis::start();
    let plugins = plugin_dir(&["fail"]);
    let worker = start_worker(
        &redis,
        plugins.path(),
        &["--source", "gearmonkey", "--retry-backoff", "100ms"],
    );
    let mut client = GearMonkeyClient::connect(&redis.url()).await;
    let retried = client.run("fail", b"retry", "normal").await;
    let failed = client.run("fail", b"now", "normal").await;
    status_is(&redis, "fail", failed, "error").await;
    let job = client.get("fail", failed).await;
    assert!(
        text(&job, "output").contains("failed on purpose: now"),
        "{job:?}"
    );
    status_is(&redis, "fail", retried, "error").await;
    let job = client.get("fail", retried).await;
    assert!(text(&job, "output").contains("asked to retry"), "{job:?}");
    // Three attempts (the default), so two retries.
    let log = worker.log();
    assert_eq!(
        log.matches("asking to retry on attempt").count(),
        3,
        "{log}"
    );
    let mut conn = redis.raw().await;
    let attempts: Option<String> = conn
        .hget("wasmgear:gearmonkey:fail:attempts", retried)
        .await
        .unwrap();
    assert_eq!(attempts, None, "bookkeeping left behind");
}

/// A worker killed mid-job loses neither the job nor the roll call: once its lease runs
/// out another worker runs the job, and its count is taken back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_workers_gearmonkey_job_runs_again() {
    let redis = TestRedis::start();
    let plugins = plugin_dir(&["count"]);
    let first = start_worker(
        &redis,
        plugins.path(),
        &["--source", "gearmonkey", "--lease-ttl", "1s"],
    );
    let mut client = GearMonkeyClient::connect(&redis.url()).await;
    let id = client.run("count", b"30 100", "normal").await;
    status_is(&redis, "count", id, "busy").await;
    first.signal("KILL");
    let _second = start_worker(
        &redis,
        plugins.path(),
        &["--source", "gearmonkey", "--lease-ttl", "1s"],
    );
    status_is(&redis, "count", id, "success").await;
    roll_call_is(&redis, "count", 1).await;
    let job = client.get("count", id).await;
    assert_eq!(text(&job, "output"), "counted to 30");
}

/// Foreign data that is no job is logged and skipped, and the worker serves on: an id that
/// is no number (set aside), an id without a job hash, a job hash without input (ended as
/// an error, so a blocking client returns).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_gearmonkey_data_is_skipped() {
    let redis = TestRedis::start();
    let mut conn = redis.raw().await;
    let _: () = conn
        .lpush("queue:echo:normal", "not-a-number")
        .await
        .unwrap();
    let _: () = conn.lpush("queue:echo:normal", 777).await.unwrap();
    let _: () = conn.hset("job:echo:778", "status", "idle").await.unwrap();
    let _: () = conn.lpush("queue:echo:normal", 778).await.unwrap();
    let plugins = plugin_dir(&["echo"]);
    let worker = start_worker(&redis, plugins.path(), &["--source", "gearmonkey"]);
    let mut client = GearMonkeyClient::connect(&redis.url()).await;
    let good = client.run("echo", b"still here", "normal").await;
    status_is(&redis, "echo", good, "success").await;
    status_is(&redis, "echo", 778, "error").await;
    let job = client.get("echo", 778).await;
    assert!(text(&job, "output").contains("no `input`"), "{job:?}");
    let rejected: Vec<String> = conn
        .lrange("wasmgear:gearmonkey:echo:rejected", 0, -1)
        .await
        .unwrap();
    assert_eq!(rejected, ["not-a-number"]);
    let exists: bool = conn.exists("job:echo:777").await.unwrap();
    assert!(!exists);
    let log = worker.log();
    assert!(log.contains("no job id"), "{log}");
    assert!(log.contains("without its job hash"), "{log}");
}

/// One worker process serves wasmgear's own queue and GearMonkey's with the same plugins,
/// and the worker list says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_worker_serves_wasmgear_and_gearmonkey() {
    let redis = TestRedis::start();
    let plugins = plugin_dir(&["echo"]);
    let _worker = start_worker(
        &redis,
        plugins.path(),
        &["--source", "wasmgear", "--source", "gearmonkey"],
    );
    let url = redis.url();
    let env = [("WASMGEAR_REDIS_URL", url.as_str())];
    let mut client = GearMonkeyClient::connect(&url).await;
    let (_, job) = client
        .run_blocking("echo", b"from gearmonkey", 30)
        .await
        .unwrap();
    assert_eq!(text(&job, "output"), "from gearmonkey");
    let out = wasmgear(&["enqueue", "echo", "from wasmgear", "--wait"], &env);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "from wasmgear",
        "{}",
        stderr(&out)
    );
    let out = wasmgear(&["workers"], &env);
    let listed = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(listed.contains("sources wasmgear, gearmonkey"), "{listed}");
}

/// A bad `--source` is refused at start with one sentence (exit 2).
#[test]
fn bad_source_specs_are_refused() {
    let redis = TestRedis::start();
    let plugins = plugin_dir(&["echo"]);
    let url = redis.url();
    let dir = plugins.path().to_str().unwrap();
    for (spec, says) in [
        ("gearmonky", "unknown source protocol"),
        ("gearmonkey@ftp://host", "no Redis URL scheme"),
    ] {
        let out = wasmgear(
            &["worker", "--plugins", dir, "--source", spec],
            &[("WASMGEAR_REDIS_URL", url.as_str())],
        );
        assert_eq!(out.status.code(), Some(2), "{spec}: {}", stderr(&out));
        assert!(stderr(&out).contains(says), "{spec}: {}", stderr(&out));
    }
}
