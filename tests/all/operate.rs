//! The operator commands through the real `wasmgear` binary against a real worker process:
//! uniq, tags, dependencies, failure groups and retry, stats, queues, config, pause and resume.

use std::time::Duration;

use wasmgear_testkit::{
    TestRedis, WorkerProcess, eventually_sync, json, plugin_dir, stderr, stdout, wasmgear,
};

#[test]
fn operators_see_and_steer_the_queue() {
    let redis = TestRedis::start();
    let plugins = plugin_dir(&["echo", "fail"]);
    let url = redis.url();
    let env = [("WASMGEAR_REDIS_URL", url.as_str())];
    let _worker = WorkerProcess::builder(&url).plugins(plugins.path()).start();
    let run = |args: &[&str]| wasmgear(args, &env);

    // Uniq: a delayed job holds the key; the second enqueue prints the same id.
    let first = run(&[
        "enqueue", "echo", "one", "--uniq", "report-7", "--delay", "1h", "--tag", "nightly",
    ]);
    let second = run(&["enqueue", "echo", "two", "--uniq", "report-7"]);
    assert_eq!(stdout(&first), stdout(&second));
    assert!(stderr(&second).contains("uniq key"), "{}", stderr(&second));
    let held = stdout(&first).trim().to_string();

    // Dependencies and tags: the dependent waits on the delayed job.
    let dependent = run(&[
        "enqueue", "echo", "after", "--after", &held, "--tag", "nightly",
    ]);
    let dependent = stdout(&dependent).trim().to_string();
    let tagged = json(&run(&["jobs", "--tag", "nightly", "--json"]));
    let states: Vec<(&str, &str)> = tagged
        .as_array()
        .unwrap()
        .iter()
        .map(|j| (j["id"].as_str().unwrap(), j["state"].as_str().unwrap()))
        .collect();
    assert_eq!(
        states,
        vec![
            (held.as_str(), "scheduled"),
            (dependent.as_str(), "waiting")
        ]
    );
    let queues = json(&run(&["queues", "--json"]));
    let echo = queues
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["function"] == "echo")
        .unwrap();
    assert_eq!(
        (echo["scheduled"].as_u64(), echo["waiting"].as_u64()),
        (Some(1), Some(1))
    );
    assert_eq!(echo["workers"].as_u64(), Some(1));
    // Cancelling the dependency cancels the dependent, naming it.
    assert_eq!(run(&["cancel", &held]).status.code(), Some(0));
    let status = json(&run(&["status", &dependent, "--json"]));
    assert_eq!(status["state"], "cancelled");
    assert!(status["error"]["message"].as_str().unwrap().contains(&held));

    // Failure groups and retry.
    for i in 0..3 {
        let out = run(&[
            "enqueue",
            "fail",
            &format!("bad {i}"),
            "--max-attempts",
            "1",
            "--wait",
        ]);
        assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    }
    let groups = json(&run(&["failed", "--json"]));
    assert_eq!(
        groups,
        serde_json::json!([{ "function": "fail", "group": "guest-error", "count": 3 }])
    );
    let listed = run(&["failed", "fail", "--group", "guest-error"]);
    assert!(
        stdout(&listed).contains("3 failed jobs"),
        "{}",
        stdout(&listed)
    );
    assert!(
        stdout(&listed).contains("failed on purpose: bad 1"),
        "{}",
        stdout(&listed)
    );
    let retried = run(&["retry", "fail", "--group", "guest-error"]);
    assert!(
        stdout(&retried).contains("3 jobs of fail"),
        "{}",
        stdout(&retried)
    );
    eventually_sync(
        Duration::from_secs(30),
        "the retried jobs to fail again",
        || {
            let stats = json(&run(&["stats", "fail", "--json"]));
            stats["failed"].as_u64() == Some(6)
        },
    );
    let stats = json(&run(&["stats", "fail", "--json"]));
    assert_eq!(stats["run"]["count"].as_u64(), Some(6));
    assert!(stats["wait"]["histogram"].as_array().is_some());

    // Pause: enqueueing goes on, nothing starts; resume: it runs.
    assert_eq!(run(&["pause", "echo"]).status.code(), Some(0));
    let parked = stdout(&run(&["enqueue", "echo", "parked"]))
        .trim()
        .to_string();
    // Not started: an unpaused job would be handed to the idle worker at once, or leased
    // when the worker hears of it, or at its next poll within a second
    // (DEFAULT_IDLE_POLL); 1.5 s bounds all three.
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(
        json(&run(&["status", &parked, "--json"]))["state"],
        "queued"
    );
    assert_eq!(json(&run(&["queues", "--json"]))[0]["paused"], true);
    assert_eq!(run(&["resume", "echo"]).status.code(), Some(0));
    eventually_sync(Duration::from_secs(20), "the parked job to run", || {
        json(&run(&["status", &parked, "--json"]))["state"] == "succeeded"
    });

    // Settings.
    let config = json(&run(&[
        "config",
        "echo",
        "--concurrency",
        "2",
        "--rate",
        "50/1s",
        "--keep",
        "1000",
        "--json",
    ]));
    assert_eq!(
        config,
        serde_json::json!({ "paused": false, "concurrency": 2, "rate_limit": "50/1000ms", "keep_finished": 1000,
                            "group_concurrency": null, "group_rate_limit": null, "min_replicas": null,
                            "encrypt": false })
    );
    let out = run(&["enqueue", "echo", "still runs", "--wait"]);
    assert_eq!(stdout(&out), "still runs");
    let config = json(&run(&[
        "config",
        "echo",
        "--concurrency",
        "none",
        "--rate",
        "none",
        "--keep",
        "default",
        "--json",
    ]));
    assert_eq!(config["concurrency"], serde_json::Value::Null);
}

/// Wrong input to the operator commands: one clear sentence, non-zero exit, nothing written.
#[test]
fn operator_commands_refuse_bad_input() {
    let redis = TestRedis::start();
    let url = redis.url();
    let env = [("WASMGEAR_REDIS_URL", url.as_str())];
    let run = |args: &[&str]| wasmgear(args, &env);
    let cases: &[(&[&str], &str)] = &[
        (&["enqueue", "echo", "x", "--after", "nope"], "nope"),
        (
            &["enqueue", "echo", "x", "--after", "echo:12"],
            "echo:12 does not exist",
        ),
        (
            &["enqueue", "echo", "x", "--after", "other:3"],
            "other:3 does not exist",
        ),
        (&["enqueue", "echo", "x", "--tag", ""], "tag"),
        (
            &["enqueue", "echo", "x", "--uniq", "a\u{7}b"],
            "control character",
        ),
        (&["retry", "echo:99"], "no job echo:99"),
        (&["tag", "echo:99", "add", "x"], "no job echo:99"),
        (&["stats", "echo", "--date", "2026-02-31x"], "YYYY-MM-DD"),
        (
            &["jobs", "--function", "echo", "--state", "sleeping"],
            "unknown state",
        ),
        (&["config", "echo", "--rate", "fast"], "N/INTERVAL"),
        (&["config", "echo", "--concurrency", "0"], "at least 1"),
        (&["config", "echo", "--keep=-3"], "at least 1"),
        (&["failed", "--group", "trap"], "FUNCTION"),
        (&["pause", "bad name!"], "function"),
    ];
    for (args, expected) in cases {
        let out = run(args);
        assert_ne!(out.status.code(), Some(0), "{args:?} succeeded");
        assert!(
            stderr(&out).contains(expected),
            "{args:?}: {}",
            stderr(&out)
        );
        assert!(stdout(&out).is_empty(), "{args:?} printed {}", stdout(&out));
    }
    // Nothing was written: no queue exists.
    let queues = run(&["queues", "--json"]);
    assert_eq!(stdout(&queues).trim(), "[]");
}
