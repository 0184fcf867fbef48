//! The operator CLI through the real binary: exit codes, `wait`, `events`, `priority`,
//! `--json` shapes, completions, Redis URLs (password, ACL user, TLS) and what happens when
//! Redis cannot be reached or is not Redis.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

use wasmgear_testkit::process::ProcessGroup;
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

/// Passwords (default user and ACL users) work, and never show in output.
#[test]
fn passwords_work_and_stay_secret() {
    let redis = TestRedis::start_with(&[
        "--requirepass",
        "s3cret-pass",
        "--user",
        "app",
        "on",
        ">app-pass",
        "~*",
        "&*",
        "+@all",
    ]);
    let port = redis.port();
    let url = |userinfo: &str| format!("redis://{userinfo}127.0.0.1:{port}");
    let queues = |url: &str| wasmgear(&["queues", "--json"], &[("WASMGEAR_REDIS_URL", url)]);

    assert_eq!(queues(&url(":s3cret-pass@")).status.code(), Some(0));
    assert_eq!(queues(&url("app:app-pass@")).status.code(), Some(0));
    let out = queues(&url(""));
    assert_eq!(out.status.code(), Some(6));
    assert!(
        stderr(&out).contains("wants a password"),
        "{}",
        stderr(&out)
    );
    for wrong in [":nope-nope@", "app:s3cret-pass@", "ghost:app-pass@"] {
        let out = queues(&url(wrong));
        assert_eq!(out.status.code(), Some(6), "{wrong}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("refused"),
            "{wrong}: {}",
            stderr(&out)
        );
        assert!(
            stderr(&out).contains(":***@") || !wrong.contains(':'),
            "{}",
            stderr(&out)
        );
    }
    // Neither the messages nor the help text show a password.
    let secret = url("app:app-pass@");
    let missing = wasmgear(
        &["status", "echo:9"],
        &[("WASMGEAR_REDIS_URL", secret.as_str())],
    );
    let help = wasmgear(
        &["status", "--help"],
        &[("WASMGEAR_REDIS_URL", secret.as_str())],
    );
    let closed_port = ClosedPort::new();
    let closed = format!("redis://app:app-pass@127.0.0.1:{}", closed_port.port());
    let unreachable = wasmgear(&["queues"], &[("WASMGEAR_REDIS_URL", closed.as_str())]);
    assert_eq!(unreachable.status.code(), Some(6));
    assert!(
        stderr(&unreachable).contains("app:***@"),
        "{}",
        stderr(&unreachable)
    );
    for out in [&missing, &help, &unreachable] {
        let all = format!("{}{}", stdout(out), stderr(out));
        assert!(!all.contains("app-pass"), "password shown: {all}");
    }
}

/// `rediss://` speaks TLS, verifying the server against the CA in SSL_CERT_FILE.
#[test]
fn tls_urls_work() {
    let certs = tempfile::tempdir().unwrap();
    let dir = certs.path();
    let openssl = |args: &[&str]| {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "2",
        "-subj",
        "/CN=test-ca",
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
    ]);
    openssl(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=localhost",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
    ]);
    std::fs::write(
        dir.join("ext.cnf"),
        "subjectAltName=DNS:localhost,IP:127.0.0.1\n",
    )
    .unwrap();
    openssl(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        "ext.cnf",
        "-out",
        "server.crt",
    ]);
    let path = |name: &str| dir.join(name).to_str().unwrap().to_string();
    let (cert, key, ca) = (path("server.crt"), path("server.key"), path("ca.crt"));
    let (redis, tls_port) = TestRedis::start_with_port(|tls_port| {
        let tls_port = tls_port.to_string();
        [
            "--tls-port",
            &tls_port,
            "--tls-cert-file",
            &cert,
            "--tls-key-file",
            &key,
            "--tls-ca-cert-file",
            &ca,
            "--tls-auth-clients",
            "no",
        ]
        .map(String::from)
        .to_vec()
    });
    let url = format!("rediss://localhost:{tls_port}");
    let env = [
        ("WASMGEAR_REDIS_URL", url.as_str()),
        ("SSL_CERT_FILE", ca.as_str()),
    ];
    let out = wasmgear(&["enqueue", "echo", "over tls"], &env);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "echo:1");
    // The same job, seen over the plain port: it really went to this server.
    let plain = redis.url();
    let status = json(&wasmgear(
        &["status", "echo:1", "--json"],
        &[("WASMGEAR_REDIS_URL", plain.as_str())],
    ));
    assert_eq!(status["state"], "queued");
    // Without the CA the server's certificate is not trusted: a clear refusal.
    let out = wasmgear(&["queues"], &[("WASMGEAR_REDIS_URL", url.as_str())]);
    assert_eq!(out.status.code(), Some(6), "{}", stderr(&out));
    drop(redis);
}

/// Something that is not Redis, or nothing at all, behind the URL: exit 6, one sentence.
#[test]
fn a_server_that_is_not_redis_is_named() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming().map_while(Result::ok) {
            let mut stream = stream;
            let _ = stream.write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n");
        }
    });
    let url = format!("redis://127.0.0.1:{port}");
    for args in [
        &["queues"][..],
        &["status", "echo:1"],
        &["enqueue", "echo", "x"],
    ] {
        let out = wasmgear(args, &[("WASMGEAR_REDIS_URL", url.as_str())]);
        assert_eq!(out.status.code(), Some(6), "{args:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains(&format!("cannot reach Redis at {url}")),
            "{}",
            stderr(&out)
        );
        assert_eq!(stderr(&out).lines().count(), 1, "{}", stderr(&out));
    }
    let out = wasmgear(&["queues"], &[("WASMGEAR_REDIS_URL", "http://example")]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("invalid Redis URL"),
        "{}",
        stderr(&out)
    );
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

/// The URL of any node of a Redis Cluster works for every command.
#[test]
fn a_cluster_url_works() {
    let cluster = wasmgear_testkit::TestCluster::start();
    let url = cluster.url();
    let env = [("WASMGEAR_REDIS_URL", url.as_str())];
    let run = |args: &[&str]| wasmgear(args, &env);
    for function in ["alpha", "beta", "gamma"] {
        assert_eq!(
            stdout(&run(&["enqueue", function, "x", "--tag", "t"])).trim(),
            format!("{function}:1")
        );
    }
    let queues = json(&run(&["queues", "--json"]));
    let names: Vec<&str> = queues
        .as_array()
        .unwrap()
        .iter()
        .map(|q| q["function"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["alpha", "beta", "gamma"]);
    assert!(queues.as_array().unwrap().iter().all(|q| q["queued"] == 1));
    assert_eq!(
        json(&run(&["jobs", "--tag", "t", "--json"]))
            .as_array()
            .unwrap()
            .len(),
        3
    );
    assert_eq!(
        json(&run(&["cancel", "beta:1", "--json"]))["outcome"],
        "cancelled"
    );
}
