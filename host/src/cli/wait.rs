//! `wasmgear wait`: follow jobs to their end, with live progress; also `enqueue --wait`.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use super::output::{self, paint_state, print_json};
use super::{RedisArgs, exit, parse_duration};
use wasmgear_client::{Client, JobState, JobStatus, QueueError};
use wasmgear_proto::{JobId, Progress};

/// Options of `wasmgear wait`.
#[derive(Debug, clap::Args)]
pub struct WaitArgs {
    #[command(flatten)]
    redis: RedisArgs,

    /// The jobs to wait for (e.g. echo:42 resize:7).
    #[arg(required = true, value_name = "JOB_ID")]
    ids: Vec<String>,

    /// Give up after this long (exit 4); the jobs go on.
    #[arg(long, value_parser = parse_duration)]
    timeout: Option<Duration>,

    /// Print each job's final status as JSON: an array, in the order given, of what
    /// `status --json` prints.
    #[arg(long)]
    json: bool,
}

pub async fn run(args: WaitArgs) -> anyhow::Result<i32> {
    let ids: Vec<JobId> = args
        .ids
        .iter()
        .map(|id| id.parse())
        .collect::<Result<_, _>>()?;
    let client = args.redis.client().await?;
    // A typo should not wait until the timeout: every job must exist now.
    for id in &ids {
        client.status(id).await?;
    }
    wait_for(&client, &ids, args.timeout, args.json).await
}

/// Waits for `ids`, showing progress on stderr (a bar per job on a terminal, one line per
/// report otherwise), then prints the outcome: for one job its output (or error), for
/// several one line each, or JSON. Returns the exit code: 0 when all succeeded, else that of
/// the worst outcome (failed 1, cancelled 3, timed out 4).
pub async fn wait_for(
    client: &Client,
    ids: &[JobId],
    timeout: Option<Duration>,
    json: bool,
) -> anyhow::Result<i32> {
    let terminal = std::io::stderr().is_terminal();
    let bars = indicatif::MultiProgress::new();
    if !terminal {
        bars.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    let started = Instant::now();
    let waits = ids.iter().map(|id| {
        let bar = bars.add(new_bar(id));
        let many = ids.len() > 1;
        async move {
            let result = client
                .wait(id, timeout, |p| show(&bar, id, p, many, terminal))
                .await;
            bar.finish();
            result
        }
    });
    let all = futures_util::future::join_all(waits);
    tokio::pin!(all);
    let results = tokio::select! {
        results = &mut all => results,
        never = warn_while_unserved(client, ids, &bars) => match never {},
    };
    let mut code = exit::OK;
    let mut finished: Vec<JobStatus> = Vec::new();
    for (id, result) in ids.iter().zip(results) {
        match result {
            Ok(status) => {
                code = code.max(match status.record.state {
                    JobState::Succeeded => exit::OK,
                    JobState::Cancelled => exit::CANCELLED,
                    _ => exit::FAILED,
                });
                finished.push(status);
            }
            Err(QueueError::WaitTimedOut(_)) => {
                eprintln!(
                    "gave up waiting for {id} after {:?}; it goes on (see `wasmgear status {id}`)",
                    started.elapsed()
                );
                code = code.max(exit::TIMED_OUT);
            }
            Err(e) => return Err(e.into()),
        }
    }
    // Failed (1) outranks cancelled (3) and timed out (4): any failure is the news.
    if finished.iter().any(|s| s.record.state == JobState::Failed) {
        code = exit::FAILED;
    }
    if json {
        let values: Vec<serde_json::Value> = finished.iter().map(output::job).collect();
        print_json(&values)?;
        return Ok(code);
    }
    if let [status] = finished.as_slice()
        && ids.len() == 1
    {
        match status.record.state {
            JobState::Succeeded => {
                let mut stdout = std::io::stdout().lock();
                stdout.write_all(status.output.as_deref().unwrap_or_default())?;
                if stdout.is_terminal() {
                    writeln!(stdout)?;
                }
            }
            _ => super::status::print_failure(status),
        }
        return Ok(code);
    }
    for status in &finished {
        match status.record.state {
            JobState::Succeeded => println!(
                "{} {} ({} bytes of output)",
                status.id,
                paint_state(JobState::Succeeded),
                status.output.as_ref().map_or(0, Vec::len)
            ),
            _ => super::status::print_failure(status),
        }
    }
    Ok(code)
}

/// How often `wait` checks that some live worker serves the jobs it waits for.
const SERVICE_CHECK_EVERY: Duration = Duration::from_secs(2);

/// Says on stderr, whenever it becomes so, that no live worker serves the function of a job
/// being waited for (and what the workers report about its plugin), and when one does
/// again. Runs until dropped.
async fn warn_while_unserved(
    client: &Client,
    ids: &[JobId],
    bars: &indicatif::MultiProgress,
) -> std::convert::Infallible {
    let mut functions: Vec<_> = ids.iter().map(|id| id.function.clone()).collect();
    functions.sort();
    functions.dedup();
    let mut said: std::collections::HashMap<_, Option<String>> = Default::default();
    loop {
        for function in &functions {
            // A job that ended needs no worker; the wait itself notices.
            let Ok(service) = client.service(function).await else {
                continue;
            };
            let note = super::status::unserved_note(function, &service);
            let before = said.get(function).cloned().flatten();
            if note != before {
                let text = match &note {
                    Some(note) => format!("warning: {note}"),
                    None if before.is_some() => format!("a worker now serves {function}"),
                    None => String::new(),
                };
                if !text.is_empty() {
                    let _ = bars.suspend(|| writeln!(std::io::stderr(), "{text}"));
                }
                said.insert(function.clone(), note);
            }
        }
        tokio::time::sleep(SERVICE_CHECK_EVERY).await;
    }
}

fn new_bar(id: &JobId) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(0);
    if let Ok(style) =
        indicatif::ProgressStyle::with_template("{prefix} {bar:30} {pos}/{len} {elapsed} {msg}")
    {
        bar.set_style(style);
    }
    bar.set_prefix(id.to_string());
    bar
}

fn show(bar: &indicatif::ProgressBar, id: &JobId, p: &Progress, many: bool, terminal: bool) {
    let message = p.message.clone().unwrap_or_default();
    if terminal {
        bar.set_length(p.total);
        bar.set_position(p.done);
        bar.set_message(message);
    } else if many {
        eprintln!("{id} progress {}/{} {message}", p.done, p.total);
    } else {
        eprintln!("progress {}/{} {message}", p.done, p.total);
    }
}
