//! `wasmgear config`, `pause`, `resume`: a function's settings, shared by all workers.

use std::time::Duration;

use super::output::print_json;
use super::{RedisArgs, parse_duration};
use wasmgear_client::{FunctionConfig, GroupSetting, Setting};
use wasmgear_proto::FunctionName;

/// Options of `wasmgear config`.
#[derive(Debug, clap::Args)]
pub struct ConfigArgs {
    #[command(flatten)]
    redis: RedisArgs,

    /// The function.
    function: String,

    /// The most of its jobs running at once over all workers, or `none`.
    #[arg(long)]
    concurrency: Option<String>,

    /// The most jobs started per interval over all workers, as N/INTERVAL (100/1s, 5/1m),
    /// or `none`.
    #[arg(long)]
    rate: Option<String>,

    /// The most finished jobs kept (oldest forgotten first), or `default` (which
    /// `wasmgear config FUNCTION` shows).
    #[arg(long, conflicts_with = "group")]
    keep: Option<String>,

    /// Each group's most jobs running at once over all workers (1: every group runs its jobs
    /// one at a time, in order), or `none`; a group's own (--group) overrides it.
    #[arg(long, conflicts_with = "group")]
    group_concurrency: Option<String>,

    /// Each group's most jobs started per interval, as N/INTERVAL, or `none`; a group's own
    /// (--group) overrides it.
    #[arg(long, conflicts_with = "group")]
    group_rate: Option<String>,

    /// How many replicas must confirm each enqueue of the function's jobs and each
    /// completion before the call reports success (producers and workers wait for them:
    /// README, "High availability"), or `none`.
    #[arg(long, conflicts_with = "group", value_name = "N")]
    min_replicas: Option<String>,

    /// Store only encrypted input for this function: an enqueue of a plain input is refused
    /// (a producer with the key file seals it, bound to the job); its worker seals the
    /// output, error, log and checkpoint. See --encryption-key-file.
    #[arg(long, conflicts_with_all = ["group", "no_encrypt"])]
    encrypt: bool,

    /// Take plain input for this function again (the jobs sealed already stay sealed).
    #[arg(long, conflicts_with = "group")]
    no_encrypt: bool,

    /// Show or change one group's own settings instead: --concurrency and --rate then set
    /// the group's (`none`: the function's --group-concurrency / --group-rate again).
    #[arg(long, value_name = "KEY")]
    group: Option<String>,

    /// Print the settings as JSON.
    #[arg(long)]
    json: bool,

    /// Configure a function that nothing was enqueued for yet (otherwise a name that no
    /// one knows is refused, as a likely typo).
    #[arg(long)]
    new: bool,
}

pub async fn run(args: ConfigArgs) -> anyhow::Result<i32> {
    let function = FunctionName::new(args.function.clone())?;
    if let Some(group) = &args.group {
        let mut settings = Vec::new();
        if let Some(cap) = &args.concurrency {
            let cap = optional_number(cap, "none", "--concurrency")?;
            settings.push(GroupSetting::Concurrency(cap));
        }
        if let Some(rate) = &args.rate {
            settings.push(GroupSetting::RateLimit(parse_rate("--rate", rate)?));
        }
        let client = args.redis.client().await?;
        if !args.new {
            client.check_function(&function).await?;
        }
        return super::groups::configure(&client, &function, group, &settings, args.json).await;
    }
    let mut settings = Vec::new();
    if let Some(cap) = &args.concurrency {
        settings.push(Setting::Concurrency(optional_number(
            cap,
            "none",
            "--concurrency",
        )?));
    }
    if let Some(rate) = &args.rate {
        settings.push(Setting::RateLimit(parse_rate("--rate", rate)?));
    }
    if let Some(cap) = &args.group_concurrency {
        let cap = optional_number(cap, "none", "--group-concurrency")?;
        settings.push(Setting::GroupConcurrency(cap));
    }
    if let Some(rate) = &args.group_rate {
        settings.push(Setting::GroupRateLimit(parse_rate("--group-rate", rate)?));
    }
    if let Some(keep) = &args.keep {
        settings.push(Setting::KeepFinished(optional_number(
            keep, "default", "--keep",
        )?));
    }
    if let Some(count) = &args.min_replicas {
        let count = optional_number(count, "none", "--min-replicas")?;
        settings.push(Setting::MinReplicas(count));
    }
    if args.encrypt || args.no_encrypt {
        settings.push(Setting::Encrypt(args.encrypt));
    }
    let client = args.redis.client().await?;
    if !args.new {
        client.check_function(&function).await?;
    }
    let config = match settings.is_empty() {
        true => client.config(&function).await?,
        false => {
            let config = client.configure(&function, &settings).await?;
            super::access::record(&client, "config", &format!("{function} {settings:?}"), "ok")
                .await;
            config
        }
    };
    if args.json {
        print_json(&config)?;
    } else {
        show(&function, &config);
    }
    Ok(0)
}

fn show(function: &FunctionName, config: &FunctionConfig) {
    println!("function     {function}");
    println!("paused       {}", if config.paused { "yes" } else { "no" });
    match config.concurrency {
        Some(cap) => println!("concurrency  {cap} at once over all workers"),
        None => println!("concurrency  no cap"),
    }
    match config.rate_limit {
        Some((n, interval)) => println!("rate         {n} per {interval:?}"),
        None => println!("rate         no limit"),
    }
    match config.group_concurrency {
        Some(1) => println!("groups       1 job of each group at once (each group a sequence)"),
        Some(cap) => println!("groups       {cap} jobs of each group at once"),
        None => println!("groups       no cap per group"),
    }
    if let Some((n, interval)) = config.group_rate_limit {
        println!("group rate   {n} per {interval:?} per group");
    }
    match config.min_replicas {
        Some(n) => println!("replicas     {n} must confirm each enqueue and completion"),
        None => println!("replicas     none asked (a write is done once the primary has it)"),
    }
    if config.encrypt {
        println!("encrypt      only encrypted input is taken (config --no-encrypt to undo)");
    }
    match config.keep_finished {
        Some(keep) => println!("keep         {keep} finished jobs"),
        None => println!(
            "keep         {} finished jobs (default)",
            wasmgear_proto::limits::DEFAULT_KEEP_FINISHED
        ),
    }
}

fn optional_number(text: &str, unset: &str, flag: &str) -> anyhow::Result<Option<u64>> {
    if text == unset {
        return Ok(None);
    }
    match text.parse::<u64>() {
        Ok(n) if n > 0 => Ok(Some(n)),
        _ => Err(super::usage(format!(
            "{flag} {text:?}: expected a whole number of at least 1, or {unset}"
        ))),
    }
}

/// Parses `N/INTERVAL` (`100/1s`), or `none`, given to `flag`.
pub(super) fn parse_rate(flag: &str, text: &str) -> anyhow::Result<Option<(u64, Duration)>> {
    if text == "none" {
        return Ok(None);
    }
    let bad = || {
        super::usage(format!(
            "{flag} {text:?}: expected N/INTERVAL such as 100/1s or 5/1m, or none"
        ))
    };
    let (n, interval) = text.split_once('/').ok_or_else(bad)?;
    let n: u64 = n.trim().parse().map_err(|_| bad())?;
    let interval = parse_duration(interval).map_err(|_| bad())?;
    if n == 0 || interval.is_zero() {
        return Err(bad());
    }
    Ok(Some((n, interval)))
}

/// Options of `wasmgear pause` and `wasmgear resume`.
#[derive(Debug, clap::Args)]
pub struct PauseArgs {
    #[command(flatten)]
    redis: RedisArgs,

    /// The function.
    function: String,

    /// Print the settings afterwards as JSON (as `config --json`).
    #[arg(long)]
    json: bool,

    /// Pause or resume only this group of the function (its other groups go on).
    #[arg(long, value_name = "KEY")]
    group: Option<String>,

    /// Pause or resume a function that nothing was enqueued for yet (otherwise a name that
    /// no one knows is refused, as a likely typo).
    #[arg(long)]
    new: bool,
}

/// Pauses (`true`) or resumes leasing of a function's jobs.
pub async fn pause(args: PauseArgs, paused: bool) -> anyhow::Result<i32> {
    let function = FunctionName::new(args.function.clone())?;
    let client = args.redis.client().await?;
    if !args.new {
        client.check_function(&function).await?;
    }
    if let Some(group) = &args.group {
        let settings = [GroupSetting::Paused(paused)];
        if args.json {
            return super::groups::configure(&client, &function, group, &settings, true).await;
        }
        client.configure_group(&function, group, &settings).await?;
        let action = if paused {
            "pause --group"
        } else {
            "resume --group"
        };
        super::access::record(&client, action, &format!("{function} group {group}"), "ok").await;
        match paused {
            true => println!(
                "group {group} of {function} paused: workers start none of its jobs; its other groups go on"
            ),
            false => println!("group {group} of {function} resumed"),
        }
        return Ok(0);
    }
    let config = client
        .configure(&function, &[Setting::Paused(paused)])
        .await?;
    let action = if paused { "pause" } else { "resume" };
    super::access::record(&client, action, function.as_str(), "ok").await;
    if args.json {
        print_json(&config)?;
        return Ok(0);
    }
    match paused {
        true => println!("{function} paused: workers start none of its jobs; enqueueing goes on"),
        false => println!("{function} resumed"),
    }
    Ok(0)
}
