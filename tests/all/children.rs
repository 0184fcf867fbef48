//! Child jobs (`wasmgear:job/jobs`): a plugin (`split`) that enqueues a child per chunk and
//! combines their outputs; the grant and the cap; a cancelled parent's children; a retried
//! parent that gets its children back instead of enqueueing them twice.

use std::time::Duration;

use wasmgear_client::{Client, EnqueueOptions, JobId, JobState, JobStatus};

use crate::support::{TestRedis, WorkerProcess, artifact, eventually, function};

const WAIT: Duration = Duration::from_secs(60);

/// A plugin directory with `split` (its manifest `manifest`, if any) and the child plugins.
fn plugins(manifest: Option<&str>, children: &[&str]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(artifact("split"), dir.path().join("split.wasm")).unwrap();
    if let Some(manifest) = manifest {
        std::fs::write(dir.path().join("split.toml"), manifest).unwrap();
    }
    for child in children {
        std::fs::copy(artifact(child), dir.path().join(format!("{child}.wasm"))).unwrap();
    }
    dir
}

fn plan(function: &str, chunks: &[String], fail_first: bool) -> Vec<u8> {
    serde_json::json!({ "function": function, "chunks": chunks, "fail_first": fail_first })
        .to_string()
        .into_bytes()
}

async fn run(client: &Client, input: &[u8], attempts: u32) -> JobStatus {
    let options = EnqueueOptions {
        max_attempts: Some(attempts),
        ..EnqueueOptions::default()
    };
    let id = client
        .enqueue(&function("split"), input, &options)
        .await
        .unwrap();
    client.wait(&id, Some(WAIT), |_| {}).await.unwrap()
}

/// How many jobs of `name` there are (numbers 1..).
async fn count_jobs(client: &Client, name: &str) -> u64 {
    let mut n = 0;
    while client
        .status(&JobId {
            function: function(name),
            seq: n + 1,
        })
        .await
        .is_ok()
    {
        n += 1;
    }
    n
}

/// One parent, 100 children (fan-out), their outputs combined in order (fan-in); the
/// parent lists its children, each child names its parent, and `status` shows both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parent_fans_out_to_100_children_and_combines_their_outputs() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let dir = plugins(
        Some("[jobs]\nenqueue = [\"reverse\"]\nmax_children = 200\n"),
        &["reverse"],
    );
    let _worker = WorkerProcess::serving(&redis, dir.path(), &["--concurrency", "8"]);
    let chunks: Vec<String> = (0..100).map(|i| format!("chunk {i:03}")).collect();
    let status = run(&client, &plan("reverse", &chunks, false), 1).await;
    assert_eq!(
        status.record.state,
        JobState::Succeeded,
        "{:?}",
        status.record.error
    );
    let outputs: Vec<String> = serde_json::from_slice(status.output.as_deref().unwrap()).unwrap();
    let expected: Vec<String> = chunks.iter().map(|c| c.chars().rev().collect()).collect();
    assert_eq!(outputs, expected);
    assert_eq!(status.record.children.len(), 100);
    assert_eq!(count_jobs(&client, "reverse").await, 100);
    let child: JobId = status.record.children[7].parse().unwrap();
    let child_status = client.status(&child).await.unwrap();
    assert_eq!(child_status.record.parent, Some(status.id.to_string()));

    let url = redis.url();
    let env = [("WASMGEAR_REDIS_URL", url.as_str())];
    let shown = crate::support::stdout(&crate::support::wasmgear(
        &["status", &status.id.to_string()],
        &env,
    ));
    assert!(shown.contains("children  100 (reverse:"), "{shown}");
    let shown = crate::support::stdout(&crate::support::wasmgear(
        &["status", &child.to_string()],
        &env,
    ));
    assert!(
        shown.contains(&format!("parent    {}", status.id)),
        "{shown}"
    );
}

/// Without the grant the guest is told so and nothing is enqueued; past the cap, the
/// children up to it are enqueued and the next is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enqueueing_children_needs_the_grant_and_stops_at_the_cap() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let denied = plugins(None, &["reverse"]);
    let worker = WorkerProcess::serving(&redis, denied.path(), &[]);
    let chunks: Vec<String> = (0..10).map(|i| i.to_string()).collect();
    let status = run(&client, &plan("reverse", &chunks, false), 1).await;
    assert_eq!(status.record.state, JobState::Failed);
    let error = status.record.error.unwrap().message;
    assert!(
        error.contains("enqueueing jobs of reverse is not granted"),
        "{error}"
    );
    assert_eq!(count_jobs(&client, "reverse").await, 0);
    drop(worker);

    let capped = plugins(
        Some("[jobs]\nenqueue = [\"reverse\"]\nmax_children = 5\n"),
        &["reverse"],
    );
    let _worker = WorkerProcess::serving(&redis, capped.path(), &[]);
    let status = run(&client, &plan("reverse", &chunks, false), 1).await;
    assert_eq!(status.record.state, JobState::Failed);
    let error = status.record.error.unwrap().message;
    assert!(
        error.contains("may enqueue at most 5 child jobs"),
        "{error}"
    );
    assert_eq!(count_jobs(&client, "reverse").await, 5);
    assert_eq!(status.record.children.len(), 5);
}

/// Cancelling a parent that waits on its children cancels them too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_parent_cancels_its_unfinished_children() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let dir = plugins(Some("[jobs]\nenqueue = [\"count\"]\n"), &["count"]);
    let _worker = WorkerProcess::serving(&redis, dir.path(), &["--concurrency", "8"]);
    let chunks: Vec<String> = (0..3).map(|_| "100000 20".to_string()).collect();
    let parent = client
        .enqueue(
            &function("split"),
            &plan("count", &chunks, false),
            &EnqueueOptions::default(),
        )
        .await
        .unwrap();
    let children: Vec<JobId> = eventually(WAIT, "three running children", || async {
        let status = client.status(&parent).await.unwrap();
        if status.record.children.len() < 3 {
            return None;
        }
        let ids: Vec<JobId> = status
            .record
            .children
            .iter()
            .map(|c| c.parse().unwrap())
            .collect();
        for id in &ids {
            if client.status(id).await.unwrap().record.state != JobState::Running {
                return None;
            }
        }
        Some(ids)
    })
    .await;
    client.cancel(&parent).await.unwrap();
    for id in children.iter().chain([&parent]) {
        let status = client.wait(id, Some(WAIT), |_| {}).await.unwrap();
        assert_eq!(status.record.state, JobState::Cancelled, "{id}");
    }
}

/// A parent whose first attempt fails after enqueueing its children gets the same
/// children back on its second attempt: none is enqueued twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_parent_does_not_enqueue_its_children_twice() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let dir = plugins(Some("[jobs]\nenqueue = [\"reverse\"]\n"), &["reverse"]);
    let _worker = WorkerProcess::serving(&redis, dir.path(), &["--retry-backoff", "10ms"]);
    let chunks: Vec<String> = ["ab", "cd", "ef", "gh"].map(String::from).to_vec();
    let status = run(&client, &plan("reverse", &chunks, true), 2).await;
    assert_eq!(
        status.record.state,
        JobState::Succeeded,
        "{:?}",
        status.record.error
    );
    assert_eq!(status.record.attempt, 2);
    let outputs: Vec<String> = serde_json::from_slice(status.output.as_deref().unwrap()).unwrap();
    assert_eq!(outputs, ["ba", "dc", "fe", "hg"]);
    assert_eq!(count_jobs(&client, "reverse").await, 4);
    assert_eq!(status.record.children.len(), 4);
}

/// A project made by `wasmgear new --lang LANG` whose app is replaced by `app` (a child job
/// per line of the input, outputs combined), built, and run as function `name` in a worker:
/// it fans out through the worker like the Rust plugin.
async fn fan_out_through_an_sdk(lang: &str, app: &str, app_file: &str, name: &str) {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let work = tempfile::tempdir().unwrap();
    let project = work.path().join(name);
    let built = work.path().join("built");
    let run = |args: &[&str]| crate::support::wasmgear(args, &[]);
    let out = run(&[
        "new",
        name,
        "--lang",
        lang,
        "--dir",
        project.to_str().unwrap(),
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        crate::support::stderr(&out)
    );
    std::fs::copy(app, project.join(app_file)).unwrap();
    let out = run(&[
        "build",
        project.to_str().unwrap(),
        "--out",
        built.to_str().unwrap(),
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        crate::support::stderr(&out)
    );

    let dir = plugins(None, &["reverse"]);
    std::fs::remove_file(dir.path().join("split.wasm")).unwrap();
    let wasm = format!("{name}.wasm");
    std::fs::copy(built.join(&wasm), dir.path().join(&wasm)).unwrap();
    std::fs::write(
        dir.path().join(format!("{name}.toml")),
        "[jobs]\nenqueue = [\"reverse\"]\n",
    )
    .unwrap();
    let _worker = WorkerProcess::serving(&redis, dir.path(), &["--concurrency", "4"]);
    let id = client
        .enqueue(&function(name), b"ab\ncd\nef", &EnqueueOptions::default())
        .await
        .unwrap();
    let status = client.wait(&id, Some(WAIT), |_| {}).await.unwrap();
    assert_eq!(
        status.record.state,
        JobState::Succeeded,
        "{lang}: {:?}",
        status.record.error
    );
    assert_eq!(status.output.as_deref(), Some(&b"ba\ndc\nfe"[..]), "{lang}");
    assert_eq!(status.record.children.len(), 3, "{lang}");
}

/// The Python SDK (`plugins/split-python`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_parent_fans_out_through_the_sdk() {
    let app = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../plugins/split-python/app.py"
    );
    fan_out_through_an_sdk("python", app, "app.py", "splitpy").await;
}

/// The JavaScript SDK (`plugins/split-js`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_javascript_parent_fans_out_through_the_sdk() {
    let app = concat!(env!("CARGO_MANIFEST_DIR"), "/../plugins/split-js/app.js");
    fan_out_through_an_sdk("js", app, "app.js", "splitjs").await;
}

/// The C helper (`plugins/split-c`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_c_parent_fans_out_through_the_sdk() {
    let app = concat!(env!("CARGO_MANIFEST_DIR"), "/../plugins/split-c/app.c");
    fan_out_through_an_sdk("c", app, "app.c", "splitc").await;
}
