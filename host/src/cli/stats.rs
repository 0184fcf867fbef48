//! `wasmgear stats`: a function's daily statistics (qless).

use super::RedisArgs;
use super::output::print_json;
use wasmgear_client::TimeStats;
use wasmgear_proto::FunctionName;

/// Options of `wasmgear stats`.
#[derive(Debug, clap::Args)]
pub struct StatsArgs {
    #[command(flatten)]
    redis: RedisArgs,

    /// The function.
    function: String,

    /// The day (UTC), YYYY-MM-DD [default: today]. 30 days are kept.
    #[arg(long)]
    date: Option<String>,

    /// Print JSON.
    #[arg(long)]
    json: bool,
}

pub async fn run(args: StatsArgs) -> anyhow::Result<i32> {
    let function = FunctionName::new(args.function.clone())?;
    let day = match &args.date {
        Some(date) => wasmgear_proto::units::day_of_date(date)?,
        None => wasmgear_proto::units::today(),
    };
    let client = args.redis.client().await?;
    client.check_function(&function).await?;
    let stats = client.stats(&function, day).await?;
    if args.json {
        print_json(&stats)?;
        return Ok(0);
    }
    println!("{} on {}", stats.function, stats.date);
    show("wait", &stats.wait);
    show("run", &stats.run);
    println!("failures  {} attempts", stats.failures);
    println!("retries   {}", stats.retries);
    println!("failed    {} jobs", stats.failed);
    Ok(0)
}

fn show(what: &str, times: &TimeStats) {
    println!(
        "{what:<8}  {} jobs, mean {}, std dev {}",
        times.count,
        ms(times.mean_ms),
        ms(times.std_dev_ms)
    );
    if !times.histogram.is_empty() {
        let buckets: Vec<String> = times
            .histogram
            .iter()
            .map(|(bucket, n)| format!("{bucket}:{n}"))
            .collect();
        println!("          histogram {}", buckets.join(" "));
    }
}

fn ms(value: f64) -> String {
    if value >= 1000.0 {
        format!("{:.2}s", value / 1000.0)
    } else {
        format!("{value:.1}ms")
    }
}
