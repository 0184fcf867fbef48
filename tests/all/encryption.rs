//! Encrypted job data: with a key file and `config F --encrypt`, a job's input is sealed by
//! the producer (bound to its id) and its output, error and log by the worker, so that no
//! plaintext is in Redis while the jobs succeed and fail as usual; a producer without the
//! key is refused; a reader without it is told so; a ciphertext moved to another job does
//! not open; a rotated key file still opens what the old key sealed.

use std::path::{Path, PathBuf};
use std::time::Duration;

use wasmgear_client::{Client, EnqueueOptions, FunctionName};
use wasmgear_testkit::{TestRedis, WorkerProcess, plugin_dir, stderr, stdout, wasmgear};

/// Runs the CLI against `redis`, with the key file if given.
fn cli(redis: &TestRedis, keys: Option<&Path>, args: &[&str]) -> std::process::Output {
    let url = redis.url();
    let mut env = vec![("WASMGEAR_REDIS_URL", url.clone())];
    if let Some(keys) = keys {
        env.push(("WASMGEAR_ENCRYPTION_KEY_FILE", keys.display().to_string()));
    }
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    wasmgear(args, &env)
}

fn ok(out: std::process::Output) -> String {
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    stdout(&out)
}

/// Every key of the Redis with its contents (as the tests' canonical dump has them).
async fn dump(redis: &TestRedis) -> Vec<Vec<u8>> {
    crate::support::library::dump_keys(redis.raw().await, "*")
        .await
        .into_iter()
        .flat_map(|(key, contents)| [key.into_bytes(), contents])
        .collect()
}

fn contains(values: &[Vec<u8>], needle: &str) -> bool {
    values
        .iter()
        .any(|v| v.windows(needle.len()).any(|w| w == needle.as_bytes()))
}

/// A Redis, a directory with a key file `keys` of one key `k1`, and a worker with that key
/// file serving `plugins`.
fn start(plugins: &tempfile::TempDir) -> (TestRedis, tempfile::TempDir, PathBuf, WorkerProcess) {
    let redis = TestRedis::start();
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys");
    ok(wasmgear(
        &["keys", "new", keys.to_str().unwrap(), "k1"],
        &[],
    ));
    let worker = WorkerProcess::builder(&redis.url())
        .plugins(plugins.path())
        .env("WASMGEAR_ENCRYPTION_KEY_FILE", keys.to_str().unwrap())
        .start();
    (redis, dir, keys, worker)
}

/// A client with the keys of key file `keys`, as it is now.
async fn keyed_client(redis: &TestRedis, keys: &Path) -> Client {
    let ring =
        wasmgear_proto::crypto::KeyRing::parse("keys", &std::fs::read_to_string(keys).unwrap())
            .unwrap();
    Client::connect(&redis.url())
        .await
        .unwrap()
        .with_keys(std::sync::Arc::new(ring), false)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_plaintext_in_redis_while_encrypted_jobs_run() {
    let plugins = plugin_dir(&["echo", "fail"]);
    let (redis, dir, keys, worker) = start(&plugins);
    ok(cli(&redis, None, &["config", "echo", "--encrypt", "--new"]));
    ok(cli(&redis, None, &["config", "fail", "--encrypt", "--new"]));

    // Without the key, a plain input is refused and nothing is written.
    let refused = cli(&redis, None, &["enqueue", "echo", "TOPSECRET-REFUSED"]);
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    assert!(
        stderr(&refused).contains("stores only encrypted input"),
        "{}",
        stderr(&refused)
    );

    // With it: sealed in, sealed out, opened by the reader.
    let out = ok(cli(
        &redis,
        Some(&keys),
        &["enqueue", "echo", "TOPSECRET-IN", "--wait"],
    ));
    assert!(out.contains("TOPSECRET-IN"), "{out}");
    let failed = cli(
        &redis,
        Some(&keys),
        &[
            "enqueue",
            "fail",
            "TOPSECRET-ERR",
            "--max-attempts",
            "1",
            "--wait",
        ],
    );
    assert_ne!(failed.status.code(), Some(0));
    assert!(
        stderr(&failed).contains("failed on purpose: TOPSECRET-ERR"),
        "{}",
        stderr(&failed)
    );
    // The HTTP API and the dashboard: a server with the key file seals what it is given and
    // shows what it reads; one without says what is sealed, never shows the envelope.
    through_serve(&redis, &keys).await;

    let values = dump(&redis).await;
    for secret in [
        "TOPSECRET-IN",
        "TOPSECRET-ERR",
        "TOPSECRET-REFUSED",
        "TOPSECRET-API",
        "failing on purpose",
    ] {
        assert!(!contains(&values, secret), "{secret} is in Redis in clear");
    }
    assert!(contains(&values, "\0wgenc1"), "no envelope in Redis at all");

    // A reader without the key is told so; with it, it reads.
    let blind = ok(cli(&redis, None, &["status", "echo:1"]));
    assert!(blind.contains("encrypted (key k1); no key here"), "{blind}");
    assert!(!blind.contains("TOPSECRET"), "{blind}");
    let seen = ok(cli(&redis, Some(&keys), &["status", "echo:1"]));
    assert!(seen.contains("TOPSECRET-IN"), "{seen}");
    let log = ok(cli(&redis, Some(&keys), &["logs", "fail:1"]));
    assert!(log.contains("failing on purpose"), "{log}");

    // A ciphertext moved to another job does not open.
    let client = keyed_client(&redis, &keys).await;
    let echo = FunctionName::new("echo").unwrap();
    let later = client
        .enqueue(
            &echo,
            b"TOPSECRET-LATER",
            &EnqueueOptions {
                delay: Duration::from_secs(3600),
                ..EnqueueOptions::default()
            },
        )
        .await
        .unwrap();
    let mut raw = redis.raw().await;
    let first: Vec<u8> = redis::cmd("HGET")
        .arg("wg:{echo}:input")
        .arg(1)
        .query_async(&mut raw)
        .await
        .unwrap();
    let _: i64 = redis::cmd("HSET")
        .arg("wg:{echo}:input")
        .arg(later.seq)
        .arg(first)
        .query_async(&mut raw)
        .await
        .unwrap();
    let moved = client.input(&later).await.unwrap_err().to_string();
    assert!(moved.contains("belongs to another job"), "{moved}");

    // A new first key: new data is sealed with it, old data still opens. The worker,
    // started with the old file, cannot open the new job: it fails `undecryptable`,
    // naming the key.
    ok(wasmgear(
        &["keys", "new", keys.to_str().unwrap(), "k2"],
        &[],
    ));
    let unopened = cli(
        &redis,
        Some(&keys),
        &[
            "enqueue",
            "echo",
            "TOPSECRET-NEW",
            "--max-attempts",
            "1",
            "--wait",
        ],
    );
    assert_ne!(unopened.status.code(), Some(0));
    let said = stderr(&unopened);
    assert!(
        said.contains("undecryptable") && said.contains("\"k2\""),
        "{said}"
    );
    let seen = ok(cli(&redis, Some(&keys), &["status", "echo:1"]));
    assert!(seen.contains("TOPSECRET-IN"), "{seen}");
    assert!(!contains(&dump(&redis).await, "TOPSECRET-NEW"));

    // Rotation seals everything again with k2, but the moved ciphertext, which it names
    // (and leaves); put right, a second run finds it alone left, a third finds nothing.
    let rotated = cli(&redis, Some(&keys), &["keys", "rotate", "--batch", "2"]);
    assert_eq!(rotated.status.code(), Some(1), "{}", stderr(&rotated));
    let said = stderr(&rotated);
    assert!(
        said.contains(&format!("does not open: echo:{}", later.seq))
            && said.contains("belongs to another job"),
        "{said}"
    );
    assert!(stdout(&rotated).contains("fail: "), "{}", stdout(&rotated));
    let proper = client
        .keys()
        .unwrap()
        .seal(
            &later.to_string(),
            wasmgear_proto::crypto::Field::Input,
            b"x",
        )
        .unwrap();
    let _: i64 = redis::cmd("HSET")
        .arg("wg:{echo}:input")
        .arg(later.seq)
        .arg(proper)
        .query_async(&mut raw)
        .await
        .unwrap();
    let again = ok(cli(&redis, Some(&keys), &["keys", "rotate"]));
    assert!(
        again.contains("echo: 1 sealed again with key k2"),
        "{again}"
    );
    let last = ok(cli(&redis, Some(&keys), &["keys", "rotate"]));
    assert!(
        last.contains("0 values sealed again; nothing sealed with an older key is left"),
        "{last}"
    );
    // Only k2 is needed now: the old jobs' input, output, error and log open with it.
    let only_new = dir.path().join("only-k2");
    let text = std::fs::read_to_string(&keys).unwrap();
    std::fs::write(&only_new, text.lines().next().unwrap()).unwrap();
    let seen = ok(cli(
        &redis,
        Some(&only_new),
        &["status", "echo:1", "--json"],
    ));
    assert!(seen.contains("TOPSECRET-IN"), "{seen}");
    let failure = ok(cli(&redis, Some(&only_new), &["status", "fail:1"]));
    assert!(
        failure.contains("failed on purpose: TOPSECRET-ERR"),
        "{failure}"
    );
    let log = ok(cli(&redis, Some(&only_new), &["logs", "fail:1"]));
    assert!(log.contains("failing on purpose"), "{log}");
    drop(worker);
}

/// `serve` with and without the key file, once `echo:1` succeeded and `fail:1` failed
/// (both sealed).
async fn through_serve(redis: &TestRedis, keys: &Path) {
    use crate::dashboard::{send, sign_in};
    use crate::http_api::{Server, TOKEN, get, post};
    let key_file = keys.to_str().unwrap();
    let keyed = Server::start(
        redis,
        &[],
        &[
            ("WASMGEAR_API_TOKEN", TOKEN),
            ("WASMGEAR_ENCRYPTION_KEY_FILE", key_file),
        ],
    );
    let created = post(
        &keyed,
        "/v1/functions/echo/jobs",
        serde_json::json!({ "input": "TOPSECRET-API" }),
    )
    .await;
    assert_eq!(created.status, 201, "{}", created.json());
    let id = created.json()["id"].as_str().unwrap().to_string();
    let done = get(&keyed, &format!("/v1/jobs/{id}/wait?timeout_ms=30000"))
        .await
        .json();
    assert_eq!(done["output"], "TOPSECRET-API", "{done}");
    let seen = get(&keyed, "/v1/jobs/fail:1").await.json();
    assert!(
        seen["error"]["message"]
            .as_str()
            .unwrap()
            .contains("TOPSECRET-ERR"),
        "{seen}"
    );
    let cookie = sign_in(&keyed).await;
    let page = send(&keyed, "GET", "/ui/jobs/echo:1", &[("cookie", &cookie)], "").await;
    assert!(page.body.contains("TOPSECRET-IN"), "{}", page.body);

    let blind = Server::with_token(redis);
    let job = get(&blind, "/v1/jobs/echo:1").await.json();
    assert_eq!(job["output_encrypted"], "k1", "{job}");
    assert!(
        job.get("output").is_none() && job.get("output_base64").is_none(),
        "{job}"
    );
    let failed = get(&blind, "/v1/jobs/fail:1").await.json();
    let message = failed["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("encrypted (key \"k1\"); no key here"),
        "{failed}"
    );
    let cookie = sign_in(&blind).await;
    let function = send(
        &blind,
        "GET",
        "/ui/functions/echo",
        &[("cookie", &cookie)],
        "",
    )
    .await;
    assert!(
        function.body.contains("only encrypted input"),
        "{}",
        function.body
    );
    for page in ["/ui/jobs/echo:1", "/ui/jobs/fail:1"] {
        let body = send(&blind, "GET", page, &[("cookie", &cookie)], "")
            .await
            .body;
        assert!(
            body.contains("no key here") && !body.contains("wgenc1"),
            "{page}: {body}"
        );
        assert!(!body.contains("TOPSECRET"), "{page}: {body}");
    }
}

/// Every other producer seals too, and every reader of a sealed job opens it: a flow's jobs
/// and the fan-in job reading its dependencies' sealed outputs and errors, the children a
/// job enqueues (the worker learns from the refusal that their function takes only sealed
/// input), and a schedule, whose input is kept sealed (bound to its name) and sealed again
/// for each tick's job; a batch's callback to an encrypted function, sealed by the worker
/// that makes it due. A reader without the key is told so, never shown the envelope.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flows_dependencies_children_and_schedules_stay_sealed() {
    let plugins = plugin_dir(&["echo", "fail", "join", "split", "reverse"]);
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../plugins/split/split.toml"),
        plugins.path().join("split.toml"),
    )
    .unwrap();
    let (redis, dir, keys, worker) = start(&plugins);
    for function in ["echo", "fail", "join", "split", "reverse"] {
        ok(cli(
            &redis,
            None,
            &["config", function, "--encrypt", "--new"],
        ));
    }

    // A flow: join reads its dependencies' outputs (opened whole, then in pieces) and the
    // error of the one that failed.
    let flow = dir.path().join("flow.json");
    std::fs::write(
        &flow,
        serde_json::json!({ "name": "sealed", "jobs": {
            "a": { "function": "echo", "input": "SECRET-A" },
            "b": { "function": "echo", "input": "SECRET-B" },
            "f": { "function": "fail", "input": "SECRET-F", "attempts": 1 },
            "d": { "function": "join", "after": ["a", "b", { "job": "f", "on_failure": "ignore" }] },
        }})
        .to_string(),
    )
    .unwrap();
    let done = ok(cli(
        &redis,
        Some(&keys),
        &["flow", "submit", flow.to_str().unwrap(), "--wait"],
    ));
    assert!(
        done.contains("SECRET-A\nSECRET-B\nerror: fail:1 failed"),
        "{done}"
    );
    assert!(done.contains("failed on purpose: SECRET-F"), "{done}");
    let seen = ok(cli(&redis, Some(&keys), &["flow", "status", "1", "--json"]));
    assert!(seen.contains("failed on purpose: SECRET-F"), "{seen}");
    let blind = ok(cli(&redis, None, &["flow", "status", "1", "--json"]));
    assert!(
        blind.contains("no key here") && !blind.contains("wgenc1:"),
        "{blind}"
    );

    // Children: split's worker seals each child's input, opens each child's output.
    let split = ok(cli(
        &redis,
        Some(&keys),
        &["enqueue", "split", "SECRET-C1\nSECRET-C2", "--wait"],
    ));
    assert!(split.contains("1C-TERCES\n2C-TERCES"), "{split}");

    // A schedule: kept sealed, fired sealed, read opened.
    ok(cli(
        &redis,
        Some(&keys),
        &[
            "schedule",
            "add",
            "nightly",
            "--function",
            "echo",
            "--every",
            "1s",
            "--input",
            "SECRET-S",
        ],
    ));
    let listed = ok(cli(&redis, Some(&keys), &["schedule", "list", "--json"]));
    assert!(listed.contains("SECRET-S"), "{listed}");
    let blind = ok(cli(&redis, None, &["schedule", "list", "--json"]));
    assert!(
        blind.contains("no key here") && !blind.contains("SECRET-S"),
        "{blind}"
    );
    let client = keyed_client(&redis, &keys).await;
    let ticked = wasmgear_testkit::eventually(Duration::from_secs(30), "a tick's job", || async {
        for seq in 1..50 {
            let id = wasmgear_client::JobId {
                function: FunctionName::new("echo").unwrap(),
                seq,
            };
            let Ok(status) = client.status(&id).await else {
                return None;
            };
            if status.record.schedule.is_some()
                && status.record.state == wasmgear_client::JobState::Succeeded
            {
                return Some(status);
            }
        }
        None
    })
    .await;
    assert_eq!(ticked.output.as_deref(), Some(&b"SECRET-S"[..]));

    // A batch: its job sealed by the client, its callback (due when the worker ends the
    // job) refused plain by the encrypted function and sent again sealed by the worker.
    let echo = FunctionName::new("echo").unwrap();
    let spec = wasmgear_client::BatchSpec {
        name: "sealed".into(),
        on_success: Some(wasmgear_client::Callback {
            function: echo.clone(),
            data: None,
        }),
        on_complete: None,
    };
    let (batch, _) = client
        .batch(
            &spec,
            &[(
                echo.clone(),
                &b"SECRET-BATCH"[..],
                EnqueueOptions::default(),
            )],
        )
        .await
        .unwrap();
    let callback =
        wasmgear_testkit::eventually(Duration::from_secs(30), "the callback", || async {
            let status = client.batch_status(&batch).await.unwrap();
            status
                .on_success
                .and_then(|s| s.parse::<wasmgear_client::JobId>().ok())
        })
        .await;
    let called = client
        .wait(&callback, Some(Duration::from_secs(30)), |_| {})
        .await
        .unwrap();
    let output = String::from_utf8(called.output.unwrap()).unwrap();
    assert!(output.contains("\"succeeded\":1"), "{output}");
    let stored: Vec<u8> = redis::cmd("HGET")
        .arg("wg:{echo}:input")
        .arg(callback.seq)
        .query_async(&mut redis.raw().await)
        .await
        .unwrap();
    assert!(stored.starts_with(b"\0wgenc1"), "{stored:?}");

    let values = dump(&redis).await;
    for secret in [
        "SECRET-BATCH",
        "SECRET-A",
        "SECRET-B",
        "SECRET-F",
        "SECRET-C1",
        "1C-TERCES",
        "SECRET-S",
        "failed on purpose",
    ] {
        assert!(!contains(&values, secret), "{secret} is in Redis in clear");
    }
    drop(worker);
}
