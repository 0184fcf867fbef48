//! `split`: splits a job into chunks, enqueues a child job per chunk, waits for them all and
//! combines their outputs (fan-out, fan-in through `wasmgear:job/jobs`).
//!
//! Text input: every `chunk_lines` lines (the manifest's `[config]`, default 1) are one
//! chunk, sent to the function `child` names (default `reverse`); the output is the
//! children's outputs, one per line, in the chunks' order.
//!
//! JSON input (`{"function": "F", "chunks": ["..", ..], "fail_first": false, "wait_ms": N,
//! "reverse_on_retry": false}`): the same, with the function and chunks given; the output is
//! the JSON array of the children's outputs. With `fail_first`, the first attempt fails (to be
//! retried) after enqueueing its children: the second gets the same children back (with
//! `reverse_on_retry`, though it asks for them in the opposite order).
//!
//! Needs the grant: `[jobs] enqueue = ["reverse"]` in `split.toml`.

use std::time::Duration;

use wasmgear_guest::children::{self, ChildOptions, Outcome};
use wasmgear_guest::{Job, JobError, config, info};

#[derive(serde::Deserialize)]
struct Plan {
    function: String,
    chunks: Vec<String>,
    #[serde(default)]
    fail_first: bool,
    #[serde(default)]
    wait_ms: Option<u64>,
    #[serde(default)]
    reverse_on_retry: bool,
}

/// Enqueues one child per chunk (last first when `reversed`), then waits for each in the
/// chunks' order.
fn fan_out(function: &str, chunks: &[String], wait: Duration, reversed: bool) -> Result<Vec<String>, JobError> {
    let mut ids = Vec::with_capacity(chunks.len());
    let order: Vec<&String> = match reversed {
        true => chunks.iter().rev().collect(),
        false => chunks.iter().collect(),
    };
    for chunk in order {
        let id = children::enqueue(function, chunk.as_bytes(), &ChildOptions::default())
            .map_err(JobError::fail)?;
        ids.push(id);
    }
    if reversed {
        ids.reverse();
    }
    info!("enqueued {} children of {function}", ids.len());
    let mut outputs = Vec::with_capacity(ids.len());
    for id in &ids {
        match children::wait(id, wait).map_err(JobError::retry)? {
            Outcome::Succeeded(output) => outputs.push(String::from_utf8_lossy(&output).into_owned()),
            Outcome::Failed(message) => return Err(JobError::fail(format!("child {id} failed: {message}"))),
            Outcome::Cancelled => return Err(JobError::fail(format!("child {id} was cancelled"))),
        }
    }
    Ok(outputs)
}

fn split(job: &Job, input: String) -> Result<String, JobError> {
    if input.trim_start().starts_with('{') {
        let plan: Plan = serde_json::from_str(&input)
            .map_err(|e| JobError::fail(format!("the input is not a plan: {e}")))?;
        let wait = Duration::from_millis(plan.wait_ms.unwrap_or(60_000));
        if plan.fail_first && job.attempt == 1 {
            for chunk in &plan.chunks {
                children::enqueue(&plan.function, chunk.as_bytes(), &ChildOptions::default())
                    .map_err(JobError::fail)?;
            }
            return Err(JobError::retry(
                "failing attempt 1 on purpose, after enqueueing the children",
            ));
        }
        let reversed = plan.reverse_on_retry && job.attempt > 1;
        let outputs = fan_out(&plan.function, &plan.chunks, wait, reversed)?;
        return serde_json::to_string(&outputs).map_err(JobError::fail);
    }
    let per_chunk: usize = config("chunk_lines").and_then(|n| n.parse().ok()).unwrap_or(1).max(1);
    let child = config("child").unwrap_or_else(|| "reverse".into());
    let lines: Vec<&str> = input.lines().collect();
    let chunks: Vec<String> = lines.chunks(per_chunk).map(|c| c.join("\n")).collect();
    Ok(fan_out(&child, &chunks, Duration::from_secs(60), false)?.join("\n"))
}

wasmgear_guest::job!(split);
