//! Jobs through the real `wasmgear` binary against a real worker process: `enqueue` (input
//! from an argument, stdin, a file or JSON; `--wait` with its progress; `--at`), `status`,
//! `wait`, `events`, `cancel`, `bulk` and `logs`, and the clear errors of bad input or of no
//! Redis.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use wasmgear_testkit::process::ProcessGroup;
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

/// `wait` follows several jobs: plain progress lines when stderr is not a terminal, one
/// result line each, or their statuses as JSON; the exit code is the worst outcome.
#[test]
fn wait_follows_several_jobs() {
    let redis = TestRedis::start();
    let plugins = plugin_dir(&["count", "fail"]);
    let url = redis.url();
    let _worker = WorkerProcess::builder(&url).plugins(plugins.path()).start();
    let env = [("WASMGEAR_REDIS_URL", url.as_str())];
    let run = |args: &[&str]| wasmgear(args, &env);
    let a = stdout(&run(&["enqueue", "count", "3 20"]))
        .trim()
        .to_string();
    let b = stdout(&run(&["enqueue", "count", "2 20"]))
        .trim()
        .to_string();
    let out = run(&["wait", &a, &b]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!("{a} progress 3/3 step 3 of 3")),
        "{}",
        stderr(&out)
    );
    assert!(
        stdout(&out).contains(&format!("{a} succeeded")),
        "{}",
        stdout(&out)
    );
    assert!(
        stdout(&out).contains(&format!("{b} succeeded")),
        "{}",
        stdout(&out)
    );

    let c = stdout(&run(&["enqueue", "fail", "boom", "--attempts", "1"]))
        .trim()
        .to_string();
    let out = run(&["wait", &a, &c, "--json"]);
    assert_eq!(out.status.code(), Some(1));
    let statuses: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(statuses[0]["id"], a.as_str());
    assert_eq!(statuses[0]["state"], "succeeded");
    assert_eq!(statuses[0]["output"], "counted to 3");
    assert_eq!(statuses[0]["output_base64"], "Y291bnRlZCB0byAz");
    assert_eq!(statuses[1]["state"], "failed");
    assert_eq!(statuses[1]["error"]["class"], "guest-error");
    // A job that does not exist is reported at once, not after a timeout.
    let out = run(&["wait", &a, "count:77"]);
    assert_eq!(out.status.code(), Some(5));
    assert!(stderr(&out).contains("no job count:77"), "{}", stderr(&out));
}

/// `events` follows the stream live, one function's or every function's.
#[test]
fn events_follow_the_stream() {
    let redis = TestRedis::start();
    let plugins = plugin_dir(&["echo", "count"]);
    let url = redis.url();
    let _worker = WorkerProcess::builder(&url).plugins(plugins.path()).start();
    for (args, json_lines, job) in [
        (vec!["events", "echo", "--json"], true, ["echo", "ping"]),
        (vec!["events"], false, ["count", "3 10"]),
    ] {
        // Killed when dropped, also when an assertion below fails.
        let mut events = ProcessGroup::spawn(
            Command::new(wasmgear_testkit::bin())
                .args(&args)
                .env("WASMGEAR_REDIS_URL", &url)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped()),
        )
        .unwrap();
        let child = events.child();
        let mut ready = BufReader::new(child.stderr.take().unwrap());
        let mut line = String::new();
        // `events` says it follows, on purpose, once it has subscribed: its readiness.
        ready.read_line(&mut line).unwrap();
        assert!(line.contains("following the events"), "{line}");
        let out = wasmgear(
            &["enqueue", job[0], job[1], "--wait"],
            &[("WASMGEAR_REDIS_URL", &url)],
        );
        assert_eq!(out.status.code(), Some(0));
        let (lines_tx, lines_rx) = std::sync::mpsc::channel();
        let stdout = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if lines_tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut seen = Vec::new();
        while !seen.iter().any(|l: &String| l.contains("finish")) {
            let line = lines_rx
                .recv_timeout(Duration::from_secs(10))
                .unwrap_or_else(|_| panic!("no finish event; saw {seen:?}"));
            seen.push(line);
        }
        drop(events);
        if json_lines {
            let events: Vec<serde_json::Value> = seen
                .iter()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect();
            let kinds: Vec<&str> = events
                .iter()
                .map(|e| e["event"].as_str().unwrap())
                .collect();
            assert_eq!(kinds, ["create", "start", "finish"], "{seen:?}");
            assert_eq!(events[2]["state"], "succeeded");
        } else {
            assert!(seen[0].starts_with("create"), "{seen:?}");
            assert!(seen.last().unwrap().contains("succeeded"), "{seen:?}");
            // Progress shows the counts the job reported (sent as decimal strings).
            assert!(
                seen.iter()
                    .any(|l| l.starts_with("progress") && l.contains(" 3/3")),
                "{seen:?}"
            );
        }
    }
}
