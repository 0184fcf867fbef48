"""The errors of the wasmgear client, each with the exit code the `wasmgear` CLI uses for it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, List, Optional, Sequence

if TYPE_CHECKING:  # pragma: no cover
    from .models import Enqueued, Job


class WasmgearError(Exception):
    """The base of every error this client raises. `exit_code` is the CLI's for the same case."""

    exit_code: int = 1


class BadInput(WasmgearError):
    """A bad argument or option, refused before anything was written (CLI exit code 2).

    When a bulk enqueue of several calls is refused by a later call, `enqueued` lists the jobs
    that the earlier calls did write."""

    exit_code = 2

    def __init__(self, message: str, enqueued: Optional[Sequence["Enqueued"]] = None) -> None:
        super().__init__(message)
        self.enqueued: List["Enqueued"] = list(enqueued or [])


class Conflict(BadInput):
    """A well-formed request the queue's state refuses, and nothing was written: a time to run
    at that the queue's clock has passed, a dependency that is gone, failed or cancelled (the
    HTTP API answers 409; the CLI exits with 2, as for other refused input)."""


class EncryptionError(BadInput):
    """Encrypted job data cannot be written or read here (CLI exit code 2, as for other
    refused input): the function stores only encrypted input and this client has no key
    file (nothing was written), the key file does not read, or what was read was sealed
    with a key the file lacks, was changed, or belongs to another job (the message names
    the job and the part of it)."""


class NotFound(WasmgearError):
    """No such job: never enqueued, or its retention is over; or no such flow, or no such
    batch (CLI exit code 5)."""

    exit_code = 5


class Unreachable(WasmgearError):
    """Redis cannot be reached, refused the credentials, or is not Redis (CLI exit code 6).

    `enqueued` lists the jobs that earlier calls of a bulk enqueue wrote before Redis went
    away."""

    exit_code = 6

    def __init__(self, message: str, enqueued: Optional[Sequence["Enqueued"]] = None) -> None:
        super().__init__(message)
        self.enqueued: List["Enqueued"] = list(enqueued or [])


class NotReplicated(WasmgearError):
    """A write of jobs asked to be confirmed by replicas (the client's `min_replicas`, or the
    function's own setting, whichever is more) reached the primary, but fewer replicas
    confirmed it within the timeout, even when sent again with its call id (CLI exit code 6,
    as for Unreachable). If the primary fails now the write may be lost; it is safe to send
    again (with a `uniq` key to be sure of one copy).

    `wanted` replicas were asked for, `confirmed` did, each send waited `timeout_ms`;
    `enqueued` lists the jobs written (those of earlier calls of a bulk enqueue, and this
    call's, which are on the primary)."""

    exit_code = 6

    def __init__(self, what: str, wanted: int, confirmed: int, timeout_ms: int,
                 enqueued: Optional[Sequence["Enqueued"]] = None) -> None:
        super().__init__(
            f"{what} was written to the Redis primary, but only {confirmed} of the {wanted} "
            f"replicas asked for confirmed it within {timeout_ms} ms, even when sent again: if "
            "the primary fails now it may be lost. Check the replicas (INFO replication on the "
            "primary); the write is safe to send again (enqueue with a uniq key to be sure of "
            "one copy)"
        )
        self.what = what
        self.wanted = wanted
        self.confirmed = confirmed
        self.timeout_ms = timeout_ms
        self.enqueued: List["Enqueued"] = list(enqueued or [])
        #: The write's last reply (what the script answered), if any.
        self.reply: Any = None


class JobFailed(WasmgearError):
    """`wait` saw a job end `failed` or `expired` (CLI exit code 1). `job` is its final status
    (the first failed one when several were waited for) and `jobs` every job waited for."""

    exit_code = 1

    def __init__(self, message: str, job: "Job", jobs: Sequence["Job"] = ()) -> None:
        super().__init__(message)
        self.job = job
        self.jobs: List["Job"] = list(jobs) or [job]


class JobCancelled(WasmgearError):
    """`wait` saw a job end `cancelled` (CLI exit code 3). `job` and `jobs` as for JobFailed."""

    exit_code = 3

    def __init__(self, message: str, job: "Job", jobs: Sequence["Job"] = ()) -> None:
        super().__init__(message)
        self.job = job
        self.jobs: List["Job"] = list(jobs) or [job]


class WaitTimeout(WasmgearError):
    """`wait` gave up after its timeout; the jobs go on (CLI exit code 4). `ids` are the jobs
    that had not ended."""

    exit_code = 4

    def __init__(self, message: str, ids: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.ids: List[str] = list(ids)


class ProtocolError(WasmgearError):
    """Redis answered something this client cannot read (a corrupt record, a library of
    another version), or a Redis error that is none of the above (CLI exit code 1)."""

    exit_code = 1

    def __init__(self, message: str, detail: Any = None) -> None:
        super().__init__(message)
        self.detail = detail
