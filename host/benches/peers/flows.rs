//! Section `flows`: a flow of a parent waiting on 1,000 children, every job a no-op (`echo`,
//! the children of one function and the parent of another, as BullMQ's FlowProducer puts
//! them in two queues): the time to submit it (no worker running), and its end-to-end time
//! (submit until the parent has ended) with one node at concurrency 100; the median of a
//! few runs each, beside BullMQ's from the same run.

use std::time::{Duration, Instant};

use wasmgear_client::{Client, Flow, FlowJob};
use wasmgear_proto::FunctionName;

use super::node::start_node;
use super::{Plan, Row, ms, row};

/// Children of the flows' parent (as BullMQ's side has them: `FLOW_CHILDREN`).
const CHILDREN: usize = 1000;

fn flow(run: usize, child: &FunctionName, parent: &FunctionName) -> Flow {
    let mut jobs: Vec<FlowJob> = (0..CHILDREN)
        .map(|i| FlowJob::new(format!("c{i}"), child.clone(), format!("{run}-{i}")))
        .collect();
    jobs.push(
        FlowJob::new("parent", parent.clone(), "").after((0..CHILDREN).map(|i| format!("c{i}"))),
    );
    Flow {
        name: format!("bench-{run}"),
        jobs,
    }
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

/// The flows section, with BullMQ's figures (`flows` of its result) beside.
pub(crate) async fn flows(
    plan: &Plan,
    url: &str,
    bullmq: Option<&serde_json::Value>,
    rows: &mut Vec<Row>,
) {
    let runs = if plan.jobs < 10_000 { 2 } else { 5 };
    let client = Client::connect(url).await.unwrap();
    let (child, parent) = (
        FunctionName::new("flow-child").unwrap(),
        FunctionName::new("flow-parent").unwrap(),
    );
    // Submitting, no worker serving the functions.
    let mut submits = Vec::new();
    for run in 0..runs {
        let flow = flow(run, &child, &parent);
        let started = Instant::now();
        client.submit_flow(&flow).await.unwrap();
        submits.push(started.elapsed());
    }
    let (e2e_child, e2e_parent) = (
        FunctionName::new("flow-e2e-child").unwrap(),
        FunctionName::new("flow-e2e-parent").unwrap(),
    );
    let plugins = tempfile::tempdir().unwrap();
    for name in [&e2e_child, &e2e_parent] {
        std::fs::copy(
            wasmgear_test_artifacts::ECHO,
            plugins.path().join(format!("{name}.wasm")),
        )
        .unwrap();
    }
    let node = start_node(url, plugins.path(), 100).await;
    let mut ends = Vec::new();
    for run in 0..runs {
        let flow = flow(run, &e2e_child, &e2e_parent);
        let started = Instant::now();
        let submitted = client.submit_flow(&flow).await.unwrap();
        let status = client
            .wait_flow(submitted.id, Some(Duration::from_secs(300)))
            .await
            .unwrap();
        ends.push(started.elapsed());
        assert!(status.ended(), "the flow ended");
        eprintln!(
            "[flows] run {run}: {:.1} ms end to end",
            started.elapsed().as_secs_f64() * 1e3
        );
        if std::env::var_os("WASMGEAR_BENCH_FLOW_TRACE").is_some() {
            let mut last_child = 0;
            let mut first_start = u64::MAX;
            for job in &status.jobs {
                let record = client.status(&job.id).await.unwrap().record;
                if job.name != "parent" {
                    last_child = last_child.max(record.finished_ms.unwrap_or(0));
                    first_start = first_start.min(record.started_ms.unwrap_or(u64::MAX));
                } else {
                    eprintln!(
                        "[flows]   created {} first child start +{} last child end +{} parent start +{} end +{}",
                        record.created_ms,
                        first_start.saturating_sub(record.created_ms),
                        last_child.saturating_sub(record.created_ms),
                        record
                            .started_ms
                            .unwrap_or(0)
                            .saturating_sub(record.created_ms),
                        record
                            .finished_ms
                            .unwrap_or(0)
                            .saturating_sub(record.created_ms)
                    );
                }
            }
        }
    }
    node.stop().await;
    let peer = |key: &str| bullmq?.get("flows")?.get(key)?.as_f64();
    let ratio = |ours: Duration, theirs: Option<f64>| {
        theirs.map_or("-".into(), |t| {
            format!("{:.2}×", t / (ours.as_secs_f64() * 1e3))
        })
    };
    let submit = median(submits);
    rows.push(row(
        format!(
            "submit a flow of {} jobs (BullMQ FlowProducer.add)",
            CHILDREN + 1
        ),
        ms(submit),
        peer("submit_ms").map_or("-".into(), |b| format!("{b:.2} ms")),
        ratio(submit, peer("submit_ms")),
    ));
    let end = median(ends);
    rows.push(row(
        format!("fan-out/fan-in of {CHILDREN} no-op jobs, end to end, concurrency 100"),
        ms(end),
        peer("e2e_ms").map_or("-".into(), |b| format!("{b:.2} ms")),
        ratio(end, peer("e2e_ms")),
    ));
}
