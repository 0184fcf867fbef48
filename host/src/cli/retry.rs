//! `wasmgear retry`: run a failed job, or a whole failure group, again.

use super::RedisArgs;
use wasmgear_proto::{FunctionName, JobId};

/// Options of `wasmgear retry`.
#[derive(Debug, clap::Args)]
pub struct RetryArgs {
    #[command(flatten)]
    redis: RedisArgs,

    /// A failed or cancelled job's id (echo:42), or with --group a function.
    target: String,

    /// Retry the failed jobs of this group (see `wasmgear failed FUNCTION`).
    #[arg(long)]
    group: Option<String>,

    /// With --group: retry at most this many (oldest first).
    #[arg(long, default_value_t = usize::MAX, hide_default_value = true)]
    limit: usize,

    /// Drop each job's checkpoint, so that it starts from the beginning instead of resuming
    /// where its last attempt saved one.
    #[arg(long)]
    fresh: bool,

    /// Print JSON: {"requeued": [ids]}.
    #[arg(long)]
    json: bool,
}

pub async fn run(args: RetryArgs) -> anyhow::Result<i32> {
    let client = args.redis.client().await?;
    let options = wasmgear_client::RetryOptions { fresh: args.fresh };
    let Some(group) = &args.group else {
        let id: JobId = args.target.parse()?;
        let requeued = client.retry_with(&id, options).await?;
        let outcome = if requeued {
            "ok"
        } else {
            "nothing changed: not failed or cancelled"
        };
        super::access::record(
            &client,
            "retry",
            &format!("{id}{}", fresh_flag(args.fresh)),
            outcome,
        )
        .await;
        if args.json {
            let ids: Vec<String> = requeued.then(|| id.to_string()).into_iter().collect();
            super::output::print_json(&serde_json::json!({ "requeued": ids }))?;
            return Ok(if requeued { 0 } else { super::exit::FAILED });
        }
        if requeued {
            println!("{id} queued again");
            return Ok(0);
        }
        let state = client.status(&id).await?.record.state;
        eprintln!("{id} is {state}, not failed or cancelled: nothing to retry");
        return Ok(1);
    };
    let function = FunctionName::new(args.target.clone())?;
    client.check_function(&function).await?;
    let ids = client
        .retry_group_with(&function, group, args.limit, options)
        .await?;
    super::access::record(
        &client,
        "retry --group",
        &format!("{function} group {group}{}", fresh_flag(args.fresh)),
        &format!("ok: {} jobs queued again", ids.len()),
    )
    .await;
    if args.json {
        let ids: Vec<String> = ids.iter().map(ToString::to_string).collect();
        super::output::print_json(&serde_json::json!({ "requeued": ids }))?;
        return Ok(0);
    }
    println!(
        "{} jobs of {function} in group {group} queued again",
        ids.len()
    );
    Ok(0)
}

fn fresh_flag(fresh: bool) -> &'static str {
    if fresh { " --fresh" } else { "" }
}
