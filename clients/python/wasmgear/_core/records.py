"""Replies read as this package's types: a job's record, published events."""

from __future__ import annotations

import copy
import json
from typing import Any, List, Optional

from ..errors import ProtocolError
from ..models import Attempt, CheckpointInfo, Event, Job, JobError, Progress, ms_to_datetime
from .base import text

def _whole(value: Any) -> int:
    """A count written as a number or a decimal string."""
    if value is None:
        return 0
    return int(value)


def parse_record(job_id: str, raw: Any, output: Any) -> Job:
    """A `wg2_get` (or `wg2_watch`) reply's record (JSON) and output as a Job."""
    try:
        record = json.loads(text(raw))
    except (ValueError, TypeError, AttributeError) as e:
        raise ProtocolError(f"the record of job {job_id} cannot be read: {e}", raw) from e
    return job_of_record(job_id, record, output, raw)


def job_of_record(job_id: str, record: Any, output: Any, raw: Any) -> Job:
    """A record (the JSON object `wg2_get` answers, decoded) and output as a Job; `raw` is
    what the record was read from, kept on the error when it cannot be read."""
    try:
        if not isinstance(record, dict):
            raise ValueError("not a JSON object")
        progress = record.get("progress")
        seq = int(record.get("progress_seq") or 0)
        error = record.get("error")
        history = []
        for entry in record.get("history") or []:
            history.append(
                Attempt(
                    attempt=int(entry.get("attempt") or 0),
                    outcome=str(entry.get("outcome", "")),
                    worker=entry.get("worker"),
                    started=ms_to_datetime(entry.get("started_ms")),
                    ended=ms_to_datetime(entry.get("ended_ms")),
                    message=entry.get("message"),
                    version=entry.get("version"),
                )
            )
        return Job(
            id=job_id,
            state=str(record["state"]),
            priority=int(record.get("priority") or 0),
            attempt=int(record.get("attempt") or 0),
            max_attempts=int(record.get("max_attempts") or 0),
            progress=None
            if not isinstance(progress, dict)
            else Progress(
                id=job_id,
                seq=int(progress.get("seq") or seq),
                done=_whole(progress.get("done")),
                total=_whole(progress.get("total")),
                message=progress.get("message"),
            ),
            error=None
            if not isinstance(error, dict)
            else JobError(str(error.get("class", "")), str(error.get("message", ""))),
            output=None if output is None or output is False else bytes(output),
            created=ms_to_datetime(record.get("created_ms")),
            run_at=ms_to_datetime(record.get("run_at_ms")),
            started=ms_to_datetime(record.get("started_ms")),
            finished=ms_to_datetime(record.get("finished_ms")),
            tags=_list(record.get("tags")),
            uniq=record.get("uniq"),
            after=_list(record.get("after")),
            waiting_on=_list(record.get("waiting_on")),
            dependents=_list(record.get("dependents")),
            history=history,
            cancel_requested=record.get("cancel_requested_ms") is not None,
            expires=ms_to_datetime(record.get("expires_ms")),
            trace=_text_or_none(record.get("trace")),
            tracestate=_text_or_none(record.get("tracestate")),
            checkpoint=_checkpoint(record.get("checkpoint")),
            record=record,
        )
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise ProtocolError(f"the record of job {job_id} cannot be read: {e}", raw) from e


def finished_job(job_id: str, event: Event) -> Optional[Job]:
    """The final status a `finish` event carries: that of a job a wait marked (`wg2_watch`),
    whose event has its record as `wg2_get` answers it and its output when small (read
    exactly as `get`'s reply). None when the event does not carry it all (a plain event; or
    `output_omitted`: the output must be read) or cannot be read: the wait reads the job."""
    obj = event.raw
    record = obj.get("record")
    if event.kind != "finish" or not isinstance(record, dict) or obj.get("output_omitted"):
        return None
    output = obj.get("output")
    if output is not None and not isinstance(output, str):
        return None
    try:
        # A copy: the event (and its record) goes to every wait of the job.
        return job_of_record(job_id, copy.deepcopy(record),
                             None if output is None else output.encode("utf-8"), obj)
    except ProtocolError:
        return None


def _checkpoint(value: Any) -> Optional[CheckpointInfo]:
    """A record's `checkpoint` (`{bytes, ms}`) as a CheckpointInfo; None when the job keeps
    none (the record has no `checkpoint`)."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ValueError(f"its checkpoint {value!r} is not a JSON object")
    saved = ms_to_datetime(value.get("ms"))
    if saved is None:
        raise ValueError("its checkpoint has no time (ms)")
    return CheckpointInfo(bytes=int(value["bytes"]), saved=saved)


def _text_or_none(value: Any) -> Optional[str]:
    return value if isinstance(value, str) else None


def _list(value: Any) -> List[str]:
    # cjson writes an empty Lua table as {}: read it as an empty list.
    if isinstance(value, list):
        return [str(v) for v in value]
    return []


def parse_event(function: str, obj: Any) -> Optional[Event]:
    """One published event's JSON object as an Event (None when it is not one)."""
    if not isinstance(obj, dict) or not isinstance(obj.get("event"), str):
        return None
    kind = obj["event"]
    job_id = obj.get("id")
    if kind == "config" or not job_id:
        job_id = None
    elif not isinstance(job_id, str):
        return None
    try:
        return Event(
            kind=kind,
            function=function,
            id=job_id,
            attempt=None if obj.get("attempt") is None else int(obj["attempt"]),
            seq=None if obj.get("seq") is None else int(obj["seq"]),
            done=None if obj.get("done") is None else int(obj["done"]),
            total=None if obj.get("total") is None else int(obj["total"]),
            message=obj.get("message"),
            state=obj.get("state"),
            at=ms_to_datetime(obj.get("at_ms")),
            bytes=None if obj.get("bytes") is None else int(obj["bytes"]),
            raw=obj,
        )
    except (TypeError, ValueError):
        return None


def parse_message(function: str, payload: Any) -> List[Event]:
    """A published message: one event's JSON object, or a JSON array of them in order."""
    try:
        value = json.loads(text(payload))
    except ValueError:
        return []
    items = value if isinstance(value, list) else [value]
    events = []
    for item in items:
        event = parse_event(function, item)
        if event is not None:
            events.append(event)
    return events
