//! `wasmgear schedule`: recurring jobs, fired by the workers.

use std::path::PathBuf;
use std::time::Duration;

use wasmgear_client::schedule::{Schedule, catch_up_text};
use wasmgear_client::{FunctionName, Priority};
use wasmgear_proto::schedule::{CatchUp, Recurrence, ScheduleDef};
use wasmgear_proto::units::{in_or_ago, utc_text};

use super::output::{print_json, print_table};
use super::{RedisArgs, parse_duration, usage};

/// Options of `wasmgear schedule`.
#[derive(Debug, clap::Args)]
pub struct ScheduleArgs {
    #[command(subcommand)]
    command: ScheduleCommand,
}

#[derive(Debug, clap::Subcommand)]
enum ScheduleCommand {
    /// Add a recurring job: a job of FUNCTION at every tick of a cron expression (in a time
    /// zone) or of a fixed interval. Workers fire it: exactly one job per tick, whatever the
    /// number of workers and their clocks (Redis' clock counts).
    Add(Box<AddArgs>),
    /// List the schedules: function, when they tick, their next tick, paused or not, and
    /// why a tick could not fire (it is tried again with a backoff).
    List(ListArgs),
    /// Remove a schedule (the jobs it enqueued stay).
    Rm(NameArgs),
    /// Pause a schedule: no tick fires until it is resumed.
    Pause(NameArgs),
    /// Resume a paused schedule from its next tick.
    Resume(NameArgs),
}

#[derive(Debug, clap::Args)]
#[command(group = clap::ArgGroup::new("when").args(["cron", "every"]).required(true))]
struct AddArgs {
    #[command(flatten)]
    redis: RedisArgs,

    /// The schedule's name (letters, digits, '_', '-', '.').
    name: String,

    /// The function its jobs are of.
    #[arg(long)]
    function: FunctionName,

    /// A cron expression: 5 fields (MIN HOUR DAY MONTH WEEKDAY, `*/5 * * * *`), or 6 with
    /// seconds first, or `@hourly`, `@daily`...
    #[arg(long)]
    cron: Option<String>,

    /// The time zone the cron expression is read in (an IANA name).
    #[arg(long, default_value = "UTC", requires = "cron")]
    tz: String,

    /// A fixed interval instead (`30s`, `5m`; at least 1s): ticks at its multiples since
    /// the Unix epoch.
    #[arg(long, value_parser = parse_duration)]
    every: Option<Duration>,

    /// The jobs' input as text.
    #[arg(long, conflicts_with = "input_file")]
    input: Option<String>,

    /// Read the jobs' input from this file.
    #[arg(long, value_name = "FILE")]
    input_file: Option<PathBuf>,

    /// The jobs' priority: low, normal, high, or -1000..1000.
    #[arg(long, default_value = "normal")]
    priority: String,

    /// The jobs' attempts in all [default: the plugin's].
    #[arg(long = "attempts", alias = "max-attempts")]
    max_attempts: Option<u32>,

    /// The jobs' timeout [default: the plugin's].
    #[arg(long, value_parser = parse_duration)]
    timeout: Option<Duration>,

    /// The jobs' uniq key: no tick's job starts while an earlier one holding it is
    /// unfinished (that job is returned instead).
    #[arg(long)]
    uniq: Option<String>,

    /// A tag of the jobs (repeatable).
    #[arg(long = "tag")]
    tags: Vec<String>,

    /// The jobs' group (a tenant, customer or document key; see `enqueue --group`).
    #[arg(long)]
    group: Option<String>,

    /// Ticks missed while no worker ran: `one` fires once on return (for the latest), `none`
    /// skips them.
    #[arg(long, default_value = "one")]
    catch_up: CatchUp,

    /// Add it paused.
    #[arg(long)]
    paused: bool,

    /// Replace a schedule of the same name.
    #[arg(long)]
    replace: bool,

    /// Print the schedule as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct ListArgs {
    #[command(flatten)]
    redis: RedisArgs,

    /// Print the list as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct NameArgs {
    #[command(flatten)]
    redis: RedisArgs,

    /// The schedule.
    name: String,
}

pub async fn run(args: ScheduleArgs) -> anyhow::Result<i32> {
    match args.command {
        ScheduleCommand::Add(args) => add(*args).await,
        ScheduleCommand::List(args) => list(args).await,
        ScheduleCommand::Rm(args) => {
            let client = args.redis.client().await?;
            client.schedule_remove(&args.name).await?;
            super::access::record(&client, "schedule rm", &args.name, "ok").await;
            println!("schedule {} removed", args.name);
            Ok(0)
        }
        ScheduleCommand::Pause(args) => {
            let client = args.redis.client().await?;
            client.schedule_pause(&args.name, true).await?;
            super::access::record(&client, "schedule pause", &args.name, "ok").await;
            println!("schedule {} paused", args.name);
            Ok(0)
        }
        ScheduleCommand::Resume(args) => {
            let client = args.redis.client().await?;
            client.schedule_pause(&args.name, false).await?;
            super::access::record(&client, "schedule resume", &args.name, "ok").await;
            let next = client
                .schedules()
                .await?
                .into_iter()
                .find(|s| s.def.name == args.name)
                .and_then(|s| s.next_ms);
            match next {
                Some(next) => println!(
                    "schedule {} resumed: next tick {} ({})",
                    args.name,
                    utc_text(next),
                    in_or_ago(next)
                ),
                None => println!("schedule {} resumed", args.name),
            }
            Ok(0)
        }
    }
}

async fn add(args: AddArgs) -> anyhow::Result<i32> {
    let recurrence = match (&args.cron, args.every) {
        (Some(cron), _) => Recurrence::cron(cron, &args.tz),
        (None, Some(every)) => Recurrence::every(every),
        (None, None) => return Err(usage("give --cron EXPRESSION or --every INTERVAL")),
    }
    .map_err(|e| usage(e.to_string()))?;
    let input = match (&args.input, &args.input_file) {
        (Some(text), _) => text.clone().into_bytes(),
        (None, Some(path)) => std::fs::read(path)
            .map_err(|e| usage(format!("cannot read the input file {path:?}: {e}")))?,
        (None, None) => Vec::new(),
    };
    let def = ScheduleDef {
        name: args.name.clone(),
        function: args.function.to_string(),
        recurrence,
        catch_up: args.catch_up,
        paused: args.paused,
        priority: args.priority.parse::<Priority>()?.value(),
        max_attempts: args.max_attempts,
        timeout_ms: args.timeout.map(|t| t.as_millis() as u64),
        uniq: args.uniq.clone(),
        tags: args.tags.clone(),
        group: args.group.clone(),
        created_ms: 0,
        // (The context the command runs in: schedule_add notes it.)
        trace: None,
        tracestate: None,
    };
    let client = args.redis.client().await?;
    let schedule = client.schedule_add(def, &input, args.replace).await?;
    let target = format!("{} for {}", schedule.def.name, schedule.def.function);
    super::access::record(&client, "schedule add", &target, "ok").await;
    if args.json {
        print_json(&json_of(&schedule))?;
        return Ok(0);
    }
    match schedule.next_ms {
        Some(next) => println!(
            "schedule {} added: {} of {}, next tick {} ({})",
            schedule.def.name,
            when(&schedule.def.recurrence),
            schedule.def.function,
            utc_text(next),
            in_or_ago(next)
        ),
        None => println!(
            "schedule {} added, paused: {} of {}",
            schedule.def.name,
            when(&schedule.def.recurrence),
            schedule.def.function
        ),
    }
    Ok(0)
}

async fn list(args: ListArgs) -> anyhow::Result<i32> {
    let schedules = args.redis.client().await?.schedules().await?;
    if args.json {
        print_json(&schedules.iter().map(json_of).collect::<Vec<_>>())?;
        return Ok(0);
    }
    if schedules.is_empty() {
        println!("no schedules: add one with `wasmgear schedule add`");
        return Ok(0);
    }
    let rows = schedules
        .iter()
        .map(|s| {
            vec![
                s.def.name.clone(),
                s.def.function.clone(),
                when(&s.def.recurrence),
                match (s.next_ms, &s.error) {
                    (Some(next), Some(_)) => {
                        format!("retry {} ({})", utc_text(next), in_or_ago(next))
                    }
                    (Some(next), None) => format!("{} ({})", utc_text(next), in_or_ago(next)),
                    (None, _) => "paused".into(),
                },
                catch_up_text(s.def.catch_up).into(),
            ]
        })
        .collect();
    print_table(&["NAME", "FUNCTION", "WHEN", "NEXT TICK", "CATCH-UP"], rows);
    for s in &schedules {
        if let Some(failure) = &s.error {
            println!(
                "schedule {} cannot fire its tick of {} ({} tries since {}): {}",
                s.def.name,
                utc_text(failure.tick_ms),
                failure.failures,
                utc_text(failure.since_ms),
                failure.error
            );
        }
    }
    Ok(0)
}

/// How a recurrence reads: `cron "0 9 * * *" Europe/Paris`, `every 30s`.
fn when(recurrence: &Recurrence) -> String {
    match recurrence {
        Recurrence::Cron { expression, tz } => format!("cron {expression:?} {tz}"),
        Recurrence::Every { every_ms } => format!(
            "every {}",
            wasmgear_proto::units::human(Duration::from_millis(*every_ms))
        ),
    }
}

fn json_of(schedule: &Schedule) -> serde_json::Value {
    let mut value = serde_json::to_value(&schedule.def).unwrap_or_default();
    value["next_ms"] = serde_json::json!(schedule.next_ms);
    value["input"] = serde_json::json!(super::output::output_text(&schedule.input));
    value["error"] = serde_json::to_value(&schedule.error).unwrap_or_default();
    value
}
