//! `wasmgear events`: follow the event stream live.

use futures_util::StreamExt;

use super::RedisArgs;
use super::output::{paint_event, print_json_line};
use wasmgear_proto::FunctionName;

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
    let events = client.events(function.as_ref()).await?;
    eprintln!(
        "following the events of {} (Ctrl-C to stop)",
        function
            .as_ref()
            .map_or("every function".to_string(), |f| f.to_string())
    );
    let mut events = std::pin::pin!(events);
    while let Some(published) = events.next().await {
        if args.json {
            print_json_line(&published.json);
        } else {
            println!("{}", paint_event(&published));
        }
    }
    anyhow::bail!("the connection to Redis closed")
}
