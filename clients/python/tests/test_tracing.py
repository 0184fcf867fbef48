"""OpenTelemetry tracing (issue 41): the trace context a job carries, against a real
redis-server, a real worker exporting its spans (OTLP/HTTP) to a real OTLP receiver, and the
OpenTelemetry SDK in this process (its spans kept in memory).

The client's `send FUNCTION` span (kind producer) is a child of the span the enqueue was made
in; the job carries its context; the worker's `process FUNCTION` span (kind consumer) is a
child of it, in the same trace. A context given as options wins; a remote context attached
by hand is continued; without the OpenTelemetry API nothing is carried."""

from __future__ import annotations

import asyncio
import importlib
import subprocess
import sys
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List

import pytest
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import (NonRecordingSpan, SpanContext, SpanKind, TraceFlags,
                                 TraceState, format_span_id, format_trace_id)

import wasmgear
from conftest import OtlpReceiver, RedisServer, Worker, otlp_env

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN_ID = "00f067aa0ba902b7"


@dataclass
class Traced:
    """A Redis served by a worker (echo) that exports its spans to `receiver`."""

    receiver: OtlpReceiver
    server: RedisServer
    worker: Worker

    @property
    def url(self) -> str:
        return self.server.url


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Traced]:
    receiver = OtlpReceiver()
    try:
        server = RedisServer(tmp_path_factory.mktemp("traced-redis"))
        try:
            worker = Worker(server.url, tmp_path_factory.mktemp("traced-worker"),
                            plugins=("echo",), env=otlp_env(receiver))
            try:
                yield Traced(receiver, server, worker)
            finally:
                worker.stop()
        finally:
            server.stop()
    finally:
        receiver.stop()


@pytest.fixture(scope="session")
def exporter() -> InMemorySpanExporter:
    """This process's global tracer provider (the SDK), set once for the session: what the
    client's `opentelemetry.trace.get_tracer` answers. Its finished spans stay in memory."""
    provider = TracerProvider()
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    trace.set_tracer_provider(provider)
    assert trace.get_tracer_provider() is provider, "another tracer provider was set first"
    return memory


def send_spans(memory: InMemorySpanExporter, trace_id: int) -> List[ReadableSpan]:
    """The client's finished `send echo` spans of trace `trace_id`, oldest first."""
    spans = [s for s in memory.get_finished_spans()
             if s.name == "send echo" and s.context is not None
             and s.context.trace_id == trace_id]
    return sorted(spans, key=lambda s: s.start_time or 0)


def span_hex(span: ReadableSpan) -> str:
    assert span.context is not None
    return format_span_id(span.context.span_id)


def assert_send_span(span: ReadableSpan, parent_span_id: int, jobs: int) -> None:
    """`span` is a finished `send echo` span of kind producer, child of `parent_span_id`,
    with the messaging attributes of a write of `jobs` jobs."""
    assert span.kind == SpanKind.PRODUCER
    assert span.parent is not None and span.parent.span_id == parent_span_id
    assert span.end_time is not None
    assert dict(span.attributes or {}) == {
        "messaging.system": "wasmgear",
        "messaging.operation.type": "send",
        "messaging.operation.name": "send",
        "messaging.destination.name": "echo",
        "messaging.batch.message_count": jobs,
    }


def assert_processed_in(receiver: OtlpReceiver, job_id: str, trace_id: str,
                        parent_span_id: str) -> Dict[str, Any]:
    """The worker's span of job `job_id`'s first attempt is in trace `trace_id`, a child of
    span `parent_span_id`."""
    spans = receiver.process_spans(job_id)
    assert len(spans) == 1, spans
    span = spans[0]
    assert span["attributes"]["wasmgear.job.attempt"] == "1"
    assert (span["trace_id"], span["parent_span_id"]) == (trace_id, parent_span_id), span
    return span


def test_a_job_joins_the_trace_of_the_span_it_was_enqueued_in(
        traced: Traced, exporter: InMemorySpanExporter) -> None:
    tracer = trace.get_tracer("wasmgear-tests")
    with wasmgear.Client.from_url(traced.url) as client:
        with tracer.start_as_current_span("request") as request:
            enqueued = client.enqueue("echo", b"traced")
        outer = request.get_span_context()
        sends = send_spans(exporter, outer.trace_id)
        assert len(sends) == 1, sends
        send = sends[0]
        assert_send_span(send, outer.span_id, 1)
        job = client.wait(enqueued.id, timeout=60)
        trace_id = format_trace_id(outer.trace_id)
        assert job.trace == f"00-{trace_id}-{span_hex(send)}-01"
        assert job.record["trace"] == job.trace and job.tracestate is None
        assert "tracestate" not in job.record
        assert_processed_in(traced.receiver, enqueued.id, trace_id, span_hex(send))


def test_a_flow_s_and_a_batch_s_jobs_carry_their_write_s_send_span(
        traced: Traced, exporter: InMemorySpanExporter) -> None:
    tracer = trace.get_tracer("wasmgear-tests")
    with wasmgear.Client.from_url(traced.url) as client:
        with tracer.start_as_current_span("request") as request:
            flow = client.submit_flow({"name": "traced", "jobs": {
                "a": {"function": "echo", "input": "a"},
                "b": {"function": "echo", "input": "b", "after": ["a"]},
            }})
            batch = client.batch([("echo", "x"), ("echo", "y")])
            many = client.enqueue_many("echo", ["m1", "m2", "m3"])
        outer = request.get_span_context()
        sends = send_spans(exporter, outer.trace_id)
        # One write of each: the flow's two jobs, the batch's two, the bulk's three.
        for send, jobs in zip(sends, (2, 2, 3)):
            assert_send_span(send, outer.span_id, jobs)
        assert len(sends) == 3, sends
        trace_id = format_trace_id(outer.trace_id)
        for send, ids in zip(sends, (list(flow.jobs.values()), batch.jobs,
                                     [e.id for e in many])):
            for job_id in ids:
                assert client.status(job_id).trace == f"00-{trace_id}-{span_hex(send)}-01"
        client.wait(flow.jobs["b"], timeout=60)
        assert_processed_in(traced.receiver, flow.jobs["b"], trace_id, span_hex(sends[0]))


def remote(trace_id: str = TRACE_ID, span_id: str = SPAN_ID) -> SpanContext:
    """A span context made elsewhere (as a propagator reads it from a request), sampled, with
    a trace state."""
    return SpanContext(int(trace_id, 16), int(span_id, 16), is_remote=True,
                       trace_flags=TraceFlags(TraceFlags.SAMPLED),
                       trace_state=TraceState([("vendor", "value")]))


def test_a_remote_context_attached_by_hand_is_continued(
        traced: Traced, exporter: InMemorySpanExporter) -> None:
    """With the SDK recording, the send span is a child of the remote span and keeps its
    trace state; the job carries the send span's context and that state."""
    token = otel_context.attach(trace.set_span_in_context(NonRecordingSpan(remote())))
    try:
        with wasmgear.Client.from_url(traced.url) as client:
            enqueued = client.enqueue("echo", b"continued")
            job = client.wait(enqueued.id, timeout=60)
    finally:
        otel_context.detach(token)
    sends = send_spans(exporter, int(TRACE_ID, 16))
    assert len(sends) == 1, sends
    assert_send_span(sends[0], int(SPAN_ID, 16), 1)
    assert job.trace == f"00-{TRACE_ID}-{span_hex(sends[0])}-01"
    assert job.tracestate == "vendor=value" == job.record["tracestate"]
    assert_processed_in(traced.receiver, enqueued.id, TRACE_ID, span_hex(sends[0]))


#: A program with the OpenTelemetry API but no SDK (so no span records): it attaches a
#: remote context, enqueues a job and prints its id.
API_ONLY = """
import sys
from opentelemetry import context, trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, TraceState
import wasmgear

url, trace_id, span_id = sys.argv[1:]
remote = SpanContext(int(trace_id, 16), int(span_id, 16), is_remote=True,
                     trace_flags=TraceFlags(TraceFlags.SAMPLED),
                     trace_state=TraceState([("vendor", "value")]))
context.attach(trace.set_span_in_context(NonRecordingSpan(remote)))
assert not trace.get_tracer("probe").start_span("probe").is_recording()
with wasmgear.Client.from_url(url) as client:
    print(client.enqueue("echo", b"api only").id)
"""


def test_without_an_sdk_the_current_context_is_carried(traced: Traced) -> None:
    """A program with the API alone (its send span does not record) has its jobs carry the
    remote context it attached, as it is: the worker's span is a child of that span."""
    trace_id, span_id = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
    ran = subprocess.run([sys.executable, "-c", API_ONLY, traced.url, trace_id, span_id],
                         capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stderr
    job_id = ran.stdout.strip()
    with wasmgear.Client.from_url(traced.url) as client:
        job = client.wait(job_id, timeout=60)
    assert job.trace == f"00-{trace_id}-{span_id}-01"
    assert job.tracestate == "vendor=value"
    assert_processed_in(traced.receiver, job_id, trace_id, span_id)


def test_a_context_given_as_options_wins(traced: Traced, exporter: InMemorySpanExporter) -> None:
    """`traceparent` and `tracestate` (trimmed; a later version read as 00) are carried
    rather than the send span's, on enqueue, bulk jobs, batch jobs and flows."""
    tracer = trace.get_tracer("wasmgear-tests")
    given = f"  cc-{TRACE_ID}-{SPAN_ID}-01-what-comes-next\t"
    stored = f"00-{TRACE_ID}-{SPAN_ID}-01"
    other = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    with wasmgear.Client.from_url(traced.url) as client:
        with tracer.start_as_current_span("request") as request:
            enqueued = client.enqueue("echo", b"given", traceparent=given,
                                      tracestate=" rojo=00f067aa0ba902b7,congo=t61 ")
            many = client.enqueue_many("echo", ["d", ("o", {"traceparent": other})],
                                       traceparent=stored)
            batch = client.batch([("echo", "b", {"traceparent": other, "tracestate": "k=v"}),
                                  ("echo", "c")])
            flow = client.submit_flow({"name": "given", "jobs": {
                "a": {"function": "echo", "input": "a"},
                "b": {"function": "echo", "input": "b", "after": ["a"]},
            }}, traceparent=other)
        job = client.wait(enqueued.id, timeout=60)
        assert (job.trace, job.tracestate) == (stored, "rojo=00f067aa0ba902b7,congo=t61")
        assert_processed_in(traced.receiver, enqueued.id, TRACE_ID, SPAN_ID)

        outer = request.get_span_context()
        own = f"00-{format_trace_id(outer.trace_id)}-"
        assert [client.status(e.id).trace for e in many] == [stored, other]
        first, second = (client.status(i) for i in batch.jobs)
        assert (first.trace, first.tracestate) == (other, "k=v")
        # A job without a context of its own carries its write's send span's.
        assert second.trace is not None and second.trace.startswith(own)
        assert second.tracestate is None
        assert [client.status(i).trace for i in flow.jobs.values()] == [other, other]
        client.wait(flow.jobs["b"], timeout=60)
        assert_processed_in(traced.receiver, flow.jobs["b"],
                            "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331")


PARENT_REFUSED = (
    "is not a W3C traceparent: give 00-<32 hex trace id>-<16 hex span id>-<2 hex flags>, in "
    "lower case, the ids not all zeros"
)
STATE_REFUSED = (
    "tracestate is not a W3C tracestate: give at most 512 bytes of printable ASCII "
    "(key=value members separated by commas)"
)


def test_a_bad_trace_context_is_refused_and_writes_nothing(bare: RedisServer) -> None:
    good = f"00-{TRACE_ID}-{SPAN_ID}-01"
    upper = f"00-{TRACE_ID.upper()}-{SPAN_ID}-01"
    long = "x" * 100
    odd = f'00-"{TRACE_ID}"\n-{SPAN_ID}-01'
    flow = {"name": "f", "jobs": {"a": {"function": "echo"}}}
    with wasmgear.Client.from_url(bare.url) as client:
        first = client.enqueue("echo", "a real job")
        keys_before = sorted(bare.redis.keys("*"))
        seq_before = bare.redis.get("wg:{echo}:seq")
        cases = [
            (lambda: client.enqueue("echo", "x", traceparent=upper),
             f'traceparent "{upper}" {PARENT_REFUSED}'),
            (lambda: client.enqueue("echo", "x", traceparent=f"00-{'0' * 32}-{SPAN_ID}-01"),
             f'traceparent "00-{"0" * 32}-{SPAN_ID}-01" {PARENT_REFUSED}'),
            (lambda: client.enqueue("echo", "x", traceparent=good + "-more"),
             f'traceparent "{good}-more" {PARENT_REFUSED}'),
            (lambda: client.enqueue("echo", "x", traceparent=long),
             f'traceparent "{"x" * 80}" {PARENT_REFUSED}'),
            (lambda: client.enqueue("echo", "x", traceparent=odd),
             f'traceparent "00-\\"{TRACE_ID}\\"\\n-{SPAN_ID}-01" {PARENT_REFUSED}'),
            (lambda: client.enqueue("echo", "x", traceparent=good, tracestate="k=v\nx"),
             STATE_REFUSED),
            (lambda: client.enqueue("echo", "x", traceparent=good,
                                    tracestate="k=" + "v" * 511), STATE_REFUSED),
            (lambda: client.enqueue("echo", "x", tracestate="k=v"),
             "tracestate goes with a traceparent: give traceparent too"),
            (lambda: client.enqueue_many("echo", ["ok", ("bad", {"traceparent": upper})]),
             f'job 2 of the batch: traceparent "{upper}" {PARENT_REFUSED}'),
            (lambda: client.batch([("echo", "a", {"traceparent": good, "tracestate": "é"})]),
             f"job 1: {STATE_REFUSED}"),
            (lambda: client.submit_flow(flow, traceparent=upper),
             f'traceparent "{upper}" {PARENT_REFUSED}'),
        ]
        for attempt, expected in cases:
            with pytest.raises(wasmgear.BadInput) as caught:
                attempt()
            assert str(caught.value) == expected
            assert not isinstance(caught.value, wasmgear.Conflict)
            assert caught.value.exit_code == 2
            assert sorted(bare.redis.keys("*")) == keys_before, f"{expected}: keys changed"
            assert bare.redis.get("wg:{echo}:seq") == seq_before, f"{expected}: a job was made"
        assert client.status(first.id).state == "queued"


def test_without_the_opentelemetry_api_nothing_is_carried(
        traced: Traced, exporter: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch) -> None:
    """With `opentelemetry` not importable (the package read again without it), no span is
    opened and the job carries nothing, even within a recording span: the worker's span of it
    starts a trace of its own."""
    propagation = importlib.import_module("wasmgear._core.propagation")
    tracer = trace.get_tracer("wasmgear-tests")
    with wasmgear.Client.from_url(traced.url) as client:
        with tracer.start_as_current_span("request") as request:
            monkeypatch.setitem(sys.modules, "opentelemetry", None)
            try:
                importlib.reload(propagation)
                assert propagation.OTEL is False
                enqueued = client.enqueue("echo", b"untraced")
            finally:
                monkeypatch.undo()
                importlib.reload(propagation)
        assert propagation.OTEL is True
        outer = request.get_span_context()
        assert send_spans(exporter, outer.trace_id) == []
        job = client.wait(enqueued.id, timeout=60)
        assert job.trace is None and job.tracestate is None
        assert "trace" not in job.record
        span = traced.receiver.process_spans(enqueued.id)[0]
        assert span["parent_span_id"] == ""
        assert span["trace_id"] != format_trace_id(outer.trace_id)
        # Read again with the API, the client opens its span again.
        with tracer.start_as_current_span("again") as again:
            client.enqueue("echo", b"traced again")
        assert len(send_spans(exporter, again.get_span_context().trace_id)) == 1


def test_async_jobs_join_the_trace_they_were_enqueued_in(
        traced: Traced, exporter: InMemorySpanExporter) -> None:
    tracer = trace.get_tracer("wasmgear-tests")

    async def main() -> None:
        async with await wasmgear.AsyncClient.from_url(traced.url) as client:
            with tracer.start_as_current_span("request") as request:
                enqueued = await client.enqueue("echo", b"async traced")
                given = await client.enqueue(
                    "echo", b"async given", traceparent=f"00-{TRACE_ID}-{SPAN_ID}-01",
                    tracestate="k=v")
                flow = await client.submit_flow(
                    {"name": "async", "jobs": {"a": {"function": "echo", "input": "a"}}},
                    traceparent=f"00-{TRACE_ID}-{SPAN_ID}-00")
            outer = request.get_span_context()
            sends = send_spans(exporter, outer.trace_id)
            assert len(sends) == 3, sends
            for send in sends:
                assert_send_span(send, outer.span_id, 1)
            job = await client.wait(enqueued.id, timeout=60)
            trace_id = format_trace_id(outer.trace_id)
            assert job.trace == f"00-{trace_id}-{span_hex(sends[0])}-01"
            assert_processed_in(traced.receiver, enqueued.id, trace_id, span_hex(sends[0]))
            job = await client.wait(given.id, timeout=60)
            assert (job.trace, job.tracestate) == (f"00-{TRACE_ID}-{SPAN_ID}-01", "k=v")
            assert_processed_in(traced.receiver, given.id, TRACE_ID, SPAN_ID)
            status = await client.status(flow.jobs["a"])
            assert status.trace == f"00-{TRACE_ID}-{SPAN_ID}-00"
            with pytest.raises(wasmgear.BadInput, match="is not a W3C traceparent"):
                await client.enqueue("echo", b"x", traceparent="00-bad")

    asyncio.run(asyncio.wait_for(main(), 300))
