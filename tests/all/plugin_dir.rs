//! Loading the plugin directory: what is served, and clear errors for what cannot be (also
//! to whoever waits for a job of a plugin no worker could load).

use std::time::Duration;

use wasmgear_runtime::{Limits, Runtime, RuntimeConfig};
use wasmgear_worker::plugins::{PluginRegistry, RegistryError};

use wasmgear_testkit::{TestRedis, WorkerProcess, artifact, plugin_dir, stderr, stdout, wasmgear};

fn runtime() -> Runtime {
    Runtime::new(RuntimeConfig {
        max_instances: 2,
        ..RuntimeConfig::default()
    })
    .unwrap()
}

/// Every `NAME.wasm` serves function NAME; other files are ignored.
#[test]
fn every_component_serves_its_file_stem() {
    let dir = plugin_dir(&["echo", "reverse"]);
    std::fs::write(dir.path().join("README.txt"), "not a plugin").unwrap();
    let (registry, problems) = PluginRegistry::load_dir(&runtime(), dir.path()).unwrap();
    assert!(problems.is_empty(), "{problems:?}");
    let names: Vec<String> = registry.functions().iter().map(|f| f.to_string()).collect();
    assert_eq!(names, ["echo", "reverse"]);
}

/// An empty directory is an error that says what to put there.
#[test]
fn an_empty_directory_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let error = PluginRegistry::load_dir(&runtime(), dir.path()).unwrap_err();
    assert!(matches!(error, RegistryError::NoPlugins { .. }));
    assert!(
        error
            .to_string()
            .contains("put components named FUNCTION.wasm there"),
        "{error}"
    );
}

/// A missing directory is an error that names it.
#[test]
fn a_missing_directory_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope");
    let error = PluginRegistry::load_dir(&runtime(), &missing).unwrap_err();
    assert!(matches!(error, RegistryError::Unreadable { .. }));
    assert!(error.to_string().contains("nope"), "{error}");
}

/// Bad files are refused one by one with their reason; good ones beside them still load.
#[test]
fn bad_files_are_reported_and_good_ones_still_load() {
    let dir = plugin_dir(&["echo"]);
    let echo = std::fs::read(artifact("echo")).unwrap();
    std::fs::write(dir.path().join("truncated.wasm"), &echo[..echo.len() / 2]).unwrap();
    std::fs::write(dir.path().join("empty.wasm"), b"").unwrap();
    std::fs::write(
        dir.path().join("random.wasm"),
        b"\x00asm\x0d\x00\x01\x00garbage",
    )
    .unwrap();
    std::fs::write(dir.path().join("core.wasm"), b"\x00asm\x01\x00\x00\x00").unwrap();
    std::fs::copy(artifact("echo"), dir.path().join("bad name!.wasm")).unwrap();
    let (registry, problems) = PluginRegistry::load_dir(&runtime(), dir.path()).unwrap();
    assert_eq!(registry.functions().len(), 1);
    let text: Vec<String> = problems.iter().map(|p| p.to_string()).collect();
    assert_eq!(text.len(), 5, "{text:#?}");
    let find = |file: &str| {
        text.iter()
            .find(|t| t.contains(file))
            .unwrap_or_else(|| panic!("{file} not reported: {text:#?}"))
    };
    assert!(find("empty.wasm").contains("not a WebAssembly component"));
    assert!(find("random.wasm").contains("does not compile"));
    assert!(find("truncated.wasm").contains("does not compile"));
    assert!(find("core.wasm").contains("core WebAssembly module"));
    assert!(find("bad name!.wasm").contains("invalid function name"));
}

/// A component whose memory starts above the memory limit of a job is refused with a reason
/// that names the file and what to do; under the default limit it loads and runs, and
/// `--memory-limit` takes units or bytes (4MiB refuses it, 8MiB and 8388608 run it).
#[test]
fn a_component_whose_memory_starts_over_the_limit_is_refused_clearly() {
    let dir = plugin_dir(&["big-memory"]);
    let small = Runtime::new(RuntimeConfig {
        max_instances: 2,
        limits: Limits {
            memory_bytes: 1 << 20,
            ..Limits::default()
        },
        ..RuntimeConfig::default()
    })
    .unwrap();
    let error = PluginRegistry::load_dir(&small, dir.path()).unwrap_err();
    let text = error.to_string();
    assert!(
        text.contains("big-memory.wasm")
            && text.contains("the memory limit of a job here is 1048576 bytes")
            && text.contains("raise --memory-limit"),
        "{text}"
    );
    let out = wasmgear(&["run", artifact("big-memory"), "hello"], &[]);
    assert_eq!(
        stdout(&out),
        "kept 5 of 5 bytes in a table of 4194304 bytes",
        "{}",
        stderr(&out)
    );
    for limit in ["4MiB", "4194304"] {
        let out = wasmgear(
            &[
                "run",
                artifact("big-memory"),
                "hello",
                "--memory-limit",
                limit,
            ],
            &[],
        );
        assert_ne!(out.status.code(), Some(0), "{limit}");
        assert!(
            stderr(&out).contains("the memory limit of a job here is 4194304 bytes"),
            "{limit}: {}",
            stderr(&out)
        );
    }
    for limit in ["8MiB", "8 MiB", "8388608"] {
        let out = wasmgear(
            &["run", artifact("big-memory"), "hi", "--memory-limit", limit],
            &[],
        );
        assert_eq!(
            stdout(&out),
            "kept 2 of 2 bytes in a table of 4194304 bytes",
            "{limit}: {}",
            stderr(&out)
        );
    }
}

/// A job whose plugin no live worker can load: `status` and `enqueue --wait` say that no
/// worker serves its function, and what the workers report about the plugin file.
#[test]
fn jobs_nobody_serves_say_so() {
    let redis = TestRedis::start();
    let url = redis.url();
    let dir = plugin_dir(&["echo"]);
    // Half a component: refused at load.
    let echo = std::fs::read(dir.path().join("echo.wasm")).unwrap();
    std::fs::write(dir.path().join("broken.wasm"), &echo[..echo.len() / 2]).unwrap();
    let worker = WorkerProcess::builder(&url)
        .plugins(dir.path())
        .args(&["--no-watch"])
        .start();
    wasmgear_testkit::eventually_sync(Duration::from_secs(60), "the worker list", || {
        wasmgear_testkit::stdout(&wasmgear(&["workers", "--redis", &url], &[])).contains("echo")
    });
    let enqueued = wasmgear(&["enqueue", "broken", "x", "--redis", &url], &[]);
    assert_eq!(
        enqueued.status.code(),
        Some(0),
        "{}",
        wasmgear_testkit::stderr(&enqueued)
    );
    let id = wasmgear_testkit::stdout(&enqueued).trim().to_string();
    let status = wasmgear_testkit::stdout(&wasmgear(&["status", &id, "--redis", &url], &[]));
    assert!(status.contains("no live worker serves broken"), "{status}");
    assert!(status.contains("broken.wasm"), "{status}");
    let waited = wasmgear(
        &[
            "enqueue",
            "broken",
            "y",
            "--wait",
            "--wait-timeout",
            "3s",
            "--redis",
            &url,
        ],
        &[],
    );
    assert_eq!(waited.status.code(), Some(4), "gave up waiting");
    let said = wasmgear_testkit::stderr(&waited);
    assert!(said.contains("no live worker serves broken"), "{said}");
    assert!(said.contains("broken.wasm"), "{said}");
    // A served function's status says nothing of the kind.
    let served = wasmgear(&["enqueue", "echo", "z", "--wait", "--redis", &url], &[]);
    assert!(!wasmgear_testkit::stderr(&served).contains("no live worker"));
    drop(worker);
}
