"""wasmgear: enqueue jobs on a wasmgear queue (Redis) and follow them, from Python.

The client speaks the queue's protocol directly over Redis (PROTOCOL.md in the wasmgear
repository), calling the same Redis Functions library the workers use (shipped in
`wasmgear/protocol/`).

    from wasmgear import Client
    client = Client.from_url("redis://127.0.0.1:6379")
    job = client.enqueue("echo", b"hello")
    print(client.wait(job.id).output)

`AsyncClient` (asyncio) offers the same methods, awaited. `submit_flow` submits a graph of
jobs (a flow) in one call; `batch` enqueues jobs of any functions with callbacks once they
have all succeeded or all ended. A job's `group` (a tenant, customer or document key) makes
the function's jobs leased round robin across groups; `configure`, `configure_group` and
`groups` set and read the function's and each group's limits. With a `uniq` key, `uniq_for`
keeps answering with its succeeded job for a while, `debounce` lets the last of a burst run,
and `throttle` makes at most so many jobs per period. A `redis+sentinel://` URL follows the
primary of a replicated set through its sentinels; `min_replicas` has every write of jobs
confirmed by replicas (else NotReplicated). A job's attempts may save a checkpoint to
resume from: `checkpoint` reads it, `retry(id, fresh=True)` drops it. Each job carries a W3C
trace context: the one given (`traceparent`, `tracestate`), else, with the OpenTelemetry API
installed (the `otel` extra), that of the `send FUNCTION` span the client opens around each
write. With a key file (`key_file`, or WASMGEAR_ENCRYPTION_KEY_FILE), the client seals the
inputs of functions that store only encrypted input (`configure(F, encrypt=True)`) with
AES-256-GCM and opens what it reads of sealed jobs (`wasmgear.crypto`).
"""

from .aio import AsyncClient, AsyncEventStream
from .client import (At, BatchJob, CallbackSpec, Client, EventStream, FlowDocument, Input,
                     JobOptions, Policy, Seconds, Throttle)
from .crypto import KeyRing
from .errors import (
    BadInput,
    Conflict,
    EncryptionError,
    JobCancelled,
    JobFailed,
    NotFound,
    NotReplicated,
    ProtocolError,
    Unreachable,
    WaitTimeout,
    WasmgearError,
)
from .models import (
    Attempt,
    BatchStatus,
    Callback,
    CancelResult,
    CheckpointInfo,
    Enqueued,
    Event,
    FlowEdge,
    FlowJobStatus,
    FlowStatus,
    FunctionConfig,
    GroupConfig,
    GroupInfo,
    GroupsOverview,
    Job,
    JobError,
    Progress,
    QueueInfo,
    RateLimit,
    SubmittedBatch,
    SubmittedFlow,
)
from ._core import KEEP

__version__ = "0.1.0"

__all__ = [
    "At",
    "AsyncClient",
    "AsyncEventStream",
    "Attempt",
    "BadInput",
    "BatchJob",
    "BatchStatus",
    "Callback",
    "CallbackSpec",
    "Conflict",
    "CancelResult",
    "CheckpointInfo",
    "Client",
    "EncryptionError",
    "Enqueued",
    "Event",
    "EventStream",
    "FlowDocument",
    "FlowEdge",
    "FlowJobStatus",
    "FlowStatus",
    "FunctionConfig",
    "GroupConfig",
    "GroupInfo",
    "GroupsOverview",
    "Input",
    "Job",
    "JobCancelled",
    "JobError",
    "JobFailed",
    "JobOptions",
    "KEEP",
    "KeyRing",
    "NotFound",
    "NotReplicated",
    "Policy",
    "Progress",
    "ProtocolError",
    "QueueInfo",
    "RateLimit",
    "Seconds",
    "SubmittedBatch",
    "SubmittedFlow",
    "Throttle",
    "Unreachable",
    "WaitTimeout",
    "WasmgearError",
]
