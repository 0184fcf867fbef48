"""Checkpoints (issue 43): the bytes a running job saves for its next attempt to resume from,
against a real redis-server and a real worker serving the example plugin `resume`, as
tests/all/checkpoints.rs runs it. Its input is "N" or "N MS": N steps (MS ms each), its
position saved after each one; its first attempt fails on purpose after N / 2 of them, and
its output says where the attempt that succeeded resumed from (`resumed from K`)."""

from __future__ import annotations

import asyncio
from typing import Any, Iterator, Optional

import pytest

import wasmgear
from conftest import RedisServer, Worker, eventually, wait_until

WAIT = 120


@pytest.fixture(scope="module")
def resume_url(server: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The session's Redis, with a worker of its own serving `resume` (the session's worker
    serves echo, count and fail)."""
    worker = Worker(server.url, tmp_path_factory.mktemp("resume-worker"), plugins=("resume",))
    try:
        yield server.url
    finally:
        worker.stop()


@pytest.fixture
def client(resume_url: str) -> Iterator[wasmgear.Client]:
    c = wasmgear.Client.from_url(resume_url)
    yield c
    c.close()


def kept_halfway(job: wasmgear.Job, data: Optional[bytes]) -> None:
    """Checks a `resume 10` job that failed on its one attempt (`job`, its status) and the
    checkpoint read (`data`): it keeps the position it got to, `5` (1 byte), saved while it
    ran."""
    assert job.state == "failed", job
    assert job.error is not None and "failing on purpose after 5 of 10" in job.error.message
    assert job.checkpoint is not None, job.record
    assert job.checkpoint.bytes == 1
    assert job.started is not None and job.finished is not None
    assert job.started <= job.checkpoint.saved <= job.finished
    assert data == b"5"


def resumed(job: wasmgear.Job, status: wasmgear.Job, data: Optional[bytes], start: int) -> None:
    """Checks a retried `resume 10` job once it has succeeded (`job` as the wait returned it,
    `status` read afterwards, `data` its checkpoint read afterwards): it resumed from step
    `start`, and its success dropped the checkpoint."""
    assert job.state == "succeeded" and job.attempt == 2, job
    assert job.output == f"resumed from {start}".encode()
    assert job.checkpoint is None and status.checkpoint is None, status.record
    assert "checkpoint" not in status.record
    assert data is None


@pytest.mark.parametrize("options, start", [({}, 5), ({"fresh": True}, 0)],
                         ids=["resumes", "fresh"])
def test_a_failed_job_keeps_its_checkpoint_and_a_retry_resumes_from_it_unless_fresh(
    client: wasmgear.Client, options: Any, start: int,
) -> None:
    """`resume 10` on one attempt fails after 5 steps, keeping checkpoint `5`: `retry`
    resumes from it (`resumed from 5`), `retry(fresh=True)` drops it and starts over
    (`resumed from 0`). Either way the job's success drops the checkpoint."""
    job = client.enqueue("resume", "10", attempts=1)
    failed = client.wait(job.id, timeout=WAIT, check=False)
    kept_halfway(failed, client.checkpoint(job.id))
    assert failed == client.status(job.id)
    assert client.retry(job.id, **options) is True
    done = client.wait(job.id, timeout=WAIT)
    resumed(done, client.status(job.id), client.checkpoint(job.id), start)


def test_a_running_jobs_checkpoints_are_events(client: wasmgear.Client) -> None:
    """Each checkpoint a running job saves is published: an event of kind `checkpoint` with
    its size in `bytes`, heard on the client's event stream."""
    with client.events("resume") as stream:
        job = client.enqueue("resume", "10 50", attempts=1)

        def heard() -> Optional[wasmgear.Event]:
            event = stream.get(timeout=1)
            if event is not None and event.id == job.id and event.kind == "checkpoint":
                return event
            return None

        told = wait_until(heard, WAIT, f"a checkpoint event of {job.id}", every=0)
    assert isinstance(told, wasmgear.Event)
    assert (told.function, told.bytes, told.raw["bytes"]) == ("resume", 1, 1)
    kept_halfway(client.wait(job.id, timeout=WAIT, check=False), client.checkpoint(job.id))


@pytest.mark.parametrize("fresh", ["yes", 1, None])
def test_a_fresh_that_is_not_a_bool_is_refused_before_any_call(
    client: wasmgear.Client, fresh: Any,
) -> None:
    """`fresh` must be True or False: anything else is BadInput before the call is sent (a
    job that does not exist would be NotFound)."""
    with pytest.raises(wasmgear.BadInput, match=f"^fresh {fresh!r} is neither True nor False$"):
        client.retry("resume:987654321", fresh=fresh)


def test_the_async_client_hears_reads_and_drops_checkpoints(resume_url: str) -> None:
    """The same with `AsyncClient`: the checkpoint event on its event stream, the status's
    checkpoint and its bytes, a bad `fresh` refused with nothing changed, and a retry with
    `fresh` that starts over."""

    async def main() -> None:
        async with await wasmgear.AsyncClient.from_url(resume_url) as client:
            async with client.events("resume") as stream:
                job = await client.enqueue("resume", "10 50", attempts=1)

                async def heard() -> Optional[wasmgear.Event]:
                    event = await stream.get(timeout=1)
                    if event is not None and event.id == job.id and event.kind == "checkpoint":
                        return event
                    return None

                told = await eventually(heard, WAIT, f"a checkpoint event of {job.id}", every=0)
            assert told.bytes == 1
            failed = await client.wait(job.id, timeout=WAIT, check=False)
            kept_halfway(failed, await client.checkpoint(job.id))
            with pytest.raises(wasmgear.BadInput, match="^fresh 'yes' is neither True nor False$"):
                await client.retry(job.id, fresh="yes")
            assert await client.status(job.id) == failed, "the refused retry changed nothing"
            assert await client.retry(job.id, fresh=True) is True
            done = await client.wait(job.id, timeout=WAIT)
            resumed(done, await client.status(job.id), await client.checkpoint(job.id), 0)

    asyncio.run(asyncio.wait_for(main(), 300))
