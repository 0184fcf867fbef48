//! The `wasmgear` binary: parses the command line, sets up logging, runs the command.

use clap::Parser;
use tracing_subscriber::EnvFilter;

#[tokio::main]
async fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(console::colors_enabled_stderr())
        .init();
    let cli = wasmgear::cli::Cli::parse();
    let code = match cli.run().await {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error: {error:#}");
            wasmgear::cli::exit_code(&error)
        }
    };
    std::process::exit(code);
}
