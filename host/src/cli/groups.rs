//! `wasmgear groups`: a function's groups (tenants, customers, documents), the deepest
//! first, with their limits; and a group's own settings (`config --group`, `pause --group`).

use super::RedisArgs;
use super::output::print_json;
use wasmgear_client::{Client, FunctionConfig, GroupConfig, GroupSetting};
use wasmgear_proto::FunctionName;

/// Options of `wasmgear groups`.
#[derive(Debug, clap::Args)]
pub struct GroupsArgs {
    #[command(flatten)]
    redis: RedisArgs,

    /// The function.
    function: String,

    /// List at most this many groups, the deepest (most ready jobs) first.
    #[arg(long, default_value_t = 20)]
    limit: usize,

    /// Show this group only.
    #[arg(long, value_name = "KEY")]
    group: Option<String>,

    /// Print JSON.
    #[arg(long)]
    json: bool,
}

pub async fn run(args: GroupsArgs) -> anyhow::Result<i32> {
    let function = FunctionName::new(args.function.clone())?;
    let client = args.redis.client().await?;
    client.check_function(&function).await?;
    let overview = client
        .groups(&function, args.limit, args.group.as_deref())
        .await?;
    if args.json {
        print_json(&overview)?;
        return Ok(0);
    }
    let defaults = client.config(&function).await?;
    println!(
        "{function}: {} group{}{}, {} ready jobs without a group",
        overview.groups,
        if overview.groups == 1 { "" } else { "s" },
        if overview.truncated {
            " (at least: too many to count)"
        } else {
            ""
        },
        overview.ungrouped_ready
    );
    if overview.listed.is_empty() {
        return Ok(0);
    }
    println!(
        "{:<24} {:>8} {:>8} {:>12} {:>16}  STATE",
        "GROUP", "READY", "RUNNING", "CONCURRENCY", "RATE"
    );
    let mut defaulted = false;
    for group in &overview.listed {
        let (concurrency, rate) = limits(&group.config, &defaults);
        defaulted |= concurrency.ends_with('*') || rate.ends_with('*');
        let state = match (group.config.paused, group.rate_limited_until_ms) {
            (true, _) => "paused",
            (false, Some(_)) => "rate-limited",
            (false, None) => "",
        };
        println!(
            "{:<24} {:>8} {:>8} {:>12} {:>16}  {state}",
            group.group, group.ready, group.running, concurrency, rate
        );
    }
    if defaulted {
        println!(
            "(* the function's default for every group: config --group-concurrency / --group-rate)"
        );
    }
    Ok(0)
}

/// A group's concurrency and rate as they apply (its own, or the function's default,
/// marked `*`).
fn limits(own: &GroupConfig, defaults: &FunctionConfig) -> (String, String) {
    let concurrency = match (own.concurrency, defaults.group_concurrency) {
        (Some(n), _) => n.to_string(),
        (None, Some(n)) => format!("{n}*"),
        (None, None) => "-".into(),
    };
    let rate = |(n, interval): (u64, std::time::Duration)| format!("{n}/{interval:?}");
    let rate = match (own.rate_limit, defaults.group_rate_limit) {
        (Some(r), _) => rate(r),
        (None, Some(r)) => format!("{}*", rate(r)),
        (None, None) => "-".into(),
    };
    (concurrency, rate)
}

/// Applies `settings` to `group` of `function` (none: shows it), printing its own settings.
pub(crate) async fn configure(
    client: &Client,
    function: &FunctionName,
    group: &str,
    settings: &[GroupSetting],
    json: bool,
) -> anyhow::Result<i32> {
    let own = match settings.is_empty() {
        true => client
            .groups(function, 1, Some(group))
            .await?
            .listed
            .into_iter()
            .next()
            .map(|info| info.config)
            .unwrap_or_default(),
        false => {
            let own = client.configure_group(function, group, settings).await?;
            let target = format!("{function} group {group} {settings:?}");
            super::access::record(client, "config --group", &target, "ok").await;
            own
        }
    };
    if json {
        print_json(&own)?;
        return Ok(0);
    }
    let defaults = client.config(function).await?;
    let (concurrency, rate) = limits(&own, &defaults);
    println!("function     {function}");
    println!("group        {group}");
    println!("paused       {}", if own.paused { "yes" } else { "no" });
    println!("concurrency  {concurrency}");
    println!("rate         {rate}");
    if concurrency.ends_with('*') || rate.ends_with('*') {
        println!(
            "(* the function's default for every group: config --group-concurrency / --group-rate)"
        );
    }
    Ok(0)
}
