"""Cancelling a job cancels its children (the jobs it enqueued through `wasmgear:job/jobs`),
and theirs: against a real redis-server and a real worker that serves only `split`, so the
`reverse` children it enqueues stay queued until they are cancelled."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any, Dict, Iterator, List, Optional, Tuple, TypeVar

import pytest
import redis

import wasmgear
from conftest import RedisServer, Worker, eventually, wait_until
from wasmgear import _core as core

T = TypeVar("T")

#: `split` may enqueue children of `reverse` (as plugins/split/split.toml grants) and of
#: `split` itself: a `split` child of a `split` job enqueues `reverse` grandchildren.
MANIFEST = '[jobs]\nenqueue = ["reverse", "split"]\nmax_children = 200\n'


@pytest.fixture(scope="module")
def split_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The URL of a Redis of its own that a worker serving only `split` serves."""
    server = RedisServer(tmp_path_factory.mktemp("children-redis"))
    try:
        worker = Worker(server.url, tmp_path_factory.mktemp("children-worker"),
                        plugins=("split",), manifests={"split": MANIFEST})
        try:
            yield server.url
        finally:
            worker.stop()
    finally:
        server.stop()


def listed_children(job: wasmgear.Job) -> List[str]:
    children = job.record.get("children")
    return [str(c) for c in children] if isinstance(children, list) else []


def test_cancelling_a_parent_cancels_its_queued_children(split_url: str) -> None:
    """A running `split` parent cancelled through `Client.cancel`: each of its queued
    children ends `cancelled` as the call returns, and the parent ends `cancelled`."""
    with wasmgear.Client.from_url(split_url) as client:
        parent = client.enqueue("split", "ab\ncd\nef").id

        def three_children() -> List[str]:
            job = client.status(parent)
            assert job.state in ("queued", "running"), job.record
            children = listed_children(job)
            return children if len(children) == 3 else []

        children = wait_until(three_children, 60, "split to enqueue 3 children")
        assert isinstance(children, list)
        assert [client.status(c).state for c in children] == ["queued"] * 3
        assert all(c.startswith("reverse:") for c in children)

        result = client.cancel(parent)
        assert (result.id, result.outcome, result.state) == (parent, "stopping", "running")
        assert [client.status(c).state for c in children] == ["cancelled"] * 3
        assert client.wait(parent, timeout=60, check=False).state == "cancelled"
        # Cancelling again changes nothing, and still answers for the parent.
        assert client.cancel(parent).outcome == "already-ended"


def test_cancelling_a_parent_cancels_its_children_s_children(split_url: str) -> None:
    """Through `AsyncClient.cancel`: a `split` parent whose two running `split` children wait
    on two queued `reverse` grandchildren each; every grandchild ends `cancelled` as the call
    returns, then both children and the parent end `cancelled`."""

    async def main() -> None:
        async with await wasmgear.AsyncClient.from_url(split_url) as client:
            plan = {"function": "split", "chunks": ["ab\ncd", "ef\ngh"]}
            parent = (await client.enqueue("split", json.dumps(plan))).id

            async def tree() -> Dict[str, List[str]]:
                """Each child of the parent with its children, once there are two with two
                each."""
                job = await client.status(parent)
                assert job.state in ("queued", "running"), job.record
                found = {}
                for child in listed_children(job):
                    found[child] = listed_children(await client.status(child))
                if len(found) == 2 and all(len(g) == 2 for g in found.values()):
                    return found
                return {}

            grown = await eventually(tree, 60, "two split children with two reverse children each")
            children = sorted(grown)
            grandchildren = sorted(g for gs in grown.values() for g in gs)
            assert all(c.startswith("split:") for c in children)
            assert all(g.startswith("reverse:") for g in grandchildren)
            assert [(await client.status(c)).state for c in children] == ["running"] * 2
            assert [(await client.status(g)).state for g in grandchildren] == ["queued"] * 4

            assert (await client.cancel(parent)).outcome == "stopping"
            assert [(await client.status(g)).state for g in grandchildren] == ["cancelled"] * 4
            ended = await client.wait([parent, *children], timeout=60, check=False)
            assert [job.state for job in ended] == ["cancelled"] * 3

    asyncio.run(asyncio.wait_for(main(), 300))


def drive(conn: redis.Redis, gen: core.Gen[T], most: int, sent: List[Tuple[Any, ...]]) -> T:
    """Runs one of the client's operations against `conn` as the clients do, keeping each
    command in `sent`; fails once it has sent `most` commands without ending."""
    reply: Any = None
    error: Optional[BaseException] = None
    while len(sent) < most:
        try:
            op = gen.throw(error) if error is not None else gen.send(reply)
        except StopIteration as stop:
            value: T = stop.value
            return value
        assert isinstance(op, core.Cmd), op
        sent.append(op.args)
        reply, error = None, None
        try:
            reply = conn.execute_command(*op.args)
        except redis.RedisError as e:
            error = e
    raise AssertionError(f"the operation sent {most} commands and goes on: "
                         f"{[args[1] for args in sent[-4:]]} ...")


def test_cancel_visits_each_job_once_whatever_the_records_list(split_url: str) -> None:
    """Records made by hand with the library's `adopt`: a diamond (a's children b and c both
    list d), a cycle (d lists a) and a job listing itself; `cancel` sends one `cancel` per job
    and ends, and all four end `cancelled`."""
    with wasmgear.Client.from_url(split_url) as client:
        # Nobody serves this function: its jobs stay queued.
        a, b, c, d = (e.id for e in client.enqueue_many("nobody-serves", ["a", "b", "c", "d"]))
        conn = redis.Redis.from_url(split_url)
        try:
            for parent, child in ((a, b), (a, c), (a, a), (b, d), (c, d), (d, a)):
                function, number = core.parse_job_id(parent)
                conn.execute_command(*client._proto.fcall("adopt", function, number, child).args)
            assert listed_children(client.status(a)) == [b, c, a]

            sent: List[Tuple[Any, ...]] = []
            result = drive(conn, core.cancel(client._proto, a), 100, sent)
            assert result.outcome == "cancelled"
            cancelled = [f"{args[-2]}:{args[-1]}" for args in sent if args[1] == "wg2_cancel"]
            assert sorted(cancelled) == sorted([a, b, c, d])
            assert [client.status(j).state for j in (a, b, c, d)] == ["cancelled"] * 4
        finally:
            conn.close()
