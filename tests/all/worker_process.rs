//! `wasmgear worker` as a process: it refuses to start without plugins or past the
//! concurrency limit, runs a Redis of its own when given no URL, lets its running job finish on
//! SIGTERM, a job of a killed worker is completed by another, and a plugin file put in its
//! directory serves a new function.

use std::time::Duration;

use wasmgear_testkit::{
    TestRedis, WorkerProcess, eventually_sync, plugin_dir, stderr, stdout, wasmgear,
};

/// A worker on a missing plugin directory, or on an empty one it does not watch (nothing
/// could ever serve), exits with an error naming it.
#[test]
fn a_worker_without_plugins_exits_with_a_clear_error() {
    let redis = TestRedis::start();
    let url = redis.url();
    let empty = tempfile::tempdir().unwrap();
    let missing = empty.path().join("missing");
    for (dir, extra, expected) in [
        (empty.path(), "--no-watch", "no usable plugin in"),
        (missing.as_path(), "", "cannot read the plugin directory"),
    ] {
        let mut args = vec!["worker", "--plugins", dir.to_str().unwrap()];
        args.extend([extra].into_iter().filter(|a| !a.is_empty()));
        let out = wasmgear(&args, &[("WASMGEAR_REDIS_URL", url.as_str())]);
        assert_eq!(out.status.code(), Some(1));
        assert!(stderr(&out).contains(expected), "{}", stderr(&out));
    }
}

/// Without a Redis URL the worker runs a private redis-server, the CLI finds it through
/// WASMGEAR_HOME, and SIGTERM stops both cleanly.
#[test]
fn the_worker_embeds_redis_when_no_url_is_given() {
    let home = tempfile::tempdir().unwrap();
    let home_str = home.path().to_str().unwrap();
    let plugins = plugin_dir(&["echo"]);
    let env = [("WASMGEAR_HOME", home_str)];
    let mut worker = WorkerProcess::embedded(home.path())
        .plugins(plugins.path())
        .start();
    // Where the embedded Redis listens is what the worker tells its operator: the line is
    // the behaviour under test (the worker has printed it before it serves).
    assert!(
        worker
            .log()
            .contains("started an embedded Redis at redis://127.0.0.1:"),
        "{}",
        worker.log()
    );
    let url_file = home.path().join("redis.url");
    assert!(url_file.exists());

    let out = wasmgear(&["enqueue", "echo", "embedded", "--wait"], &env);
    assert_eq!(stdout(&out), "embedded", "{}", stderr(&out));

    // The embedded Redis goes down: the worker starts it again, and jobs run on.
    let url = std::fs::read_to_string(&url_file).unwrap();
    let port = url.trim().rsplit(':').next().unwrap().to_string();
    let shutdown = std::process::Command::new("redis-cli")
        .args(["-p", &port, "SHUTDOWN", "NOSAVE"])
        .output()
        .expect("run redis-cli");
    assert!(!String::from_utf8_lossy(&shutdown.stdout).contains("ERR"));
    eventually_sync(
        Duration::from_secs(30),
        "the embedded Redis to answer again",
        || {
            let ping = std::process::Command::new("redis-cli")
                .args(["-p", &port, "PING"])
                .output()
                .expect("run redis-cli");
            String::from_utf8_lossy(&ping.stdout).trim() == "PONG"
        },
    );
    // The worker tells its operator it restarted Redis (it logs so once the server
    // answers): that warning is behaviour under test.
    eventually_sync(Duration::from_secs(10), "the restart's warning", || {
        worker
            .log()
            .contains("the embedded Redis had died and was restarted")
    });
    let out = wasmgear(&["enqueue", "echo", "again", "--wait"], &env);
    assert_eq!(stdout(&out), "again", "{}", stderr(&out));

    worker.signal("TERM");
    assert_eq!(
        worker.wait_exit(Duration::from_secs(30)),
        Some(0),
        "{}",
        worker.log()
    );
    assert!(!url_file.exists(), "the URL file must go with the server");
    let url =
        std::fs::read_to_string(home.path().join("redis").join("redis.log")).unwrap_or_default();
    assert!(
        url.contains("ready to exit") || url.contains("Redis is now ready to exit"),
        "redis did not shut down cleanly:\n{url}"
    );
}

/// SIGTERM stops leasing, lets the running job finish within the grace period, and exits 0.
#[test]
fn sigterm_lets_the_running_job_finish() {
    let redis = TestRedis::start();
    let plugins = plugin_dir(&["count"]);
    let mut worker = WorkerProcess::builder(&redis.url())
        .plugins(plugins.path())
        .args(&["--shutdown-grace", "30s"])
        .start();
    let url = redis.url();
    let env = [("WASMGEAR_REDIS_URL", url.as_str())];
    let id = stdout(&wasmgear(&["enqueue", "count", "10 100"], &env))
        .trim()
        .to_string();
    eventually_sync(Duration::from_secs(20), "the job to run", || {
        stdout(&wasmgear(&["status", &id], &env)).contains("state     running")
    });
    worker.signal("TERM");
    assert_eq!(
        worker.wait_exit(Duration::from_secs(30)),
        Some(0),
        "{}",
        worker.log()
    );
    let text = stdout(&wasmgear(&["status", &id], &env));
    assert!(text.contains("state     succeeded"), "{text}");
}

/// A worker killed with SIGKILL mid-job loses its lease; another worker reclaims the job
/// and completes it, and the history shows both attempts.
#[test]
fn a_job_of_a_killed_worker_is_completed_by_another() {
    let redis = TestRedis::start();
    let plugins = plugin_dir(&["count"]);
    let url = redis.url();
    let env = [("WASMGEAR_REDIS_URL", url.as_str())];
    let mut first = WorkerProcess::builder(&redis.url())
        .plugins(plugins.path())
        .args(&["--lease-ttl", "1s"])
        .start();
    let id = stdout(&wasmgear(&["enqueue", "count", "20 100"], &env))
        .trim()
        .to_string();
    eventually_sync(Duration::from_secs(20), "progress", || {
        stdout(&wasmgear(&["status", &id], &env)).contains("progress  ")
    });
    first.signal("KILL");
    assert!(first.wait_exit(Duration::from_secs(10)).is_some());

    let _second = WorkerProcess::builder(&redis.url())
        .plugins(plugins.path())
        .args(&["--lease-ttl", "1s"])
        .start();
    let out = wasmgear(&["enqueue", "count", "1 1", "--wait"], &env);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    eventually_sync(
        Duration::from_secs(30),
        "the reclaimed job to finish",
        || stdout(&wasmgear(&["status", &id], &env)).contains("state     succeeded"),
    );
    let json: serde_json::Value =
        serde_json::from_slice(&wasmgear(&["status", &id, "--json"], &env).stdout).unwrap();
    assert_eq!(json["attempt"], 2);
    let outcomes: Vec<&str> = json["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(outcomes, ["lease-lost", "succeeded"]);
}

/// A plugin dropped into a running worker's directory serves its new function: the worker
/// subscribes to it and joins its roll call.
#[test]
fn a_new_plugin_file_serves_a_new_function() {
    let redis = TestRedis::start();
    let plugins = plugin_dir(&["echo"]);
    let _worker = WorkerProcess::builder(&redis.url())
        .plugins(plugins.path())
        .start();
    let url = redis.url();
    let env = [("WASMGEAR_REDIS_URL", url.as_str())];
    let temp = plugins.path().join(".reverse.tmp");
    std::fs::copy(wasmgear_testkit::artifact("reverse"), &temp).unwrap();
    std::fs::rename(&temp, plugins.path().join("reverse.wasm")).unwrap();
    eventually_sync(Duration::from_secs(20), "the roll call of reverse", || {
        stdout(&wasmgear(&["workers"], &env)).contains("serves reverse (plugin")
    });
    let out = wasmgear(
        &["enqueue", "reverse", "new", "--require-worker", "--wait"],
        &env,
    );
    assert_eq!(stdout(&out), "wen", "{}", stderr(&out));
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
