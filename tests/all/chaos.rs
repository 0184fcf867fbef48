//! The chaos suite: worker processes run thousands of jobs while workers are SIGKILLed,
//! redis-server is SIGKILLed and started again (append-only file on), and one worker is cut
//! off from Redis for longer than its lease. Then, from what Redis holds, the events it
//! published and what every run of every job told an observer: every job succeeded with
//! the right output, with exactly one `finish` event (but for a job completed in the last
//! second before redis-server was killed, whose event may have died with it); none was
//! lost; a dead worker's jobs
//! were leased again within the lease TTL plus 1 s; and no job ran in two places at once.
//!
//! Each worker reaches Redis through a [`Proxy`] of its own, so that one can be cut off and
//! so that, while Redis restarts, the workers reach it only once the test listens to its
//! events again (no event can slip through unseen).

use std::collections::{BTreeMap, HashMap};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures_util::StreamExt;
use wasmgear_client::{EnqueueOptions, JobRecord, JobState};
use wasmgear_proto::JobId;
use wasmgear_proto::keys::FunctionKeys;

use wasmgear_testkit::proxy::Proxy;
use wasmgear_testkit::{TestRedis, WorkerProcess, artifact, function};

/// Worker processes; worker 0 is the one cut off, the others are the ones killed.
const WORKERS: usize = 4;
/// The lease TTL the workers are given.
const TTL: Duration = Duration::from_secs(3);
/// Jobs are enqueued in waves, one every `WAVE_EVERY`, while the chaos goes on.
const WAVES: usize = 60;
const WAVE_EVERY: Duration = Duration::from_millis(500);
/// Short jobs (one beat, then done) per wave.
const SHORT_PER_WAVE: usize = 50;
/// A long job (beating every 50 ms for `LONG_MS`, longer than the lease) every this many waves.
const LONG_EVERY: usize = 2;
const LONG_MS: u64 = 8000;
/// The waves at which a worker (not worker 0) is SIGKILLed, and started again.
const KILLS: [usize; 8] = [4, 9, 14, 19, 26, 31, 50, 55];
/// Worker 0 is cut off from Redis from this wave to that one (7 s: more than twice the TTL).
const CUT: (usize, usize) = (22, 36);
/// redis-server is SIGKILLed at this wave, and kept down for `REDIS_DOWN`.
const REDIS_KILL: usize = 42;
const REDIS_DOWN: Duration = Duration::from_secs(1);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_job_is_lost_or_run_twice_at_once_through_kills_and_partitions() {
    // Dropped last: the reason of a failure ends the output, after the workers' logs.
    let _last_words = wasmgear_testkit::last_words::LastWords::new();
    let redis = TestRedis::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let observer = Observer::start();
    let events = EventLog::default();
    let chaos = function("chaos");
    let keys = FunctionKeys::new(&chaos);
    events.listen(&redis.url(), &keys.events()).await;

    let plugins = tempfile::tempdir().unwrap();
    std::fs::copy(artifact("chaos"), plugins.path().join("chaos.wasm")).unwrap();
    std::fs::write(
        plugins.path().join("chaos.toml"),
        format!("[http]\nallow = [\"127.0.0.1:{}\"]\n", observer.port),
    )
    .unwrap();
    let mut proxies = Vec::new();
    let mut workers = Vec::new();
    for _ in 0..WORKERS {
        let proxy = Proxy::start(redis.port()).await;
        workers.push(spawn_worker(&proxy, plugins.path()));
        proxies.push(proxy);
    }
    // Started together, so that they compile their plugins at once; each must serve.
    for worker in &mut workers {
        worker.wait_ready();
    }

    let client = redis.client().await;
    let options = EnqueueOptions {
        max_attempts: Some(100),
        timeout: Some(Duration::from_secs(60)),
        ..EnqueueOptions::default()
    };
    let mut expected: HashMap<JobId, String> = HashMap::new();
    // (when, the jobs the lost worker held): for each worker killed, and the one cut off.
    let mut losses: Vec<(u64, Vec<JobId>)> = Vec::new();
    // Which of them is the cut.
    let mut cut_loss = 0;
    let mut random = seed();
    eprintln!("chaos seed {random}");
    let started = tokio::time::Instant::now();
    let mut redis_down_ms = 0;
    let mut redis_killed_at = 0;
    for wave in 0..WAVES {
        tokio::time::sleep_until(started + WAVE_EVERY * wave as u32).await;
        let mut inputs = Vec::new();
        for i in 0..SHORT_PER_WAVE {
            inputs.push((0, format!("short-{wave}-{i}")));
        }
        if wave % LONG_EVERY == 0 {
            inputs.push((LONG_MS, format!("long-{wave}")));
        }
        let payloads: Vec<Vec<u8>> = inputs
            .iter()
            .map(|(ms, name)| format!("{ms} 127.0.0.1:{} {name}", observer.port).into_bytes())
            .collect();
        let jobs: Vec<(&[u8], EnqueueOptions)> = payloads
            .iter()
            .map(|p| (p.as_slice(), options.clone()))
            .collect();
        let ids = client
            .enqueue_many(&chaos, &jobs)
            .await
            .expect("enqueue a wave");
        for (id, (_, name)) in ids.into_iter().zip(inputs) {
            expected.insert(id, format!("{name} done"));
        }

        if KILLS.contains(&wave) {
            random = xorshift(random);
            let victim = 1 + (random % (WORKERS as u64 - 1)) as usize;
            let pid = workers[victim].pid();
            workers[victim].signal("KILL");
            let at = now_ms();
            losses.push((at, held_by(&redis, &keys, pid).await));
            workers[victim] = spawn_worker(&proxies[victim], plugins.path());
        }
        if wave == CUT.0 {
            proxies[0].cut();
            let at = now_ms();
            cut_loss = losses.len();
            losses.push((at, held_by(&redis, &keys, workers[0].pid()).await));
        }
        if wave == CUT.1 {
            proxies[0].heal();
        }
        if wave == REDIS_KILL {
            // Nobody reaches Redis until the test listens to its events again.
            for proxy in &proxies {
                proxy.cut();
            }
            let down = std::time::Instant::now();
            redis_killed_at = now_ms();
            redis.kill();
            tokio::time::sleep(REDIS_DOWN).await;
            tokio::task::block_in_place(|| redis.restart());
            events.listen(&redis.url(), &keys.events()).await;
            for proxy in &proxies {
                proxy.heal();
            }
            redis_down_ms = down.elapsed().as_millis();
        }
    }

    // Wait (bounded) until every job has a `finish` event; the checks below say what is
    // wrong if some never get one.
    let total = expected.len();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(180);
    while tokio::time::Instant::now() < deadline && events.finished() < total {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut conn = redis.raw().await;

    // Every job succeeded, with its own output, one accepted completion and one `finish`.
    let jobs: u64 = redis::cmd("HLEN")
        .arg(keys.jobs())
        .query_async(&mut conn)
        .await
        .unwrap();
    let outputs: HashMap<u64, Vec<u8>> = redis::cmd("HGETALL")
        .arg(keys.output())
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(jobs as usize, total, "jobs in Redis");
    // When each job's accepted completion ended, to tell which could have lost its event.
    let mut completed_at: HashMap<String, u64> = HashMap::new();
    for (id, want) in &expected {
        let record: JobRecord =
            serde_json::from_str(&redis.record_json(&id.function, id.seq).await.unwrap()).unwrap();
        assert_eq!(record.state, JobState::Succeeded, "{id}");
        let accepted: Vec<_> = record
            .history
            .iter()
            .filter(|a| a.outcome == "succeeded")
            .collect();
        assert_eq!(
            accepted.len(),
            1,
            "accepted completions of {id}: {:?}",
            record.history
        );
        completed_at.insert(id.to_string(), accepted[0].ended_ms);
        let output = outputs
            .get(&id.seq)
            .map(|o| String::from_utf8_lossy(o).into_owned());
        assert_eq!(output.as_deref(), Some(want.as_str()), "the output of {id}");
    }
    let events = events.take();
    let mut finished: HashMap<String, usize> = HashMap::new();
    for event in events.iter().filter(|e| e["event"] == "finish") {
        assert_eq!(event["state"], "succeeded", "{event}");
        let id = event["id"].as_str().unwrap_or_default().to_string();
        *finished.entry(id).or_default() += 1;
    }
    // Pub/sub delivers at most once: redis-server can be killed after a completion is in
    // its append-only file and before the event reached the listener (it writes to clients
    // after the fsync). Only a job completed in the last moments before the kill may lack
    // its `finish`; every other job has exactly one, and none has two.
    let mut unheard = Vec::new();
    for id in expected.keys() {
        let job = id.to_string();
        match finished.get(&job) {
            Some(1) => {}
            None if in_last_moments(completed_at[&job], redis_killed_at) => unheard.push(job),
            count => panic!(
                "finish events of {job}: {count:?} (completed at {} ms, redis killed at {redis_killed_at} ms)",
                completed_at[&job]
            ),
        }
    }

    // Every run of a job ended before the next one began.
    let mut runs: HashMap<&str, BTreeMap<&str, (u64, u64)>> = HashMap::new();
    let beats = observer.beats.lock().unwrap();
    for beat in beats.iter() {
        let span = runs
            .entry(&beat.job)
            .or_default()
            .entry(&beat.run)
            .or_insert((beat.at_ms, beat.at_ms));
        span.0 = span.0.min(beat.at_ms);
        span.1 = span.1.max(beat.at_ms);
    }
    let mut duplicates = 0;
    for id in expected.keys() {
        let job = id.to_string();
        let spans = runs
            .get(job.as_str())
            .unwrap_or_else(|| panic!("{job} never ran"));
        let mut spans: Vec<(u64, u64)> = spans.values().copied().collect();
        spans.sort();
        duplicates += spans.len() - 1;
        for pair in spans.windows(2) {
            assert!(
                pair[0].1 < pair[1].0,
                "{job} ran in two places at once: a run beat until {} ms, the next began at {} ms",
                pair[0].1,
                pair[1].0
            );
        }
    }

    // A lost worker's jobs were leased again within the TTL plus 1 s: the first run that
    // began after the loss (runs stamp their beats themselves; a lost run cannot begin
    // after its worker was lost).
    let mut reclaims = Vec::new();
    for (lost_at, held) in &losses {
        for id in held {
            let job = id.to_string();
            let again = runs
                .get(job.as_str())
                .into_iter()
                .flat_map(|spans| spans.values())
                .map(|span| span.0)
                .filter(|began| began > lost_at)
                .min();
            match again {
                Some(at) => reclaims.push(at - lost_at),
                // Its completion was on its way when the worker went.
                None => assert!(
                    finished.get(&job) == Some(&1) || unheard.contains(&job),
                    "{job} was never leased again"
                ),
            }
        }
    }
    reclaims.sort();
    let slowest = reclaims.last().copied().unwrap_or_default();
    assert!(
        slowest <= (TTL + Duration::from_secs(1)).as_millis() as u64,
        "a lost worker's job waited {slowest} ms to be leased again: {reclaims:?}"
    );
    // The worker cut off stopped every job it was running before their leases ran out (a
    // run beats until it is stopped; a run that began before the cut is that worker's,
    // since no job runs in two places at once): the last beat of each by the cut plus the
    // TTL, and a second for the beat in flight on a busy machine.
    let (cut_at, cut_held) = &losses[cut_loss];
    for id in cut_held {
        let job = id.to_string();
        for (began, until) in runs.get(job.as_str()).into_iter().flat_map(|s| s.values()) {
            if began < cut_at {
                assert!(
                    *until <= cut_at + (TTL + Duration::from_secs(1)).as_millis() as u64,
                    "{job} ran on {} ms after its worker was cut off",
                    until - cut_at
                );
            }
        }
    }
    eprintln!(
        "chaos: {total} jobs ({} long), {} worker kills, 1 partition of {} s, redis down {redis_down_ms} ms \
         ({} finish events unheard: {unheard:?}); \
         {} runs, {duplicates} executed again; {} jobs of lost workers leased again after {}..{} ms (median {} ms)",
        WAVES / LONG_EVERY,
        KILLS.len(),
        unheard.len(),
        (CUT.1 - CUT.0) as u32 * WAVE_EVERY.as_millis() as u32 / 1000,
        beats
            .iter()
            .map(|b| (&b.job, &b.run))
            .collect::<std::collections::HashSet<_>>()
            .len(),
        reclaims.len(),
        reclaims.first().copied().unwrap_or_default(),
        slowest,
        reclaims
            .get(reclaims.len() / 2)
            .copied()
            .unwrap_or_default(),
    );
}

/// A worker process reaching Redis through `proxy`, started (not waited for: see
/// [`WorkerProcess::wait_ready`]).
fn spawn_worker(proxy: &Proxy, plugins: &Path) -> WorkerProcess {
    let ttl = format!("{}s", TTL.as_secs());
    WorkerProcess::builder(&proxy.url())
        .plugins(plugins)
        .args(&["--no-watch", "--concurrency", "8", "--lease-ttl", &ttl])
        .args(&["--cancel-grace", "1s", "--retry-backoff", "100ms"])
        .spawn()
}

/// The jobs whose lease the worker with process id `pid` holds.
async fn held_by(redis: &TestRedis, keys: &FunctionKeys, pid: u32) -> Vec<JobId> {
    let mut conn = redis.raw().await;
    let leased: Vec<u64> = redis::cmd("ZRANGE")
        .arg(keys.leased())
        .arg(0)
        .arg(-1)
        .query_async(&mut conn)
        .await
        .unwrap();
    if leased.is_empty() {
        return Vec::new();
    }
    let mark = format!("-{pid}-");
    let mut held = Vec::new();
    for seq in leased {
        let Some(record) = redis.record_json(&function("chaos"), seq).await else {
            continue;
        };
        let record: JobRecord = serde_json::from_str(&record).unwrap();
        if record.worker.is_some_and(|worker| worker.contains(&mark)) {
            held.push(JobId {
                function: function("chaos"),
                seq,
            });
        }
    }
    held
}

/// Whether a completion at `completed_ms` came so shortly before redis-server was killed at
/// `killed_ms` that its event may have died with it: within the last second (both are
/// wall-clock times of this machine; Redis stamps a completion with its own `TIME`).
fn in_last_moments(completed_ms: u64, killed_ms: u64) -> bool {
    completed_ms <= killed_ms && killed_ms - completed_ms <= 1000
}

/// Milliseconds since the Unix epoch.
fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as u64
}

/// A random seed for the choice of workers to kill (printed, to read a failure by).
fn seed() -> u64 {
    use std::hash::BuildHasher;
    // std's hasher keys are random per process.
    std::collections::hash_map::RandomState::new().hash_one(now_ms()) | 1
}

fn xorshift(mut x: u64) -> u64 {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    x
}

/// One beat of a run of a job, as the `chaos` plugin sent it.
struct Beat {
    job: String,
    run: String,
    /// The wall clock when the run sent it, ms since the epoch.
    at_ms: u64,
}

/// An HTTP server that records the beats of the `chaos` plugin's runs.
struct Observer {
    port: u16,
    beats: Arc<Mutex<Vec<Beat>>>,
}

impl Observer {
    fn start() -> Observer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let beats = Arc::new(Mutex::new(Vec::new()));
        let recorded = beats.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let recorded = recorded.clone();
                std::thread::spawn(move || answer(stream, &recorded));
            }
        });
        Observer { port, beats }
    }
}

/// Reads one request, records its beat, answers 200.
fn answer(mut stream: TcpStream, beats: &Mutex<Vec<Beat>>) {
    let Some(text) = wasmgear_testkit::http_peer::read_head(&mut stream) else {
        return;
    };
    let path = text.split(' ').nth(1).unwrap_or_default();
    let mut parts = path.strip_prefix("/beat/").unwrap_or_default().split('/');
    if let (Some(job), Some(run), Some(at)) = (parts.next(), parts.next(), parts.next())
        && let Ok(at_ms) = at.parse()
    {
        beats.lock().unwrap().push(Beat {
            job: job.to_string(),
            run: run.to_string(),
            at_ms,
        });
    }
    wasmgear_testkit::http_peer::answer_ok(&mut stream);
}

/// The events published on one channel.
#[derive(Clone, Default)]
struct EventLog(Arc<Mutex<Vec<serde_json::Value>>>);

impl EventLog {
    /// Subscribes to `channel` (again, after a restart of Redis) and records what comes.
    async fn listen(&self, url: &str, channel: &str) {
        let client = redis::Client::open(url).unwrap();
        let mut pubsub = client.get_async_pubsub().await.expect("connect for events");
        pubsub
            .subscribe(channel)
            .await
            .expect("subscribe to events");
        let log = self.0.clone();
        tokio::spawn(async move {
            let mut messages = pubsub.into_on_message();
            while let Some(message) = messages.next().await {
                // One event, or an array of the events of one call.
                match serde_json::from_slice(message.get_payload_bytes()) {
                    Ok(serde_json::Value::Array(events)) => log.lock().unwrap().extend(events),
                    Ok(event) => log.lock().unwrap().push(event),
                    Err(_) => log.lock().unwrap().push(serde_json::Value::Null),
                }
            }
        });
    }

    /// How many different jobs have a `finish` event.
    fn finished(&self) -> usize {
        let log = self.0.lock().unwrap();
        log.iter()
            .filter(|e| e["event"] == "finish")
            .map(|e| e["id"].as_str().unwrap_or_default())
            .collect::<std::collections::HashSet<_>>()
            .len()
    }

    fn take(&self) -> Vec<serde_json::Value> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}
