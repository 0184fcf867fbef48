//! What every command of the CLI shares, through the real binary: the documented exit codes,
//! `--json` shapes (`priority` among them), shell completions, and bad input refused with one
//! clear sentence.

use wasmgear_testkit::{
    ClosedPort, TestRedis, WorkerProcess, json, plugin_dir, stderr, stdout, wasmgear,
    wasmgear_with_stdin,
};

/// Every documented exit code, from the command that produces it.
#[test]
fn exit_codes_say_what_happened() {
    let redis = TestRedis::start();
    let plugins = plugin_dir(&["echo", "fail", "count"]);
    let url = redis.url();
    let _worker = WorkerProcess::builder(&url).plugins(plugins.path()).start();
    let env = [("WASMGEAR_REDIS_URL", url.as_str())];
    let run = |args: &[&str]| wasmgear(args, &env);
    let code = |args: &[&str]| run(args).status.code();

    assert_eq!(code(&["enqueue", "echo", "hi", "--wait"]), Some(0));
    assert_eq!(
        code(&["enqueue", "fail", "x", "--attempts", "1", "--wait"]),
        Some(1)
    );
    assert_eq!(
        code(&["enqueue", "echo", "x", "--priority", "urgent"]),
        Some(2)
    );
    assert_eq!(code(&["status", "echo:999"]), Some(5));
    let long = stdout(&run(&["enqueue", "count", "1000 20"]))
        .trim()
        .to_string();
    assert_eq!(code(&["wait", &long, "--timeout", "300ms"]), Some(4));
    assert_eq!(code(&["cancel", &long]), Some(0));
    assert_eq!(code(&["wait", &long]), Some(3));
    let closed_port = ClosedPort::new();
    let closed = format!("redis://127.0.0.1:{}", closed_port.port());
    assert_eq!(
        wasmgear(&["queues"], &[("WASMGEAR_REDIS_URL", closed.as_str())])
            .status
            .code(),
        Some(6)
    );
    let help = stdout(&run(&["--help"]));
    assert!(help.contains("Exit codes: 0 success"), "{help}");
}

/// `priority` moves a queued job ahead; `--json` on the commands that change things says
/// what changed, in a stable shape; completions come for the common shells, with the new
/// spellings (`--input-json`, `deploy rollback`, `--memory-limit`).
#[test]
fn priority_json_shapes_and_completions() {
    let redis = TestRedis::start();
    let url = redis.url();
    let env = [("WASMGEAR_REDIS_URL", url.as_str())];
    let run = |args: &[&str]| wasmgear(args, &env);
    let out = run(&["pause", "mail"]);
    assert_eq!(
        out.status.code(),
        Some(5),
        "a function no one knows is refused"
    );
    assert!(
        stderr(&out).contains("no function mail"),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        json(&run(&["pause", "mail", "--new", "--json"]))["paused"],
        true
    );
    let ids = json(&wasmgear_with_stdin(
        &["bulk", "--json"],
        &env,
        b"{\"function\": \"mail\", \"input\": \"a\", \"priority\": \"low\"}\n{\"function\": \"mail\", \"input\": \"b\"}\n",
    ));
    assert_eq!(ids, serde_json::json!(["mail:1", "mail:2"]));
    let queued = |run: &dyn Fn(&[&str]) -> std::process::Output| -> Vec<String> {
        json(&run(&[
            "jobs",
            "--function",
            "mail",
            "--state",
            "queued",
            "--json",
        ]))
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap().to_string())
        .collect()
    };
    assert_eq!(queued(&run), ["mail:2", "mail:1"]);
    let changed = json(&run(&["priority", "mail:1", "high", "--json"]));
    assert_eq!(
        changed,
        serde_json::json!({ "id": "mail:1", "changed": true, "state": "queued", "priority": 10 })
    );
    assert_eq!(queued(&run), ["mail:1", "mail:2"]);
    assert_eq!(
        json(&run(&["tag", "mail:1", "add", "vip", "--json"])),
        serde_json::json!({ "id": "mail:1", "tags": ["vip"] })
    );
    assert_eq!(
        json(&run(&["logs", "mail:1", "--json"])),
        serde_json::json!({ "id": "mail:1", "log": "" })
    );
    let cancelled = json(&run(&["cancel", "mail:2", "--json"]));
    assert_eq!(
        cancelled,
        serde_json::json!({ "id": "mail:2", "outcome": "cancelled", "state": "cancelled" })
    );
    let out = run(&["priority", "mail:2", "5"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("mail:2 is cancelled"),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        json(&run(&["retry", "mail:2", "--json"])),
        serde_json::json!({ "requeued": ["mail:2"] })
    );
    let status = json(&run(&["get", "mail:2", "--json"]));
    for key in [
        "id",
        "state",
        "priority",
        "attempt",
        "max_attempts",
        "created_ms",
        "history",
    ] {
        assert!(
            status.get(key).is_some(),
            "status --json lacks {key}: {status}"
        );
    }
    let plugins = plugin_dir(&["echo"]);
    let checked = json(&run(&[
        "plugins",
        plugins.path().to_str().unwrap(),
        "--json",
    ]));
    assert_eq!(
        checked["plugins"][0]["functions"],
        serde_json::json!(["echo"])
    );
    assert_eq!(checked["problems"], serde_json::json!([]));

    for (shell, marker) in [
        ("bash", "_wasmgear()"),
        ("zsh", "#compdef wasmgear"),
        ("fish", "complete -c wasmgear"),
    ] {
        let out = run(&["completions", shell]);
        assert_eq!(out.status.code(), Some(0));
        assert!(stdout(&out).contains(marker), "{shell}");
        assert!(stdout(&out).contains("enqueue"), "{shell}");
        for word in ["input-json", "rollback", "activate", "memory-limit"] {
            assert!(stdout(&out).contains(word), "{shell}: {word}");
        }
    }
}

/// Wrong input to each command: one clear sentence on stderr, the documented exit code,
/// nothing written.
#[test]
fn every_command_refuses_bad_input() {
    let redis = TestRedis::start();
    let url = redis.url();
    let env = [("WASMGEAR_REDIS_URL", url.as_str())];
    let big = tempfile::NamedTempFile::new().unwrap();
    big.as_file().set_len(17 * 1024 * 1024).unwrap();
    let big_path = big.path().to_str().unwrap().to_string();
    let cases: Vec<(Vec<&str>, i32, &str)> = vec![
        (
            vec!["enqueue", "echo", "--input-json", "{nope"],
            2,
            "--input-json is not valid JSON",
        ),
        (
            vec!["enqueue", "echo", "--json", "{nope"],
            2,
            "--json is not valid JSON",
        ),
        (
            vec!["enqueue", "echo", "--input-file", "/no/such/file"],
            2,
            "cannot read the input file",
        ),
        (
            vec!["enqueue", "echo", "--input-file", &big_path],
            2,
            "larger than the limit",
        ),
        (
            vec!["enqueue", "echo", "x", "--delay", "5 parsecs"],
            2,
            "invalid duration",
        ),
        (
            vec!["enqueue", "echo", "x", "--at", "tomorrow"],
            2,
            "invalid time",
        ),
        (
            vec!["worker", "--memory-limit", "lots"],
            2,
            "is not a size: \"lots\" (write e.g. 4096, 64KiB, 128MiB or 1GiB)",
        ),
        (
            vec!["worker", "--cache-max-size", "1 parsec"],
            2,
            "is not a size",
        ),
        (
            vec!["replay", "echo:4", "--memory-limit", "12 bananas"],
            2,
            "is not a size",
        ),
        (vec!["wait", "nope"], 2, "invalid job id"),
        (vec!["wait", "echo:4"], 5, "no job echo:4"),
        (
            vec!["wait", "echo:4", "--timeout", "soon"],
            2,
            "invalid duration",
        ),
        (vec!["get", "echo:4"], 5, "no job echo:4"),
        (vec!["cancel", "echo:4"], 5, "no job echo:4"),
        (vec!["logs", "echo:4"], 5, "no job echo:4"),
        (vec!["priority", "echo:4", "high"], 5, "no job echo:4"),
        (
            vec!["priority", "echo:4", "highest"],
            2,
            "priority \"highest\"",
        ),
        (vec!["priority", "echo:4", "5000"], 2, "out of range"),
        (vec!["events", "bad name!"], 2, "invalid function name"),
        (vec!["completions", "tcsh"], 2, "invalid value"),
        (vec!["stats", "bad name!"], 2, "invalid function name"),
        (vec!["queues", "--bogus"], 2, "unexpected argument"),
        (vec!["bulk", "/no/such/jobs.jsonl"], 2, "cannot read"),
        (vec!["stats", "nosuch"], 5, "no function nosuch"),
        (vec!["failed", "nosuch"], 5, "no function nosuch"),
        (
            vec!["jobs", "--function", "nosuch", "--state", "queued"],
            5,
            "no function nosuch",
        ),
        (
            vec!["retry", "nosuch", "--group", "trap"],
            5,
            "no function nosuch",
        ),
        (vec!["events", "nosuch"], 5, "no function nosuch"),
        (
            vec!["config", "nosuch", "--concurrency", "2"],
            5,
            "no function nosuch",
        ),
        (vec!["resume", "nosuch"], 5, "no function nosuch"),
    ];
    for (args, code, says) in &cases {
        let out = wasmgear(args, &env);
        assert_eq!(out.status.code(), Some(*code), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(says), "{args:?}: {}", stderr(&out));
        assert!(stdout(&out).is_empty(), "{args:?} printed {}", stdout(&out));
    }
    assert_eq!(stdout(&wasmgear(&["queues", "--json"], &env)).trim(), "[]");
}

/// A command whose reader goes away before it prints (`wasmgear status ID | head -0`) ends
/// quietly, as other command-line tools do: by SIGPIPE, with no panic on its standard error.
#[test]
fn a_command_whose_reader_is_gone_ends_without_a_panic() {
    use std::os::unix::process::ExitStatusExt;

    let redis = TestRedis::start();
    let url = redis.url();
    let env = [("WASMGEAR_REDIS_URL", url.as_str())];
    let out = wasmgear(&["enqueue", "nobody", "x"], &env);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let id = stdout(&out).trim().to_string();
    // The pipe's reading end is closed before the command runs: its first line fails.
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let finished = wasmgear_testkit::cli::command(&["status", &id], &env)
        .stdout(writer)
        .stderr(std::process::Stdio::piped())
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&finished.stderr);
    assert!(!said.contains("panicked"), "{said}");
    assert_eq!(
        finished.status.signal(),
        Some(libc::SIGPIPE),
        "{:?}: {said}",
        finished.status
    );
}
