//! End to end through the real `wasmgear` binary: worker process, enqueue, status.

use std::time::Duration;

use wasmgear_testkit::{
    TestRedis, WorkerProcess, eventually_sync, plugin_dir, stderr, stdout, wasmgear,
    wasmgear_with_stdin,
};

/// `enqueue --wait` prints the output and exits 0; `status` then shows the finished job.
#[test]
fn enqueue_wait_prints_the_output_and_status_shows_it() {
    let redis = TestRedis::start();
    let plugins = plugin_dir(&["echo", "reverse"]);
    let _worker = WorkerProcess::builder(&redis.url())
        .plugins(plugins.path())
        .start();
    let url = redis.url();
    let env = [("WASMGEAR_REDIS_URL", url.as_str())];

    let out = wasmgear(&["enqueue", "reverse", "hello wasm", "--wait"], &env);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "msaw olleh");
    let id = stderr(&out)
        .lines()
        .find_map(|l| l.strip_prefix("enqueued "))
        .expect("id on stderr")
        .to_string();

    let status = wasmgear(&["status", &id], &env);
    assert_eq!(status.status.code(), Some(0), "{}", stderr(&status));
    let text = stdout(&status);
    assert!(text.contains("state     succeeded"), "{text}");
    assert!(text.contains("output    msaw olleh"), "{text}");

    let json = wasmgear(&["status", &id, "--json"], &env);
    let value: serde_json::Value =
        serde_json::from_slice(&json.stdout).expect("status --json is JSON");
    assert_eq!(value["state"], "succeeded");
    assert_eq!(value["id"], id);
}

/// Without --wait, enqueue prints only the job id; input comes from stdin, a file or
/// --input-json too, and the old spelling `--json JSON` still works with a warning.
#[test]
fn enqueue_reads_input_from_argument_stdin_or_file() {
    let redis = TestRedis::start();
    let plugins = plugin_dir(&["echo"]);
    let _worker = WorkerProcess::builder(&redis.url())
        .plugins(plugins.path())
        .start();
    let url = redis.url();
    let env = [("WASMGEAR_REDIS_URL", url.as_str())];

    let out = wasmgear(&["enqueue", "echo", "plain"], &env);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).trim().starts_with("echo:"), "{}", stdout(&out));

    let out = wasmgear_with_stdin(&["enqueue", "echo", "-", "--wait"], &env, b"from stdin\n");
    assert_eq!(stdout(&out), "from stdin\n", "{}", stderr(&out));

    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), b"from a file").unwrap();
    let out = wasmgear(
        &[
            "enqueue",
            "echo",
            "--input-file",
            file.path().to_str().unwrap(),
            "--wait",
        ],
        &env,
    );
    assert_eq!(stdout(&out), "from a file", "{}", stderr(&out));

    let out = wasmgear(
        &["enqueue", "echo", "--input-json", r#"{"n": 3}"#, "--wait"],
        &env,
    );
    assert_eq!(stdout(&out), r#"{"n": 3}"#, "{}", stderr(&out));
    assert!(!stderr(&out).contains("warning"), "{}", stderr(&out));
    let out = wasmgear(
        &["enqueue", "echo", "--json", r#"{"n": 4}"#, "--wait"],
        &env,
    );
    assert_eq!(stdout(&out), r#"{"n": 4}"#, "{}", stderr(&out));
    assert!(
        stderr(&out).contains(
            "warning: `wasmgear enqueue --json JSON` is deprecated and goes in the next release; \
             write `wasmgear enqueue --input-json JSON`"
        ),
        "{}",
        stderr(&out)
    );
}

/// A failing job makes `enqueue --wait` exit 1 with the plugin's error on stderr.
#[test]
fn a_failed_job_exits_non_zero_with_its_error() {
    let redis = TestRedis::start();
    let plugins = plugin_dir(&["fail"]);
    let _worker = WorkerProcess::builder(&redis.url())
        .plugins(plugins.path())
        .start();
    let url = redis.url();
    let out = wasmgear(
        &["enqueue", "fail", "oops", "--wait"],
        &[("WASMGEAR_REDIS_URL", url.as_str())],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(stdout(&out).is_empty());
    let err = stderr(&out);
    assert!(
        err.contains("failed")
            && err.contains("[guest-error]")
            && err.contains("failed on purpose: oops"),
        "{err}"
    );
}

/// `enqueue --wait` shows every progress report, in order, while the job runs.
#[test]
fn enqueue_wait_shows_progress_in_order() {
    let redis = TestRedis::start();
    let plugins = plugin_dir(&["count"]);
    let _worker = WorkerProcess::builder(&redis.url())
        .plugins(plugins.path())
        .start();
    let url = redis.url();
    let out = wasmgear(
        &["enqueue", "count", "5 60", "--wait"],
        &[("WASMGEAR_REDIS_URL", url.as_str())],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "counted to 5");
    let reports: Vec<String> = stderr(&out)
        .lines()
        .filter(|l| l.starts_with("progress "))
        .map(String::from)
        .collect();
    let done: Vec<u64> = reports
        .iter()
        .map(|l| {
            l["progress ".len()..]
                .split('/')
                .next()
                .unwrap()
                .parse()
                .unwrap()
        })
        .collect();
    assert!(done.len() >= 3, "{reports:?}");
    assert!(done.windows(2).all(|w| w[0] < w[1]), "{reports:?}");
    assert_eq!(reports.last().unwrap(), "progress 5/5 step 5 of 5");
}

/// Bad input gets a clear error and a non-zero exit, and changes nothing.
#[test]
fn bad_input_is_a_clear_error() {
    let redis = TestRedis::start();
    let url = redis.url();
    let env = [("WASMGEAR_REDIS_URL", url.as_str())];
    let cases: [(&[&str], &str); 6] = [
        (&["enqueue", "no{tags}", "x"], "invalid function name"),
        (
            &["enqueue", "echo", "x", "--priority", "urgent"],
            "priority \"urgent\"",
        ),
        (
            &["enqueue", "echo", "x", "--max-attempts", "0"],
            "max attempts 0",
        ),
        (
            &["enqueue", "echo", "x", "--timeout", "soon"],
            "invalid duration",
        ),
        (&["status", "not-an-id"], "invalid job id"),
        (&["status", "echo:99"], "no job echo:99"),
    ];
    for (args, expected) in cases {
        let out = wasmgear(args, &env);
        assert_ne!(out.status.code(), Some(0), "{args:?} succeeded");
        assert!(
            stderr(&out).contains(expected),
            "{args:?}: {}",
            stderr(&out)
        );
    }
    // Nothing was enqueued by the refused commands: the first real job is number 1.
    let out = wasmgear(&["enqueue", "echo", "x"], &env);
    assert_eq!(stdout(&out).trim(), "echo:1");
}

/// Without a Redis URL the CLI says how to get one.
#[test]
fn no_redis_is_a_clear_error() {
    let home = tempfile::tempdir().unwrap();
    let out = wasmgear(
        &["enqueue", "echo", "x"],
        &[("WASMGEAR_HOME", home.path().to_str().unwrap())],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("no Redis to talk to"),
        "{}",
        stderr(&out)
    );
}

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

/// `wasmgear cancel` cancels a waiting job; a finished one is reported as such (exit 1).
#[test]
fn cancel_stops_a_waiting_job() {
    let redis = TestRedis::start();
    let url = redis.url();
    let env = [("WASMGEAR_REDIS_URL", url.as_str())];
    let id = stdout(&wasmgear(&["enqueue", "echo", "x"], &env))
        .trim()
        .to_string();
    let out = wasmgear(&["cancel", &id], &env);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), format!("{id} cancelled"));
    assert!(stdout(&wasmgear(&["status", &id], &env)).contains("state     cancelled"));
    let again = wasmgear(&["cancel", &id], &env);
    assert_eq!(again.status.code(), Some(1));
    assert!(
        stderr(&again).contains("had already ended (cancelled)"),
        "{}",
        stderr(&again)
    );
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

/// `wasmgear bulk` enqueues JSON lines in order and prints their ids; one bad line fails
/// the whole input with its line number and nothing is written.
#[test]
fn bulk_enqueues_json_lines() {
    let redis = TestRedis::start();
    let plugins = plugin_dir(&["echo", "sum"]);
    let _worker = WorkerProcess::builder(&redis.url())
        .plugins(plugins.path())
        .start();
    let url = redis.url();
    let env = [("WASMGEAR_REDIS_URL", url.as_str())];

    let bad =
        b"{\"function\": \"echo\", \"input\": \"one\"}\n{\"function\": \"echo\", \"priorty\": 1}\n";
    let out = wasmgear_with_stdin(&["bulk"], &env, bad);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("line 2: ") && stderr(&out).contains("nothing was enqueued"),
        "{}",
        stderr(&out)
    );
    assert!(
        stderr(&out).contains("unknown field `priorty`"),
        "{}",
        stderr(&out)
    );

    let good = concat!(
        "{\"function\": \"echo\", \"input\": \"one\"}\n",
        "{\"function\": \"sum\", \"input_json\": {\"numbers\": [1, 2]}, \"priority\": \"high\"}\n",
        "\n",
        "{\"function\": \"echo\", \"input\": \"two\", \"max_attempts\": 1, \"timeout\": \"5s\"}\n",
    );
    let out = wasmgear_with_stdin(&["bulk"], &env, good.as_bytes());
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let ids: Vec<String> = stdout(&out).lines().map(String::from).collect();
    assert_eq!(
        ids,
        ["echo:1", "sum:1", "echo:2"],
        "the refused input must not have used ids"
    );
    eventually_sync(Duration::from_secs(30), "the bulk jobs", || {
        stdout(&wasmgear(&["status", "echo:2"], &env)).contains("state     succeeded")
    });
    let sum = stdout(&wasmgear(&["status", "sum:1"], &env));
    assert!(sum.contains("output    {\"sum\":3}"), "{sum}");
}

/// `--at` in the past is refused; a future one leaves the job scheduled.
#[test]
fn enqueue_at_a_time() {
    let redis = TestRedis::start();
    let url = redis.url();
    let env = [("WASMGEAR_REDIS_URL", url.as_str())];
    let out = wasmgear(
        &["enqueue", "echo", "x", "--at", "2001-01-01T00:00:00Z"],
        &env,
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("is in the past"), "{}", stderr(&out));
    let tomorrow = std::time::SystemTime::now() + Duration::from_secs(86_400);
    let tomorrow = tomorrow
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        .to_string();
    let out = wasmgear(&["enqueue", "echo", "x", "--at", &tomorrow], &env);
    assert_eq!(stdout(&out).trim(), "echo:1", "{}", stderr(&out));
    assert!(stdout(&wasmgear(&["status", "echo:1"], &env)).contains("state     scheduled"));
}

/// `wasmgear logs` prints what a job logged and printed, attempt by attempt.
#[test]
fn logs_prints_the_job_log() {
    let redis = TestRedis::start();
    let plugins = plugin_dir(&["count", "hostile"]);
    let _worker = WorkerProcess::builder(&redis.url())
        .plugins(plugins.path())
        .start();
    let url = redis.url();
    let env = [("WASMGEAR_REDIS_URL", url.as_str())];
    let out = wasmgear(&["enqueue", "count", "2 1", "--wait"], &env);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let log = stdout(&wasmgear(&["logs", "count:1"], &env));
    assert!(log.starts_with("--- attempt 1 ---\n"), "{log}");
    assert!(log.contains("INFO  job count:1: counting to 2"), "{log}");
    let out = wasmgear(&["enqueue", "hostile", "print 2", "--wait"], &env);
    assert_eq!(stdout(&out), "printed 2 lines", "{}", stderr(&out));
    let log = stdout(&wasmgear(&["logs", "hostile:1"], &env));
    assert!(
        log.contains("INFO  [stdout] stdout line 1")
            && log.contains("WARN  [stderr] stderr line 1"),
        "{log}"
    );
    let missing = wasmgear(&["logs", "count:9"], &env);
    assert_eq!(missing.status.code(), Some(5));
    assert!(stderr(&missing).contains("no job count:9"));
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
