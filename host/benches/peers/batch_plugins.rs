//! Section `batch`: what a batch plugin saves. The same `sum-batch` component drains the same
//! no-op jobs (empty input) twice on one node at concurrency 100: with `batch = { max = 1 }`
//! (one job per instance, through the worker's usual slots) and with `batch = { max = 100,
//! wait = "20ms" }` (up to a hundred jobs per instance and call). Redis' and the node's CPU
//! per job are counted for each drain.

use wasmgear_client::{Client, EnqueueOptions, Setting};
use wasmgear_proto::FunctionName;

use super::ceiling::{client_conn, own_cpu_us, print_command_profile, server_cpu_us};
use super::node::{resume_and_drain, start_node};
use super::{Plan, Row, per_s, row, times};

pub(crate) async fn batch_plugins(plan: &Plan, url: &str, redis_port: u16, rows: &mut Vec<Row>) {
    let client = Client::connect(url).await.unwrap();
    let jobs = plan.jobs * 2;
    let plugins = tempfile::tempdir().unwrap();
    let runs = [
        ("batch-one", "batch = { max = 1 }"),
        ("batch-hundred", "batch = { max = 100, wait = \"20ms\" }"),
    ];
    for (name, manifest) in runs {
        let f = FunctionName::new(name).unwrap();
        std::fs::copy(
            wasmgear_test_artifacts::SUM_BATCH,
            plugins.path().join(format!("{name}.wasm")),
        )
        .unwrap();
        std::fs::write(plugins.path().join(format!("{name}.toml")), manifest).unwrap();
        client
            .configure(&f, &[Setting::Paused(true)])
            .await
            .unwrap();
        let options = EnqueueOptions::default();
        for _ in 0..jobs / 1000 {
            let chunk: Vec<(&[u8], EnqueueOptions)> =
                (0..1000).map(|_| (&b""[..], options.clone())).collect();
            client.enqueue_many(&f, &chunk).await.unwrap();
        }
    }
    let node = start_node(url, plugins.path(), 100).await;
    let mut measured = Vec::new();
    for (name, _) in runs {
        let f = FunctionName::new(name).unwrap();
        let profile = std::env::var_os("WASMGEAR_BENCH_PROFILE").is_some();
        if profile {
            let _: () = redis::cmd("CONFIG")
                .arg("RESETSTAT")
                .query_async(&mut client_conn(url).await)
                .await
                .unwrap();
        }
        let (redis_before, own_before) = (server_cpu_us(redis_port), own_cpu_us());
        let took = resume_and_drain(&client, &f).await;
        if profile {
            print_command_profile(redis_port, jobs);
        }
        let redis_us = (server_cpu_us(redis_port) - redis_before) / jobs as f64;
        let own_us = (own_cpu_us() - own_before) / jobs as f64;
        let rate = jobs as f64 / took.as_secs_f64();
        let succeeded = client.queue(&f).await.unwrap().succeeded;
        eprintln!(
            "[batch] {name}: {jobs} jobs in {took:?} = {rate:.0} jobs/s ({succeeded} succeeded), Redis {redis_us:.1} µs and the node {own_us:.1} µs of CPU per job"
        );
        measured.push((rate, redis_us, own_us));
    }
    node.stop().await;
    let (one, hundred) = (measured[0], measured[1]);
    rows.push(row(
        format!("drain {jobs} no-op jobs through a batch plugin, up to 100 per instance vs one per instance (concurrency 100)"),
        per_s(hundred.0),
        per_s(one.0),
        times(hundred.0, one.0),
    ));
    rows.push(row(
        "the same: Redis CPU / the node's CPU per job, batches of 100 vs one per instance",
        format!("{:.1} / {:.1} µs", hundred.1, hundred.2),
        format!("{:.1} / {:.1} µs", one.1, one.2),
        String::new(),
    ));
}
