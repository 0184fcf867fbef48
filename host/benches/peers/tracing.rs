//! Section `tracing`: what exporting spans costs a worker. The same worker binary drains the
//! same no-op jobs three times, at concurrency 100: without `OTEL_*` (tracing off), and
//! exporting to a real OTLP receiver (testkit's, over HTTP/protobuf) with every job's trace
//! sampled and with 10 % sampled (`traceidratio`). What is compared is the worker process's
//! CPU time per job (user + system, from /proc/PID/stat, counted from the moment it serves to
//! the end of the drain), which a shared 2-CPU machine measures more steadily than wall time.

use wasmgear_client::Client;
use wasmgear_proto::FunctionName;
use wasmgear_testkit::{OtlpReceiver, WorkerProcess};

use super::ceiling::cpu_us_of;
use super::node::{bulk_enqueue, paused_echo, resume_and_drain};
use super::{Plan, Row, row};

pub(crate) async fn tracing(plan: &Plan, url: &str, rows: &mut Vec<Row>) {
    let receiver = OtlpReceiver::start();
    let client = Client::connect(url).await.unwrap();
    let jobs = plan.jobs;
    let plugins = tempfile::tempdir().unwrap();
    let exporting = receiver.env("http/protobuf");
    let sampled = |sampler: &[(&str, &str)]| -> Vec<(String, String)> {
        let mut env = exporting.clone();
        env.extend(sampler.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        env
    };
    let runs = [
        ("off", Vec::new()),
        (
            "on, every job sampled",
            sampled(&[("OTEL_TRACES_SAMPLER", "always_on")]),
        ),
        (
            "on, 10 % sampled",
            sampled(&[
                ("OTEL_TRACES_SAMPLER", "traceidratio"),
                ("OTEL_TRACES_SAMPLER_ARG", "0.1"),
            ]),
        ),
    ];
    let mut measured = Vec::new();
    for (i, (label, env)) in runs.iter().enumerate() {
        let f = FunctionName::new(format!("tracing-{i}")).unwrap();
        paused_echo(&client, plugins.path(), &f).await;
        bulk_enqueue(&client, &f, jobs).await;
        let mut builder = WorkerProcess::builder(url)
            .plugins(plugins.path())
            .args(&["--concurrency", "100"]);
        for (name, value) in env {
            builder = builder.env(name, value);
        }
        let worker = tokio::task::block_in_place(|| builder.start());
        let pid = worker.pid().to_string();
        let spans_before = receiver.spans().len();
        let before = cpu_us_of(&pid);
        let took = resume_and_drain(&client, &f).await;
        let used = cpu_us_of(&pid) - before;
        tokio::task::block_in_place(|| drop(worker));
        let spans = receiver.spans().len() - spans_before;
        let per_job = used / jobs as f64;
        eprintln!(
            "[tracing] {label}: {jobs} jobs drained in {took:?}, worker CPU {:.0} ms ({per_job:.1} µs per job), {spans} spans received",
            used / 1000.0
        );
        measured.push(per_job);
    }
    let off = measured[0];
    for ((label, _), per_job) in runs.iter().zip(&measured) {
        let change = if *label == "off" {
            "-".to_string()
        } else {
            format!("{:+.0} %", (per_job / off - 1.0) * 100.0)
        };
        rows.push(row(
            format!(
                "worker CPU per job, {jobs} no-op jobs, concurrency 100, tracing {label} (vs off)"
            ),
            format!("{per_job:.1} µs"),
            format!("{off:.1} µs"),
            change,
        ));
    }
}
