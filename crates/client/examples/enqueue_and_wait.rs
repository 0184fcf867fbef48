//! Enqueues a job for the `echo` plugin and prints how it ended.

use std::time::Duration;
use wasmgear_client::{Client, EnqueueOptions, FunctionName};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let client = Client::connect(&std::env::var("WASMGEAR_REDIS_URL")?).await?;
    let echo = FunctionName::new("echo")?;
    let id = client
        .enqueue(&echo, b"hi", &EnqueueOptions::default())
        .await?;
    let ended = client
        .wait(&id, Some(Duration::from_secs(30)), |_| {})
        .await?;
    let output = ended.output.unwrap_or_default();
    println!(
        "{id} {:?} {}",
        ended.record.state,
        String::from_utf8_lossy(&output)
    );
    Ok(())
}
