//! The steady state: a long run through one function, the queue topped up as it drains, with
//! throughput and Redis memory every segment.

use std::time::Duration;
use std::time::Instant;

use wasmgear_client::Client;
use wasmgear_client::EnqueueOptions;
use wasmgear_proto::FunctionName;
use wasmgear_redis_server::RedisServer;

use super::ceiling::{client_conn, redis_info};
use super::node::start_node;
use super::{Plan, Row, per_s, row};

/// Jobs waiting to run during the steady-state run: the producer tops the queue up to this.
pub(crate) const STEADY_DEPTH: usize = 20_000;
/// The steady-state run reports throughput and memory every this many jobs.
pub(crate) const STEADY_SEGMENTS: usize = 10;

/// Runs `plan.steady` jobs through one function at the highest concurrency on a Redis of its
/// own, with the default retention and cap (50 000 finished jobs kept), a producer keeping
/// about [`STEADY_DEPTH`] jobs queued: throughput and Redis memory per tenth of the run, to
/// see that forgetting finished jobs keeps both flat once the cap is reached.
pub(crate) async fn steady(plan: &Plan, rows: &mut Vec<Row>) {
    let dir = tempfile::tempdir().unwrap();
    let redis = RedisServer::start(&dir.path().join("redis"), 0, &[]).unwrap();
    let url = redis.url();
    let function = FunctionName::new("steady").unwrap();
    let stats_key = wasmgear_proto::keys::FunctionKeys::new(&function).stats();
    let plugins = tempfile::tempdir().unwrap();
    std::fs::copy(
        wasmgear_test_artifacts::ECHO,
        plugins.path().join("steady.wasm"),
    )
    .unwrap();
    let client = Client::connect(&url).await.unwrap();
    let mut conn = client_conn(&url).await;
    let concurrency = *plan.concurrencies.last().unwrap();
    let total = plan.steady;
    let segment = (total / STEADY_SEGMENTS).max(1);
    // Jobs finished so far: the run counts of the function's daily statistics (retained
    // finished jobs stop growing at the cap).
    async fn finished(conn: &mut redis::aio::MultiplexedConnection, key: &str) -> usize {
        let stats: Vec<(String, String)> = redis::cmd("HGETALL")
            .arg(key)
            .query_async(conn)
            .await
            .unwrap();
        stats
            .iter()
            .filter(|(field, _)| field.ends_with(":run:count"))
            .filter_map(|(_, n)| n.parse::<usize>().ok())
            .sum()
    }
    let memory = |port: u16| -> f64 {
        redis_info(port, "memory")
            .lines()
            .find_map(|l| l.strip_prefix("used_memory:"))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or(0.0)
            / 1048576.0
    };
    let started = Instant::now();
    let node = start_node(&url, plugins.path(), concurrency).await;
    let (mut enqueued, mut done) = (0, 0);
    let mut segments: Vec<(f64, f64)> = Vec::new();
    let mut segment_started = Instant::now();
    let options = EnqueueOptions::default();
    let batch: Vec<(&[u8], EnqueueOptions)> =
        (0..1000).map(|_| (&b"x"[..], options.clone())).collect();
    while done < total {
        if enqueued < total && enqueued - done < STEADY_DEPTH {
            let n = (total - enqueued).min(batch.len());
            client.enqueue_many(&function, &batch[..n]).await.unwrap();
            enqueued += n;
        } else {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        done = finished(&mut conn, &stats_key).await;
        while done >= (segments.len() + 1) * segment && segments.len() < STEADY_SEGMENTS {
            let rate = segment as f64 / segment_started.elapsed().as_secs_f64();
            segments.push((rate, memory(redis.port())));
            eprintln!(
                "[steady] {} jobs: {:.0} jobs/s over the last {segment}, Redis memory {:.1} MiB",
                (segments.len()) * segment,
                rate,
                segments.last().map_or(0.0, |s| s.1)
            );
            segment_started = Instant::now();
        }
    }
    let rate = total as f64 / started.elapsed().as_secs_f64();
    node.stop().await;
    let rates: Vec<String> = segments
        .iter()
        .map(|(r, _)| format!("{:.0}", r / 1000.0))
        .collect();
    let memories: Vec<String> = segments.iter().map(|(_, m)| format!("{m:.0}")).collect();
    rows.push(row(
        format!(
            "{total} jobs at concurrency {concurrency}, enqueued as they drain (default retention and cap): thousand jobs/s per tenth [{}], Redis MiB [{}]",
            rates.join(" "),
            memories.join(" ")
        ),
        per_s(rate),
        "",
        "",
    ));
}
