"""Flows (PROTOCOL.md, "Flows"): a graph of named jobs of any functions, submitted in one
call, as the Rust client does it (crates/client/src/flow/).

A flow is given as the flow document the HTTP API and the CLI read
(crates/client/src/flow/document.rs)::

    {"name": "album",
     "jobs": {"a": {"function": "reverse", "input": "abc"},
              "b": {"function": "join", "after": ["a", {"job": "c", "on_failure": "ignore"}]},
              "c": {"function": "reverse", "input_json": {"n": 2}}}}

`read_flow` reads it and `check_flow` checks the whole graph before anything is written,
refusing a bad one with the Rust client's sentence (`Flow::check`), so that every producer
refuses a graph alike. `submit_flow` then reserves each function's numbers (`reserve`),
records the flow (`flow_create`), writes each function's jobs in one `enqueue` call (with
`number`, `flow` and their edges, dependencies first), a dependent's function before its
dependencies' when it can (`write_order`: the dependencies then name their dependents with
`dependent`), and last links the edges across functions that this order does not serve.
`flow_status`, `cancel_flow` and `retry_flow` read and act on a flow by its record."""

from __future__ import annotations

import base64
import binascii
import heapq
import json
import re
import time
import unicodedata
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from typing import Any, Dict, List, Mapping, Optional, Sequence, Set, Tuple

from redis import exceptions as rx

from ..errors import BadInput, Conflict, NotFound, ProtocolError, WasmgearError
from ..crypto import KeyRing
from ..models import FlowEdge, FlowJobStatus, FlowStatus, SubmittedFlow, ms_to_datetime
from .base import Cmd, Gen, Protocol, check_function, limits, log, parse_job_id, quoted, text
from .calls import ClientState, call, map_error
from .opening import opened_flow
from .operations import cancel, enqueue_call, link_many, retry
from .options import POLICIES, JobSpec, job_spec

#: The fields a job of a flow document takes (the HTTP API's job fields, its function and
#: its edges).
JOB_FIELDS = (
    "function", "input", "input_base64", "input_json", "priority", "delay_ms", "at_ms",
    "attempts", "timeout_ms", "retention_ms", "failed_retention_ms", "tags", "group", "after",
)
#: Options a flow's jobs never take (they are always new), by the name `Flow::check` gives.
REFUSED = (("uniq", "uniq"), ("once", "once"), ("tick", "a schedule's tick"),
           ("schedule", "a schedule's tick"), ("parent", "parent"))
#: The most jobs one `outcomes` call reads (PROTOCOL.md: up to 1,000).
OUTCOMES_PER_CALL = 1000
_JOB_NAME = re.compile(r"[A-Za-z0-9_.\-]+\Z")
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def _shown(value: Any) -> str:
    return quoted(value) if isinstance(value, str) else repr(value)


# --- Reading a flow document ------------------------------------------------------------


@dataclass
class FlowJob:
    """One job of a flow as read from its document: its name, function, input, the options
    for `job_spec` (`after` and `on_failure` name jobs outside the flow, by id), its edges
    to jobs of the flow, and the option a flow's job may not take, when given."""

    name: str
    function: str
    input: bytes
    options: Dict[str, Any]
    after: List[FlowEdge] = field(default_factory=list)
    refused: Optional[str] = None


@dataclass
class Flow:
    """A flow read from its document: its name and its jobs, in the order of their names."""

    name: str
    jobs: List[FlowJob]


def _unreadable(path: str, what: str) -> BadInput:
    where = f"{path}: " if path else ""
    return BadInput(f"the flow does not read: {where}{what}")


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"boolean `{str(value).lower()}`"
    if isinstance(value, int):
        return f"integer `{value}`"
    if isinstance(value, float):
        return f"floating point `{value}`"
    if isinstance(value, str):
        return f"string {quoted(value)}"
    if isinstance(value, Mapping):
        return "map"
    if isinstance(value, (list, tuple)):
        return "sequence"
    return type(value).__name__


def _whole(path: str, value: Any, low: int, high: int, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise _unreadable(path, f"invalid value: {_kind(value)}, expected {what}")
    return value


def _unknown_fields(path: str, raw: Mapping[Any, Any], known: Sequence[str],
                    also: Sequence[str] = ()) -> None:
    """Refuses a field that is neither `known` nor `also` (refused later, by name)."""
    for key in raw:
        if key not in known and key not in also:
            expected = ", ".join(f"`{k}`" for k in known)
            raise _unreadable(path, f"unknown field `{key}`, expected one of {expected}")


def read_flow(document: Any) -> Flow:
    """The flow a document describes (a dict: `name`, and `jobs` by name), or BadInput
    naming what does not read or what is wrong with a job (as the Rust client's
    `FlowDocument::into_flow`). The graph itself is checked by `check_flow`."""
    if not isinstance(document, Mapping):
        raise _unreadable("", f"invalid type: {_kind(document)}, expected a flow "
                              "(a dict with its name and its jobs by name)")
    _unknown_fields("", document, ("name", "jobs"))
    if "name" not in document:
        raise _unreadable("", "missing field `name`")
    if "jobs" not in document:
        raise _unreadable("", "missing field `jobs`")
    name, jobs = document["name"], document["jobs"]
    if not isinstance(name, str):
        raise _unreadable("name", f"invalid type: {_kind(name)}, expected a string")
    if not isinstance(jobs, Mapping):
        raise _unreadable("jobs", f"invalid type: {_kind(jobs)}, expected a map of jobs by name")
    for key in jobs:
        if not isinstance(key, str):
            raise BadInput(_job_name_refused(key))
    # In the order of their names (a JSON object read into a BTreeMap by the Rust client),
    # so that the record, the ids and the sentences are the same whoever submits the flow.
    read = []
    for job_name in sorted(jobs):
        try:
            read.append(_read_job(job_name, jobs[job_name]))
        except BadInput as e:
            if str(e).startswith("the flow does not read"):
                raise
            raise type(e)(f"job {quoted(job_name)}: {e}") from None
    return Flow(name, read)


def _read_job(name: str, raw: Any) -> FlowJob:
    path = f"jobs.{name}"
    if not isinstance(raw, Mapping):
        raise _unreadable(path, f"invalid type: {_kind(raw)}, expected a job (a dict with "
                                "its function, input and options)")
    _unknown_fields(path, raw, JOB_FIELDS, also=[n for n, _ in REFUSED])
    refused = next((label for key, label in REFUSED if raw.get(key) is not None), None)
    if "function" not in raw:
        raise _unreadable(path, "missing field `function`")
    function = check_function(raw["function"])

    given = [k for k in ("input", "input_base64", "input_json") if raw.get(k) is not None]
    if len(given) > 1:
        raise BadInput("give one of input, input_base64 and input_json, not several")
    data: bytes = b""
    if given == ["input"]:
        value = raw["input"]
        if isinstance(value, str):
            data = value.encode("utf-8")
        elif isinstance(value, (bytes, bytearray, memoryview)):
            data = bytes(value)
        else:
            raise _unreadable(f"{path}.input", f"invalid type: {_kind(value)}, expected a string")
    elif given == ["input_base64"]:
        value = raw["input_base64"]
        if not isinstance(value, str):
            raise _unreadable(f"{path}.input_base64",
                              f"invalid type: {_kind(value)}, expected a string")
        try:
            data = base64.b64decode(value.strip(), validate=True)
        except (binascii.Error, ValueError) as e:
            raise BadInput(f"input_base64 is not base64: {e}") from None
    elif given == ["input_json"]:
        try:
            # Compact, keys sorted: the text serde_json makes of the same value.
            data = json.dumps(raw["input_json"], separators=(",", ":"), ensure_ascii=False,
                              sort_keys=True, allow_nan=False).encode("utf-8")
        except (TypeError, ValueError) as e:
            raise BadInput(f"input_json is not JSON: {e}") from None

    options: Dict[str, Any] = {}
    if raw.get("priority") is not None:
        options["priority"] = _whole(f"{path}.priority", raw["priority"], -(2**31), 2**31 - 1,
                                     "i32")
    if raw.get("attempts") is not None:
        options["attempts"] = _whole(f"{path}.attempts", raw["attempts"], 0, 2**32 - 1, "u32")
    # Checked here to name the document's fields (in ms), then handed to `job_spec` exactly.
    most = limits().max_duration_ms
    for key, option, least in (("timeout_ms", "timeout", 1),
                               ("retention_ms", "retention", limits().min_retention_ms),
                               ("failed_retention_ms", "failed_retention", 0),
                               ("delay_ms", "delay", 0)):
        if raw.get(key) is not None:
            ms = _whole(f"{path}.{key}", raw[key], 0, 2**64 - 1, "u64")
            if not least <= ms <= most:
                raise BadInput(f"{key} {ms} is out of range {least}..={most} (ms)")
            options[option] = timedelta(milliseconds=ms)
    if raw.get("at_ms") is not None:
        ms = _whole(f"{path}.at_ms", raw["at_ms"], 0, 2**64 - 1, "u64")
        if ms == 0:
            raise BadInput("at_ms 0: the time to run at is not after 1970")
        if ms > time.time() * 1000 + most:
            raise Conflict(f"at_ms {ms}: the time to run at is more than 10 years ahead; "
                           "give a nearer one")
        options["at"] = _EPOCH + timedelta(milliseconds=ms)
    tags = raw.get("tags")
    if tags is not None:
        if not isinstance(tags, (list, tuple)):
            raise _unreadable(f"{path}.tags", f"invalid type: {_kind(tags)}, expected a sequence")
        options["tags"] = list(tags)
    group = raw.get("group")
    if group is not None:
        if not isinstance(group, str):
            raise _unreadable(f"{path}.group", f"invalid type: {_kind(group)}, expected a string")
        options["group"] = group

    after_raw = raw.get("after")
    if after_raw is None:
        after_raw = []
    if not isinstance(after_raw, (list, tuple)):
        raise _unreadable(f"{path}.after", f"invalid type: {_kind(after_raw)}, expected a sequence")
    outside: List[str] = []
    outside_policies: Dict[str, str] = {}
    edges: List[FlowEdge] = []
    for k, entry in enumerate(after_raw):
        where = f"{path}.after[{k}]"
        job: Any = entry
        stated: Any = "cancel"
        if isinstance(entry, Mapping):
            _unknown_fields(where, entry, ("job", "on_failure"))
            job = entry.get("job")
            if not isinstance(job, str):
                raise _unreadable(where, "expected a job's name, or {\"job\": ..., \"on_failure\": ...}")
            if entry.get("on_failure") is not None:
                stated = entry["on_failure"]
            if stated not in POLICIES:
                raise BadInput(f"on_failure {_shown(stated)} is none of cancel, ignore and continue")
        elif not isinstance(entry, str):
            raise _unreadable(where, f"invalid type: {_kind(entry)}, expected a job's name, or "
                                     "{\"job\": ..., \"on_failure\": ...}")
        policy = str(stated)
        # A name has no ':'; the id of a job outside the flow has.
        if ":" in job:
            try:
                function_of, number = parse_job_id(job)
            except BadInput:
                raise BadInput(f"after: {quoted(job)} is not a job id (FUNCTION:NUMBER)") from None
            dependency = f"{function_of}:{number}"
            if policy != "cancel":
                outside_policies[dependency] = policy
            outside.append(dependency)
        else:
            edges.append(FlowEdge(job, policy))
    if outside:
        options["after"] = outside
    if outside_policies:
        options["on_failure"] = outside_policies
    return FlowJob(name, function, data, options, edges, refused)


def _job_name_refused(name: Any) -> str:
    return (f"job name {_shown(name)} must be 1 to {limits().max_flow_name_bytes} letters, "
            "digits, '_', '-' or '.'")


# --- Checking the graph -----------------------------------------------------------------


def check_flow(flow: Flow) -> Tuple[List[int], List[JobSpec]]:
    """Checks the whole graph, naming the first thing wrong in one sentence, the Rust
    client's (`Flow::check`): the flow's name, a job's name (or one given twice), an option
    a flow's job may not take, an option out of range or an input too large, an edge to a
    job the flow does not have, to itself or twice, too many dependencies, more than 10,000
    jobs, a cycle. Returns the jobs' positions in an order where every job comes after those
    it waits on, and each job's checked input and options (its edges not yet among them)."""
    most_name = limits().max_flow_name_bytes
    if (not flow.name or len(flow.name.encode("utf-8")) > most_name
            or any(unicodedata.category(c) == "Cc" for c in flow.name)):
        raise BadInput(f"the flow's name {quoted(flow.name)} must be 1 to {most_name} bytes "
                       "without control characters")
    if not flow.jobs:
        raise BadInput(f"flow {quoted(flow.name)} has no jobs")
    most_jobs = limits().max_flow_jobs
    if len(flow.jobs) > most_jobs:
        raise BadInput(f"flow {quoted(flow.name)} has {len(flow.jobs)} jobs, more than the "
                       f"{most_jobs} a flow may have")
    position: Dict[str, int] = {}
    for i, job in enumerate(flow.jobs):
        if (not isinstance(job.name, str) or not _JOB_NAME.match(job.name)
                or len(job.name) > most_name):
            raise BadInput(_job_name_refused(job.name))
        if job.name in position:
            raise BadInput(f"job {quoted(job.name)} is named twice")
        position[job.name] = i
    specs = [_check_job(job, position) for job in flow.jobs]
    return topological_order(flow.jobs, position), specs


def _check_job(job: FlowJob, position: Mapping[str, int]) -> JobSpec:
    name = quoted(job.name)
    if job.refused is not None:
        raise BadInput(f"job {name}: a flow's jobs are always new, so they take no {job.refused}")
    try:
        spec = job_spec(job.input, job.options)
    except BadInput as e:
        raise type(e)(f"job {name}: {e}") from None
    seen = set()
    for edge in job.after:
        if edge.job not in position:
            raise BadInput(f"job {name} waits on {quoted(edge.job)}, which the flow does not have")
        if edge.job == job.name:
            raise BadInput(f"job {name} waits on itself")
        if edge.job in seen:
            raise BadInput(f"job {name} waits on {quoted(edge.job)} twice")
        seen.add(edge.job)
    dependencies = len(job.after) + len(spec.after)
    if dependencies > limits().max_dependencies:
        raise BadInput(f"job {name} has {dependencies} dependencies, more than the limit of "
                       f"{limits().max_dependencies}")
    return spec


def topological_order(jobs: Sequence[FlowJob], position: Mapping[str, int]) -> List[int]:
    """The jobs' positions with every job after those it waits on (Kahn's algorithm, stable:
    jobs keep their given order where the edges allow), or BadInput naming a cycle."""
    waits = [0] * len(jobs)
    dependents: List[List[int]] = [[] for _ in jobs]
    for i, job in enumerate(jobs):
        for edge in job.after:
            waits[i] += 1
            dependents[position[edge.job]].append(i)
    ready = [i for i in range(len(jobs)) if waits[i] == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for d in dependents[i]:
            waits[d] -= 1
            if waits[d] == 0:
                heapq.heappush(ready, d)
    stuck = next((i for i in range(len(jobs)) if waits[i] > 0), None)
    if stuck is None:
        return order
    # Follow unfinished dependencies from a stuck job until one repeats: a cycle.
    path = [stuck]
    on_path = {stuck: 0}
    while True:
        last = path[-1]
        following = next((position[e.job] for e in jobs[last].after if waits[position[e.job]] > 0),
                         stuck)
        if following in on_path:
            names = [jobs[i].name for i in path[on_path[following]:]] + [jobs[following].name]
            raise BadInput(f"the flow has a cycle: {' → '.join(names)} (each waits on the next)")
        on_path[following] = len(path)
        path.append(following)


# --- Submitting -------------------------------------------------------------------------


def flow_keys(proto: Protocol) -> List[str]:
    """`wg:{flows}:seq`, `:records`, `:due`: the keys of `flow_create`."""
    return [proto.key("flows", "seq"), proto.key("flows", "records"), proto.key("flows", "due")]


def _iso(ms: int) -> str:
    when = ms_to_datetime(ms)
    return "" if when is None else when.isoformat()


def submit_flow(proto: Protocol, state: ClientState, document: Any,
                trace: Tuple[Tuple[str, str], ...] = ()) -> Gen[SubmittedFlow]:
    """Checks the flow of `document` whole (nothing is written when it is refused), then
    reserves each function's numbers, records the flow, writes each function's jobs in one
    atomic call, those of a dependent's function before its dependencies' when it can, and
    links the edges across functions that this order does not serve. A failure after the
    first write (Redis lost halfway) cancels what was written, as far as it can: a job left
    waiting on one never written is cancelled by the links' safety net once the reservation
    of its number lapses (10 minutes). `trace` (a checked trace context's named options, see
    `propagation.check_trace`) is carried by every job; without one, each call's own."""
    flow = read_flow(document)
    order, specs = check_flow(flow)
    jobs = flow.jobs
    if any(spec.at_ms is not None for spec in specs):
        # The script refuses a time in the past too, but only once the flow is recorded.
        seconds, micros = yield Cmd(("TIME",))
        now = int(seconds) * 1000 + int(micros) // 1000
        for job, spec in zip(jobs, specs):
            if spec.at_ms is not None and spec.at_ms < now:
                raise Conflict(f"job {quoted(job.name)}: at {_iso(spec.at_ms)} is in the past "
                               f"(Redis' clock says {_iso(now)}): give a later time")
    # Each function's jobs, every one after those of the function it waits on.
    groups: Dict[str, List[int]] = {}
    for i in order:
        groups.setdefault(jobs[i].function, []).append(i)
    ids: List[str] = [""] * len(jobs)
    for function in sorted(groups):
        members = groups[function]
        first = int((yield from call(proto.fcall("reserve", function, len(members)))))
        for k, i in enumerate(members):
            ids[i] = f"{function}:{first + k}"
    position = {job.name: i for i, job in enumerate(jobs)}
    stored = {
        "name": flow.name,
        "jobs": [_stored_job(jobs[i], ids[i]) for i in order],
    }
    record = json.dumps(stored, separators=(",", ":"), ensure_ascii=False)
    try:
        reply = yield from call(proto.fcall_keys("flow_create", flow_keys(proto), record))
    except rx.ResponseError as e:
        code, _, detail = str(e).partition(" ")
        if code == "BADFLOW":
            raise BadInput(detail) from None
        raise map_error(e) from None
    flow_id = int(reply[0])
    try:
        yield from _write_flow(proto, state, flow, flow_id, groups, specs, ids, position,
                               trace)
    except (WasmgearError, rx.RedisError, OSError) as error:
        log.warning("the submit of flow %d failed halfway (%s); cancelling what was written",
                    flow_id, error)
        try:
            yield from cancel_flow(proto, flow_id)
        except (WasmgearError, rx.RedisError, OSError) as cancel_error:
            log.warning("cannot cancel the jobs of flow %d, whose submit failed: %s",
                        flow_id, cancel_error)
        raise
    return SubmittedFlow(flow_id, {job.name: ids[i] for i, job in enumerate(jobs)})


def _stored_job(job: FlowJob, job_id: str) -> Dict[str, Any]:
    """A job as the flow's record keeps it: name, id and edges (none when it has none)."""
    stored: Dict[str, Any] = {"name": job.name, "id": job_id}
    if job.after:
        stored["after"] = [{"job": e.job, "on_failure": e.on_failure} for e in job.after]
    return stored


def _write_flow(
    proto: Protocol, state: ClientState, flow: Flow, flow_id: int, groups: Mapping[str, List[int]],
    specs: Sequence[JobSpec], ids: Sequence[str], position: Mapping[str, int],
    trace: Tuple[Tuple[str, str], ...] = (),
) -> Gen[None]:
    """Writes the flow's jobs, one call per function, a function after those whose jobs wait
    on its jobs (see `write_order`): such a job is written naming its dependents, which
    exist already, with `dependent`, so that nothing is left to link. The edges the order
    cannot serve (functions waiting on each other), and those to jobs outside the flow, are
    linked at the end, one `link` call per function and per 1,000 edges (`link_many`)."""
    jobs = flow.jobs
    edges = [(position[edge.job], i) for i, job in enumerate(jobs) for edge in job.after]
    layers = write_order(jobs, edges)
    layer_of = {function: n for n, layer in enumerate(layers) for function in layer}
    # The edges whose dependent is written first: named on the dependency's job.
    dependents: List[List[str]] = [[] for _ in jobs]
    preset: Set[Tuple[str, str]] = set()
    for dependency_at, dependent_at in edges:
        of, by = jobs[dependency_at].function, jobs[dependent_at].function
        if of != by and layer_of[by] < layer_of[of]:
            dependents[dependency_at].append(ids[dependent_at])
            preset.add((ids[dependent_at], ids[dependency_at]))
    to_link: List[Tuple[str, str]] = []
    # The functions of a layer one after the other: the Rust client writes them in
    # parallel, but any order within a layer serves the same edges.
    for layer in layers:
        for function in layer:
            chunk = []
            for i in groups[function]:
                job = jobs[i]
                options = dict(job.options)
                after = list(options.get("after") or [])
                policies = dict(options.get("on_failure") or {})
                for edge in job.after:
                    dependency = ids[position[edge.job]]
                    after.append(dependency)
                    if edge.on_failure != "cancel":
                        policies[dependency] = edge.on_failure
                options["after"], options["on_failure"] = after, policies
                spec = job_spec(job.input, options) if job.after else specs[i]
                number = ids[i].rpartition(":")[2]
                chunk.append(replace(spec, named=spec.named + trace + (
                    ("number", number), ("flow", str(flow_id)))
                    + tuple(("dependent", dependent) for dependent in dependents[i])))
            _, links = yield from enqueue_call(proto, state, function, chunk)
            # The edges a dependency's `dependent` option recorded need no `link`.
            to_link.extend(pair for pair in links if pair not in preset)
    yield from link_many(proto, to_link)


def write_order(jobs: Sequence[FlowJob], edges: Sequence[Tuple[int, int]]) -> List[List[str]]:
    """The order the functions of a flow's `jobs` are written in, as layers (the Rust
    client's `write_order`): a function once every function with jobs waiting on its jobs
    (`edges`, (dependency, dependent) positions) is written, so that its jobs can name their
    dependents; functions waiting on each other are broken up by writing the first of them
    (by name) alone. Within a layer the functions go by name."""
    waited_by: Dict[str, Set[str]] = {job.function: set() for job in jobs}
    for dependency, dependent in edges:
        of, by = jobs[dependency].function, jobs[dependent].function
        if of != by:
            waited_by[of].add(by)
    written: Set[str] = set()
    left = sorted(waited_by)
    layers = []
    while left:
        layer = [function for function in left if waited_by[function] <= written] or left[:1]
        written.update(layer)
        left = [function for function in left if function not in written]
        layers.append(layer)
    return layers


# --- Reading and acting on a flow -------------------------------------------------------


def check_flow_id(flow_id: Any) -> int:
    """`flow_id` if it can be a flow's id (a whole number above 0), else BadInput."""
    if (not isinstance(flow_id, int) or isinstance(flow_id, bool)
            or not 1 <= flow_id <= 2**64 - 1):
        raise BadInput(f"flow id {flow_id!r} is not a whole number above 0")
    return flow_id


def parse_flow_record(flow_id: int, raw: Any) -> Tuple[int, str, List[Tuple[str, str, List[FlowEdge]]]]:
    """A record as `flow_get` answers it (`CREATED_MS|JSON`): when the flow was created,
    its name, and its jobs (name, id, edges) in the order written."""
    def corrupt(reason: str) -> ProtocolError:
        return ProtocolError(f"flow {flow_id} has a corrupt record: {reason}", raw)

    created, bar, body = text(raw).partition("|")
    if not bar:
        raise corrupt("it has no creation time")
    if not created.isdigit():
        raise corrupt(f"its creation time {quoted(created)} is not a number")
    try:
        value = json.loads(body)
        name = value["name"]
        jobs = []
        for job in value["jobs"]:
            edges = [FlowEdge(str(e["job"]), str(e.get("on_failure") or "cancel"))
                     for e in job.get("after") or []]
            function, number = parse_job_id(str(job["id"]))
            jobs.append((str(job["name"]), f"{function}:{number}", edges))
    except (ValueError, KeyError, TypeError, AttributeError, BadInput) as e:
        raise corrupt(str(e)) from None
    if not isinstance(name, str):
        raise corrupt("its name is not a string")
    return int(created), name, jobs


def read_record(proto: Protocol, flow_id: Any) -> Gen[Tuple[int, str, List[Tuple[str, str, List[FlowEdge]]]]]:
    """Flow `flow_id`'s record, or NotFound."""
    flow_id = check_flow_id(flow_id)
    raw = yield from call(proto.fcall_keys("flow_get", [proto.key("flows", "records")], flow_id))
    if raw is None:
        raise NotFound(f"no flow {flow_id}: it was never submitted, or its jobs' retention is over")
    return parse_flow_record(flow_id, raw)


def outcomes(proto: Protocol, ids: Sequence[str]) -> Gen[List[Tuple[str, int, Optional[str]]]]:
    """How each of `ids` stands, in their order (`outcomes`, per function, at most
    OUTCOMES_PER_CALL a call): state (`missing` when not kept), output size, error."""
    by_function: Dict[str, List[int]] = {}
    for i, job_id in enumerate(ids):
        by_function.setdefault(parse_job_id(job_id)[0], []).append(i)
    found: List[Optional[Tuple[str, int, Optional[str]]]] = [None] * len(ids)
    for function in sorted(by_function):
        positions = by_function[function]
        for start in range(0, len(positions), OUTCOMES_PER_CALL):
            chunk = positions[start : start + OUTCOMES_PER_CALL]
            numbers = [parse_job_id(ids[i])[1] for i in chunk]
            reply = yield from call(proto.fcall("outcomes", function, len(numbers), *numbers))
            if not isinstance(reply, list) or len(reply) != len(chunk):
                raise ProtocolError(f"outcomes answered {len(reply or [])} jobs of {function} "
                                    f"for {len(chunk)} asked", reply)
            for i, entry in zip(chunk, reply):
                state, size, error = (list(entry) + [None, None, None])[:3]
                found[i] = (text(state), int(size or 0),
                            None if error is None or error is False else text(error))
    return [f for f in found if f is not None]


def flow_status(proto: Protocol, flow_id: Any) -> Gen[FlowStatus]:
    """Flow `flow_id` and how its jobs stand (NotFound when there is no such flow)."""
    created_ms, name, jobs = yield from read_record(proto, flow_id)
    states = yield from outcomes(proto, [job_id for _, job_id, _ in jobs])
    return FlowStatus(
        id=int(flow_id),
        name=name,
        created_ms=created_ms,
        jobs=[FlowJobStatus(job_name, job_id, edges, state, size, error)
              for (job_name, job_id, edges), (state, size, error) in zip(jobs, states)],
    )


def opened_flow_status(proto: Protocol, keys: Optional[KeyRing], flow_id: Any) -> Gen[FlowStatus]:
    """`flow_status` as a reader should see it, read afresh and opened once (`opened_flow`):
    with `keys`, its jobs' sealed errors opened and their sealed outputs' sizes as they open;
    without, the sealed errors said to be sealed."""
    status = yield from flow_status(proto, flow_id)
    return (yield from opened_flow(proto, keys, status))


def cancel_flow(proto: Protocol, flow_id: Any) -> Gen[int]:
    """Cancels every unfinished job of flow `flow_id` (as `cancel`: a running one is asked
    to stop, and its children are cancelled). Returns how many were unfinished."""
    status = yield from flow_status(proto, flow_id)
    unfinished = [job.id for job in status.jobs if not job.ended]
    # Dependents first: a job whose dependency is cancelled before it may be let run by an
    # `ignore` or `continue` edge.
    for job_id in reversed(unfinished):
        try:
            yield from cancel(proto, job_id)
        except NotFound:
            pass
    return len(unfinished)


def retry_flow(proto: Protocol, flow_id: Any) -> Gen[List[str]]:
    """Runs flow `flow_id`'s failed, cancelled and expired jobs again in the record's order,
    dependencies first (a job cancelled because its dependency failed waits for it again);
    succeeded jobs keep their outputs. Returns the ids of the jobs run again."""
    status = yield from flow_status(proto, flow_id)
    retried = []
    for job in status.jobs:
        if job.state in ("failed", "cancelled", "expired") and (yield from retry(proto, job.id)):
            retried.append(job.id)
    return retried
