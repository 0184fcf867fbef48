//! Failover behind Redis Sentinel: a primary, two replicas and three sentinels; three
//! worker processes and a producer on the sentinel URL; thousands of jobs enqueued in
//! waves while the primary is SIGKILLed, a replica promoted, and the old primary started
//! again (the sentinels make it a replica). No worker is restarted.
//!
//! Replication lags in real life (a busy replica, a slow link, a primary cut off from its
//! replicas); here the replicas are frozen (SIGSTOP) and their links to the primary closed
//! (`CLIENT KILL TYPE replica`) for the last [`FROZEN`] before the primary dies, then
//! thawed, so that what the primary acknowledged in that time never reached them.
//!
//! With `--min-replicas 1` (producer and workers), every job the producer was told was
//! enqueued succeeds, with its own output and exactly one accepted completion. Without it,
//! the test counts the acknowledged jobs the failover lost (README, "High availability"):
//! a lost job's id may even be given to a later job, so a job counts as kept only if its
//! output is its own.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use wasmgear_client::{Client, EnqueueOptions, JobId, JobState, MinReplicas};
use wasmgear_testkit::sentinel::{TestReplicaSet, cli};
use wasmgear_testkit::{WorkerProcess, artifact, eventually, eventually_sync, function};

/// Jobs are enqueued in waves, one every `WAVE_EVERY`.
const WAVES: usize = 40;
const WAVE_EVERY: Duration = Duration::from_millis(150);
const PER_WAVE: usize = 60;
/// The wave at which the replicas are frozen; the primary is SIGKILLed once it has taken
/// writes for at least [`FROZEN`] without them, and the replicas thawed right after (well
/// before the sentinels would count them down).
const FREEZE_WAVE: usize = 12;
const FROZEN: Duration = Duration::from_millis(300);
/// Waves of the cluster test (each of six calls, one per function).
const CLUSTER_WAVES: usize = 40;
/// Each worker's slots.
const WORKER_SLOTS: usize = 8;
/// How long the sentinels may take to promote a replica.
const FAILOVER_WITHIN: Duration = Duration::from_secs(30);
/// How long every worker may take to be listed live again after the failover.
const LIVE_AGAIN_WITHIN: Duration = Duration::from_secs(30);
/// How long every acknowledged job may take to end after the last wave.
const DRAIN_WITHIN: Duration = Duration::from_secs(120);

/// What one run through a failover measured.
struct Run {
    acknowledged: usize,
    lost: usize,
    /// Calls the producer was told failed (not acknowledged; not counted).
    refused_calls: usize,
    /// From the kill to the sentinels agreeing on a new primary, ms.
    failover_ms: u128,
    /// From the kill to the first enqueue acknowledged after it, ms.
    enqueue_back_ms: u64,
    /// From the kill to the first job enqueued after it succeeding, ms.
    work_back_ms: u64,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_jobs_survive_a_failover_with_min_replicas() {
    let run = run_through_failover(1).await;
    run.report("with --min-replicas 1");
    assert_eq!(run.lost, 0, "acknowledged jobs lost with --min-replicas 1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_without_min_replicas_is_measured() {
    let run = run_through_failover(0).await;
    run.report("without --min-replicas");
    // The writes in the frozen window reached no replica: what proves that the test above
    // would see a loss if `--min-replicas` did not prevent it.
    assert!(
        run.lost > 0,
        "nothing was lost: the replicas were not cut off in time"
    );
}

impl Run {
    /// Prints what was measured (the numbers README's "High availability" gives).
    fn report(&self, how: &str) {
        eprintln!(
            "failover {how}: {} jobs acknowledged, {} lost, {} calls refused; sentinels \
             promoted a replica {} ms after the kill; enqueues acknowledged again after {} ms, \
             jobs succeeding again after {} ms",
            self.acknowledged,
            self.lost,
            self.refused_calls,
            self.failover_ms,
            self.enqueue_back_ms,
            self.work_back_ms
        );
    }
}

/// Runs the scenario with producer and workers asking for `min_replicas`; checks what
/// holds either way (every job kept succeeded once, with its own output; every worker
/// worked on after the failover) and returns what was measured.
async fn run_through_failover(min_replicas: u32) -> Run {
    // Dropped last: the reason of a failure ends the output, after the nodes' logs.
    let _last_words = wasmgear_testkit::last_words::LastWords::new();
    let set = TestReplicaSet::start(2, 3);
    let url = set.url();
    let plugins = tempfile::tempdir().unwrap();
    std::fs::copy(artifact("echo"), plugins.path().join("echo.wasm")).unwrap();
    std::fs::copy(artifact("spin"), plugins.path().join("spin.wasm")).unwrap();
    let min = min_replicas.to_string();
    let mut workers: Vec<WorkerProcess> = (0..3)
        .map(|_| {
            WorkerProcess::builder(&url)
                .plugins(plugins.path())
                .args(&["--no-watch", "--concurrency", &WORKER_SLOTS.to_string()])
                .args(&["--lease-ttl", "3s"])
                .args(&["--min-replicas", &min, "--retry-backoff", "100ms"])
                .spawn()
        })
        .collect();
    for worker in &mut workers {
        worker.wait_ready();
    }
    let echo = function("echo");
    let client = Client::connect(&url)
        .await
        .expect("connect through the sentinels")
        .with_min_replicas(MinReplicas::new(min_replicas, Duration::from_secs(1)).unwrap());
    let options = EnqueueOptions {
        max_attempts: Some(50),
        ..EnqueueOptions::default()
    };

    let mut acknowledged: Vec<(JobId, String, u64)> = Vec::new();
    let mut refused_calls = 0;
    // The faults run on their own clock while the producer goes on (its calls may block).
    let (killed_tx, killed_rx) = std::sync::mpsc::channel::<(Instant, u64, usize)>();
    let mut killed: Option<(Instant, u64, usize)> = None;
    let mut faults = None;
    let mut enqueue_back_ms = None;
    let mut failover_ms = None;
    let started = tokio::time::Instant::now();
    for wave in 0..WAVES {
        tokio::time::sleep_until(started + WAVE_EVERY * wave as u32).await;
        let inputs: Vec<String> = (0..PER_WAVE)
            .map(|i| format!("wave {wave} job {i}"))
            .collect();
        let jobs: Vec<(&[u8], EnqueueOptions)> = inputs
            .iter()
            .map(|input| (input.as_bytes(), options.clone()))
            .collect();
        if wave == FREEZE_WAVE {
            let old = set.primary().expect("a primary");
            let primary_pid = set.node(old).pid();
            let primary_port = set.node(old).port();
            let replicas: Vec<u32> = (0..set.nodes())
                .filter(|i| *i != old)
                .map(|i| set.node(i).pid())
                .collect();
            let killed_tx = killed_tx.clone();
            faults = Some(std::thread::spawn(move || {
                signal("STOP", &replicas);
                // Frozen replicas cannot connect again: nothing more reaches them.
                cli(primary_port, &["client", "kill", "type", "replica"]);
                // The primary goes on acknowledging writes its replicas never see: it dies
                // once it has taken writes for at least FROZEN.
                let cut_at = Instant::now();
                let offset = || repl_offset(primary_port);
                let before = offset();
                eventually_sync(FAILOVER_WITHIN, "writes the replicas never see", || {
                    cut_at.elapsed() >= FROZEN && offset() > before
                });
                signal("KILL", &[primary_pid]);
                let _ = killed_tx.send((Instant::now(), now_ms(), old));
                signal("CONT", &replicas);
            }));
        }
        if killed.is_none() {
            killed = killed_rx.try_recv().ok();
        }
        let sent_ms = now_ms();
        let result = client.enqueue_many(&echo, &jobs).await;
        match result {
            Ok(ids) => {
                if let Some((_, killed_ms, _)) = killed
                    && enqueue_back_ms.is_none()
                {
                    enqueue_back_ms = Some(now_ms().saturating_sub(killed_ms));
                }
                acknowledged.extend(
                    ids.into_iter()
                        .zip(inputs)
                        .map(|(id, input)| (id, input, sent_ms)),
                );
            }
            Err(error) => {
                let since = killed.map(|(_, ms, _)| now_ms().saturating_sub(ms));
                eprintln!("wave {wave} refused ({since:?} ms after the kill): {error}");
                refused_calls += 1;
            }
        }
        if killed.is_none() {
            killed = killed_rx.try_recv().ok();
        }
        if let Some((at, _, old)) = killed
            && failover_ms.is_none()
            && set.primary().is_some_and(|p| p != old)
        {
            failover_ms = Some(at.elapsed().as_millis());
        }
    }
    faults
        .expect("faults injected")
        .join()
        .expect("the fault thread");
    let (killed_at, killed_ms, old) = killed
        .or_else(|| killed_rx.try_recv().ok())
        .expect("the primary was killed");
    // Reaped (it was killed behind its guard's back), and started again below.
    set.node(old).kill();
    let new = tokio::task::block_in_place(|| set.wait_failover_from(old, FAILOVER_WITHIN));
    let failover_ms = failover_ms.unwrap_or_else(|| killed_at.elapsed().as_millis());
    // The old primary comes back; the sentinels make it a replica of the new one.
    set.node(old)
        .ensure_running()
        .expect("restart the old primary");
    tokio::task::block_in_place(|| set.wait_replica_of(old, new, FAILOVER_WITHIN));

    // Every job left on the new primary ends (none is stuck, no worker restarted).
    eventually(DRAIN_WITHIN, "every job kept to end", || async {
        let queues = client.queues().await.ok()?;
        let echo = queues.iter().find(|q| q.function == "echo")?;
        (echo.queued + echo.scheduled + echo.running == 0).then_some(())
    })
    .await;

    let mut lost = 0;
    let mut work_back_ms = u64::MAX;
    for (id, input, sent_ms) in &acknowledged {
        let status = match client.status(id).await {
            Ok(status) if status.output.as_deref() == Some(input.as_bytes()) => status,
            // Gone, or its id given to a later job: the write was lost.
            _ => {
                lost += 1;
                continue;
            }
        };
        assert_eq!(status.record.state, JobState::Succeeded, "{id}");
        let accepted: Vec<_> = status
            .record
            .history
            .iter()
            .filter(|a| a.outcome == "succeeded")
            .collect();
        assert_eq!(
            accepted.len(),
            1,
            "accepted completions of {id}: {:?}",
            status.record.history
        );
        if *sent_ms > killed_ms {
            work_back_ms = work_back_ms.min(accepted[0].ended_ms.saturating_sub(killed_ms));
        }
    }
    // No worker was left stuck on the dead primary: each one is listed live (its
    // heartbeats reach the new primary), and a job for every slot of every worker, each
    // long enough to hold its slot while the others are leased, runs on all of them.
    every_worker_live(&client, &echo, workers.len()).await;
    let spin = function("spin");
    let held: Vec<(&[u8], EnqueueOptions)> = (0..workers.len() * WORKER_SLOTS)
        .map(|_| (b"150".as_slice(), EnqueueOptions::default()))
        .collect();
    let ids = client
        .enqueue_many(&spin, &held)
        .await
        .expect("enqueue spin jobs");
    let mut ran_on = std::collections::HashSet::new();
    for id in &ids {
        let status = client
            .wait(id, Some(DRAIN_WITHIN), |_| {})
            .await
            .expect("a spin job to end");
        assert_eq!(status.record.state, JobState::Succeeded, "{id}");
        ran_on.extend(status.record.history.last().and_then(|a| a.worker.clone()));
    }
    assert_eq!(
        ran_on.len(),
        workers.len(),
        "workers that ran jobs after the failover: {ran_on:?}"
    );
    for worker in &mut workers {
        assert_eq!(
            worker.wait_exit(Duration::from_millis(1)),
            None,
            "a worker exited"
        );
    }
    Run {
        acknowledged: acknowledged.len(),
        lost,
        refused_calls,
        failover_ms,
        enqueue_back_ms: enqueue_back_ms.unwrap_or(u64::MAX),
        work_back_ms,
    }
}

/// Waits (bounded) until `n` workers are listed live for `f`: each one's renewals reach the
/// node that holds the list now (a renewal blocked on the lost node can let an entry lapse
/// for a while; a worker left stuck never comes back).
async fn every_worker_live(client: &Client, f: &wasmgear_client::FunctionName, n: usize) {
    eventually(
        LIVE_AGAIN_WITHIN,
        &format!("{n} live workers of {f} after the failover"),
        || async { (client.live_workers(f).await.ok()? == n as u64).then_some(()) },
    )
    .await;
}

/// The primary on `port`'s replication offset (`master_repl_offset`): it grows with each
/// write.
fn repl_offset(port: u16) -> u64 {
    cli(port, &["info", "replication"])
        .lines()
        .find_map(|l| l.trim().strip_prefix("master_repl_offset:")?.parse().ok())
        .unwrap_or(0)
}

/// Sends `signal` (STOP, CONT, KILL) to the processes `pids`.
fn signal(signal: &str, pids: &[u32]) {
    for pid in pids {
        let status = std::process::Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(pid.to_string())
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{signal} {pid}");
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or_default()
}

/// An idle connection (no command fails to tell it) follows the primary as soon as the
/// sentinels announce the move (`+switch-master`), and its pub/sub connection goes along.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_connection_follows_a_switch_the_sentinels_announce() {
    use wasmgear_client::connection::{Endpoint, connect};
    let set = TestReplicaSet::start(1, 1);
    let (endpoint, _conn) = connect(&set.url()).await.expect("connect");
    let Endpoint::Sentinel(sentinel) = &endpoint else {
        panic!("a sentinel URL gives a sentinel endpoint")
    };
    let old = format!("127.0.0.1:{}", set.node(0).port());
    assert_eq!(sentinel.primary_address(), old);
    let mut moves = sentinel.moves();
    let sentinel_port = set.sentinel_port(0);
    let answer =
        wasmgear_testkit::sentinel::cli(sentinel_port, &["sentinel", "failover", "wasmgear"]);
    assert_eq!(answer.trim(), "OK", "SENTINEL FAILOVER");
    let new = tokio::task::block_in_place(|| set.wait_failover_from(0, FAILOVER_WITHIN));
    tokio::time::timeout(FAILOVER_WITHIN, moves.changed())
        .await
        .expect("the connection to follow the switch")
        .unwrap();
    assert_eq!(
        sentinel.primary_address(),
        format!("127.0.0.1:{}", set.node(new).port())
    );
    // A client on the same URL writes to the new primary, loading the library there when
    // it is missing (a primary that never had it, or lost it).
    let client = Client::connect(&set.url()).await.expect("connect");
    let flushed = cli(set.node(new).port(), &["function", "flush"]);
    assert_eq!(flushed.trim(), "OK", "FUNCTION FLUSH");
    let id = client
        .enqueue(
            &function("echo"),
            b"after the switch",
            &EnqueueOptions::default(),
        )
        .await
        .expect("enqueue on the new primary");
    let stored = cli(
        set.node(new).port(),
        &[
            "hexists",
            &wasmgear_proto::keys::FunctionKeys::new(&id.function).jobs(),
            &id.seq.to_string(),
        ],
    );
    assert_eq!(stored.trim(), "1", "the job on the new primary");
}

/// A Redis Cluster of three masters with a replica each, and a master SIGKILLed under load:
/// its replica is promoted, workers and the producer follow (`MOVED`, `CLUSTERDOWN` and
/// dropped connections are retried with backoff), the old master comes back as a replica,
/// and every job acknowledged with `--min-replicas 1` succeeds once; no worker is left
/// stuck.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_master_lost_under_load_loses_no_acknowledged_job() {
    let _last_words = wasmgear_testkit::last_words::LastWords::new();
    let cluster = wasmgear_testkit::TestCluster::start_with_replicas(1, 1000);
    let url = cluster.url();
    let seed = url
        .rsplit(':')
        .next()
        .and_then(|p| p.parse::<u16>().ok())
        .expect("the seed's port");
    // Functions whose keys spread over the three masters.
    let names: Vec<String> = (0..6).map(|i| format!("shard-{i}")).collect();
    let plugins = tempfile::tempdir().unwrap();
    for name in &names {
        std::fs::copy(
            artifact("echo"),
            plugins.path().join(format!("{name}.wasm")),
        )
        .unwrap();
    }
    let mut workers: Vec<WorkerProcess> = (0..3)
        .map(|_| {
            WorkerProcess::builder(&url)
                .plugins(plugins.path())
                .args(&["--no-watch", "--concurrency", "8", "--lease-ttl", "3s"])
                .args(&["--min-replicas", "1", "--retry-backoff", "100ms"])
                .spawn()
        })
        .collect();
    for worker in &mut workers {
        worker.wait_ready();
    }
    let client = Client::connect(&url)
        .await
        .expect("connect to the cluster")
        .with_min_replicas(MinReplicas::new(1, Duration::from_secs(1)).unwrap());
    let functions: Vec<_> = names.iter().map(|n| function(n)).collect();
    let mut acknowledged: Vec<(JobId, String)> = Vec::new();
    let mut refused = 0;
    let mut killed: Option<(Instant, u16)> = None;
    let mut promoted_after = None;
    let started = tokio::time::Instant::now();
    for wave in 0..CLUSTER_WAVES {
        tokio::time::sleep_until(started + WAVE_EVERY * wave as u32).await;
        // Each function's jobs in a call of its own, all at once: a shard waiting for its
        // new master holds up only its own.
        let per_function = PER_WAVE / functions.len();
        let calls = functions.iter().map(|f| {
            let client = &client;
            async move {
                let inputs: Vec<String> = (0..per_function)
                    .map(|i| format!("{f} wave {wave} job {i}"))
                    .collect();
                let jobs: Vec<(&[u8], EnqueueOptions)> = inputs
                    .iter()
                    .map(|input| (input.as_bytes(), EnqueueOptions::default()))
                    .collect();
                (f, client.enqueue_many(f, &jobs).await, inputs)
            }
        });
        for (f, result, inputs) in futures_util::future::join_all(calls).await {
            match result {
                Ok(ids) => acknowledged.extend(ids.into_iter().zip(inputs)),
                Err(error) => {
                    eprintln!("wave {wave} of {f} refused: {error}");
                    refused += 1;
                }
            }
        }
        if wave == FREEZE_WAVE {
            // A master other than the seed the clients were given, holding jobs.
            let victim = cluster
                .masters(seed)
                .into_iter()
                .find(|port| *port != seed && cli(*port, &["dbsize"]).trim() != "0")
                .expect("a master holding jobs besides the seed");
            cluster.node_on(victim).expect("the victim").kill();
            killed = Some((Instant::now(), victim));
        }
        // Once its replica is promoted, the old master comes back, as a replica of it.
        if let Some((at, victim)) = killed
            && promoted_after.is_none()
        {
            let masters = cluster.masters(seed);
            if masters.len() == 3 && !masters.contains(&victim) {
                promoted_after = Some(at.elapsed());
                let old = cluster.node_on(victim).expect("the victim");
                old.ensure_running().expect("restart the old master");
            }
        }
    }
    let (killed_at, victim) = killed.expect("a master was killed");
    tokio::task::block_in_place(|| cluster.wait_ok(victim, FAILOVER_WITHIN));
    let promoted_after = promoted_after.unwrap_or_else(|| killed_at.elapsed());
    if cluster
        .node_on(victim)
        .is_some_and(|old| old.ensure_running().unwrap_or(false))
    {
        eprintln!("the old master was restarted after the last wave");
    }
    eventually_sync(
        FAILOVER_WITHIN,
        "the old master to serve as a replica",
        || {
            let info = cli(victim, &["info", "replication"]);
            info.contains("role:slave") && info.contains("master_link_status:up")
        },
    );

    eventually(DRAIN_WITHIN, "every job to end", || async {
        let queues = client.queues().await.ok()?;
        queues
            .iter()
            .filter(|q| q.function.starts_with("shard-"))
            .all(|q| q.queued + q.scheduled + q.running == 0)
            .then_some(())
    })
    .await;
    for (id, input) in &acknowledged {
        let status = client
            .status(id)
            .await
            .expect("an acknowledged job is kept");
        assert_eq!(
            status.output.as_deref(),
            Some(input.as_bytes()),
            "the output of {id}"
        );
        assert_eq!(status.record.state, JobState::Succeeded, "{id}");
        let accepted = status
            .record
            .history
            .iter()
            .filter(|a| a.outcome == "succeeded")
            .count();
        assert_eq!(accepted, 1, "accepted completions of {id}");
    }
    for f in &functions {
        every_worker_live(&client, f, workers.len()).await;
    }
    for worker in &mut workers {
        assert_eq!(
            worker.wait_exit(Duration::from_millis(1)),
            None,
            "a worker exited"
        );
    }
    eprintln!(
        "cluster failover with --min-replicas 1: {} jobs acknowledged, none lost, {refused} calls refused; a replica was master in the lost one's place {} ms after the kill",
        acknowledged.len(),
        promoted_after.as_millis()
    );
}

/// Nodes and sentinels that want passwords: the URL's user part is the nodes', the
/// `sentinel_password` parameter the sentinels'; either missing is a clear error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinels_and_nodes_with_passwords() {
    let set = TestReplicaSet::start_with_passwords(1, 1, Some(("n0de-pw", "s3ntinel-pw")));
    let sentinels = set.url();
    let sentinels = sentinels.trim_start_matches("redis+sentinel://");
    let url = format!("redis+sentinel://:n0de-pw@{sentinels}?sentinel_password=s3ntinel-pw");
    let client = Client::connect(&url)
        .await
        .expect("connect with both passwords");
    let id = client
        .enqueue(
            &function("echo"),
            b"behind passwords",
            &EnqueueOptions::default(),
        )
        .await
        .expect("enqueue");
    assert_eq!(
        client.status(&id).await.unwrap().record.state,
        JobState::Queued
    );

    let no_sentinel_password = format!("redis+sentinel://:n0de-pw@{sentinels}");
    let error = Client::connect(&no_sentinel_password)
        .await
        .err()
        .expect("refused");
    let text = error.to_string();
    assert!(text.contains("sentinel_password"), "{text}");
    assert!(!text.contains("n0de-pw"), "a password shown: {text}");

    let wrong_node_password =
        format!("redis+sentinel://:wrong@{sentinels}?sentinel_password=s3ntinel-pw");
    let text = Client::connect(&wrong_node_password)
        .await
        .err()
        .expect("refused")
        .to_string();
    assert!(text.contains("refused"), "{text}");
    assert!(
        !text.contains("s3ntinel-pw") && !text.contains("wrong"),
        "a password shown: {text}"
    );
}
