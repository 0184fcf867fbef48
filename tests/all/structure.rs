//! The crates' dependencies point one way, and the compiler holds them there: these tests
//! read the dependency graph Cargo resolves (`cargo tree`) and fail when an arrow turns.
//! PROTOCOL.md's key lists are held to the library's declarations the same way.

use std::process::Command;

use wasmgear_testkit::{TestRedis, TestWorker};

/// The crates (by package name) that `package` pulls in as normal dependencies, directly
/// or not, itself included.
fn dependencies(package: &str) -> Vec<String> {
    let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/../Cargo.toml");
    let output = Command::new(env!("CARGO"))
        .args(["tree", "--locked", "--offline", "--manifest-path", manifest])
        .args([
            "-p", package, "-e", "normal", "--prefix", "none", "--format", "{p}",
        ])
        .output()
        .expect("run cargo tree");
    assert!(
        output.status.success(),
        "cargo tree -p {package}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let mut names: Vec<String> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .map(str::to_string)
        .collect();
    names.sort();
    names.dedup();
    names
}

/// Fails if `package` depends on any crate whose name starts with one of `banned`.
fn assert_free_of(package: &str, banned: &[&str]) {
    let found: Vec<String> = dependencies(package)
        .into_iter()
        .filter(|name| banned.iter().any(|b| name.starts_with(b)))
        .collect();
    assert!(found.is_empty(), "{package} depends on {found:?}");
}

#[test]
fn the_client_never_compiles_wasmtime() {
    assert_free_of(
        "wasmgear-client",
        &["wasmtime", "cranelift", "wasmgear-runtime"],
    );
}

#[test]
fn the_http_api_never_compiles_wasmtime() {
    assert_free_of(
        "wasmgear-server",
        &[
            "wasmtime",
            "cranelift",
            "wasmgear-runtime",
            "wasmgear-worker",
        ],
    );
}

/// Span export is its own concern: the telemetry crate compiles no wasmtime, talks to no
/// Redis and knows nothing of the queue.
#[test]
fn telemetry_compiles_no_wasmtime_and_talks_to_no_redis() {
    assert_free_of(
        "wasmgear-telemetry",
        &[
            "wasmtime",
            "cranelift",
            "redis",
            "wasmgear-proto",
            "wasmgear-client",
            "wasmgear-runtime",
            "wasmgear-worker",
        ],
    );
}

/// The queues people already run are served without wasmtime: a job source needs only the
/// `JobSource` trait (`wasmgear-source`), not the worker that runs the jobs.
#[test]
fn job_sources_never_compile_wasmtime() {
    for package in ["wasmgear-source", "wasmgear-sources"] {
        assert_free_of(
            package,
            &[
                "wasmtime",
                "cranelift",
                "wasmgear-runtime",
                "wasmgear-worker",
            ],
        );
    }
}

#[test]
fn the_runtime_never_talks_to_redis() {
    assert_free_of(
        "wasmgear-runtime",
        &["redis", "wasmgear-client", "wasmgear-worker"],
    );
}

#[test]
fn the_vocabulary_does_no_io() {
    assert_free_of(
        "wasmgear-proto",
        &[
            "tokio",
            "redis",
            "wasmtime",
            "wasmgear-client",
            "wasmgear-runtime",
        ],
    );
}

/// Each crate of ours uses only the crates of ours it is allowed to (as README's layout
/// section says).
#[test]
fn our_crates_depend_one_way() {
    for (package, may_use) in ALLOWED {
        for name in dependencies(package) {
            assert!(
                !name.starts_with("wasmgear")
                    || name == package
                    || may_use.contains(&name.as_str()),
                "{package} depends on {name}"
            );
        }
    }
}

/// The test harnesses are for tests and benchmarks only: no crate of ours depends on
/// `wasmgear-testkit` but as a dev-dependency (the binary's tests and benchmarks).
#[test]
fn the_testkit_is_a_dev_dependency_only() {
    for (package, _) in ALLOWED
        .iter()
        .filter(|(package, _)| *package != "wasmgear-testkit")
    {
        assert_free_of(package, &["wasmgear-testkit"]);
    }
}

/// The producer's client starts no process: the private `redis-server` the worker embeds
/// and the tests start is `wasmgear-redis-server`'s, which the client does not pull in.
/// The `.rs` files under `dir` (from the repository's root), its subdirectories' too;
/// build output (`target/`) left out.
fn rust_files(dir: &str) -> Vec<std::path::PathBuf> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    let mut dirs = vec![root.join(dir)];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().map(Result::unwrap) {
            let path = entry.path();
            if path.is_dir() {
                if entry.file_name() != "target" {
                    dirs.push(path);
                }
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// No file does five jobs: none of the library crates' or the binary's sources is over
/// 800 lines (split a bigger one by role, as `worker_queue/` and `ui/` are).
#[test]
fn no_source_file_is_over_800_lines() {
    let files: Vec<_> = ["crates", "host/src"]
        .into_iter()
        .flat_map(rust_files)
        .collect();
    assert!(files.len() > 50, "found only {files:?}");
    let long: Vec<(usize, &std::path::PathBuf)> = files
        .iter()
        .map(|path| (std::fs::read_to_string(path).unwrap().lines().count(), path))
        .filter(|(lines, _)| *lines > 800)
        .collect();
    assert!(long.is_empty(), "files over 800 lines: {long:?}");
}

#[test]
fn the_client_starts_no_redis_server() {
    assert_free_of(
        "wasmgear-client",
        &["wasmgear-redis-server", "wasmgear-testkit", "tempfile"],
    );
    let spawning: Vec<_> = rust_files("crates/client/src")
        .into_iter()
        .filter(|path| {
            std::fs::read_to_string(path)
                .unwrap()
                .contains("std::process")
        })
        .collect();
    assert!(
        spawning.is_empty(),
        "the client spawns processes in {spawning:?}"
    );
}

/// Which crates of ours each crate of ours may use (normal dependencies, direct or not).
const ALLOWED: [(&str, &[&str]); 12] = [
    (
        "wasmgear",
        &[
            "wasmgear-server",
            "wasmgear-sources",
            "wasmgear-worker",
            "wasmgear-authoring",
            "wasmgear-client",
            "wasmgear-source",
            "wasmgear-runtime",
            "wasmgear-proto",
            "wasmgear-redis-server",
            "wasmgear-telemetry",
        ],
    ),
    (
        "wasmgear-sources",
        &["wasmgear-client", "wasmgear-source", "wasmgear-proto"],
    ),
    (
        "wasmgear-worker",
        &[
            "wasmgear-client",
            "wasmgear-source",
            "wasmgear-runtime",
            "wasmgear-proto",
            "wasmgear-telemetry",
        ],
    ),
    (
        "wasmgear-server",
        &[
            "wasmgear-client",
            "wasmgear-source",
            "wasmgear-proto",
            "wasmgear-telemetry",
        ],
    ),
    ("wasmgear-telemetry", &[]),
    ("wasmgear-authoring", &["wasmgear-proto"]),
    ("wasmgear-client", &["wasmgear-source", "wasmgear-proto"]),
    ("wasmgear-source", &["wasmgear-proto"]),
    ("wasmgear-runtime", &["wasmgear-proto"]),
    ("wasmgear-proto", &[]),
    ("wasmgear-redis-server", &["wasmgear-proto"]),
    (
        "wasmgear-testkit",
        &[
            "wasmgear-worker",
            "wasmgear-client",
            "wasmgear-source",
            "wasmgear-runtime",
            "wasmgear-proto",
            "wasmgear-redis-server",
            "wasmgear-test-artifacts",
            "wasmgear-telemetry",
        ],
    ),
];

/// README's Rust client example is `crates/client/examples/enqueue_and_wait.rs` word for
/// word, and it enqueues a job and prints its output against a real worker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_client_example_runs() {
    let example = include_str!("../../crates/client/examples/enqueue_and_wait.rs");
    assert!(
        include_str!("../../README.md").contains(example.trim()),
        "README.md must show crates/client/examples/enqueue_and_wait.rs as it is"
    );
    let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/../Cargo.toml");
    let mut build = Command::new(env!("CARGO"));
    // What `cargo test` sets for the test process would make this cargo rebuild.
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy();
        if name.starts_with("CARGO_") && name != "CARGO_HOME" && name != "CARGO_TARGET_DIR" {
            build.env_remove(name.as_ref());
        }
    }
    let built = build
        .args([
            "build",
            "--locked",
            "--offline",
            "--manifest-path",
            manifest,
        ])
        .args(["--workspace", "--all-targets"])
        .output()
        .expect("run cargo build");
    assert!(
        built.status.success(),
        "{}",
        String::from_utf8_lossy(&built.stderr)
    );
    // Built like the tests (every target: the same features, nothing rebuilt); the tests
    // run from target/debug/deps, examples land in target/debug/examples.
    let exe = std::env::current_exe().unwrap();
    let program = exe
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("examples/enqueue_and_wait");

    let redis = TestRedis::start();
    let worker = TestWorker::start(&redis, &["echo"]).await;
    let ran = tokio::process::Command::new(&program)
        .env("WASMGEAR_REDIS_URL", redis.url())
        .output()
        .await
        .unwrap_or_else(|e| panic!("run {program:?}: {e}"));
    let printed = String::from_utf8_lossy(&ran.stdout);
    assert!(
        ran.status.success(),
        "{printed}{}",
        String::from_utf8_lossy(&ran.stderr)
    );
    assert_eq!(printed.trim(), "echo:1 Succeeded hi");
    worker.stop().await;
}

/// What the Functions library declares, by function: the keys it takes, in order, by suffix
/// (`None`: the keys its file's header names), from [`wasmgear_client::manifest`].
fn declared_keys() -> std::collections::BTreeMap<String, Option<Vec<String>>> {
    let manifest: serde_json::Value =
        serde_json::from_str(&wasmgear_client::manifest()).expect("the manifest is JSON");
    let functions = manifest["functions"].as_object().expect("functions");
    functions
        .iter()
        .map(|(name, f)| {
            let keys = f["keys"].as_array().map(|keys| {
                keys.iter()
                    .map(|k| k.as_str().expect("a key suffix").to_string())
                    .collect()
            });
            (name.clone(), keys)
        })
        .collect()
}

/// The text of PROTOCOL.md.
fn protocol_md() -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../PROTOCOL.md");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"))
}

/// What the cell of a function that takes the keys its header names says.
const KEYS_OF_ITS_HEADER: &str = "the keys its file's header names";

/// PROTOCOL.md's table of every library function's keys (`| function | keys, in order |`),
/// by function: the keys by suffix (the table writes `calls_exp` for `calls-exp`), or
/// `None` where it says the function takes the keys its header names.
fn documented_keys(text: &str) -> std::collections::BTreeMap<String, Option<Vec<String>>> {
    let mut lines = text
        .lines()
        .skip_while(|l| *l != "| function | keys, in order |");
    assert!(
        lines.next().is_some(),
        "PROTOCOL.md has no table `| function | keys, in order |`"
    );
    let mut documented = std::collections::BTreeMap::new();
    for row in lines.skip(1).take_while(|l| l.starts_with('|')) {
        let cells: Vec<&str> = row.trim_matches('|').split('|').map(str::trim).collect();
        assert_eq!(cells.len(), 2, "a row of two cells: {row}");
        let keys = match cells[1] {
            KEYS_OF_ITS_HEADER => None,
            list => Some(
                list.split_whitespace()
                    .map(|k| k.replace('_', "-"))
                    .collect::<Vec<_>>(),
            ),
        };
        for name in cells[0].split(',') {
            let name = name.trim().trim_matches('`');
            let again = documented.insert(name.to_string(), keys.clone());
            assert!(again.is_none(), "PROTOCOL.md lists `{name}` twice");
        }
    }
    documented
}

/// PROTOCOL.md's table of keys per function agrees with the library's declarations both
/// ways: every function is listed with the keys it takes, in order, and every function
/// listed exists; each `FCALL wg2_NAME N KEYS...` example passes as many keys as NAME takes.
#[test]
fn protocol_md_lists_each_function_s_keys_as_the_library_declares_them() {
    let declared = declared_keys();
    let text = protocol_md();
    let documented = documented_keys(&text);
    let mut wrong = Vec::new();
    for (name, keys) in &declared {
        match documented.get(name) {
            None => wrong.push(format!("`{name}` is missing from the table")),
            Some(listed) if listed != keys => wrong.push(format!(
                "`{name}`: the table says {listed:?}, the library takes {keys:?}"
            )),
            Some(_) => {}
        }
    }
    for name in documented.keys().filter(|n| !declared.contains_key(*n)) {
        wrong.push(format!("`{name}` is in the table but not in the library"));
    }
    // `FCALL wg2_enqueue 24 KEYS...` and the like.
    for (at, _) in text.match_indices("wg2_") {
        let call = &text[at + 4..];
        let name: String = call
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        let mut words = call[name.len()..].split_whitespace();
        let (Some(count), Some("KEYS...")) = (words.next(), words.next()) else {
            continue;
        };
        let takes = declared.get(&name).and_then(|k| k.as_ref()).map(Vec::len);
        if count.parse::<usize>().ok() != takes {
            wrong.push(format!(
                "`wg2_{name} {count} KEYS...`: the library's {name} takes {takes:?} keys"
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "PROTOCOL.md disagrees with crates/client/src/scripts.rs:\n  {}",
        wrong.join("\n  ")
    );
}
