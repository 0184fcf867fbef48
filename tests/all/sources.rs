//! Queues people already run, served by a real `wasmgear worker --source ...` process and
//! driven by their own clients (GearMonkey's: `tests/support/gearmonkey.rs`, from the spec).

use std::time::Duration;

use futures_util::StreamExt;
use redis::AsyncCommands;

use crate::support::clients::{rwq_node, rwq_python};
use crate::support::gearmonkey::GearMonkeyClient;
use wasmgear_testkit::{
    ClosedPort, TestRedis, WorkerProcess, eventually, plugin_dir, stderr, wasmgear,
};

const WAIT: Duration = Duration::from_secs(60);
/// Jobs a worker started, by function.
const STARTED: &str = "wasmgear_jobs_started_total";

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
    let _worker = WorkerProcess::builder(&redis.url())
        .plugins(plugins.path())
        .args(&["--source", "gearmonkey"])
        .start();
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
    let _worker = WorkerProcess::builder(&redis.url())
        .plugins(plugins.path())
        .args(&["--source", "gearmonkey", "--concurrency", "1"])
        .start();
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
    let worker = WorkerProcess::builder(&redis.url())
        .plugins(plugins.path())
        .args(&["--source", "gearmonkey", "--retry-backoff", "100ms"])
        .metrics()
        .start();
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
    // Three attempts (the default), so two retries; the final failure ran once.
    let fail = [("function", "fail")];
    assert_eq!(worker.metric(STARTED, &fail), 4.0, "{}", worker.log());
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
    let first = WorkerProcess::builder(&redis.url())
        .plugins(plugins.path())
        .args(&["--source", "gearmonkey", "--lease-ttl", "1s"])
        .start();
    let mut client = GearMonkeyClient::connect(&redis.url()).await;
    let id = client.run("count", b"30 100", "normal").await;
    status_is(&redis, "count", id, "busy").await;
    first.signal("KILL");
    let _second = WorkerProcess::builder(&redis.url())
        .plugins(plugins.path())
        .args(&["--source", "gearmonkey", "--lease-ttl", "1s"])
        .start();
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
    let worker = WorkerProcess::builder(&redis.url())
        .plugins(plugins.path())
        .args(&["--source", "gearmonkey"])
        .start();
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
    // Each is logged (what the worker did with data it could not use): behaviour under
    // test; the good job behind them ran, so they were dealt with.
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
    let _worker = WorkerProcess::builder(&redis.url())
        .plugins(plugins.path())
        .args(&["--source", "wasmgear", "--source", "gearmonkey"])
        .start();
    let url = redis.url();
    let mut client = GearMonkeyClient::connect(&url).await;
    let (_, job) = client
        .run_blocking("echo", b"from gearmonkey", 30)
        .await
        .unwrap();
    assert_eq!(text(&job, "output"), "from gearmonkey");
    own_queue_served_beside(&redis, "wasmgear, gearmonkey");
}

/// A job of wasmgear's own queue runs on the `echo` plugin of a worker that serves foreign
/// queues too, and `wasmgear workers` lists its `sources`.
pub(crate) fn own_queue_served_beside(redis: &TestRedis, sources: &str) {
    let url = redis.url();
    let env = [("WASMGEAR_REDIS_URL", url.as_str())];
    let out = wasmgear(&["enqueue", "echo", "from wasmgear", "--wait"], &env);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "from wasmgear",
        "{}",
        stderr(&out)
    );
    let out = wasmgear(&["workers"], &env);
    let listed = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(listed.contains(&format!("sources {sources}")), "{listed}");
}

/// A bad `--source` is refused at start with one sentence (exit 2).
#[test]
fn bad_source_specs_are_refused() {
    let redis = TestRedis::start();
    let plugins = plugin_dir(&["echo"]);
    let url = redis.url();
    let dir = plugins.path().to_str().unwrap();
    let closed = ClosedPort::new();
    let unreachable = format!("gearmonkey@redis://127.0.0.1:{}", closed.port());
    for (specs, code, says) in [
        (&["gearmonky"][..], 2, "unknown source protocol"),
        (&["gearmonkey@ftp://host"], 2, "no Redis URL scheme"),
        (
            &["redis-work-queue:q"],
            2,
            "function of its jobs is missing",
        ),
        (&["gearmonkey", "gearmonkey"], 2, "given twice"),
        (&["worqr:my_app:q=echo"], 2, "underscore"),
        (&["qless:jobs=echo"], 2, "klass"),
        (&["qless:a,,b"], 2, "a queue name is empty"),
        (&[unreachable.as_str()], 6, "source gearmonkey@"),
    ] {
        let mut args = vec!["worker", "--plugins", dir];
        for spec in specs {
            args.extend(["--source", spec]);
        }
        let out = wasmgear(&args, &[("WASMGEAR_REDIS_URL", url.as_str())]);
        assert_eq!(out.status.code(), Some(code), "{specs:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(says), "{specs:?}: {}", stderr(&out));
    }
}

/// Waits until `key` (a hash) exists, and returns it.
async fn hash_appears(redis: &TestRedis, key: &str) -> std::collections::HashMap<String, String> {
    let conn = redis.raw().await;
    eventually(WAIT, &format!("{key} to appear"), || {
        let mut conn = conn.clone();
        async move {
            let hash: std::collections::HashMap<String, String> = conn.hgetall(key).await.ok()?;
            (!hash.is_empty()).then_some(hash)
        }
    })
    .await
}

/// Items added by the real Python and Node.js libraries run on a plugin; each outcome is
/// kept in `P:result:ID`, and the item is completed as the libraries complete one (data and
/// lease gone, out of the processing list).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_work_queue_items_from_python_and_node_run_on_plugins() {
    let redis = TestRedis::start();
    let plugins = plugin_dir(&["echo"]);
    let _worker = WorkerProcess::builder(&redis.url())
        .plugins(plugins.path())
        .args(&["--source", "redis-work-queue:cv=echo"])
        .start();
    let url = redis.url();
    rwq_python(&url, "cv", &["add", "py-1", "from python"]);
    rwq_node(&url, "cv", &["add", "node-1", "from node"]);
    let result = hash_appears(&redis, "cv:result:py-1").await;
    assert_eq!(result["status"], "success");
    assert_eq!(result["output"], "from python");
    let result = hash_appears(&redis, "cv:result:node-1").await;
    assert_eq!(result["output"], "from node");
    let mut conn = redis.raw().await;
    let exists: u64 = redis::cmd("EXISTS")
        .arg("cv:item:py-1")
        .arg("cv:leased_by_session:py-1")
        .arg("cv:item:node-1")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(exists, 0, "completed items keep no data or lease");
    let lengths = rwq_python(&url, "cv", &["lengths"]);
    assert_eq!(String::from_utf8_lossy(&lengths.stdout).trim(), "0 0");
    let ttl: i64 = conn.ttl("cv:result:py-1").await.unwrap();
    assert!(ttl > 86_000, "result TTL {ttl}");
}

/// A failure that may pass lets the lease lapse for the backoff, and the item comes back
/// (the protocol's only retry) until its attempts are used up; then, and for a failure for
/// good at once, the item is completed with a failed result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_work_queue_failures_retry_by_lapsing_then_record() {
    let redis = TestRedis::start();
    let plugins = plugin_dir(&["fail"]);
    let worker = WorkerProcess::builder(&redis.url())
        .plugins(plugins.path())
        .args(&[
            "--source",
            "redis-work-queue:jobs=fail",
            "--retry-backoff",
            "100ms",
        ])
        .metrics()
        .start();
    let url = redis.url();
    rwq_python(&url, "jobs", &["add", "again", "retry"]);
    rwq_python(&url, "jobs", &["add", "never", "now"]);
    let result = hash_appears(&redis, "jobs:result:never").await;
    assert_eq!(result["status"], "failed");
    assert!(
        result["error"].contains("failed on purpose: now"),
        "{result:?}"
    );
    let result = hash_appears(&redis, "jobs:result:again").await;
    assert_eq!(result["status"], "failed");
    assert!(result["error"].contains("asked to retry"), "{result:?}");
    // Three attempts (the default), so two retries; the failure for good ran once.
    let fail = [("function", "fail")];
    assert_eq!(worker.metric(STARTED, &fail), 4.0, "{}", worker.log());
}

/// Either library's `light_clean` leaves a live wasmgear lease alone; after a worker is
/// killed, the Python library's `light_clean` puts its item back and another worker runs it.
/// The stray id Node's `lightClean` pushes (`0`, no data) is skipped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_work_queue_cleaners_respect_live_leases_and_recover_dead_ones() {
    let redis = TestRedis::start();
    let url = redis.url();
    let plugins = plugin_dir(&["count"]);
    let args = [
        "--source",
        "redis-work-queue:slow=count",
        "--lease-ttl",
        "1s",
    ];
    let first = WorkerProcess::builder(&redis.url())
        .plugins(plugins.path())
        .args(&args)
        .metrics()
        .start();
    rwq_python(&url, "slow", &["add", "long", "60 100"]);
    let mut conn = redis.raw().await;
    eventually(WAIT, "the item leased", || {
        let mut conn = conn.clone();
        async move {
            let leased: bool = conn.exists("slow:leased_by_session:long").await.ok()?;
            leased.then_some(())
        }
    })
    .await;
    // Cleaners run while the job runs (and past the first lease time: renewed). Until the
    // job ends, its id stays in the processing list.
    for _ in 0..3 {
        rwq_python(&url, "slow", &["clean"]);
        rwq_node(&url, "slow", &["clean"]);
        let processing: Vec<String> = conn.lrange("slow:processing", 0, -1).await.unwrap();
        let ended: bool = conn.exists("slow:result:long").await.unwrap();
        assert!(
            ended || processing == ["long"],
            "a live lease was cleaned away: {processing:?}"
        );
    }
    let result = hash_appears(&redis, "slow:result:long").await;
    assert_eq!(result["output"], "counted to 60");
    // Leased once: no cleaner gave it to anyone else meanwhile.
    let count = [("function", "count")];
    assert_eq!(first.metric(STARTED, &count), 1.0, "{}", first.log());

    // Now a worker dies mid-job.
    rwq_python(&url, "slow", &["add", "orphan", "30 100"]);
    eventually(WAIT, "the orphan leased", || {
        let mut conn = conn.clone();
        async move {
            let leased: bool = conn.exists("slow:leased_by_session:orphan").await.ok()?;
            leased.then_some(())
        }
    })
    .await;
    first.signal("KILL");
    eventually(WAIT, "the dead worker's lease to run out", || {
        let mut conn = conn.clone();
        async move {
            let leased: bool = conn.exists("slow:leased_by_session:orphan").await.ok()?;
            (!leased).then_some(())
        }
    })
    .await;
    rwq_python(&url, "slow", &["clean"]);
    let queued: Vec<String> = conn.lrange("slow:queue", 0, -1).await.unwrap();
    assert!(queued.contains(&"orphan".to_string()), "{queued:?}");
    let _second = WorkerProcess::builder(&redis.url())
        .plugins(plugins.path())
        .args(&args)
        .start();
    let result = hash_appears(&redis, "slow:result:orphan").await;
    assert_eq!(result["output"], "counted to 30");
    let processing: Vec<String> = conn.lrange("slow:processing", 0, -1).await.unwrap();
    assert!(processing.is_empty(), "{processing:?}");
}

/// Ids without item data (a stray `0` from Node's cleaner, a producer that died between its
/// two commands) are skipped and taken out of the processing list; the worker serves on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_redis_work_queue_data_is_skipped() {
    let redis = TestRedis::start();
    let mut conn = redis.raw().await;
    let _: () = conn.lpush("q:queue", "ghost").await.unwrap();
    let _: () = conn.lpush("q:queue", "0").await.unwrap();
    let plugins = plugin_dir(&["echo"]);
    let worker = WorkerProcess::builder(&redis.url())
        .plugins(plugins.path())
        .args(&["--source", "redis-work-queue:q=echo"])
        .start();
    rwq_python(&redis.url(), "q", &["add", "real", "still here"]);
    let result = hash_appears(&redis, "q:result:real").await;
    assert_eq!(result["output"], "still here");
    let processing: Vec<String> = conn.lrange("q:processing", 0, -1).await.unwrap();
    assert!(processing.is_empty(), "{processing:?}");
    // Logged (what the worker did with ids it could not use): behaviour under test; the
    // item behind them ran, so they were dealt with.
    assert!(
        worker.log().contains("without its item data"),
        "{}",
        worker.log()
    );
}

/// A Redis Cluster is refused for the protocols whose keys have no hash tag, with one
/// sentence and exit code 2.
#[test]
fn sources_without_hash_tags_refuse_a_cluster() {
    let cluster = wasmgear_testkit::TestCluster::start();
    let plugins = plugin_dir(&["echo"]);
    let dir = plugins.path().to_str().unwrap();
    let url = cluster.url();
    for spec in [
        "gearmonkey",
        "redis-work-queue:q=echo",
        "worqr:q=echo",
        "qless:q",
    ] {
        let out = wasmgear(
            &["worker", "--plugins", dir, "--source", spec],
            &[("WASMGEAR_REDIS_URL", url.as_str())],
        );
        assert_eq!(out.status.code(), Some(2), "{spec}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("is a Redis Cluster"),
            "{spec}: {}",
            stderr(&out)
        );
    }
}
