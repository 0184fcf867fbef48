//! The `wasmgear` binary: parses the command line, sets up logging (and span export when the
//! `OTEL_*` variables ask for it), runs the command.

use std::time::Duration;

use clap::Parser;

/// The longest an exiting command waits for its last spans to be sent.
const SPANS_AT_EXIT: Duration = Duration::from_secs(5);

/// A command that prints ends quietly, as other command-line tools do, when the reader of
/// its output goes away (`wasmgear status ID | head -1`): Rust ignores SIGPIPE, so a write to
/// the closed pipe would fail and `println!` panic. Services keep ignoring it.
#[allow(unsafe_code)]
fn end_quietly_when_the_reader_goes() {
    #[cfg(unix)]
    // SAFETY: SIG_DFL is a valid disposition for SIGPIPE, and nothing in this process relies
    // on SIGPIPE being ignored but the services, which never get here.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

#[tokio::main]
async fn main() {
    let cli = wasmgear::cli::Cli::parse();
    if !cli.is_service() {
        end_quietly_when_the_reader_goes();
    }
    let telemetry = match wasmgear::cli::otel::install(cli.service_name()) {
        Ok(telemetry) => telemetry,
        Err(error) => {
            eprintln!("error: {error}");
            std::process::exit(wasmgear::cli::exit::USAGE);
        }
    };
    // The trace the command continues (TRACEPARENT): current while it runs, so that the jobs
    // it enqueues carry it (through the client's `send` span when spans are exported).
    let _continued = wasmgear::cli::otel::parent_from_env()
        .map(|parent| wasmgear_client::propagation::context_for(&parent).attach());
    let code = match cli.run().await {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error: {error:#}");
            wasmgear::cli::exit_code(&error)
        }
    };
    if let Some(telemetry) = telemetry {
        telemetry.shutdown(SPANS_AT_EXIT).await;
    }
    std::process::exit(code);
}
