"""Flows (graphs of jobs of several functions submitted in one call) and the failure
policies of dependencies, against a real redis-server and a real worker serving `reverse`,
`join` and `fail`; the same flow document the Rust tests submit (tests/all/flows.rs,
`diamond_document`)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any, Dict, Iterator, List, Tuple

import pytest
import redis

import wasmgear
from wasmgear import _core as core
from conftest import RedisServer, Worker, cli

WAIT = 120

#: tests/all/flows.rs `diamond_document()`: `a` first, then `b` and `c`, then `d` (a
#: `join`) reads `c`'s and `b`'s outputs, in the order of its edges, one per line.
DIAMOND: Dict[str, Any] = {
    "name": "diamond",
    "jobs": {
        "a": {"function": "reverse", "input": "aa0"},
        "b": {"function": "reverse", "input": "bb1", "after": ["a"]},
        "c": {"function": "reverse", "input_json": {"n": 2}, "after": ["a"]},
        "d": {"function": "join", "after": ["c", {"job": "b", "on_failure": "ignore"}]},
    },
}


@pytest.fixture(scope="module")
def flows_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The URL of a Redis of its own that a worker serving reverse, join and fail serves."""
    server = RedisServer(tmp_path_factory.mktemp("flows-redis"))
    try:
        worker = Worker(server.url, tmp_path_factory.mktemp("flows-worker"),
                        plugins=("reverse", "join", "fail"))
        try:
            yield server.url
        finally:
            worker.stop()
    finally:
        server.stop()


@pytest.fixture
def client(flows_url: str) -> Iterator[wasmgear.Client]:
    c = wasmgear.Client.from_url(flows_url)
    yield c
    c.close()


def output(client: wasmgear.Client, status: wasmgear.FlowStatus, name: str) -> bytes:
    return client.status(status.job(name).id).output or b""


def test_the_diamond_runs_each_job_after_its_dependencies_and_join_reads_their_outputs(
    client: wasmgear.Client,
) -> None:
    submitted = client.submit_flow(DIAMOND)
    assert list(submitted.jobs) == ["a", "b", "c", "d"]
    assert [i.rsplit(":", 1)[0] for i in submitted.jobs.values()] == ["reverse"] * 3 + ["join"]
    status = client.wait_flow(submitted.id, timeout=WAIT)
    assert status.ended and status.id == submitted.id and status.name == "diamond"
    assert status.created is not None and status.created_ms > 0
    assert [j.name for j in status.jobs] == ["a", "b", "c", "d"], "dependencies first"
    assert {j.name: j.id for j in status.jobs} == submitted.jobs
    assert status.counts == {"succeeded": 4}, status
    assert [j.name for j in status.sinks] == ["d"]
    assert status.job("d").after == [wasmgear.FlowEdge("c", "cancel"),
                                     wasmgear.FlowEdge("b", "ignore")]
    assert status.job("a").after == []
    # d is c's output, then b's, one per line (c's input is the compact JSON {"n":2}).
    c, b = output(client, status, "c"), output(client, status, "b")
    assert (c, b) == (b'}2:"n"{', b"1bb")
    d = output(client, status, "d")
    assert d == c + b"\n" + b
    assert status.job("d").output_bytes == len(d) and status.job("d").error is None
    # Each job started after its dependencies ended, and its record names the flow.
    jobs = {j.name: client.status(j.id) for j in status.jobs}
    for before, after in (("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")):
        finished, started = jobs[before].finished, jobs[after].started
        assert finished is not None and started is not None and finished <= started
    assert all(job.record.get("flow") == submitted.id for job in jobs.values())
    assert jobs["d"].after == [submitted.jobs["c"], submitted.jobs["b"]]
    assert jobs["d"].record.get("on_failure") == {submitted.jobs["b"]: "ignore"}
    # Nothing left to cancel or to run again.
    assert client.cancel_flow(submitted.id) == 0
    assert client.retry_flow(submitted.id) == []


def spy_on_fcalls(monkeypatch: pytest.MonkeyPatch,
                  proto: core.Protocol) -> List[Tuple[str, str, Tuple[Any, ...]]]:
    """The library functions this process calls through `proto` from now on (the rest of the
    test), each as (name, function, arguments): our own calls counted, Redis answering
    them as ever."""
    made: List[Tuple[str, str, Tuple[Any, ...]]] = []
    fcall = proto.fcall

    def spy(name: str, function: str, *args: Any) -> core.Cmd:
        made.append((name, function, args))
        return fcall(name, function, *args)

    monkeypatch.setattr(proto, "fcall", spy)
    return made


def layers(document: Dict[str, Any]) -> List[List[str]]:
    """The order `submit_flow` writes the functions of `document`'s flow in."""
    flow = core.read_flow(document)
    position = {job.name: i for i, job in enumerate(flow.jobs)}
    edges = [(position[edge.job], i) for i, job in enumerate(flow.jobs) for edge in job.after]
    return core.write_order(flow.jobs, edges)


def test_a_dependents_function_is_written_before_its_dependencies_functions() -> None:
    """The Rust client's `write_order` tests: functions with no edge between them go
    together, a dependent's before its dependencies'; functions waiting on each other are
    written one at a time, the first by name first."""
    assert layers({"name": "etl", "jobs": {
        "fetch": {"function": "fetch"},
        "other": {"function": "other"},
        "transform": {"function": "transform", "after": ["fetch"]},
        "load": {"function": "load", "after": ["transform", "fetch"]},
    }}) == [["load", "other"], ["transform"], ["fetch"]]
    assert layers({"name": "ping-pong", "jobs": {
        "a1": {"function": "a"},
        "b1": {"function": "b", "after": ["a1"]},
        "a2": {"function": "a", "after": ["b1"]},
        "c": {"function": "c", "after": ["a2"]},
    }}) == [["c"], ["a"], ["b"]]
    assert layers(DIAMOND) == [["join"], ["reverse"]]


def test_a_fan_in_across_functions_links_nothing(
    client: wasmgear.Client, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Five `reverse` jobs and a `join` waiting on them all: `join` is written first, and
    each `reverse` job is written naming it as its dependent, so that the submit makes no
    `link` call. The join then reads their outputs in the order of its edges."""
    names = [f"r{k}" for k in range(5)]
    document = {"name": "fan-in", "jobs": {
        **{name: {"function": "reverse", "input": f"{name}-in"} for name in names},
        "all": {"function": "join", "after": names},
    }}
    # Paused, so that the records are read before any of the jobs runs.
    client.configure("reverse", paused=True)
    try:
        made = spy_on_fcalls(monkeypatch, client._proto)
        submitted = client.submit_flow(document)
        assert [(name, function) for name, function, _ in made] == [
            ("reserve", "join"), ("reserve", "reverse"),
            ("enqueue", "join"), ("enqueue", "reverse")], made
        dependent = submitted.jobs["all"]
        for name in names:
            assert client.status(submitted.jobs[name]).dependents == [dependent]
        waiting = client.status(dependent)
        assert waiting.state == "waiting"
        assert waiting.waiting_on == [submitted.jobs[name] for name in names]
        assert client.flow(submitted.id).counts == {"waiting": 1, "queued": 5}
    finally:
        client.configure("reverse", paused=False)
    status = client.wait_flow(submitted.id, timeout=WAIT)
    assert status.counts == {"succeeded": 6}, status
    assert output(client, status, "all") == "\n".join(f"{name}-in"[::-1] for name in names).encode()


def test_functions_waiting_on_each_other_link_what_the_order_cannot_serve(
    client: wasmgear.Client, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A `join` job waits on a `reverse` job, and another `reverse` job on it, and a last
    `join` on that one: `join` is written first (the first by name), so the `reverse` jobs
    name the `join` jobs waiting on them, and the one edge left, `back` on `there`, is linked
    at the end, in one call. The flow runs each job after its dependency."""
    made = spy_on_fcalls(monkeypatch, client._proto)
    submitted = client.submit_flow({"name": "ping-pong", "jobs": {
        "out": {"function": "reverse", "input": "xy"},
        "there": {"function": "join", "after": ["out"]},
        "back": {"function": "reverse", "input": "pq", "after": ["there"]},
        "home": {"function": "join", "after": ["back"]},
    }})
    ids = submitted.jobs
    links = [(function, args) for name, function, args in made if name == "link"]
    assert links == [("join", (int(ids["there"].rpartition(":")[2]), ids["back"]))], made
    status = client.wait_flow(submitted.id, timeout=WAIT)
    assert status.counts == {"succeeded": 4}, status
    assert [output(client, status, name) for name in ("out", "there", "back", "home")] == [
        b"yx", b"yx", b"qp", b"qp"]
    jobs = {j.name: client.status(j.id) for j in status.jobs}
    for before, after in (("out", "there"), ("there", "back"), ("back", "home")):
        finished, started = jobs[before].finished, jobs[after].started
        assert finished is not None and started is not None and finished <= started
    assert jobs["out"].dependents == [ids["there"]]


def test_edges_to_jobs_outside_the_flow_are_linked_together(
    client: wasmgear.Client, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two jobs of a flow wait on the same job outside it, which has succeeded: both edges go
    in one `link` call, answered with a state per pair, and both jobs are told at once."""
    outside = client.enqueue("reverse", "ab").id
    client.wait(outside, timeout=WAIT)
    made = spy_on_fcalls(monkeypatch, client._proto)
    submitted = client.submit_flow({"name": "outside", "jobs": {
        "x": {"function": "join", "after": [outside]},
        "y": {"function": "join", "after": [outside]},
    }})
    number = int(outside.rpartition(":")[2])
    links = [(function, args) for name, function, args in made if name == "link"]
    assert links == [("reverse", (number, submitted.jobs["x"], number, submitted.jobs["y"]))]
    status = client.wait_flow(submitted.id, timeout=WAIT)
    assert status.counts == {"succeeded": 2}, status
    assert [output(client, status, name) for name in ("x", "y")] == [b"ba", b"ba"]


def test_more_than_a_thousand_links_of_one_function_take_one_call_per_thousand(
    bare: RedisServer, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """1,001 `reverse` jobs wait on a `join` job, and a last `join` on all of them (the two
    functions wait on each other): `join` is written first, so the last job's 1,001 edges
    are named by the `reverse` jobs, and the 1,001 on the first `join` job are linked at the
    end, in two calls (1,000 pairs, then 1). Nothing runs: the records say it all."""
    fan = [f"r{k:04}" for k in range(1001)]
    with wasmgear.Client.from_url(bare.url) as client:
        made = spy_on_fcalls(monkeypatch, client._proto)
        submitted = client.submit_flow({"name": "wide", "jobs": {
            "start": {"function": "join"},
            **{name: {"function": "reverse", "input": name, "after": ["start"]}
               for name in fan},
            "end": {"function": "join", "after": fan},
        }})
        ids = submitted.jobs
        links = [(function, len(args) // 2) for name, function, args in made if name == "link"]
        assert links == [("join", 1000), ("join", 1)]
        assert sorted(client.status(ids["start"]).dependents) == sorted(ids[n] for n in fan)
        for name in (fan[0], fan[-1]):
            assert client.status(ids[name]).dependents == [ids["end"]]
        assert client.flow(submitted.id).counts == {"waiting": 1002, "queued": 1}


def test_a_bad_graph_is_refused_whole_and_nothing_is_written(bare: RedisServer) -> None:
    cases = [
        ({"name": "cycle", "jobs": {
            "a": {"function": "reverse", "after": ["c"]},
            "b": {"function": "join", "after": ["a"]},
            "c": {"function": "reverse", "after": ["b"]}}},
         "the flow has a cycle: a → c → b → a (each waits on the next)"),
        ({"name": "unknown", "jobs": {
            "a": {"function": "reverse"},
            "b": {"function": "join", "after": ["nope"]}}},
         'job "b" waits on "nope", which the flow does not have'),
        ({"name": "uniq", "jobs": {"u": {"function": "reverse", "uniq": "k"}}},
         'job "u": a flow\'s jobs are always new, so they take no uniq'),
        ({"name": "self", "jobs": {"a": {"function": "reverse", "after": ["a"]}}},
         'job "a" waits on itself'),
        ({"name": "big", "jobs": {f"j{i}": {"function": "reverse"} for i in range(10_001)}},
         'flow "big" has 10001 jobs, more than the 10000 a flow may have'),
        ({"name": "empty", "jobs": {}}, 'flow "empty" has no jobs'),
        ({"name": "policy", "jobs": {
            "a": {"function": "reverse"},
            "b": {"function": "join", "after": [{"job": "a", "on_failure": "maybe"}]}}},
         'job "b": on_failure "maybe" is none of cancel, ignore and continue'),
        ({"name": "late", "jobs": {"a": {"function": "reverse", "at_ms": 1000}}},
         'job "a": at 1970-01-01T00:00:01+00:00 is in the past'),
    ]
    with wasmgear.Client.from_url(bare.url) as client:
        for document, expected in cases:
            with pytest.raises(wasmgear.BadInput) as refused:
                client.submit_flow(document)
            assert expected in str(refused.value), (str(refused.value), expected)
        with pytest.raises(wasmgear.Conflict):
            client.submit_flow(cases[-1][0])
    assert bare.redis.dbsize() == 0, "a refused flow wrote nothing"


def test_a_cancelled_flow_cancels_every_unfinished_job(client: wasmgear.Client) -> None:
    submitted = client.submit_flow({"name": "to-cancel", "jobs": {
        "later": {"function": "reverse", "input": "x", "delay_ms": 3_600_000},
        "next": {"function": "join", "after": ["later"]},
        "last": {"function": "reverse", "input": "y", "after": ["next"]},
    }})
    status = client.flow(submitted.id)
    assert status.counts == {"waiting": 2, "scheduled": 1}, status
    assert not status.ended and [j.name for j in status.sinks] == ["last"]
    with pytest.raises(wasmgear.WaitTimeout, match=f"flow {submitted.id}"):
        client.wait_flow(submitted.id, timeout=0.3)
    assert client.cancel_flow(submitted.id) == 3
    status = client.flow(submitted.id)
    assert status.counts == {"cancelled": 3} and status.ended
    assert client.cancel_flow(submitted.id) == 0
    assert client.wait_flow(submitted.id, timeout=5).counts == {"cancelled": 3}


def test_each_failure_policy_decides_what_a_failed_dependency_does(
    client: wasmgear.Client,
) -> None:
    """`cancel` (the default) cancels the dependent; `ignore` lets it run and read the error
    where the output would be (the `fail` plugin's line `error: ...`); `continue` runs it
    once every dependency has ended, however."""
    submitted = client.submit_flow({"name": "policies", "jobs": {
        "ok": {"function": "reverse", "input": "ko"},
        "bad": {"function": "fail", "input": "one", "attempts": 1},
        "cancelled": {"function": "join", "after": ["ok", "bad"]},
        "ignored": {"function": "join", "after": ["ok", {"job": "bad", "on_failure": "ignore"}]},
        "continued": {"function": "join",
                      "after": [{"job": "bad", "on_failure": "continue"}, "ok"]},
    }})
    status = client.wait_flow(submitted.id, timeout=WAIT)
    states = {j.name: j.state for j in status.jobs}
    assert states == {"ok": "succeeded", "bad": "failed", "cancelled": "cancelled",
                      "ignored": "succeeded", "continued": "succeeded"}, status
    assert status.counts == {"succeeded": 3, "failed": 1, "cancelled": 1}
    assert status.job("bad").error and "failed on purpose: one" in status.job("bad").error
    first, second = output(client, status, "ignored").decode().split("\n")
    assert first == "ok"
    assert second.startswith("error: ") and "failed on purpose: one" in second, second
    lines = output(client, status, "continued").decode().split("\n")
    assert len(lines) == 2 and "failed on purpose: one" in lines[0] and lines[1] == "ok"


def test_on_failure_of_a_plain_enqueue(client: wasmgear.Client) -> None:
    """`enqueue(..., on_failure={id: policy})` sends `after_ignore` / `after_continue` beside
    `after`: a failed dependency whose failure is ignored does not cancel the job."""
    bad = client.enqueue("fail", "two", attempts=1).id
    good = client.enqueue("reverse", "ab").id
    with pytest.raises(wasmgear.JobFailed):
        client.wait(bad, timeout=WAIT)
    # The failed dependency is not refused (its failure is tolerated), and the job runs.
    joined = client.enqueue("join", after=[good, bad], on_failure={bad: "ignore"})
    job = client.wait(joined.id, timeout=WAIT)
    assert job.record.get("on_failure") == {bad: "ignore"}
    lines = (job.output or b"").decode().split("\n")
    assert lines[0] == "ba" and lines[1].startswith("error: ") and "two" in lines[1]
    # Without a policy, the failed dependency refuses the enqueue (nothing written).
    with pytest.raises(wasmgear.Conflict, match="failed"):
        client.enqueue("join", after=[bad])
    with pytest.raises(wasmgear.BadInput, match="not a dependency"):
        client.enqueue("join", after=[good], on_failure={bad: "ignore"})
    with pytest.raises(wasmgear.BadInput, match="none of cancel, ignore and continue"):
        client.enqueue("join", after=[bad], on_failure={bad: "skip"})


def test_a_retried_flow_runs_its_failed_and_cancelled_jobs_again(
    client: wasmgear.Client,
) -> None:
    submitted = client.submit_flow({"name": "retry", "jobs": {
        "first": {"function": "reverse", "input": "abc"},
        "step": {"function": "fail", "input": "again", "attempts": 1, "after": ["first"]},
        "end": {"function": "join", "after": ["first", "step"]},
    }})
    status = client.wait_flow(submitted.id, timeout=WAIT)
    assert [(j.name, j.state) for j in status.jobs] == [
        ("first", "succeeded"), ("step", "failed"), ("end", "cancelled")]
    retried = client.retry_flow(submitted.id)
    assert retried == [submitted.jobs["step"], submitted.jobs["end"]]
    status = client.wait_flow(submitted.id, timeout=WAIT)
    # The plugin fails again; the succeeded job was not run again.
    assert [(j.name, j.state) for j in status.jobs] == [
        ("first", "succeeded"), ("step", "failed"), ("end", "cancelled")]
    assert client.status(submitted.jobs["step"]).attempt == 2
    assert client.status(submitted.jobs["first"]).attempt == 1


def test_an_unknown_flow_is_not_found(client: wasmgear.Client) -> None:
    for call in (client.flow, client.cancel_flow, client.retry_flow, client.wait_flow):
        with pytest.raises(wasmgear.NotFound, match="no flow 987654"):
            call(987654)  # type: ignore[operator]
    with pytest.raises(wasmgear.BadInput, match="flow id 0"):
        client.flow(0)


def test_the_rust_cli_and_this_client_read_each_others_flows(
    client: wasmgear.Client, flows_url: str, tmp_path: Path,
) -> None:
    """A flow submitted here reads in `wasmgear flow status --json` as this client reads it,
    and one the CLI submitted from the same document reads here as the CLI's own: the same
    record, whoever wrote it."""
    document = {"name": "both", "jobs": {
        "root": {"function": "reverse", "input": "r", "delay_ms": 3_600_000},
        "mid": {"function": "join", "after": ["root"]},
        "end": {"function": "join",
                "after": [{"job": "mid", "on_failure": "continue"},
                          {"job": "root", "on_failure": "ignore"}]},
    }}

    def as_json(status: wasmgear.FlowStatus) -> Dict[str, Any]:
        return {
            "id": status.id, "name": status.name, "created_ms": status.created_ms,
            "ended": status.ended, "counts": status.counts,
            "sinks": [j.name for j in status.sinks],
            "jobs": [{"name": j.name, "id": j.id, "state": j.state,
                      "output_bytes": j.output_bytes, "error": j.error,
                      "after": [{"job": e.job, "on_failure": e.on_failure} for e in j.after]}
                     for j in status.jobs],
        }

    ours = client.submit_flow(document)
    shown = json.loads(cli(flows_url, "flow", "status", str(ours.id), "--json").stdout)
    assert shown == as_json(client.flow(ours.id))
    assert [j["name"] for j in shown["jobs"]] == ["root", "mid", "end"]
    assert shown["counts"] == {"scheduled": 1, "waiting": 2}

    path = tmp_path / "both.json"
    path.write_text(json.dumps(document))
    cli(flows_url, "flow", "submit", str(path))
    theirs = ours.id + 1
    shown = json.loads(cli(flows_url, "flow", "status", str(theirs), "--json").stdout)
    status = client.flow(theirs)
    assert as_json(status) == shown
    mine = client.flow(ours.id)
    assert ([(j.name, j.id.split(":")[0], j.after) for j in status.jobs]
            == [(j.name, j.id.split(":")[0], j.after) for j in mine.jobs])
    for flow_id in (ours.id, theirs):
        assert client.cancel_flow(flow_id) == 3
        assert client.flow(flow_id).counts == {"cancelled": 3}


def test_the_async_client_submits_waits_cancels_and_retries_a_flow(
    flows_url: str, bare: RedisServer,
) -> None:
    async def main() -> None:
        async with await wasmgear.AsyncClient.from_url(flows_url) as client:
            submitted = await client.submit_flow(DIAMOND)
            status = await client.wait_flow(submitted.id, timeout=WAIT)
            assert status.counts == {"succeeded": 4} and [j.name for j in status.sinks] == ["d"]
            d = await client.status(submitted.jobs["d"])
            assert d.output == b'}2:"n"{\n1bb'
            assert await client.cancel_flow(submitted.id) == 0
            assert await client.retry_flow(submitted.id) == []
            assert (await client.flow(submitted.id)).name == "diamond"
            with pytest.raises(wasmgear.NotFound, match="no flow 987654"):
                await client.flow(987654)
        async with await wasmgear.AsyncClient.from_url(bare.url) as client:
            with pytest.raises(wasmgear.BadInput, match="the flow has a cycle: a → b → a"):
                await client.submit_flow({"name": "c", "jobs": {
                    "a": {"function": "reverse", "after": ["b"]},
                    "b": {"function": "reverse", "after": ["a"]}}})

    asyncio.run(asyncio.wait_for(main(), 300))
    assert bare.redis.dbsize() == 0
