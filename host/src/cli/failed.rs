//! `wasmgear failed`: failure groups, and the failed jobs of one group.

use super::RedisArgs;
use super::output::{print_json, print_table};
use wasmgear_proto::FunctionName;
use wasmgear_proto::units::in_or_ago;

/// Options of `wasmgear failed`.
#[derive(Debug, clap::Args)]
pub struct FailedArgs {
    #[command(flatten)]
    redis: RedisArgs,

    /// Only this function's failures.
    function: Option<String>,

    /// List the failed jobs of this group (the error class they failed with) with their
    /// errors; needs FUNCTION.
    #[arg(long, requires = "function")]
    group: Option<String>,

    /// With --group: skip this many jobs (oldest first).
    #[arg(long, default_value_t = 0)]
    offset: usize,

    /// With --group: list at most this many jobs.
    #[arg(long, default_value_t = 25)]
    limit: usize,

    /// Print JSON.
    #[arg(long)]
    json: bool,
}

pub async fn run(args: FailedArgs) -> anyhow::Result<i32> {
    let function = args.function.clone().map(FunctionName::new).transpose()?;
    let client = args.redis.client().await?;
    if let Some(function) = &function {
        client.check_function(function).await?;
    }
    let (Some(function), Some(group)) = (&function, &args.group) else {
        let groups = client.failure_groups(function.as_ref()).await?;
        if args.json {
            print_json(&groups)?;
        } else if groups.is_empty() {
            println!("no failed jobs");
        } else {
            let rows = groups
                .into_iter()
                .map(|g| vec![g.function, g.group, g.count.to_string()])
                .collect();
            print_table(&["FUNCTION", "GROUP", "JOBS"], rows);
        }
        return Ok(0);
    };
    let (total, jobs) = client
        .failed_jobs(function, group, args.offset, args.limit)
        .await?;
    if args.json {
        print_json(&serde_json::json!({ "total": total, "jobs": jobs }))?;
        return Ok(0);
    }
    println!("{total} failed jobs of {function} in group {group}");
    let rows = jobs
        .iter()
        .map(|job| {
            let error = job.record.error.as_ref().map_or("", |e| e.message.as_str());
            vec![
                job.id.to_string(),
                format!("{}/{}", job.record.attempt, job.record.max_attempts),
                in_or_ago(job.record.finished_ms.unwrap_or(job.record.created_ms)),
                error.lines().next().unwrap_or("").to_string(),
            ]
        })
        .collect();
    print_table(&["JOB", "ATTEMPTS", "FAILED", "ERROR"], rows);
    Ok(0)
}
