"""What the client hands back: jobs, progress reports, events and queue overviews."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Dict, List, Optional

FINAL_STATES = ("succeeded", "failed", "cancelled")


def ms_to_datetime(ms: Any) -> Optional[datetime]:
    """A time in ms since the Unix epoch (as records and events hold it) as an aware UTC
    datetime; None for None."""
    if ms is None:
        return None
    return datetime.fromtimestamp(int(ms) / 1000.0, tz=timezone.utc)


@dataclass(frozen=True)
class Enqueued:
    """A job handed to `enqueue`: its id, and whether it is new (False when an unfinished job
    of the function held the same uniq key; `id` is then that job's)."""

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
    `timed-out`, `cancelled`, `dependency`...) and message."""

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
        """Whether the job has ended (succeeded, failed or cancelled)."""
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

    `kind` is `create`, `start`, `progress`, `retry`, `finish`, `ready`, `config`, `cancel`
    (or a kind a newer version added); the other fields are set when the kind has them.
    `raw` is the event's JSON object."""

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
