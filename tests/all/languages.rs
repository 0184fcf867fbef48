//! Plugins in four languages, from `wasmgear new` to jobs: each project is scaffolded and
//! built through the real binary, dropped into a running worker's plugin directory, and run
//! through the CLI. They do the same job (`wordcount`), so their outputs must match byte for
//! byte; progress, logs, cancellation and error classes must arrive the same way.
//!
//! The toolchains (componentize-py, componentize-js, clang-19) are installed by the build
//! scripts when missing (`scripts/setup` does it ahead of the test run).

use std::path::{Path, PathBuf};
use std::time::Duration;

use wasmgear_testkit::{
    TestRedis, WorkerProcess, eventually_sync, json, plugin_dir, stderr, stdout, wasmgear,
};

const LANGS: [&str; 4] = ["rust", "python", "js", "c"];

/// The target directory the Rust project builds in: the one the test plugins use, so that
/// their dependencies are compiled already.
fn rust_target_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("the target directory")
        .join("plugins")
}

#[test]
fn plugins_in_four_languages_do_the_same_job() {
    let redis = TestRedis::start();
    let plugins = plugin_dir(&["echo"]);
    let url = redis.url();
    let target = rust_target_dir();
    let env = [
        ("WASMGEAR_REDIS_URL", url.as_str()),
        ("CARGO_TARGET_DIR", target.to_str().unwrap()),
    ];
    let run = |args: &[&str]| wasmgear(args, &env);
    let _worker = WorkerProcess::builder(&url).plugins(plugins.path()).start();

    // Scaffold, build, and drop each plugin into the running worker's directory.
    let work = tempfile::tempdir().unwrap();
    let built = work.path().join("built");
    for lang in LANGS {
        let name = format!("wc-{lang}");
        let project = work.path().join(&name);
        let out = run(&[
            "new",
            &name,
            "--lang",
            lang,
            "--dir",
            project.to_str().unwrap(),
        ]);
        assert_eq!(out.status.code(), Some(0), "new {lang}: {}", stderr(&out));
        assert!(project.join("build.sh").is_file(), "{lang}: no build.sh");
        let out = run(&[
            "build",
            project.to_str().unwrap(),
            "--out",
            built.to_str().unwrap(),
        ]);
        assert_eq!(out.status.code(), Some(0), "build {lang}: {}", stderr(&out));
        assert!(
            stdout(&out).contains(&format!("serves function {name}")),
            "{}",
            stdout(&out)
        );
        // The project's README says how to try it locally; that command runs it.
        let readme = std::fs::read_to_string(project.join("README.md")).unwrap();
        let try_it = format!("wasmgear run {name}.wasm '{{\"text\": \"the cat and the dog\"}}'");
        assert!(readme.contains(&try_it), "{lang}: {readme}");
        let wasm = built.join(format!("{name}.wasm"));
        let out = run(&[
            "run",
            wasm.to_str().unwrap(),
            r#"{"text": "the cat and the dog"}"#,
        ]);
        assert_eq!(out.status.code(), Some(0), "run {lang}: {}", stderr(&out));
        assert!(
            stdout(&out).contains("\"the\""),
            "run {lang}: {}",
            stdout(&out)
        );
        std::fs::rename(
            built.join(format!("{name}.wasm")),
            plugins.path().join(format!("{name}.wasm")),
        )
        .unwrap();
    }
    eventually_sync(
        Duration::from_secs(120),
        "the worker to serve all four",
        || {
            let workers = json(&run(&["workers", "--json"]));
            let served = &workers[0]["advertised"]["functions"];
            LANGS
                .iter()
                .all(|lang| served.get(format!("wc-{lang}")).is_some())
        },
    );

    // The same outputs, byte for byte.
    let long: String = (0..700).map(|i| format!("word{} ", i % 17)).collect();
    let inputs = [
        r#"{"text": ""}"#.to_string(),
        r#"{"text": "The cat\tand THE dog\nthe end\n"}"#.to_string(),
        r#"{"text": "caf\u00e9 CAFÉ café \u00e9t\u00e9\r\n\u000b x\f y", "extra": [1, {"a": null}]}"#
            .to_string(),
        r#"{"nested": {"text": 1}, "text": "quote\" back\\slash tab\\t ctl\u0001 \ud83d\ude00 emoji"}"#
            .to_string(),
        serde_json::json!({ "text": long }).to_string(),
        serde_json::json!({ "text": "x".repeat(2500) + " y" }).to_string(),
    ];
    let mut outputs_of_rust_1 = String::new();
    for (i, input) in inputs.iter().enumerate() {
        let outputs: Vec<String> = LANGS
            .iter()
            .map(|lang| {
                let out = run(&["enqueue", &format!("wc-{lang}"), input, "--wait"]);
                assert_eq!(
                    out.status.code(),
                    Some(0),
                    "{lang} on {input}: {}",
                    stderr(&out)
                );
                stdout(&out)
            })
            .collect();
        for (lang, output) in LANGS.iter().zip(&outputs) {
            assert_eq!(output, &outputs[0], "{lang} differs from rust on {input}");
        }
        if i == 1 {
            outputs_of_rust_1 = outputs[0].clone();
        }
    }
    // JavaScript with wasi:http left in the component (for plugins that use fetch): the
    // worker links it (deny-by-default), and the job runs the same.
    let project = work.path().join("wc-jshttp");
    let out = run(&[
        "new",
        "wc-jshttp",
        "--lang",
        "js",
        "--dir",
        project.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = wasmgear(
        &[
            "build",
            project.to_str().unwrap(),
            "--out",
            built.to_str().unwrap(),
        ],
        &[("WASMGEAR_JS_HTTP", "1")],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let component = std::fs::read(built.join("wc-jshttp.wasm")).unwrap();
    let needle = b"wasi:http/outgoing-handler";
    assert!(
        component.windows(needle.len()).any(|w| w == needle),
        "no wasi:http import"
    );
    std::fs::rename(
        built.join("wc-jshttp.wasm"),
        plugins.path().join("wc-jshttp.wasm"),
    )
    .unwrap();
    eventually_sync(
        Duration::from_secs(60),
        "the worker to serve wc-jshttp",
        || {
            let out = run(&[
                "enqueue",
                "wc-jshttp",
                &inputs[1],
                "--wait",
                "--require-worker",
            ]);
            out.status.code() == Some(0) && stdout(&out) == outputs_of_rust_1
        },
    );

    let out = run(&["enqueue", "wc-c", &inputs[1], "--wait"]);
    assert_eq!(
        stdout(&out),
        r#"{"words":7,"lines":2,"chars":28,"top":[["the",3],["and",1],["cat",1]]}"#
    );

    for lang in LANGS {
        let function = format!("wc-{lang}");
        // Progress, one report per chunk, in order; the log line.
        let out = run(&["enqueue", &function, &inputs[5], "--wait"]);
        let said = stderr(&out);
        let progress: Vec<&str> = said.lines().filter(|l| l.starts_with("progress")).collect();
        assert_eq!(
            progress.last(),
            Some(&"progress 3/3 chunk 3/3"),
            "{lang}: {}",
            stderr(&out)
        );
        let id = stderr(&out)
            .lines()
            .find_map(|l| l.strip_prefix("enqueued "))
            .expect("the id on stderr")
            .to_string();
        let logs = stdout(&run(&["logs", &id]));
        assert!(logs.contains("counting 2502 characters"), "{lang}: {logs}");

        // Bad input fails for good; a retry error is retried.
        let out = run(&["enqueue", &function, "not json", "--wait"]);
        assert_eq!(out.status.code(), Some(1));
        assert!(
            stderr(&out).contains("after 1 attempt(s) [guest-error]"),
            "{lang}: {}",
            stderr(&out)
        );
        let out = run(&[
            "enqueue",
            &function,
            r#"{"text": "a", "fail_retry": true}"#,
            "--max-attempts",
            "2",
            "--wait",
        ]);
        assert_eq!(out.status.code(), Some(1));
        assert!(
            stderr(&out).contains("after 2 attempt(s) [guest-error]: asked to retry"),
            "{lang}: {}",
            stderr(&out)
        );

        // Cancellation reaches the guest, which stops between chunks.
        let slow = serde_json::json!({ "text": "z ".repeat(20_000), "chunk_delay_ms": 100 });
        let id = stdout(&run(&["enqueue", &function, &slow.to_string()]))
            .trim()
            .to_string();
        eventually_sync(
            Duration::from_secs(30),
            "the slow job to report progress",
            || json(&run(&["status", &id, "--json"]))["progress"]["done"].as_u64() >= Some(1),
        );
        assert_eq!(run(&["cancel", &id]).status.code(), Some(0));
        eventually_sync(Duration::from_secs(30), "the job to end", || {
            json(&run(&["status", &id, "--json"]))["state"] == "cancelled"
        });
        let logs = stdout(&run(&["logs", &id]));
        let status = json(&run(&["status", &id, "--json"]));
        let said = format!("{logs} {}", status["error"]["message"]);
        assert!(
            said.contains("cancelled after"),
            "{lang}: the guest did not see it: {said}"
        );
    }
}

/// The raw-ABI recipe of `docs/other-languages.md`: Zig written straight against the
/// canonical ABI, made into a component by `wasmgear componentize` (through `wasmgear build`).
#[test]
fn a_zig_plugin_on_the_raw_abi_runs() {
    let redis = TestRedis::start();
    let url = redis.url();
    let env = [("WASMGEAR_REDIS_URL", url.as_str())];
    let run = |args: &[&str]| wasmgear(args, &env);
    let plugins = tempfile::tempdir().unwrap();
    let recipe = Path::new(env!("CARGO_MANIFEST_DIR")).join("../plugins/echo-zig");
    let out = run(&[
        "build",
        recipe.to_str().unwrap(),
        "--out",
        plugins.path().to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let _worker = WorkerProcess::builder(&url).plugins(plugins.path()).start();

    let out = run(&["enqueue", "echo-zig", "hello zig", "--wait"]);
    assert_eq!(stdout(&out), "hello zig", "{}", stderr(&out));
    assert!(
        stderr(&out).contains("progress 1/1 echoed"),
        "{}",
        stderr(&out)
    );
    let big = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(big.path(), "z".repeat(1 << 20)).unwrap();
    let out = run(&[
        "enqueue",
        "echo-zig",
        "--input-file",
        big.path().to_str().unwrap(),
        "--wait",
    ]);
    assert_eq!(stdout(&out).len(), 1 << 20, "{}", stderr(&out));
    let out = run(&["enqueue", "echo-zig", "fail", "--wait"]);
    assert!(
        stderr(&out).contains("[guest-error]: asked to fail"),
        "{}",
        stderr(&out)
    );
}
