//! The span of one attempt of a job: `job` with its id and attempt for the worker's log, and,
//! when the process exports spans (`OTEL_*`, see `wasmgear-telemetry`), a `process FUNCTION`
//! span of kind consumer in the trace the job was enqueued in, with the attributes of
//! OpenTelemetry's messaging conventions and wasmgear's own. Its events: the queue wait, the
//! instance ready, the guest's log lines; its child: the run.

use opentelemetry::trace::TraceContextExt;
use tracing::field::Empty;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use wasmgear_client::propagation;
use wasmgear_proto::{Lease, TraceContext};

/// Whether spans are exported: only then do attempts get the fields, events and child spans
/// an exported span needs.
pub(crate) fn exporting() -> bool {
    wasmgear_telemetry::exporting()
}

/// An attempt's span, the trace context it passes on (to its outgoing HTTP requests and its
/// child jobs), and whether the span records (it is exported and sampled): only then is it
/// given attributes, events and a child, so that an attempt sampled out costs little more
/// than one with tracing off.
pub(crate) struct Attempt {
    pub(crate) span: tracing::Span,
    pub(crate) trace: Option<TraceContext>,
    pub(crate) recording: bool,
}

/// The span of `lease`'s attempt on worker `worker`.
pub(crate) fn attempt_span(lease: &Lease, worker: &str) -> Attempt {
    let info = &lease.info;
    if !exporting() {
        return Attempt {
            span: tracing::info_span!("job", job_id = %info.id, attempt = info.attempt),
            trace: info.trace.clone(),
            recording: false,
        };
    }
    let span = tracing::info_span!(
        "job",
        job_id = %info.id,
        attempt = info.attempt,
        otel.name = %format_args!("process {}", info.id.function),
        otel.kind = "consumer",
        otel.status_code = Empty,
    );
    if let Some(trace) = &info.trace {
        // (Fails only without the OpenTelemetry layer, which exporting means is there.)
        let _ = span.set_parent(propagation::context_for(trace));
    }
    // (Starts the OpenTelemetry span: the sampler decides here.)
    let context = span.context();
    let own = context.span().span_context().clone();
    let recording = own.is_sampled();
    let trace = propagation::of_span_context(&own).or_else(|| info.trace.clone());
    if recording {
        // (Set on the OpenTelemetry span only: the worker's log lines stay as they were.)
        let function = info.id.function.to_string();
        for (key, value) in [
            ("messaging.system", "wasmgear".to_string()),
            ("messaging.operation.type", "process".to_string()),
            ("messaging.operation.name", "process".to_string()),
            ("messaging.destination.name", function),
            ("messaging.message.id", info.id.to_string()),
            ("wasmgear.worker.id", worker.to_string()),
        ] {
            span.set_attribute(key, value);
        }
        span.set_attribute("wasmgear.job.attempt", i64::from(info.attempt));
        span.set_attribute("wasmgear.job.max_attempts", i64::from(info.max_attempts));
    }
    Attempt {
        span,
        trace,
        recording,
    }
}

/// The span the guest runs in, a child of the attempt's (none when that does not record).
pub(crate) fn run_span(recording: bool) -> tracing::Span {
    if !recording {
        return tracing::Span::none();
    }
    tracing::info_span!("run", otel.name = "run", otel.kind = "internal")
}

/// Notes on the attempt's span how the queue took its end: the state, and for a failure its
/// error class (the span's status then says error).
pub(crate) fn record_outcome(state: &str, error_class: Option<&str>) {
    if !exporting() {
        return;
    }
    let span = tracing::Span::current();
    span.set_attribute("wasmgear.job.outcome", state.to_string());
    if let Some(class) = error_class {
        span.set_attribute("error.type", class.to_string());
        span.record("otel.status_code", "ERROR");
    }
}

/// Notes the plugin version that runs the attempt on its span (when it records).
pub(crate) fn record_version(recording: bool, version: &str) {
    if recording {
        tracing::Span::current().set_attribute("wasmgear.plugin.version", version.to_string());
    }
}

/// Adds event `name` with one number to the current (attempt's) span, when it records:
/// straight to OpenTelemetry, not through the worker's log.
pub(crate) fn event(recording: bool, name: &'static str, key: &'static str, value: u64) {
    if !recording {
        return;
    }
    let value = i64::try_from(value).unwrap_or(i64::MAX);
    tracing::Span::current().add_event(name, vec![opentelemetry::KeyValue::new(key, value)]);
}
