"""The part of the client that does no I/O, shared by `Client` and `AsyncClient`.

Every operation is written once here as a generator ("sans-IO"): it yields what it needs done
(`Cmd` a Redis command, `LoadLibrary`, `Sleep`, `Receive` the next signal of a wait) and is
sent the answer, or has the Redis error thrown into it. The sync and the asyncio client only
run these generators against their connection (`_drive` in each). Argument building, reply
parsing, validation and the mapping of errors to `WasmgearError` live here and nowhere else.

# Layout
- `base`: the shipped protocol files, their `Limits`, the requests a generator yields,
  function names and job ids.
- `options`: one job's input and options, checked.
- `propagation`: the W3C trace context a job carries, checked, or taken from the send span
  opened around each `enqueue` call when the OpenTelemetry API is there.
- `calls`: errors, sending a call again, loading the library, a client's memory.
- `replication`: a write of jobs confirmed by replicas (`min_replicas`, `WAIT`).
- `sentinel`: `redis+sentinel://` URLs read and redacted, what sentinels answer judged.
- `records`: a job's record and published events, parsed.
- `operations`: enqueue, status, logs, input, checkpoint, cancel, retry, queues.
- `opening`: inputs sealed for their jobs, and what is read of sealed jobs opened (with the
  client's keys, `wasmgear.crypto`), or said to be sealed (without).
- `settings`: a function's settings (`configure`, `config`) and its groups
  (`configure_group`, `groups`), their values checked.
- `flows`: flow documents read and checked, submit, status, cancel and retry of a flow.
- `batches`: batches opened, filled, closed and read; a batch job's end counted, and its
  callbacks enqueued once.
- `waiting`: the subscription's routing and `wait`.
"""

from .calls import (
    MAY_NOT_LOAD,
    RETRIES,
    ClientState,
    backoff,
    call,
    call_retrying,
    describe_connect_error,
    is_transient,
    load_ok,
    map_error,
    version_action,
)
from .operations import (
    cancel,
    cancel_children,
    cancel_one,
    checkpoint,
    deliver,
    enqueue,
    enqueue_call,
    get,
    job_input,
    link,
    link_many,
    logs,
    queues,
    register,
    retry,
    status,
)
from . import propagation
from .opening import client_keys, opened_bytes, opened_flow, opened_job, opened_log, said_sealed
from .propagation import check_trace
from .options import OPTION_NAMES, POLICIES, JobSpec, check_group, job_spec, job_specs
from .settings import (
    KEEP,
    MAX_GROUPS_LISTED,
    Count,
    Keep,
    Rate,
    config,
    configure,
    configure_group,
    group_args,
    groups,
    settings_args,
)
from .flows import (
    Flow,
    FlowJob,
    cancel_flow,
    check_flow,
    check_flow_id,
    flow_status,
    opened_flow_status,
    read_flow,
    retry_flow,
    submit_flow,
    write_order,
)
from .batches import (
    add_to_batch,
    batch,
    batch_definition,
    batch_jobs,
    batch_status,
    check_batch_id,
    close_batch,
    open_batch,
)
from .base import (
    LOST,
    RESUBSCRIBED,
    Cmd,
    Gen,
    Limits,
    LoadLibrary,
    MinReplicas,
    Op,
    Pinned,
    Protocol,
    Receive,
    Sleep,
    check_function,
    limits,
    parse_job_id,
    protocol,
    text,
)
from .records import parse_event, parse_message, parse_record
from .replication import CONFIRM_ATTEMPTS, invoke_confirmed, min_replicas, reply_setting
from .sentinel import (
    ASK_TIMEOUT,
    CHECK_EVERY,
    DEFAULT_SENTINEL_PORT,
    NoPrimaryFound,
    SentinelUrl,
    bracketed,
    describe_sentinel_error,
    is_sentinel_url,
    named_primary,
    no_primary,
    parse_sentinel_url,
    redact_sentinel,
    sentinel_label,
)
from .waiting import ProgressCallback, Router, normalize_ids, outcome, timeout_seconds, wait

__all__ = [
    "ASK_TIMEOUT",
    "CHECK_EVERY",
    "CONFIRM_ATTEMPTS",
    "DEFAULT_SENTINEL_PORT",
    "MinReplicas",
    "NoPrimaryFound",
    "Pinned",
    "SentinelUrl",
    "bracketed",
    "describe_sentinel_error",
    "invoke_confirmed",
    "is_sentinel_url",
    "min_replicas",
    "named_primary",
    "no_primary",
    "parse_sentinel_url",
    "redact_sentinel",
    "reply_setting",
    "sentinel_label",
    "KEEP",
    "LOST",
    "MAX_GROUPS_LISTED",
    "OPTION_NAMES",
    "POLICIES",
    "RESUBSCRIBED",
    "MAY_NOT_LOAD",
    "RETRIES",
    "ClientState",
    "Cmd",
    "Count",
    "Flow",
    "FlowJob",
    "Gen",
    "JobSpec",
    "Keep",
    "Limits",
    "LoadLibrary",
    "Op",
    "ProgressCallback",
    "Protocol",
    "Rate",
    "Receive",
    "Router",
    "Sleep",
    "add_to_batch",
    "backoff",
    "batch",
    "batch_definition",
    "batch_jobs",
    "batch_status",
    "call",
    "call_retrying",
    "cancel",
    "cancel_children",
    "cancel_flow",
    "check_flow",
    "check_flow_id",
    "cancel_one",
    "checkpoint",
    "check_batch_id",
    "client_keys",
    "check_function",
    "check_trace",
    "check_group",
    "close_batch",
    "config",
    "configure",
    "configure_group",
    "deliver",
    "describe_connect_error",
    "enqueue",
    "enqueue_call",
    "flow_status",
    "get",
    "group_args",
    "groups",
    "is_transient",
    "job_input",
    "job_spec",
    "job_specs",
    "limits",
    "link",
    "link_many",
    "load_ok",
    "logs",
    "map_error",
    "normalize_ids",
    "open_batch",
    "opened_bytes",
    "opened_flow",
    "opened_flow_status",
    "opened_job",
    "opened_log",
    "outcome",
    "parse_event",
    "parse_job_id",
    "parse_message",
    "parse_record",
    "propagation",
    "protocol",
    "queues",
    "read_flow",
    "register",
    "retry",
    "retry_flow",
    "said_sealed",
    "settings_args",
    "status",
    "submit_flow",
    "text",
    "timeout_seconds",
    "version_action",
    "wait",
    "write_order",
]
