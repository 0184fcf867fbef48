"""Replicas and Redis Sentinel, with real processes: a primary and a replica
(`--replicaof`) for `min_replicas` and NotReplicated; a primary, a replica and a sentinel
(`redis-server CONF --sentinel`) for `redis+sentinel://` URLs and a failover, with a real
worker that reaches Redis through the sentinel too."""

from __future__ import annotations

import asyncio
import json
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Set, TypeVar

import pytest
import redis

import wasmgear
from conftest import (RedisServer, Worker, cli, end, events_channel, free_port, numsub, spawn,
                      wait_until)

T = TypeVar("T")

#: The primary starts a replica's first sync at once (not after the default 5 s).
FAST_SYNC = ("--repl-diskless-sync-delay", "0")


def replication(r: redis.Redis) -> Dict[str, Any]:
    info: Dict[str, Any] = r.info("replication")
    return info


def jobs_of(r: redis.Redis, function: str) -> int:
    """How many job records `function` has on the node of `r`."""
    return int(r.hlen(f"wg:{{{function}}}:jobs"))


def has_job(r: redis.Redis, job_id: str) -> bool:
    function, _, number = job_id.rpartition(":")
    return bool(r.hexists(f"wg:{{{function}}}:jobs", number))


class Replicated:
    """A primary and one replica of it, each a redis-server on a free port."""

    def __init__(self, workdir: Path) -> None:
        self.primary = RedisServer(workdir / "primary", extra=FAST_SYNC)
        try:
            self.replica = RedisServer(workdir / "replica", extra=(
                *FAST_SYNC, "--replicaof", "127.0.0.1", str(self.primary.port)))
        except BaseException:
            self.primary.stop()
            raise
        try:
            wait_until(self.linked, 15, "the replica to be in sync with the primary")
            # After its first sync a replica gets the primary's writes only once it has
            # acknowledged (within a second): until then it would be promoted empty.
            wait_until(self.caught_up, 15, "the replica to confirm the primary's writes")
        except BaseException:
            self.stop()
            raise

    def linked(self) -> bool:
        return (replication(self.primary.redis).get("connected_slaves") == 1
                and replication(self.replica.redis).get("master_link_status") == "up")

    def caught_up(self) -> bool:
        """Whether the replica confirms every write made on the primary so far (a write,
        then `WAIT 1 100` on the same connection)."""
        pipe = self.primary.redis.pipeline(transaction=False)
        pipe.incr("test:replication-check")
        pipe.execute_command("WAIT", 1, 100)
        return int(pipe.execute()[1]) == 1

    def stop_replica(self) -> None:
        """Stops the replica, and waits until the primary has no replica left."""
        self.replica.stop()
        wait_until(lambda: replication(self.primary.redis).get("connected_slaves") == 0, 10,
                   "the primary to see its replica gone")

    def stop(self) -> None:
        try:
            self.replica.stop()
        finally:
            self.primary.stop()


@pytest.fixture
def replicated(tmp_path: Path) -> Iterator[Replicated]:
    pair = Replicated(tmp_path)
    try:
        yield pair
    finally:
        pair.stop()


def test_writes_of_jobs_are_confirmed_by_a_replica(replicated: Replicated) -> None:
    """With min_replicas=1 each write of jobs returns once the replica has it: the replica
    holds the jobs as soon as the call returns (enqueue, enqueue_many, flows, batches, and
    the asyncio client)."""
    primary, replica = replicated.primary, replicated.replica
    with wasmgear.Client.from_url(primary.url, min_replicas=1) as client:
        assert (client.min_replicas, client.min_replicas_timeout) == (1, 1.0)
        one = client.enqueue("kept", "one")
        assert has_job(replica.redis, one.id)
        many = client.enqueue_many("kept", ["a", "b", ("c", {"priority": "high"})])
        assert all(has_job(replica.redis, job.id) for job in many)
        flow = client.submit_flow({"name": "replicated", "jobs": {
            "a": {"function": "kept", "input": "x"},
            "b": {"function": "other", "input": "y", "after": ["a"]},
        }})
        assert all(has_job(replica.redis, job_id) for job_id in flow.jobs.values())
        batch = client.batch([("kept", "p"), ("other", "q", {"attempts": 1})])
        assert all(has_job(replica.redis, job_id) for job_id in batch.jobs)
        assert client.status(one.id).state == "queued"

    async def main() -> None:
        async with await wasmgear.AsyncClient.from_url(primary.url, min_replicas=1,
                                                       min_replicas_timeout=2) as client:
            assert (client.min_replicas, client.min_replicas_timeout) == (1, 2.0)
            job = await client.enqueue("kept", "async")
            assert has_job(replica.redis, job.id)

    asyncio.run(asyncio.wait_for(main(), 60))


def test_a_write_without_its_replicas_raises_not_replicated_written_once(
    replicated: Replicated,
) -> None:
    """No replica left: min_replicas=1 with a 0.2 s timeout raises NotReplicated after three
    sends of the same call, which wrote the job once."""
    primary = replicated.primary
    replicated.stop_replica()
    with wasmgear.Client.from_url(primary.url, min_replicas=1,
                                  min_replicas_timeout=0.2) as client:
        with pytest.raises(wasmgear.NotReplicated) as caught:
            client.enqueue("lonely", "one")
        error = caught.value
        assert isinstance(error, wasmgear.WasmgearError) and error.exit_code == 6
        assert (error.wanted, error.confirmed, error.timeout_ms) == (1, 0, 200)
        assert str(error).startswith(
            "the enqueue of a job of lonely was written to the Redis primary, but only 0 of "
            "the 1 replicas asked for confirmed it within 200 ms, even when sent again")
        # Written once, though sent three times (the same call id).
        assert [job.id for job in error.enqueued] == ["lonely:1"]
        assert jobs_of(primary.redis, "lonely") == 1
        assert int(primary.redis.get("wg:{lonely}:seq") or 0) == 1
        assert client.status("lonely:1").state == "queued"

        with pytest.raises(wasmgear.NotReplicated,
                           match=r"^the enqueue of 3 jobs of lonely was written") as caught:
            client.enqueue_many("lonely", ["a", "b", "c"])
        assert [job.id for job in caught.value.enqueued] == ["lonely:2", "lonely:3", "lonely:4"]
        assert jobs_of(primary.redis, "lonely") == 4


def test_a_functions_own_min_replicas_is_asked_for_by_every_client(
    replicated: Replicated,
) -> None:
    """A function configured with min_replicas=1 has a client that asks for none wait for a
    replica too: NotReplicated once the replica is gone, the job written once; cleared, the
    writes are done at once again."""
    primary, replica = replicated.primary, replicated.replica
    with wasmgear.Client.from_url(primary.url, min_replicas_timeout=0.2) as client:
        assert client.min_replicas == 0
        config = client.configure("guarded", min_replicas=1)
        assert config.min_replicas == 1 and client.config("guarded").min_replicas == 1
        # The Rust CLI reads the same setting, under the same name.
        theirs = json.loads(cli(primary.url, "config", "guarded", "--json").stdout)
        assert theirs["min_replicas"] == 1
        # With its replica, the function's setting is met.
        job = client.enqueue("guarded", "confirmed")
        assert has_job(replica.redis, job.id)

        replicated.stop_replica()
        with pytest.raises(wasmgear.NotReplicated) as caught:
            client.enqueue("guarded", "unconfirmed")
        assert (caught.value.wanted, caught.value.confirmed) == (1, 0)
        assert jobs_of(primary.redis, "guarded") == 2

        assert client.configure("guarded", min_replicas=None).min_replicas is None
        assert client.config("guarded").min_replicas is None
        client.enqueue("guarded", "unguarded")
        assert jobs_of(primary.redis, "guarded") == 3
        with pytest.raises(wasmgear.BadInput, match="min_replicas must be 1 to 16"):
            client.configure("guarded", min_replicas=0)


# --- Redis Sentinel ----------------------------------------------------------------------


class SentinelSet:
    """A primary, its replica and one sentinel watching them as service `svc` (quorum 1),
    each on a free port. The tests fail over by hand (`SENTINEL FAILOVER`): the sentinel
    counts a node down only after 10 s without an answer, so that a slow moment of a busy
    machine (the new primary forking for a replica's sync) does not fail over again."""

    def __init__(self, workdir: Path) -> None:
        self.pair = Replicated(workdir)
        self.port = free_port()
        folder = workdir / "sentinel"
        # The sentinel rewrites its configuration file: it must be one it can write.
        conf = folder / "sentinel.conf"
        try:
            folder.mkdir(parents=True)
            conf.write_text(
                f"port {self.port}\nbind 127.0.0.1\ndir {folder}\n"
                f"sentinel monitor svc 127.0.0.1 {self.pair.primary.port} 1\n"
                "sentinel down-after-milliseconds svc 10000\n"
                "sentinel failover-timeout svc 5000\n"
            )
            self.log = open(folder / "sentinel.log", "ab")
            self.process = spawn(["redis-server", str(conf), "--sentinel"],
                                 stdout=self.log, stderr=subprocess.STDOUT)
        except BaseException:
            self.pair.stop()
            raise
        self.redis = redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=5)
        self.url = f"redis+sentinel://127.0.0.1:{self.port}/svc"
        try:
            wait_until(self.ready, 20, "the sentinel to know the primary and a healthy replica",
                       every=0.05)
        except BaseException:
            self.stop()
            raise

    def ready(self) -> bool:
        if self.process.poll() is not None:
            raise AssertionError(f"the sentinel exited: {self.log.name}")
        try:
            replicas = self.redis.execute_command("SENTINEL", "REPLICAS", "svc")
        except redis.ConnectionError:
            return False
        for replica in replicas or []:
            fields = {wasmgear._core.text(k): wasmgear._core.text(v)
                      for k, v in (replica.items() if isinstance(replica, dict)
                                   else zip(replica[::2], replica[1::2]))}
            if fields.get("flags") == "slave" and fields.get("master-link-status") == "ok":
                return True
        return False

    def primary_port(self) -> int:
        return int(self.redis.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", "svc")[1])

    def stop(self) -> None:
        self.redis.close()
        end(self.process)
        self.log.close()
        self.pair.stop()


@pytest.fixture
def sentinels(tmp_path: Path) -> Iterator[SentinelSet]:
    made = SentinelSet(tmp_path)
    try:
        yield made
    finally:
        made.stop()


def retried(call: Callable[[], T], times: int = 3) -> T:
    """`call`, sent again (at most `times` in all) only while it fails because the primary is
    unreachable or read-only for a moment."""
    for attempt in range(times):
        try:
            return call()
        except wasmgear.Unreachable:
            if attempt == times - 1:
                raise
    raise AssertionError("unreachable")


def kinds_of(job_id: str, get: Callable[[], Any], timeout: float = 10) -> Set[str]:
    """The kinds of the events of `job_id` read with `get` until its `finish` (at most
    `timeout` seconds)."""
    kinds: Set[str] = set()
    deadline = time.monotonic() + timeout
    while "finish" not in kinds and time.monotonic() < deadline:
        event = get()
        if event is not None and event.id == job_id:
            kinds.add(event.kind)
    return kinds


def test_a_sentinel_url_follows_the_primary_through_a_failover(
    sentinels: SentinelSet, tmp_path: Path,
) -> None:
    """Through redis+sentinel://, the sync and the asyncio client (and a real worker) write
    to the primary; after `SENTINEL FAILOVER` the same client objects write to the new one,
    and a wait and event streams (sync and asyncio) started before the failover are
    subscribed again on the new primary and hear the job end there. The library is loaded
    again on a primary that lost it."""
    old, new = sentinels.pair.primary, sentinels.pair.replica
    worker = Worker(sentinels.url, tmp_path / "worker", plugins=("echo",))
    loop = asyncio.new_event_loop()
    waiter: List[Any] = []
    client = aclient = stream = astream = None
    thread = threading.Thread(
        target=lambda: waiter.append(client.wait("parked:1", timeout=30, check=False)))
    try:
        client = wasmgear.Client.from_url(sentinels.url)
        aclient = loop.run_until_complete(wasmgear.AsyncClient.from_url(sentinels.url))
        assert client is not None and aclient is not None
        first = client.enqueue("echo", "before")
        assert has_job(old.redis, first.id)
        assert client.wait(first.id, timeout=30).output == b"before"
        assert client.status(first.id).state == "succeeded"
        early = loop.run_until_complete(aclient.enqueue("echo", "async before"))
        assert loop.run_until_complete(aclient.status(early.id)).state in (
            "queued", "running", "succeeded")

        # A wait across the failover, for a job no worker serves.
        assert client.enqueue("parked", "x").id == "parked:1"
        stream = client.events("parked")
        astream = loop.run_until_complete(aclient.events("parked").start())
        thread.start()
        wait_until(lambda: numsub(old.redis, events_channel("parked")) == 3, 10,
                   "the subscriptions of the wait and of both event streams on the primary")

        # Everything written so far is on the replica that is promoted.
        wait_until(sentinels.pair.caught_up, 10, "the replica to confirm the writes")
        assert sentinels.redis.execute_command("SENTINEL", "FAILOVER", "svc")
        wait_until(lambda: sentinels.primary_port() == new.port, 15,
                   "the sentinel to name the replica as the primary", every=0.05)
        # The sentinel demotes the old primary some 8 s after the switch: in one transaction,
        # REPLICAOF the new one, then CLIENT KILL of its normal and its pub/sub clients. The
        # test does it at once, but leaves the pub/sub clients: the client's own check of
        # the primary has to move the wait's subscription.
        demote = old.redis.pipeline(transaction=True)
        demote.execute_command("REPLICAOF", "127.0.0.1", str(new.port))
        demote.execute_command("CLIENT", "KILL", "TYPE", "normal")
        demote.execute()
        wait_until(lambda: replication(old.redis).get("role") == "slave", 10,
                   "the old primary to be a replica")
        # The worker follows the primary too (its own business): its subscription to echo's
        # work channel is on the new primary before a job is enqueued there.
        wait_until(lambda: numsub(new.redis, "wg:{echo}:work") >= 1, 15,
                   "the worker to listen on the new primary")

        assert client is not None and aclient is not None
        second = retried(lambda: client.enqueue("echo", "after"))
        assert has_job(new.redis, second.id), "the enqueue went to the old primary"
        assert client.wait(second.id, timeout=30).output == b"after"
        late = retried(lambda: loop.run_until_complete(aclient.enqueue("echo", "async after")))
        assert has_job(new.redis, late.id)
        job = loop.run_until_complete(aclient.wait(late.id, timeout=30))
        assert job.output == b"async after"

        # The wait's subscription and the event streams' followed the primary (a stream
        # checks it as it is read); the job ends there.
        def subscribed_again() -> bool:
            assert stream is not None and astream is not None
            assert stream.get(timeout=0.05) is None
            assert loop.run_until_complete(astream.get(timeout=0.05)) is None
            return numsub(new.redis, events_channel("parked")) == 3

        wait_until(subscribed_again, 15, "the wait and the event streams to subscribe again "
                   "on the new primary")
        assert thread.is_alive() and not waiter
        assert client.cancel("parked:1").outcome == "cancelled"
        thread.join(30)
        assert waiter and isinstance(waiter[0], wasmgear.Job), waiter
        assert waiter[0].state == "cancelled"
        assert "finish" in kinds_of("parked:1", lambda: stream.get(timeout=1))
        assert "finish" in kinds_of(
            "parked:1", lambda: loop.run_until_complete(astream.get(timeout=1)))

        # A primary without the library (flushed): the client loads it there again.
        new.redis.execute_command("FUNCTION", "FLUSH")
        assert client.status(second.id).state == "succeeded"
        assert new.redis.execute_command("FUNCTION", "LIST")
        new.redis.execute_command("FUNCTION", "FLUSH")
        third = client.enqueue("parked", "after a flush")
        assert has_job(new.redis, third.id) and new.redis.execute_command("FUNCTION", "LIST")
    finally:
        if stream is not None:
            stream.close()
        if astream is not None:
            loop.run_until_complete(astream.aclose())
        if thread.is_alive() and client is not None:
            try:
                client.cancel("parked:1")  # ends the wait of a test that failed early
            except wasmgear.WasmgearError:
                pass
            thread.join(35)
        if client is not None:
            client.close()
        if aclient is not None:
            loop.run_until_complete(aclient.aclose())
        loop.close()
        worker.stop()


def test_sentinels_that_name_no_primary_are_named_in_the_error(sentinels: SentinelSet) -> None:
    """A service the sentinel does not know, and sentinels nobody listens on: Unreachable,
    naming each sentinel and what it answered (the passwords hidden)."""
    with pytest.raises(wasmgear.Unreachable) as caught:
        wasmgear.Client.from_url(f"redis+sentinel://127.0.0.1:{sentinels.port}/nosuch")
    assert str(caught.value) == (
        f"cannot reach Redis at redis+sentinel://127.0.0.1:{sentinels.port}/nosuch: no "
        f"sentinel named a primary that answers as one: sentinel 127.0.0.1:{sentinels.port} "
        'does not know the service "nosuch" (is it the name in `sentinel monitor`?)')


def test_unreachable_sentinels_are_named_in_the_error() -> None:
    a, b = free_port(), free_port()
    url = (f"redis+sentinel://app:n0de-secret@127.0.0.1:{a},127.0.0.1:{b}/svc"
           "?sentinel_password=s3ntinel-secret")
    with pytest.raises(wasmgear.Unreachable) as caught:
        wasmgear.Client.from_url(url)
    message = str(caught.value)
    assert message.startswith(
        f"cannot reach Redis at redis+sentinel://app:***@127.0.0.1:{a},127.0.0.1:{b}/svc"
        "?sentinel_password=***: no sentinel named a primary that answers as one: "
        f"sentinel 127.0.0.1:{a}: connection refused"), message
    assert f"; sentinel 127.0.0.1:{b}: connection refused" in message
    assert "secret" not in message

    async def main() -> None:
        with pytest.raises(wasmgear.Unreachable) as caught:
            await wasmgear.AsyncClient.from_url(url)
        assert str(caught.value).startswith(message.split(": no sentinel")[0])
        assert f"sentinel 127.0.0.1:{a}: connection refused" in str(caught.value)

    asyncio.run(asyncio.wait_for(main(), 30))


def test_rediss_sentinel_with_passwords(tmp_path: Path) -> None:
    """rediss+sentinel://: TLS to the sentinel and to the primary (the CA given as
    ssl_ca_certs), the primary's password in the URL, the sentinel's as sentinel_password."""
    from test_tls import TlsRedis

    primary = TlsRedis(tmp_path / "tls")
    process = None
    log = open(tmp_path / "sentinel.log", "ab")
    try:
        primary.redis.config_set("requirepass", "n0de-pass")
        port = free_port()
        folder = tmp_path / "sentinel"
        folder.mkdir()
        certs = tmp_path / "tls"
        (folder / "sentinel.conf").write_text(
            f"port 0\ntls-port {port}\nbind 127.0.0.1\ndir {folder}\n"
            f"tls-cert-file {certs / 'server.pem'}\ntls-key-file {certs / 'server.key'}\n"
            f"tls-ca-cert-file {certs / 'ca.pem'}\ntls-auth-clients no\ntls-replication yes\n"
            "requirepass s3ntinel-pass\n"
            f"sentinel monitor svc 127.0.0.1 {primary.port} 1\n"
            "sentinel auth-pass svc n0de-pass\n"
        )
        process = spawn(["redis-server", str(folder / "sentinel.conf"), "--sentinel"],
                        stdout=log, stderr=subprocess.STDOUT)
        sentinel = redis.Redis(host="127.0.0.1", port=port, ssl=True,
                               ssl_ca_certs=str(primary.ca), password="s3ntinel-pass",
                               socket_timeout=5)

        def named() -> bool:
            assert process is not None and process.poll() is None, "the sentinel exited"
            try:
                return bool(sentinel.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME",
                                                     "svc"))
            except redis.ConnectionError:
                return False

        wait_until(named, 15, "the TLS sentinel to answer", every=0.05)
        sentinel.close()
        base = f"rediss+sentinel://:n0de-pass@127.0.0.1:{port}/svc"
        with wasmgear.Client.from_url(f"{base}?sentinel_password=s3ntinel-pass",
                                      ssl_ca_certs=str(primary.ca)) as client:
            job = client.enqueue("secure", "over TLS")
            assert client.status(job.id).state == "queued"
        with pytest.raises(wasmgear.Unreachable) as caught:
            wasmgear.Client.from_url(base, ssl_ca_certs=str(primary.ca))
        assert f"sentinel 127.0.0.1:{port}: it wants a password" in str(caught.value)
        with pytest.raises(wasmgear.Unreachable) as caught:
            wasmgear.Client.from_url(f"{base}?sentinel_password=wrong",
                                     ssl_ca_certs=str(primary.ca))
        assert "the user or password was refused" in str(caught.value)
        assert "n0de-pass" not in str(caught.value) and "wrong" not in str(caught.value)
    finally:
        if process is not None:
            end(process)
        log.close()
        primary.stop()
