"""A wait that outlives a Redis restart, and Redis Cluster: real servers, a real worker."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import threading
from pathlib import Path
from typing import Any, Dict, Iterator, List

import pytest
import redis

import wasmgear
from conftest import RedisServer, Worker, cli, events_channel, free_port, numsub, wait_until


def test_wait_outlives_a_redis_restart(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="wasmgear")
    server = RedisServer(tmp_path / "redis")
    try:
        worker = Worker(server.url, tmp_path / "worker", plugins=("echo",))
    except BaseException:
        server.stop()
        raise
    client = wasmgear.Client.from_url(server.url)
    try:
        cli(server.url, "pause", "echo")
        enqueued = client.enqueue("echo", "survives a restart")
        result: Dict[str, Any] = {}

        def wait() -> None:
            try:
                result["job"] = client.wait(enqueued.id, timeout=90)
            except Exception as e:  # noqa: BLE001 - checked below
                result["job"] = e

        waiter = threading.Thread(target=wait)
        waiter.start()
        wait_until(lambda: client._listener.waiting() == 1, 10, "the wait to register")
        wait_until(lambda: numsub(server.redis, events_channel("echo")) == 1, 10, "the subscription")

        # Stop Redis (keeping its data on disk) and start it again on the same port.
        try:
            server.redis.execute_command("SHUTDOWN", "SAVE")
        except redis.ConnectionError:
            pass
        server.process.wait(20)
        wait_until(lambda: "lost the events connection" in caplog.text, 20, "the wait to notice")
        server = RedisServer(tmp_path / "redis", port=server.port)
        wait_until(lambda: "listening to events again" in caplog.text, 30, "the subscription to come back")
        wait_until(lambda: numsub(server.redis, events_channel("echo")) == 1, 10, "the resubscription")
        assert waiter.is_alive(), f"the wait ended early: {result}"
        cli(server.url, "resume", "echo")
        waiter.join(90)
        job = result["job"]
        assert isinstance(job, wasmgear.Job), job
        assert job.state == "succeeded" and job.output == b"survives a restart"
    finally:
        client.close()
        worker.stop()
        server.stop()


class Cluster:
    """Three primaries of a Redis Cluster on free ports."""

    def __init__(self, workdir: Path) -> None:
        self.nodes: List[RedisServer] = []
        try:
            for i in range(3):
                self.nodes.append(RedisServer(
                    workdir / f"node{i}", port=free_port(bus=True),
                    extra=["--cluster-enabled", "yes", "--cluster-config-file",
                           str(workdir / f"node{i}" / "nodes.conf"),
                           "--cluster-node-timeout", "5000"],
                ))
            subprocess.run(
                ["redis-cli", "--cluster", "create", *[f"127.0.0.1:{n.port}" for n in self.nodes],
                 "--cluster-replicas", "0", "--cluster-yes"],
                check=True, capture_output=True, timeout=60,
            )
        except BaseException:
            self.stop()
            raise

        def ready() -> bool:
            for node in self.nodes:
                info = node.redis.execute_command("CLUSTER", "INFO").decode()
                if "cluster_state:ok" not in info:
                    return False
            return True

        try:
            wait_until(ready, 30, "the cluster to be ready", every=0.1)
        except BaseException:
            self.stop()
            raise
        self.url = self.nodes[0].url

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path / "cluster")
    yield c
    c.stop()


def test_redis_cluster(cluster: Cluster, tmp_path: Path) -> None:
    worker = Worker(cluster.url, tmp_path / "worker")
    client = wasmgear.Client.from_url(cluster.url)
    try:
        assert client.cluster
        # The library is on every primary.
        for node in cluster.nodes:
            libraries = node.redis.execute_command("FUNCTION", "LIST", "LIBRARYNAME", "wasmgear_v2")
            assert libraries, f"no library on node {node.port}"
        echo = client.enqueue("echo", "over the cluster")
        counted = client.enqueue("count", "3 10", after=[echo.id])
        many = client.enqueue_many("echo", [f"c{i}" for i in range(1500)])
        reports: List[wasmgear.Progress] = []
        assert client.wait(counted.id, timeout=60, on_progress=reports.append).state == "succeeded"
        assert reports and reports[-1].done == 3
        jobs = client.wait([e.id for e in many], timeout=120)
        assert [j.output for j in jobs] == [f"c{i}".encode() for i in range(1500)]
        assert client.status(counted.id).after == [echo.id]
        failing = client.enqueue("fail", "x", attempts=1)
        with pytest.raises(wasmgear.JobFailed):
            client.wait(failing.id, timeout=60)
        assert client.retry(failing.id)
        queues = {q.function: q for q in client.queues()}
        assert queues["echo"].succeeded >= 1501 and queues["echo"].workers == 1
        # echo, count and fail hash to slots of three different nodes: each holds its keys.
        for node, function in zip(cluster.nodes, ("fail", "count", "echo")):
            assert node.redis.exists(f"wg:{{{function}}}:jobs"), (node.port, function)

        async def main() -> None:
            async with await wasmgear.AsyncClient.from_url(cluster.url) as aclient:
                assert aclient.cluster
                job = await aclient.enqueue("count", "2 10")
                done = await aclient.wait(job.id, timeout=60)
                assert done.state == "succeeded"
                assert (await aclient.status(echo.id)).output == b"over the cluster"

        asyncio.run(asyncio.wait_for(main(), 120))
    finally:
        client.close()
        worker.stop()


def test_enqueue_whose_reply_is_lost_is_sent_again_once(bare, caplog: pytest.LogCaptureFixture) -> None:
    """Redis holds writes for 1.5 s (CLIENT PAUSE) while the client waits 0.3 s for a reply:
    the enqueue times out and is sent again with the same call id until it is answered, and
    the job is enqueued once."""
    caplog.set_level(logging.WARNING, logger="wasmgear")
    client = wasmgear.Client.from_url(bare.url, socket_timeout=0.3)
    try:
        client.enqueue("echo", "warm-up")
        bare.redis.execute_command("CLIENT", "PAUSE", 1500, "WRITE")
        enqueued = client.enqueue("echo", "after the pause")
        assert "sending it again" in caplog.text
        assert enqueued.id == "echo:2" and enqueued.created
        assert bare.redis.get("wg:{echo}:seq") == b"2"
        assert bare.redis.hlen("wg:{echo}:jobs") == 2
        assert client.status(enqueued.id).state == "queued"
    finally:
        client.close()


def test_enqueue_gives_up_when_redis_stays_away(tmp_path: Path) -> None:
    server = RedisServer(tmp_path / "redis")
    client = wasmgear.Client.from_url(server.url)
    try:
        client.enqueue("echo", "first")
        server.stop()
        with pytest.raises(wasmgear.Unreachable) as caught:
            client.enqueue("echo", "nobody listens")
        assert caught.value.exit_code == 6 and caught.value.enqueued == []
    finally:
        client.close()
