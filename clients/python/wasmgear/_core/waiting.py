"""Waiting for jobs to end: the routing of one client's shared subscription, and the wait
itself (events first, with the final status in a waited job's finish event; re-reading the
records as a safety net)."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any, Callable, Dict, Generic, Hashable, Iterable, List, Optional, Sequence, Tuple, TypeVar, Union

from redis import exceptions as rx

from ..errors import BadInput, JobCancelled, JobFailed, WaitTimeout
from ..models import Event, Job, Progress
from .calls import is_transient
from .operations import status
from .base import LOST, RESUBSCRIBED, Gen, Protocol, Receive, Sleep, limits, parse_job_id
from .records import finished_job, parse_message

#: What a Router hands events to (each client's queue type).
S = TypeVar("S", bound=Hashable)

class Router(Generic[S]):
    """Which waits hear which job's events, and which channels that needs: the bookkeeping of
    one client's shared subscription (both clients drive it from their listener)."""

    def __init__(self, proto: Protocol) -> None:
        self.proto = proto
        self.routes: Dict[str, List[S]] = {}
        self.refs: Dict[str, int] = {}

    def channels_of(self, ids: Iterable[str]) -> List[str]:
        return sorted({self.proto.events_channel(parse_job_id(i)[0]) for i in ids})

    def add(self, ids: Sequence[str], sink: S) -> List[str]:
        """Routes the events of `ids` to `sink`; returns the channels to subscribe anew."""
        new = []
        for job_id in ids:
            self.routes.setdefault(job_id, []).append(sink)
            channel = self.proto.events_channel(parse_job_id(job_id)[0])
            self.refs[channel] = self.refs.get(channel, 0) + 1
            if self.refs[channel] == 1:
                new.append(channel)
        return new

    def remove(self, ids: Sequence[str], sink: S) -> List[str]:
        """Stops routing `ids` to `sink`; returns the channels no wait needs any more."""
        gone = []
        for job_id in ids:
            sinks = self.routes.get(job_id, [])
            if sink in sinks:
                sinks.remove(sink)
            if not sinks:
                self.routes.pop(job_id, None)
            channel = self.proto.events_channel(parse_job_id(job_id)[0])
            left = self.refs.get(channel, 0) - 1
            if left <= 0:
                self.refs.pop(channel, None)
                gone.append(channel)
            else:
                self.refs[channel] = left
        return gone

    def channels(self) -> List[str]:
        return list(self.refs)

    def sinks(self) -> List[S]:
        unique: Dict[int, S] = {}
        for sinks in self.routes.values():
            for sink in sinks:
                unique[id(sink)] = sink
        return list(unique.values())

    def route(self, channel: str, payload: Any) -> List[Tuple[S, Event]]:
        """The (sink, event) pairs a message on `channel` makes."""
        function = self.proto.function_of_channel(channel)
        if function is None:
            return []
        out: List[Tuple[S, Event]] = []
        for event in parse_message(function, payload):
            if event.id is not None:
                for sink in self.routes.get(event.id, []):
                    out.append((sink, event))
        return out


ProgressCallback = Callable[[Progress], Any]


def wait(
    proto: Protocol,
    ids: Sequence[str],
    timeout: Optional[float],
    on_progress: Optional[ProgressCallback],
    hearing: bool,
) -> Gen[List[Job]]:
    """Waits until every job of `ids` has ended; the caller has subscribed to their
    functions' events first (`hearing`: the subscription is confirmed) and routes their
    events here (`Receive`). Reads each record with `wg2_watch` (what `wg2_get` answers, and
    the job marked as waited on), then waits for a `finish` event. A waited job's event
    carries its record and (when small) its output: that is its final status, with no read
    of its own. A plain event, or one with `output_omitted`, makes the wait read the job
    again. It re-reads every `wait_recheck` (`wait_poll` while not hearing), and after
    subscribing again. Progress reports go to `on_progress` in `seq` order, never
    backwards."""
    deadline = None if timeout is None else time.monotonic() + timeout
    poll = limits().wait_poll
    last_seq: Dict[str, int] = {i: 0 for i in ids}
    pending: List[str] = list(dict.fromkeys(ids))
    results: Dict[str, Job] = {}
    reread: List[str] = list(pending)
    # Final statuses heard with their finish events: taken instead of a read.
    heard: Dict[str, Job] = {}

    def report(progress: Progress) -> None:
        if progress.seq > last_seq[progress.id]:
            last_seq[progress.id] = progress.seq
            if on_progress is not None:
                on_progress(progress)

    def left() -> Optional[float]:
        return None if deadline is None else deadline - time.monotonic()

    def timed_out() -> WaitTimeout:
        return WaitTimeout(
            f"gave up waiting for {', '.join(pending)} after {timeout}s; "
            "the jobs go on", pending
        )

    while True:
        for job_id in reread:
            job = heard.pop(job_id, None)
            while job is None:
                try:
                    # Subscribed first, then read (and marked): nothing that happens after
                    # this read is missed, and the job's finish event will carry its status.
                    job = yield from status(proto, job_id, watch=True)
                except rx.RedisError as e:
                    # Redis restarting or out of reach for a moment: a wait outlasts it, up
                    # to its timeout.
                    if not is_transient(e):
                        raise
                    remaining = left()
                    if remaining is not None and remaining <= 0:
                        raise timed_out() from None
                    yield Sleep(poll if remaining is None else min(poll, remaining))
            if job.progress is not None:
                report(Progress(job_id, int(job.record.get("progress_seq") or job.progress.seq),
                                job.progress.done, job.progress.total, job.progress.message))
            if job.is_final:
                results[job_id] = job
                pending.remove(job_id)
        reread = []
        if not pending:
            return [results[i] for i in ids]
        next_check = time.monotonic() + (limits().wait_recheck if hearing else poll)
        while not reread:
            now = time.monotonic()
            pause = next_check - now
            remaining = left()
            if remaining is not None:
                if remaining <= 0:
                    raise timed_out()
                pause = min(pause, remaining)
            if pause <= 0:
                reread = list(pending)
                break
            signal = yield Receive(pause)
            if signal is None:
                continue
            if signal == LOST:
                hearing = False
                next_check = min(next_check, time.monotonic() + poll)
            elif signal == RESUBSCRIBED:
                hearing = True
                reread = list(pending)
            elif isinstance(signal, Event) and signal.id in pending:
                if signal.kind == "progress" and signal.seq is not None:
                    report(Progress(signal.id, signal.seq, signal.done or 0, signal.total or 0,
                                    signal.message))
                elif signal.kind == "finish":
                    # A waited job's end comes with its status (and a small output): no
                    # read needed. Otherwise read it.
                    final = finished_job(signal.id, signal)
                    if final is not None:
                        heard[signal.id] = final
                    reread = [signal.id]


def outcome(jobs: List[Job], many: bool) -> None:
    """Raises JobFailed when a job waited for failed or expired (failed outranks cancelled,
    as in the CLI), else JobCancelled when one was cancelled."""
    failed = [job for job in jobs if job.state in ("failed", "expired")]
    if failed:
        job = failed[0]
        why = f" [{job.error.class_}] {job.error.message}" if job.error else ""
        if job.state == "expired":
            raise JobFailed(f"job {job.id} expired before it started{why}", job, jobs)
        raise JobFailed(f"job {job.id} failed after {job.attempt} attempt(s){why}", job, jobs)
    cancelled = [job for job in jobs if job.state == "cancelled"]
    if cancelled:
        job = cancelled[0]
        why = f": {job.error.message}" if job.error else ""
        raise JobCancelled(f"job {job.id} was cancelled{why}", job, jobs)


def normalize_ids(ids: Union[str, Sequence[str]]) -> Tuple[List[str], bool]:
    """The ids of a wait (one id or several) and whether several were given."""
    if isinstance(ids, str):
        parse_job_id(ids)
        return [ids], False
    ids = list(ids)
    if not ids:
        raise BadInput("wait needs at least one job id")
    for job_id in ids:
        parse_job_id(job_id)
    return ids, True


def timeout_seconds(timeout: Union[None, float, int, timedelta]) -> Optional[float]:
    if timeout is None:
        return None
    if isinstance(timeout, timedelta):
        return timeout.total_seconds()
    if isinstance(timeout, (int, float)) and not isinstance(timeout, bool) and timeout >= 0:
        return float(timeout)
    raise BadInput(f"timeout {timeout!r} is not a duration: give seconds (>= 0) or a timedelta")
