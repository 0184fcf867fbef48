//! OpenTelemetry for the `wasmgear` binary: when the standard `OTEL_*` variables ask for it,
//! wasmgear's `tracing` spans (the producers' `send`, the worker's `process` per attempt, the
//! HTTP API's requests) are exported over OTLP (HTTP/protobuf or gRPC), batched off the job
//! path, dropped and counted rather than waited for. Off by default, and then nothing here
//! runs: the binary installs no layer.
//!
//! - [`config`]: the variables read, and what they are refused for.
//! - [`Telemetry`]: the tracer provider, its `tracing` layer, its counts, its shutdown.

pub mod config;
mod processor;

use std::sync::Arc;
use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::Layer;
use tracing_subscriber::filter::{LevelFilter, Targets};

pub use config::{Protocol, TelemetryError};
pub use processor::SpanCounts;
use processor::{Flusher, QueueProcessor};

/// The crates whose spans and events are exported (at INFO and above): wasmgear's own,
/// the guests' log lines (`wasmgear::guest`) among them.
const EXPORTED_TARGETS: [&str; 6] = [
    "wasmgear",
    "wasmgear_worker",
    "wasmgear_client",
    "wasmgear_server",
    "wasmgear_runtime",
    "wasmgear_sources",
];

/// Span export, running.
pub struct Telemetry {
    provider: SdkTracerProvider,
    flusher: Flusher,
    counts: Arc<SpanCounts>,
    protocol: Protocol,
}

impl Telemetry {
    /// Starts exporting as the environment's `OTEL_*` variables say, on the current Tokio
    /// runtime; `None` when they do not ask for it. `service` names the process when
    /// `OTEL_SERVICE_NAME` (or `service.name` in `OTEL_RESOURCE_ATTRIBUTES`) does not.
    pub fn from_env(service: &str) -> Result<Option<Telemetry>, TelemetryError> {
        let Some(config) = config::read(|name| std::env::var(name).ok())? else {
            return Ok(None);
        };
        // The one crypto provider the tree builds (HTTPS and gRPC over TLS); one installed
        // already stays.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let exporter = match config.protocol {
            Protocol::Grpc => opentelemetry_otlp::SpanExporter::builder()
                .with_tonic()
                .with_protocol(opentelemetry_otlp::Protocol::Grpc)
                .build(),
            Protocol::HttpProtobuf => {
                let client = reqwest::Client::builder()
                    .timeout(config.batching.export_timeout)
                    .build()
                    .map_err(|e| TelemetryError::Exporter(e.to_string()))?;
                opentelemetry_otlp::SpanExporter::builder()
                    .with_http()
                    .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
                    .with_http_client(client)
                    .build()
            }
        }
        .map_err(|e| TelemetryError::Exporter(e.to_string()))?;
        let counts = Arc::new(SpanCounts::default());
        let (processor, starter) = QueueProcessor::new(exporter, config.batching, counts.clone());
        let flusher = processor.flusher();
        let provider = SdkTracerProvider::builder()
            .with_span_processor(processor)
            .with_resource(resource(service))
            .build();
        starter.start();
        let _ = EXPORTING.set(counts.clone());
        Ok(Some(Telemetry {
            provider,
            flusher,
            counts,
            protocol: config.protocol,
        }))
    }

    /// The `tracing` layer that turns wasmgear's spans into OpenTelemetry spans (and the
    /// events in them into span events).
    pub fn layer<S>(&self) -> impl Layer<S> + use<S>
    where
        S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    {
        let targets = EXPORTED_TARGETS.iter().fold(Targets::new(), |t, target| {
            t.with_target(*target, LevelFilter::INFO)
        });
        // Only what a span of a job needs: no source locations, thread names or busy/idle
        // times per span, and no OpenTelemetry context made current at each poll (wasmgear
        // reads a span's context from the span itself): each costs every job.
        tracing_opentelemetry::layer()
            .with_tracer(self.provider.tracer("wasmgear"))
            .with_location(false)
            .with_threads(false)
            .with_tracked_inactivity(false)
            .with_target(false)
            .with_context_activation(false)
            .with_filter(targets)
    }

    /// Spans exported, dropped and failed so far.
    pub fn counts(&self) -> Arc<SpanCounts> {
        self.counts.clone()
    }

    /// The transport spans go over.
    pub fn protocol(&self) -> Protocol {
        self.protocol
    }

    /// Sends what is queued (waiting up to `timeout`), then stops: for a command about to
    /// exit, so that its spans are not lost.
    pub async fn shutdown(self, timeout: Duration) {
        self.flusher.flush(timeout).await;
        let _ = self.provider.shutdown_with_timeout(timeout);
    }
}

/// The resource spans are sent with: the SDK's (`OTEL_SERVICE_NAME`,
/// `OTEL_RESOURCE_ATTRIBUTES`, the SDK's own), named `service` unless those name it.
fn resource(service: &str) -> Resource {
    let detected = Resource::builder().build();
    let named = detected
        .get(&opentelemetry::Key::new("service.name"))
        .is_some_and(|name| !name.as_str().starts_with("unknown_service"));
    if named {
        detected
    } else {
        Resource::builder()
            .with_service_name(service.to_string())
            .build()
    }
}

/// The counts of this process's span export, set once when it starts exporting.
static EXPORTING: std::sync::OnceLock<Arc<SpanCounts>> = std::sync::OnceLock::new();

/// Whether this process exports spans: the worker and the HTTP API ask before they give a
/// span the fields only an exported span needs (tracing off costs nothing more).
pub fn exporting() -> bool {
    EXPORTING.get().is_some()
}

/// What became of this process's spans so far, when it exports them (for its metrics).
pub fn span_counts() -> Option<Arc<SpanCounts>> {
    EXPORTING.get().cloned()
}
