//! The trace context a producer stores with its jobs: a `send` span per write of jobs
//! (kind producer, as OpenTelemetry's messaging conventions name it) when the program exports
//! spans through `tracing-opentelemetry`, and the context the jobs carry: that span's, else
//! the OpenTelemetry context current where the call was made (a `TRACEPARENT` the program was
//! given, say), else none. Without a tracing subscriber that wants the span, it costs a
//! disabled span and a look at the current context.

use opentelemetry::trace::{SpanContext, TraceContextExt};
use tracing_opentelemetry::OpenTelemetrySpanExt;
use wasmgear_proto::{FunctionName, TraceContext};

/// The producer span of a write of `jobs` jobs of `function`.
pub(crate) fn producer_span(function: &FunctionName, jobs: usize) -> tracing::Span {
    tracing::info_span!(
        target: "wasmgear::produce",
        "send",
        otel.name = %format_args!("send {function}"),
        otel.kind = "producer",
        messaging.system = "wasmgear",
        messaging.operation.type = "send",
        messaging.operation.name = "send",
        messaging.destination.name = %function,
        messaging.batch.message_count = jobs,
    )
}

/// The span of a schedule's tick: the root of a trace of its own (ticks are not requests of
/// whoever added the schedule, who may be long gone), linked to the trace the schedule was
/// added in. The tick's job is written in it.
pub(crate) fn tick_span(def: &wasmgear_proto::schedule::ScheduleDef) -> tracing::Span {
    let span = tracing::info_span!(
        target: "wasmgear::produce",
        parent: None,
        "tick",
        otel.name = %format_args!("tick {}", def.name),
        otel.kind = "producer",
        wasmgear.schedule.name = %def.name,
    );
    let added_in = def
        .trace
        .as_deref()
        .and_then(|parent| TraceContext::new(parent, def.tracestate.as_deref()).ok())
        .and_then(|trace| span_context_of(&trace));
    if let Some(link) = added_in {
        span.add_link(link);
    }
    span
}

/// The context jobs written in `span` carry: the span's own when it is exported, else the
/// current OpenTelemetry context's, else none.
pub(crate) fn context_of(span: &tracing::Span) -> Option<TraceContext> {
    let own = span.context();
    let own = own.span().span_context().clone();
    if own.is_valid() {
        return of_span_context(&own);
    }
    current()
}

/// The current OpenTelemetry context's span, as a trace context (none when there is none).
pub fn current() -> Option<TraceContext> {
    let from_tracing = tracing::Span::current().context();
    let span_context = from_tracing.span().span_context().clone();
    if span_context.is_valid() {
        return of_span_context(&span_context);
    }
    let context = opentelemetry::Context::current();
    let span_context = context.span().span_context().clone();
    span_context
        .is_valid()
        .then(|| of_span_context(&span_context))
        .flatten()
}

/// An OpenTelemetry span context as the trace context a job carries.
pub fn of_span_context(context: &SpanContext) -> Option<TraceContext> {
    let state = context.trace_state().header();
    TraceContext::from_ids(
        &context.trace_id().to_string(),
        &context.span_id().to_string(),
        context.is_sampled(),
        Some(state.as_str()),
    )
    .ok()
}

/// The OpenTelemetry span context a job's trace context names (remote: made elsewhere).
pub fn span_context_of(trace: &TraceContext) -> Option<SpanContext> {
    use opentelemetry::trace::{SpanId, TraceFlags, TraceId, TraceState};
    let trace_id = TraceId::from_hex(trace.trace_id()).ok()?;
    let span_id = SpanId::from_hex(trace.span_id()).ok()?;
    let flags = if trace.sampled() {
        TraceFlags::SAMPLED
    } else {
        TraceFlags::default()
    };
    let state = trace
        .tracestate()
        .and_then(|s| s.parse::<TraceState>().ok())
        .unwrap_or_default();
    Some(SpanContext::new(trace_id, span_id, flags, true, state))
}

/// An OpenTelemetry context whose (remote) span is the one `trace` names: the parent to
/// give a span that continues the job's trace.
pub fn context_for(trace: &TraceContext) -> opentelemetry::Context {
    match span_context_of(trace) {
        Some(span) => opentelemetry::Context::new().with_remote_span_context(span),
        None => opentelemetry::Context::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_s_context_and_an_opentelemetry_span_context_convert_both_ways() {
        let trace = TraceContext::new(
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            Some("rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"),
        )
        .unwrap();
        let span = span_context_of(&trace).unwrap();
        assert!(span.is_valid() && span.is_remote() && span.is_sampled());
        assert_eq!(of_span_context(&span), Some(trace));
        let unsampled = TraceContext::new(
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00",
            None,
        )
        .unwrap();
        let span = span_context_of(&unsampled).unwrap();
        assert!(!span.is_sampled());
        assert_eq!(of_span_context(&span), Some(unsampled));
    }

    #[test]
    fn without_an_exporting_subscriber_the_current_opentelemetry_context_is_carried() {
        assert_eq!(current(), None);
        let trace = TraceContext::new(
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            None,
        )
        .unwrap();
        let _attached = context_for(&trace).attach();
        let span = producer_span(&FunctionName::new("resize").unwrap(), 1);
        assert_eq!(context_of(&span), Some(trace));
    }
}
