//! Plugin manifests: functions, limits, concurrency, job defaults and capabilities, all
//! denied unless granted.

use std::time::Duration;

use wasmgear_client::{EnqueueOptions, JobState};
use wasmgear_runtime::{Runtime, RuntimeConfig};
use wasmgear_worker::plugins::PluginRegistry;

use wasmgear_testkit::{TestRedis, TestWorker, TestWorkerOptions, artifact, function};

const WAIT: Option<Duration> = Some(Duration::from_secs(30));

/// A plugin directory holding `plugin` as `name.wasm` with `manifest` as `name.toml`.
fn dir_with(name: &str, plugin: &str, manifest: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(artifact(plugin), dir.path().join(format!("{name}.wasm"))).unwrap();
    std::fs::write(dir.path().join(format!("{name}.toml")), manifest).unwrap();
    dir
}

/// Enqueues `input` for `f` (one attempt) and waits for the end.
async fn run_once(
    client: &wasmgear_client::Client,
    f: &str,
    input: &str,
) -> wasmgear_client::JobStatus {
    let once = EnqueueOptions {
        max_attempts: Some(1),
        ..EnqueueOptions::default()
    };
    let id = client
        .enqueue(&function(f), input.as_bytes(), &once)
        .await
        .unwrap();
    client.wait(&id, WAIT, |_| {}).await.unwrap()
}

/// Granted environment variables, directories and configuration values reach the guest;
/// nothing else does (the worker's own environment is never inherited).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capabilities_are_granted_by_the_manifest_only() {
    let redis = TestRedis::start();
    let data = tempfile::tempdir().unwrap();
    std::fs::write(data.path().join("greeting.txt"), "hello from the host").unwrap();
    let manifest = format!(
        "[env]\nGREETING = \"hi\"\n[[dirs]]\nhost = {:?}\nguest = \"/data\"\n[config]\nquality = \"85\"\n",
        data.path()
    );
    let granted = dir_with("granted", "hostile", &manifest);
    std::fs::copy(artifact("hostile"), granted.path().join("strict.wasm")).unwrap();
    let worker = TestWorker::start_on(&redis.url(), granted, TestWorkerOptions::default()).await;
    let client = redis.client().await;

    let ok = |status: &wasmgear_client::JobStatus| {
        String::from_utf8(status.output.clone().unwrap_or_default()).unwrap()
    };
    assert_eq!(
        ok(&run_once(&client, "granted", "env GREETING").await),
        "hi"
    );
    assert_eq!(
        ok(&run_once(&client, "granted", "read /data/greeting.txt").await),
        "hello from the host"
    );
    assert_eq!(
        ok(&run_once(&client, "granted", "config quality").await),
        "85"
    );
    // Not granted: the worker's own environment, other files, other keys; nothing for the
    // plugin without a manifest.
    for (f, input) in [
        ("granted", "env PATH"),
        ("granted", "read /etc/hostname"),
        ("granted", "config other"),
        ("strict", "env GREETING"),
        ("strict", "read /data/greeting.txt"),
        ("strict", "config quality"),
    ] {
        let status = run_once(&client, f, input).await;
        assert_eq!(
            status.record.state,
            JobState::Failed,
            "{f} {input} was allowed"
        );
    }
    worker.stop().await;
}

/// A manifest can serve several functions with one plugin, and set the job defaults.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn functions_and_job_defaults_come_from_the_manifest() {
    let redis = TestRedis::start();
    let dir = dir_with(
        "failer",
        "fail",
        "functions = [\"flaky\", \"broken\"]\nmax_attempts = 2\ntimeout = \"7s\"\n",
    );
    let worker = TestWorker::start_on(&redis.url(), dir, TestWorkerOptions::default()).await;
    let client = redis.client().await;
    for f in ["flaky", "broken"] {
        // No attempts given: the manifest's 2 apply (not the queue's 3).
        let id = client
            .enqueue(&function(f), b"retry", &EnqueueOptions::default())
            .await
            .unwrap();
        let status = client.wait(&id, WAIT, |_| {}).await.unwrap();
        assert_eq!(
            (status.record.attempt, status.record.max_attempts),
            (2, 2),
            "{f}"
        );
        assert_eq!(status.record.timeout_ms, 7000, "{f}");
    }
    // A job that names its own values keeps them.
    let own = EnqueueOptions {
        max_attempts: Some(1),
        timeout: Some(Duration::from_secs(3)),
        ..EnqueueOptions::default()
    };
    let id = client
        .enqueue(&function("flaky"), b"retry", &own)
        .await
        .unwrap();
    let status = client.wait(&id, WAIT, |_| {}).await.unwrap();
    assert_eq!((status.record.attempt, status.record.timeout_ms), (1, 3000));
    worker.stop().await;
}

/// Manifest limits tighten the worker's: memory, output size, and the longest timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manifest_limits_apply_to_its_jobs() {
    let redis = TestRedis::start();
    let dir = dir_with(
        "tight",
        "hostile",
        "[limits]\nmemory = \"16MiB\"\noutput = 100\ntimeout = \"300ms\"\n",
    );
    let worker = TestWorker::start_on(&redis.url(), dir, TestWorkerOptions::default()).await;
    let client = redis.client().await;
    let status = run_once(&client, "tight", "memory").await;
    let error = status.record.error.unwrap();
    assert_eq!(error.class, "memory-limit");
    assert!(
        error.message.contains(&(16u64 << 20).to_string()),
        "{}",
        error.message
    );
    let status = run_once(&client, "tight", "output 101").await;
    assert_eq!(status.record.error.unwrap().class, "output-too-large");
    assert_eq!(
        run_once(&client, "tight", "output 100")
            .await
            .output
            .map(|o| o.len()),
        Some(100)
    );
    // The job asked for 60 s (the default); the plugin allows 300 ms.
    let status = run_once(&client, "tight", "loop").await;
    let error = status.record.error.unwrap();
    assert_eq!(error.class, "timed-out");
    assert!(error.message.contains("300 ms"), "{}", error.message);
    worker.stop().await;
}

/// `concurrency = 1` runs the plugin's jobs one after the other, even on a wide worker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugin_concurrency_is_respected() {
    let redis = TestRedis::start();
    let dir = dir_with("serial", "count", "concurrency = 1\n");
    std::fs::copy(artifact("echo"), dir.path().join("echo.wasm")).unwrap();
    let worker = TestWorker::start_on(&redis.url(), dir, TestWorkerOptions::default()).await;
    let client = redis.client().await;
    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.push(
            client
                .enqueue(&function("serial"), b"3 30", &EnqueueOptions::default())
                .await
                .unwrap(),
        );
    }
    // Other plugins are not held up by it.
    let echo = client
        .enqueue(&function("echo"), b"meanwhile", &EnqueueOptions::default())
        .await
        .unwrap();
    let echo = client.wait(&echo, WAIT, |_| {}).await.unwrap();
    let mut spans = Vec::new();
    for id in &ids {
        let status = client.wait(id, WAIT, |_| {}).await.unwrap();
        let attempt = &status.record.history[0];
        spans.push((attempt.started_ms.unwrap(), attempt.ended_ms));
    }
    spans.sort();
    for pair in spans.windows(2) {
        assert!(pair[1].0 >= pair[0].1, "jobs overlapped: {spans:?}");
    }
    assert!(
        echo.record.history[0].ended_ms < spans[2].0,
        "echo waited for the serial plugin"
    );
    worker.stop().await;
}

/// With fuel metering on, a manifest's fuel budget ends a job that uses it up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fuel_budget_ends_a_runaway_job() {
    let redis = TestRedis::start();
    let dir = dir_with("metered", "hostile", "[limits]\nfuel = 10_000_000\n");
    let mut options = TestWorkerOptions::default();
    options.runtime.fuel = true;
    let worker = TestWorker::start_on(&redis.url(), dir, options).await;
    let client = redis.client().await;
    let status = run_once(&client, "metered", "loop").await;
    assert_eq!(status.record.error.unwrap().class, "out-of-fuel");
    worker.stop().await;
}

/// A bad manifest is refused with the file and the field named; the plugin is not served.
#[test]
fn a_bad_manifest_names_the_file_and_the_field() {
    let runtime = Runtime::new(RuntimeConfig {
        max_instances: 2,
        ..RuntimeConfig::default()
    })
    .unwrap();
    let cases = [
        ("[limits]\nmemory = \"huge\"", "field `limits.memory`"),
        (
            "[limits]\nmemory = \"1GiB\"",
            "more than this worker's limit",
        ),
        ("[limits]\nfuel = 5", "start it with --fuel"),
        ("concurrency = \"two\"", "invalid type"),
        ("[capabilities]\nall = true", "unknown field `capabilities`"),
        (
            "batch = { max = 10 }",
            "field `batch` is set, but the component exports wasmgear:job/handler",
        ),
    ];
    for (manifest, expected) in cases {
        let dir = dir_with("bad", "echo", manifest);
        std::fs::copy(artifact("echo"), dir.path().join("good.wasm")).unwrap();
        let (registry, problems) = PluginRegistry::load_dir(&runtime, dir.path()).unwrap();
        assert_eq!(registry.functions(), [function("good")]);
        let text = problems
            .iter()
            .map(|p| p.to_string())
            .collect::<Vec<_>>()
            .join("\n");
        assert!(
            text.contains("bad.toml") && text.contains(expected),
            "{manifest:?}: {text}"
        );
    }
}

/// A one-thread HTTP server on 127.0.0.1 answering every request with `body`; returns its port.
fn serve_http(body: &'static str) -> u16 {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming().take(16) {
            let Ok(mut stream) = stream else { continue };
            let mut request = [0u8; 4096];
            let _ = stream.read(&mut request);
            let reply = format!(
                "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(reply.as_bytes());
        }
    });
    port
}

/// Outgoing HTTP reaches a host on the manifest's allow list and nothing else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_reaches_listed_hosts_only() {
    let redis = TestRedis::start();
    let port = serve_http("hello from the test server");
    let allowed = dir_with(
        "web",
        "hostile",
        &format!("[http]\nallow = [\"127.0.0.1:{port}\"]\n"),
    );
    std::fs::copy(artifact("hostile"), allowed.path().join("offline.wasm")).unwrap();
    std::fs::write(
        allowed.path().join("elsewhere.toml"),
        "[http]\nallow = [\"127.0.0.1:1\"]\n",
    )
    .unwrap();
    std::fs::copy(artifact("hostile"), allowed.path().join("elsewhere.wasm")).unwrap();
    let worker = TestWorker::start_on(&redis.url(), allowed, TestWorkerOptions::default()).await;
    let client = redis.client().await;

    let target = format!("http 127.0.0.1:{port}/greeting");
    let status = run_once(&client, "web", &target).await;
    assert_eq!(
        status.output.as_deref(),
        Some(&b"hello from the test server"[..]),
        "{:?}",
        status.record.error
    );
    for f in ["offline", "elsewhere"] {
        let status = run_once(&client, f, &target).await;
        let error = status.record.error.unwrap();
        assert_eq!(error.class, "guest-error", "{f}");
        assert!(
            error.message.contains("HttpRequestDenied"),
            "{f}: {}",
            error.message
        );
        let log = client.logs(&status.id).await.unwrap();
        assert!(
            log.contains("denied: its host is not in the manifest's [http] allow list"),
            "{f}: {log}"
        );
    }
    worker.stop().await;
}
