"""Batches (jobs of any functions with callbacks once they have all succeeded or all ended),
against a real redis-server and three real worker processes serving `echo`, `fail` and the
callbacks' functions `on_ok` and `on_done` (both copies of `echo`: a callback's output is its
input), as tests/all/batches.rs runs them."""

from __future__ import annotations

import asyncio
import json
from typing import Any, Dict, Iterator, List, Tuple

import pytest
import redis

import wasmgear
from conftest import RedisServer, Worker, eventually, wait_until

WAIT = 120
CALLBACKS = {"on_ok": "echo", "on_done": "echo"}


@pytest.fixture(scope="module")
def batches_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A Redis of its own that three workers serve (echo, fail, on_ok, on_done)."""
    server = RedisServer(tmp_path_factory.mktemp("batches-redis"))
    workers: List[Worker] = []
    try:
        for _ in range(3):
            workers.append(Worker(server.url, tmp_path_factory.mktemp("batches-worker"),
                                  plugins=("echo", "fail"), aliases=CALLBACKS))
        yield server
    finally:
        for worker in workers:
            worker.stop()
        server.stop()


@pytest.fixture
def client(batches_server: RedisServer) -> Iterator[wasmgear.Client]:
    c = wasmgear.Client.from_url(batches_server.url)
    yield c
    c.close()


def spec(name: str) -> Dict[str, Any]:
    """The batch's name and callbacks, as tests/all/batches.rs `spec` gives them: `on_ok`
    with data (as a dict), `on_done` without (as a Callback)."""
    return {"name": name,
            "on_success": {"function": "on_ok", "data": {"note": name}},
            "on_complete": wasmgear.Callback("on_done")}


def ended_with_callbacks(client: wasmgear.Client, batch_id: str) -> wasmgear.BatchStatus:
    """Waits until batch `batch_id` has ended with its `on_complete` enqueued."""
    def done() -> Any:
        status = client.batch_status(batch_id)
        return status if status.ended and status.on_complete not in (None, "due") else None

    status = wait_until(done, WAIT, f"batch {batch_id} to end with its callbacks enqueued",
                        every=0.1)
    assert isinstance(status, wasmgear.BatchStatus)
    return status


def callback_inputs(client: wasmgear.Client, r: redis.Redis, function: str) -> List[Dict[str, Any]]:
    """The inputs of every job of `function` there is (each waited for: a copy of echo, its
    output is its input), as JSON."""
    last = int(r.get(f"wg:{{{function}}}:seq") or 0)
    ids = [f"{function}:{n}" for n in range(1, last + 1)]
    jobs = client.wait(ids, timeout=WAIT) if ids else []
    return [json.loads(job.output or b"") for job in jobs]


def test_each_batch_gets_exactly_one_callback_of_each_kind_under_three_workers(
    client: wasmgear.Client, batches_server: RedisServer,
) -> None:
    """Batches of short jobs ending together on three workers, half with a failing job (the
    `fail` plugin, attempts 1): each gets exactly one `on_complete`, and one `on_success` if
    (and only if) every job succeeded; each callback's input has the counts, the failed
    jobs' ids and the data."""
    batches: Dict[str, Tuple[bool, List[str]]] = {}
    for b in range(8):
        jobs: List[wasmgear.BatchJob] = [("echo", f"{b}-{j}", {"attempts": 1}) for j in range(10)]
        failing = b % 2 == 1
        if failing:
            jobs.append(("fail", "no", {"attempts": 1}))
        submitted = client.batch(jobs, **spec(f"b{b}"))
        assert len(submitted.id) == 16 and len(submitted.jobs) == len(jobs)
        assert [i.rsplit(":", 1)[0] for i in submitted.jobs] == [f for f, *_ in jobs]
        batches[submitted.id] = (failing, submitted.jobs)
    statuses = {batch_id: ended_with_callbacks(client, batch_id) for batch_id in batches}
    completes = callback_inputs(client, batches_server.redis, "on_done")
    successes = callback_inputs(client, batches_server.redis, "on_ok")
    for batch_id, (failing, ids) in batches.items():
        complete = [c for c in completes if c["batch"] == batch_id]
        success = [c for c in successes if c["batch"] == batch_id]
        assert len(complete) == 1, (batch_id, completes)
        assert complete[0]["callback"] == "complete" and complete[0]["total"] == len(ids)
        assert complete[0]["data"] is None
        status = statuses[batch_id]
        assert (status.pending, status.open, status.total) == (0, False, len(ids))
        assert status.ended_at is not None and status.created is not None
        if failing:
            assert success == [], batch_id
            assert (complete[0]["succeeded"], complete[0]["failed"]) == (10, 1)
            assert complete[0]["failed_ids"] == [ids[-1]]
            assert status.failed_ids == [ids[-1]] and status.on_success is None
        else:
            assert len(success) == 1, (batch_id, successes)
            assert success[0] == {
                "batch": batch_id, "name": complete[0]["name"], "callback": "success",
                "total": 10, "succeeded": 10, "failed": 0, "cancelled": 0,
                "failed_ids": [], "cancelled_ids": [], "data": {"note": complete[0]["name"]},
            }
            assert status.on_success is not None and status.on_success.startswith("on_ok:")
            assert (status.succeeded, status.failed, status.failed_ids) == (10, 0, [])
    # Each job's record names its batch.
    batch_id, (_, ids) = next(iter(batches.items()))
    assert client.status(ids[0]).record.get("batch") == batch_id


def test_a_batch_with_a_failing_job_gets_only_on_complete(client: wasmgear.Client) -> None:
    submitted = client.batch(
        [("echo", "fine"), ("fail", "nope", {"attempts": 1}), ("echo", "also fine")],
        name="one-fails", on_success={"function": "on_ok"}, on_complete={"function": "on_done",
                                                                         "data": [1, 2]},
    )
    status = ended_with_callbacks(client, submitted.id)
    failed = submitted.jobs[1]
    assert (status.total, status.succeeded, status.failed, status.cancelled) == (3, 2, 1, 0)
    assert status.failed_ids == [failed] and status.cancelled_ids == []
    assert status.on_success is None and status.name == "one-fails"
    assert status.on_complete is not None
    complete = json.loads(client.wait(status.on_complete, timeout=WAIT).output or b"")
    assert complete == {
        "batch": submitted.id, "name": "one-fails", "callback": "complete", "total": 3,
        "succeeded": 2, "failed": 1, "cancelled": 0, "failed_ids": [failed],
        "cancelled_ids": [], "data": [1, 2],
    }


def test_a_batch_is_filled_while_open_counts_its_jobs_and_refuses_late_ones(
    client: wasmgear.Client, batches_server: RedisServer,
) -> None:
    """Filled in two calls while open (delayed jobs, so none runs): its status counts what
    was added; closed, it refuses a job with nothing written; a job the Python client
    cancels is counted, and the Python client that cancels the last ones enqueues the
    callback (`on_complete` only: none succeeded)."""
    r = batches_server.redis
    batch_id = client.open_batch("filled", on_success=wasmgear.Callback("on_ok", {"n": 1}),
                                 on_complete=wasmgear.Callback("on_done"))
    assert len(batch_id) == 16 and int(batch_id, 16) >= 0
    status = client.batch_status(batch_id)
    assert (status.open, status.total, status.pending, status.ended) == (True, 0, 0, False)
    later = {"delay": 3600}
    first = client.add_to_batch(batch_id, [("echo", "a", later)])
    more = client.add_to_batch(batch_id, [("echo", "b", later), ("fail", "c", later)])
    assert len(first) == 1 and [i.rsplit(":", 1)[0] for i in more] == ["echo", "fail"]
    assert client.status(first[0]).state == "scheduled"
    status = client.batch_status(batch_id)
    assert (status.open, status.total, status.pending) == (True, 3, 3)
    assert (status.on_success, status.on_complete, status.ended_ms) == (None, None, None)

    client.close_batch(batch_id)
    client.close_batch(batch_id)  # again: nothing changes
    assert not client.batch_status(batch_id).open
    with pytest.raises(wasmgear.Conflict, match=f"batch {batch_id}: the batch is closed"):
        client.add_to_batch(batch_id, [("echo", "late", later)])
    # The refused job was never written (its number was reserved, not used).
    last = int(r.get("wg:{echo}:seq") or 0)
    with pytest.raises(wasmgear.NotFound):
        client.status(f"echo:{last}")
    assert client.batch_status(batch_id).total == 3

    # Cancelled by this client: counted at once (its notify's `batch ID`, `batch_done`).
    assert client.cancel(first[0]).outcome == "cancelled"
    status = client.batch_status(batch_id)
    assert (status.cancelled, status.pending, status.cancelled_ids) == (1, 2, first)
    assert not status.ended
    # Cancelled again: counted once.
    assert client.cancel(first[0]).outcome == "already-ended"
    assert client.batch_status(batch_id).cancelled == 1
    for job_id in more:
        client.cancel(job_id)
    status = client.batch_status(batch_id)
    assert (status.cancelled, status.pending, status.ended) == (3, 0, True)
    assert sorted(status.cancelled_ids) == sorted(first + more)
    # This client enqueued the callback as it cancelled the last job.
    assert status.on_success is None
    assert status.on_complete is not None and status.on_complete.startswith("on_done:")
    complete = json.loads(client.wait(status.on_complete, timeout=WAIT).output or b"")
    assert complete["callback"] == "complete" and complete["name"] == "filled"
    assert (complete["total"], complete["cancelled"], complete["succeeded"]) == (3, 3, 0)
    assert sorted(complete["cancelled_ids"]) == sorted(first + more)
    assert complete["data"] is None
    # Its record keeps the once key: enqueued again, it would be the same job.
    callback = client.status(status.on_complete)
    assert callback.record.get("once") == f"batch:{batch_id}:complete", callback.record


def test_an_empty_batch_fires_its_callbacks_at_once(client: wasmgear.Client) -> None:
    submitted = client.batch([], **spec("empty"))
    assert submitted.jobs == []
    status = client.batch_status(submitted.id)
    assert status.ended and status.total == 0 and not status.open
    assert status.on_success is not None and status.on_success.startswith("on_ok:")
    success = json.loads(client.wait(status.on_success, timeout=WAIT).output or b"")
    assert (success["total"], success["callback"], success["data"]) == (0, "success",
                                                                       {"note": "empty"})


def test_unknown_batches_and_bad_ids(client: wasmgear.Client) -> None:
    with pytest.raises(wasmgear.NotFound, match="no batch abc123"):
        client.batch_status("abc123")
    with pytest.raises(wasmgear.NotFound, match="no batch abc123"):
        client.add_to_batch("abc123", [("echo", "x")])
    with pytest.raises(wasmgear.NotFound, match="no batch abc123"):
        client.close_batch("abc123")
    for bad in ("xyz", "", "a" * 33, 12):
        with pytest.raises(wasmgear.BadInput, match="is not 1 to 32 hex digits"):
            client.batch_status(bad)  # type: ignore[arg-type]
    assert client.add_to_batch("abc123", []) == []


def test_bad_input_is_refused_before_anything_is_written(bare: RedisServer) -> None:
    cases: List[Tuple[Dict[str, Any], str]] = [
        ({"on_success": {"function": "no such"}}, "on_success: invalid function name"),
        ({"on_complete": {"data": 1}}, "on_complete: a callback needs its function"),
        ({"on_complete": {"function": "on_done", "extra": 1}}, "unknown field 'extra'"),
        ({"on_complete": "on_done"}, "is not a callback"),
        ({"on_success": wasmgear.Callback("on_ok", {"x": object()})}, "data is not JSON"),
        ({"on_success": wasmgear.Callback("on_ok", float("nan"))}, "data is not JSON"),
        ({"name": 7}, "the batch's name 7 is not a string"),
        ({"name": "x" * 70_000}, "more than the 65536 a batch may have"),
    ]
    jobs: List[Tuple[Any, str]] = [
        ([("echo", "a"), ("echo", "b", {"priority": 5000})], "job 2: priority 5000 is out of range"),
        ([("no such", "a")], "job 1: invalid function name"),
        ([("echo", "a", {"nope": 1})], "job 1: unknown option 'nope'"),
        ([("echo",)], "job 1: give (function, input)"),
        ([("echo", 5)], "job 1: input int is neither bytes nor str"),
        ("echo", "give the batch's jobs as a list"),
        ([("echo", "a", {"after": ["echo:999"]})], "job 1: dependency echo:999 does not exist"),
        ([("echo", "a"), ("echo", "b", {"at": 1000})], "job 2: at 1970-01-01T00:16:40+00:00 is in the past"),
    ]
    with wasmgear.Client.from_url(bare.url) as client:
        for kwargs, expected in cases:
            with pytest.raises(wasmgear.BadInput, match=expected):
                client.open_batch(**kwargs)
            with pytest.raises(wasmgear.BadInput, match=expected):
                client.batch([("echo", "a")], **kwargs)
        for given, expected in jobs:
            with pytest.raises(wasmgear.BadInput) as refused:
                client.batch(given, on_complete={"function": "on_done"})
            assert expected in str(refused.value), (str(refused.value), expected)
        assert bare.redis.dbsize() == 0, "a refused batch wrote nothing"
        # Nor is a refused add to an open batch: its total stays 0, no number is reserved.
        batch_id = client.open_batch()
        keys = set(bare.redis.keys())
        for given, expected in jobs:
            with pytest.raises(wasmgear.BadInput) as refused:
                client.add_to_batch(batch_id, given)
            assert expected in str(refused.value), (str(refused.value), expected)
        assert set(bare.redis.keys()) == keys
        assert client.batch_status(batch_id).total == 0


def test_async_batches(batches_server: RedisServer) -> None:
    """The same with AsyncClient: a batch whose jobs all succeed gets one callback of each
    kind; a job of an open batch cancelled through AsyncClient is counted."""
    async def main() -> None:
        async with await wasmgear.AsyncClient.from_url(batches_server.url) as client:
            submitted = await client.batch(
                [("echo", "x"), ("echo", "y"), ("echo", "z")], name="async",
                on_success={"function": "on_ok", "data": "hi"},
                on_complete=wasmgear.Callback("on_done"))

            async def settled() -> Any:
                status = await client.batch_status(submitted.id)
                return (status if status.ended and status.on_complete not in (None, "due")
                        and status.on_success not in (None, "due") else None)

            status = await eventually(settled, WAIT, "the batch to end with its callbacks")
            assert (status.total, status.succeeded, status.pending) == (3, 3, 0)
            assert status.on_success is not None and status.on_complete is not None
            success = json.loads((await client.wait(status.on_success, timeout=WAIT)).output or b"")
            assert (success["callback"], success["succeeded"], success["data"]) == ("success", 3, "hi")
            complete = json.loads((await client.wait(status.on_complete, timeout=WAIT)).output or b"")
            assert (complete["callback"], complete["total"], complete["batch"]) == (
                "complete", 3, submitted.id)

            batch_id = await client.open_batch("async-open", on_complete={"function": "on_done"})
            ids = await client.add_to_batch(batch_id, [("echo", "later", {"delay": 3600}),
                                                       ("fail", "later", {"delay": 3600})])
            assert (await client.cancel(ids[1])).outcome == "cancelled"
            status = await client.batch_status(batch_id)
            assert (status.open, status.cancelled, status.pending, status.cancelled_ids) == (
                True, 1, 1, [ids[1]])
            await client.close_batch(batch_id)
            with pytest.raises(wasmgear.Conflict):
                await client.add_to_batch(batch_id, [("echo", "late")])
            await client.cancel(ids[0])
            status = await client.batch_status(batch_id)
            assert status.ended and status.on_complete is not None
            assert status.on_complete.startswith("on_done:")
            with pytest.raises(wasmgear.NotFound, match="no batch 0123"):
                await client.batch_status("0123")

    asyncio.run(asyncio.wait_for(main(), 300))
