//! Section 6: the throughput again with about 1 ms added between the worker and Redis, through a
//! delaying proxy.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::net::TcpStream;
use std::time::Duration;
use std::time::Instant;

use wasmgear_client::Client;
use wasmgear_proto::FunctionName;

use super::node::{bulk_enqueue, drain};
use super::{Plan, Row, ms, per_s, percentiles, row};

/// A TCP proxy to `127.0.0.1:target` that delays every chunk by `delay` in each direction
/// (threads, so that the delay is precise to microseconds). Returns its port.
pub(crate) fn delaying_proxy(target: u16, delay: Duration) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for client in listener.incoming().map_while(Result::ok) {
            let Ok(server) = TcpStream::connect(("127.0.0.1", target)) else {
                continue;
            };
            let _ = client.set_nodelay(true);
            let _ = server.set_nodelay(true);
            for (from, to) in [
                (client.try_clone().unwrap(), server.try_clone().unwrap()),
                (server.try_clone().unwrap(), client.try_clone().unwrap()),
            ] {
                let (tx, rx) = std::sync::mpsc::channel::<(Instant, Vec<u8>)>();
                let mut from = from;
                std::thread::spawn(move || {
                    let mut buf = vec![0u8; 64 * 1024];
                    while let Ok(n) = from.read(&mut buf) {
                        if n == 0
                            || tx
                                .send((Instant::now() + delay, buf[..n].to_vec()))
                                .is_err()
                        {
                            break;
                        }
                    }
                });
                let mut to = to;
                std::thread::spawn(move || {
                    for (due, bytes) in rx {
                        let now = Instant::now();
                        if due > now {
                            std::thread::sleep(due - now);
                        }
                        if to.write_all(&bytes).is_err() {
                            break;
                        }
                    }
                    let _ = to.shutdown(std::net::Shutdown::Write);
                });
            }
        }
    });
    port
}

/// 6. The drain again through a proxy adding ~1 ms round trip.
pub(crate) async fn remote(plan: &Plan, redis_port: u16, rows: &mut Vec<Row>) {
    let proxy = delaying_proxy(
        redis_port,
        Duration::from_micros(
            std::env::var("PROXY_US")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(500),
        ),
    );
    let url = format!("redis://127.0.0.1:{proxy}");
    let direct = format!("redis://127.0.0.1:{redis_port}");
    let client = Client::connect(&direct).await.unwrap();
    // The round trip through the proxy, as measured.
    let mut conn = redis::Client::open(url.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let mut rtts = Vec::new();
    for _ in 0..50 {
        let started = Instant::now();
        let _: String = redis::cmd("PING").query_async(&mut conn).await.unwrap();
        rtts.push(started.elapsed());
    }
    let (rtt, _) = percentiles(&mut rtts);
    let plugins = tempfile::tempdir().unwrap();
    for name in ["remote", "local"] {
        std::fs::copy(
            wasmgear_test_artifacts::ECHO,
            plugins.path().join(format!("{name}.wasm")),
        )
        .unwrap();
    }
    let concurrency = *plan.concurrencies.last().unwrap();
    let remote = FunctionName::new("remote").unwrap();
    bulk_enqueue(&client, &remote, plan.jobs).await;
    let slow = drain(&url, plugins.path(), &remote, plan.jobs, concurrency).await;
    let local = FunctionName::new("local").unwrap();
    bulk_enqueue(&client, &local, plan.jobs).await;
    let fast = drain(&direct, plugins.path(), &local, plan.jobs, concurrency).await;
    rows.push(row(
        format!(
            "drain {} jobs, concurrency {concurrency}, Redis {} away (local: {})",
            plan.jobs,
            ms(rtt),
            per_s(fast)
        ),
        per_s(slow),
        "",
        format!("{:.2}× slower than local", fast / slow),
    ));
}
