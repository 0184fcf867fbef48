//! Per-job cost and end-to-end throughput, printed as a table (`cargo bench -p wasmgear`).
//!
//! 1. runtime only: a fresh instance of the trivial `echo` component, one call, drop, with
//!    every limit on (epoch deadline, memory limiter, output capture, hooks), against bare
//!    wasmtime on the same pooled engine, and with fuel; and 200 sleeping jobs at once on two threads;
//! 2. the same through the worker node and a private `redis-server`: jobs enqueued in bulk,
//!    leased, run and completed, measured from the first enqueue to the last completion;
//! 3. the queue alone: enqueue one by one and in bulk, leases per second, and the pick-up
//!    latency of an idle worker (enqueue to start, on Redis' own clock);
//! 4. Redis memory per queued and per finished job (32-byte input and output);
//! 5. plugins: loading with a cold and a warm compile cache, and the time from a new plugin
//!    file written into a watched directory to the first job served by it.
//!
//! `WASMGEAR_BENCH_ONLY=per_job,queue` runs only those sections (per_job, end_to_end,
//! queue, memory, reload).

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use wasmgear_client::{Client, EnqueueOptions, JobState, WorkerQueue};
use wasmgear_proto::{FunctionName, LeaseRequest, Outcome};
use wasmgear_redis_server::RedisServer;
use wasmgear_runtime::CancelSignal;
use wasmgear_runtime::{JobHooks, Runtime, RuntimeConfig};
use wasmgear_testkit::{TestWorker, TestWorkerOptions};
use wasmgear_worker::WorkerConfig;

use common::{Quiet, job_info};

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    // WASMGEAR_BENCH_ONLY=per_job,queue runs some sections: per_job, end_to_end, queue,
    // memory, reload.
    let only = std::env::var("WASMGEAR_BENCH_ONLY").ok();
    let wanted = |section: &str| {
        only.as_deref()
            .is_none_or(|o| o.split(',').any(|s| s == section))
    };
    rt.block_on(async {
        if wanted("per_job") {
            per_job().await;
        }
        if wanted("end_to_end") {
            end_to_end().await;
        }
        if wanted("queue") {
            queue_alone().await;
        }
        if wanted("memory") {
            redis_memory().await;
        }
        if wanted("reload") {
            reload_and_cache().await;
        }
    });
}

/// The state of the bare baseline: WASI and nothing else.
struct Bare {
    wasi: wasmtime_wasi::WasiCtx,
    table: wasmtime::component::ResourceTable,
}

impl wasmtime_wasi::WasiView for Bare {
    fn ctx(&mut self) -> wasmtime_wasi::WasiCtxView<'_> {
        wasmtime_wasi::WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

mod bare_imports {
    use wasmgear_runtime::bindings::wasmgear::job::{
        cancel, checkpoint, config, dependencies, jobs, log, progress, types,
    };

    impl types::Host for super::Bare {}
    impl progress::Host for super::Bare {
        fn report(&mut self, _: u64, _: u64, _: Option<String>) {}
    }
    impl log::Host for super::Bare {
        fn write(&mut self, _: log::Level, _: String) {}
    }
    impl cancel::Host for super::Bare {
        fn cancelled(&mut self) -> bool {
            false
        }
    }
    impl config::Host for super::Bare {
        fn get(&mut self, _: String) -> Option<String> {
            None
        }
    }
    // Child jobs: refused, as for a plugin with no grant (echo never asks).
    impl jobs::Host for super::Bare {
        async fn enqueue(
            &mut self,
            _: String,
            _: Vec<u8>,
            _: jobs::ChildOptions,
        ) -> Result<String, String> {
            Err("not granted".into())
        }
        async fn wait(&mut self, _: String, _: u64) -> Result<jobs::Outcome, String> {
            Err("not granted".into())
        }
    }
    // Dependencies: none, as for a job run without a queue (echo never asks).
    impl dependencies::Host for super::Bare {
        async fn count(&mut self) -> Result<u32, String> {
            Ok(0)
        }
        async fn page(&mut self, _: u32, _: u32) -> Result<Vec<dependencies::Dependency>, String> {
            Ok(Vec::new())
        }
        async fn output(&mut self, position: u32, _: u64, _: u32) -> Result<Vec<u8>, String> {
            Err(format!("no dependency at position {position}"))
        }
    }
    impl checkpoint::Host for super::Bare {
        async fn load(&mut self) -> Result<Option<Vec<u8>>, String> {
            Ok(None)
        }
        fn save(&mut self, _: Vec<u8>) -> Result<(), String> {
            Ok(())
        }
    }
}

/// Per-job cost of `run` with every limit on, against a bare wasmtime baseline on the same
/// pooled engine (no epoch deadline, no limiter, no output capture), and with fuel.
async fn per_job() {
    use wasmgear_runtime::bindings::{JobPre, WitJobInfo};
    use wasmtime::component::{HasSelf, Linker};

    let n = 5000;
    let input = vec![7u8; 64];
    let path = std::path::Path::new(wasmgear_test_artifacts::ECHO);

    // Bare baseline: the same engine (pooling allocator), but no deadline, no limiter, no
    // output capture, no hooks.
    let pooled = Runtime::new(RuntimeConfig {
        max_instances: 4,
        ..RuntimeConfig::default()
    })
    .unwrap();
    let engine = pooled.engine().clone();
    let mut linker = Linker::<Bare>::new(&engine);
    wasmtime_wasi::p2::add_to_linker_async(&mut linker).unwrap();
    wasmgear_runtime::bindings::Job::add_to_linker::<_, HasSelf<_>>(&mut linker, |s| s).unwrap();
    let component = wasmtime::component::Component::from_file(&engine, path).unwrap();
    let pre = JobPre::new(linker.instantiate_pre(&component).unwrap()).unwrap();
    let info = WitJobInfo {
        id: "echo:1".into(),
        function: "echo".into(),
        attempt: 1,
        max_attempts: 1,
        enqueued_at_ms: 0,
        timeout_ms: 60_000,
    };
    let bare = |pre: JobPre<Bare>| {
        let (engine, input, info) = (engine.clone(), input.clone(), info.clone());
        async move {
            let state = Bare {
                wasi: wasmtime_wasi::WasiCtx::builder().build(),
                table: Default::default(),
            };
            let mut store = wasmtime::Store::new(&engine, state);
            store.set_epoch_deadline(1 << 40);
            let job = pre.instantiate_async(&mut store).await.unwrap();
            let output = job
                .wasmgear_job_handler()
                .call_run(&mut store, &info, &input)
                .await
                .unwrap();
            assert_eq!(output.ok().as_deref(), Some(&input[..]));
        }
    };
    for _ in 0..200 {
        bare(pre.clone()).await;
    }
    let started = Instant::now();
    for _ in 0..n {
        bare(pre.clone()).await;
    }
    let baseline = started.elapsed() / n;
    println!(
        "runtime, bare wasmtime (same pooled engine, no limits):    {:>6.1} µs/job",
        micros(baseline)
    );

    for fuel in [false, true] {
        let runtime = Runtime::new(RuntimeConfig {
            max_instances: 4,
            fuel,
            ..RuntimeConfig::default()
        })
        .unwrap();
        let plugin = runtime.load_plugin(path).unwrap();
        let hooks: Arc<dyn JobHooks> = Arc::new(Quiet);
        let job = job_info("echo");
        for _ in 0..200 {
            runtime
                .run(&plugin, &job, &input, hooks.clone(), CancelSignal::new())
                .await;
        }
        let started = Instant::now();
        for _ in 0..n {
            let outcome = runtime
                .run(&plugin, &job, &input, hooks.clone(), CancelSignal::new())
                .await;
            assert!(matches!(outcome, Outcome::Succeeded(ref o) if o == &input));
        }
        let per = started.elapsed() / n;
        let what = if fuel {
            "wasmgear run, every limit on + fuel metering:"
        } else {
            "wasmgear run, every limit on (pooling, deadline, caps):"
        };
        println!(
            "runtime, {what:<48} {:>6.1} µs/job ({:+.1} µs vs bare)",
            micros(per),
            micros(per) - micros(baseline)
        );
    }

    // Jobs that wait on I/O share the threads: 200 jobs that each sleep 200 ms.
    let runtime = Runtime::new(RuntimeConfig {
        max_instances: 210,
        ..RuntimeConfig::default()
    })
    .unwrap();
    let count = runtime
        .load_plugin(std::path::Path::new(wasmgear_test_artifacts::COUNT))
        .unwrap();
    let runtime = Arc::new(runtime);
    let count = Arc::new(count);
    let started = Instant::now();
    let jobs: Vec<_> = (0..200)
        .map(|_| {
            let (runtime, count) = (runtime.clone(), count.clone());
            tokio::spawn(async move {
                let hooks: Arc<dyn JobHooks> = Arc::new(Quiet);
                runtime
                    .run(
                        &count,
                        &job_info("echo"),
                        b"1 200",
                        hooks,
                        CancelSignal::new(),
                    )
                    .await
            })
        })
        .collect();
    for job in jobs {
        assert!(matches!(job.await.unwrap(), Outcome::Succeeded(_)));
    }
    println!(
        "runtime, 200 jobs each sleeping 200 ms, all at once on 2 threads: {:.0} ms in all",
        started.elapsed().as_secs_f64() * 1e3
    );
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

async fn end_to_end() {
    let dir = tempfile::tempdir().unwrap();
    let redis = RedisServer::start(dir.path(), 0, &[]).unwrap();
    let plugins = tempfile::tempdir().unwrap();
    std::fs::copy(
        wasmgear_test_artifacts::ECHO,
        plugins.path().join("echo.wasm"),
    )
    .unwrap();
    for concurrency in [1usize, 16] {
        let config = WorkerConfig {
            concurrency,
            ..WorkerConfig::default()
        };
        let worker =
            TestWorker::start_in(&redis.url(), plugins.path(), worker_options(config, false)).await;

        let client = Client::connect(&redis.url()).await.unwrap();
        let echo = FunctionName::new("echo").unwrap();
        let n = 2000;
        let inputs: Vec<Vec<u8>> = (0..n).map(|i| format!("job {i}").into_bytes()).collect();
        let batch: Vec<(&[u8], EnqueueOptions)> = inputs
            .iter()
            .map(|i| (i.as_slice(), EnqueueOptions::default()))
            .collect();
        let started = Instant::now();
        let ids = client.enqueue_many(&echo, &batch).await.unwrap();
        let last = ids.last().unwrap().clone();
        let status = client
            .wait(&last, Some(Duration::from_secs(120)), |_| {})
            .await
            .unwrap();
        assert_eq!(status.record.state, JobState::Succeeded);
        // FIFO: when the last job is done every other one is leased; wait for them too.
        for id in &ids {
            while !client.status(id).await.unwrap().record.state.is_final() {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
        let elapsed = started.elapsed();
        println!(
            "end to end: {n} echo jobs, concurrency {concurrency:>2}: {:>8.0} jobs/s ({:.1} ms/job)",
            n as f64 / elapsed.as_secs_f64(),
            elapsed.as_secs_f64() * 1e3 / n as f64
        );
        worker.stop().await;
    }
}

async fn queue_alone() {
    let dir = tempfile::tempdir().unwrap();
    let redis = RedisServer::start(dir.path(), 0, &[]).unwrap();
    let client = Client::connect(&redis.url()).await.unwrap();
    let options = EnqueueOptions::default();

    let single = FunctionName::new("single").unwrap();
    let n = 5000;
    let started = Instant::now();
    for _ in 0..n {
        client.enqueue(&single, b"x", &options).await.unwrap();
    }
    rate("enqueue, one at a time", n, started.elapsed());

    let parallel = FunctionName::new("parallel").unwrap();
    let started = Instant::now();
    let tasks: Vec<_> = (0..16)
        .map(|_| {
            let (client, f, options) = (client.clone(), parallel.clone(), options.clone());
            tokio::spawn(async move {
                for _ in 0..n / 16 {
                    client.enqueue(&f, b"x", &options).await.unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    rate(
        "enqueue, 16 clients at once",
        n / 16 * 16,
        started.elapsed(),
    );

    let bulk = FunctionName::new("bulk").unwrap();
    let batch: Vec<(&[u8], EnqueueOptions)> =
        (0..1000).map(|_| (&b"x"[..], options.clone())).collect();
    let started = Instant::now();
    for _ in 0..50 {
        client.enqueue_many(&bulk, &batch).await.unwrap();
    }
    rate("enqueue in bulk, 1000 per call", 50_000, started.elapsed());

    let worker = WorkerQueue::connect(&redis.url(), "bench").await.unwrap();
    let ttl = Duration::from_secs(60);
    let started = Instant::now();
    for _ in 0..n {
        let leases = worker
            .lease(&[LeaseRequest::new(single.clone())], 1, ttl)
            .await
            .unwrap();
        assert_eq!(leases.len(), 1);
    }
    rate("lease, one job per call", n, started.elapsed());
    let started = Instant::now();
    let mut leased = 0;
    while leased < 50_000 {
        leased += worker
            .lease(&[LeaseRequest::new(bulk.clone())], 100, ttl)
            .await
            .unwrap()
            .len();
    }
    rate("lease, 100 jobs per call", leased as u32, started.elapsed());

    // Pick-up latency: an idle worker node, one job at a time.
    let plugins = tempfile::tempdir().unwrap();
    std::fs::copy(
        wasmgear_test_artifacts::ECHO,
        plugins.path().join("echo.wasm"),
    )
    .unwrap();
    let worker = TestWorker::start_in(
        &redis.url(),
        plugins.path(),
        worker_options(WorkerConfig::default(), false),
    )
    .await;
    let echo = FunctionName::new("echo").unwrap();
    let mut latencies = Vec::new();
    for _ in 0..200 {
        tokio::time::sleep(Duration::from_millis(5)).await;
        let id = client.enqueue(&echo, b"x", &options).await.unwrap();
        let status = client
            .wait(&id, Some(Duration::from_secs(30)), |_| {})
            .await
            .unwrap();
        let started = status.record.history[0].started_ms.unwrap();
        latencies.push(started.saturating_sub(status.record.created_ms));
    }
    latencies.sort();
    println!(
        "pick-up latency of an idle worker (enqueue to start, Redis clock): median {} ms, p99 {} ms, max {} ms",
        latencies[latencies.len() / 2],
        latencies[latencies.len() * 99 / 100],
        latencies[latencies.len() - 1]
    );
    worker.stop().await;
}

/// Redis' `used_memory`, in bytes.
async fn used_memory(client: &redis::Client) -> i64 {
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let info: String = redis::cmd("INFO")
        .arg("memory")
        .query_async(&mut conn)
        .await
        .unwrap();
    info.lines()
        .find_map(|line| line.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap()
}

async fn redis_memory() {
    let dir = tempfile::tempdir().unwrap();
    let redis = RedisServer::start(dir.path(), 0, &[]).unwrap();
    let raw = redis::Client::open(redis.url()).unwrap();
    let client = Client::connect(&redis.url()).await.unwrap();
    let f = FunctionName::new("memory").unwrap();
    let n = 20_000;
    let input = [b'i'; 32];
    let batch: Vec<(&[u8], EnqueueOptions)> = (0..1000)
        .map(|_| (&input[..], EnqueueOptions::default()))
        .collect();
    // One job first, so that the keys themselves are not counted per job.
    client
        .enqueue(&f, &input, &EnqueueOptions::default())
        .await
        .unwrap();
    let empty = used_memory(&raw).await;
    for _ in 0..n / 1000 {
        client.enqueue_many(&f, &batch).await.unwrap();
    }
    let queued = used_memory(&raw).await;
    let worker = WorkerQueue::connect(&redis.url(), "memory").await.unwrap();
    let notes = wasmgear_proto::AttemptNotes::default();
    let mut finished = 0;
    while finished <= n {
        let leases = worker
            .lease(
                &[LeaseRequest::new(f.clone())],
                100,
                Duration::from_secs(60),
            )
            .await
            .unwrap();
        if leases.is_empty() {
            break;
        }
        for lease in &leases {
            worker.complete(lease, &[b'o'; 32], &notes).await.unwrap();
        }
        finished += leases.len();
    }
    let done = used_memory(&raw).await;
    println!(
        "Redis memory per job (32-byte input/output): queued {} bytes, finished {} bytes",
        (queued - empty) / n as i64,
        (done - empty) / n as i64
    );
}

fn rate(what: &str, n: u32, elapsed: Duration) {
    println!(
        "{what:<40} {:>9.0} /s ({n} in {:.2} s)",
        n as f64 / elapsed.as_secs_f64(),
        elapsed.as_secs_f64()
    );
}

async fn reload_and_cache() {
    use wasmgear_runtime::{CompileCache, CompileSource};

    let cache_dir = tempfile::tempdir().unwrap();
    for plugin in [
        wasmgear_test_artifacts::ECHO,
        wasmgear_test_artifacts::HOSTILE,
    ] {
        let mut times = Vec::new();
        for _ in 0..2 {
            let config = RuntimeConfig {
                max_instances: 1,
                cache: Some(CompileCache::new(cache_dir.path())),
                ..RuntimeConfig::default()
            };
            let runtime = Runtime::new(config).unwrap();
            let started = Instant::now();
            let loaded = runtime.load_plugin(std::path::Path::new(plugin)).unwrap();
            times.push((started.elapsed(), loaded.compiled_from()));
        }
        assert_eq!(
            (times[0].1, times[1].1),
            (CompileSource::Compiled, CompileSource::Cache)
        );
        let name = std::path::Path::new(plugin)
            .file_name()
            .unwrap()
            .to_string_lossy();
        println!(
            "plugin {name} ({} KiB): load with a cold cache {:.1} ms, warm {:.2} ms",
            std::fs::metadata(plugin).unwrap().len() / 1024,
            times[0].0.as_secs_f64() * 1e3,
            times[1].0.as_secs_f64() * 1e3
        );
    }

    // Hot reload: a worker watching its directory; the file is replaced; time until the
    // first job returns the new plugin's output.
    let dir = tempfile::tempdir().unwrap();
    let redis = RedisServer::start(dir.path().join("redis").as_path(), 0, &[]).unwrap();
    let plugins = dir.path().join("plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    std::fs::copy(wasmgear_test_artifacts::ECHO, plugins.join("morph.wasm")).unwrap();
    let options = worker_options(WorkerConfig::default(), true);
    let worker = TestWorker::start_in(&redis.url(), &plugins, options).await;
    let client = Client::connect(&redis.url()).await.unwrap();
    let morph = FunctionName::new("morph").unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let temp = plugins.join(".morph.tmp");
    std::fs::copy(wasmgear_test_artifacts::REVERSE, &temp).unwrap();
    let written = Instant::now();
    std::fs::rename(&temp, plugins.join("morph.wasm")).unwrap();
    loop {
        let id = client
            .enqueue(&morph, b"ab", &EnqueueOptions::default())
            .await
            .unwrap();
        let status = client
            .wait(&id, Some(Duration::from_secs(30)), |_| {})
            .await
            .unwrap();
        if status.output.as_deref() == Some(&b"ba"[..]) {
            break;
        }
        assert!(
            written.elapsed() < Duration::from_secs(30),
            "the new plugin never served"
        );
    }
    println!(
        "hot reload: file renamed into place to first job served by the new plugin: {:.0} ms (of which {} ms settle time)",
        written.elapsed().as_secs_f64() * 1e3,
        wasmgear_worker::plugins::SETTLE.as_millis()
    );
    worker.stop().await;
}

/// How the benchmarks' worker nodes (in this process, `wasmgear_testkit::TestWorker`) are
/// set up: a runtime with an instance for every slot and a few more.
fn worker_options(config: WorkerConfig, watch: bool) -> TestWorkerOptions {
    TestWorkerOptions {
        runtime: RuntimeConfig {
            max_instances: config.concurrency as u32 + 4,
            ..RuntimeConfig::default()
        },
        config,
        watch,
        ..TestWorkerOptions::default()
    }
}
