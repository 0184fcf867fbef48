"""Batches (PROTOCOL.md, "Batches"): jobs of any functions, added in one or several calls
while the batch is open, with callbacks: a job enqueued once all of them succeeded
(`on_success`) and one once all have ended (`on_complete`), each given the batch's counts and
the ids of the jobs that failed or were cancelled. As the Rust client does it
(crates/client/src/batch.rs).

A batch's keys are in a slot of its own (`wg:{batch:ID}:state`, `:members`, `:ended`).
`open_batch` opens it (`batch_open`) and puts it under the workers' watch (`batches_due
watch`). `add_to_batch` checks every job, reserves each function's numbers (`reserve`), adds
the ids to the batch (`batch_add`: so that no job can end before the batch counts it), then
writes each function's jobs with `number` and `batch`. The script that ends a job of the
batch returns `batch ID` in its `notify`; `done` (run by `operations.deliver`) counts it
(`batch_done`). A call that answers callbacks due (`batch_close`, `batch_done`) enqueues each
with the `once` key `batch:ID:KIND` (enqueued again, it is the same job) and notes it
(`batch_fired`): one callback of each kind, however many callers end the last jobs at once."""

from __future__ import annotations

import json
import secrets
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any, Dict, List, Mapping, Optional, Sequence, Set, Tuple

from redis import exceptions as rx

from ..errors import BadInput, Conflict, NotFound, ProtocolError
from ..models import BatchStatus, Callback, SubmittedBatch
from .base import Cmd, Gen, Protocol, check_function, limits, log, text
from .calls import ClientState, call, call_retrying, map_error
from .operations import _check_dependency, enqueue_call, link
from .options import JobSpec, job_spec

#: The callbacks a batch may have: the definition's field, and the kind `batch_close` and
#: `batch_done` answer (and the `once` key and `batch_fired` name).
CALLBACKS = (("on_success", "success"), ("on_complete", "complete"))
#: The largest definition `batch_open` takes (name and callbacks, as JSON), in bytes.
MAX_DEFINITION_BYTES = 65536


def check_batch_id(batch_id: Any) -> str:
    """`batch_id` if it can be a batch's id (1 to 32 hex digits), else BadInput."""
    if (not isinstance(batch_id, str) or not 1 <= len(batch_id) <= 32
            or not all(c in "0123456789abcdefABCDEF" for c in batch_id)):
        raise BadInput(f"batch id {batch_id!r} is not 1 to 32 hex digits")
    return batch_id


def batch_keys(proto: Protocol, batch_id: str) -> List[str]:
    """`wg:{batch:ID}:state`, `:members`, `:ended`: the keys of every `batch_` function but
    `batches_due` (crates/proto/src/keys.rs, `BatchKeys::all`)."""
    slot = f"batch:{batch_id}"
    return [proto.key(slot, "state"), proto.key(slot, "members"), proto.key(slot, "ended")]


def due_key(proto: Protocol) -> str:
    """`wg:{batches}:due`: the batches the workers' upkeep re-checks."""
    return proto.key("batches", "due")


def _refused(batch_id: str, error: rx.ResponseError) -> Exception:
    """A batch function's refusal as this package's error."""
    code, _, detail = str(error).partition(" ")
    if code == "NOBATCH":
        return NotFound(f"no batch {batch_id}: it was never opened, or it was forgotten")
    if code == "CONFLICT":
        return Conflict(f"batch {batch_id}: {detail}")
    if code == "BADBATCH":
        return BadInput(f"batch {batch_id}: {detail}")
    return map_error(error)


# --- The definition ---------------------------------------------------------------------


def _callback(kind: str, given: Any) -> Optional[Dict[str, Any]]:
    """A callback as the definition holds it ({"function", "data"}, `data` left out when
    None), from a Callback or a dict; None for None."""
    if given is None:
        return None
    if isinstance(given, Callback):
        function, data = given.function, given.data
    elif isinstance(given, Mapping):
        unknown = [k for k in given if k not in ("function", "data")]
        if unknown:
            raise BadInput(f"{kind}: unknown field {unknown[0]!r}: a callback is "
                           "{'function': ..., 'data': ...}")
        if "function" not in given:
            raise BadInput(f"{kind}: a callback needs its function: {{'function': ..., 'data': ...}}")
        function, data = given["function"], given.get("data")
    else:
        raise BadInput(f"{kind} {given!r} is not a callback: give wasmgear.Callback(function, "
                       "data) or {'function': ..., 'data': ...}")
    try:
        check_function(function)
    except BadInput as e:
        raise BadInput(f"{kind}: {e}") from None
    callback: Dict[str, Any] = {"function": function}
    if data is not None:
        try:
            json.dumps(data, allow_nan=False)
        except (TypeError, ValueError) as e:
            raise BadInput(f"{kind}: data is not JSON: {e}") from None
        callback["data"] = data
    return callback


def batch_definition(name: Any, on_success: Any, on_complete: Any) -> str:
    """The definition `batch_open` stores (JSON: `name`, `on_success`, `on_complete`, as the
    Rust client's BatchSpec writes it), checked; BadInput naming what is wrong."""
    if not isinstance(name, str):
        raise BadInput(f"the batch's name {name!r} is not a string")
    definition: Dict[str, Any] = {"name": name}
    for kind, given in (("on_success", on_success), ("on_complete", on_complete)):
        callback = _callback(kind, given)
        if callback is not None:
            definition[kind] = callback
    written = json.dumps(definition, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    size = len(written.encode("utf-8"))
    if size > MAX_DEFINITION_BYTES:
        raise BadInput(f"the batch's name and callbacks take {size} bytes as JSON, more than "
                       f"the {MAX_DEFINITION_BYTES} a batch may have")
    return written


# --- The jobs ---------------------------------------------------------------------------


def batch_jobs(jobs: Any) -> List[Tuple[str, JobSpec]]:
    """The jobs of a batch, each `(function, input)` or `(function, input, options)`
    (`options` the keyword arguments of `enqueue`, but `uniq`: a batch's jobs are always
    new), checked; BadInput naming the first job at fault (`job N: ...`), nothing written."""
    if isinstance(jobs, (str, bytes, Mapping)):
        raise BadInput("give the batch's jobs as a list of (function, input) or "
                       "(function, input, options) tuples")
    checked: List[Tuple[str, JobSpec]] = []
    for i, item in enumerate(jobs):
        if (not isinstance(item, (tuple, list)) or len(item) not in (2, 3)
                or (len(item) == 3 and not isinstance(item[2], Mapping))):
            raise BadInput(f"job {i + 1}: give (function, input) or (function, input, options "
                           "dict)")
        function, input = item[0], item[1]
        options: Mapping[str, Any] = item[2] if len(item) == 3 else {}
        try:
            check_function(function)
            spec = job_spec(input, options)
        except BadInput as e:
            raise type(e)(f"job {i + 1}: {e}") from None
        # A job whose key answered with another would leave its reserved number unwritten,
        # and the batch waiting on it (uniq_for, debounce and throttle go with uniq).
        if options.get("uniq") is not None:
            raise BadInput(f"job {i + 1}: a batch's jobs are always new, so they take no uniq")
        checked.append((function, spec))
    most = limits().max_batch_jobs
    if len(checked) > most:
        raise BadInput(f"{len(checked)} jobs are more than the {most} a batch may have")
    return checked


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000.0, tz=timezone.utc).isoformat()


def _check_state(proto: Protocol, jobs: Sequence[Tuple[str, JobSpec]]) -> Gen[None]:
    """What the queue's state could refuse, checked before anything is written (a refusal
    of `enqueue` after `batch_add` would leave the batch waiting on jobs never written, until
    their reservation lapses): no job's `at` passed on Redis' clock, every dependency there,
    not failed or cancelled (but those whose failure the job tolerates)."""
    if any(spec.at_ms is not None for _, spec in jobs):
        seconds, micros = yield Cmd(("TIME",))
        now = int(seconds) * 1000 + int(micros) // 1000
        for i, (_, spec) in enumerate(jobs):
            if spec.at_ms is not None and spec.at_ms < now:
                raise Conflict(f"job {i + 1}: at {_iso(spec.at_ms)} is in the past (Redis' "
                               f"clock says {_iso(now)}): give a later time")
    seen: Set[str] = set()
    for i, (_, spec) in enumerate(jobs):
        for dependency in spec.after:
            if dependency in seen or dependency in spec.tolerated:
                continue
            seen.add(dependency)
            try:
                yield from _check_dependency(proto, dependency)
            except Conflict as e:
                raise Conflict(f"job {i + 1}: {e}") from None


# --- Opening, adding, closing -----------------------------------------------------------


def open_batch(proto: Protocol, name: Any = "", on_success: Any = None,
               on_complete: Any = None) -> Gen[str]:
    """Opens a batch (a random id of 16 hex digits) and puts it under the workers' watch;
    returns its id."""
    definition = batch_definition(name, on_success, on_complete)
    batch_id = secrets.token_hex(8)
    try:
        yield from call(proto.fcall_keys("batch_open", batch_keys(proto, batch_id), definition))
    except rx.ResponseError as e:
        raise _refused(batch_id, e) from None
    yield from call(proto.fcall_keys("batches_due", [due_key(proto)], "watch", batch_id))
    return batch_id


def add_to_batch(proto: Protocol, state: ClientState, batch_id: Any,
                 jobs: Sequence[Tuple[str, JobSpec]]) -> Gen[List[str]]:
    """Adds checked jobs (see `batch_jobs`) to open batch `batch_id`: what the queue's state
    could refuse is checked first, then each function's numbers are reserved, the batch counts
    the ids (`batch_add`: NotFound for no such batch, Conflict for a closed one, nothing
    written but the reservations, which lapse), and each function's jobs are written (one call
    per `enqueue_batch` jobs) with `number` and `batch`; the dependencies across functions are
    linked last. Returns the jobs' ids, in order."""
    batch_id = check_batch_id(batch_id)
    if not jobs:
        return []
    yield from _check_state(proto, jobs)
    return (yield from _add(proto, state, batch_id, jobs))


def _add(proto: Protocol, state: ClientState, batch_id: str,
         jobs: Sequence[Tuple[str, JobSpec]]) -> Gen[List[str]]:
    """`add_to_batch` once the jobs and the queue's state are checked."""
    if not jobs:
        return []
    groups: Dict[str, List[int]] = {}
    for i, (function, _) in enumerate(jobs):
        groups.setdefault(function, []).append(i)
    ids: List[str] = [""] * len(jobs)
    most = limits().max_flow_jobs  # the most numbers one `reserve` sets aside
    for function in sorted(groups):
        members = groups[function]
        for start in range(0, len(members), most):
            chunk = members[start : start + most]
            first = int((yield from call(proto.fcall("reserve", function, len(chunk)))))
            for k, i in enumerate(chunk):
                ids[i] = f"{function}:{first + k}"
    try:
        yield from call(proto.fcall_keys("batch_add", batch_keys(proto, batch_id), *ids))
    except rx.ResponseError as e:
        raise _refused(batch_id, e) from None
    to_link: List[Tuple[str, str]] = []
    size = limits().enqueue_batch
    for function in sorted(groups):
        members = groups[function]
        for start in range(0, len(members), size):
            specs = [
                replace(jobs[i][1], named=jobs[i][1].named + (
                    ("number", ids[i].rpartition(":")[2]), ("batch", batch_id)))
                for i in members[start : start + size]
            ]
            _, links = yield from enqueue_call(proto, state, function, specs)
            to_link.extend(links)
    for dependent, dependency in to_link:
        yield from link(proto, dependent, dependency)
    return ids


def close_batch(proto: Protocol, batch_id: Any) -> Gen[None]:
    """Closes batch `batch_id` (again: nothing changes; NotFound for no such batch): no job
    can be added any more; its callbacks are enqueued now if every job has ended."""
    batch_id = check_batch_id(batch_id)
    try:
        fire = yield from call(proto.fcall_keys("batch_close", batch_keys(proto, batch_id)))
    except rx.ResponseError as e:
        raise _refused(batch_id, e) from None
    yield from fire_callbacks(proto, batch_id, [text(k) for k in fire or []])


def batch(proto: Protocol, state: ClientState, jobs: Sequence[Tuple[str, JobSpec]],
          name: Any = "", on_success: Any = None, on_complete: Any = None) -> Gen[SubmittedBatch]:
    """Opens a batch, adds `jobs` (checked: see `batch_jobs`) and closes it. The definition
    and what the queue's state could refuse are checked before the batch is opened."""
    batch_definition(name, on_success, on_complete)
    yield from _check_state(proto, jobs)
    batch_id = yield from open_batch(proto, name, on_success, on_complete)
    ids = yield from _add(proto, state, batch_id, jobs)
    yield from close_batch(proto, batch_id)
    return SubmittedBatch(batch_id, ids)


# --- Reading ----------------------------------------------------------------------------


def _flat_pairs(value: Any) -> List[Tuple[str, str]]:
    if isinstance(value, Mapping):
        return [(text(k), text(v)) for k, v in value.items()]
    flat = [text(x) for x in value or []]
    return [(flat[i], flat[i + 1]) for i in range(0, len(flat) - 1, 2)]


def parse_batch(batch_id: str, reply: Any) -> Tuple[Optional[BatchStatus], Dict[str, Any]]:
    """A `batch_get` reply as the batch's status (None: no such batch) and its definition
    (the dict `batch_open` stored; empty when it does not read)."""
    if not isinstance(reply, (list, tuple)) or len(reply) < 2:
        raise ProtocolError(f"batch_get answered {reply!r} for batch {batch_id}", reply)
    fields = dict(_flat_pairs(reply[0]))
    if not fields:
        return None, {}
    try:
        definition = json.loads(fields.get("def", ""))
    except ValueError:
        definition = None
    if not isinstance(definition, dict):
        definition = {}

    def number(name: str) -> Optional[int]:
        value = fields.get(name)
        return int(value) if value is not None and value.isdigit() else None

    failed_ids: List[str] = []
    cancelled_ids: List[str] = []
    for job_id, ended in _flat_pairs(reply[1]):
        (failed_ids if ended == "failed" else cancelled_ids).append(job_id)
    total, succeeded = number("total") or 0, number("succeeded") or 0
    failed, cancelled = number("failed") or 0, number("cancelled") or 0
    name = definition.get("name")
    status = BatchStatus(
        id=batch_id,
        name=name if isinstance(name, str) else "",
        open=fields.get("open") == "1",
        total=total,
        pending=max(total - succeeded - failed - cancelled, 0),
        succeeded=succeeded,
        failed=failed,
        cancelled=cancelled,
        failed_ids=failed_ids,
        cancelled_ids=cancelled_ids,
        on_success=fields.get("success"),
        on_complete=fields.get("complete"),
        created_ms=number("created_ms") or 0,
        ended_ms=number("ended_ms"),
    )
    return status, definition


def _read(proto: Protocol, batch_id: str) -> Gen[Tuple[Optional[BatchStatus], Dict[str, Any]]]:
    reply = yield from call(proto.fcall_keys("batch_get", batch_keys(proto, batch_id), "0"))
    return parse_batch(batch_id, reply)


def batch_status(proto: Protocol, batch_id: Any) -> Gen[BatchStatus]:
    """How batch `batch_id` stands (NotFound when there is no such batch)."""
    batch_id = check_batch_id(batch_id)
    status, _ = yield from _read(proto, batch_id)
    if status is None:
        raise NotFound(f"no batch {batch_id}: it was never opened, or it was forgotten")
    return status


# --- A job's end, and the callbacks ------------------------------------------------------


def done(proto: Protocol, batch_id: str, job_id: str, state: str) -> Gen[None]:
    """Counts the end of job `job_id` (in `state`) in batch `batch_id` (`batch_done`, once
    per job), and enqueues the callbacks that made due (`operations.deliver` runs it for a
    `batch ID` dependent in a `notify`)."""
    try:
        check_batch_id(batch_id)
    except BadInput:
        log.warning("skipping batch %r, whose id does not read", batch_id)
        return
    fire = yield from call(proto.fcall_keys("batch_done", batch_keys(proto, batch_id),
                                            job_id, state))
    yield from fire_callbacks(proto, batch_id, [text(k) for k in fire or []])


def fire_callbacks(proto: Protocol, batch_id: str, kinds: Sequence[str]) -> Gen[None]:
    """Enqueues batch `batch_id`'s callbacks `kinds` (`success`, `complete`), each with the
    `once` key `batch:ID:KIND` and the batch's outcome as its input (JSON), then notes it
    (`batch_fired`)."""
    if not kinds:
        return
    status, definition = yield from _read(proto, batch_id)
    if status is None:
        return
    for kind in kinds:
        field = next((f for f, k in CALLBACKS if k == kind), None)
        callback = definition.get(field) if field is not None else None
        if not isinstance(callback, dict):
            continue
        try:
            function = check_function(callback.get("function"))
        except BadInput:
            log.warning("batch %s: its %s callback names no function it can enqueue",
                        batch_id, kind)
            continue
        outcome = {
            "batch": batch_id,
            "name": status.name,
            "callback": kind,
            "total": status.total,
            "succeeded": status.succeeded,
            "failed": status.failed,
            "cancelled": status.cancelled,
            "failed_ids": status.failed_ids,
            "cancelled_ids": status.cancelled_ids,
            "data": callback.get("data"),
        }
        # Compact, keys sorted: the text serde_json makes of the same value.
        input = json.dumps(outcome, separators=(",", ":"), ensure_ascii=False,
                           sort_keys=True).encode("utf-8")
        job_id = yield from enqueue_once(proto, function, f"batch:{batch_id}:{kind}", input)
        yield from call(proto.fcall_keys("batch_fired", batch_keys(proto, batch_id), kind,
                                         job_id))


def enqueue_once(proto: Protocol, function: str, once: str, input: bytes) -> Gen[str]:
    """Enqueues one job of `function` with `input` and the `once` key `once` (enqueued
    again, the call answers the first job); returns its id. Sent again with the same call id
    when its reply may have been lost."""
    call_id = secrets.token_hex(12)
    reply = yield from call_retrying(
        proto.fcall("enqueue", function, 1, "call", call_id, 1, 1, "once", once, input))
    numbers = reply[0] if isinstance(reply, (list, tuple)) and reply else None
    if not numbers:
        raise ProtocolError(f"enqueue answered no job for a batch's callback ({once})", reply)
    yield Cmd(("SADD", proto.functions_key, function))
    return f"{function}:{int(numbers[0])}"
