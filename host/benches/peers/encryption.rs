//! Section `encryption`: what sealing job data costs. The same `echo` plugin serves two
//! functions, one plain and one set to store only encrypted input (`config --encrypt`); the
//! same jobs (a 1 KiB input each) are enqueued in bulk to each through a client with a key
//! file, then drained by one node (concurrency 16, with the key file) that opens each input
//! and seals each output. The rows give both ways' enqueue and drain rates, and Redis' and
//! the node's CPU per job (the node seals and opens; Redis checks each sealed job's reserved
//! number).

use std::sync::Arc;
use std::time::Instant;

use wasmgear_client::{Client, EnqueueOptions, Setting};
use wasmgear_proto::FunctionName;
use wasmgear_proto::crypto::KeyRing;

use super::ceiling::{own_cpu_us, server_cpu_us};
use super::node::{node_builder, paused_echo, resume_and_drain, run_node};
use super::{Plan, Row, per_s, row, times};

pub(crate) async fn encryption(plan: &Plan, url: &str, redis_port: u16, rows: &mut Vec<Row>) {
    let keys = Arc::new(KeyRing::parse("bench", &KeyRing::new_key_line("bench").unwrap()).unwrap());
    let client = Client::connect(url)
        .await
        .unwrap()
        .with_keys(keys.clone(), false);
    let plugins = tempfile::tempdir().unwrap();
    let jobs = plan.jobs;
    let input = vec![b'x'; 1024];
    let mut enqueued = Vec::new();
    for (name, sealed) in [("enc-plain", false), ("enc-sealed", true)] {
        let f = FunctionName::new(name).unwrap();
        paused_echo(&client, plugins.path(), &f).await;
        client
            .configure(&f, &[Setting::Encrypt(sealed)])
            .await
            .unwrap();
        let (started, redis_before) = (Instant::now(), server_cpu_us(redis_port));
        for _ in 0..jobs / 1000 {
            let chunk: Vec<(&[u8], EnqueueOptions)> = (0..1000)
                .map(|_| (&input[..], EnqueueOptions::default()))
                .collect();
            client.enqueue_many(&f, &chunk).await.unwrap();
        }
        let rate = jobs as f64 / started.elapsed().as_secs_f64();
        let redis_us = (server_cpu_us(redis_port) - redis_before) / jobs as f64;
        eprintln!(
            "[encryption] enqueue {name}: {rate:.0} jobs/s, Redis {redis_us:.1} µs of CPU per job"
        );
        enqueued.push((rate, redis_us));
    }
    let worker = node_builder(plugins.path(), 16)
        .encryption(keys, false)
        .build(url)
        .await
        .unwrap();
    let node = run_node(worker);
    let mut drained = Vec::new();
    for name in ["enc-plain", "enc-sealed"] {
        let f = FunctionName::new(name).unwrap();
        let (before, redis_before) = (own_cpu_us(), server_cpu_us(redis_port));
        let took = resume_and_drain(&client, &f).await;
        let cpu = (own_cpu_us() - before) / jobs as f64;
        let redis_us = (server_cpu_us(redis_port) - redis_before) / jobs as f64;
        let rate = jobs as f64 / took.as_secs_f64();
        eprintln!(
            "[encryption] drain {name}: {rate:.0} jobs/s, Redis {redis_us:.1} µs and the node {cpu:.1} µs of CPU per job"
        );
        drained.push((rate, cpu, redis_us));
    }
    node.stop().await;
    rows.push(row(
        format!("enqueue {jobs} jobs of 1 KiB in bulk, inputs sealed vs plain (AES-256-GCM)"),
        per_s(enqueued[1].0),
        per_s(enqueued[0].0),
        times(enqueued[1].0, enqueued[0].0),
    ));
    rows.push(row(
        "the same: Redis CPU per job enqueued, sealed vs plain",
        format!("{:.1} µs", enqueued[1].1),
        format!("{:.1} µs", enqueued[0].1),
        format!("+{:.1} µs", enqueued[1].1 - enqueued[0].1),
    ));
    rows.push(row(
        "drain them (concurrency 16), inputs opened and outputs sealed vs plain".to_string(),
        per_s(drained[1].0),
        per_s(drained[0].0),
        times(drained[1].0, drained[0].0),
    ));
    rows.push(row(
        "the same: the node's / Redis' CPU per job, sealed vs plain",
        format!("{:.1} / {:.1} µs", drained[1].1, drained[1].2),
        format!("{:.1} / {:.1} µs", drained[0].1, drained[0].2),
        format!(
            "+{:.1} / +{:.1} µs",
            drained[1].1 - drained[0].1,
            drained[1].2 - drained[0].2
        ),
    ));
}
