//! `wasmgear workers`: list the live workers.

use super::RedisArgs;
use super::output::print_json;

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
            .map(|w| {
                let ad = match &w.ad {
                    Ok(ad) => serde_json::to_value(ad).unwrap_or_default(),
                    Err(text) => serde_json::from_str(text).unwrap_or_default(),
                };
                serde_json::json!({ "id": w.id, "expires_ms": w.expires_ms, "advertised": ad })
            })
            .collect();
        print_json(&list)?;
        return Ok(0);
    }
    if workers.is_empty() {
        println!("no live workers");
        return Ok(0);
    }
    for worker in workers {
        let id = &worker.id;
        match &worker.ad {
            Ok(ad) => {
                println!(
                    "{id}  host {}  pid {}  wasmgear {}",
                    ad.host, ad.pid, ad.version
                );
                println!("  running {} of {} jobs", ad.running.len(), ad.concurrency);
                if !ad.sources.is_empty() {
                    println!("  sources {}", ad.sources.join(", "));
                }
                for (function, version) in &ad.functions {
                    let from = if ad.deployed.contains(function) {
                        "deployed"
                    } else {
                        "directory"
                    };
                    match ad.batches.get(function) {
                        Some(max) => println!(
                            "  serves {function} (plugin {version}, {from}, batches of up to {max})"
                        ),
                        None => println!("  serves {function} (plugin {version}, {from})"),
                    }
                }
                for error in &ad.plugin_errors {
                    println!("  plugin error: {error}");
                }
            }
            Err(ad) => println!("{id}  (advertisement not readable: {ad})"),
        }
    }
    Ok(0)
}
