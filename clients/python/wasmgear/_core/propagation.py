"""The W3C trace context a job carries (https://www.w3.org/TR/trace-context/): the
`traceparent` of the span it was enqueued in and the `tracestate` that came with it, sent as
the `enqueue` options `trace` and `tracestate`. A worker that exports spans makes its
`process FUNCTION` span of each attempt a child of that span, so the job joins the
producer's trace. As the Rust client does it (crates/proto/src/trace.rs,
crates/client/src/propagation.rs).

A job's context is, first, the one given as its options (`traceparent`, `tracestate`),
checked by `check_trace` with the Rust client's sentences. Otherwise, when the
OpenTelemetry API (`opentelemetry-api`) can be imported, each `enqueue` call opens a
`send FUNCTION` span (kind producer) in the current context, and its jobs carry that span's
context when it is valid, else the current context's span's when that one is, else none.
Without the API nothing is opened and no job carries a context (`OTEL` is False)."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator, Optional, Tuple

from ..errors import BadInput
from .base import limits, log, quoted

try:
    from opentelemetry import trace as otel_trace

    #: Whether the OpenTelemetry API could be imported (read once, at import).
    OTEL = True
except ImportError:
    OTEL = False

#: The named options of a trace context: `("trace", P)`, then `("tracestate", S)` when it
#: has one; empty for none.
Named = Tuple[Tuple[str, str], ...]

_HEX = frozenset("0123456789abcdef")


def _hex(value: str, size: int, nonzero: bool) -> bool:
    """Whether `value` is `size` lower-case hex digits (not all zeros when `nonzero`)."""
    return (len(value) == size and all(c in _HEX for c in value)
            and not (nonzero and value == "0" * size))


def _traceparent_refused(given: str) -> BadInput:
    return BadInput(
        f"traceparent {quoted(given[:80])} is not a W3C traceparent: give 00-<32 hex trace "
        "id>-<16 hex span id>-<2 hex flags>, in lower case, the ids not all zeros"
    )


def _tracestate_refused() -> BadInput:
    return BadInput(
        f"tracestate is not a W3C tracestate: give at most {limits().max_tracestate_bytes} "
        "bytes of printable ASCII (key=value members separated by commas)"
    )


def check_trace(traceparent: Any, tracestate: Any = None) -> Named:
    """The named options of the trace context `traceparent` (and `tracestate`), checked as
    the Rust client's `TraceContext::new`: the traceparent, trimmed of spaces and tabs, is
    VERSION-TRACEID-SPANID-FLAGS in lower-case hex (a later version than 00 may go on after
    a '-'; it is kept as version 00 of its first four fields); the tracestate, trimmed, is
    none when empty, else at most `max_tracestate_bytes` bytes of printable ASCII. BadInput
    with the Rust client's sentence otherwise. No traceparent: no context (a tracestate
    alone is refused)."""
    if tracestate is not None and not isinstance(tracestate, str):
        raise BadInput(f"tracestate {tracestate!r} is not a string")
    state = None if tracestate is None else tracestate.strip(" \t")
    if traceparent is None:
        if state:
            raise BadInput("tracestate goes with a traceparent: give traceparent too")
        return ()
    if not isinstance(traceparent, str):
        raise BadInput(f"traceparent {traceparent!r} is not a string")
    value = traceparent.strip(" \t")
    if len(value) < 55:
        raise _traceparent_refused(traceparent)
    parts = value[:55].split("-")
    if len(parts) != 4:
        raise _traceparent_refused(traceparent)
    version, trace_id, span_id, flags = parts
    later = len(value) > 55
    if (not _hex(version, 2, False) or version == "ff" or (version == "00" and later)
            or (later and value[55] != "-") or not _hex(trace_id, 32, True)
            or not _hex(span_id, 16, True) or not _hex(flags, 2, False)):
        raise _traceparent_refused(traceparent)
    named: Tuple[Tuple[str, str], ...] = (("trace", f"00-{trace_id}-{span_id}-{flags}"),)
    if state:
        if (len(state.encode("utf-8")) > limits().max_tracestate_bytes
                or not all(" " <= c <= "~" for c in state)):
            raise _tracestate_refused()
        named += (("tracestate", state),)
    return named


def names_trace(named: Tuple[Tuple[str, str], ...]) -> bool:
    """Whether a job's named options carry a trace context of their own."""
    return any(name == "trace" for name, _ in named)


# --- OpenTelemetry ------------------------------------------------------------------------

_tracer: Optional[Any] = None


def _get_tracer() -> Any:
    """This package's tracer, from the global tracer provider (a proxy until one is set)."""
    global _tracer
    if _tracer is None:
        _tracer = otel_trace.get_tracer("wasmgear")
    return _tracer


def _of_span_context(context: Any) -> Named:
    """An OpenTelemetry span context as the named options of the context a job carries
    (none when its trace state is not one a job may carry)."""
    flags = "01" if context.trace_flags.sampled else "00"
    traceparent = (f"00-{otel_trace.format_trace_id(context.trace_id)}-"
                   f"{otel_trace.format_span_id(context.span_id)}-{flags}")
    try:
        return check_trace(traceparent, context.trace_state.to_header())
    except BadInput as e:
        log.debug("not carrying the current trace context: %s", e)
        return ()


def _context_of(span: Any) -> Named:
    """What jobs written in `span` carry: its context when valid, else the current span's
    when valid, else none."""
    own = span.get_span_context()
    if own.is_valid:
        return _of_span_context(own)
    current = otel_trace.get_current_span().get_span_context()
    if current.is_valid:
        return _of_span_context(current)
    return ()


@contextmanager
def producer(function: str, jobs: int) -> Iterator[Named]:
    """Around one `enqueue` call writing `jobs` jobs of `function`: opens its `send
    FUNCTION` span (kind producer, a child of the current context; not made current) and
    gives the context its jobs without one of their own carry; ends the span after the call
    (its status an error when the call raised). Gives none, and opens nothing, without the
    OpenTelemetry API."""
    if not OTEL:
        yield ()
        return
    span: Any = None
    carried: Named = ()
    try:
        span = _get_tracer().start_span(
            f"send {function}",
            kind=otel_trace.SpanKind.PRODUCER,
            attributes={
                "messaging.system": "wasmgear",
                "messaging.operation.type": "send",
                "messaging.operation.name": "send",
                "messaging.destination.name": function,
                "messaging.batch.message_count": jobs,
            },
        )
        carried = _context_of(span)
    except Exception as e:  # a broken SDK must not stop the enqueue
        log.warning("cannot open the send span of an enqueue of %s: %s", function, e)
    if span is None:
        yield carried
        return
    try:
        yield carried
    except Exception as e:
        span.record_exception(e)
        span.set_status(otel_trace.Status(otel_trace.StatusCode.ERROR, str(e)))
        raise
    finally:
        span.end()
