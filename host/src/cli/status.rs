//! `wasmgear status`: show one job.

use super::RedisArgs;
use super::output::{self, paint_state};
use wasmgear_client::JobStatus;
use wasmgear_proto::JobId;
use wasmgear_proto::units::in_or_ago;

/// Options of `wasmgear status`.
#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    #[command(flatten)]
    redis: RedisArgs,

    /// The job's id, as printed by `enqueue` (e.g. echo:42).
    id: String,

    /// Print the job as JSON, as the HTTP API's `GET /v1/jobs/{id}` does: the record's
    /// fields, its id, and a succeeded job's output as `output_base64` and, when it is
    /// UTF-8, `output`.
    #[arg(long)]
    json: bool,
}

pub async fn run(args: StatusArgs) -> anyhow::Result<i32> {
    let id: JobId = args.id.parse()?;
    let client = args.redis.client().await?;
    let status = client.status(&id).await?;
    if args.json {
        output::print_json(&output::job(&status))?;
        return Ok(0);
    }
    let record = &status.record;
    println!("job       {}", status.id);
    println!("state     {}", paint_state(record.state));
    match record.max_attempts {
        // Left to the plugin: fixed when a worker first leases the job.
        0 => println!("attempt   {} of the plugin's default", record.attempt),
        max => println!("attempt   {} of {max}", record.attempt),
    }
    println!("priority  {}", record.priority);
    println!("enqueued  {}", in_or_ago(record.created_ms));
    if let Some(deadline) = record.expires_ms
        && !record.state.is_final()
        && record.started_ms.is_none()
    {
        println!(
            "deadline  {} (not started by then, it expires)",
            in_or_ago(deadline)
        );
    }
    if let Some(group) = &record.group_id {
        println!("group     {group}");
    }
    if let Some(trace) = &record.trace {
        println!("trace     {}", trace_line(trace));
    }
    if let Some(parent) = &record.parent {
        println!("parent    {parent}");
    }
    if !record.children.is_empty() {
        println!(
            "children  {} ({})",
            record.children.len(),
            record.children.join(", ")
        );
    }
    if let (Some(schedule), Some(tick)) = (&record.schedule, record.tick_ms) {
        println!(
            "schedule  {schedule}, tick {}",
            wasmgear_proto::units::utc_text(tick)
        );
    }
    if let Some(at) = record.run_at_ms {
        println!("runs at   {}", in_or_ago(at));
    }
    if let Some(worker) = &record.worker {
        println!("worker    {worker}");
    }
    if !record.state.is_final() && record.state != wasmgear_client::JobState::Running {
        let service = client.service(&id.function).await?;
        if let Some(note) = unserved_note(&id.function, &service) {
            println!("workers   {note}");
        }
    }
    if let Some(progress) = &record.progress {
        let message = progress.message.as_deref().unwrap_or("");
        println!("progress  {}/{} {message}", progress.done, progress.total);
    }
    if let Some(checkpoint) = &record.checkpoint {
        let unit = if checkpoint.bytes == 1 {
            "byte"
        } else {
            "bytes"
        };
        println!(
            "checkpoint {} {unit}, saved {}",
            checkpoint.bytes,
            in_or_ago(checkpoint.ms)
        );
    }
    if let Some(error) = &record.error {
        println!(
            "error     [{}] {}",
            error.class,
            output::output_text(error.message.as_bytes())
        );
    }
    if let Some(bytes) = &status.output {
        println!("output    {}", output::output_text(bytes));
    }
    // Each ended attempt, with the plugin build it ran on (what `wasmgear replay` finds).
    for attempt in &record.history {
        println!(
            "history   attempt {} {} (worker {}, plugin {}){}",
            attempt.attempt,
            attempt.outcome,
            attempt.worker.as_deref().unwrap_or("-"),
            attempt.version.as_deref().unwrap_or("-"),
            attempt
                .message
                .as_deref()
                .map_or(String::new(), |m| format!(": {m}"))
        );
    }
    Ok(0)
}

/// What to tell someone whose job of `function` waits while no live worker serves it
/// (`None` when one does).
pub(super) fn unserved_note(
    function: &wasmgear_proto::FunctionName,
    service: &wasmgear_client::Service,
) -> Option<String> {
    if service.live_workers > 0 {
        return None;
    }
    let mut note = format!("no live worker serves {function}: its jobs wait until one does");
    for problem in &service.plugin_problems {
        note.push_str(&format!("\n          {problem}"));
    }
    Some(note)
}

/// Prints why a finished job has no output.
pub(super) fn print_failure(status: &JobStatus) {
    let record = &status.record;
    match &record.error {
        Some(error) => eprintln!(
            "job {} {} after {} attempt(s) [{}]: {}",
            status.id, record.state, record.attempt, error.class, error.message
        ),
        None => eprintln!("job {} {}", status.id, record.state),
    }
}

/// A job's traceparent as `status` shows it: the trace id (what a tracing UI searches by),
/// then the span the job was enqueued in.
fn trace_line(traceparent: &str) -> String {
    match wasmgear_client::TraceContext::new(traceparent, None) {
        Ok(trace) => format!(
            "{} (enqueued in span {}{})",
            trace.trace_id(),
            trace.span_id(),
            if trace.sampled() { "" } else { ", not sampled" }
        ),
        Err(_) => traceparent.to_string(),
    }
}
