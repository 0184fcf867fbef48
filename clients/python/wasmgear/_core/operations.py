"""The operations of both clients, each a generator: enqueue, look up (a job's status, log
and checkpoint), cancel, retry, list the queues."""

from __future__ import annotations

import re
import secrets
from dataclasses import replace
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

from redis import exceptions as rx

from ..errors import (BadInput, Conflict, EncryptionError, NotFound, NotReplicated, ProtocolError,
                      Unreachable)
from ..models import CancelResult, Enqueued, Job, QueueInfo, ms_to_datetime
from . import propagation
from .calls import ClientState, call, map_error
from .opening import sealed
from .options import JobSpec, check_flag
from .base import Cmd, Gen, Protocol, check_function, limits, log, parse_job_id, text
from .records import _list, parse_record
from .replication import invoke_confirmed, reply_setting

_JOB_IN_BATCH_RE = re.compile(r"^job (\d+):")
#: The most (dependent, dependency) pairs one `link` call carries (PROTOCOL.md: 1 to 1,000).
LINKS_PER_CALL = 1000


def get(proto: Protocol, job_id: str, *, watch: bool = False) -> Gen[Optional[Job]]:
    """Job `job_id`'s status, or None when there is no such job. With `watch`, read by
    `wg2_watch` (a write) instead of `wg2_get`: the same answer, and the job is marked as
    waited on, so that its `finish` event carries its record and a small output."""
    function, number = parse_job_id(job_id)
    name = "watch" if watch else "get"
    reply = yield from call(proto.fcall(name, function, number))
    if not reply:
        return None
    raw, output = reply[0], reply[1] if len(reply) > 1 else None
    return parse_record(job_id, raw, output)


def status(proto: Protocol, job_id: str, *, watch: bool = False) -> Gen[Job]:
    """Job `job_id`'s status (NotFound when there is no such job); `watch` as for `get`."""
    job = yield from get(proto, job_id, watch=watch)
    if job is None:
        raise NotFound(f"no such job {job_id}: never enqueued, or its retention is over")
    return job


def logs(proto: Protocol, job_id: str) -> Gen[str]:
    function, number = parse_job_id(job_id)
    exists = yield Cmd(("HEXISTS", proto.key(function, "jobs"), number))
    log = yield Cmd(("HGET", proto.key(function, "logs"), number))
    if not exists:
        raise NotFound(f"no such job {job_id}: never enqueued, or its retention is over")
    return "" if log is None else text(log)


def deliver(proto: Protocol, notify: List[Any]) -> Gen[None]:
    """Runs `resolve` for each (dependent, dependency, state) triple of `notify` and for
    those its replies name in turn (links.rs). A dependent `batch ID` is the job's batch:
    `batch_done` counts the job's end there (and enqueues the callbacks that made due)
    instead of `resolve`, then `told` lets the job go; a dependent `release ID` is a
    dependency the (ended) job no longer holds: `told` on its function."""
    # Imported here: the batches module imports this one.
    from .batches import done as batch_done

    todo = [text(x) for x in notify or []]
    while len(todo) >= 3:
        state = todo.pop()
        dependency = todo.pop()
        dependent = todo.pop()
        more: Any = []
        if dependent.startswith("batch "):
            yield from batch_done(proto, dependent[len("batch "):], dependency, state)
            told_pair = (dependency, dependent)
        elif dependent.startswith("release "):
            told_pair = (dependent[len("release "):], dependency)
        else:
            try:
                function, number = parse_job_id(dependent)
            except BadInput:
                continue
            more = yield from call(proto.fcall("resolve", function, number, dependency, state))
            # (The dependency holds for the dependent until it has ended.)
            told_pair = None
        if told_pair:
            held, holder = told_pair
            try:
                held_function, held_number = parse_job_id(held)
            except BadInput:
                held_function = ""
            if held_function:
                yield from call(proto.fcall("told", held_function, held_number, holder))
        todo.extend(text(x) for x in more or [])


def link(proto: Protocol, dependent: str, dependency: str) -> Gen[None]:
    """Links `dependent` to `dependency` (a job of another function); tells it at once when
    the dependency has already ended."""
    yield from link_many(proto, [(dependent, dependency)])


def link_many(proto: Protocol, pairs: Sequence[Tuple[str, str]]) -> Gen[None]:
    """Links each (dependent, dependency) pair (the dependency a job of another function
    than its dependent's) as the Rust client's `links::link_many` does: one `link` call per
    dependencies' function and per LINKS_PER_CALL pairs, so that a fan-in costs one call,
    not one per edge; then tells the dependents of those that have already ended, together."""
    by_function: Dict[str, List[Tuple[str, str, int]]] = {}
    for dependent, dependency in pairs:
        function, number = parse_job_id(dependency)
        by_function.setdefault(function, []).append((dependent, dependency, number))
    ended: List[str] = []
    for function in sorted(by_function):
        linked = by_function[function]
        for start in range(0, len(linked), LINKS_PER_CALL):
            chunk = linked[start : start + LINKS_PER_CALL]
            args = [arg for dependent, _, number in chunk for arg in (number, dependent)]
            reply = yield from call(proto.fcall("link", function, *args))
            # One pair is answered with its state alone, several with the list of them.
            states = [reply] if len(chunk) == 1 else list(reply or [])
            if len(states) != len(chunk):
                raise ProtocolError(f"link answered {len(states)} states for {len(chunk)} "
                                    f"pairs of {function}", reply)
            for (dependent, dependency, _), state in zip(chunk, states):
                if text(state) != "pending":
                    ended += [dependent, dependency, text(state)]
    if ended:
        yield from deliver(proto, ended)


def _check_dependency(proto: Protocol, dependency: str) -> Gen[None]:
    job = yield from get(proto, dependency)
    if job is None:
        raise Conflict(
            f"dependency {dependency} does not exist (never enqueued, or its retention is over)"
        )
    if job.state in ("failed", "cancelled", "expired"):
        raise Conflict(
            f"dependency {dependency} has already {job.state}, so the job could never run"
        )


def _iso(ms: int) -> str:
    when = ms_to_datetime(ms)
    return "" if when is None else when.isoformat()


def register(proto: Protocol, state: ClientState, function: str) -> Gen[None]:
    """Lists `function` in the directory of functions (once per client)."""
    with state.lock:
        if function in state.registered:
            return
    yield Cmd(("SADD", proto.functions_key, function))
    with state.lock:
        state.registered.add(function)


def enqueue(
    proto: Protocol, state: ClientState, function: str, specs: List[JobSpec]
) -> Gen[List[Enqueued]]:
    """Enqueues checked jobs of one function: one atomic call per `enqueue_batch` jobs (the manifest's limits), each with a
    fresh call id, sent again with the same id when its reply may have been lost."""
    check_function(function)
    if not specs:
        return []
    batch = limits().enqueue_batch
    several = len(specs) > batch
    # Dependencies in other functions are checked here, those in `function` by the script;
    # when the batch takes several calls, those too, so that a later call is not refused
    # after earlier ones were written. Those whose failure the job tolerates (`on_failure`
    # ignore or continue) are not checked, as in the Rust client.
    seen: Set[str] = set()
    for spec in specs:
        for dependency in spec.after:
            if dependency in seen or dependency in spec.tolerated:
                continue
            seen.add(dependency)
            if several or parse_job_id(dependency)[0] != function:
                yield from _check_dependency(proto, dependency)
    if any(spec.at_ms is not None for spec in specs):
        # The script refuses a time in the past too; checked here first to name the option
        # (and so that a batch of several calls is refused before its first call).
        seconds, micros = yield Cmd(("TIME",))
        now = int(seconds) * 1000 + int(micros) // 1000
        for i, spec in enumerate(specs):
            if spec.at_ms is not None and spec.at_ms < now:
                where = f"job {i + 1} of the batch: " if len(specs) > 1 else ""
                raise Conflict(
                    f"{where}at {_iso(spec.at_ms)} is in the past "
                    f"(Redis' clock says {_iso(now)}): give a later time"
                )
    done: List[Enqueued] = []
    for start in range(0, len(specs), batch):
        chunk = specs[start : start + batch]
        enqueued, to_link = yield from enqueue_call(proto, state, function, chunk, start, done)
        for dependent, dependency in to_link:
            yield from link(proto, dependent, dependency)
        done.extend(enqueued)
    return done


def enqueue_call(
    proto: Protocol, state: ClientState, function: str, chunk: Sequence[JobSpec],
    start: int = 0, done: Sequence[Enqueued] = (),
) -> Gen[Tuple[List[Enqueued], List[Tuple[str, str]]]]:
    """Writes `chunk` (checked jobs of `function`) in one atomic `enqueue` call with a fresh
    call id, sent again with the same id when its reply may have been lost, and has it
    confirmed by the replicas `state.min_replicas` (or the function's own setting) asks for
    (NotReplicated when they fall short: see `replication.invoke_confirmed`). Returns the jobs,
    and the links to dependencies in other functions the caller must make (dependent,
    dependency). `start` is the position of the chunk's first job in a bulk enqueue and
    `done` what earlier calls of it wrote (for the errors).

    The call is made in its `send FUNCTION` span when the OpenTelemetry API is there (see
    `propagation.producer`), and the jobs that name no trace context carry its context.

    With keys (`state.keys`), the inputs are sealed when every input is (`encrypt_all`) or
    the function is known to take only sealed ones; refused (`ENCRYPT`: the function stores
    only encrypted input, and the refusal wrote nothing), the function is remembered and the
    jobs go again, sealed. Without keys, that refusal is an EncryptionError."""
    with propagation.producer(function, len(chunk)) as carried:
        if carried:
            chunk = [spec if propagation.names_trace(spec.named)
                     else replace(spec, named=spec.named + carried) for spec in chunk]
        seal = state.seals(function)
        try:
            return (yield from _send_call(proto, state, function, chunk, start, done, seal))
        except EncryptionError:
            if seal or state.keys is None:
                raise
        state.note_sealed(function)
        return (yield from _send_call(proto, state, function, chunk, start, done, True))


def _send_call(
    proto: Protocol, state: ClientState, function: str, chunk: Sequence[JobSpec],
    start: int, done: Sequence[Enqueued], seal: bool = False,
) -> Gen[Tuple[List[Enqueued], List[Tuple[str, str]]]]:
    """`enqueue_call` within its span, the inputs sealed if `seal` (see `opening.sealed`)."""
    if seal and state.keys is not None:
        chunk = yield from sealed(proto, state.keys, function, chunk)
    call_id = secrets.token_hex(12)
    acked = state.take_answered(function)
    args: List[Any] = [1 + len(acked), "call", call_id]
    for old in acked:
        args += ["acked", old]
    args.append(len(chunk))
    for spec in chunk:
        args.append(len(spec.named))
        for name, value in spec.named:
            args += [name, value]
        args.append(spec.input)
    if len(chunk) == 1:
        what = f"the enqueue of a job of {function}"
    else:
        what = f"the enqueue of {len(chunk)} jobs of {function}"
    try:
        reply = yield from invoke_confirmed(proto.fcall("enqueue", function, *args),
                                            lambda: what, state.min_replicas, reply_setting)
    except NotReplicated as e:
        # Written, but not confirmed by enough replicas: say which jobs were written.
        state.note_answered(function, call_id)
        if e.reply is not None:
            e.enqueued = list(done) + _enqueued(function, chunk, e.reply)[0]
            yield from register(proto, state, function)
        else:
            e.enqueued = list(done)
        raise
    except rx.ResponseError as e:
        state.give_back(function, acked)
        error = map_error(e)
        if isinstance(error, BadInput):
            detail = str(error)
            match = _JOB_IN_BATCH_RE.match(detail)
            if match and start:
                detail = f"job {int(match.group(1)) + start}:" + detail[match.end():]
            raise type(error)(detail, done) from None
        raise error from None
    except rx.RedisError as e:
        state.give_back(function, acked)
        error = map_error(e)
        if isinstance(error, Unreachable):
            error.enqueued = list(done)
        raise error from None
    state.note_answered(function, call_id)
    enqueued, to_link = _enqueued(function, chunk, reply)
    yield from register(proto, state, function)
    return enqueued, to_link


def _enqueued(function: str, chunk: Sequence[JobSpec],
              reply: Any) -> Tuple[List[Enqueued], List[Tuple[str, str]]]:
    """The jobs an `enqueue` reply names (`{numbers, created, links, min_replicas}`), and the
    links to dependencies in other functions it asks for (dependent, dependency)."""
    numbers, created, links = reply[0] or [], text(reply[1] or ""), reply[2] or []
    enqueued = [
        Enqueued(f"{function}:{int(number)}", created[i : i + 1] == "1")
        for i, number in enumerate(numbers)
    ]
    if len(enqueued) != len(chunk):
        raise ProtocolError(
            f"enqueue answered {len(enqueued)} job numbers for {len(chunk)} jobs", reply
        )
    links = [text(x) for x in links]
    to_link: List[Tuple[str, str]] = []
    for k in range(0, len(links) - 1, 2):
        position = int(links[k])
        if not 1 <= position <= len(enqueued):
            raise ProtocolError("enqueue answered a link for a job it was not given", reply)
        to_link.append((enqueued[position - 1].id, links[k + 1]))
    return enqueued, to_link


def cancel(proto: Protocol, job_id: str) -> Gen[CancelResult]:
    """Cancels job `job_id` (`cancel_one`), then its children and theirs (`cancel_children`),
    whatever became of the job itself: what the Rust client's `Client::cancel` does. The
    result is the job's own. Safe to repeat: should Redis fail half-way, cancelling the job
    again finishes the work."""
    outcome = yield from cancel_one(proto, job_id)
    yield from cancel_children(proto, job_id)
    return outcome


def cancel_one(proto: Protocol, job_id: str) -> Gen[CancelResult]:
    """Cancels job `job_id` alone (`wg2_cancel`), telling the dependents it names."""
    function, number = parse_job_id(job_id)
    reply = yield from call(proto.fcall("cancel", function, number))
    changed, word, notify = int(reply[0]), text(reply[1]), reply[2] or []
    yield from deliver(proto, notify)
    if changed == 1 and word == "cancelled":
        return CancelResult(job_id, "cancelled", "cancelled")
    if changed == 1:
        return CancelResult(job_id, "stopping", "running")
    if word == "missing":
        raise NotFound(f"no such job {job_id}: never enqueued, or its retention is over")
    return CancelResult(job_id, "already-ended", word)


def cancel_children(proto: Protocol, job_id: str) -> Gen[None]:
    """Cancels the children of job `job_id` (the ids its record lists in `children`), their
    children, and so on down: each with one `cancel` (a child that no longer exists is
    skipped; one that has ended is left as it is, its own children still cancelled), then its
    record read for its children. Each job is visited once however often it is listed, so a
    cycle in hand-made records ends; at most `max_children` children of one job are read."""
    function, number = parse_job_id(job_id)
    top = f"{function}:{number}"
    seen: Set[str] = {top}
    todo: List[str] = [top]
    while todo:
        parent = todo.pop()
        job = yield from get(proto, parent)
        if job is None:
            continue
        children = _list(job.record.get("children"))
        most = limits().max_children
        if len(children) > most:
            log.warning("job %s lists %d children, more than a job may have (%d): cancelling "
                        "the first %d only", parent, len(children), most, most)
            children = children[:most]
        for child in children:
            try:
                child_function, child_number = parse_job_id(child)
            except BadInput:
                continue
            child = f"{child_function}:{child_number}"
            if child in seen:
                continue
            seen.add(child)
            try:
                yield from cancel_one(proto, child)
            except NotFound:
                continue
            todo.append(child)


def checkpoint(proto: Protocol, job_id: str) -> Gen[Optional[bytes]]:
    """The checkpoint job `job_id` keeps for its next attempt to resume from
    (`wg2_checkpoint_get`), or None: it never saved one, it succeeded, a retry with `fresh`
    dropped it, or the job is gone."""
    function, number = parse_job_id(job_id)
    data = yield from call(proto.fcall("checkpoint_get", function, number))
    return None if data is None else bytes(data)


def job_input(proto: Protocol, job_id: str) -> Gen[Optional[bytes]]:
    """Job `job_id`'s input while it is kept (None once the job is forgotten)."""
    function, number = parse_job_id(job_id)
    data = yield Cmd(("HGET", proto.key(function, "input"), number))
    return None if data is None else bytes(data)


def retry(proto: Protocol, job_id: str, fresh: bool = False) -> Gen[bool]:
    """Runs failed or cancelled job `job_id` again (False when it had not ended so): from
    the checkpoint it keeps, if any, or with `fresh` from the beginning (the checkpoint is
    dropped). `fresh` is checked before anything is sent."""
    function, number = parse_job_id(job_id)
    last = ["fresh"] if check_flag("fresh", fresh) else []
    try:
        reply = yield from call(proto.fcall("retry", function, "job", number, *last))
    except rx.ResponseError as e:
        error = map_error(e)
        if isinstance(error, NotFound):
            raise NotFound(f"no such job {job_id}: never enqueued, or its retention is over") from None
        raise error from None
    moved, relink = reply[0] or [], [text(x) for x in reply[1] or []]
    for k in range(0, len(relink) - 1, 2):
        yield from link(proto, relink[k], relink[k + 1])
    return bool(moved)


def queues(proto: Protocol) -> Gen[List[QueueInfo]]:
    """Per known function: jobs queued, scheduled, running, waiting, kept finished by state,
    live workers, paused (what `wasmgear queues` prints)."""
    names = yield Cmd(("SMEMBERS", proto.functions_key))
    functions = sorted(n for n in (text(x) for x in names or []) if proto.function_re.match(n))
    overview = []
    for function in functions:
        def key(suffix: str, function: str = function) -> str:
            return proto.key(function, suffix)

        counts_flat = yield Cmd(("HGETALL", key("counts")))
        if isinstance(counts_flat, dict):
            counts = {text(k): int(v) for k, v in counts_flat.items()}
        else:
            flat = list(counts_flat or [])
            counts = {text(flat[i]): int(flat[i + 1]) for i in range(0, len(flat) - 1, 2)}
        sizes = []
        for suffix in ("ready", "scheduled", "leased", "waiting"):
            sizes.append(int((yield Cmd(("ZCARD", key(suffix))))))
        # Queued: the ready jobs without a group, and those with one.
        sizes[0] += int((yield Cmd(("ZCARD", key("group-ready")))))
        paused = yield Cmd(("HGET", key("config"), "paused"))
        workers = yield from call(proto.fcall_keys("rollcall", [key("workers")], "", 0))
        overview.append(
            QueueInfo(
                function=function,
                queued=sizes[0],
                scheduled=sizes[1],
                running=sizes[2],
                waiting=sizes[3],
                succeeded=max(counts.get("succeeded", 0), 0),
                failed=max(counts.get("failed", 0), 0),
                cancelled=max(counts.get("cancelled", 0), 0),
                workers=int(workers),
                paused=paused is not None and text(paused) == "1",
            )
        )
    return overview
