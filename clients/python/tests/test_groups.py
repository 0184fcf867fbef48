"""Groups inside a function (a tenant, customer or document key per job), against a real
redis-server and a real worker serving `echo` and `count` on a Redis of its own (the tests
pause and cap these functions): jobs leased round robin across groups, a group of
concurrency 1 running its jobs one at a time, a paused group, group keys and settings refused
with nothing written, the function's group defaults read back, flows' and batches' jobs in
groups, and the asyncio client."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import timedelta
from typing import Iterator, List

import pytest

import wasmgear
from wasmgear import FunctionConfig, GroupConfig, GroupInfo, GroupsOverview, RateLimit
from conftest import RedisServer, Worker, cli, wait_until

WAIT = 60


@pytest.fixture(scope="module")
def groups_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A Redis of its own that one worker serves (echo, count)."""
    server = RedisServer(tmp_path_factory.mktemp("groups-redis"))
    worker = None
    try:
        worker = Worker(server.url, tmp_path_factory.mktemp("groups-worker"),
                        plugins=("echo", "count"))
        yield server
    finally:
        if worker is not None:
            worker.stop()
        server.stop()


@pytest.fixture
def client(groups_server: RedisServer) -> Iterator[wasmgear.Client]:
    c = wasmgear.Client.from_url(groups_server.url)
    yield c
    c.close()


def ids(enqueued: List[wasmgear.Enqueued]) -> List[str]:
    return [e.id for e in enqueued]


def test_jobs_are_leased_round_robin_across_groups(client: wasmgear.Client,
                                                   groups_server: RedisServer) -> None:
    """Five jobs of group `big`, then one of `a` and one of `b`: `big` does not hold the
    others back; each turn of the round leases one job of each group."""
    settings = client.configure("echo", paused=True, concurrency=1)
    assert (settings.paused, settings.concurrency) == (True, 1)
    try:
        big = ids(client.enqueue_many("echo", [f"big-{i}" for i in range(1, 6)], group="big"))
        a = client.enqueue("echo", "a-1", group="a").id
        b = client.enqueue_many("echo", [("b-1", {"group": "b"})])[0].id
        assert client.status(big[0]).record["group_id"] == "big"

        overview = client.groups("echo")
        assert overview == GroupsOverview(groups=3, truncated=False, ungrouped_ready=0, listed=[
            GroupInfo("big", 5, 0, GroupConfig(), None),
            GroupInfo("a", 1, 0, GroupConfig(), None),
            GroupInfo("b", 1, 0, GroupConfig(), None),
        ])
        assert client.groups("echo", limit=1).listed == overview.listed[:1]
        assert client.groups("echo", group="b").listed == [overview.listed[2]]
        # The CLI reads the same groups.
        theirs = json.loads(cli(groups_server.url, "groups", "echo", "--json").stdout)
        assert theirs["groups"] == 3 and theirs["ungrouped_ready"] == 0
        assert [(g["group"], g["ready"], g["running"]) for g in theirs["listed"]] == [
            ("big", 5, 0), ("a", 1, 0), ("b", 1, 0)]
        # Queued counts the jobs with a group too.
        assert {q.function: q for q in client.queues()}["echo"].queued == 7

        with client.events("echo") as stream:
            client.configure("echo", paused=False)
            started: List[str] = []
            deadline = time.monotonic() + WAIT
            while len(started) < 7:
                assert time.monotonic() < deadline, f"only {started} started"
                event = stream.get(timeout=1.0)
                if event is not None and event.kind == "start" and event.id is not None:
                    started.append(event.id)
        assert started == [big[0], a, b, big[1], big[2], big[3], big[4]]
        jobs = client.wait(big + [a, b], timeout=WAIT)
        assert [j.output for j in jobs] == [f"big-{i}".encode() for i in range(1, 6)] + [
            b"a-1", b"b-1"]
        # Nothing ready, running or configured: no group is left.
        assert client.groups("echo") == GroupsOverview(0, False, 0, [])
    finally:
        client.configure("echo", paused=False, concurrency=None)


def test_a_group_of_concurrency_one_runs_its_jobs_one_at_a_time(client: wasmgear.Client) -> None:
    """A group's own concurrency of 1 (`configure_group`), shown by `groups()`: its jobs run
    one at a time, in order, while another group's run beside them."""
    own = client.configure_group("count", "seq", concurrency=1)
    assert own == GroupConfig(concurrency=1, rate_limit=None, paused=False)
    assert client.groups("count", group="seq") == GroupsOverview(
        1, False, 0, [GroupInfo("seq", 0, 0, GroupConfig(concurrency=1), None)])
    client.configure("count", paused=True)
    try:
        seq = ids(client.enqueue_many("count", ["3 100"] * 3, group="seq"))
        free = ids(client.enqueue_many("count", ["3 100"] * 2, group="free"))
        assert [(g.group, g.ready, g.running, g.config.concurrency)
                for g in client.groups("count").listed] == [
            ("seq", 3, 0, 1), ("free", 2, 0, None)]
    finally:
        client.configure("count", paused=False)
    most = 0

    def seq_done() -> bool:
        nonlocal most
        group = client.groups("count", group="seq").listed[0]
        most = max(most, group.running)
        return group.ready == 0 and group.running == 0

    wait_until(seq_done, WAIT, "the sequence to run", every=0.01)
    assert most == 1, "the group of concurrency 1 never had one job running"
    seq_jobs = client.wait(seq, timeout=WAIT)
    free_jobs = client.wait(free, timeout=WAIT)
    for before, after in zip(seq_jobs, seq_jobs[1:]):
        assert before.finished is not None and after.started is not None
        assert after.started >= before.finished, "two jobs of the sequence overlapped"
    # The other group was not held back by the sequence.
    assert all(j.started is not None and seq_jobs[1].started is not None
               and j.started < seq_jobs[1].started for j in free_jobs)
    # Its own concurrency cleared, the group has nothing left to list.
    assert client.configure_group("count", "seq", concurrency=None) == GroupConfig()
    assert client.groups("count", group="seq").listed == [
        GroupInfo("seq", 0, 0, GroupConfig(), None)]
    assert client.groups("count").groups == 0


def test_a_paused_group_waits_while_the_others_run(client: wasmgear.Client) -> None:
    assert client.configure_group("echo", "held", paused=True) == GroupConfig(paused=True)
    held = ids(client.enqueue_many("echo", ["h-1", "h-2"], group="held"))
    others = ids(client.enqueue_many("echo", ["g-1", "g-2"], group="go"))
    others.append(client.enqueue("echo", "no group").id)
    assert [j.state for j in client.wait(others, timeout=WAIT)] == ["succeeded"] * 3
    assert [client.status(i).state for i in held] == ["queued", "queued"]
    assert client.groups("echo") == GroupsOverview(1, False, 0, [
        GroupInfo("held", 2, 0, GroupConfig(paused=True), None)])
    # Its own limits beside the pause, then cleared: the pause stays until resumed.
    own = client.configure_group("echo", "held", concurrency=2, rate_limit=(10, 60))
    assert own == GroupConfig(2, RateLimit(10, timedelta(seconds=60)), True)
    assert client.groups("echo", group="held").listed[0].config == own
    assert client.configure_group("echo", "held", concurrency=None,
                                  rate_limit=None) == GroupConfig(paused=True)
    assert [client.status(i).state for i in held] == ["queued", "queued"]
    assert client.configure_group("echo", "held", paused=False) == GroupConfig()
    assert [j.output for j in client.wait(held, timeout=WAIT)] == [b"h-1", b"h-2"]


def test_bad_group_keys_and_settings_are_refused_and_write_nothing(bare: RedisServer) -> None:
    client = wasmgear.Client.from_url(bare.url)
    try:
        first = client.enqueue("echo", "a real job", group="g")
        keys_before = sorted(bare.redis.keys("*"))
        seq_before = bare.redis.get("wg:{echo}:seq")
        config_before = bare.redis.hgetall("wg:{echo}:group-config")
        bad_keys = ["a b", "", "x" * 201, 'a"b', "a|b", "a\\b", "é", "tab\t"]
        cases = []
        for key in bad_keys:
            cases += [
                (lambda k=key: client.enqueue("echo", "x", group=k), f"group {key!r}"),
                (lambda k=key: client.configure_group("echo", k, paused=True), f"group {key!r}"),
                (lambda k=key: client.configure_group("other", k, concurrency=1), f"group {key!r}"),
            ]
        cases += [
            (lambda: client.enqueue("echo", "x", group=5), "group 5 is not a string"),  # type: ignore[arg-type]
            (lambda: client.enqueue_many("echo", ["ok", ("bad", {"group": "a b"}), "ok"]),
             "job 2 of the batch: group 'a b' holds ' '"),
            (lambda: client.enqueue_many("echo", ["ok"] * 1500, group="a|b"), "group 'a|b'"),
            (lambda: client.batch([("echo", "ok"), ("echo", "x", {"group": ""})]),
             "job 2: group '' must be 1 to 200 bytes long"),
            (lambda: client.submit_flow({"name": "f", "jobs": {
                "a": {"function": "echo", "group": "no spaces please"}}}),
             "group 'no spaces please' holds ' '"),
            (lambda: client.submit_flow({"name": "f", "jobs": {
                "a": {"function": "echo", "group": 7}}}), "jobs.a.group: invalid type"),
            (lambda: client.groups("echo", group="a b"), "group 'a b'"),
            (lambda: client.groups("echo", limit=0), "list 1 to 1000 groups, not 0"),
            (lambda: client.groups("echo", limit=1001), "list 1 to 1000 groups, not 1001"),
            (lambda: client.groups("bad name!"), "function name"),
            (lambda: client.configure_group("echo", "g", concurrency=0),
             "a concurrency of 0 would stop group 'g'; pause it instead"),
            (lambda: client.configure_group("echo", "g", concurrency=-1), "out of range"),
            (lambda: client.configure_group("echo", "g", rate_limit=(0, 60)),
             "a rate limit needs at least 1 job per interval of at least 1ms"),
            (lambda: client.configure_group("echo", "g", rate_limit=(5, 0)),
             "a rate limit needs at least 1 job per interval of at least 1ms"),
            (lambda: client.configure_group("echo", "g", rate_limit=5),  # type: ignore[arg-type]
             "is not a rate limit"),
            (lambda: client.configure_group("echo", "g", paused="yes"),  # type: ignore[arg-type]
             "paused 'yes' is neither True nor False"),
            (lambda: client.configure_group("bad name!", "g", paused=True), "function name"),
            (lambda: client.configure("echo", group_concurrency=0),
             "a group concurrency of 0 would stop every group"),
            (lambda: client.configure("echo", group_rate_limit=(1, -1)), "negative"),
            (lambda: client.configure("echo", group_concurrency=2**53), "out of range"),
            (lambda: client.configure("echo", concurrency=0), "a concurrency cap of 0"),
            (lambda: client.configure("echo", keep_finished=0), "keep at least 1"),
            (lambda: client.configure("other", group_concurrency=1.5),  # type: ignore[arg-type]
             "group_concurrency 1.5 is not a whole number"),
        ]
        for attempt, expected in cases:
            with pytest.raises(wasmgear.BadInput) as caught:
                attempt()
            assert expected in str(caught.value), (expected, str(caught.value))
            assert not isinstance(caught.value, wasmgear.Conflict), expected
            assert sorted(bare.redis.keys("*")) == keys_before, f"{expected}: keys changed"
            assert bare.redis.get("wg:{echo}:seq") == seq_before, f"{expected}: a job was made"
            assert bare.redis.hgetall("wg:{echo}:group-config") == config_before, expected
        # The widest key there is: every printable character a key may hold, 200 bytes.
        widest = "".join(chr(c) for c in range(0x21, 0x7F) if chr(c) not in "\"\\|")
        widest = (widest * 3)[:200]
        enqueued = client.enqueue("echo", "wide", group=widest)
        assert client.status(enqueued.id).record["group_id"] == widest
        assert [g.group for g in client.groups("echo").listed] == sorted(["g", widest])
        assert client.status(first.id).state == "queued"
    finally:
        client.close()


def test_the_function_s_group_defaults_are_read_back(bare: RedisServer) -> None:
    client = wasmgear.Client.from_url(bare.url)
    try:
        assert client.config("echo") == FunctionConfig()
        settings = client.configure("echo", group_concurrency=2,
                                    group_rate_limit=(5, timedelta(seconds=2)))
        assert settings == FunctionConfig(group_concurrency=2,
                                          group_rate_limit=RateLimit(5, timedelta(seconds=2)))
        assert client.config("echo") == settings
        assert bare.redis.hgetall("wg:{echo}:config") == {
            b"group_concurrency": b"2", b"group_rate_limit": b"5",
            b"group_rate_interval_ms": b"2000"}
        assert bare.redis.sismember("wg:{functions}:names", "echo")
        # The Rust CLI reads what this client wrote.
        theirs = json.loads(cli(bare.url, "config", "echo", "--json").stdout)
        assert (theirs["group_concurrency"], theirs["group_rate_limit"]) == (2, "5/2000ms")
        # A setting left out is kept; the rate limit read back can be given again.
        again = client.configure("echo", concurrency=3, rate_limit=(10, 60), keep_finished=100,
                                 group_rate_limit=settings.group_rate_limit)
        assert again == FunctionConfig(
            paused=False, concurrency=3, rate_limit=RateLimit(10, timedelta(minutes=1)),
            keep_finished=100, group_concurrency=2,
            group_rate_limit=RateLimit(5, timedelta(seconds=2)))
        assert client.configure("echo") == again
        cleared = client.configure("echo", group_concurrency=None, group_rate_limit=None)
        assert (cleared.group_concurrency, cleared.group_rate_limit) == (None, None)
        assert cleared.concurrency == 3
        assert client.configure("echo", concurrency=None, rate_limit=None,
                                keep_finished=None) == FunctionConfig()
        assert bare.redis.hgetall("wg:{echo}:config") == {}
    finally:
        client.close()


def test_flows_and_batches_put_their_jobs_in_groups(bare: RedisServer) -> None:
    client = wasmgear.Client.from_url(bare.url)
    try:
        flow = client.submit_flow({"name": "tenant", "jobs": {
            "a": {"function": "echo", "input": "a", "group": "t1"},
            "b": {"function": "echo", "input": "b", "group": "t1", "after": ["a"]},
        }})
        batch = client.batch([("echo", "y", {"group": "t2"}), ("echo", "z")])
        assert client.status(flow.jobs["a"]).record["group_id"] == "t1"
        assert client.status(flow.jobs["b"]).record["group_id"] == "t1"
        assert client.status(flow.jobs["b"]).state == "waiting"
        assert client.status(batch.jobs[0]).record["group_id"] == "t2"
        assert "group_id" not in client.status(batch.jobs[1]).record
        assert client.groups("echo") == GroupsOverview(2, False, 1, [
            GroupInfo("t1", 1, 0, GroupConfig(), None),
            GroupInfo("t2", 1, 0, GroupConfig(), None),
        ])
        assert {q.function: q for q in client.queues()}["echo"].queued == 3
    finally:
        client.close()


def test_async_groups(bare: RedisServer) -> None:
    async def main() -> None:
        async with await wasmgear.AsyncClient.from_url(bare.url) as client:
            settings = await client.configure("echo", group_concurrency=1, paused=True)
            assert settings == FunctionConfig(paused=True, group_concurrency=1)
            assert await client.config("echo") == settings
            own = await client.configure_group("echo", "big", rate_limit=(3, 1.5))
            assert own == GroupConfig(rate_limit=RateLimit(3, timedelta(milliseconds=1500)))
            await client.enqueue_many("echo", ["1", "2", ("3", {"group": "small"})], group="big")
            await client.enqueue("echo", "4", group="small")
            await client.enqueue("echo", "5")
            overview = await client.groups("echo", limit=1)
            assert overview == GroupsOverview(2, False, 1, [GroupInfo("big", 2, 0, own, None)])
            with pytest.raises(wasmgear.BadInput, match="group 'a b'"):
                await client.enqueue("echo", "x", group="a b")
            with pytest.raises(wasmgear.BadInput, match="group 'a b'"):
                await client.configure_group("echo", "a b", paused=True)
            with pytest.raises(wasmgear.BadInput, match="list 1 to 1000 groups"):
                await client.groups("echo", limit=0)
            assert {q.function: q for q in await client.queues()}["echo"].queued == 5

    asyncio.run(asyncio.wait_for(main(), 120))


def test_group_settings_read_from_the_queue_s_text() -> None:
    """The pure part: a group's own settings as the queue keeps them, and the `group` option
    sent after the Rust client's other options."""
    from wasmgear._core.settings import group_config

    assert group_config("") == GroupConfig()
    assert group_config("|||") == GroupConfig()
    assert group_config("1|10|60000|1") == GroupConfig(1, RateLimit(10, timedelta(minutes=1)),
                                                       True)
    assert group_config("|5||") == GroupConfig(), "a rate without its interval is none"
    spec = wasmgear._core.job_spec("x", {"group": "g", "uniq": "u", "tags": ["t"],
                                         "after": ["a:1"], "on_failure": {"a:1": "ignore"}})
    assert spec.named == (("uniq", "u"), ("tag", "t"), ("after", "a:1"),
                          ("after_ignore", "a:1"), ("group", "g"))
    info = GroupInfo("g", 0, 0, GroupConfig(), 1_700_000_000_000)
    assert info.rate_limited_until is not None and info.rate_limited_until.year == 2023
