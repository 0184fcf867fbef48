//! `wasmgear deploy` and `wasmgear worker --plugins-from-redis`: a plugin stored in Redis
//! once reaches every worker process (none shares a file with another), new versions swap
//! in while running jobs finish on the old one, rollbacks, a corrupt chunk refused, old
//! versions forgotten unless a kept job names them, and replay from the store.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use wasmgear_client::{Client, EnqueueOptions, JobId, JobStatus};
use wasmgear_proto::keys::DeployKeys;

use wasmgear_testkit::{
    READY_LINE, TestRedis, WorkerProcess, artifact, eventually, function, json, stderr, stdout,
    wasmgear,
};

const WAIT: Duration = Duration::from_secs(60);

/// `artifact` copied to `dir/name.wasm`, its path.
fn plugin_file(dir: &Path, name: &str, artifact_name: &str) -> String {
    let path = dir.join(format!("{name}.wasm"));
    std::fs::copy(artifact(artifact_name), &path).unwrap();
    path.to_str().unwrap().to_string()
}

/// Runs `wasmgear deploy ARGS --json` against `redis` and returns its JSON (exit 0 and no
/// warning about a deprecated spelling asserted).
fn deploy(redis: &TestRedis, args: &[&str]) -> serde_json::Value {
    let url = redis.url();
    let mut all = vec!["deploy"];
    all.extend_from_slice(args);
    all.push("--json");
    let out = wasmgear(&all, &[("WASMGEAR_REDIS_URL", &url)]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(!stderr(&out).contains("deprecated"), "{}", stderr(&out));
    json(&out)
}

/// Runs `wasmgear deploy ARGS` and returns the output (whatever the exit code).
fn deploy_raw(redis: &TestRedis, args: &[&str]) -> std::process::Output {
    let url = redis.url();
    let mut all = vec!["deploy"];
    all.extend_from_slice(args);
    wasmgear(&all, &[("WASMGEAR_REDIS_URL", &url)])
}

/// A worker process serving deployed plugins only, with a home (compile cache) of its own.
fn deployed_worker(redis: &TestRedis, home: &Path, extra: &[&str]) -> WorkerProcess {
    WorkerProcess::builder(&redis.url())
        .args(&["--plugins-from-redis"])
        .args(extra)
        .env("WASMGEAR_HOME", home.to_str().unwrap())
        .start()
}

/// Worker pid → (function → version) of every live worker.
async fn served(client: &Client) -> BTreeMap<u32, BTreeMap<String, String>> {
    client
        .workers()
        .await
        .unwrap()
        .into_iter()
        .filter_map(|w| w.ad.ok())
        .map(|ad| (ad.pid, ad.functions))
        .collect()
}

/// Waits until each of `pids` advertises `version` for `function`.
async fn until_serving(client: &Client, pids: &[u32], function: &str, version: &str) {
    eventually(
        WAIT,
        &format!("{pids:?} to serve {function} {version}"),
        || async {
            let served = served(client).await;
            pids.iter()
                .all(|pid| {
                    served
                        .get(pid)
                        .and_then(|f| f.get(function))
                        .is_some_and(|v| v == version)
                })
                .then_some(())
        },
    )
    .await
}

async fn finished(client: &Client, id: &JobId) -> JobStatus {
    client.wait(id, Some(WAIT), |_| {}).await.unwrap()
}

fn output(status: &JobStatus) -> String {
    String::from_utf8_lossy(status.output.as_deref().unwrap_or_default()).into_owned()
}

fn ran_on(status: &JobStatus) -> (String, String) {
    let last = status.record.history.last().expect("an ended attempt");
    (
        last.version.clone().unwrap_or_default(),
        last.worker.clone().unwrap_or_default(),
    )
}

/// Two workers with no shared files: v1 deployed reaches both; v2 deployed while a long
/// job runs on each: those finish on v1 and new jobs run v2; a rollback brings v1 back; a
/// worker started later serves the current version from its first lease; a version with a
/// corrupt chunk is refused by every worker (v1 keeps serving) until it is deployed again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deploy_reaches_every_worker_and_swaps_like_a_hot_reload() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let files = tempfile::tempdir().unwrap();
    let (home_a, home_b, home_c) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    // Started before anything is deployed: they serve nothing yet.
    let a = deployed_worker(&redis, home_a.path(), &["--concurrency", "1"]);
    let b = deployed_worker(&redis, home_b.path(), &["--concurrency", "1"]);
    let pids = [a.pid(), b.pid()];

    let v1_dir = tempfile::tempdir().unwrap();
    let v1 = deploy(&redis, &[&plugin_file(v1_dir.path(), "job", "count")]);
    let v1 = v1["version"].as_str().unwrap().to_string();
    until_serving(&client, &pids, "job", &v1).await;

    // One long job on each worker (each runs one at a time).
    let job = function("job");
    let options = EnqueueOptions::default();
    let long: Vec<JobId> = [
        client.enqueue(&job, b"40 50", &options).await.unwrap(),
        client.enqueue(&job, b"40 50", &options).await.unwrap(),
    ]
    .into();
    eventually(WAIT, "both long jobs to run", || async {
        let mut running = 0;
        for id in &long {
            let status = client.status(id).await.unwrap();
            running += usize::from(status.record.progress.is_some());
        }
        (running == 2).then_some(())
    })
    .await;

    let v2 = deploy(&redis, &[&plugin_file(files.path(), "job", "echo")]);
    let v2 = v2["version"].as_str().unwrap().to_string();
    assert_ne!(v1, v2);
    until_serving(&client, &pids, "job", &v2).await;
    // Both heard of it on the store's channel (not by the poll): how a worker heard is
    // what its log says, and that is the behaviour under test here.
    for worker in [&a, &b] {
        assert!(
            worker
                .log()
                .contains(&format!("deploy announced deploy=job {v2}")),
            "{}",
            worker.log()
        );
    }
    let mut workers_of_long = Vec::new();
    for id in &long {
        let status = finished(&client, id).await;
        assert_eq!(output(&status), "counted to 40");
        let (version, worker) = ran_on(&status);
        assert_eq!(
            version, v1,
            "a running job finishes on the version it started on"
        );
        workers_of_long.push(worker);
    }
    assert_ne!(workers_of_long[0], workers_of_long[1], "one on each worker");
    let new = client.enqueue(&job, b"on v2", &options).await.unwrap();
    let status = finished(&client, &new).await;
    assert_eq!(
        (output(&status), ran_on(&status).0),
        ("on v2".into(), v2.clone())
    );

    // Roll back: both go back to v1.
    let back = deploy(&redis, &["rollback", "job"]);
    assert_eq!(
        (back["left"].as_str(), back["current"].as_str()),
        (Some(v2.as_str()), Some(v1.as_str()))
    );
    until_serving(&client, &pids, "job", &v1).await;
    let id = client.enqueue(&job, b"2", &options).await.unwrap();
    assert_eq!(output(&finished(&client, &id).await), "counted to 2");

    // A worker started now serves v1 before its first lease: its log says it loaded the
    // deployed plugin before it said it serves (the order is the behaviour under test).
    let c = deployed_worker(&redis, home_c.path(), &[]);
    let log = c.log();
    let loaded = log
        .find("deployed plugin loaded")
        .expect("the deployed plugin loaded");
    assert!(loaded < log.find(READY_LINE).unwrap(), "{log}");
    assert!(log.contains(&v1), "{log}");
    until_serving(&client, &[c.pid()], "job", &v1).await;

    // A corrupt chunk: stored, altered in Redis, then activated. Every worker refuses it,
    // says why, and keeps v1.
    let v3 = deploy(
        &redis,
        &[
            &plugin_file(files.path(), "job", "reverse"),
            "--no-activate",
        ],
    );
    assert_eq!(v3["activated"], false);
    let v3 = v3["version"].as_str().unwrap().to_string();
    let mut raw = redis.raw().await;
    let _: () = redis::cmd("HSET")
        .arg(DeployKeys::chunks(&v3))
        .arg(0)
        .arg(b"\0asm not quite".as_slice())
        .query_async(&mut raw)
        .await
        .unwrap();
    deploy(&redis, &["activate", "job", &v3[..8]]);
    let all = [a.pid(), b.pid(), c.pid()];
    eventually(
        WAIT,
        "every worker to refuse the corrupt version",
        || async {
            let workers = client.workers().await.unwrap();
            let refused = workers
                .iter()
                .filter_map(|w| w.ad.as_ref().ok())
                .filter(|ad| {
                    all.contains(&ad.pid)
                        && ad.functions.get("job") == Some(&v1)
                        && ad
                            .plugin_errors
                            .iter()
                            .any(|e| e.contains("corrupt") && e.contains(&v3))
                })
                .count();
            (refused == 3).then_some(())
        },
    )
    .await;
    let id = client.enqueue(&job, b"3", &options).await.unwrap();
    let status = finished(&client, &id).await;
    assert_eq!(
        (output(&status), ran_on(&status).0),
        ("counted to 3".into(), v1.clone())
    );
    let url = redis.url();
    let listed = stdout(&wasmgear(&["workers"], &[("WASMGEAR_REDIS_URL", &url)]));
    assert!(
        listed.contains(&format!("serves job (plugin {v1}, deployed)")),
        "{listed}"
    );
    assert!(listed.contains("is corrupt in Redis"), "{listed}");

    // Deploying the same file again repairs the chunks; the workers take it.
    deploy(&redis, &[&plugin_file(files.path(), "job", "reverse")]);
    until_serving(&client, &all, "job", &v3).await;
    let id = client.enqueue(&job, b"abc", &options).await.unwrap();
    assert_eq!(output(&finished(&client, &id).await), "cba");
    drop((a, b, c));
}

/// `--keep` forgets old versions with their chunks, except one a kept job ran on (and
/// `replay` runs that job again from the store); `deploy list` shows what is kept; a function
/// the worker's directory also has is served from the directory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn old_versions_are_forgotten_unless_a_kept_job_names_them() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let files = tempfile::tempdir().unwrap();
    // The directory serves `local` (echo); `local` is deployed too (as fail), and loses.
    let dir = tempfile::tempdir().unwrap();
    plugin_file(dir.path(), "local", "echo");
    deploy(&redis, &[&plugin_file(files.path(), "local", "fail")]);
    let home = tempfile::tempdir().unwrap();
    let worker = deployed_worker(
        &redis,
        home.path(),
        &["--plugins", dir.path().to_str().unwrap()],
    );

    let v1 = deploy(
        &redis,
        &[&plugin_file(files.path(), "f", "echo"), "--keep", "1"],
    );
    let v1 = v1["version"].as_str().unwrap().to_string();
    until_serving(&client, &[worker.pid()], "f", &v1).await;
    let id = client
        .enqueue(&function("f"), b"kept input", &EnqueueOptions::default())
        .await
        .unwrap();
    assert_eq!(ran_on(&finished(&client, &id).await).0, v1);

    let v2 = deploy(
        &redis,
        &[&plugin_file(files.path(), "f", "reverse"), "--keep", "1"],
    );
    let f_v1 = serde_json::json!([{ "function": "f", "version": v1 }]);
    assert_eq!(v2["kept_for_jobs"], f_v1);
    let v2 = v2["version"].as_str().unwrap().to_string();
    let v3 = deploy(
        &redis,
        &[&plugin_file(files.path(), "f", "sum"), "--keep", "1"],
    );
    // v2 ran no job: forgotten, chunks and all; v1 stays for the job that ran on it.
    assert_eq!(
        v3["forgotten"],
        serde_json::json!([{ "function": "f", "version": v2 }])
    );
    assert_eq!(v3["kept_for_jobs"], f_v1);
    let v3 = v3["version"].as_str().unwrap().to_string();
    let mut raw = redis.raw().await;
    let exists: Vec<bool> = redis::pipe()
        .exists(DeployKeys::chunks(&v1))
        .exists(DeployKeys::chunks(&v2))
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(exists, [true, false]);
    let listed = deploy(&redis, &["list", "f"]);
    let versions: Vec<(String, bool)> = listed[0]["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            (
                v["version"].as_str().unwrap().to_string(),
                v["current"] == true,
            )
        })
        .collect();
    assert_eq!(versions, [(v1.clone(), false), (v3.clone(), true)]);
    let out = deploy_raw(&redis, &["list"]);
    let table = stdout(&out);
    assert!(
        table.contains("FUNCTION") && table.contains(&v3) && table.contains("current"),
        "{table}"
    );

    // Replay from the store runs the job on v1 (echo), writing nothing.
    let url = redis.url();
    let out = wasmgear(
        &["replay", &id.to_string()],
        &[("WASMGEAR_REDIS_URL", &url)],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "kept input");
    assert!(
        stderr(&out).contains(&format!("deployed version {v1}")),
        "{}",
        stderr(&out)
    );

    // The directory wins for `local`; `wasmgear workers` says where each comes from.
    let id = client
        .enqueue(&function("local"), b"abc", &EnqueueOptions::default())
        .await
        .unwrap();
    assert_eq!(output(&finished(&client, &id).await), "abc");
    let ads = client.workers().await.unwrap();
    let ad = ads[0].ad.as_ref().unwrap();
    assert_eq!(ad.deployed, ["f"]);
    let listed = stdout(&wasmgear(&["workers"], &[("WASMGEAR_REDIS_URL", &url)]));
    assert!(
        listed.contains("serves local (plugin") && listed.contains(", directory)"),
        "{listed}"
    );

    // A change nobody announced (the message lost) is found by the poll.
    let _: () = redis::cmd("HSET")
        .arg(DeployKeys::current())
        .arg("f")
        .arg(&v1)
        .query_async(&mut raw)
        .await
        .unwrap();
    until_serving(&client, &[worker.pid()], "f", &v1).await;

    // Removed: the worker stops serving it; its versions stay, and one can be served again.
    let removed = deploy(&redis, &["remove", "f"]);
    assert_eq!(removed["left"].as_str(), Some(v1.as_str()));
    eventually(WAIT, "the worker to stop serving f", || async {
        let served = served(&client).await;
        (!served[&worker.pid()].contains_key("f")).then_some(())
    })
    .await;
    let out = deploy_raw(&redis, &["remove", "f"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("f is not served from the deployed-plugin store"));
    deploy(&redis, &["activate", "f", &v3]);
    until_serving(&client, &[worker.pid()], "f", &v3).await;
    drop(worker);
}

/// The old spellings `deploy --list/--rollback/--activate/--remove/--collect` still work for
/// one release: each does what its subcommand does, and warns on stderr with the new spelling.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_old_deploy_flags_still_work_with_a_warning() {
    let redis = TestRedis::start();
    let files = tempfile::tempdir().unwrap();
    let v1 = deploy(&redis, &[&plugin_file(files.path(), "f", "echo")]);
    let v1 = v1["version"].as_str().unwrap().to_string();
    let v2 = deploy(&redis, &[&plugin_file(files.path(), "f", "reverse")]);
    let v2 = v2["version"].as_str().unwrap().to_string();
    let old = |args: &[&str], new: &str| -> serde_json::Value {
        let mut all = args.to_vec();
        all.push("--json");
        let out = deploy_raw(&redis, &all);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
        let said = stderr(&out);
        assert!(
            said.starts_with(&format!("warning: `wasmgear deploy {}", args[0]))
                && said.contains(&format!(
                    "is deprecated and goes in the next release; write `wasmgear {new}`"
                )),
            "{args:?}: {said}"
        );
        json(&out)
    };

    let listed = deploy(&redis, &["list", "f"]);
    assert_eq!(listed[0]["current"].as_str(), Some(v2.as_str()));
    assert_eq!(
        old(&["--list", "f"], "deploy list [FUNCTION]"),
        listed,
        "the old spelling lists what the new one does"
    );
    assert_eq!(
        old(&["--list"], "deploy list [FUNCTION]"),
        deploy(&redis, &["list"])
    );
    let back = old(&["--rollback", "f"], "deploy rollback FUNCTION");
    assert_eq!(
        (back["left"].as_str(), back["current"].as_str()),
        (Some(v2.as_str()), Some(v1.as_str()))
    );
    let now = old(
        &["--activate", "f", &v2[..8]],
        "deploy activate FUNCTION VERSION",
    );
    assert_eq!(now["current"].as_str(), Some(v2.as_str()));
    let removed = old(&["--remove", "f"], "deploy remove FUNCTION");
    assert_eq!(removed["left"].as_str(), Some(v2.as_str()));
    assert_eq!(
        old(&["--collect"], "deploy collect")["collected"],
        serde_json::json!([])
    );
    // Subcommands and old flags do not mix.
    let out = deploy_raw(&redis, &["--collect", "list"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}

/// Every key's name and every stored record of the deployed-plugin store, sorted.
async fn store_snapshot(redis: &TestRedis) -> (Vec<String>, Vec<(String, String)>) {
    let mut raw = redis.raw().await;
    let (mut keys, mut records): (Vec<String>, Vec<(String, String)>) = redis::pipe()
        .cmd("KEYS")
        .arg("*")
        .hgetall(DeployKeys::versions())
        .query_async(&mut raw)
        .await
        .unwrap();
    keys.sort();
    records.sort();
    (keys, records)
}

/// What cannot be deployed is refused with one sentence, exit 2 (5 for a version that does
/// not exist), and changes nothing in Redis.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_deploys_are_refused_and_change_nothing() {
    let redis = TestRedis::start();
    let files = tempfile::tempdir().unwrap();
    let good = deploy(&redis, &[&plugin_file(files.path(), "echo", "echo")]);
    let version = good["version"].as_str().unwrap().to_string();
    let before = store_snapshot(&redis).await;

    let not_a_job = plugin_file(files.path(), "nope", "not-a-job");
    let garbage = files.path().join("garbage.wasm");
    std::fs::write(&garbage, b"not wasm at all").unwrap();
    let with_dirs = plugin_file(files.path(), "dirs", "echo");
    std::fs::write(
        files.path().join("dirs.toml"),
        format!(
            "[[dirs]]\nhost = \"{}\"\nguest = \"/d\"\n",
            files.path().display()
        ),
    )
    .unwrap();
    let bad_manifest = plugin_file(files.path(), "badm", "echo");
    std::fs::write(files.path().join("badm.toml"), "concurrency = \"many\"\n").unwrap();
    let cases: Vec<(Vec<&str>, i32, &str)> = vec![
        (
            vec![not_a_job.as_str()],
            2,
            "does not implement the wasmgear:job",
        ),
        (
            vec![garbage.to_str().unwrap()],
            2,
            "is not a WebAssembly component",
        ),
        (
            vec![with_dirs.as_str()],
            2,
            "cannot, as they would have to exist on every node",
        ),
        (vec![bad_manifest.as_str()], 2, "is invalid"),
        (vec!["/no/such/file.wasm"], 2, "cannot read plugin"),
        (vec!["rollback", "echo"], 2, "no earlier deployed version"),
        (vec!["rollback", "other"], 2, "has no deployed version"),
        (vec!["--rollback", "other"], 2, "has no deployed version"),
        (
            vec!["activate", "echo", "ffff"],
            5,
            "no deployed version ffff of echo",
        ),
        (
            vec!["activate", "other", &version],
            2,
            "serves echo, not other",
        ),
        (vec!["activate", "echo"], 2, "required"),
        (vec!["list", "other"], 5, "other has no deployed version"),
        (vec!["--list", "other"], 5, "other has no deployed version"),
        (vec!["list", "no{tags}"], 2, "invalid function name"),
        (vec!["remove"], 2, "required"),
        (vec![], 2, "required"),
    ];
    for (args, code, message) in cases {
        let out = deploy_raw(&redis, &args);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(message), "{args:?}: {}", stderr(&out));
    }
    assert_eq!(before, store_snapshot(&redis).await);
}

/// One deploy of a component driven step by step through the library's deploy functions, as
/// `Client::deploy` calls them: `deploy_begin`, `deploy_pin`, the chunks' `HSET`s, `deploy`.
struct Steps {
    version: String,
    token: String,
    bytes: Vec<u8>,
    record: String,
}

impl Steps {
    /// A deploy of `bytes` for function `f`, with a token of its own.
    fn new(bytes: &[u8], token: &str) -> Self {
        let sha256 = wasmgear_client::deploy::sha256_hex(bytes);
        let version = wasmgear_proto::deploy::version_of(&sha256).to_string();
        let record = serde_json::json!({
            "version": version, "sha256": sha256, "size": bytes.len(),
            "chunks": bytes.len().div_ceil(wasmgear_proto::deploy::CHUNK_BYTES),
            "name": "f", "functions": ["f"],
        });
        Steps {
            version,
            token: token.into(),
            bytes: bytes.to_vec(),
            record: record.to_string(),
        }
    }

    /// `deploy_begin`: under way for `ms` (again if `renew`).
    async fn under_way(
        &self,
        raw: &mut redis::aio::MultiplexedConnection,
        ms: u64,
        renew: bool,
    ) -> i64 {
        let renew = if renew { "1" } else { "0" };
        let args = [self.version.as_str(), &self.token, &ms.to_string(), renew];
        fcall(raw, "deploy_begin", &DeployKeys::registry(), &args).await
    }

    /// `deploy_begin`: under way for `ms`.
    async fn begin(&self, raw: &mut redis::aio::MultiplexedConnection, ms: u64) -> i64 {
        self.under_way(raw, ms, false).await
    }

    /// `deploy_pin` as a deploy, holding for `ms`, then the chunks written.
    async fn pin_and_write(&self, raw: &mut redis::aio::MultiplexedConnection, ms: u64) {
        let pinned: i64 = fcall(
            raw,
            "deploy_pin",
            &[DeployKeys::pin(&self.version)],
            &["deploy", &ms.to_string()],
        )
        .await;
        assert_eq!(pinned, 1, "no collector holds the pin");
        for (number, chunk) in self
            .bytes
            .chunks(wasmgear_proto::deploy::CHUNK_BYTES)
            .enumerate()
        {
            let _: i64 = redis::cmd("HSET")
                .arg(DeployKeys::chunks(&self.version))
                .arg(number)
                .arg(chunk)
                .query_async(raw)
                .await
                .unwrap();
        }
    }

    /// `deploy`: records the version (current, keeping 1 version), then lets go of its pin
    /// if recorded; its reply.
    async fn record(&self, raw: &mut redis::aio::MultiplexedConnection) -> Vec<String> {
        let args = [self.version.as_str(), &self.record, "1", "1", &self.token];
        let reply: Vec<String> = fcall(raw, "deploy", &DeployKeys::registry(), &args).await;
        if reply[0] == "ok" {
            let keys = [
                DeployKeys::chunks(&self.version),
                DeployKeys::pin(&self.version),
            ];
            let _: i64 = fcall(raw, "deploy_unpin", &keys, &["deploy", "0"]).await;
        }
        reply
    }
}

/// `FCALL wg2_NAME` with `keys` and `args`.
async fn fcall<T: redis::FromRedisValue>(
    raw: &mut redis::aio::MultiplexedConnection,
    name: &str,
    keys: &[String],
    args: &[&str],
) -> T {
    redis::cmd("FCALL")
        .arg(format!("wg2_{name}"))
        .arg(keys.len())
        .arg(keys)
        .arg(args)
        .query_async(raw)
        .await
        .unwrap_or_else(|e| panic!("{name} {args:?}: {e}"))
}

/// Whether version `version`'s chunks are all there, as a worker fetching it would find.
async fn fetches(client: &Client, version: &str) -> bool {
    let record = client
        .deployed_version(&function("f"), version)
        .await
        .unwrap();
    client
        .fetch_deployed(&record.expect("a record"))
        .await
        .is_ok()
}

/// Waits until Redis' clock has moved on by a millisecond.
async fn next_ms(client: &Client) {
    let now = client.redis_now_ms().await.unwrap();
    eventually(WAIT, "the next ms", || async {
        (client.redis_now_ms().await.unwrap() > now).then_some(())
    })
    .await;
}

/// Waits until key `key` is gone (a pin expired by itself).
async fn until_gone(raw: &mut redis::aio::MultiplexedConnection, key: &str) {
    let key = key.to_string();
    eventually(WAIT, &format!("{key} to expire"), || {
        let mut raw = raw.clone();
        let key = key.clone();
        async move {
            let exists: bool = redis::cmd("EXISTS")
                .arg(&key)
                .query_async(&mut raw)
                .await
                .unwrap();
            (!exists).then_some(())
        }
    })
    .await;
}

/// Waits until every deploy of `version` noted under way has lapsed (Redis' clock).
async fn until_lapsed(client: &Client, raw: &mut redis::aio::MultiplexedConnection, version: &str) {
    eventually(WAIT, "the deploys under way to lapse", || {
        let mut raw = raw.clone();
        async move {
            let now = client.redis_now_ms().await.unwrap();
            let pending: Vec<(String, u64)> = redis::cmd("ZRANGE")
                .arg(DeployKeys::pending())
                .arg(0)
                .arg(-1)
                .arg("WITHSCORES")
                .query_async(&mut raw)
                .await
                .unwrap();
            pending
                .iter()
                .filter(|(m, _)| m.starts_with(version))
                .all(|(_, until)| *until < now)
                .then_some(())
        }
    })
    .await;
}

/// Two deploys of the same bytes, interleaved step by step with the forget of that version
/// (pushed out by another deploy) and with collections: while their pins hold, while only
/// their notes as under way do, and once one lapsed (its chunks are collected, its record
/// refused; it starts again and writes them anew). At every point a record names the
/// version, all its chunks are there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunk_is_never_deleted_while_a_record_names_its_version() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let mut raw = redis.raw().await;
    let v_bytes = std::fs::read(artifact("echo")).unwrap();
    let w_bytes = std::fs::read(artifact("reverse")).unwrap();

    // V deployed, then W (keeping one version): V is no longer kept.
    let first = Steps::new(&v_bytes, "first");
    assert_eq!(first.begin(&mut raw, 60_000).await, 1);
    first.pin_and_write(&mut raw, 60_000).await;
    assert_eq!(first.record(&mut raw).await, ["ok"]);
    // (Deployed on a later ms than V: the most recently deployed is kept.)
    next_ms(&client).await;
    let w = Steps::new(&w_bytes, "w");
    assert_eq!(w.begin(&mut raw, 60_000).await, 1);
    w.pin_and_write(&mut raw, 60_000).await;
    let gone = w.record(&mut raw).await;
    let v_field = format!("f {}", first.version);
    assert_eq!(gone, ["ok".to_string(), v_field.clone()]);
    let version = first.version.clone();

    // Two deploys of V's bytes start: noted under way, pinned (the pins expire soon), chunks
    // written. Then V's last record is forgotten: V goes to the graveyard.
    let (a, b) = (Steps::new(&v_bytes, "a"), Steps::new(&v_bytes, "b"));
    for deploy in [&a, &b] {
        assert_eq!(deploy.begin(&mut raw, 60_000).await, 1);
        deploy.pin_and_write(&mut raw, 300).await;
    }
    let forgotten: Vec<String> = fcall(
        &mut raw,
        "deploy_forget",
        &DeployKeys::registry(),
        &["1", &v_field],
    )
    .await;
    assert_eq!(forgotten, [v_field.as_str()]);
    let graveyard: Vec<String> = redis::cmd("ZRANGE")
        .arg(DeployKeys::graveyard())
        .arg(0)
        .arg(-1)
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(graveyard, [version.as_str()]);

    // Pinned: the collector leaves V alone. Pins expired, but both still under way: again.
    assert!(client.collect_deployed().await.unwrap().is_empty());
    until_gone(&mut raw, &DeployKeys::pin(&version)).await;
    assert!(client.collect_deployed().await.unwrap().is_empty());
    // A records V: it is current, and whole.
    assert_eq!(a.record(&mut raw).await[0], "ok");
    assert!(fetches(&client, &version).await);
    // Named: collected never again, and out of the graveyard.
    assert!(client.collect_deployed().await.unwrap().is_empty());
    let graveyard: Vec<String> = redis::cmd("ZRANGE")
        .arg(DeployKeys::graveyard())
        .arg(0)
        .arg(-1)
        .query_async(&mut raw)
        .await
        .unwrap();
    assert!(graveyard.is_empty(), "{graveyard:?}");
    // B records it too (the same bytes): still whole.
    assert_eq!(b.record(&mut raw).await[0], "ok");
    assert!(fetches(&client, &version).await);

    // V pushed out again and forgotten, while a slow deploy C of V's bytes runs: C's pin and
    // its time under way lapse before it records. The collector takes C for interrupted and
    // deletes V's chunks; C's record is refused, C starts again, and V is whole once
    // recorded.
    let c = Steps::new(&v_bytes, "slow");
    assert_eq!(c.begin(&mut raw, 300).await, 1);
    c.pin_and_write(&mut raw, 300).await;
    next_ms(&client).await;
    let w_again = Steps::new(&w_bytes, "w2");
    assert_eq!(w_again.begin(&mut raw, 60_000).await, 1);
    w_again.pin_and_write(&mut raw, 60_000).await;
    assert_eq!(
        w_again.record(&mut raw).await,
        ["ok".to_string(), v_field.clone()]
    );
    let _: Vec<String> = fcall(
        &mut raw,
        "deploy_forget",
        &DeployKeys::registry(),
        &["1", &v_field],
    )
    .await;
    until_gone(&mut raw, &DeployKeys::pin(&version)).await;
    until_lapsed(&client, &mut raw, &version).await;
    assert_eq!(client.collect_deployed().await.unwrap(), [version.as_str()]);
    let chunks: bool = redis::cmd("EXISTS")
        .arg(DeployKeys::chunks(&version))
        .query_async(&mut raw)
        .await
        .unwrap();
    assert!(!chunks, "nothing named V: its chunks were collected");
    assert_eq!(c.under_way(&mut raw, 60_000, true).await, 0, "C was doomed");
    assert_eq!(c.record(&mut raw).await, ["lapsed"]);
    let again = Steps::new(&v_bytes, "slow2");
    assert_eq!(again.begin(&mut raw, 60_000).await, 1);
    again.pin_and_write(&mut raw, 60_000).await;
    assert_eq!(again.record(&mut raw).await[0], "ok");
    assert!(fetches(&client, &version).await);
    let pending: Vec<String> = redis::cmd("ZRANGE")
        .arg(DeployKeys::pending())
        .arg(0)
        .arg(-1)
        .query_async(&mut raw)
        .await
        .unwrap();
    assert!(pending.is_empty(), "{pending:?}");
}

/// A deploy interrupted after writing its chunks (never recorded) leaves nothing for ever:
/// once its time under way and its pin have lapsed, `wasmgear deploy collect` deletes its
/// chunks and its note.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_deploy_s_chunks_are_collected() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let mut raw = redis.raw().await;
    let interrupted = Steps::new(&std::fs::read(artifact("echo")).unwrap(), "gone");
    assert_eq!(interrupted.begin(&mut raw, 60_000).await, 1);
    interrupted.pin_and_write(&mut raw, 300).await;
    let version = interrupted.version.clone();
    // Not while it may still be under way.
    let out = deploy(&redis, &["collect"]);
    assert_eq!(out["collected"], serde_json::json!([]));
    // Its last word: it would be done within 1 ms. Then nothing more is heard of it.
    assert_eq!(interrupted.under_way(&mut raw, 1, true).await, 1);

    until_gone(&mut raw, &DeployKeys::pin(&version)).await;
    until_lapsed(&client, &mut raw, &version).await;
    let out = deploy(&redis, &["collect"]);
    assert_eq!(out["collected"], serde_json::json!([version]));
    let mut keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut raw)
        .await
        .unwrap();
    keys.sort();
    assert!(keys.is_empty(), "nothing left: {keys:?}");
    let out = deploy_raw(&redis, &["collect"]);
    assert_eq!(stdout(&out), "nothing to collect\n");
}

/// The deploy functions of the library refuse bad arguments (a keep of `nan` or `inf`, a
/// record that is not JSON or lists a function that is not a name, a version that is not
/// hex, a flag that is not 0 or 1) with one sentence, before writing anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deploy_functions_refuse_bad_arguments_before_writing() {
    let redis = TestRedis::start();
    let files = tempfile::tempdir().unwrap();
    deploy(&redis, &[&plugin_file(files.path(), "echo", "echo")]);
    let before = store_snapshot(&redis).await;
    let mut raw = redis.raw().await;
    let ok = Steps::new(b"bytes", "t");
    assert_eq!(ok.begin(&mut raw, 60_000).await, 1);
    let record = ok.record.as_str();
    let two = r#"{"functions":["f",{"a":1}]}"#;
    let keys = DeployKeys::registry();
    let v = ok.version.as_str();
    let calls: Vec<(&str, Vec<&str>)> = vec![
        ("deploy", vec![v, record, "1", "nan", "t"]),
        ("deploy", vec![v, record, "1", "inf", "t"]),
        ("deploy", vec![v, record, "1", "1e999", "t"]),
        ("deploy", vec![v, "not json", "1", "1", "t"]),
        ("deploy", vec![v, two, "1", "1", "t"]),
        (
            "deploy",
            vec![v, r#"{"functions":["bad name"]}"#, "1", "1", "t"],
        ),
        ("deploy", vec!["not-hex", record, "1", "1", "t"]),
        ("deploy", vec![v, record, "yes", "1", "t"]),
        ("deploy_forget", vec!["nan", "echo x"]),
        ("deploy_begin", vec![v, "t", "inf", "0"]),
        ("deploy_begin", vec![v, "t", "1000", "2"]),
        ("deploy_doom", vec!["not-hex"]),
        ("deploy_collectable", vec!["0"]),
    ];
    // (The begin above is the one write made on purpose: it is taken out of the snapshot.)
    let snapshot = || async {
        let (keys, records) = store_snapshot(&redis).await;
        let keys: Vec<String> = keys
            .into_iter()
            .filter(|k| *k != DeployKeys::pending())
            .collect();
        (keys, records)
    };
    let noted = snapshot().await;
    assert_eq!(noted.1, before.1);
    for (name, args) in calls {
        let error = redis::cmd("FCALL")
            .arg(format!("wg2_{name}"))
            .arg(keys.len())
            .arg(&keys)
            .arg(&args)
            .query_async::<redis::Value>(&mut raw)
            .await
            .expect_err(&format!("{name} {args:?} refused"));
        assert_eq!(error.code(), Some("BADDEPLOY"), "{name} {args:?}: {error}");
        assert_eq!(noted, snapshot().await, "{name} {args:?} wrote something");
    }
    let pin = |args: Vec<&'static str>| {
        let mut call = redis::cmd("FCALL");
        call.arg("wg2_deploy_pin")
            .arg(1)
            .arg(DeployKeys::pin(v))
            .arg(args);
        call
    };
    for args in [
        vec!["deploy", "nan"],
        vec!["someone", "1000"],
        vec!["collect:", "1000"],
    ] {
        let error = pin(args.clone())
            .query_async::<redis::Value>(&mut raw)
            .await
            .expect_err(&format!("deploy_pin {args:?} refused"));
        assert_eq!(error.code(), Some("BADDEPLOY"), "{args:?}: {error}");
    }
    assert_eq!(noted, snapshot().await);
}
