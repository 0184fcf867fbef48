//! Encrypted job data: with a key file and `config F --encrypt`, a job's input is sealed by
//! the producer (bound to its id) and its output, error and log by the worker, so that no
//! plaintext is in Redis while the jobs succeed and fail as usual; a producer without the
//! key is refused; a reader without it is told so; a ciphertext moved to another job does
//! not open; a rotated key file still opens what the old key sealed.

use std::path::Path;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_plaintext_in_redis_while_encrypted_jobs_run() {
    let redis = TestRedis::start();
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys");
    ok(wasmgear(
        &["keys", "new", keys.to_str().unwrap(), "k1"],
        &[],
    ));
    let plugins = plugin_dir(&["echo", "fail"]);
    let worker = WorkerProcess::builder(&redis.url())
        .plugins(plugins.path())
        .env("WASMGEAR_ENCRYPTION_KEY_FILE", keys.to_str().unwrap())
        .start();
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
    let values = dump(&redis).await;
    for secret in [
        "TOPSECRET-IN",
        "TOPSECRET-ERR",
        "TOPSECRET-REFUSED",
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
    let ring =
        wasmgear_proto::crypto::KeyRing::parse("keys", &std::fs::read_to_string(&keys).unwrap())
            .unwrap();
    let client = Client::connect(&redis.url())
        .await
        .unwrap()
        .with_keys(std::sync::Arc::new(ring), false);
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
    drop(worker);
}
