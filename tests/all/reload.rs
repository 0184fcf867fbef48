//! The watched plugin directory: hot swaps, broken files, removals, the compile cache, and
//! the worker list with its roll call.

use std::path::Path;
use std::time::{Duration, Instant};

use wasmgear_client::{EnqueueOptions, JobState};
use wasmgear_runtime::{CompileCache, CompileSource, Runtime, RuntimeConfig};

use crate::observe::{Scrape, get_at, worker_with_metrics};
use wasmgear_testkit::{
    TestRedis, TestWorker, TestWorkerOptions, artifact, eventually, function, plugin_dir,
};

const WAIT: Option<Duration> = Some(Duration::from_secs(30));

/// Replaces `dir/name.wasm` with the built plugin `plugin` the way deploy tools do: write a
/// temporary file beside it, then rename it into place.
fn deploy(dir: &Path, name: &str, plugin: &str) {
    let temp = dir.join(format!(".{name}.wasm.tmp"));
    std::fs::copy(artifact(plugin), &temp).unwrap();
    std::fs::rename(&temp, dir.join(format!("{name}.wasm"))).unwrap();
}

/// The version (content hash prefix) a plugin file will get.
fn version_of(plugin: &str) -> String {
    let runtime = Runtime::new(RuntimeConfig {
        max_instances: 1,
        ..RuntimeConfig::default()
    })
    .unwrap();
    runtime
        .load_plugin(Path::new(artifact(plugin)))
        .unwrap()
        .version()
        .to_string()
}

/// A watching worker serving `morph` (first `echo`), keeping `dir`'s path for the test.
async fn morph_worker(redis: &TestRedis) -> (TestWorker, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(artifact("echo"), dir.path().join("morph.wasm")).unwrap();
    let path = dir.path().to_path_buf();
    let options = TestWorkerOptions {
        watch: true,
        ..TestWorkerOptions::default()
    };
    (TestWorker::start_on(&redis.url(), dir, options).await, path)
}

/// A plugin replaced while jobs stream in: no job fails, outputs switch from the old to the
/// new behaviour, and each job records the version that produced its output.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replaced_plugin_is_swapped_in_while_jobs_run() {
    let redis = TestRedis::start();
    let (worker, dir) = morph_worker(&redis).await;
    let client = redis.client().await;
    let (echo_version, reverse_version) = (version_of("echo"), version_of("reverse"));
    let morph = function("morph");
    let mut ids = Vec::new();
    while ids.len() < 150 {
        let input = format!("job {}", ids.len());
        ids.push((
            client
                .enqueue(&morph, input.as_bytes(), &EnqueueOptions::default())
                .await
                .unwrap(),
            input,
        ));
        if ids.len() == 50 {
            deploy(&dir, "morph", "reverse");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (mut old, mut new) = (0, 0);
    for (id, input) in &ids {
        let status = client.wait(id, WAIT, |_| {}).await.unwrap();
        assert_eq!(
            status.record.state,
            JobState::Succeeded,
            "{id}: {:?}",
            status.record.error
        );
        let output = String::from_utf8(status.output.unwrap()).unwrap();
        let version = status.record.history[0].version.clone().unwrap_or_default();
        if output == *input {
            assert_eq!(
                version, echo_version,
                "{id} ran echo but recorded {version}"
            );
            old += 1;
        } else {
            assert_eq!(output, input.chars().rev().collect::<String>(), "{id}");
            assert_eq!(
                version, reverse_version,
                "{id} ran reverse but recorded {version}"
            );
            new += 1;
        }
    }
    assert!(old >= 50 && new > 0, "old {old}, new {new}");
    let last = client
        .enqueue(&morph, b"abc", &EnqueueOptions::default())
        .await
        .unwrap();
    assert_eq!(
        client
            .wait(&last, WAIT, |_| {})
            .await
            .unwrap()
            .output
            .as_deref(),
        Some(&b"cba"[..])
    );
    worker.stop().await;
}

/// A broken file keeps the previous version serving, with the error visible; fixing the
/// file loads it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_file_keeps_the_old_version_serving() {
    let redis = TestRedis::start();
    let (worker, dir) = morph_worker(&redis).await;
    let client = redis.client().await;
    std::fs::write(dir.join("morph.wasm"), b"\x00asm\x0d\x00\x01\x00not really").unwrap();
    eventually(Duration::from_secs(10), "the error to show", || async {
        worker
            .registry
            .errors()
            .into_iter()
            .find(|(p, _)| p.ends_with("morph.wasm"))
            .map(|(_, e)| e)
    })
    .await;
    let id = client
        .enqueue(
            &function("morph"),
            b"still echo",
            &EnqueueOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(
        client
            .wait(&id, WAIT, |_| {})
            .await
            .unwrap()
            .output
            .as_deref(),
        Some(&b"still echo"[..])
    );
    let error = &worker.registry.errors()[0].1;
    assert!(error.contains("does not compile"), "{error}");
    deploy(&dir, "morph", "reverse");
    eventually(Duration::from_secs(10), "the fix to load", || async {
        worker.registry.errors().is_empty().then_some(())
    })
    .await;
    let id = client
        .enqueue(&function("morph"), b"abc", &EnqueueOptions::default())
        .await
        .unwrap();
    assert_eq!(
        client
            .wait(&id, WAIT, |_| {})
            .await
            .unwrap()
            .output
            .as_deref(),
        Some(&b"cba"[..])
    );
    worker.stop().await;
}

/// A removed plugin stops being leased (its jobs stay queued) and serves again when it
/// comes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_plugin_leaves_its_jobs_queued_until_it_returns() {
    let redis = TestRedis::start();
    let (worker, dir) = morph_worker(&redis).await;
    let client = redis.client().await;
    std::fs::remove_file(dir.join("morph.wasm")).unwrap();
    eventually(Duration::from_secs(10), "the removal", || async {
        worker.registry.functions().is_empty().then_some(())
    })
    .await;
    let id = client
        .enqueue(&function("morph"), b"waiting", &EnqueueOptions::default())
        .await
        .unwrap();
    // Nothing serves it: a worker that did would be told of it at once, and would poll
    // for it within a second (DEFAULT_IDLE_POLL) if it were not; 1.5 s bounds that.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        client.status(&id).await.unwrap().record.state,
        JobState::Queued
    );
    deploy(&dir, "morph", "echo");
    let status = client.wait(&id, WAIT, |_| {}).await.unwrap();
    assert_eq!(status.output.as_deref(), Some(&b"waiting"[..]));
    worker.stop().await;
}

/// The second load of an unchanged plugin comes from the compile cache; a corrupt entry is
/// detected and rebuilt.
#[test]
fn the_compile_cache_is_used_and_checked() {
    let cache_dir = tempfile::tempdir().unwrap();
    let load = || {
        let config = RuntimeConfig {
            max_instances: 1,
            cache: Some(CompileCache::new(cache_dir.path())),
            ..RuntimeConfig::default()
        };
        let runtime = Runtime::new(config).unwrap();
        let started = Instant::now();
        let plugin = runtime.load_plugin(Path::new(artifact("sum"))).unwrap();
        (plugin.compiled_from(), started.elapsed())
    };
    let (first, compile_time) = load();
    let (second, cached_time) = load();
    assert_eq!(
        (first, second),
        (CompileSource::Compiled, CompileSource::Cache)
    );
    eprintln!("sum plugin: compiled in {compile_time:?}, from cache in {cached_time:?}");
    let entry = std::fs::read_dir(cache_dir.path())
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let mut bytes = std::fs::read(&entry).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(&entry, bytes).unwrap();
    assert_eq!(
        load().0,
        CompileSource::Compiled,
        "a corrupt entry must not be used"
    );
    assert_eq!(
        load().0,
        CompileSource::Cache,
        "the rebuilt entry is used again"
    );
}

/// The compile cache keeps at most its size limit: when a new entry would pass it, the
/// least recently used entries go (a hit counts as a use), never the one just written.
#[test]
fn the_compile_cache_evicts_the_least_recently_used() {
    let cache_dir = tempfile::tempdir().unwrap();
    let entry_sizes = || -> Vec<u64> {
        std::fs::read_dir(cache_dir.path())
            .unwrap()
            .map(|e| e.unwrap().metadata().unwrap().len())
            .collect()
    };
    let load = |name: &str, max_bytes: u64| {
        let config = RuntimeConfig {
            max_instances: 1,
            cache: Some(CompileCache::new(cache_dir.path()).with_max_bytes(max_bytes)),
            ..RuntimeConfig::default()
        };
        let runtime = Runtime::new(config).unwrap();
        runtime
            .load_plugin(Path::new(artifact(name)))
            .unwrap()
            .compiled_from()
    };
    // Fill it without a limit to learn the sizes, then empty it.
    for name in ["echo", "reverse", "sum"] {
        load(name, u64::MAX);
    }
    let sizes = entry_sizes();
    assert_eq!(sizes.len(), 3);
    let room = sizes.iter().sum::<u64>() - sizes.iter().min().unwrap() + 1;
    for entry in std::fs::read_dir(cache_dir.path()).unwrap() {
        std::fs::remove_file(entry.unwrap().path()).unwrap();
    }
    assert_eq!(load("echo", room), CompileSource::Compiled);
    assert_eq!(load("reverse", room), CompileSource::Compiled);
    assert_eq!(
        load("echo", room),
        CompileSource::Cache,
        "echo is now the more recent"
    );
    // Room for two of the three: `sum` comes in, `reverse` (least recently used) goes.
    assert_eq!(load("sum", room), CompileSource::Compiled);
    assert_eq!(entry_sizes().len(), 2);
    assert_eq!(load("echo", room), CompileSource::Cache, "echo was kept");
    assert_eq!(
        load("reverse", room),
        CompileSource::Compiled,
        "reverse was evicted"
    );
    // A limit smaller than any entry: a new entry pushes all the others out, and stays.
    assert_eq!(load("count", 1), CompileSource::Compiled);
    assert_eq!(entry_sizes().len(), 1, "only the newest entry is kept");
    assert_eq!(load("count", 1), CompileSource::Cache);
}

/// A live worker is in the worker list and the roll call of its functions; enqueue
/// --require-worker refuses a function nobody serves; a stopped worker leaves both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_worker_list_and_roll_call() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let echo = function("echo");
    assert_eq!(client.live_workers(&echo).await.unwrap(), 0);
    let url = redis.url();
    let env = [("WASMGEAR_REDIS_URL", url.as_str())];
    let out = wasmgear_testkit::wasmgear(&["enqueue", "echo", "x", "--require-worker"], &env);
    assert_eq!(out.status.code(), Some(1));
    assert!(wasmgear_testkit::stderr(&out).contains("no live worker serves function echo"));

    let worker = TestWorker::start(&redis, &["echo"]).await;
    eventually(Duration::from_secs(10), "the roll call", || async {
        (client.live_workers(&echo).await.unwrap() == 1).then_some(())
    })
    .await;
    let out = wasmgear_testkit::wasmgear(&["enqueue", "echo", "x", "--require-worker"], &env);
    assert_eq!(
        wasmgear_testkit::stdout(&out).trim(),
        "echo:1",
        "{}",
        wasmgear_testkit::stderr(&out)
    );
    let list = wasmgear_testkit::stdout(&wasmgear_testkit::wasmgear(&["workers"], &env));
    assert!(
        list.contains("test-worker") && list.contains("serves echo (plugin"),
        "{list}"
    );
    worker.stop().await;
    assert_eq!(client.live_workers(&echo).await.unwrap(), 0);
    assert!(client.workers().await.unwrap().is_empty());
}

/// `wasmgear plugins DIR` shows each plugin's functions, version and grants, and the
/// reason a broken one cannot load (exit 1).
#[test]
fn plugins_checks_a_directory_offline() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(artifact("echo"), dir.path().join("echo.wasm")).unwrap();
    std::fs::write(dir.path().join("echo.toml"), "[config]\nmode = \"loud\"\n").unwrap();
    std::fs::write(dir.path().join("broken.wasm"), b"nope").unwrap();
    let out = wasmgear_testkit::wasmgear(&["plugins", dir.path().to_str().unwrap()], &[]);
    assert_eq!(out.status.code(), Some(1));
    let text = wasmgear_testkit::stdout(&out);
    assert!(
        text.contains(&format!("version {}", version_of("echo"))),
        "{text}"
    );
    assert!(
        text.contains("serves      echo") && text.contains("config [mode]"),
        "{text}"
    );
    assert!(
        text.contains("broken.wasm") && text.contains("not a WebAssembly component"),
        "{text}"
    );
}

/// A copy written in pieces, a symlink swap and an editor's save-via-temp-file each end in
/// exactly one reload, of the final content.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_way_of_writing_a_file_ends_in_one_reload() {
    let redis = TestRedis::start();
    let (worker, dir) = morph_worker(&redis).await;
    let changes = worker.registry.changes();
    let reverse = std::fs::read(artifact("reverse")).unwrap();
    let echo = std::fs::read(artifact("echo")).unwrap();
    let morph = dir.join("morph.wasm");
    let serving = |expected: String| {
        let registry = worker.registry.clone();
        async move {
            eventually(Duration::from_secs(10), "the new version", || async {
                (registry
                    .get(&function("morph"))
                    .map(|p| p.version().to_string())
                    == Some(expected.clone()))
                .then_some(())
            })
            .await
        }
    };
    type Write<'a> = Box<dyn Fn(&[u8]) + 'a>;
    let ways: [(&str, Write); 3] = [
        (
            "copy in pieces",
            Box::new(|bytes: &[u8]| {
                use std::io::Write;
                let mut file = std::fs::File::create(&morph).unwrap();
                for chunk in bytes.chunks(bytes.len() / 4 + 1) {
                    file.write_all(chunk).unwrap();
                    file.flush().unwrap();
                    std::thread::sleep(Duration::from_millis(30));
                }
            }),
        ),
        (
            "symlink swap",
            Box::new(|bytes: &[u8]| {
                let target = dir.join(format!("store-{}.bin", bytes.len()));
                std::fs::write(&target, bytes).unwrap();
                let link = dir.join(".morph.link");
                let _ = std::fs::remove_file(&link);
                std::os::unix::fs::symlink(&target, &link).unwrap();
                std::fs::rename(&link, &morph).unwrap();
            }),
        ),
        (
            "editor save via temp file",
            Box::new(|bytes: &[u8]| {
                let temp = dir.join("morph.wasm~");
                std::fs::write(&temp, bytes).unwrap();
                std::fs::rename(&temp, &morph).unwrap();
            }),
        ),
    ];
    let mut next_is_reverse = true;
    for (way, write) in ways {
        let (bytes, plugin) = if next_is_reverse {
            (&reverse, "reverse")
        } else {
            (&echo, "echo")
        };
        next_is_reverse = !next_is_reverse;
        let before = *changes.borrow();
        write(bytes);
        serving(version_of(plugin)).await;
        // A second reload of the same write would come within the watcher's settle time;
        // four of them bound it.
        tokio::time::sleep(wasmgear_worker::plugins::SETTLE * 4).await;
        assert_eq!(
            *changes.borrow(),
            before + 1,
            "{way}: not exactly one reload"
        );
    }
    worker.stop().await;
}

/// What `wasmgear workers --json` says each live worker serves: function → plugin version.
fn served_by_workers(url: &str) -> Vec<serde_json::Value> {
    let out = wasmgear_testkit::wasmgear(&["workers", "--json"], &[("WASMGEAR_REDIS_URL", url)]);
    let list = wasmgear_testkit::json(&out);
    let list = list.as_array().expect("a JSON array of workers");
    list.iter()
        .map(|w| w["advertised"]["functions"].clone())
        .collect()
}

/// A worker on an empty plugin directory (asked to serve `echo`) starts and says it serves
/// nothing yet: its entry in the worker list names no function, `wasmgear_functions_served`
/// is 0, and it is ready (Redis answers). A plugin put there later is served, and the list
/// shows its version.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_on_an_empty_directory_serves_what_appears() {
    let redis = TestRedis::start();
    let plugins = tempfile::tempdir().unwrap();
    let (worker, address) = worker_with_metrics(&redis, plugins.path(), &["--functions", "echo"]);
    // Saying so, before it serves, is behaviour under test.
    let log = worker.log();
    assert!(
        log.contains("serving nothing until") && log.contains("have no plugin yet"),
        "{log}"
    );
    let url = redis.url();
    let served = eventually(Duration::from_secs(30), "the worker list entry", || async {
        served_by_workers(&url).pop()
    })
    .await;
    assert_eq!(served, serde_json::json!({}));
    let ready = get_at(&address, "/readyz").await;
    assert_eq!(
        ready.status,
        200,
        "{}",
        String::from_utf8_lossy(&ready.body)
    );
    let scrape = Scrape::parse(&get_at(&address, "/metrics").await);
    assert_eq!(scrape.of("wasmgear_functions_served", &[]), 0.0);
    assert_eq!(scrape.of("wasmgear_plugins_loaded", &[]), 0.0);

    deploy(plugins.path(), "echo", "echo");
    let echo_version = version_of("echo");
    eventually(Duration::from_secs(30), "the list to show echo", || async {
        let served = served_by_workers(&url);
        (served.len() == 1 && served[0]["echo"] == echo_version.as_str()).then_some(())
    })
    .await;
    let client = redis.client().await;
    let id = client
        .enqueue(&function("echo"), b"arrived", &EnqueueOptions::default())
        .await
        .unwrap();
    let status = client.wait(&id, WAIT, |_| {}).await.unwrap();
    assert_eq!(status.output.as_deref(), Some(&b"arrived"[..]));
    let scrape = Scrape::parse(&get_at(&address, "/metrics").await);
    assert_eq!(scrape.of("wasmgear_functions_served", &[]), 1.0);
    drop(worker);
}

/// A plugin that cannot load (its memory is over the worker's limit) is tried once per
/// change of its file, and reported once: scans for other changes in the directory do not
/// load it again, nor does the periodic rescan; touching the file
/// tries it again, and a file that fits then serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_that_cannot_load_is_tried_once_per_change() {
    let redis = TestRedis::start();
    let dir = plugin_dir(&["echo"]);
    let path = dir.path().to_path_buf();
    let mut options = TestWorkerOptions {
        watch: true,
        ..TestWorkerOptions::default()
    };
    // big-memory's memory starts at over 4 MiB; echo's fits (with Rust's default stack
    // too, 1 MiB, if it was built without plugins/.cargo/config.toml's smaller one).
    options.runtime.limits.memory_bytes = 2 << 20;
    let worker = TestWorker::start_on(&redis.url(), dir, options).await;
    let registry = worker.registry.clone();
    let client = redis.client().await;
    let failed = || registry.load_counts().failed;

    deploy(&path, "big", "big-memory");
    let error = eventually(
        Duration::from_secs(30),
        "the worker list to show the error",
        || async {
            let workers = client.workers().await.ok()?;
            let ad = workers.into_iter().next()?.ad.ok()?;
            ad.plugin_errors
                .into_iter()
                .find(|e| e.contains("big.wasm"))
        },
    )
    .await;
    assert!(error.contains("memory"), "{error}");
    assert_eq!(failed(), 1);

    // Other changes in the directory: each is a scan, and none loads the plugin again.
    for i in 0..3 {
        let scans = registry.scans();
        std::fs::write(path.join(format!("notes-{i}.txt")), "not a plugin").unwrap();
        eventually(Duration::from_secs(30), "a scan of the change", || async {
            (registry.scans() > scans).then_some(())
        })
        .await;
    }
    assert_eq!(failed(), 1, "the unchanged file was loaded again");

    // Time passes: the safety-net rescan (every RESCAN, without any event) finds the file
    // unchanged and does not load it again either.
    let scans = registry.scans();
    eventually(
        wasmgear_worker::plugins::RESCAN + Duration::from_secs(30),
        "a rescan without a change",
        || async { (registry.scans() > scans).then_some(()) },
    )
    .await;
    assert_eq!(failed(), 1, "a rescan loaded the unchanged file again");
    assert_eq!(registry.errors().len(), 1, "{:?}", registry.errors());

    // Touched: tried again (and reported again).
    let file = std::fs::File::options()
        .append(true)
        .open(path.join("big.wasm"))
        .unwrap();
    file.set_modified(std::time::SystemTime::now() + Duration::from_secs(1))
        .unwrap();
    drop(file);
    eventually(Duration::from_secs(30), "a second attempt", || async {
        (failed() == 2).then_some(())
    })
    .await;
    assert_eq!(registry.errors().len(), 1, "{:?}", registry.errors());

    // Replaced by a file that fits: it serves.
    deploy(&path, "big", "echo");
    eventually(
        Duration::from_secs(30),
        "the fixed file to serve",
        || async {
            (registry.get(&function("big")).is_some() && registry.errors().is_empty()).then_some(())
        },
    )
    .await;
    let id = client
        .enqueue(&function("big"), b"fits now", &EnqueueOptions::default())
        .await
        .unwrap();
    let status = client.wait(&id, WAIT, |_| {}).await.unwrap();
    assert_eq!(status.output.as_deref(), Some(&b"fits now"[..]));
    assert_eq!(failed(), 2);
    worker.stop().await;
}
