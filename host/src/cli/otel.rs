//! The process's logging and tracing: the log on stderr (`RUST_LOG`, default info) and, when
//! the `OTEL_*` variables ask for it, spans exported over OTLP (`wasmgear-telemetry`); and the
//! trace a command continues: `TRACEPARENT` / `TRACESTATE` in its environment, as other
//! command-line tools take them, so that jobs it enqueues join the caller's trace.

use tracing_subscriber::EnvFilter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use wasmgear_client::TraceContext;
use wasmgear_telemetry::{Telemetry, TelemetryError};

/// Installs the log, and the span export when asked for (its handle returned, to be shut down
/// before the process exits). `service` names the process unless `OTEL_SERVICE_NAME` does.
pub fn install(service: &str) -> Result<Option<Telemetry>, TelemetryError> {
    let filter = || EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let ansi = console::colors_enabled_stderr();
    let telemetry = Telemetry::from_env(service)?;
    match &telemetry {
        None => tracing_subscriber::fmt()
            .with_env_filter(filter())
            .with_writer(std::io::stderr)
            .with_ansi(ansi)
            .init(),
        Some(telemetry) => {
            use tracing_subscriber::Layer;
            let log = tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_ansi(ansi)
                .with_filter(filter());
            tracing_subscriber::registry()
                .with(log)
                .with(telemetry.layer())
                .init();
        }
    }
    Ok(telemetry)
}

/// The trace context `TRACEPARENT` (and `TRACESTATE`) name, if they do; a value that is not a
/// W3C traceparent is ignored with a warning (the command still runs: an inherited variable
/// must not stop it).
pub fn parent_from_env() -> Option<TraceContext> {
    let parent = std::env::var("TRACEPARENT").ok()?;
    let state = std::env::var("TRACESTATE").ok();
    match TraceContext::new(&parent, state.as_deref()) {
        Ok(context) => Some(context),
        Err(error) => {
            tracing::warn!("TRACEPARENT ignored: {error}");
            None
        }
    }
}
