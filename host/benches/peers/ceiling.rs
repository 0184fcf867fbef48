//! Section 5, the Redis ceiling: `redis-benchmark` of a trivial script, and what a wasmgear job
//! costs Redis (its calls and CPU time); the readings of INFO the other sections share.

use super::{Row, per_s, row};

/// INFO cpu: the CPU time the server has used so far (user + system), in µs: what a job
/// really costs Redis, its network handling included.
pub(crate) fn server_cpu_us(port: u16) -> f64 {
    redis_info(port, "cpu")
        .lines()
        .filter_map(|l| {
            let (name, value) = l.trim().split_once(':')?;
            matches!(name, "used_cpu_user" | "used_cpu_sys")
                .then(|| value.parse::<f64>().ok())
                .flatten()
        })
        .sum::<f64>()
        * 1e6
}

/// The CPU time this process has used so far (user + system, from /proc/self/stat, in
/// clock ticks of 10 ms), in µs: with the worker node in this process, what a drained job
/// costs the worker (the bench's own polling aside).
pub(crate) fn own_cpu_us() -> f64 {
    cpu_us_of("self")
}

/// The CPU time process `pid` (or `self`) has used so far, as [`own_cpu_us`] counts it.
pub(crate) fn cpu_us_of(pid: &str) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The fields after the command name (which is in parentheses): utime and stime are the
    // 12th and 13th of them.
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let ticks: f64 = after
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|t| t.parse::<f64>().ok())
        .sum();
    ticks * 10_000.0
}

pub(crate) async fn client_conn(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// WASMGEAR_BENCH_PROFILE=1: where Redis spent its time in the last drain (after a
/// CONFIG RESETSTAT), per job and command; a function's time includes its inner commands.
pub(crate) fn print_command_profile(port: u16, jobs: usize) {
    let mut rows: Vec<(String, f64, f64)> = redis_info(port, "commandstats")
        .lines()
        .filter_map(|line| {
            let (name, fields) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let field = |key: &str| {
                fields
                    .split(',')
                    .find_map(|f| f.strip_prefix(key))
                    .and_then(|v| v.parse::<f64>().ok())
            };
            Some((
                name.to_string(),
                field("calls=")? / jobs as f64,
                field("usec=")? / jobs as f64,
            ))
        })
        .collect();
    rows.sort_by(|a, b| b.2.total_cmp(&a.2));
    for (name, calls, usec) in rows {
        println!("[profile]   {name:<28} {calls:>8.3} calls/job {usec:>8.2} µs/job");
    }
}

/// INFO commandstats: how many commands the server has run so far (those called inside
/// functions included).
pub(crate) fn command_stats(port: u16) -> u64 {
    redis_info(port, "commandstats")
        .lines()
        .filter(|l| l.starts_with("cmdstat_"))
        .filter_map(|line| {
            let fields = line.split(':').nth(1)?;
            fields
                .split(',')
                .find_map(|f| f.strip_prefix("calls="))?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

/// 5. What one Redis core does with a trivial script.
pub(crate) fn redis_ceiling(port: u16, rows: &mut Vec<Row>) {
    let cli = |args: &[&str]| {
        let out = std::process::Command::new("redis-cli")
            .arg("-p")
            .arg(port.to_string())
            .args(args)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    let sha = cli(&["SCRIPT", "LOAD", "return 1"]);
    for (clients, pipeline) in [("1", "1"), ("50", "1"), ("50", "16")] {
        let out = std::process::Command::new("redis-benchmark")
            .args([
                "-p",
                &port.to_string(),
                "-n",
                "200000",
                "-c",
                clients,
                "-P",
                pipeline,
                "-q",
                "EVALSHA",
                &sha,
                "0",
            ])
            .output();
        let text = out
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        let rate = text
            .split_whitespace()
            .find_map(|w| {
                w.replace(',', "")
                    .parse::<f64>()
                    .ok()
                    .filter(|v| *v > 100.0)
            })
            .unwrap_or(0.0);
        rows.push(row(
            format!("Redis ceiling: redis-benchmark EVALSHA 'return 1', {clients} client(s), pipeline {pipeline}"),
            "",
            per_s(rate),
            "",
        ));
    }
}

/// One section of the server's INFO, through redis-cli.
pub(crate) fn redis_info(port: u16, section: &str) -> String {
    let out = std::process::Command::new("redis-cli")
        .args(["-p", &port.to_string(), "INFO", section])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub(crate) fn redis_version(port: u16) -> String {
    redis_info(port, "server")
        .lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .unwrap_or("?")
        .trim()
        .to_string()
}
