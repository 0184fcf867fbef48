//! Signed plugins: `wasmgear keygen`, `wasmgear sign`, `wasmgear deploy --sign` and a worker
//! started with `--trust`, which refuses a directory or deployed plugin whose signature is
//! missing, by another key, or no longer matches its component or manifest, says why in the
//! worker list, and keeps the version before it serving.

use std::path::Path;
use std::time::Duration;

use wasmgear_client::{Client, EnqueueOptions, JobState};
use wasmgear_testkit::{
    TestRedis, WorkerProcess, artifact, eventually, function, json, stderr, stdout, wasmgear,
};

const WAIT: Duration = Duration::from_secs(60);

/// `wasmgear keygen DIR/NAME`: the paths of NAME.key and NAME.pub.
fn keygen(dir: &Path, name: &str) -> (String, String) {
    let base = dir.join(name);
    let out = wasmgear(&["keygen", base.to_str().unwrap()], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let (secret, public) = (
        format!("{}.key", base.display()),
        format!("{}.pub", base.display()),
    );
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&secret).unwrap().permissions().mode();
    assert_eq!(
        mode & 0o077,
        0,
        "the secret key is readable by others: {mode:o}"
    );
    (secret, public)
}

/// `artifact` copied to `dir/name.wasm`; its path.
fn plugin_file(dir: &Path, name: &str, artifact_name: &str) -> String {
    let path = dir.join(format!("{name}.wasm"));
    std::fs::copy(artifact(artifact_name), &path).unwrap();
    path.to_str().unwrap().to_string()
}

fn sign(plugin: &str, key: &str) {
    let out = wasmgear(&["sign", plugin, "--key", key], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

/// The live worker `pid`'s functions (→ versions) and plugin errors, once `ready` holds.
async fn until_worker(
    client: &Client,
    pid: u32,
    what: &str,
    ready: impl Fn(&std::collections::BTreeMap<String, String>, &[String]) -> bool,
) {
    eventually(WAIT, what, || async {
        let workers = client.workers().await.unwrap();
        let ad = workers
            .into_iter()
            .filter_map(|w| w.ad.ok())
            .find(|ad| ad.pid == pid)?;
        ready(&ad.functions, &ad.plugin_errors).then_some(())
    })
    .await
}

async fn run(client: &Client, name: &str, input: &[u8]) -> (JobState, String) {
    let id = client
        .enqueue(&function(name), input, &EnqueueOptions::default())
        .await
        .unwrap();
    let status = client.wait(&id, Some(WAIT), |_| {}).await.unwrap();
    let output = String::from_utf8_lossy(status.output.as_deref().unwrap_or_default());
    (status.record.state, output.into_owned())
}

/// A trusting worker loads the signed plugins of its directory and refuses the unsigned
/// one and the one signed by a key it does not trust, saying why; a manifest changed after
/// signing is refused while the signed version keeps serving; signing the refused plugin
/// brings it in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trusting_worker_runs_only_signed_directory_plugins() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let keys = tempfile::tempdir().unwrap();
    let (mine, mine_pub) = keygen(keys.path(), "release");
    let (theirs, _) = keygen(keys.path(), "stranger");
    let dir = tempfile::tempdir().unwrap();
    let echo = plugin_file(dir.path(), "echo", "echo");
    let reverse = plugin_file(dir.path(), "reverse", "reverse");
    let count = plugin_file(dir.path(), "count", "count");
    std::fs::write(dir.path().join("echo.toml"), "concurrency = 4\n").unwrap();
    sign(&echo, &mine);
    sign(&count, &theirs);

    let worker = WorkerProcess::builder(&redis.url())
        .plugins(dir.path())
        .args(&["--trust", &mine_pub])
        .start();
    let pid = worker.pid();
    until_worker(
        &client,
        pid,
        "echo served, the others refused",
        |f, errors| {
            f.contains_key("echo")
                && !f.contains_key("reverse")
                && !f.contains_key("count")
                && errors
                    .iter()
                    .any(|e| e.contains("reverse.wasm") && e.contains("not signed"))
                && errors
                    .iter()
                    .any(|e| e.contains("count.wasm") && e.contains("does not trust"))
        },
    )
    .await;
    assert_eq!(
        run(&client, "echo", b"hi").await,
        (JobState::Succeeded, "hi".into())
    );

    // A manifest changed after signing (more capabilities, say) is refused; the signed
    // version keeps serving.
    std::fs::write(dir.path().join("echo.toml"), "concurrency = 8\n").unwrap();
    until_worker(&client, pid, "the changed manifest refused", |f, errors| {
        f.contains_key("echo")
            && errors
                .iter()
                .any(|e| e.contains("echo.wasm") && e.contains("does not match"))
    })
    .await;
    assert_eq!(
        run(&client, "echo", b"still").await,
        (JobState::Succeeded, "still".into())
    );
    let url = redis.url();
    let listed = stdout(&wasmgear(&["workers"], &[("WASMGEAR_REDIS_URL", &url)]));
    assert!(listed.contains("not signed"), "{listed}");

    // Signing the unsigned plugin (a new .sig file) brings it in without a restart.
    sign(&reverse, &mine);
    until_worker(&client, pid, "reverse served once signed", |f, errors| {
        f.contains_key("reverse") && !errors.iter().any(|e| e.contains("reverse.wasm"))
    })
    .await;
    assert_eq!(
        run(&client, "reverse", b"abc").await,
        (JobState::Succeeded, "cba".into())
    );
    drop(worker);
}

/// Deployed plugins: an unsigned deploy is refused by a trusting worker (and served by one
/// that trusts everything); a signed one is served; an unsigned new version is refused
/// while the signed one keeps serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trusting_worker_runs_only_signed_deploys() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let keys = tempfile::tempdir().unwrap();
    let (secret, public) = keygen(keys.path(), "release");
    let home = tempfile::tempdir().unwrap();
    let worker = WorkerProcess::builder(&redis.url())
        .args(&["--plugins-from-redis", "--trust", &public])
        .env("WASMGEAR_HOME", home.path().to_str().unwrap())
        .start();
    let pid = worker.pid();
    let files = tempfile::tempdir().unwrap();
    let url = redis.url();
    let deploy = |args: &[&str]| {
        let mut all = vec!["deploy", "--json"];
        all.extend_from_slice(args);
        let out = wasmgear(&all, &[("WASMGEAR_REDIS_URL", &url)]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        json(&out)["version"].as_str().unwrap().to_string()
    };

    deploy(&[&plugin_file(files.path(), "job", "echo")]);
    until_worker(&client, pid, "the unsigned deploy refused", |f, errors| {
        !f.contains_key("job") && errors.iter().any(|e| e.contains("not signed"))
    })
    .await;

    let signed = deploy(&[
        &plugin_file(files.path(), "job", "reverse"),
        "--sign",
        &secret,
    ]);
    until_worker(&client, pid, "the signed deploy served", |f, _| {
        f.get("job") == Some(&signed)
    })
    .await;
    assert_eq!(
        run(&client, "job", b"abc").await,
        (JobState::Succeeded, "cba".into())
    );

    let unsigned = deploy(&[&plugin_file(files.path(), "job", "echo")]);
    until_worker(
        &client,
        pid,
        "the unsigned new version refused",
        |f, errors| {
            f.get("job") == Some(&signed)
                && errors
                    .iter()
                    .any(|e| e.contains("not signed") && e.contains("job"))
        },
    )
    .await;
    assert_ne!(unsigned, signed);
    let key = std::fs::read_to_string(&public).unwrap();
    let key = key.split_whitespace().nth(1).unwrap().to_string();
    let out = wasmgear(
        &["deploy", "list", "job", "--json"],
        &[("WASMGEAR_REDIS_URL", &url)],
    );
    let listed = json(&out);
    let signers: Vec<(String, serde_json::Value)> = listed[0]["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            (
                v["version"].as_str().unwrap().to_string(),
                v["signed_by"].clone(),
            )
        })
        .collect();
    assert!(
        signers.contains(&(signed.clone(), serde_json::json!(key))),
        "{signers:?}"
    );
    assert!(
        signers.contains(&(unsigned.clone(), serde_json::Value::Null)),
        "{signers:?}"
    );
    assert_eq!(
        run(&client, "job", b"xyz").await,
        (JobState::Succeeded, "zyx".into()),
        "the signed version keeps serving"
    );
    drop(worker);
}

/// The commands refuse what they cannot use, with a reason, and write nothing.
#[test]
fn keys_and_signatures_are_checked_before_use() {
    let keys = tempfile::tempdir().unwrap();
    let (secret, public) = keygen(keys.path(), "release");
    let again = wasmgear(
        &["keygen", keys.path().join("release").to_str().unwrap()],
        &[],
    );
    assert_eq!(again.status.code(), Some(2), "{}", stderr(&again));
    assert!(
        stderr(&again).contains("never overwrites"),
        "{}",
        stderr(&again)
    );

    let dir = tempfile::tempdir().unwrap();
    let echo = plugin_file(dir.path(), "echo", "echo");
    let wrong = wasmgear(&["sign", &echo, "--key", &public], &[]);
    assert_eq!(wrong.status.code(), Some(2), "{}", stderr(&wrong));
    assert!(stderr(&wrong).contains("public key"), "{}", stderr(&wrong));
    assert!(!dir.path().join("echo.wasm.sig").exists());
    sign(&echo, &secret);
    let line = std::fs::read_to_string(dir.path().join("echo.wasm.sig")).unwrap();
    assert!(line.starts_with("wasmgear-signature-v1 "), "{line}");
    // `plugins --trust` checks a directory offline as a trusting worker would.
    let check = |dir: &Path| wasmgear(&["plugins", dir.to_str().unwrap(), "--trust", &public], &[]);
    let out = check(dir.path());
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    plugin_file(dir.path(), "reverse", "reverse");
    let out = check(dir.path());
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(
        stdout(&out).contains("reverse.wasm\" refused: it is not signed"),
        "{}",
        stdout(&out)
    );

    let bad = wasmgear(
        &[
            "worker",
            "--plugins",
            dir.path().to_str().unwrap(),
            "--trust",
            "not-a-key",
        ],
        &[("WASMGEAR_REDIS_URL", "redis://127.0.0.1:1")],
    );
    assert_eq!(bad.status.code(), Some(2), "{}", stderr(&bad));
    assert!(
        stderr(&bad).contains("--trust not-a-key"),
        "{}",
        stderr(&bad)
    );
}
