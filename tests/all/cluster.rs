//! The same protocol on a real local Redis Cluster of three masters.

use std::time::Duration;

use wasmgear_client::{CancelOutcome, Client, EnqueueOptions, JobState};
use wasmgear_proto::Progress;

use wasmgear_testkit::{TestCluster, TestWorker, TestWorkerOptions, artifact, function};

/// Jobs of many functions, spread over the cluster's slots, all run; progress and cancel
/// events cross nodes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_of_many_functions_run_on_a_cluster() {
    let cluster = TestCluster::start();
    let names: Vec<String> = (0..12).map(|i| format!("echo-{i}")).collect();
    let dir = wasmgear_testkit::plugin_copies("echo", &names);
    std::fs::copy(artifact("count"), dir.path().join("count.wasm")).unwrap();
    let worker = TestWorker::start_on(&cluster.url(), dir, TestWorkerOptions::default()).await;
    let client = Client::connect(&cluster.url()).await.unwrap();

    let mut jobs = Vec::new();
    for name in &names {
        let f = function(name);
        let inputs: Vec<Vec<u8>> = (0..5).map(|i| format!("{name} {i}").into_bytes()).collect();
        let batch: Vec<(&[u8], EnqueueOptions)> = inputs
            .iter()
            .map(|i| (i.as_slice(), EnqueueOptions::default()))
            .collect();
        let ids = client.enqueue_many(&f, &batch).await.unwrap();
        jobs.extend(ids.into_iter().zip(inputs));
    }
    for (id, input) in &jobs {
        let status = client
            .wait(id, Some(Duration::from_secs(60)), |_| {})
            .await
            .unwrap();
        assert_eq!(status.output.as_deref(), Some(&input[..]), "{id}");
    }
    let per_node = cluster.keys_per_node();
    assert!(
        per_node.iter().all(|&n| n > 0),
        "keys not spread over the nodes: {per_node:?}"
    );

    let count = function("count");
    let id = client
        .enqueue(&count, b"4 30", &EnqueueOptions::default())
        .await
        .unwrap();
    let mut seen: Vec<Progress> = Vec::new();
    let status = client
        .wait(&id, Some(Duration::from_secs(60)), |p| seen.push(p.clone()))
        .await
        .unwrap();
    assert_eq!(status.record.state, JobState::Succeeded);
    assert_eq!(seen.last().map(|p| p.done), Some(4));

    let long = client
        .enqueue(&count, b"100000 20", &EnqueueOptions::default())
        .await
        .unwrap();
    wasmgear_testkit::eventually(Duration::from_secs(20), "the job to run", || async {
        (client.status(&long).await.unwrap().record.state == JobState::Running).then_some(())
    })
    .await;
    assert_eq!(client.cancel(&long).await.unwrap(), CancelOutcome::Stopping);
    let status = client
        .wait(&long, Some(Duration::from_secs(30)), |_| {})
        .await
        .unwrap();
    assert_eq!(status.record.state, JobState::Cancelled);
    worker.stop().await;
}

/// Uniq coalescing on a cluster: the uniq index lives in the function's slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uniq_keys_coalesce_on_a_cluster() {
    let cluster = TestCluster::start();
    crate::job_options::check_uniq_coalescing(&cluster.url()).await;
}

/// Groups on a cluster: the round, the groups' keys and their settings live in the
/// function's slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn groups_take_turns_on_a_cluster() {
    let cluster = TestCluster::start();
    crate::groups::check_round_robin(&cluster.url()).await;
}

/// Uniq windows, debounce and throttle on a cluster: their keys live in the function's slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dedup_windows_debounce_and_throttle_on_a_cluster() {
    let cluster = TestCluster::start();
    crate::dedup::check_dedup(&cluster.url()).await;
}

/// Dependencies across functions on a cluster: fetch, build and ship live in different slots
/// (ship on another node than the other two), and the chain still runs and cancels in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dependencies_across_functions_work_on_a_cluster() {
    let cluster = TestCluster::start();
    crate::job_options::check_dependencies(&cluster.url()).await;
}

/// `bytes` (a component) with a custom section of `extra` bytes appended: still the same
/// component to run, but larger, with another hash.
fn padded_component(bytes: &[u8], extra: usize) -> Vec<u8> {
    fn leb(mut n: usize, out: &mut Vec<u8>) {
        loop {
            let byte = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                out.push(byte);
                return;
            }
            out.push(byte | 0x80);
        }
    }
    let name = b"padding";
    let mut section = Vec::new();
    leb(name.len(), &mut section);
    section.extend_from_slice(name);
    section.extend((0..extra).map(|i| (i * 7 % 251) as u8));
    let mut out = bytes.to_vec();
    out.push(0);
    leb(section.len(), &mut out);
    out.extend_from_slice(&section);
    out
}

/// A plugin deployed through a cluster in several chunks (its chunks in one slot, the
/// registry in another) reaches a worker serving deployed plugins, which runs its jobs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_deployed_in_chunks_runs_on_a_cluster() {
    let cluster = TestCluster::start();
    let files = tempfile::tempdir().unwrap();
    let path = files.path().join("big.wasm");
    let echo = std::fs::read(artifact("echo")).unwrap();
    std::fs::write(&path, padded_component(&echo, 3 * 1024 * 1024)).unwrap();
    let url = cluster.url();
    let out = wasmgear_testkit::wasmgear(
        &["deploy", path.to_str().unwrap(), "--json"],
        &[("WASMGEAR_REDIS_URL", &url)],
    );
    let deployed = wasmgear_testkit::json(&out);
    assert_eq!(deployed["chunks"], 4, "{deployed}");
    let home = tempfile::tempdir().unwrap();
    let worker = wasmgear_testkit::WorkerProcess::builder(&url)
        .args(&["--plugins-from-redis"])
        .env("WASMGEAR_HOME", home.path().to_str().unwrap())
        .start();
    let client = Client::connect(&url).await.unwrap();
    let id = client
        .enqueue(
            &function("big"),
            b"through the cluster",
            &EnqueueOptions::default(),
        )
        .await
        .unwrap();
    let status = client
        .wait(&id, Some(Duration::from_secs(60)), |_| {})
        .await
        .unwrap();
    assert_eq!(
        status.output.as_deref(),
        Some(&b"through the cluster"[..]),
        "{}",
        worker.log()
    );
    let version = deployed["version"].as_str().unwrap();
    assert_eq!(status.record.history[0].version.as_deref(), Some(version));
}

/// Recurring jobs and child jobs across slots: a schedule (in the `{schedules}` slot) fires
/// jobs of a function in another; a parent's children (another function, another slot) are
/// enqueued, adopted and combined.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedules_and_child_jobs_work_on_a_cluster() {
    let cluster = TestCluster::start();
    let url = cluster.url();
    let dir = tempfile::tempdir().unwrap();
    for name in ["split", "reverse", "echo"] {
        std::fs::copy(artifact(name), dir.path().join(format!("{name}.wasm"))).unwrap();
    }
    std::fs::write(
        dir.path().join("split.toml"),
        "[jobs]\nenqueue = [\"reverse\"]\n",
    )
    .unwrap();
    let worker = TestWorker::start_on(&url, dir, TestWorkerOptions::default()).await;
    let client = Client::connect(&url).await.unwrap();

    let out = wasmgear_testkit::wasmgear(
        &[
            "schedule",
            "add",
            "beat",
            "--function",
            "echo",
            "--every",
            "1s",
            "--input",
            "x",
        ],
        &[("WASMGEAR_REDIS_URL", &url)],
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        wasmgear_testkit::stderr(&out)
    );
    wasmgear_testkit::eventually(Duration::from_secs(30), "two ticks' jobs", || async {
        let second = wasmgear_client::JobId {
            function: function("echo"),
            seq: 2,
        };
        let status = client.status(&second).await.ok()?;
        (status.record.schedule.as_deref() == Some("beat")).then_some(())
    })
    .await;

    let plan = serde_json::json!({ "function": "reverse", "chunks": ["ab", "cd", "ef"] });
    let id = client
        .enqueue(
            &function("split"),
            plan.to_string().as_bytes(),
            &EnqueueOptions::default(),
        )
        .await
        .unwrap();
    let status = client
        .wait(&id, Some(Duration::from_secs(60)), |_| {})
        .await
        .unwrap();
    assert_eq!(
        status.record.state,
        JobState::Succeeded,
        "{:?}",
        status.record.error
    );
    assert_eq!(
        status.output.as_deref(),
        Some(&b"[\"ba\",\"dc\",\"fe\"]"[..])
    );
    assert_eq!(status.record.children.len(), 3);
    worker.stop().await;
}

/// The version of the library this build loads (what `wg2_version` answers).
fn this_build_s_version() -> String {
    let manifest: serde_json::Value = serde_json::from_str(&wasmgear_client::manifest()).unwrap();
    manifest["version"].as_str().unwrap().to_string()
}

/// This build's library with its version function answering `version` instead: what an
/// older build left on a node, to the client's eyes.
fn library_answering(version: &str) -> String {
    let lua = wasmgear_client::library();
    let marker = "function_name = 'wg2_version', callback = function() return '";
    let at = lua.find(marker).expect("the version function") + marker.len();
    let end = at + lua[at..].find('\'').expect("the version's end");
    format!("{}{version}{}", &lua[..at], &lua[end..])
}

/// What `FCALL wg2_version 0` answers on the node at `url` (asked directly, not routed).
async fn version_on(url: &str) -> String {
    let mut node = redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    redis::cmd("FCALL")
        .arg("wg2_version")
        .arg(0)
        .query_async(&mut node)
        .await
        .unwrap()
}

/// A primary running another library (an older build's, loaded by hand under the same
/// name) gets this build's when a client connects, whichever node the client asks first:
/// every primary answers this build's version afterwards (tried with each node stale in
/// turn, more than once).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_loads_its_library_on_every_primary_whose_version_differs() {
    let cluster = TestCluster::start();
    let nodes = cluster.node_urls();
    let expected = this_build_s_version();
    let older = library_answering("an older build");
    for round in 0..8 {
        let stale = &nodes[round % nodes.len()];
        let mut node = redis::Client::open(stale.as_str())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let _: String = redis::cmd("FUNCTION")
            .arg("LOAD")
            .arg("REPLACE")
            .arg(&older)
            .query_async(&mut node)
            .await
            .unwrap();
        assert_eq!(version_on(stale).await, "an older build");

        let _client = Client::connect(&cluster.url()).await.unwrap();
        for url in &nodes {
            assert_eq!(
                version_on(url).await,
                expected,
                "round {round}: {url} (the stale node was {stale})"
            );
        }
    }
}

/// A flow whose jobs are of functions spread over the three masters (and the flow's record
/// in a slot of its own): numbers are reserved and jobs written per function, the links
/// cross nodes, and the fan-in reads every output in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flow_across_the_masters_of_a_cluster_runs_and_joins() {
    use wasmgear_client::{Flow, FlowJob};
    let cluster = TestCluster::start();
    let names: Vec<String> = (0..6).map(|i| format!("rev-{i}")).collect();
    let dir = wasmgear_testkit::plugin_copies("reverse", &names);
    std::fs::copy(artifact("join"), dir.path().join("join.wasm")).unwrap();
    let worker = TestWorker::start_on(&cluster.url(), dir, TestWorkerOptions::default()).await;
    let client = Client::connect(&cluster.url()).await.unwrap();
    // Each part, then a second step of another function after it; the join after all.
    let mut jobs = Vec::new();
    for (i, name) in names.iter().enumerate() {
        jobs.push(FlowJob::new(
            format!("p{i}"),
            function(name),
            format!("{i}ab"),
        ));
        let next = &names[(i + 1) % names.len()];
        jobs.push(
            FlowJob::new(format!("q{i}"), function(next), format!("{i}cd"))
                .after([format!("p{i}")]),
        );
    }
    let waited: Vec<String> = (0..names.len())
        .flat_map(|i| [format!("q{i}"), format!("p{i}")])
        .collect();
    jobs.push(FlowJob::new("all", function("join"), "").after(waited));
    let submitted = client
        .submit_flow(&Flow {
            name: "across".into(),
            jobs,
        })
        .await
        .unwrap();
    let status = client
        .wait_flow(submitted.id, Some(Duration::from_secs(120)))
        .await
        .unwrap();
    assert!(
        status
            .jobs
            .iter()
            .all(|j| j.state == Some(JobState::Succeeded)),
        "{status:?}"
    );
    let all = &status.jobs.iter().find(|j| j.name == "all").unwrap().id;
    let output = client.status(all).await.unwrap().output.unwrap();
    let expected: Vec<String> = (0..names.len())
        .flat_map(|i| [format!("dc{i}"), format!("ba{i}")])
        .collect();
    assert_eq!(String::from_utf8(output).unwrap(), expected.join("\n"));
    let per_node = cluster.keys_per_node();
    assert!(
        per_node.iter().all(|&n| n > 0),
        "the flow's keys are not spread over the nodes: {per_node:?}"
    );
    worker.stop().await;
}
