"""Least privilege in Redis: the clients connected as a user made from `wasmgear acl producer`
run a producer's flows (enqueue and wait, status, flows, batches, queues, events) with nothing
refused in Redis' ACL log, are refused what a producer may not do (a lease, a cancel), and say
plainly that such a user may not load the library (as tests/all/redis_acl.rs checks the CLI).
A real redis-server, the real `wasmgear acl` and a real worker on the default user."""

from __future__ import annotations

import asyncio
from typing import Iterator

import pytest
import redis

import wasmgear
from conftest import RedisServer, make_user, refusals, wait_until

WAIT = 60
MAY_NOT_LOAD = "this Redis user may not load it (FUNCTION LOAD)"


@pytest.fixture
def producer(server: RedisServer, url: str) -> Iterator[str]:
    """The URL of the producer `app` on the session's Redis, which a worker serves and where
    the default user has loaded the library; the user and the ACL log go with the test."""
    wasmgear.Client.from_url(url).close()
    made = make_user(server, "producer", "app")
    server.redis.execute_command("ACL", "LOG", "RESET")
    try:
        yield made
    finally:
        server.redis.execute_command("ACL", "DELUSER", "app")
        server.redis.execute_command("ACL", "LOG", "RESET")


def test_a_producer_runs_its_flows_and_is_refused_the_rest(server: RedisServer,
                                                           producer: str) -> None:
    with wasmgear.Client.from_url(producer) as client:
        with client.events("echo") as stream:
            enqueued = client.enqueue("echo", "as a producer")
            job = client.wait(enqueued.id, timeout=WAIT)
            assert job.state == "succeeded" and job.output == b"as a producer"
            seen = set()

            def finished() -> bool:
                event = stream.get(timeout=1)
                if event is not None and event.id == enqueued.id:
                    seen.add(event.kind)
                return "finish" in seen

            wait_until(finished, WAIT, f"the events of {enqueued.id}")
            assert "create" in seen
        assert client.status(enqueued.id).state == "succeeded"
        assert isinstance(client.logs(enqueued.id), str)
        many = client.enqueue_many("echo", ["m1", "m2"])
        assert [j.output for j in client.wait([e.id for e in many], timeout=WAIT)] == \
            [b"m1", b"m2"]
        # A dependency on a job of the same function: the enqueue links it itself.
        after = client.enqueue("echo", "after", after=[enqueued.id])
        assert client.wait(after.id, timeout=WAIT).output == b"after"

        flow = client.submit_flow({"name": "acl", "jobs": {
            "a": {"function": "echo", "input": "first"},
            "b": {"function": "echo", "input": "then", "after": ["a"]},
        }})
        status = client.wait_flow(flow.id, timeout=WAIT)
        assert status.ended and status.counts == {"succeeded": 2}, status
        assert client.flow(flow.id).name == "acl"

        queues = {q.function: q for q in client.queues()}
        assert queues["echo"].workers >= 1
        assert client.config("echo") is not None
        client.groups("echo")

        async def asynchronously() -> None:
            async with await wasmgear.AsyncClient.from_url(producer) as aclient:
                done = await aclient.wait((await aclient.enqueue("echo", "async")).id,
                                          timeout=WAIT)
                assert done.output == b"async"
                assert (await aclient.status(done.id)).state == "succeeded"

        asyncio.run(asyncio.wait_for(asynchronously(), 2 * WAIT))

        assert refusals(server, "app") == [], "the producer was refused what its flows need"

        # What a producer may not do: lease (a worker's), cancel (an operator's).
        with pytest.raises(redis.exceptions.NoPermissionError):
            client._conn.execute_command("FCALL", "wg2_lease", 0)
        later = client.enqueue("echo", "later", delay=3600)
        with pytest.raises(wasmgear.WasmgearError, match="NOPERM|permission"):
            client.cancel(later.id)
        assert client.status(later.id).state == "scheduled"
    # Both refusals (Redis counts alike ones in one entry).
    assert refusals(server, "app") == ["command fcall"]


def test_a_producer_opens_a_batch(server: RedisServer, producer: str) -> None:
    with wasmgear.Client.from_url(producer) as client:
        batch = client.batch([("echo", "one"), ("echo", "two")], name="acl")

        def ended() -> bool:
            return client.batch_status(batch.id).ended

        wait_until(ended, WAIT, f"batch {batch.id} to end", every=0.05)
        assert client.batch_status(batch.id).succeeded == 2
    assert refusals(server, "app") == []


def test_a_producer_closes_a_batch_whose_jobs_have_ended(server: RedisServer,
                                                         producer: str) -> None:
    with wasmgear.Client.from_url(producer) as client:
        opened = client.open_batch("acl", on_success=wasmgear.Callback("echo"))
        ids = client.add_to_batch(opened, [("echo", "three")])
        client.wait(ids, timeout=WAIT)

        def counted() -> bool:
            return client.batch_status(opened).succeeded == 1

        wait_until(counted, WAIT, f"batch {opened} to count its job", every=0.05)
        client.close_batch(opened)
        assert client.batch_status(opened).on_success not in (None, "due")
    assert refusals(server, "app") == []


def test_a_producer_enqueues_after_an_ended_job_of_another_function(
        server: RedisServer, producer: str) -> None:
    with wasmgear.Client.from_url(producer) as client:
        first = client.wait(client.enqueue("echo", "first").id, timeout=WAIT)
        then = client.enqueue("count", "1 1", after=[first.id])
        assert client.wait(then.id, timeout=WAIT).state == "succeeded"
    assert refusals(server, "app") == []


def test_a_producer_is_told_it_may_not_load_the_library(bare: RedisServer) -> None:
    """On a Redis where the library was never loaded, a producer's first call says who may
    load it."""
    producer = make_user(bare, "producer", "app")
    with pytest.raises(wasmgear.ProtocolError, match=r"\(FUNCTION LOAD\)") as caught:
        wasmgear.Client.from_url(producer)
    assert MAY_NOT_LOAD in str(caught.value) and "wasmgear acl" in str(caught.value)
    assert caught.value.exit_code == 1

    async def asynchronously() -> None:
        with pytest.raises(wasmgear.ProtocolError, match=r"\(FUNCTION LOAD\)"):
            await wasmgear.AsyncClient.from_url(producer)

    asyncio.run(asyncio.wait_for(asynchronously(), WAIT))
    with pytest.raises(redis.ResponseError, match="Function not found"):
        bare.redis.execute_command("FCALL", "wg2_version", 0)
