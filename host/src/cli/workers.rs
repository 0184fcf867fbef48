//! `wasmgear workers`: list the live workers.

use super::RedisArgs;
use crate::worker::WorkerAd;

/// Options of `wasmgear workers`.
#[derive(Debug, clap::Args)]
pub struct WorkersArgs {
    #[command(flatten)]
    redis: RedisArgs,

    /// Print the list as JSON.
    #[arg(long)]
    json: bool,
}

pub async fn run(args: WorkersArgs) -> anyhow::Result<i32> {
    let client = args.redis.client().await?;
    let workers = client.workers().await?;
    if args.json {
        let list: Vec<serde_json::Value> = workers
            .iter()
            .map(|(id, ad, expires_ms)| {
                let ad: serde_json::Value = serde_json::from_str(ad).unwrap_or_default();
                serde_json::json!({ "id": id, "expires_ms": expires_ms, "advertised": ad })
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&list)?);
        return Ok(0);
    }
    if workers.is_empty() {
        println!("no live workers");
        return Ok(0);
    }
    for (id, ad, _) in workers {
        match serde_json::from_str::<WorkerAd>(&ad) {
            Ok(ad) => {
                println!(
                    "{id}  host {}  pid {}  wasmgear {}",
                    ad.host, ad.pid, ad.version
                );
                println!("  running {} of {} jobs", ad.running.len(), ad.concurrency);
                for (function, version) in &ad.functions {
                    println!("  serves {function} (plugin {version})");
                }
                for error in &ad.plugin_errors {
                    println!("  plugin error: {error}");
                }
            }
            Err(_) => println!("{id}  (advertisement not readable: {ad})"),
        }
    }
    Ok(0)
}
