//! Child jobs (`wasmgear:job/jobs`): a plugin (`split`) that enqueues a child per chunk and
//! combines their outputs; the grant and the cap; a cancelled parent's children; a retried
//! parent that gets its children back instead of enqueueing them twice.

use std::time::Duration;

use wasmgear_client::{Client, EnqueueOptions, JobId, JobState, JobStatus};

use wasmgear_testkit::{TestRedis, WorkerProcess, artifact, eventually, function};

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
    let _worker = WorkerProcess::builder(&redis.url())
        .plugins(dir.path())
        .args(&["--concurrency", "8"])
        .start();
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
    let shown = wasmgear_testkit::stdout(&wasmgear_testkit::wasmgear(
        &["status", &status.id.to_string()],
        &env,
    ));
    assert!(shown.contains("children  100 (reverse:"), "{shown}");
    let shown = wasmgear_testkit::stdout(&wasmgear_testkit::wasmgear(
        &["status", &child.to_string()],
        &env,
    ));
    assert!(
        shown.contains(&format!("parent    {}", status.id)),
        "{shown}"
    );
}

/// The children of a job with a group join its group: a tenant's fan-out stays the
/// tenant's, within its limits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn children_join_their_parent_s_group() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let dir = plugins(
        Some("[jobs]\nenqueue = [\"reverse\"]\nmax_children = 10\n"),
        &["reverse"],
    );
    let _worker = WorkerProcess::builder(&redis.url())
        .plugins(dir.path())
        .start();
    let chunks: Vec<String> = (0..3).map(|i| format!("chunk {i}")).collect();
    let options = EnqueueOptions {
        group: Some("acme".into()),
        ..EnqueueOptions::default()
    };
    let id = client
        .enqueue(
            &function("split"),
            &plan("reverse", &chunks, false),
            &options,
        )
        .await
        .unwrap();
    let status = client.wait(&id, Some(WAIT), |_| {}).await.unwrap();
    assert_eq!(
        status.record.state,
        JobState::Succeeded,
        "{:?}",
        status.record.error
    );
    assert_eq!(status.record.group_id.as_deref(), Some("acme"));
    for child in &status.record.children {
        let child = client.status(&child.parse().unwrap()).await.unwrap();
        assert_eq!(
            child.record.group_id.as_deref(),
            Some("acme"),
            "{}",
            child.id
        );
    }
}

/// Without the grant the guest is told so and nothing is enqueued; past the cap, the
/// children up to it are enqueued and the next is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enqueueing_children_needs_the_grant_and_stops_at_the_cap() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let denied = plugins(None, &["reverse"]);
    let worker = WorkerProcess::builder(&redis.url())
        .plugins(denied.path())
        .start();
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
    let _worker = WorkerProcess::builder(&redis.url())
        .plugins(capped.path())
        .start();
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
    let _worker = WorkerProcess::builder(&redis.url())
        .plugins(dir.path())
        .args(&["--concurrency", "8"])
        .start();
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
    let _worker = WorkerProcess::builder(&redis.url())
        .plugins(dir.path())
        .args(&["--retry-backoff", "10ms"])
        .start();
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

/// A retried parent that asks for its children in another order (keyless) still gets each
/// child back by what it is, not by its place: the children of a keyless `enqueue` are named
/// by their function and input.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_parent_gets_its_children_back_whatever_their_order() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let dir = plugins(Some("[jobs]\nenqueue = [\"reverse\"]\n"), &["reverse"]);
    let _worker = WorkerProcess::builder(&redis.url())
        .plugins(dir.path())
        .args(&["--retry-backoff", "10ms"])
        .start();
    let input = serde_json::json!({
        "function": "reverse", "chunks": ["ab", "cd", "ef", "gh"], "fail_first": true,
        "reverse_on_retry": true,
    });
    let status = run(&client, input.to_string().as_bytes(), 2).await;
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
    let run = |args: &[&str]| wasmgear_testkit::wasmgear(args, &[]);
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
        wasmgear_testkit::stderr(&out)
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
        wasmgear_testkit::stderr(&out)
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
    let _worker = WorkerProcess::builder(&redis.url())
        .plugins(dir.path())
        .args(&["--concurrency", "4"])
        .start();
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

/// A running job of `parent`'s function leased by a plain worker, for tests that act as its
/// worker: its id and lease token.
async fn running_parent(redis: &TestRedis, client: &Client, name: &str) -> (JobId, String) {
    let id = client
        .enqueue(&function(name), b"parent", &EnqueueOptions::default())
        .await
        .unwrap();
    let queue = wasmgear_client::WorkerQueue::connect(&redis.url(), "w")
        .await
        .unwrap();
    let leases = queue
        .lease(
            &[wasmgear_proto::LeaseRequest::new(function(name))],
            1,
            Duration::from_secs(60),
        )
        .await
        .unwrap();
    assert_eq!(leases[0].info.id, id);
    (id, leases[0].token.clone())
}

/// Once a parent's cancel is asked for, or it has ended, it gets no new child (the call is
/// refused and no child is enqueued); a child enqueued while the cancel came (between the
/// parent being asked and the child being listed) is cancelled by the call that enqueued it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_or_ended_parent_gets_no_new_child() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let child_fn = function("kid");
    // Cancel asked for while it runs: refused, nothing enqueued.
    let (parent, _) = running_parent(&redis, &client, "mom").await;
    client.cancel(&parent).await.unwrap();
    let refused = client
        .enqueue_child(&parent, "k1", &child_fn, b"c", EnqueueOptions::default())
        .await
        .unwrap_err();
    assert!(
        matches!(refused, wasmgear_client::QueueError::ParentGone(..)),
        "{refused}"
    );
    assert_eq!(count_jobs(&client, "kid").await, 0);

    // Ended: refused too.
    let (parent, token) = running_parent(&redis, &client, "dad").await;
    let library = crate::support::library::Library::new(redis.raw().await, &function("dad"));
    let _: redis::Value = library
        .ok(
            "complete",
            &["0", "1", &parent.seq.to_string(), &token, "", "", ""],
        )
        .await;
    let refused = client
        .enqueue_child(&parent, "k1", &child_fn, b"c", EnqueueOptions::default())
        .await
        .unwrap_err();
    assert!(
        matches!(refused, wasmgear_client::QueueError::ParentGone(..)),
        "{refused}"
    );
    assert_eq!(count_jobs(&client, "kid").await, 0);

    // The cancel comes between the two steps: the child is listed, and `adopt` says the
    // parent is cancelling, so the enqueuer cancels it.
    let (parent, _) = running_parent(&redis, &client, "aunt").await;
    let aunt = crate::support::library::Library::new(redis.raw().await, &function("aunt"));
    let (_, status): (u64, String) = aunt.ok("adopt", &[&parent.seq.to_string(), ""]).await;
    assert_eq!(status, "running");
    client.cancel(&parent).await.unwrap();
    let child = client
        .enqueue(&child_fn, b"late", &EnqueueOptions::default())
        .await
        .unwrap();
    let (children, status): (u64, String) = aunt
        .ok("adopt", &[&parent.seq.to_string(), &child.to_string()])
        .await;
    assert_eq!((children, status.as_str()), (1, "cancelling"));
}

/// A child's `once` key goes with the child: once the child is forgotten, nothing of it is
/// kept in `ticks`, and the parent asking again (a retried parent) gets a new child instead
/// of the id of a job that no longer exists.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_s_once_key_goes_with_the_child() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let child_fn = function("brief");
    let (parent, _) = running_parent(&redis, &client, "keeper").await;
    let options = || EnqueueOptions {
        retention: Duration::from_secs(1),
        ..EnqueueOptions::default()
    };
    let first = client
        .enqueue_child(&parent, "k", &child_fn, b"c", options())
        .await
        .unwrap();
    assert!(first.created);
    let again = client
        .enqueue_child(&parent, "k", &child_fn, b"c", options())
        .await
        .unwrap();
    assert_eq!((again.id.seq, again.created), (first.id.seq, false));
    // The child runs and ends; a second after, its retention is over and the next call's
    // housekeeping forgets it.
    let library = crate::support::library::Library::new(redis.raw().await, &child_fn);
    let (_, token) = library
        .lease_rows(&["w", "w/1", "1", "30000", "1000", "3"])
        .await
        .remove(0);
    let _: redis::Value = library
        .ok(
            "complete",
            &["0", "1", &first.id.seq.to_string(), &token, "", "", ""],
        )
        .await;
    eventually(WAIT, "the child to be forgotten", || async {
        let _: redis::Value = library
            .ok("lease", &["w", "w/again", "1", "30000", "1000", "3"])
            .await;
        (library.state(first.id.seq).await == "missing").then_some(())
    })
    .await;
    let ticks: Vec<String> = redis::cmd("HKEYS")
        .arg(library.key("ticks"))
        .query_async(&mut redis.raw().await)
        .await
        .unwrap();
    assert!(ticks.is_empty(), "{ticks:?}");
    let third = client
        .enqueue_child(&parent, "k", &child_fn, b"c", options())
        .await
        .unwrap();
    assert!(third.created);
    assert_ne!(third.id.seq, first.id.seq);
    assert_eq!(library.state(third.id.seq).await, "queued");
}
