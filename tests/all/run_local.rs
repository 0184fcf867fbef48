//! `wasmgear run`: one job of a plugin file, run here with no Redis and no worker, in the
//! worker's sandbox with the plugin's manifest; exit codes as `enqueue --wait`.

use std::time::Duration;

use wasmgear_testkit::{
    WorkerProcess, artifact, eventually_sync, stderr, stdout, wasmgear, wasmgear_with_stdin,
};

/// A directory holding `artifact` as `name.wasm`, with `manifest` as `name.toml` if given.
fn plugin(name: &str, artifact_name: &str, manifest: Option<&str>) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(format!("{name}.wasm"));
    std::fs::copy(artifact(artifact_name), &path).unwrap();
    if let Some(manifest) = manifest {
        std::fs::write(dir.path().join(format!("{name}.toml")), manifest).unwrap();
    }
    (dir, path.to_str().unwrap().to_string())
}

/// Input from the argument, stdin or a file; output on stdout; progress and the job's log on
/// stderr; a failure exits 1 with the guest's error; no Redis anywhere.
#[test]
fn runs_a_job_from_the_argument_stdin_or_a_file() {
    let (_echo, echo) = plugin("echo", "echo", None);
    let out = wasmgear(&["run", &echo, "hello"], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "hello");

    let (_reverse, reverse) = plugin("reverse", "reverse", None);
    let out = wasmgear_with_stdin(&["run", &reverse, "-"], &[], b"abc");
    assert_eq!((out.status.code(), stdout(&out)), (Some(0), "cba".into()));
    let input = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(input.path(), b"from a file").unwrap();
    let out = wasmgear(
        &[
            "run",
            &reverse,
            "--input-file",
            input.path().to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(stdout(&out), "elif a morf");

    let (_count, count) = plugin("count", "count", None);
    let out = wasmgear(&["run", &count, "3 10"], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "counted to 3");
    let err = stderr(&out);
    for line in [
        "progress 1/3 step 1 of 3",
        "progress 3/3 step 3 of 3",
        "INFO  job count:0: counting to 3",
    ] {
        assert!(err.contains(line), "{line}: {err}");
    }

    let (_fail, fail) = plugin("fail", "fail", None);
    let out = wasmgear(&["run", &fail, "boom"], &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("ERROR [guest-error] failed on purpose: boom"),
        "{}",
        stderr(&out)
    );
    assert!(stdout(&out).is_empty());
}

/// The plugin's manifest applies: its limits (a 300 ms timeout stops a loop, exit 1) and
/// the function names it serves; `--timeout` shortens a job.
#[test]
fn the_manifest_and_limits_apply() {
    let (_tight, tight) = plugin(
        "tight",
        "hostile",
        Some("[limits]\nmemory = \"16MiB\"\ntimeout = \"300ms\"\n"),
    );
    let out = wasmgear(&["run", &tight, "loop"], &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("[timed-out]") && stderr(&out).contains("300 ms"),
        "{}",
        stderr(&out)
    );
    let out = wasmgear(&["run", &tight, "memory"], &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("[memory-limit]"), "{}", stderr(&out));

    let (_spin, spin) = plugin("spin", "spin", None);
    let out = wasmgear(&["run", &spin, "forever", "--timeout", "200ms"], &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("timeout of 200 ms"),
        "{}",
        stderr(&out)
    );

    let (_two, two) = plugin("two", "echo", Some("functions = [\"first\", \"second\"]\n"));
    let out = wasmgear(&["run", &two, "--function", "second", "x"], &[]);
    assert_eq!((out.status.code(), stdout(&out)), (Some(0), "x".into()));
    let out = wasmgear(&["run", &two, "--function", "third", "x"], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("serves first, second"),
        "{}",
        stderr(&out)
    );
}

/// What cannot run is refused in one sentence (exit 2): no such file, no component, an
/// unreadable input file.
#[test]
fn bad_plugins_and_inputs_are_refused() {
    let out = wasmgear(&["run", "/no/such/plugin.wasm"], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("cannot read plugin"),
        "{}",
        stderr(&out)
    );
    let not_wasm = tempfile::NamedTempFile::with_suffix(".wasm").unwrap();
    std::fs::write(not_wasm.path(), b"hello").unwrap();
    let out = wasmgear(&["run", not_wasm.path().to_str().unwrap()], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("not a WebAssembly component"),
        "{}",
        stderr(&out)
    );
    let (_echo, echo) = plugin("echo", "echo", None);
    let out = wasmgear(&["run", &echo, "--input-file", "/no/such/input"], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("cannot read the input file"),
        "{}",
        stderr(&out)
    );
}

/// Ctrl-C asks the job to stop, as a cancel would: it stops at its next check, exit 3.
#[test]
fn an_interrupt_cancels_the_job() {
    let (_count, count) = plugin("count", "count", None);
    let mut run = WorkerProcess::spawn_command(&["run", &count, "200 50"], &[]);
    // `run` prints the job's progress as its output, on purpose: the first report says the
    // job runs.
    eventually_sync(Duration::from_secs(30), "the job's first progress", || {
        run.log().contains("progress 1/200")
    });
    run.signal("INT");
    assert_eq!(
        run.wait_exit(Duration::from_secs(30)),
        Some(3),
        "{}",
        run.log()
    );
    assert!(run.log().contains("[cancelled]"), "{}", run.log());
}

/// `replay` runs a failed job again here on the exact build its attempt ran on (found by hash
/// in a directory, whatever the file's name), writing nothing to the queue; through another
/// build (`--plugin`) it tries a fix on the same input, and `--requeue` enqueues it for real;
/// a build that cannot be found is said plainly (exit 5).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_runs_a_job_on_the_build_it_ran_on() {
    let redis = wasmgear_testkit::TestRedis::start();
    let (served, _) = plugin("flaky", "fail", None);
    let worker = WorkerProcess::builder(&redis.url())
        .plugins(served.path())
        .start();
    let client = redis.client().await;
    let once = wasmgear_client::EnqueueOptions {
        max_attempts: Some(1),
        tags: vec!["nightly".into()],
        ..wasmgear_client::EnqueueOptions::default()
    };
    let id = client
        .enqueue(&wasmgear_testkit::function("flaky"), b"the input", &once)
        .await
        .unwrap();
    let failed = client
        .wait(&id, Some(Duration::from_secs(30)), |_| {})
        .await
        .unwrap();
    assert_eq!(failed.record.state.as_str(), "failed");
    drop(worker);
    let url = redis.url();
    let env = [("WASMGEAR_REDIS_URL", url.as_str())];
    let id_text = id.to_string();

    // `status` names the build each attempt ran on.
    let shown = stdout(&wasmgear(&["status", &id_text], &env));
    let version = &failed.record.history[0].version.clone().unwrap();
    assert!(
        shown.contains("history   attempt 1 guest-error (worker ")
            && shown.contains(&format!(
                ", plugin {version}): failed on purpose: the input"
            )),
        "{shown}"
    );

    // The same build, under another name in another directory.
    let (archive, _) = plugin("old-build", "fail", None);
    let dir = archive.path().to_str().unwrap();
    let keys = || async {
        let mut conn = redis.raw().await;
        redis::cmd("DBSIZE")
            .query_async::<u64>(&mut conn)
            .await
            .unwrap()
    };
    let size = keys().await;
    let out = wasmgear(&["replay", &id_text, "--plugins", dir], &env);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("failed on purpose: the input"), "{err}");
    assert!(
        err.contains(&format!("replaying {id_text} attempt 1 locally")),
        "{err}"
    );
    assert!(
        err.contains("failing on purpose on attempt 1 of 1"),
        "{err}"
    );
    assert_eq!(keys().await, size, "a replay writes nothing to the queue");

    // Another build (the fix): the job's input through it, then enqueued for real.
    let (_fix, fix) = plugin("fixed", "echo", None);
    let out = wasmgear(&["replay", &id_text, "--plugin", &fix, "--requeue"], &env);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "the input");
    assert!(
        stderr(&out).contains("the attempt ran on"),
        "{}",
        stderr(&out)
    );
    assert!(
        stderr(&out).contains(&format!("requeued the input of {id_text} as flaky:2")),
        "{}",
        stderr(&out)
    );
    let again = client.status(&"flaky:2".parse().unwrap()).await.unwrap();
    assert_eq!(again.record.tags, vec!["nightly".to_string()]);
    assert_eq!(
        client
            .input(&"flaky:2".parse().unwrap())
            .await
            .unwrap()
            .as_deref(),
        Some(&b"the input"[..])
    );

    // A directory without that build, an attempt that did not end, no plugin named.
    let (other, _) = plugin("flaky", "echo", None);
    let out = wasmgear(
        &[
            "replay",
            &id_text,
            "--plugins",
            other.path().to_str().unwrap(),
        ],
        &env,
    );
    assert_eq!(out.status.code(), Some(5), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("which is not among the plugins of"),
        "{}",
        stderr(&out)
    );
    let out = wasmgear(
        &["replay", &id_text, "--attempt", "2", "--plugins", dir],
        &env,
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("has no ended attempt 2; its ended attempts: 1"),
        "{}",
        stderr(&out)
    );
    // Without a directory or a file, the build is looked for in the deployed-plugin store,
    // then in the compile cache (of a home where `run` compiled it; the manifest is unknown
    // there, so the defaults apply).
    let fresh = tempfile::tempdir().unwrap();
    let fresh_home = fresh.path().to_str().unwrap();
    let env_fresh = [
        ("WASMGEAR_REDIS_URL", url.as_str()),
        ("WASMGEAR_HOME", fresh_home),
    ];
    let out = wasmgear(&["replay", &id_text], &env_fresh);
    assert_eq!(out.status.code(), Some(5));
    assert!(
        stderr(&out).contains(
            "neither in the deployed-plugin store (`wasmgear deploy list`) nor in the compile cache"
        ),
        "{}",
        stderr(&out)
    );
    let archived = archive.path().join("old-build.wasm");
    let out = wasmgear(&["run", archived.to_str().unwrap(), "x"], &env_fresh);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let out = wasmgear(&["replay", &id_text], &env_fresh);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains(&format!(
            "locally on version {version} from the compile cache"
        )),
        "{err}"
    );
    assert!(
        err.contains("running with the default limits and no grants"),
        "{err}"
    );
    assert!(err.contains("failed on purpose: the input"), "{err}");
    let out = wasmgear(&["replay", "flaky:99", "--plugins", dir], &env);
    assert_eq!(out.status.code(), Some(5), "{}", stderr(&out));
}
