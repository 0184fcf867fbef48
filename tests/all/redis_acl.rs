//! Least privilege in Redis: users made from `wasmgear acl producer|worker|operator` run the
//! main flows (a worker leases and runs jobs, flows, batches and schedules; a producer
//! enqueues and reads; an operator cancels, retries, pauses, deploys and reads the audit
//! log) with no refusal in Redis' ACL log, while a producer is refused a lease, a deploy and
//! loading the library, and an operator a lease.

use std::time::Duration;

use wasmgear_testkit::{
    TestRedis, WorkerProcess, artifact, eventually, plugin_dir, stderr, stdout, wasmgear,
};

const WAIT: Duration = Duration::from_secs(60);

/// Makes the Redis user `name` (password `pw-NAME`) of `role` with the command `wasmgear
/// acl` prints; returns its URL.
async fn make_user(redis: &TestRedis, role: &str, name: &str) -> String {
    let out = wasmgear(&["acl", role, "--user", name], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let line = stdout(&out).replace(">PASSWORD", &format!(">pw-{name}"));
    let words: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(&words[..2], ["ACL", "SETUSER"], "{line}");
    let mut cmd = redis::cmd("ACL");
    for word in &words[1..] {
        cmd.arg(*word);
    }
    let mut raw = redis.raw().await;
    let _: () = cmd.query_async(&mut raw).await.unwrap();
    format!("redis://{name}:pw-{name}@127.0.0.1:{}", redis.port())
}

/// Runs the CLI as the user of `url`; its output, asserting exit 0.
fn cli(url: &str, args: &[&str]) -> String {
    let out = wasmgear(args, &[("WASMGEAR_REDIS_URL", url)]);
    assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
    stdout(&out)
}

/// The refusals in Redis' ACL log: (user, what was refused).
async fn refusals(redis: &TestRedis) -> Vec<(String, String)> {
    let mut raw = redis.raw().await;
    let entries: Vec<redis::Value> = redis::cmd("ACL")
        .arg("LOG")
        .arg(1000)
        .query_async(&mut raw)
        .await
        .unwrap();
    entries
        .into_iter()
        .map(|entry| {
            let fields: Vec<(String, redis::Value)> = match entry {
                redis::Value::Map(pairs) => pairs
                    .into_iter()
                    .map(|(k, v)| (redis::from_redis_value(k).unwrap(), v))
                    .collect(),
                redis::Value::Array(flat) => flat
                    .chunks(2)
                    .map(|p| (redis::from_redis_value(p[0].clone()).unwrap(), p[1].clone()))
                    .collect(),
                other => panic!("an ACL LOG entry: {other:?}"),
            };
            let text = |name: &str| {
                fields
                    .iter()
                    .find(|(k, _)| k == name)
                    .map(|(_, v)| redis::from_redis_value::<String>(v.clone()).unwrap_or_default())
                    .unwrap_or_default()
            };
            (
                text("username"),
                format!("{} {}", text("reason"), text("object")),
            )
        })
        .collect()
}

async fn reset_acl_log(redis: &TestRedis) {
    let mut raw = redis.raw().await;
    let _: () = redis::cmd("ACL")
        .arg("LOG")
        .arg("RESET")
        .query_async(&mut raw)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_role_runs_its_flows_and_nothing_more() {
    let redis = TestRedis::start();
    // The default user loads the library (a least-privilege user may not).
    let admin = redis.client().await;
    let producer = make_user(&redis, "producer", "app").await;
    let worker_url = make_user(&redis, "worker", "node").await;
    let operator = make_user(&redis, "operator", "ops").await;
    reset_acl_log(&redis).await;

    let plugins = plugin_dir(&["echo", "reverse", "fail", "join"]);
    let worker = WorkerProcess::builder(&worker_url)
        .plugins(plugins.path())
        .start();

    // The producer: a job waited for, a flow, a batch, reads.
    let out = cli(&producer, &["enqueue", "echo", "hello", "--wait"]);
    assert!(out.contains("hello"), "{out}");
    let dir = tempfile::tempdir().unwrap();
    let flow = dir.path().join("flow.toml");
    std::fs::write(
        &flow,
        "name = \"acl\"\n[jobs.a]\nfunction = \"reverse\"\ninput = \"ab\"\n[jobs.b]\nfunction = \"join\"\nafter = [\"a\"]\n",
    )
    .unwrap();
    cli(
        &producer,
        &[
            "flow",
            "submit",
            flow.to_str().unwrap(),
            "--wait",
            "--wait-timeout",
            "1m",
        ],
    );
    let failed = cli(&producer, &["enqueue", "fail", "x", "--max-attempts", "1"]);
    let failed = failed.split_whitespace().last().unwrap().to_string();
    // It fails for good: `wait` says so with its exit code, not with a refusal.
    let waited = wasmgear(
        &["wait", &failed, "--timeout", "1m"],
        &[("WASMGEAR_REDIS_URL", &producer)],
    );
    assert!(!stderr(&waited).contains("NOPERM"), "{}", stderr(&waited));
    assert_ne!(waited.status.code(), Some(0));
    // A batch with a callback, and a job after an ended job of another function.
    let batch = wasmgear_testkit::cli::wasmgear_with_stdin(
        &["batch", "run", "--name", "acl", "--on-complete", "echo", "--json"],
        &[("WASMGEAR_REDIS_URL", &producer)],
        b"{\"function\": \"echo\", \"input\": \"b1\"}\n{\"function\": \"reverse\", \"input\": \"b2\"}\n",
    );
    assert_eq!(batch.status.code(), Some(0), "{}", stderr(&batch));
    let after = cli(
        &producer,
        &["enqueue", "reverse", "after", "--after", "echo:1", "--wait"],
    );
    assert!(after.contains("retfa"), "{after}");
    cli(&producer, &["queues"]);
    cli(&producer, &["status", &failed]);

    // The operator: retry, cancel, pause and resume, a deploy, a schedule the worker fires,
    // and the audit log.
    cli(&operator, &["retry", &failed]);
    let later = cli(&operator, &["enqueue", "echo", "later", "--delay", "1h"]);
    let later = later.split_whitespace().last().unwrap().to_string();
    cli(&operator, &["cancel", &later]);
    cli(&operator, &["pause", "echo"]);
    cli(&operator, &["resume", "echo"]);
    cli(&operator, &["config", "echo", "--concurrency", "4"]);
    let files = tempfile::tempdir().unwrap();
    let component = files.path().join("deployed.wasm");
    std::fs::copy(artifact("reverse"), &component).unwrap();
    cli(&operator, &["deploy", component.to_str().unwrap()]);
    cli(
        &operator,
        &[
            "schedule",
            "add",
            "tick",
            "--function",
            "echo",
            "--every",
            "1s",
            "--input",
            "t",
        ],
    );
    eventually(WAIT, "the schedule's first job to succeed", || async {
        let jobs = admin
            .jobs_in_state(
                &wasmgear_client::FunctionName::new("echo").unwrap(),
                wasmgear_client::JobState::Succeeded,
                100,
            )
            .await
            .ok()?;
        (jobs.len() >= 2).then_some(())
    })
    .await;
    cli(&operator, &["schedule", "rm", "tick"]);
    let audit = cli(&operator, &["audit"]);
    assert!(
        audit.contains("cli ") && audit.contains("deploy"),
        "{audit}"
    );

    let log = refusals(&redis).await;
    assert!(
        log.is_empty(),
        "the roles were refused what their flows need: {log:#?}"
    );

    // What each may not do.
    let refused = |url: &str, args: &[&str]| {
        let out = wasmgear(args, &[("WASMGEAR_REDIS_URL", url)]);
        assert_ne!(out.status.code(), Some(0), "{args:?} was allowed");
        stderr(&out)
    };
    let said = refused(&producer, &["deploy", component.to_str().unwrap()]);
    assert!(
        said.contains("NOPERM") || said.contains("permission"),
        "{said}"
    );
    // A worker collects deployed chunks, but may not deploy: a plugin every node would
    // run comes from an operator.
    let said = refused(&worker_url, &["deploy", component.to_str().unwrap()]);
    assert!(said.contains("no permissions"), "{said}");
    let said = refused(&producer, &["cancel", &later]);
    assert!(
        said.contains("NOPERM") || said.contains("permission"),
        "{said}"
    );
    for url in [&producer, &operator] {
        let client = wasmgear_client::Client::connect(url).await.unwrap();
        let mut conn = redis::Client::open(url.as_str())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let lease: redis::RedisResult<redis::Value> = redis::cmd("FCALL")
            .arg("wg2_lease")
            .arg(0)
            .query_async(&mut conn)
            .await;
        let error = lease.unwrap_err().to_string();
        assert!(error.to_uppercase().contains("NOPERM"), "{url}: {error}");
        drop(client);
    }
    let users: Vec<String> = refusals(&redis).await.into_iter().map(|(u, _)| u).collect();
    assert!(
        users.contains(&"app".to_string()) && users.contains(&"ops".to_string()),
        "{users:?}"
    );
    drop(worker);
}

/// A least-privilege user on a Redis without this build's library is told what to do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_who_may_not_load_the_library_is_told_so() {
    let redis = TestRedis::start();
    let producer = make_user(&redis, "producer", "app").await;
    let out = wasmgear(
        &["enqueue", "echo", "x"],
        &[("WASMGEAR_REDIS_URL", &producer)],
    );
    assert_ne!(out.status.code(), Some(0));
    assert!(
        stderr(&out).contains("may not load it (FUNCTION LOAD)"),
        "{}",
        stderr(&out)
    );
}
