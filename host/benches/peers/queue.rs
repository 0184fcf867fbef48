//! Sections 2 to 4 on wasmgear's own queue: enqueue one at a time and in bulk, drain at several
//! concurrencies and an idle worker's latency, each beside BullMQ's.

use std::time::Duration;
use std::time::Instant;

use wasmgear_client::Client;
use wasmgear_client::EnqueueOptions;
use wasmgear_proto::FunctionName;

use super::ceiling::{
    client_conn, command_stats, own_cpu_us, print_command_profile, server_cpu_us,
};
use super::node::{bulk_enqueue, drain, start_node};
use super::{Plan, Row, ms, per_s, percentiles, row, times};

/// 2-4: enqueue, drain and latency, with BullMQ's numbers beside them.
pub(crate) async fn queue_numbers(
    plan: &Plan,
    url: &str,
    bullmq: Option<&serde_json::Value>,
    rows: &mut Vec<Row>,
) {
    let peer = |path: &[&str]| -> Option<f64> {
        let mut value = bullmq?;
        for key in path {
            value = value.get(key)?;
        }
        value.as_f64()
    };
    let client = Client::connect(url).await.unwrap();
    let port: u16 = url.rsplit(':').next().unwrap().parse().unwrap();

    // Enqueue.
    let single = FunctionName::new("bench-single").unwrap();
    let started = Instant::now();
    for _ in 0..plan.single {
        client
            .enqueue(&single, b"x", &EnqueueOptions::default())
            .await
            .unwrap();
    }
    let single_rate = plan.single as f64 / started.elapsed().as_secs_f64();
    let bullmq_single = peer(&["add_single_per_s"]);
    rows.push(row(
        "enqueue one at a time (BullMQ add)",
        per_s(single_rate),
        bullmq_single.map_or("-".into(), per_s),
        bullmq_single.map_or("-".into(), |b| times(single_rate, b)),
    ));
    let bulk = FunctionName::new("bench-bulk").unwrap();
    let took = bulk_enqueue(&client, &bulk, plan.jobs).await;
    let bulk_rate = plan.jobs as f64 / took.as_secs_f64();
    let bullmq_bulk = peer(&["add_bulk_per_s"]);
    rows.push(row(
        format!("enqueue {} in bulk (BullMQ addBulk)", plan.jobs),
        per_s(bulk_rate),
        bullmq_bulk.map_or("-".into(), per_s),
        bullmq_bulk.map_or("-".into(), |b| times(bulk_rate, b)),
    ));

    // Drain at each concurrency.
    // One function per concurrency (the count of finished jobs is per function).
    let plugins = tempfile::tempdir().unwrap();
    for &concurrency in &plan.concurrencies {
        std::fs::copy(
            wasmgear_test_artifacts::ECHO,
            plugins.path().join(format!("echo-{concurrency}.wasm")),
        )
        .unwrap();
    }
    std::fs::copy(
        wasmgear_test_artifacts::CLOCK,
        plugins.path().join("clock.wasm"),
    )
    .unwrap();
    let bullmq_drain = |mode: &str, concurrency: usize| -> Option<f64> {
        bullmq?.get("drain")?.as_array()?.iter().find_map(|d| {
            (d["mode"] == mode && d["concurrency"] == concurrency).then(|| d["per_s"].as_f64())?
        })
    };
    let mut calls_per_job = None;
    for &concurrency in &plan.concurrencies {
        let echo = FunctionName::new(format!("echo-{concurrency}")).unwrap();
        bulk_enqueue(&client, &echo, plan.jobs).await;
        if std::env::var_os("WASMGEAR_BENCH_PROFILE").is_some() {
            let _: () = redis::cmd("CONFIG")
                .arg("RESETSTAT")
                .query_async(&mut client_conn(url).await)
                .await
                .unwrap();
        }
        let before = (command_stats(port), server_cpu_us(port), own_cpu_us());
        let rate = drain(url, plugins.path(), &echo, plan.jobs, concurrency).await;
        let after = (command_stats(port), server_cpu_us(port), own_cpu_us());
        let per_job = |before: f64, after: f64| (after - before) / plan.jobs as f64;
        calls_per_job = Some((
            per_job(before.0 as f64, after.0 as f64),
            per_job(before.1, after.1),
            per_job(before.2, after.2),
        ));
        if std::env::var_os("WASMGEAR_BENCH_PROFILE").is_some() {
            print_command_profile(port, plan.jobs);
        }
        println!(
            "[bench] drain c={concurrency}: {rate:.0} jobs/s, Redis {:.2} commands and {:.1} µs CPU per job, worker {:.1} µs CPU per job",
            per_job(before.0 as f64, after.0 as f64),
            per_job(before.1, after.1),
            per_job(before.2, after.2),
        );
        for (mode, label) in [
            ("inprocess", "in-process"),
            ("sandbox_threads", "sandboxed, worker threads"),
            ("sandbox_process", "sandboxed, child process"),
        ] {
            let theirs = bullmq_drain(mode, concurrency);
            rows.push(row(
                format!(
                    "drain {} no-op jobs, concurrency {concurrency} (BullMQ {label})",
                    plan.jobs
                ),
                if mode == "inprocess" {
                    per_s(rate)
                } else {
                    String::new()
                },
                theirs.map_or("-".into(), per_s),
                theirs.map_or("-".into(), |b| times(rate, b)),
            ));
        }
    }
    if let Some((calls, usec, worker_usec)) = calls_per_job {
        rows.push(row(
            "Redis commands (inner ones included) and Redis CPU per job (last drain)",
            format!("{calls:.2} commands, {usec:.1} µs"),
            "",
            format!(
                "→ at most {:.0} jobs/s on one Redis core",
                1e6 / usec.max(0.001)
            ),
        ));
        rows.push(row(
            "the worker node's CPU per job (last drain: instance, Redis client, tasks)",
            format!("{worker_usec:.1} µs"),
            "",
            format!(
                "→ at most {:.0} jobs/s on one core",
                1e6 / worker_usec.max(0.001)
            ),
        ));
    }

    // Latency: an idle node, one job at a time.
    let node = start_node(url, plugins.path(), 4).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (mut entry, mut result) = own_latency(&client, plan.latency).await;
    node.stop().await;
    let (e50, e99) = percentiles(&mut entry);
    let (r50, r99) = percentiles(&mut result);
    let bull = |key: &str, p: &str| peer(&[key, p]).map(|v| Duration::from_secs_f64(v / 1e3));
    let show = |d: Option<Duration>| d.map_or("-".into(), ms);
    let ratio = |ours: Duration, theirs: Option<Duration>| {
        theirs.map_or("-".into(), |t| {
            format!("{:.2}× the time", ours.as_secs_f64() / t.as_secs_f64())
        })
    };
    for (what, ours, key, p) in [
        (
            "latency: enqueue → guest entry, p50 (BullMQ: → processor)",
            e50,
            "pickup_ms",
            "p50",
        ),
        ("  same, p99", e99, "pickup_ms", "p99"),
        (
            "latency: enqueue → result seen by a waiting client, p50",
            r50,
            "result_ms",
            "p50",
        ),
        ("  same, p99", r99, "result_ms", "p99"),
    ] {
        let theirs = bull(key, p);
        rows.push(row(what, ms(ours), show(theirs), ratio(ours, theirs)));
    }
}

/// An idle node's latency on wasmgear's own queue, one `clock` job at a time: enqueue →
/// guest entry and enqueue → result seen by a waiting client, `samples` of each.
pub(crate) async fn own_latency(client: &Client, samples: usize) -> (Vec<Duration>, Vec<Duration>) {
    let clock = FunctionName::new("clock").unwrap();
    let (mut entry, mut result) = (Vec::new(), Vec::new());
    // WASMGEAR_BENCH_DEBUG: where the time from guest entry to the result goes, through an
    // event stream that notes when each job's `finish` event reaches the client.
    let debug = std::env::var_os("WASMGEAR_BENCH_DEBUG").is_some();
    // (The stream is a subscription of its own: it may hear an event after the wait has
    // returned with it, so each job's time is awaited from it, bounded.)
    let (seen, mut finishes) = tokio::sync::mpsc::unbounded_channel();
    let listener = if debug {
        let mut events = Box::pin(client.events(Some(&clock)).await.unwrap());
        Some(tokio::spawn(async move {
            use futures_util::StreamExt;
            while let Some(event) = events.next().await {
                if let wasmgear_proto::Event::Finish { id, .. } = event.event {
                    let _ = seen.send((id, epoch_ns(std::time::SystemTime::now())));
                }
            }
        }))
    } else {
        None
    };
    for _ in 0..samples {
        tokio::time::sleep(Duration::from_millis(5)).await;
        let sent = std::time::SystemTime::now();
        let started = Instant::now();
        let id = client
            .enqueue(&clock, b"", &EnqueueOptions::default())
            .await
            .unwrap();
        let status = client
            .wait(&id, Some(Duration::from_secs(10)), |_| {})
            .await
            .unwrap();
        result.push(started.elapsed());
        let entered: u128 = String::from_utf8_lossy(status.output.as_deref().unwrap_or_default())
            .parse()
            .unwrap();
        let sent_ns = epoch_ns(sent);
        entry.push(Duration::from_nanos(entered.saturating_sub(sent_ns) as u64));
        if debug {
            let returned = epoch_ns(std::time::SystemTime::now());
            let leased = status.record.history[0].started_ms.unwrap_or(0) as u128 * 1_000_000;
            let finished = status.record.finished_ms.unwrap_or(0) as u128 * 1_000_000;
            let heard = loop {
                match tokio::time::timeout(Duration::from_secs(5), finishes.recv()).await {
                    Ok(Some((heard_id, at))) if heard_id == id => break at,
                    Ok(Some(_)) => {}
                    _ => panic!("the event stream did not hear {id} finish"),
                }
            };
            let ms = |from: u128, to: u128| (to as f64 - from as f64) / 1e6;
            eprintln!(
                "enqueue→lease {:.2} ms, lease→entry {:.2} ms, entry→finished (Redis clock) {:.2} ms, \
                 entry→finish event heard {:.2} ms, event→wait returned {:.2} ms",
                ms(sent_ns, leased),
                ms(leased, entered),
                ms(entered, finished),
                ms(entered, heard),
                ms(heard, returned),
            );
        }
    }
    if let Some(listener) = listener {
        listener.abort();
    }
    (entry, result)
}

/// Nanoseconds since the epoch at `sent`.
pub(crate) fn epoch_ns(sent: std::time::SystemTime) -> u128 {
    sent.duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos()
}
