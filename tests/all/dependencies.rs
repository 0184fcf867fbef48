//! A job's dependencies as its handler reads them: the jobs of its `after` list in order,
//! how each stands (without its output), and their outputs a piece at a time.

use std::time::Duration;

use wasmgear_client::{EnqueueOptions, JobState};
use wasmgear_proto::{ErrorClass, JobId};
use wasmgear_testkit::{TestRedis, TestWorker, WorkerProcess, artifact, function};

use crate::support::hand::Hand;

const WAIT: Duration = Duration::from_secs(60);

/// Dependencies in two functions, one succeeded, one failed, one never made: the list keeps
/// the `after` order, the outcomes name each one's state, output size and error, and the
/// output reads in pieces.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dependent_reads_how_its_dependencies_stand_and_their_outputs_in_pieces() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let hand = Hand::connect(&redis.url(), "hand").await;
    let (fetch, parse, join) = (function("fetch"), function("parse"), function("join"));
    let plain = EnqueueOptions::default;
    let fetched = client.enqueue(&fetch, b"a", &plain()).await.unwrap();
    let parsed = client.enqueue(&parse, b"b", &plain()).await.unwrap();
    let broken = client.enqueue(&parse, b"c", &plain()).await.unwrap();
    let output: Vec<u8> = (0..=255u8).cycle().take(3000).collect();
    hand.succeed(&hand.next(&fetch).await, &output).await;
    let after = vec![parsed.clone(), fetched.clone(), broken.clone()];
    let dependent = client
        .enqueue(
            &join,
            b"",
            &EnqueueOptions {
                after: after.clone(),
                ..EnqueueOptions::default()
            },
        )
        .await
        .unwrap();
    hand.succeed(&hand.next(&parse).await, b"parsed").await;
    let lease = hand.next(&parse).await;
    assert_eq!(
        hand.fail(&lease, ErrorClass::GuestError, false).await,
        JobState::Failed
    );
    assert_eq!(client.dependencies(&dependent).await.unwrap(), after);

    let never: JobId = "fetch:99".parse().unwrap();
    let asked = [
        fetched.clone(),
        never.clone(),
        parsed.clone(),
        broken.clone(),
    ];
    let outcomes = client.outcomes(&asked).await.unwrap();
    let seen: Vec<(JobId, Option<JobState>, u64, bool)> = outcomes
        .iter()
        .map(|o| (o.id.clone(), o.state, o.output_bytes, o.error.is_some()))
        .collect();
    assert_eq!(
        seen,
        [
            (fetched.clone(), Some(JobState::Succeeded), 3000, false),
            (never, None, 0, false),
            (parsed.clone(), Some(JobState::Succeeded), 6, false),
            (broken.clone(), Some(JobState::Failed), 0, true),
        ]
    );

    // The output a piece at a time: 1,024 bytes, then the rest, then nothing past its end.
    let mut read = Vec::new();
    loop {
        let piece = client
            .output_piece(&fetched, read.len() as u64, 1024)
            .await
            .unwrap()
            .expect("a succeeded job's output is kept");
        if piece.is_empty() {
            break;
        }
        assert!(piece.len() <= 1024);
        read.extend(piece);
    }
    assert_eq!(read, output);
    assert_eq!(client.output_piece(&broken, 0, 10).await.unwrap(), None);
    assert_eq!(client.output_piece(&dependent, 0, 10).await.unwrap(), None);
}

/// Over a thousand dependencies of one function are read in pages of at most a thousand a
/// call, in the order asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outcomes_of_more_jobs_than_one_call_takes_keep_their_order() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let f = function("many");
    let inputs: Vec<Vec<u8>> = (0..1500).map(|i| i.to_string().into_bytes()).collect();
    let batch: Vec<(&[u8], EnqueueOptions)> = inputs
        .iter()
        .map(|input| (input.as_slice(), EnqueueOptions::default()))
        .collect();
    let mut ids = client.enqueue_many(&f, &batch).await.unwrap();
    ids.reverse();
    let outcomes = client.outcomes(&ids).await.unwrap();
    assert_eq!(
        outcomes.iter().map(|o| o.id.clone()).collect::<Vec<_>>(),
        ids
    );
    assert!(
        outcomes
            .iter()
            .all(|o| o.state == Some(JobState::Queued) && o.output_bytes == 0)
    );
}

/// A fan-in run by a real worker: `join`, after three `reverse` jobs, reads their outputs
/// through `wasmgear:job/dependencies` and writes one per line, in the order of its `after`
/// list (not the order they were enqueued); an output over the SDK's 1 MiB piece is read
/// back whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn join_receives_its_dependencies_outputs_in_the_order_of_after() {
    let redis = TestRedis::start();
    let worker = TestWorker::start(&redis, &["reverse", "join"]).await;
    let client = redis.client().await;
    let (reverse, join) = (function("reverse"), function("join"));
    let plain = EnqueueOptions::default;
    let first = client.enqueue(&reverse, b"abc", &plain()).await.unwrap();
    let second = client.enqueue(&reverse, b"xyz", &plain()).await.unwrap();
    // A large output crosses the SDK's piece size: it is read back whole.
    let big: String = "0123456789".repeat(150_000);
    let third = client
        .enqueue(&reverse, big.as_bytes(), &plain())
        .await
        .unwrap();
    let joined = client
        .enqueue(
            &join,
            b"",
            &EnqueueOptions {
                after: vec![second.clone(), first.clone(), third.clone()],
                ..EnqueueOptions::default()
            },
        )
        .await
        .unwrap();
    let status = client.wait(&joined, Some(WAIT), |_| {}).await.unwrap();
    assert_eq!(status.record.state, JobState::Succeeded, "{status:?}");
    let reversed_big: String = big.chars().rev().collect();
    assert_eq!(
        status.output.unwrap(),
        format!("zyx\ncba\n{reversed_big}").into_bytes()
    );
    drop(worker);
}

/// Builds `app` (the app file of an example under `plugins/`) with `wasmgear new --lang LANG`
/// and `wasmgear build` as plugin `name`, runs it on a real worker process with `reverse`, and
/// joins two `reverse` jobs through it: its output is theirs in the order of `after`, one per
/// line.
async fn join_through_an_sdk(lang: &str, app: &str, app_file: &str, name: &str) {
    let redis = TestRedis::start();
    let work = tempfile::tempdir().unwrap();
    let project = work.path().join(name);
    let built = work.path().join("built");
    let run = |args: &[&str]| wasmgear_testkit::wasmgear(args, &[]);
    let project_dir = project.to_str().unwrap();
    let out = run(&["new", name, "--lang", lang, "--dir", project_dir]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        wasmgear_testkit::stderr(&out)
    );
    std::fs::copy(app, project.join(app_file)).unwrap();
    let out = run(&["build", project_dir, "--out", built.to_str().unwrap()]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        wasmgear_testkit::stderr(&out)
    );
    let plugins = tempfile::tempdir().unwrap();
    let wasm = format!("{name}.wasm");
    std::fs::copy(built.join(&wasm), plugins.path().join(&wasm)).unwrap();
    std::fs::copy(artifact("reverse"), plugins.path().join("reverse.wasm")).unwrap();
    let _worker = WorkerProcess::builder(&redis.url())
        .plugins(plugins.path())
        .start();

    let client = redis.client().await;
    let reverse = function("reverse");
    let plain = EnqueueOptions::default;
    let first = client.enqueue(&reverse, b"ab", &plain()).await.unwrap();
    let second = client.enqueue(&reverse, b"cd", &plain()).await.unwrap();
    let joined = client
        .enqueue(
            &function(name),
            b"",
            &EnqueueOptions {
                after: vec![second, first],
                ..EnqueueOptions::default()
            },
        )
        .await
        .unwrap();
    let status = client.wait(&joined, Some(WAIT), |_| {}).await.unwrap();
    assert_eq!(
        status.record.state,
        JobState::Succeeded,
        "{lang}: {:?}",
        status.record.error
    );
    assert_eq!(status.output.as_deref(), Some(&b"dc\nba"[..]), "{lang}");
}

/// The Python SDK (`plugins/join-python`): `wasmgear.dependencies()`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_plugin_joins_its_dependencies_through_the_sdk() {
    let app = concat!(env!("CARGO_MANIFEST_DIR"), "/../plugins/join-python/app.py");
    join_through_an_sdk("python", app, "app.py", "joinpy").await;
}

/// The JavaScript SDK (`plugins/join-js`): `dependencies()`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_javascript_plugin_joins_its_dependencies_through_the_sdk() {
    let app = concat!(env!("CARGO_MANIFEST_DIR"), "/../plugins/join-js/app.js");
    join_through_an_sdk("js", app, "app.js", "joinjs").await;
}

/// The C helper (`plugins/join-c`): `wasmgear_dependencies_next` and
/// `wasmgear_dependency_output`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_c_plugin_joins_its_dependencies_through_the_sdk() {
    let app = concat!(env!("CARGO_MANIFEST_DIR"), "/../plugins/join-c/app.c");
    join_through_an_sdk("c", app, "app.c", "joinc").await;
}
