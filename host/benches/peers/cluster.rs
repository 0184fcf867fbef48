//! Redis Cluster: three masters, jobs spread over many functions, drained by one node.

use std::time::Duration;
use std::time::Instant;

use wasmgear_client::Client;
use wasmgear_proto::FunctionName;
use wasmgear_redis_server::RedisServer;

use super::ceiling::{redis_info, server_cpu_us};
use super::node::{bulk_enqueue, start_node};
use super::{Plan, Row, per_s, row};

/// Functions the Cluster row spreads its jobs over.
pub(crate) const CLUSTER_FUNCTIONS: usize = 30;

/// Drains `plan.jobs` echo jobs spread over 30 functions from a Redis Cluster of three
/// masters (started here, as `redis-cli --cluster create` makes one), with one node at the
/// highest concurrency.
pub(crate) async fn cluster(plan: &Plan, rows: &mut Vec<Row>) {
    let dir = tempfile::tempdir().unwrap();
    let nodes: Vec<RedisServer> = (0..3)
        .map(|i| {
            let bus = std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .unwrap()
                .port()
                .to_string();
            let args = [
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
            ];
            let mut args: Vec<&str> = args.to_vec();
            args.extend(["--cluster-port", &bus]);
            RedisServer::start(&dir.path().join(format!("node{i}")), 0, &args).unwrap()
        })
        .collect();
    let created = std::process::Command::new("redis-cli")
        .args(["--cluster", "create"])
        .args(nodes.iter().map(|n| format!("127.0.0.1:{}", n.port())))
        .arg("--cluster-yes")
        .output()
        .unwrap();
    assert!(
        created.status.success(),
        "redis-cli --cluster create: {}",
        String::from_utf8_lossy(&created.stdout)
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    for node in &nodes {
        while !redis_info(node.port(), "cluster").contains("cluster_enabled:1")
            || !cluster_ok(node.port())
        {
            assert!(Instant::now() < deadline, "the cluster never came up");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    let url = nodes[0].url();
    let client = Client::connect(&url).await.unwrap();
    let plugins = tempfile::tempdir().unwrap();
    let functions: Vec<FunctionName> = (0..CLUSTER_FUNCTIONS)
        .map(|i| FunctionName::new(format!("c{i}")).unwrap())
        .collect();
    for function in &functions {
        std::fs::copy(
            wasmgear_test_artifacts::ECHO,
            plugins.path().join(format!("{function}.wasm")),
        )
        .unwrap();
        bulk_enqueue(&client, function, plan.jobs / CLUSTER_FUNCTIONS).await;
    }
    let jobs = plan.jobs / CLUSTER_FUNCTIONS * CLUSTER_FUNCTIONS;
    let concurrency = *plan.concurrencies.last().unwrap();
    let cpu = || nodes.iter().map(|n| server_cpu_us(n.port())).sum::<f64>();
    let cpu_before = cpu();
    let started = Instant::now();
    let node = start_node(&url, plugins.path(), concurrency).await;
    loop {
        let mut done = 0;
        for function in &functions {
            done += client.queue(function).await.unwrap().succeeded as usize;
        }
        if done >= jobs {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let rate = jobs as f64 / started.elapsed().as_secs_f64();
    let cpu_per_job = (cpu() - cpu_before) / jobs as f64;
    node.stop().await;
    rows.push(row(
        format!(
            "drain {jobs} jobs over {CLUSTER_FUNCTIONS} functions, concurrency {concurrency}, Redis Cluster of 3 masters ({cpu_per_job:.1} µs Redis CPU per job)"
        ),
        per_s(rate),
        "",
        "",
    ));
}

/// Whether the cluster node on `port` says the cluster is up.
pub(crate) fn cluster_ok(port: u16) -> bool {
    let mut conn = redis::Client::open(format!("redis://127.0.0.1:{port}"))
        .and_then(|c| c.get_connection())
        .unwrap();
    let info: String = redis::cmd("CLUSTER").arg("INFO").query(&mut conn).unwrap();
    info.contains("cluster_state:ok")
}
