//! Section 7, the queues people already run: each filled the way its own clients fill it and
//! drained through `--source` next to wasmgear's own queue, and an idle node's latency through
//! qless and gearmand.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::Duration;
use std::time::Instant;

use wasmgear_client::Client;
use wasmgear_proto::FunctionName;
use wasmgear_sources::gearman::Command as Gm;
use wasmgear_sources::gearman::{self as gm};

use super::node::{bulk_enqueue, drain, start_node, start_source_node};
use super::queue::{epoch_ns, own_latency};
use super::{Plan, Row, ms, per_s, percentiles, row, times};

/// A `gearmand` of the benchmark's own on a free port (killed when dropped), or `None` when
/// it is not installed.
pub(crate) struct BenchGearmand(std::process::Child, u16);

impl BenchGearmand {
    fn start() -> Option<Self> {
        let port = wasmgear_redis_server::free_port();
        let program = match Path::new("/usr/sbin/gearmand").exists() {
            true => "/usr/sbin/gearmand",
            false => "gearmand",
        };
        let child = std::process::Command::new(program)
            .args(["--listen", "127.0.0.1", "--port", &port.to_string()])
            .args(["--log-file=none", "--threads", "1"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .ok()?;
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Some(BenchGearmand(child, port))
    }

    fn address(&self) -> String {
        format!("127.0.0.1:{}", self.1)
    }

    /// The jobs of `function` gearmand still holds (queued or running), by its `status`
    /// admin command.
    fn jobs_of(&self, function: &str) -> u64 {
        let mut admin = TcpStream::connect(("127.0.0.1", self.1)).unwrap();
        admin.write_all(b"status\n").unwrap();
        let mut text = String::new();
        let mut buf = [0u8; 4096];
        while !text.ends_with(".\n") {
            let n = admin.read(&mut buf).unwrap();
            assert!(n > 0, "gearmand closed the admin connection");
            text.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
        text.lines()
            .find_map(|line| {
                let mut fields = line.split('\t');
                (fields.next() == Some(function)).then(|| fields.next()?.parse().ok())?
            })
            .unwrap_or(0)
    }
}

impl Drop for BenchGearmand {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// qless' `put` of a job into `queue`, stored as qless stores one (job hash, history entry,
/// the queue's work set, the `put` event), added to `pipe`.
pub(crate) fn qless_put(pipe: &mut redis::Pipeline, queue: &str, jid: &str, klass: &str) {
    let now = epoch_ns(std::time::SystemTime::now()) as f64 / 1e9;
    pipe.cmd("HSET")
        .arg(format!("ql:j:{jid}"))
        .arg(&[
            ("jid", jid),
            ("klass", klass),
            ("data", "\"x\""),
            ("priority", "0"),
            ("tags", "{}"),
            ("state", "waiting"),
            ("worker", ""),
            ("expires", "0"),
            ("queue", queue),
            ("retries", "5"),
            ("remaining", "5"),
        ])
        .arg("time")
        .arg(format!("{now:.6}"))
        .ignore();
    let put = serde_json::json!([now.floor() as i64, "put", {"q": queue}]);
    pipe.cmd("RPUSH")
        .arg(format!("ql:j:{jid}-history"))
        .arg(put.to_string())
        .ignore();
    pipe.cmd("ZADD")
        .arg(format!("ql:q:{queue}-work"))
        .arg(-now / 1e10)
        .arg(jid)
        .ignore();
    let event = serde_json::json!({"jid": jid, "event": "put", "queue": queue});
    pipe.cmd("PUBLISH")
        .arg("ql:log")
        .arg(event.to_string())
        .ignore();
}

/// Section 7: the same no-op jobs from GearMonkey's lists (put there with the spec's
/// commands), a redis-work-queue, a worqr queue and wasmgear's own queue, each drained by one
/// node at concurrency 16.
pub(crate) async fn sources(plan: &Plan, url: &str, rows: &mut Vec<Row>) {
    const CONCURRENCY: usize = 16;
    let jobs = plan.jobs / 5;
    let plugins = tempfile::tempdir().unwrap();
    for name in [
        "own-queue",
        "gearmonkey",
        "work-queue",
        "worqr",
        "qless",
        "gearman",
    ] {
        std::fs::copy(
            wasmgear_test_artifacts::ECHO,
            plugins.path().join(format!("{name}.wasm")),
        )
        .unwrap();
    }
    std::fs::copy(
        wasmgear_test_artifacts::CLOCK,
        plugins.path().join("clock.wasm"),
    )
    .unwrap();
    let client = Client::connect(url).await.unwrap();
    let own = FunctionName::new("own-queue").unwrap();
    bulk_enqueue(&client, &own, jobs).await;
    let own_rate = drain(url, plugins.path(), &own, jobs, CONCURRENCY).await;

    let mut conn = redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let gearmand = BenchGearmand::start();
    if gearmand.is_none() {
        eprintln!("gearmand is not installed (scripts/setup installs it): Gearman left out");
    }
    let ids: Vec<usize> = (1..=jobs).collect();
    for peer in Peer::ALL {
        let at = Place {
            conn: conn.clone(),
            gearmand: gearmand.as_ref(),
        };
        let Some(spec) = peer.spec(&at) else {
            continue;
        };
        peer.fill(&at, &ids).await;
        let started = Instant::now();
        let node = start_source_node(url, plugins.path(), CONCURRENCY, &spec).await;
        while !peer.drained(&at).await {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let rate = jobs as f64 / started.elapsed().as_secs_f64();
        node.stop().await;
        peer.check(&at, jobs).await;
        rows.push(row(
            format!(
                "drain {jobs} jobs, concurrency {CONCURRENCY}: --source {} (peer: wasmgear's own queue)",
                peer.name()
            ),
            per_s(rate),
            per_s(own_rate),
            times(rate, own_rate),
        ));
    }

    // Latency of an idle node, one `clock` job at a time: qless' put → guest entry and → the
    // `completed` event, next to the same on wasmgear's own queue.
    let samples = plan.latency.min(200);
    let node = start_node(url, plugins.path(), 4).await;
    let (own_entry, own_result) = own_latency(&client, samples).await;
    node.stop().await;
    let node = start_source_node(url, plugins.path(), 4, "qless:tick").await;
    let mut events = redis::Client::open(url)
        .unwrap()
        .get_async_pubsub()
        .await
        .unwrap();
    events.subscribe("ql:log").await.unwrap();
    let mut events = events.into_on_message();
    let (mut entry, mut result) = (Vec::new(), Vec::new());
    for n in 0..samples {
        tokio::time::sleep(Duration::from_millis(5)).await;
        let jid = format!("tick-{n}");
        let sent = std::time::SystemTime::now();
        let started = Instant::now();
        let mut pipe = redis::pipe();
        qless_put(pipe.atomic(), "tick", &jid, "clock");
        let () = pipe.query_async(&mut conn).await.unwrap();
        loop {
            let message = tokio::time::timeout(
                Duration::from_secs(10),
                futures_util::StreamExt::next(&mut events),
            )
            .await
            .expect("a qless event in time")
            .expect("the subscription open");
            let event: serde_json::Value =
                serde_json::from_str(&message.get_payload::<String>().unwrap()).unwrap();
            if event["event"] == "completed" && event["jid"] == jid.as_str() {
                break;
            }
        }
        result.push(started.elapsed());
        let output: String = redis::cmd("HGET")
            .arg(format!("ql:j:{jid}"))
            .arg("output")
            .query_async(&mut conn)
            .await
            .unwrap();
        let entered: u128 = output.parse().unwrap();
        entry.push(Duration::from_nanos(
            entered.saturating_sub(epoch_ns(sent)) as u64
        ));
    }
    node.stop().await;
    // The same through gearmand: SUBMIT_JOB, then its WORK_COMPLETE.
    let (mut gm_entry, mut gm_result) = (Vec::new(), Vec::new());
    if let Some(gearmand) = &gearmand {
        let address = gearmand.address();
        let node = start_source_node(url, plugins.path(), 4, &format!("gearman://{address}")).await;
        let mut client = tokio::net::TcpStream::connect(&address).await.unwrap();
        client.set_nodelay(true).unwrap();
        for _ in 0..samples {
            tokio::time::sleep(Duration::from_millis(5)).await;
            let sent = std::time::SystemTime::now();
            let started = Instant::now();
            let submit = gm::request(Gm::SubmitJob, &[b"clock", b"", b""]);
            tokio::io::AsyncWriteExt::write_all(&mut client, &submit)
                .await
                .unwrap();
            let output = loop {
                let packet = gm::read_packet(&mut client).await.unwrap();
                if packet.kind == Gm::WorkComplete as u32 {
                    break packet.args(2).unwrap()[1].to_vec();
                }
            };
            gm_result.push(started.elapsed());
            let entered: u128 = String::from_utf8_lossy(&output).parse().unwrap();
            gm_entry.push(Duration::from_nanos(
                entered.saturating_sub(epoch_ns(sent)) as u64
            ));
        }
        node.stop().await;
    }
    let mut pairs = vec![
        (
            "latency: qless put → guest entry, p50 (peer: own queue)",
            entry,
            own_entry.clone(),
        ),
        (
            "latency: qless put → completed event, p50 (peer: own queue's result)",
            result,
            own_result.clone(),
        ),
    ];
    if !gm_entry.is_empty() {
        pairs.push((
            "latency: Gearman SUBMIT_JOB → guest entry, p50 (peer: own queue)",
            gm_entry,
            own_entry,
        ));
        pairs.push((
            "latency: Gearman SUBMIT_JOB → WORK_COMPLETE, p50 (peer: own queue's result)",
            gm_result,
            own_result,
        ));
    }
    for (what, mut ours, mut own) in pairs {
        let (ours, own) = (&mut ours, &mut own);
        let (p50, p99) = percentiles(ours);
        let (own50, own99) = percentiles(own);
        let the_time = |ours: Duration, own: Duration| {
            format!("{:.2}× the time", ours.as_secs_f64() / own.as_secs_f64())
        };
        rows.push(row(what, ms(p50), ms(own50), the_time(p50, own50)));
        rows.push(row("  same, p99", ms(p99), ms(own99), the_time(p99, own99)));
    }
}

/// The queues people already run, each filled with the same no-op jobs the way its own
/// clients put them there, then drained by one node through `--source`.
#[derive(Clone, Copy)]
enum Peer {
    /// The spec's `Client.run`, pipelined: the job hash, then the id in the normal queue.
    GearMonkey,
    /// redis-work-queue: the libraries' `add_item` (data, then the id), pipelined.
    WorkQueue,
    /// worqr: `enqueue` (LPUSH and a `work` message), pipelined.
    Worqr,
    /// qless: jobs stored as qless' `put` stores them, klass `jobs.qless`.
    Qless,
    /// Gearman: background jobs submitted to a gearmand, pipelined.
    Gearman,
}

/// Where the peers' jobs go: the Redis of the run, and the benchmark's gearmand if any.
struct Place<'a> {
    conn: redis::aio::MultiplexedConnection,
    gearmand: Option<&'a BenchGearmand>,
}

impl Peer {
    const ALL: [Peer; 5] = [
        Peer::GearMonkey,
        Peer::WorkQueue,
        Peer::Worqr,
        Peer::Qless,
        Peer::Gearman,
    ];

    /// Its name in `--source` and the table.
    fn name(self) -> &'static str {
        match self {
            Peer::GearMonkey => "gearmonkey",
            Peer::WorkQueue => "redis-work-queue",
            Peer::Worqr => "worqr",
            Peer::Qless => "qless",
            Peer::Gearman => "gearman",
        }
    }

    /// The `--source` spec of its node (the jobs run on the plugin named after it), or
    /// `None` when it cannot run here (no gearmand).
    fn spec(self, at: &Place<'_>) -> Option<String> {
        Some(match self {
            Peer::GearMonkey => "gearmonkey".into(),
            Peer::WorkQueue => "redis-work-queue:rwq=work-queue".into(),
            Peer::Worqr => "worqr:bench=worqr".into(),
            Peer::Qless => "qless:bench".into(),
            Peer::Gearman => format!("gearman://{}", at.gearmand?.address()),
        })
    }

    /// Puts one job per id in `ids` where this peer keeps them.
    async fn fill(self, at: &Place<'_>, ids: &[usize]) {
        if let Peer::Gearman = self {
            let Some(gearmand) = at.gearmand else { return };
            let mut client = tokio::net::TcpStream::connect(gearmand.address())
                .await
                .unwrap();
            // In batches, reading the replies of each: gearmand stops reading a client whose
            // replies it cannot write.
            for chunk in ids.chunks(500) {
                let mut batch = Vec::new();
                for _ in chunk {
                    batch.extend(gm::request(Gm::SubmitJobBg, &[b"gearman", b"", b"x"]));
                }
                tokio::io::AsyncWriteExt::write_all(&mut client, &batch)
                    .await
                    .unwrap();
                for _ in chunk {
                    let created = gm::read_packet(&mut client).await.unwrap();
                    assert_eq!(created.kind, Gm::JobCreated as u32);
                }
            }
            return;
        }
        for chunk in ids.chunks(1000) {
            let mut pipe = redis::pipe();
            for id in chunk {
                match self {
                    Peer::GearMonkey => {
                        pipe.cmd("HSET")
                            .arg(format!("job:gearmonkey:{id}"))
                            .arg("status")
                            .arg("idle")
                            .arg("input")
                            .arg("x")
                            .ignore();
                        pipe.cmd("LPUSH")
                            .arg("queue:gearmonkey:normal")
                            .arg(id)
                            .ignore();
                    }
                    Peer::WorkQueue => {
                        pipe.cmd("SET")
                            .arg(format!("rwq:item:{id}"))
                            .arg("x")
                            .ignore();
                        pipe.cmd("LPUSH").arg("rwq:queue").arg(id).ignore();
                    }
                    Peer::Worqr => {
                        pipe.cmd("LPUSH")
                            .arg("worqr:queues:bench")
                            .arg("x")
                            .ignore();
                    }
                    Peer::Qless => {
                        qless_put(&mut pipe, "bench", &format!("bench-{id}"), "jobs.qless")
                    }
                    Peer::Gearman => {}
                }
            }
            if let Peer::Worqr = self {
                pipe.cmd("PUBLISH")
                    .arg("worqr_bench_work")
                    .arg(chunk.len())
                    .ignore();
            }
            let () = pipe.query_async(&mut at.conn.clone()).await.unwrap();
        }
    }

    /// Whether every job was taken and finished: its lists and sets are empty (gearmand:
    /// holds none of its jobs).
    async fn drained(self, at: &Place<'_>) -> bool {
        let lengths = match self {
            Peer::GearMonkey => [
                ("LLEN", "queue:gearmonkey:normal"),
                ("ZCARD", "wasmgear:gearmonkey:gearmonkey:leases"),
            ],
            Peer::WorkQueue => [("LLEN", "rwq:queue"), ("LLEN", "rwq:processing")],
            Peer::Worqr => [
                ("LLEN", "worqr:queues:bench"),
                ("SCARD", "worqr:workingProcesses:bench"),
            ],
            Peer::Qless => [("ZCARD", "ql:q:bench-work"), ("ZCARD", "ql:q:bench-locks")],
            Peer::Gearman => {
                return at.gearmand.is_none_or(|g| g.jobs_of("gearman") == 0);
            }
        };
        let mut pipe = redis::pipe();
        for (command, key) in lengths {
            pipe.cmd(command).arg(key);
        }
        let counts: Vec<u64> = pipe.query_async(&mut at.conn.clone()).await.unwrap();
        counts.iter().all(|&n| n == 0)
    }

    /// Checks that the last of `jobs` ended as this peer says a success (gearmand keeps no
    /// record of a background job: its being gone is all).
    async fn check(self, at: &Place<'_>, jobs: usize) {
        let mut conn = at.conn.clone();
        let (key, field, want) = match self {
            Peer::GearMonkey => (format!("job:gearmonkey:{jobs}"), "status", "success"),
            Peer::WorkQueue => (format!("rwq:result:{jobs}"), "status", "success"),
            Peer::Qless => (format!("ql:j:bench-{jobs}"), "state", "complete"),
            Peer::Worqr => {
                let held: u64 = redis::cmd("HLEN")
                    .arg("worqr:wasmgear:owners")
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                assert_eq!(held, 0, "worqr processes left unfinished");
                return;
            }
            Peer::Gearman => return,
        };
        let got: String = redis::cmd("HGET")
            .arg(key)
            .arg(field)
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(got, want, "the last job of {}", self.name());
    }
}
