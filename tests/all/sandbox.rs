//! The per-job sandbox: hostile plugins end with the right error class, the worker keeps
//! running, and good jobs running beside them finish correctly.

use std::time::Duration;

use wasmgear_client::{EnqueueOptions, JobState, JobStatus};
use wasmgear_runtime::{Limits, Runtime, RuntimeConfig};
use wasmgear_worker::plugins::PluginRegistry;

use wasmgear_testkit::{TestRedis, TestWorker, TestWorkerOptions, artifact, function};

/// Every misbehaviour of `hostile`, at once, beside good jobs on the same node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_jobs_end_with_their_class_and_good_jobs_finish() {
    let redis = TestRedis::start();
    let options = TestWorkerOptions {
        runtime: RuntimeConfig {
            max_instances: 20,
            limits: Limits {
                memory_bytes: 64 << 20,
                output_bytes: 1 << 20,
                log_lines: 50,
                ..Limits::default()
            },
            fuel: false,
            cache: None,
        },
        config: wasmgear_worker::WorkerConfig {
            concurrency: 16,
            ..Default::default()
        },
        ..TestWorkerOptions::default()
    };
    let worker = TestWorker::start_with(&redis, &["hostile", "echo"], options).await;
    let client = redis.client().await;
    let once = |timeout_ms: u64| EnqueueOptions {
        max_attempts: Some(1),
        timeout: Some(Duration::from_millis(timeout_ms)),
        ..EnqueueOptions::default()
    };
    let hostile = function("hostile");
    let echo = function("echo");
    // (input, timeout, expected state, expected class, text the error or log must hold)
    let cases: Vec<(&str, u64, JobState, Option<&str>, &str)> = vec![
        (
            "loop",
            500,
            JobState::Failed,
            Some("timed-out"),
            "timeout of 500 ms",
        ),
        (
            "memory",
            30_000,
            JobState::Failed,
            Some("memory-limit"),
            "memory limit",
        ),
        (
            "recursion",
            30_000,
            JobState::Failed,
            Some("trap"),
            "stack overflowed: hostile::recurse",
        ),
        (
            "unreachable",
            30_000,
            JobState::Failed,
            Some("trap"),
            "unreachable code on purpose",
        ),
        (
            "divide",
            30_000,
            JobState::Failed,
            Some("trap"),
            "divide by zero",
        ),
        (
            "output 2000000",
            30_000,
            JobState::Failed,
            Some("output-too-large"),
            "2000000 bytes",
        ),
        (
            "log 100000",
            30_000,
            JobState::Succeeded,
            None,
            "log limit reached",
        ),
        (
            "print 100000",
            30_000,
            JobState::Succeeded,
            None,
            "[stdout] stdout line 0",
        ),
        (
            "read /etc/passwd",
            30_000,
            JobState::Failed,
            Some("guest-error"),
            "reading /etc/passwd refused",
        ),
        (
            "env HOME",
            30_000,
            JobState::Failed,
            Some("guest-error"),
            "environment variable HOME refused",
        ),
        (
            "socket 127.0.0.1:1",
            30_000,
            JobState::Failed,
            Some("guest-error"),
            "connecting to 127.0.0.1:1 refused",
        ),
    ];
    let mut hostile_ids = Vec::new();
    let mut good_ids = Vec::new();
    for (i, (input, timeout, ..)) in cases.iter().enumerate() {
        hostile_ids.push(
            client
                .enqueue(&hostile, input.as_bytes(), &once(*timeout))
                .await
                .unwrap(),
        );
        let good = format!("good job {i}");
        good_ids.push((
            client
                .enqueue(&echo, good.as_bytes(), &once(30_000))
                .await
                .unwrap(),
            good,
        ));
    }
    for ((input, _, state, class, text), id) in cases.iter().zip(&hostile_ids) {
        let status: JobStatus = client
            .wait(id, Some(Duration::from_secs(60)), |_| {})
            .await
            .unwrap();
        let log = client.logs(id).await.unwrap();
        assert_eq!(
            status.record.state, *state,
            "{input}: {:?}\n{log}",
            status.record.error
        );
        let error = status.record.error.clone();
        assert_eq!(
            error.as_ref().map(|e| e.class.as_str()),
            *class,
            "{input}: {error:?}"
        );
        let message = error.map(|e| e.message).unwrap_or_default();
        assert!(
            message.contains(text) || log.contains(text),
            "{input}: {text:?} in neither\n{message}\n{log}"
        );
    }
    for (id, good) in good_ids {
        let status = client
            .wait(&id, Some(Duration::from_secs(60)), |_| {})
            .await
            .unwrap();
        assert_eq!(status.output.as_deref(), Some(good.as_bytes()), "{id}");
    }
    // The worker is still up.
    let last = client
        .enqueue(&echo, b"still here", &EnqueueOptions::default())
        .await
        .unwrap();
    let status = client
        .wait(&last, Some(Duration::from_secs(30)), |_| {})
        .await
        .unwrap();
    assert_eq!(status.output.as_deref(), Some(&b"still here"[..]));
    worker.stop().await;
}

/// A trap's log holds the Wasm backtrace with function names, and the panic message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trap_leaves_its_backtrace_in_the_job_log() {
    let redis = TestRedis::start();
    let worker = TestWorker::start(&redis, &["hostile"]).await;
    let client = redis.client().await;
    let options = EnqueueOptions {
        max_attempts: Some(1),
        ..EnqueueOptions::default()
    };
    let id = client
        .enqueue(&function("hostile"), b"unreachable", &options)
        .await
        .unwrap();
    client
        .wait(&id, Some(Duration::from_secs(30)), |_| {})
        .await
        .unwrap();
    let log = client.logs(&id).await.unwrap();
    assert!(log.contains("--- attempt 1 ---"), "{log}");
    assert!(log.contains("unreachable code on purpose"), "{log}");
    assert!(
        log.contains("wasm backtrace") && log.contains("hostile"),
        "{log}"
    );
    worker.stop().await;
}

/// A component that does not implement the job world is refused with a message naming it.
#[test]
fn a_component_of_another_world_is_refused() {
    let runtime = Runtime::new(RuntimeConfig {
        max_instances: 2,
        ..RuntimeConfig::default()
    })
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(artifact("not-a-job"), dir.path().join("other.wasm")).unwrap();
    std::fs::copy(artifact("echo"), dir.path().join("echo.wasm")).unwrap();
    let (registry, problems) = PluginRegistry::load_dir(&runtime, dir.path()).unwrap();
    assert_eq!(registry.functions().len(), 1);
    let text = problems
        .iter()
        .map(|p| p.to_string())
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        text.contains("other.wasm")
            && text.contains("does not implement the wasmgear:job@0.1.0 world"),
        "{text}"
    );
}
