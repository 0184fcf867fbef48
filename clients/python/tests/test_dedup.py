"""Keys that outlive their job (`uniq_for`, `debounce`, `throttle`, each with `uniq`),
against the session's real redis-server and worker (echo), and on a bare Redis of its own for
the refusals: a uniq key answering with its succeeded job within its window (and not after
it), a debounced job taking the last input before it starts, a throttled key making at most
so many jobs per window, bad combinations refused with nothing written, and the asyncio
client."""

from __future__ import annotations

import asyncio
import time
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, List, Tuple

import pytest

import wasmgear
from wasmgear import RateLimit
from conftest import RedisServer, wait_until

WAIT = 60


def fresh(name: str) -> str:
    """A key no earlier test (nor run, on the session's Redis) used."""
    return f"{name}-{time.time_ns()}"


def test_uniq_for_keeps_answering_with_the_succeeded_job(client: wasmgear.Client) -> None:
    key = fresh("window")
    first = client.enqueue("echo", "one", uniq=key, uniq_for=60)
    assert first.created
    assert client.wait(first.id, timeout=WAIT).output == b"one"
    # Within the window the key answers with the job that succeeded: nothing is made.
    again = client.enqueue("echo", "two", uniq=key, uniq_for=timedelta(minutes=1))
    assert (again.id, again.created) == (first.id, False)
    plain = client.enqueue_many("echo", ["three"], uniq=key)
    assert [(e.id, e.created) for e in plain] == [(first.id, False)]
    assert client.status(first.id).state == "succeeded"

    # Without uniq_for the key is let go when its job ends: a new job is made.
    other = fresh("no-window")
    done = client.enqueue("echo", "a", uniq=other)
    client.wait(done.id, timeout=WAIT)
    after = client.enqueue("echo", "b", uniq=other)
    assert after.created and after.id != done.id

    # Once the window is over, the key makes a new job again.
    short = fresh("short-window")
    brief = client.enqueue("echo", "x", uniq=short, uniq_for=0.3)
    client.wait(brief.id, timeout=WAIT)
    # (An enqueue within the window writes nothing: asked again until the window is over.)
    later = wait_until(lambda: (lambda e: e if e.created else None)(client.enqueue("echo", "y", uniq=short)),
                       WAIT, "the window to be over")
    assert later.id != brief.id
    assert client.wait(later.id, timeout=WAIT).output == b"y"


def test_throttle_makes_at_most_so_many_jobs_per_window(client: wasmgear.Client) -> None:
    key = fresh("throttle")
    made = [client.enqueue("echo", f"t{i}", uniq=key, throttle=(2, 60)) for i in range(3)]
    assert [e.created for e in made] == [True, True, False]
    assert made[0].id != made[1].id, "a throttled key does not join an unfinished job"
    assert made[2].id == made[1].id, "beyond the limit, the latest made answers"
    # In one call too, with a RateLimit, each job against those made before it.
    many = client.enqueue_many("echo", ["a", "b", "c", "d"], uniq=fresh("throttle-many"),
                               throttle=RateLimit(2, timedelta(minutes=1)))
    assert [e.created for e in many] == [True, True, False, False]
    assert many[2].id == many[3].id == many[1].id != many[0].id
    assert [j.output for j in client.wait([made[0].id, made[1].id], timeout=WAIT)] == [
        b"t0", b"t1"]


def test_debounce_runs_the_last_input_once_quiet(client: wasmgear.Client) -> None:
    key = fresh("debounce")
    first = client.enqueue("echo", "first", uniq=key, debounce=2)
    second = client.enqueue("echo", "second", uniq=key, debounce=timedelta(seconds=2))
    assert first.created and (second.id, second.created) == (first.id, False)
    job = client.status(first.id)
    assert job.state == "scheduled" and job.attempt == 0
    # It ran once, with the input given last.
    assert client.wait(first.id, timeout=WAIT).output == b"second"
    # Started (here ended), the key makes a new job.
    third = client.enqueue("echo", "third", uniq=key, debounce=0.05)
    assert third.created and third.id != first.id
    assert client.wait(third.id, timeout=WAIT).output == b"third"


def test_bad_combinations_are_refused_and_write_nothing(bare: RedisServer) -> None:
    client = wasmgear.Client.from_url(bare.url)
    try:
        client.enqueue("echo", "a real job", uniq="k", uniq_for=60)
        keys_before = sorted(bare.redis.keys("*"))
        seq_before = bare.redis.get("wg:{echo}:seq")
        soon = datetime.now(timezone.utc) + timedelta(hours=1)
        cases: List[Tuple[Callable[[], Any], str]] = [
            (lambda: client.enqueue("echo", "x", uniq_for=60),
             "uniq_for works on a uniq key: give uniq too"),
            (lambda: client.enqueue("echo", "x", debounce=1), "debounce works on a uniq key"),
            (lambda: client.enqueue("echo", "x", throttle=(1, 1)), "throttle works on a uniq key"),
            (lambda: client.enqueue("echo", "x", uniq="k2", uniq_for=60, debounce=1),
             "give one of uniq_for, debounce and throttle, not uniq_for and debounce"),
            (lambda: client.enqueue("echo", "x", uniq="k2", debounce=1, throttle=(1, 1)),
             "give one of uniq_for, debounce and throttle"),
            (lambda: client.enqueue("echo", "x", uniq="k2", debounce=1, delay=5),
             "debounce is the job's delay: give no delay or time to run at (at) with it"),
            (lambda: client.enqueue("echo", "x", uniq="k2", debounce=1, at=soon),
             "debounce is the job's delay"),
            (lambda: client.enqueue("echo", "x", uniq="k2", uniq_for=0),
             "uniq_for 0 is out of range 1ms..=10 years"),
            (lambda: client.enqueue("echo", "x", uniq="k2", uniq_for=timedelta(microseconds=500)),
             "uniq_for datetime.timedelta(microseconds=500) is out of range 1ms..=10 years"),
            (lambda: client.enqueue("echo", "x", uniq="k2", uniq_for=-1), "uniq_for -1 is negative"),
            (lambda: client.enqueue("echo", "x", uniq="k2", debounce=timedelta(days=3651)),
             "debounce datetime.timedelta(days=3651) is longer than 10 years"),
            (lambda: client.enqueue("echo", "x", uniq="k2", debounce="5s"),  # type: ignore[arg-type]
             "debounce '5s' is not a duration"),
            (lambda: client.enqueue("echo", "x", uniq="k2", throttle=(0, 60)),
             "throttle (0, 60): 0 jobs is not a whole number in 1..="),
            (lambda: client.enqueue("echo", "x", uniq="k2", throttle=(1.5, 60)),  # type: ignore[arg-type]
             "1.5 jobs is not a whole number"),
            (lambda: client.enqueue("echo", "x", uniq="k2", throttle=(True, 60)),
             "True jobs is not a whole number"),
            (lambda: client.enqueue("echo", "x", uniq="k2", throttle=RateLimit(2, timedelta(0))),
             "throttle period datetime.timedelta(0) is out of range 1ms..=10 years"),
            (lambda: client.enqueue("echo", "x", uniq="k2", throttle=5),  # type: ignore[arg-type]
             "throttle 5 is not a throttle: give (jobs, period)"),
            (lambda: client.enqueue("echo", "x", uniq="k2", throttle=(1, 2, 3)),  # type: ignore[arg-type]
             "is not a throttle"),
            (lambda: client.enqueue_many("echo", ["ok", ("bad", {"debounce": 1})], uniq="m",
                                                 uniq_for=60),
             "job 2 of the batch: give one of uniq_for, debounce and throttle"),
            (lambda: client.enqueue_many("echo", ["ok", ("bad", {"uniq_for": 1})]),
             "job 2 of the batch: uniq_for works on a uniq key"),
            (lambda: client.batch([("echo", "ok"), ("echo", "x", {"uniq_for": 60})]),
             "job 2: uniq_for works on a uniq key"),
            (lambda: client.batch([("echo", "x", {"uniq": "b", "throttle": (1, 1)})]),
             "job 1: a batch's jobs are always new, so they take no uniq"),
            (lambda: client.batch([("echo", "x", {"uniq": "b"})]),
             "job 1: a batch's jobs are always new, so they take no uniq"),
            (lambda: client.submit_flow({"name": "f", "jobs": {
                "a": {"function": "echo", "uniq": "k", "uniq_for_ms": 60000}}}),
             "unknown field `uniq_for_ms`"),
            (lambda: client.submit_flow({"name": "f", "jobs": {
                "a": {"function": "echo", "debounce": 1}}}), "unknown field `debounce`"),
        ]
        for attempt, expected in cases:
            with pytest.raises(wasmgear.BadInput) as caught:
                attempt()
            assert expected in str(caught.value), (expected, str(caught.value))
            assert sorted(bare.redis.keys("*")) == keys_before, f"{expected}: keys changed"
            assert bare.redis.get("wg:{echo}:seq") == seq_before, f"{expected}: a job was made"
    finally:
        client.close()


def test_the_options_are_sent_after_the_rust_client_s_others() -> None:
    spec = wasmgear._core.job_spec("x", {"uniq": "u", "group": "g", "throttle": (3, 1.5)})
    assert spec.named == (("uniq", "u"), ("group", "g"), ("throttle", "3"),
                          ("throttle_ms", "1500"))
    spec = wasmgear._core.job_spec("x", {"uniq": "u", "uniq_for": timedelta(hours=1)})
    assert spec.named == (("uniq", "u"), ("uniq_for", "3600000"))
    spec = wasmgear._core.job_spec("x", {"uniq": "u", "debounce": 0.25, "delay": 0})
    assert spec.named == (("uniq", "u"), ("debounce", "250"))
    spec = wasmgear._core.job_spec("x", {"uniq": "u", "throttle": RateLimit(1, timedelta(days=1)),
                                         "uniq_for": None, "debounce": None})
    assert spec.named == (("uniq", "u"), ("throttle", "1"), ("throttle_ms", "86400000"))


def test_async_dedup(bare: RedisServer) -> None:
    async def main() -> None:
        async with await wasmgear.AsyncClient.from_url(bare.url) as client:
            made = [await client.enqueue("echo", str(i), uniq="t", throttle=(2, 60))
                    for i in range(3)]
            assert [e.created for e in made] == [True, True, False]
            assert made[2].id == made[1].id != made[0].id
            first = await client.enqueue("echo", "one", uniq="d", debounce=3600)
            second = (await client.enqueue_many("echo", ["two"], uniq="d", debounce=3600))[0]
            assert (second.id, second.created) == (first.id, False)
            assert (await client.status(first.id)).state == "scheduled"
            # The job took the input given last (the queue's `input` hash, by number).
            assert bare.redis.hget("wg:{echo}:input", first.id.split(":")[1]) == b"two"
            with pytest.raises(wasmgear.BadInput, match="uniq_for works on a uniq key"):
                await client.enqueue("echo", "x", uniq_for=5)
            with pytest.raises(wasmgear.BadInput, match="debounce is the job's delay"):
                await client.enqueue("echo", "x", uniq="d", debounce=5, delay=1)

    asyncio.run(asyncio.wait_for(main(), 120))
