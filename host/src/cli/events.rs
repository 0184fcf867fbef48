//! `wasmgear events`: follow the event stream live.

use futures_util::StreamExt;

use super::{RedisArgs, paint_event};
use wasmgear_proto::FunctionName;
use wasmgear_proto::keys::FunctionKeys;

/// Options of `wasmgear events`.
#[derive(Debug, clap::Args)]
pub struct EventsArgs {
    #[command(flatten)]
    redis: RedisArgs,

    /// Only this function's events [default: every function's].
    function: Option<String>,

    /// Print each event as the JSON line the queue published.
    #[arg(long)]
    json: bool,
}

pub async fn run(args: EventsArgs) -> anyhow::Result<i32> {
    let function = args.function.clone().map(FunctionName::new).transpose()?;
    let client = args.redis.client().await?;
    if let Some(function) = &function {
        client.check_function(function).await?;
    }
    let mut pubsub = client.pubsub().await?;
    match &function {
        Some(function) => {
            pubsub
                .subscribe(FunctionKeys::new(function).events())
                .await?
        }
        None => {
            pubsub
                .psubscribe(FunctionKeys::all_events_pattern())
                .await?
        }
    }
    eprintln!(
        "following the events of {} (Ctrl-C to stop)",
        function
            .as_ref()
            .map_or("every function".to_string(), |f| f.to_string())
    );
    let mut stream = pubsub.on_message();
    while let Some(message) = stream.next().await {
        let payload = String::from_utf8_lossy(message.get_payload_bytes()).into_owned();
        if args.json {
            println!("{payload}");
            continue;
        }
        match serde_json::from_str::<serde_json::Value>(&payload) {
            Ok(event) => println!("{}", paint_event(&event)),
            Err(_) => println!("{payload}"),
        }
    }
    anyhow::bail!("the connection to Redis closed")
}
