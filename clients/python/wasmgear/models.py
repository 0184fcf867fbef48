"""What the client hands back: jobs, progress reports, events and queue overviews."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Dict, List, NamedTuple, Optional

FINAL_STATES = ("succeeded", "failed", "cancelled", "expired")


def ms_to_datetime(ms: Any) -> Optional[datetime]:
    """A time in ms since the Unix epoch (as records and events hold it) as an aware UTC
    datetime; None for None."""
    if ms is None:
        return None
    return datetime.fromtimestamp(int(ms) / 1000.0, tz=timezone.utc)


@dataclass(frozen=True)
class Enqueued:
    """A job handed to `enqueue`: its id, and whether it is new (False when the job's uniq
    key answered with another job of the function: an unfinished one, one within its
    `uniq_for` window, one not started yet (`debounce`) or the latest made (`throttle`);
    `id` is then that job's)."""

    id: str
    created: bool


@dataclass(frozen=True)
class Progress:
    """A progress report of job `id`: `done` of `total` units (total 0: unknown). `seq`
    orders the reports of a job over all its attempts."""

    id: str
    seq: int
    done: int
    total: int
    message: Optional[str] = None


@dataclass(frozen=True)
class JobError:
    """The last error of a job: its class (the failure group: `guest-error`, `trap`,
    `timed-out`, `cancelled`, `dependency`, `expired`...) and message."""

    class_: str
    message: str


@dataclass(frozen=True)
class Attempt:
    """One ended attempt of a job, from its history."""

    attempt: int
    outcome: str
    worker: Optional[str]
    started: Optional[datetime]
    ended: Optional[datetime]
    message: Optional[str]
    version: Optional[str]


@dataclass(frozen=True)
class CheckpointInfo:
    """The checkpoint a job keeps for its next attempt to resume from, as its record tells
    of it: its size in bytes and when it was saved (`checkpoint(id)` reads the bytes)."""

    bytes: int
    saved: datetime


@dataclass(frozen=True)
class Job:
    """A job's status as `wg2_get` answers it. `record` is the whole record (PROTOCOL.md,
    "The job record"), the other fields the parts most callers want."""

    id: str
    state: str
    priority: int
    attempt: int
    max_attempts: int
    progress: Optional[Progress]
    error: Optional[JobError]
    output: Optional[bytes]
    created: Optional[datetime]
    run_at: Optional[datetime]
    started: Optional[datetime]
    finished: Optional[datetime]
    tags: List[str]
    uniq: Optional[str]
    after: List[str]
    waiting_on: List[str]
    dependents: List[str]
    history: List[Attempt]
    cancel_requested: bool
    record: Dict[str, Any] = field(repr=False)
    #: The deadline to start by (`expires_in`/`expires_at`), None without one.
    expires: Optional[datetime] = None
    #: The W3C traceparent of the span the job was enqueued in (None: it carries no trace
    #: context), and the tracestate that came with it.
    trace: Optional[str] = None
    tracestate: Optional[str] = None
    #: The checkpoint the job keeps (saved by an attempt that ran, for the next one to
    #: resume from), or None: it never saved one, it succeeded, or a retry with `fresh`
    #: dropped it.
    checkpoint: Optional[CheckpointInfo] = None

    @property
    def function(self) -> str:
        """The job's function."""
        return self.id.rsplit(":", 1)[0]

    @property
    def number(self) -> int:
        """The job's number within its function."""
        return int(self.id.rsplit(":", 1)[1])

    @property
    def is_final(self) -> bool:
        """Whether the job has ended (succeeded, failed, cancelled or expired)."""
        return self.state in FINAL_STATES

    @property
    def succeeded(self) -> bool:
        return self.state == "succeeded"

    @property
    def output_text(self) -> Optional[str]:
        """The output decoded as UTF-8 (invalid bytes replaced), or None."""
        return None if self.output is None else self.output.decode("utf-8", "replace")


@dataclass(frozen=True)
class Event:
    """One event published on a function's `events` channel (PROTOCOL.md, "Events").

    `kind` is `create`, `start`, `progress`, `checkpoint`, `retry`, `finish`, `ready`,
    `config`, `cancel` (or a kind a newer version added); the other fields are set when the
    kind has them (`bytes`: the size of the checkpoint a running job saved).
    `raw` is the event's JSON object. The `finish` event of a job a wait marked
    (`wg2_watch`) also has `record` (as `wg2_get` answers it) and `output` (a text output
    of at most 1024 bytes) or `output_omitted` (true: read the job) there."""

    kind: str
    function: str
    id: Optional[str]
    attempt: Optional[int] = None
    seq: Optional[int] = None
    done: Optional[int] = None
    total: Optional[int] = None
    message: Optional[str] = None
    state: Optional[str] = None
    at: Optional[datetime] = None
    bytes: Optional[int] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)


@dataclass(frozen=True)
class CancelResult:
    """What `cancel` did: `outcome` is `cancelled` (it had not started and is now cancelled),
    `stopping` (it runs; its worker has been asked to stop it, and it will end cancelled) or
    `already-ended` (nothing changed); `state` is the job's state afterwards."""

    id: str
    outcome: str
    state: str


@dataclass(frozen=True)
class QueueInfo:
    """One function's queue, as `wasmgear queues` shows it."""

    function: str
    queued: int
    scheduled: int
    running: int
    waiting: int
    succeeded: int
    failed: int
    cancelled: int
    workers: int
    paused: bool


# --- Function settings and groups -------------------------------------------------------


class RateLimit(NamedTuple):
    """A rate limit: at most `limit` leases per `interval`, over all workers. A pair, so that
    it can be given back to `configure` as it was read."""

    limit: int
    interval: timedelta


@dataclass(frozen=True)
class FunctionConfig:
    """A function's settings, shared by all workers (`configure`, `config`); None where it
    has none (the default applies). `group_concurrency` and `group_rate_limit` are the
    limits of each of its groups, unless a group has its own (`configure_group`)."""

    paused: bool = False
    #: The most of its jobs running at once, over all workers.
    concurrency: Optional[int] = None
    #: The most of its leases per interval, over all workers.
    rate_limit: Optional[RateLimit] = None
    #: The most finished jobs kept (the queue's default: 50 000).
    keep_finished: Optional[int] = None
    #: Each group's most jobs running at once (1: each group is a sequence).
    group_concurrency: Optional[int] = None
    #: Each group's most leases per interval.
    group_rate_limit: Optional[RateLimit] = None
    #: How many replicas must confirm each enqueue of its jobs (and each completion, by the
    #: workers) before the call reports success; a client's own `min_replicas` may ask for
    #: more.
    min_replicas: Optional[int] = None
    #: It stores only encrypted input: an enqueue of a plain one is refused, writing nothing
    #: (a client with the key file seals the inputs: see `wasmgear.crypto`).
    encrypt: bool = False


@dataclass(frozen=True)
class GroupConfig:
    """A group's own settings (`configure_group`); None where it has none: the function's
    default (`group_concurrency`, `group_rate_limit`) applies. A paused group's jobs are
    leased by no worker (the other groups go on)."""

    concurrency: Optional[int] = None
    rate_limit: Optional[RateLimit] = None
    paused: bool = False


@dataclass(frozen=True)
class GroupInfo:
    """One group of a function, as `groups` lists it: its ready jobs, its jobs holding a
    slot (running, and a sequence's job waiting out a retry's backoff), its own settings,
    and until when it waits for its rate window (ms since the epoch, Redis' clock; None when
    it does not)."""

    group: str
    ready: int
    running: int
    config: GroupConfig
    rate_limited_until_ms: Optional[int]

    @property
    def rate_limited_until(self) -> Optional[datetime]:
        """Until when it waits for its rate window, as an aware UTC datetime (or None)."""
        return ms_to_datetime(self.rate_limited_until_ms)


@dataclass(frozen=True)
class GroupsOverview:
    """A function's groups (`groups`): how many have ready jobs, running jobs or their own
    settings (`groups`; `truncated` when there were more than the queue looks at in one
    call), the ready jobs without a group (they take their turns as one group), and the
    deepest groups (most ready jobs first), at most as many as asked for."""

    groups: int
    truncated: bool
    ungrouped_ready: int
    listed: List[GroupInfo]


# --- Flows ------------------------------------------------------------------------------

#: The order in which `FlowStatus.counts` lists the states (as the Rust client and the CLI).
FLOW_STATE_ORDER = (
    "waiting", "scheduled", "queued", "running", "succeeded", "failed", "cancelled", "expired",
    "missing",
)


@dataclass(frozen=True)
class SubmittedFlow:
    """A flow written by `submit_flow`: its id, and each job's id by its name in the flow
    (in the order of the names, as the Rust client and the HTTP API answer them)."""

    id: int
    jobs: Dict[str, str]


@dataclass(frozen=True)
class FlowEdge:
    """An edge of a flow: the name of the job waited on, and the waiting job's policy when
    that one fails, is cancelled or is gone (`cancel`, `ignore` or `continue`)."""

    job: str
    on_failure: str = "cancel"


@dataclass(frozen=True)
class FlowJobStatus:
    """One job of a flow and how it stands (`outcomes`): `state` is `missing` when the job
    is not kept (forgotten after its retention, or never written: a submit that failed
    halfway); `output_bytes` the size of its output once it succeeded; `error` the message
    it failed or was cancelled with."""

    name: str
    id: str
    after: List[FlowEdge]
    state: str
    output_bytes: int
    error: Optional[str]

    @property
    def ended(self) -> bool:
        """Whether it has ended (or is gone)."""
        return self.state in FINAL_STATES or self.state == "missing"


@dataclass(frozen=True)
class FlowStatus:
    """A flow (`flow(id)`): its id, name, when it was submitted (ms since the epoch, Redis'
    clock) and its jobs, every one after those it waits on."""

    id: int
    name: str
    created_ms: int
    jobs: List[FlowJobStatus]

    @property
    def created(self) -> Optional[datetime]:
        """When it was submitted, as an aware UTC datetime."""
        return ms_to_datetime(self.created_ms)

    @property
    def ended(self) -> bool:
        """Whether every job has ended (or is gone)."""
        return all(job.ended for job in self.jobs)

    @property
    def counts(self) -> Dict[str, int]:
        """How many jobs are in each state (`missing` for those not kept), in a fixed order:
        waiting, scheduled, queued, running, succeeded, failed, cancelled, expired, missing."""
        counts: Dict[str, int] = {}
        for job in self.jobs:
            counts[job.state] = counts.get(job.state, 0) + 1

        def rank(state: str) -> int:
            order = FLOW_STATE_ORDER
            return order.index(state) if state in order else len(order)

        return {state: counts[state] for state in sorted(counts, key=rank)}

    @property
    def sinks(self) -> List[FlowJobStatus]:
        """The jobs no other job of the flow waits on (its results), in order."""
        waited = {edge.job for job in self.jobs for edge in job.after}
        return [job for job in self.jobs if job.name not in waited]

    def job(self, name: str) -> FlowJobStatus:
        """The job called `name` in the flow (KeyError when it has none)."""
        for job in self.jobs:
            if job.name == name:
                return job
        raise KeyError(name)


# --- Batches ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Callback:
    """A batch's callback: a job of `function` whose input is the batch's outcome, JSON:
    `batch` (its id), `name`, `callback` (`success` or `complete`), `total`, `succeeded`,
    `failed`, `cancelled`, `failed_ids`, `cancelled_ids`, and `data` as given here (any
    value that writes as JSON)."""

    function: str
    data: Any = None


@dataclass(frozen=True)
class SubmittedBatch:
    """A batch `batch` opened, filled and closed: its id and its jobs' ids, in the order
    given."""

    id: str
    jobs: List[str]


@dataclass(frozen=True)
class BatchStatus:
    """How a batch stands (`batch_status`): whether jobs can still be added (`open`), its
    jobs (`total`), those not counted as ended yet (`pending`), those that `succeeded`,
    `failed` or were `cancelled` and the ids of the last two; each callback's state:
    None (not due, or not asked for), `due`, or the id of the job enqueued for it; when it
    was opened and when its last job ended with the batch closed (ms since the epoch, Redis'
    clock)."""

    id: str
    name: str
    open: bool
    total: int
    pending: int
    succeeded: int
    failed: int
    cancelled: int
    failed_ids: List[str]
    cancelled_ids: List[str]
    on_success: Optional[str]
    on_complete: Optional[str]
    created_ms: int
    ended_ms: Optional[int]

    @property
    def created(self) -> Optional[datetime]:
        """When it was opened, as an aware UTC datetime."""
        return ms_to_datetime(self.created_ms)

    @property
    def ended(self) -> bool:
        """Whether it is closed and every job has ended (its callbacks are then due, or
        enqueued)."""
        return self.ended_ms is not None

    @property
    def ended_at(self) -> Optional[datetime]:
        """When its last job ended with the batch closed, as an aware UTC datetime."""
        return ms_to_datetime(self.ended_ms)
