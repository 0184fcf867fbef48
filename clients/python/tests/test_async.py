"""The asyncio client against a real redis-server and a real worker."""

from __future__ import annotations

import asyncio
import time
from typing import List

import pytest

import wasmgear
from conftest import cli, events_channel, free_port, numsub, wait_until_async


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 300))


def test_async_round_trip_and_wait(url: str) -> None:
    async def main() -> None:
        async with await wasmgear.AsyncClient.from_url(url) as client:
            enqueued = await client.enqueue("echo", b"async hello")
            assert enqueued.created
            job = await client.wait(enqueued.id, timeout=30)
            assert job.state == "succeeded" and job.output == b"async hello"
            assert (await client.status(enqueued.id)).output == b"async hello"
            assert isinstance(await client.logs(enqueued.id), str)

            reports: List[wasmgear.Progress] = []
            counted = await client.enqueue("count", "5 20")
            job = await client.wait(counted.id, timeout=60, on_progress=reports.append)
            assert job.output and reports
            seqs = [p.seq for p in reports]
            assert seqs == sorted(set(seqs))
            assert (reports[-1].done, reports[-1].total) == (5, 5)

            failing = await client.enqueue("fail", "x", attempts=1)
            with pytest.raises(wasmgear.JobFailed):
                await client.wait(failing.id, timeout=60)
            assert await client.retry(failing.id) is True
            assert (await client.wait(failing.id, timeout=60, check=False)).state == "failed"

            with pytest.raises(wasmgear.NotFound):
                await client.status("echo:987654321")
            with pytest.raises(wasmgear.BadInput):
                await client.enqueue("echo", "x", priority=-5000)
            queues = {q.function: q for q in await client.queues()}
            assert queues["echo"].workers == 1

    run(main())


def test_async_waits_share_one_subscription(url: str, server) -> None:
    async def main() -> None:
        client = await wasmgear.AsyncClient.from_url(url)
        try:
            cli(url, "pause", "echo")
            try:
                enqueued = await client.enqueue_many("echo", [f"a{i}" for i in range(30)])
                ids = [e.id for e in enqueued]
                waits = [asyncio.ensure_future(client.wait(i, timeout=60)) for i in ids]
                waits.append(asyncio.ensure_future(client.wait(ids, timeout=60)))
                await wait_until_async(
                    lambda: client._listener.waiting() >= 60 and client._listener.hearing() >= 31,
                    30, "the waits to register")
                assert numsub(server.redis, events_channel("echo")) == 1
                assert not any(w.done() for w in waits)
            finally:
                cli(url, "resume", "echo")
            results = await asyncio.gather(*waits)
            assert [j.output for j in results[:-1]] == [f"a{i}".encode() for i in range(30)]
            assert [j.state for j in results[-1]] == ["succeeded"] * 30
            await wait_until_async(
                lambda: numsub(server.redis, events_channel("echo")) == 0,
                10, "the subscription to end with the waits")
        finally:
            await client.aclose()

    run(main())


def test_async_cancel_a_running_job(url: str) -> None:
    async def main() -> None:
        async with await wasmgear.AsyncClient.from_url(url) as client:
            async with client.events("count") as stream:
                enqueued = await client.enqueue("count", "100 50")
                deadline = time.monotonic() + 60
                while True:
                    assert time.monotonic() < deadline, "no progress event came"
                    event = await stream.get(timeout=1)
                    if event is not None and event.id == enqueued.id and event.kind == "progress":
                        break
            assert (await client.cancel(enqueued.id)).outcome == "stopping"
            with pytest.raises(wasmgear.JobCancelled) as caught:
                await client.wait(enqueued.id, timeout=60)
            assert caught.value.job.state == "cancelled"

    run(main())


def test_async_iterating_the_events_of_a_job(url: str) -> None:
    """`async for event in stream` yields a job's events as the worker runs it, in order."""

    async def main() -> None:
        async with await wasmgear.AsyncClient.from_url(url) as client:
            async with client.events("echo") as stream:
                enqueued = await client.enqueue("echo", "watched")

                async def collect() -> List[wasmgear.Event]:
                    events: List[wasmgear.Event] = []
                    async for event in stream:
                        assert isinstance(event, wasmgear.Event) and event.function == "echo"
                        if event.id != enqueued.id:
                            continue
                        events.append(event)
                        if event.kind == "finish":
                            break
                    return events

                events = await asyncio.wait_for(collect(), 60)
            assert [e.kind for e in events] == ["create", "start", "finish"]
            assert events[1].attempt == 1 and events[-1].state == "succeeded"
            assert (await client.status(enqueued.id)).output == b"watched"

    run(main())


def test_async_bulk_and_dependencies(url: str) -> None:
    async def main() -> None:
        async with await wasmgear.AsyncClient.from_url(url) as client:
            first = await client.enqueue("echo", "first", delay=0.3)
            jobs = await client.enqueue_many(
                "count", [("1 1", {"after": [first.id]})] * 1200, priority="high"
            )
            assert len(jobs) == 1200
            done = await client.wait([j.id for j in jobs], timeout=120)
            assert all(j.state == "succeeded" and j.priority == 10 for j in done)

    run(main())


def test_async_unreachable_on_a_closed_port() -> None:
    port = free_port()

    async def main() -> None:
        with pytest.raises(wasmgear.Unreachable) as caught:
            await wasmgear.AsyncClient.from_url(f"redis://127.0.0.1:{port}")
        assert caught.value.exit_code == 6

    run(main())
