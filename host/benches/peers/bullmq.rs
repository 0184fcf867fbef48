//! Section 2: BullMQ's own benchmark (`bench/bullmq/run.sh`, Node.js) on the same Redis, whose
//! numbers the other sections print beside wasmgear's.

use super::Plan;
use crate::common;

/// Runs BullMQ's benchmark against the same Redis; `None` when Node or npm is missing.
pub(crate) fn run_bullmq(url: &str, plan: &Plan) -> Option<serde_json::Value> {
    let mut command = std::process::Command::new("bash");
    command
        .arg(common::repo().join("bench/bullmq/run.sh"))
        .env("REDIS_URL", url)
        .env("JOBS", plan.jobs.to_string())
        .env("SINGLE_N", plan.single.to_string())
        .env(
            "CONCURRENCIES",
            plan.concurrencies
                .iter()
                .map(|c| c.to_string())
                .collect::<Vec<_>>()
                .join(","),
        );
    if std::env::var_os("WASMGEAR_BENCH_QUICK").is_some() {
        command.env("QUICK", "1");
    }
    let out = command
        .stderr(std::process::Stdio::inherit())
        .output()
        .ok()?;
    if !out.status.success() {
        eprintln!(
            "BullMQ's benchmark failed: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        return None;
    }
    serde_json::from_slice(&out.stdout).ok()
}
