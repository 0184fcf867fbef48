//! Checkpoints and batch plugins through the Python, JavaScript and C SDKs: the examples
//! `plugins/resume-{python,js,c}` and `plugins/sum-batch-{python,js,c}` are built with
//! `wasmgear new` and `wasmgear build` (the build scripts pick the world: `resumable`, or
//! `batch` for a batch handler), served by a real worker process, and must end their jobs as
//! the Rust examples `resume` and `sum-batch` do (tests/all/checkpoints.rs,
//! tests/all/batch_plugins.rs), with the same outputs and errors.

use std::path::Path;
use std::time::Duration;

use wasmgear_client::{Client, EnqueueOptions, JobState, JobStatus};
use wasmgear_proto::JobId;
use wasmgear_testkit::{TestRedis, WorkerProcess, function, stderr};

/// Long enough for a worker to compile a Python or JavaScript component (seconds) on a busy
/// machine, and for a retried job's backoff.
const WAIT: Duration = Duration::from_secs(120);

/// Builds the example `plugins/EXAMPLE` (its app file in `lang`) into `out` as plugin
/// `EXAMPLE`: a project from `wasmgear new` with the example's app file in place of the
/// template's, built by `wasmgear build`.
fn build_example(lang: &str, example: &str, out: &Path) {
    let app = match lang {
        "python" => "app.py",
        "js" => "app.js",
        "c" => "app.c",
        _ => panic!("no SDK for {lang}"),
    };
    let work = tempfile::tempdir().unwrap();
    let project = work.path().join(example);
    let run = |args: &[&str]| wasmgear_testkit::wasmgear(args, &[]);
    let project_dir = project.to_str().unwrap();
    let made = run(&["new", example, "--lang", lang, "--dir", project_dir]);
    assert_eq!(made.status.code(), Some(0), "{}", stderr(&made));
    let source = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../plugins")
        .join(example)
        .join(app);
    std::fs::copy(&source, project.join(app)).unwrap();
    let built = run(&["build", project_dir, "--out", out.to_str().unwrap()]);
    assert_eq!(
        built.status.code(),
        Some(0),
        "{example}: {}",
        stderr(&built)
    );
    assert!(out.join(format!("{example}.wasm")).is_file());
}

/// Job `id` once it has ended.
async fn ended(client: &Client, id: &JobId) -> JobStatus {
    client.wait(id, Some(WAIT), |_| {}).await.unwrap();
    client.status(id).await.unwrap()
}

fn output(status: &JobStatus) -> String {
    String::from_utf8(status.output.clone().unwrap_or_default()).unwrap()
}

/// `resume` in `lang`: 10 steps, the first attempt fails on purpose at step 5 after saving
/// each position; the second resumes from the checkpoint and succeeds.
async fn resumes_from_its_checkpoint(lang: &str) {
    let example = format!("resume-{lang}");
    let plugins = tempfile::tempdir().unwrap();
    build_example(lang, &example, plugins.path());
    let redis = TestRedis::start();
    let _worker = WorkerProcess::builder(&redis.url())
        .plugins(plugins.path())
        .start();
    let client = redis.client().await;
    let options = EnqueueOptions {
        max_attempts: Some(3),
        ..EnqueueOptions::default()
    };
    let id = client
        .enqueue(&function(&example), b"10", &options)
        .await
        .unwrap();
    let status = ended(&client, &id).await;
    assert_eq!(
        status.record.state,
        JobState::Succeeded,
        "{lang}: {:?}",
        status.record.error
    );
    assert_eq!(output(&status), "resumed from 5", "{lang}");
    assert_eq!(status.record.attempt, 2, "{lang}");
}

/// `sum-batch` in `lang`, with four jobs ready before the worker starts (one batch): a sum,
/// a sum of nothing, a word that fails its job for good, and a job that asks for a retry and
/// succeeds in a batch of its own.
async fn ends_each_job_of_a_batch_on_its_own(lang: &str) {
    let example = format!("sum-batch-{lang}");
    let plugins = tempfile::tempdir().unwrap();
    build_example(lang, &example, plugins.path());
    std::fs::write(
        plugins.path().join(format!("{example}.toml")),
        "batch = { max = 10, wait = \"20ms\" }\n",
    )
    .unwrap();
    let redis = TestRedis::start();
    let client = redis.client().await;
    let options = EnqueueOptions {
        max_attempts: Some(3),
        ..EnqueueOptions::default()
    };
    let inputs = ["1 2 3", "", "1 x", "flaky 4"];
    let jobs: Vec<(&[u8], EnqueueOptions)> = inputs
        .iter()
        .map(|input| (input.as_bytes(), options.clone()))
        .collect();
    let ids = client
        .enqueue_many(&function(&example), &jobs)
        .await
        .unwrap();
    let _worker = WorkerProcess::builder(&redis.url())
        .plugins(plugins.path())
        .start();
    let mut statuses = Vec::new();
    for id in &ids {
        statuses.push(ended(&client, id).await);
    }

    for (i, sum) in [(0, "6"), (1, "0")] {
        assert_eq!(
            statuses[i].record.state,
            JobState::Succeeded,
            "{lang}: {:?}",
            statuses[i].record.error
        );
        assert_eq!(
            output(&statuses[i]),
            format!("{sum} (in a batch of 4)"),
            "{lang}"
        );
    }
    let failed = &statuses[2].record;
    assert_eq!(failed.state, JobState::Failed, "{lang}");
    let error = failed.error.as_ref().unwrap();
    assert!(
        error.message.contains("\"x\" is not a whole number"),
        "{lang}: {}",
        error.message
    );
    assert_eq!(failed.attempt, 1, "{lang}: a fail is for good");
    let flaky = &statuses[3];
    assert_eq!(
        flaky.record.state,
        JobState::Succeeded,
        "{lang}: {:?}",
        flaky.record.error
    );
    assert_eq!(flaky.record.attempt, 2, "{lang}");
    assert_eq!(output(flaky), "4 (in a batch of 1)", "{lang}");
}

/// The Python SDK's checkpoints (`wasmgear.resume_each`), built with `-w resumable`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_plugin_resumes_from_its_checkpoint() {
    resumes_from_its_checkpoint("python").await;
}

/// The JavaScript SDK's checkpoints (`resumeEach`), built with `--world-name resumable`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_javascript_plugin_resumes_from_its_checkpoint() {
    resumes_from_its_checkpoint("js").await;
}

/// The C SDK's checkpoints (`wasmgear_resume_each`), on the `resumable` world's bindings.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_c_plugin_resumes_from_its_checkpoint() {
    resumes_from_its_checkpoint("c").await;
}

/// The Python SDK's batch plugins (`@wasmgear.batch`, `wasmgear.each`), built with
/// `-w batch`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_batch_plugin_ends_each_job_on_its_own() {
    ends_each_job_of_a_batch_on_its_own("python").await;
}

/// The JavaScript SDK's batch plugins (`batch`, `each`), built with `--world-name batch`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_javascript_batch_plugin_ends_each_job_on_its_own() {
    ends_each_job_of_a_batch_on_its_own("js").await;
}

/// The C SDK's batch plugins (`WASMGEAR_BATCH`, `wasmgear_each`), on the bindings of
/// `wasmgear bindings c --world batch`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_c_batch_plugin_ends_each_job_on_its_own() {
    ends_each_job_of_a_batch_on_its_own("c").await;
}
