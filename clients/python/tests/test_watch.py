"""Waits mark their jobs (`wg2_watch`), and a marked job's `finish` event carries its final
status: the wait returns it without reading the job again. Against a real redis-server and a
real worker; what the server runs is seen with MONITOR, what it publishes with a raw
subscription."""

from __future__ import annotations

import asyncio
import json
import secrets
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import pytest
import redis

import wasmgear
from conftest import RedisServer, events_channel, wait_until, wait_until_async

#: The most output bytes a finish event carries (the library's MAX_EVENT_OUTPUT).
MAX_EVENT_OUTPUT = 1024


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 300))


def raw_record(r: redis.Redis, job_id: str) -> bytes:
    """Job `job_id`'s record as the library stores it (`HGET wg:{F}:jobs N`)."""
    function, number = job_id.rsplit(":", 1)
    raw = r.hget(f"wg:{{{function}}}:jobs", number)
    assert raw is not None, f"no record of {job_id}"
    return bytes(raw)


def watched(r: redis.Redis, job_id: str) -> bool:
    return b'"watched"' in raw_record(r, job_id)


class FinishEvents:
    """A raw subscription to a function's events channel: the `finish` events published on
    it, by job id."""

    def __init__(self, server: RedisServer, function: str) -> None:
        self.redis = redis.Redis(host="127.0.0.1", port=server.port, socket_timeout=10)
        self.pubsub = self.redis.pubsub()
        self.pubsub.subscribe(events_channel(function))
        self.seen: Dict[str, Dict[str, Any]] = {}
        deadline = time.monotonic() + 10
        while True:
            message = self.pubsub.get_message(timeout=0.5)
            if message is not None and message["type"] == "subscribe":
                break
            assert time.monotonic() < deadline, "the subscription was not confirmed"

    def finish(self, job_id: str, timeout: float = 60) -> Dict[str, Any]:
        """The finish event of `job_id` (waiting for it at most `timeout` seconds)."""
        deadline = time.monotonic() + timeout
        while job_id not in self.seen:
            left = deadline - time.monotonic()
            assert left > 0, f"no finish event of {job_id} within {timeout}s"
            message = self.pubsub.get_message(timeout=min(left, 0.5))
            if message is None or message["type"] != "message":
                continue
            value = json.loads(message["data"])
            for event in value if isinstance(value, list) else [value]:
                if event.get("event") == "finish":
                    self.seen[event["id"]] = event
        return self.seen[job_id]

    def close(self) -> None:
        self.pubsub.close()
        self.redis.close()


class Monitor:
    """Every command the server runs, in the order it ran them (MONITOR, read by a thread
    on a connection of its own). `stop` sends a marker command and reads up to it, so that
    everything run before `stop` was called is in `commands`."""

    def __init__(self, server: RedisServer) -> None:
        self.port = server.port
        self.redis = redis.Redis(host="127.0.0.1", port=server.port, socket_timeout=60)
        self.stopped = False
        self.marker = f"end-of-monitor-{secrets.token_hex(8)}"
        self.commands: List[Dict[str, Any]] = []
        self.error: Optional[BaseException] = None
        self.monitor = self.redis.monitor()
        self.monitor.__enter__()  # sends MONITOR and reads its OK
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        try:
            while True:
                command = self.monitor.next_command()
                self.commands.append(command)
                if self.marker in command["command"]:
                    return
        except BaseException as e:  # noqa: BLE001 - reported by stop
            self.error = e

    def stop(self) -> List[Dict[str, Any]]:
        """Every command run so far (the second call returns the same)."""
        if not self.stopped:
            self.stopped = True
            other = redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=10)
            try:
                other.echo(self.marker)
            finally:
                other.close()
            self.thread.join(60)
            alive = self.thread.is_alive()
            self.monitor.__exit__(None, None, None)
            self.redis.close()
            assert not alive, "MONITOR did not show the marker"
        if self.error is not None:
            raise self.error
        return self.commands


def reads(commands: Sequence[Dict[str, Any]], job_id: str) -> List[int]:
    """The places in `commands` of the clients' reads of `job_id` (`wg2_get`, `wg2_watch`)."""
    function, number = job_id.rsplit(":", 1)
    found = []
    for i, command in enumerate(commands):
        words = command["command"].split(" ")
        if (command["client_type"] != "lua" and words[0].upper() in ("FCALL", "FCALL_RO")
                and words[1] in ("wg2_get", "wg2_watch") and words[-2:] == [function, number]):
            found.append(i)
    return found


def read_names(commands: Sequence[Dict[str, Any]], job_id: str) -> List[str]:
    return [commands[i]["command"].split(" ")[1] for i in reads(commands, job_id)]


def finish_published(commands: Sequence[Dict[str, Any]], job_id: str) -> int:
    """The place in `commands` of the publication of `job_id`'s finish event."""
    prefix = f"PUBLISH {events_channel(job_id.rsplit(':', 1)[0])} "
    found = []
    for i, command in enumerate(commands):
        if not command["command"].startswith(prefix):
            continue
        # (MONITOR shows a backslash doubled: the JSON still reads, its strings aside.)
        value = json.loads(command["command"][len(prefix):])
        if any(event.get("event") == "finish" and event.get("id") == job_id
               for event in (value if isinstance(value, list) else [value])):
            found.append(i)
    assert len(found) == 1, f"the finish event of {job_id} was published {len(found)} times"
    return found[0]


def in_thread(call: Callable[[], Any]) -> Callable[[], Any]:
    """Runs `call` in a thread; the returned function joins it (bounded) and returns what
    it returned, or raises what it raised."""
    result: Dict[str, Any] = {}

    def body() -> None:
        try:
            result["value"] = call()
        except BaseException as e:  # noqa: BLE001 - raised by join
            result["error"] = e

    thread = threading.Thread(target=body, daemon=True)
    thread.start()

    def join() -> Any:
        thread.join(120)
        assert not thread.is_alive(), "the wait did not return"
        if "error" in result:
            raise result["error"]
        return result["value"]

    return join


def wait_while_paused(client: wasmgear.Client, server: RedisServer, function: str,
                      enqueue: Callable[[], Any]) -> Tuple[Any, Callable[[], Any]]:
    """Runs `enqueue` with `function` paused (it returns a job id or a list of them), starts
    a wait on what it returned in a thread, and lets the function run once the wait has
    marked every job: so the jobs end while the wait is really waiting. Returns what
    `enqueue` returned and the thread's join (`in_thread`)."""
    client.configure(function, paused=True)
    try:
        waited = enqueue()
        ids = waited if isinstance(waited, list) else [waited]
        join = in_thread(lambda: client.wait(waited, timeout=120))
        wait_until(lambda: all(watched(server.redis, i) for i in ids), 30,
                   "the wait to mark its jobs")
    finally:
        client.configure(function, paused=False)
    return waited, join


def test_a_wait_marks_its_job_and_get_does_not_show_the_mark(client: wasmgear.Client,
                                                              server: RedisServer) -> None:
    client.configure("echo", paused=True)
    try:
        waited = client.enqueue("echo", "marked").id
        alone = client.enqueue("echo", "not waited on").id
        join = in_thread(lambda: client.wait(waited, timeout=120))
        wait_until(lambda: watched(server.redis, waited), 30, "the wait to mark its job")
        # Nothing ran: the function is paused, so the wait is really waiting.
        assert client.status(waited).state == "queued"
        assert "watched" not in client.status(waited).record
        assert not watched(server.redis, alone)
        # `get` itself (FCALL_RO wg2_get), as any client reads it: no mark.
        function, number = waited.rsplit(":", 1)
        keys = [f"wg:{{{function}}}:{k}" for k in ("jobs", "output", "stats", "events")]
        reply = server.redis.execute_command("FCALL_RO", "wg2_get", 4, *keys, function, number)
        assert "watched" not in json.loads(reply[0])
    finally:
        client.configure("echo", paused=False)
    job = join()
    assert job.output == b"marked" and "watched" not in job.record
    assert client.wait(alone, timeout=60).output == b"not waited on"


def test_a_waited_jobs_finish_event_carries_its_status_and_no_read_follows(
        client: wasmgear.Client, server: RedisServer) -> None:
    text = "small text output\twith a tab\r\nand line ends\n"
    events = FinishEvents(server, "echo")
    monitor = Monitor(server)
    commands: List[Dict[str, Any]] = []
    try:
        job_id, join = wait_while_paused(client, server, "echo",
                                         lambda: client.enqueue("echo", text).id)
        job = join()
        commands = monitor.stop()
    finally:
        monitor.stop()
    try:
        event = events.finish(job_id)
    finally:
        events.close()
    assert event["state"] == "succeeded" and event["output"] == text
    assert "output_omitted" not in event
    assert event["record"]["state"] == "succeeded" and "watched" not in event["record"]
    # The wait's status is what `status()` reads afterwards: record and output alike.
    after = client.status(job_id)
    assert job.output == text.encode() == after.output
    assert job.record == after.record == event["record"]
    assert job == after
    # Read by `watch` (once, unless a safety re-read came first), and not after its
    # finish event: the wait's status is the event's.
    assert set(read_names(commands, job_id)) == {"wg2_watch"}
    assert reads(commands, job_id)[-1] < finish_published(commands, job_id)


def test_large_or_binary_outputs_are_omitted_from_the_event_and_read(
        client: wasmgear.Client, server: RedisServer) -> None:
    inputs = [b"x" * MAX_EVENT_OUTPUT, b"y" * (MAX_EVENT_OUTPUT + 1), bytes(range(256)), b""]
    events = FinishEvents(server, "echo")
    monitor = Monitor(server)
    commands: List[Dict[str, Any]] = []
    try:
        ids, join = wait_while_paused(
            client, server, "echo", lambda: [e.id for e in client.enqueue_many("echo", inputs)])
        jobs = join()
        commands = monitor.stop()
    finally:
        monitor.stop()
    try:
        found = [events.finish(i) for i in ids]
    finally:
        events.close()
    assert [job.output for job in jobs] == inputs
    assert jobs == [client.status(i) for i in ids]
    carried, large, binary, empty = found
    assert carried["output"] == "x" * MAX_EVENT_OUTPUT and "output_omitted" not in carried
    assert empty["output"] == "" and "output_omitted" not in empty
    for event in (large, binary):
        assert event["output_omitted"] is True and "output" not in event
        assert event["record"]["state"] == "succeeded"
    # A carried output ends the wait with no read; an omitted one is read (by `watch` too).
    for job_id, event in zip(ids, found):
        published = finish_published(commands, job_id)
        after = [i for i in reads(commands, job_id) if i > published]
        assert set(read_names(commands, job_id)) == {"wg2_watch"}
        assert len(after) == (1 if event.get("output_omitted") else 0), event


def test_a_job_nobody_waits_on_has_the_plain_finish_event(client: wasmgear.Client,
                                                         server: RedisServer) -> None:
    events = FinishEvents(server, "echo")
    try:
        job_id = client.enqueue("echo", "unwatched").id
        event = events.finish(job_id)
    finally:
        events.close()
    assert event == {"event": "finish", "id": job_id, "state": "succeeded"}
    assert not watched(server.redis, job_id)
    assert client.status(job_id).output == b"unwatched"


def test_a_waited_failed_jobs_event_has_its_record_without_output(
        client: wasmgear.Client, server: RedisServer) -> None:
    events = FinishEvents(server, "fail")
    try:
        job_id, join = wait_while_paused(client, server, "fail",
                                         lambda: client.enqueue("fail", "boom", attempts=1).id)
        with pytest.raises(wasmgear.JobFailed) as caught:
            join()
        event = events.finish(job_id)
    finally:
        events.close()
    assert event["state"] == "failed" and event["record"]["state"] == "failed"
    assert "output" not in event and "output_omitted" not in event
    job = caught.value.job
    assert job.state == "failed" and job.output is None and job.error is not None
    assert job == client.status(job_id)


def test_async_wait_takes_the_status_from_the_finish_event(url: str,
                                                           server: RedisServer) -> None:
    small, large = "async small output\n", b"z" * (MAX_EVENT_OUTPUT + 100)

    async def main() -> None:
        events = FinishEvents(server, "echo")
        monitor = Monitor(server)
        commands: List[Dict[str, Any]] = []
        try:
            async with await wasmgear.AsyncClient.from_url(url) as client:
                await client.configure("echo", paused=True)
                try:
                    one = (await client.enqueue("echo", small)).id
                    two = (await client.enqueue("echo", large)).id
                    waiting = asyncio.ensure_future(asyncio.gather(
                        client.wait(one, timeout=120), client.wait([two], timeout=120)))
                    await wait_until_async(
                        lambda: watched(server.redis, one) and watched(server.redis, two),
                        30, "the waits to mark their jobs")
                    assert "watched" not in (await client.status(one)).record
                    assert not waiting.done()
                finally:
                    await client.configure("echo", paused=False)
                job, [other] = await asyncio.wait_for(waiting, 120)
                commands = monitor.stop()
                assert job.output == small.encode() and other.output == large
                assert job == await client.status(one)
                assert other == await client.status(two)
                first, second = events.finish(one), events.finish(two)
                assert first["output"] == small and first["record"] == job.record
                assert second["output_omitted"] is True and "output" not in second
                # The small output's wait read (by `watch`; the `status` above is `get`)
                # before the end only; the large one's read again after its finish event.
                assert read_names(commands, one)[0] == "wg2_watch"
                assert reads(commands, one)[-1] < finish_published(commands, one)
                after = [i for i in reads(commands, two) if i > finish_published(commands, two)]
                assert [commands[i]["command"].split(" ")[1] for i in after] == ["wg2_watch"]
                assert set(read_names(commands, two)) == {"wg2_watch"}
        finally:
            monitor.stop()
            events.close()

    run(main())
