//! The example plugin in each language (`plugins/wordcount-*`, and the Zig recipe
//! `plugins/echo-zig`): build time, component size, compile time in the host with a cold
//! compile cache and from the cache, and per-job cost (fresh instance + one small job).
//! `cargo bench -p wasmgear --bench languages`; needs the guest toolchains (`scripts/setup`).

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use wasmgear_proto::Outcome;
use wasmgear_runtime::CancelSignal;
use wasmgear_runtime::{CompileCache, CompileSource, JobHooks, Runtime, RuntimeConfig};

use common::{Quiet, build_plugin, job_info, repo};

/// Rebuilds `plugins/NAME` into `out` as after a source change (the tools and dependencies
/// are in place); returns the build time.
fn build(name: &str, out: &Path) -> Duration {
    for source in ["src/lib.rs", "app.py", "app.js", "app.c", "main.zig"] {
        let path = repo().join("plugins").join(name).join(source);
        if let Ok(file) = std::fs::File::options().append(true).open(&path) {
            file.set_modified(std::time::SystemTime::now()).unwrap();
        }
    }
    build_plugin(name, out, false).unwrap()
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let out = tempfile::tempdir().unwrap();
    println!(
        "{:<18} {:>9} {:>10} {:>12} {:>11} {:>12}",
        "plugin", "size", "build", "compile", "from cache", "per job"
    );
    for name in [
        "wordcount-rust",
        "wordcount-c",
        "wordcount-python",
        "wordcount-js",
        "echo-zig",
    ] {
        build(name, out.path()); // once, so that tools and dependencies are in place
        let built = build(name, out.path());
        let wasm = out.path().join(format!("{name}.wasm"));
        let cache = tempfile::tempdir().unwrap();
        let runtime = |cache: Option<&Path>| {
            Runtime::new(RuntimeConfig {
                max_instances: 2,
                cache: cache.map(CompileCache::new),
                ..RuntimeConfig::default()
            })
            .unwrap()
        };
        let cold = runtime(Some(cache.path()));
        let started = Instant::now();
        cold.load_plugin(&wasm).unwrap();
        let compile = started.elapsed();
        let warm = runtime(Some(cache.path()));
        let started = Instant::now();
        let plugin = warm.load_plugin(&wasm).unwrap();
        let cached = started.elapsed();
        assert_eq!(plugin.compiled_from(), CompileSource::Cache);

        let job = job_info(name);
        let input = br#"{"text": "the quick brown fox jumps over the lazy dog"}"#;
        let per_job = rt.block_on(async {
            let hooks: Arc<dyn JobHooks> = Arc::new(Quiet);
            let mut times = Vec::new();
            for i in 0..60 {
                let started = Instant::now();
                let outcome = warm
                    .run(&plugin, &job, input, hooks.clone(), CancelSignal::new())
                    .await;
                assert!(
                    matches!(outcome, Outcome::Succeeded(_)),
                    "{name}: {outcome:?}"
                );
                if i >= 10 {
                    times.push(started.elapsed());
                }
            }
            times.sort();
            times[times.len() / 2]
        });
        println!(
            "{name:<18} {:>6} KiB {:>8.2} s {:>9.0} ms {:>8.1} ms {:>9.0} µs",
            std::fs::metadata(&wasm).unwrap().len() / 1024,
            built.as_secs_f64(),
            compile.as_secs_f64() * 1e3,
            cached.as_secs_f64() * 1e3,
            per_job.as_secs_f64() * 1e6,
        );
    }
}
