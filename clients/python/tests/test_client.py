"""The sync client against a real redis-server and a real worker."""

from __future__ import annotations

import json
import threading
import time
from datetime import datetime, timedelta, timezone
from typing import Any, Dict, List

import pytest
import redis

import wasmgear
from conftest import cli, events_channel, free_port, numsub, wait_until


def test_round_trip_echo(client: wasmgear.Client) -> None:
    enqueued = client.enqueue("echo", "hello, wasmgear")
    assert enqueued.created
    function, number = enqueued.id.rsplit(":", 1)
    assert function == "echo" and int(number) >= 1
    job = client.wait(enqueued.id, timeout=30)
    assert job.state == "succeeded"
    assert job.output == b"hello, wasmgear"
    assert job.output_text == "hello, wasmgear"
    assert job.attempt == 1 and job.error is None
    assert job.created is not None and job.finished is not None and job.finished >= job.created
    assert [a.outcome for a in job.history] == ["succeeded"]
    again = client.status(enqueued.id)
    assert again.state == "succeeded" and again.output == b"hello, wasmgear"
    assert again.record["state"] == "succeeded"
    assert isinstance(client.logs(enqueued.id), str)


def test_binary_input_and_output_round_trip(client: wasmgear.Client) -> None:
    data = bytes(range(256)) * 4
    job = client.wait(client.enqueue("echo", data).id, timeout=30)
    assert job.output == data


def test_progress_callbacks_in_order(client: wasmgear.Client) -> None:
    reports: List[wasmgear.Progress] = []
    enqueued = client.enqueue("count", "5 20")
    job = client.wait(enqueued.id, timeout=60, on_progress=reports.append)
    assert job.state == "succeeded"
    assert reports, "no progress was reported"
    seqs = [p.seq for p in reports]
    assert seqs == sorted(set(seqs)), f"progress went backwards or repeated: {seqs}"
    dones = [p.done for p in reports]
    assert dones == sorted(dones) and all(p.total == 5 for p in reports)
    assert (reports[-1].done, reports[-1].total) == (5, 5)
    assert all(p.id == enqueued.id for p in reports)
    assert job.progress is not None and job.progress.done == 5


def test_bulk_of_ten_thousand(client: wasmgear.Client, server) -> None:
    before = {q.function: q for q in client.queues()}.get("echo")
    inputs = [f"job {i}" for i in range(10_000)]
    started = time.monotonic()
    enqueued = client.enqueue_many("echo", inputs)
    assert len(enqueued) == 10_000
    assert all(e.created for e in enqueued)
    ids = [e.id for e in enqueued]
    assert len(set(ids)) == 10_000
    numbers = [int(i.rsplit(":", 1)[1]) for i in ids]
    assert numbers == list(range(numbers[0], numbers[0] + 10_000)), "ids are not in order"
    jobs = client.wait(ids, timeout=300)
    succeeded = sum(1 for job in jobs if job.state == "succeeded")
    assert succeeded == 10_000
    assert [job.output for job in jobs] == [i.encode() for i in inputs]
    after = {q.function: q for q in client.queues()}["echo"]
    assert after.succeeded - (before.succeeded if before else 0) == 10_000
    assert time.monotonic() - started < 300


def test_answered_calls_are_acknowledged(bare) -> None:
    """Each enqueue call acknowledges those answered before it (`acked`), so the server keeps
    the last call's reply only, not one per call (or one per chunk of a bulk)."""
    client = wasmgear.Client.from_url(bare.url)
    try:
        client.enqueue_many("echo", ["x"] * 3500)
        assert bare.redis.hlen("wg:{echo}:calls") == 1
        for i in range(5):
            client.enqueue("echo", f"job {i}")
            assert bare.redis.hlen("wg:{echo}:calls") == 1
        assert bare.redis.zcard("wg:{echo}:calls-exp") == 1
        assert bare.redis.get("wg:{echo}:seq") == b"3505"
    finally:
        client.close()


def test_waits_share_one_subscription(url: str, server) -> None:
    client = wasmgear.Client.from_url(url)
    try:
        cli(url, "pause", "echo")
        try:
            ids = [e.id for e in client.enqueue_many("echo", [f"w{i}" for i in range(20)])]
            results: Dict[str, Any] = {}

            def one(job_id: str) -> None:
                try:
                    results[job_id] = client.wait(job_id, timeout=60)
                except Exception as e:  # noqa: BLE001 - reported below
                    results[job_id] = e

            def together() -> None:
                try:
                    results["all"] = client.wait(ids, timeout=60)
                except Exception as e:  # noqa: BLE001
                    results["all"] = e

            threads = [threading.Thread(target=one, args=(i,)) for i in ids]
            threads.append(threading.Thread(target=together))
            for t in threads:
                t.start()
            wait_until(lambda: client._listener.waiting() == 40, 30, "every wait to register")
            wait_until(lambda: client._listener.hearing() == 21, 30,
                       "every wait to have its subscription confirmed")
            assert numsub(server.redis, events_channel("echo")) == 1
            # Nothing ran: the function is paused, so the waits are really waiting.
            assert all(client.status(i).state == "queued" for i in ids)
        finally:
            cli(url, "resume", "echo")
        for t in threads:
            t.join(90)
        for job_id in ids:
            assert isinstance(results[job_id], wasmgear.Job), results[job_id]
            assert results[job_id].output == f"w{ids.index(job_id)}".encode()
        assert [j.state for j in results["all"]] == ["succeeded"] * 20
        wait_until(lambda: numsub(server.redis, events_channel("echo")) == 0, 10,
                   "the subscription to end with the last wait")
    finally:
        client.close()


def test_bad_input_is_refused_and_writes_nothing(bare) -> None:
    client = wasmgear.Client.from_url(bare.url)
    try:
        first = client.enqueue("echo", "a real job")
        keys_before = sorted(bare.redis.keys("*"))
        seq_before = bare.redis.get("wg:{echo}:seq")
        past = datetime.now(timezone.utc) - timedelta(minutes=5)
        cases = [
            (lambda: client.enqueue("echo", "x", priority="urgent"), "priority"),
            (lambda: client.enqueue("echo", "x", priority=-1001), "priority"),
            (lambda: client.enqueue("echo", "x", priority=1001), "priority"),
            (lambda: client.enqueue("echo", "x", tags=[f"t{i}" for i in range(33)]), "tags"),
            (lambda: client.enqueue("echo", "x", tags=["bad\ntag"]), "tag"),
            (lambda: client.enqueue("bad name!", "x"), "function name"),
            (lambda: client.enqueue("", "x"), "function name"),
            (lambda: client.enqueue("echo", "x", at=past), "at"),
            (lambda: client.enqueue("echo", "x", attempts=0), "attempts"),
            (lambda: client.enqueue("echo", "x", attempts=1001), "attempts"),
            (lambda: client.enqueue("echo", "x", timeout=0), "timeout"),
            (lambda: client.enqueue("echo", "x", retention=0.5), "retention"),
            (lambda: client.enqueue("echo", "x", delay=-1), "delay"),
            (lambda: client.enqueue("echo", "x", delay=timedelta(days=3700)), "delay"),
            (lambda: client.enqueue("echo", "x", delay=5, at=datetime.now() + timedelta(hours=1)), "delay"),
            (lambda: client.enqueue("echo", "x", uniq=""), "uniq"),
            (lambda: client.enqueue("echo", "x", uniq="u" * 201), "uniq"),
            (lambda: client.enqueue("echo", "x", after=["nocolon"]), "after"),
            (lambda: client.enqueue("echo", "x", after=[f"echo:{i}" for i in range(1, 10_002)]), "after"),
            (lambda: client.enqueue("echo", "x", after=["other:99"]), "dependency other:99"),
            (lambda: client.enqueue("echo", "x", after=["echo:999"]), "dependency echo:999"),
            (lambda: client.enqueue("echo", b"x" * (16 * 1024 * 1024 + 1)), "input"),
            (lambda: client.enqueue("echo", 42), "input"),  # type: ignore[arg-type]
            (lambda: client.enqueue_many("echo", ["ok", ("bad", {"priority": 5000}), "ok"]),
             "job 2 of the batch: priority"),
            (lambda: client.enqueue_many("echo", [("x", {"prio": 1})]), "unknown option 'prio'"),
            (lambda: client.enqueue_many("echo", ["ok"] * 1500 + [("late", {"at": past})]),
             "job 1501 of the batch: at"),
            (lambda: client.enqueue("echo", "x", at=time.time() + 11 * 365 * 86400),
             "more than 10 years ahead"),
        ]
        # What the queue's state refuses (a time its clock has passed, a dependency that is
        # gone) is a Conflict, the BadInput the HTTP API answers with 409.
        conflicts = (
            "at",
            "dependency other:99",
            "dependency echo:999",
            "job 1501 of the batch: at",
            "more than 10 years ahead",
        )
        for attempt, expected in cases:
            with pytest.raises(wasmgear.BadInput) as caught:
                attempt()
            assert expected in str(caught.value), (expected, str(caught.value))
            assert isinstance(caught.value, wasmgear.Conflict) == (expected in conflicts), expected
            assert caught.value.exit_code == 2
            assert sorted(bare.redis.keys("*")) == keys_before, f"{expected}: keys changed"
            assert bare.redis.get("wg:{echo}:seq") == seq_before, f"{expected}: a job was made"
        assert client.status(first.id).state == "queued"
    finally:
        client.close()


def test_at_in_the_past_is_refused_by_the_script_too(bare) -> None:
    """The script checks `at` against Redis' clock whatever the client checked."""
    client = wasmgear.Client.from_url(bare.url)
    try:
        client.enqueue("echo", "first")
        before = bare.redis.dbsize()
        past_ms = int(time.time() * 1000) - 60_000
        args = [1, "call", "c1", 1, 1, "at", str(past_ms), "x"]
        keys = [f"wg:{{echo}}:{s}" for s in
                client._proto.functions["enqueue"]["keys"]]
        with pytest.raises(redis.ResponseError, match="CONFLICT"):
            bare.redis.execute_command("FCALL", "wg2_enqueue", len(keys), *keys, "echo", *args)
        assert bare.redis.dbsize() == before
    finally:
        client.close()


def test_cancel_a_running_job(client: wasmgear.Client) -> None:
    with client.events("count") as stream:
        enqueued = client.enqueue("count", "100 50")
        deadline = time.monotonic() + 60
        while True:
            assert time.monotonic() < deadline, "no progress event came"
            event = stream.get(timeout=max(deadline - time.monotonic(), 0.1))
            if event is not None and event.id == enqueued.id and event.kind == "progress":
                break
    result = client.cancel(enqueued.id)
    assert result.outcome == "stopping" and result.state == "running"
    with pytest.raises(wasmgear.JobCancelled) as caught:
        client.wait(enqueued.id, timeout=60)
    job = caught.value.job
    assert caught.value.exit_code == 3
    assert job.state == "cancelled" and job.cancel_requested
    assert job.progress is None or job.progress.done < 100
    assert client.cancel(enqueued.id).outcome == "already-ended"


def test_cancel_a_queued_job_and_retry_it(bare) -> None:
    client = wasmgear.Client.from_url(bare.url)
    try:
        enqueued = client.enqueue("echo", "never run", delay=3600)
        assert client.status(enqueued.id).state == "scheduled"
        assert client.cancel(enqueued.id).outcome == "cancelled"
        job = client.wait(enqueued.id, timeout=5, check=False)
        assert job.state == "cancelled"
        assert client.retry(enqueued.id) is True
        assert client.status(enqueued.id).state == "scheduled"
        assert client.retry(enqueued.id) is False
    finally:
        client.close()


def test_failed_job_raises_and_can_be_retried(client: wasmgear.Client) -> None:
    enqueued = client.enqueue("fail", "on purpose", attempts=1)
    with pytest.raises(wasmgear.JobFailed) as caught:
        client.wait(enqueued.id, timeout=60)
    assert caught.value.exit_code == 1
    job = caught.value.job
    assert job.state == "failed" and job.error is not None and job.error.class_
    assert client.retry(enqueued.id) is True
    again = client.wait(enqueued.id, timeout=60, check=False)
    assert again.state == "failed"
    assert len([a for a in again.history if a.outcome != "succeeded"]) == 2


#: The record fields that are times of the moment a job was enqueued, became ready or ran:
#: two jobs enqueued one after the other legitimately differ there. Every other field
#: (timeout_ms, retention_ms, failed_retention_ms included) must be the same.
RECORD_TIMES = ("created_ms", "run_at_ms", "not_before_ms", "ready_ms", "started_ms",
                "finished_ms")


def test_cli_and_client_write_the_same_records(url: str, server, client: wasmgear.Client) -> None:
    dep = client.enqueue("parity_dep", "dependency", delay=3600).id
    at = int(time.time()) + 7200
    variants = [
        (
            ["--priority", "7", "--delay", "1h", "--attempts", "2", "--timeout", "30s",
             "--retention", "2h", "--failed-retention", "3d", "--uniq", "u-1",
             "--tag", "a", "--tag", "b", "--after", dep],
            dict(priority=7, delay=3600, attempts=2, timeout=30, retention=7200,
                 failed_retention=timedelta(days=3), uniq="u-1", tags=["a", "b"],
                 after=[dep]),
        ),
        (["--at", str(at), "--priority", "high"],
         dict(at=datetime.fromtimestamp(at, timezone.utc), priority="high")),
        ([], {}),
    ]

    def normalized(job: wasmgear.Job, function: str) -> Dict[str, Any]:
        text = json.dumps(job.record, sort_keys=True).replace(f"{function}:", "F:")
        record = json.loads(text)
        return {k: v for k, v in record.items() if k not in RECORD_TIMES}

    def stored_input(job_id: str) -> bytes:
        function, number = job_id.rsplit(":", 1)
        return server.redis.hget(f"wg:{{{function}}}:input", number)

    for i, (args, options) in enumerate(variants):
        data = f"input {i}: h\u00e9llo"
        out = cli(url, "enqueue", "parity_cli", data, *args).stdout.strip()
        mine = client.enqueue("parity_py", data, **options)
        assert out.rsplit(":", 1)[1] == mine.id.rsplit(":", 1)[1]
        theirs = client.status(out)
        ours = client.status(mine.id)
        assert normalized(theirs, "parity_cli") == normalized(ours, "parity_py"), f"variant {i}"
        assert stored_input(out) == stored_input(mine.id) == data.encode(), f"variant {i}"
        assert theirs.state == ours.state
        if options.get("at") is not None:
            for field in ("run_at_ms", "not_before_ms"):
                assert ours.record[field] == theirs.record[field] == at * 1000, field
    # The comparison above covered the durations (they are not dropped as times).
    first = normalized(client.status("parity_py:1"), "parity_py")
    assert (first["timeout_ms"], first["retention_ms"], first["failed_retention_ms"]) == \
        (30_000, 7_200_000, 3 * 86_400_000)
    assert first["max_attempts"] == 2 and first["priority"] == 7
    dependents = client.status(dep).dependents
    assert sorted(dependents) == sorted(["parity_cli:1", "parity_py:1"])


def test_dependencies_across_functions(client: wasmgear.Client) -> None:
    first = client.enqueue("echo", "first", delay=0.5)
    second = client.enqueue("count", "2 1", after=[first.id])
    assert client.status(second.id).state == "waiting"
    assert client.status(first.id).dependents == [second.id]
    job = client.wait(second.id, timeout=60)
    assert job.state == "succeeded" and job.after == [first.id]
    # A dependency that fails cancels its dependent.
    failing = client.enqueue("fail", "boom", attempts=1, delay=1)
    doomed = client.enqueue("echo", "never", after=[failing.id])
    assert client.status(doomed.id).state == "waiting"
    with pytest.raises(wasmgear.JobCancelled) as caught:
        client.wait(doomed.id, timeout=60)
    assert caught.value.job.error is not None and caught.value.job.error.class_ == "dependency"
    # A dependency that has already failed is refused: the queue's state, not the call's form.
    with pytest.raises(wasmgear.Conflict, match="has already failed"):
        client.enqueue("echo", "never", after=[failing.id])


def test_uniq_key_returns_the_unfinished_job(client: wasmgear.Client) -> None:
    key = f"uniq-{time.time()}"
    first = client.enqueue("echo", "one", uniq=key, delay=3600)
    second = client.enqueue("echo", "two", uniq=key)
    assert first.created and not second.created and second.id == first.id
    client.cancel(first.id)
    third = client.enqueue("echo", "three", uniq=key)
    assert third.created and third.id != first.id
    assert client.wait(third.id, timeout=30).output == b"three"


def test_wait_many_mixed_outcomes(client: wasmgear.Client) -> None:
    ok = client.enqueue("echo", "fine").id
    bad = client.enqueue("fail", "bad", attempts=1).id
    with pytest.raises(wasmgear.JobFailed) as caught:
        client.wait([ok, bad], timeout=60)
    assert [j.id for j in caught.value.jobs] == [ok, bad]
    assert [j.state for j in caught.value.jobs] == ["succeeded", "failed"]
    jobs = client.wait([ok, bad, ok], timeout=5, check=False)
    assert [j.state for j in jobs] == ["succeeded", "failed", "succeeded"]


def test_wait_timeout(bare) -> None:
    client = wasmgear.Client.from_url(bare.url)
    try:
        enqueued = client.enqueue("nobody", "no worker serves this")
        started = time.monotonic()
        with pytest.raises(wasmgear.WaitTimeout) as caught:
            client.wait(enqueued.id, timeout=0.5)
        assert 0.4 < time.monotonic() - started < 5
        assert caught.value.exit_code == 4 and caught.value.ids == [enqueued.id]
        assert client.status(enqueued.id).state == "queued"
    finally:
        client.close()


def test_events_of_every_function(client: wasmgear.Client) -> None:
    with client.events() as stream:
        one = client.enqueue("echo", "watched").id
        many = [e.id for e in client.enqueue_many("count", ["1 1", "1 1"])]
        wanted = {(one, "create"), (one, "finish")} | {(i, k) for i in many for k in ("create", "finish")}
        seen = set()
        functions = set()
        deadline = time.monotonic() + 60
        while not wanted <= seen:
            assert time.monotonic() < deadline, f"missing events: {wanted - seen}"
            event = stream.get(timeout=1)
            if event is not None and event.id is not None:
                seen.add((event.id, event.kind))
                functions.add(event.function)
                if event.kind == "finish":
                    assert event.state == "succeeded"
        assert {"echo", "count"} <= functions


def test_iterating_the_events_of_a_job(client: wasmgear.Client) -> None:
    """A plain `for event in stream` yields a job's events as the worker runs it, in order:
    create, start, its progress reports, finish."""
    with client.events("count") as stream:
        enqueued = client.enqueue("count", "3 20")
        # The loop blocks until an event comes: should the job's events not all come, the
        # timer closes the stream, which ends the loop (and the asserts below fail).
        watchdog = threading.Timer(60, stream.close)
        watchdog.start()
        events: List[wasmgear.Event] = []
        try:
            for event in stream:
                assert isinstance(event, wasmgear.Event) and event.function == "count"
                if event.id != enqueued.id:
                    continue
                events.append(event)
                if event.kind == "finish":
                    break
        finally:
            watchdog.cancel()
    kinds = [e.kind for e in events]
    assert kinds and kinds[-1] == "finish", f"no finish event within 60 s: {kinds}"
    assert kinds[:2] == ["create", "start"], kinds
    progress = events[2:-1]
    assert progress and all(e.kind == "progress" for e in progress), kinds
    seqs = [e.seq for e in progress]
    assert seqs == sorted(set(seqs)), f"progress events out of order: {seqs}"
    dones = [e.done for e in progress]
    assert dones == sorted(dones) and dones[-1] == 3 and all(e.total == 3 for e in progress)
    assert events[1].attempt == 1 and events[-1].state == "succeeded"


def test_queues_match_the_cli(client: wasmgear.Client) -> None:
    client.enqueue("queued_only", "x")
    queues = {q.function: q for q in client.queues()}
    assert queues["queued_only"].queued >= 1
    assert queues["queued_only"].workers == 0
    assert queues["echo"].workers == 1
    from_cli = {q["function"]: q for q in json.loads(cli(client._url, "queues", "--json").stdout)}
    assert set(from_cli) == set(queues)
    for name, q in queues.items():
        for field in ("queued", "scheduled", "running", "waiting", "succeeded", "failed",
                      "cancelled", "workers", "paused"):
            assert getattr(q, field) == from_cli[name][field], (name, field)


def test_unreachable_on_a_closed_port() -> None:
    port = free_port()
    started = time.monotonic()
    with pytest.raises(wasmgear.Unreachable) as caught:
        wasmgear.Client.from_url(f"redis://127.0.0.1:{port}")
    assert caught.value.exit_code == 6
    assert str(port) in str(caught.value) and "refused" in str(caught.value)
    assert time.monotonic() - started < 10


def test_bad_url() -> None:
    with pytest.raises(wasmgear.BadInput) as caught:
        wasmgear.Client.from_url("http://127.0.0.1:1")
    assert caught.value.exit_code == 2


def test_not_found(client: wasmgear.Client) -> None:
    for call in (client.status, client.logs, client.cancel, client.retry, client.wait):
        with pytest.raises(wasmgear.NotFound) as caught:
            call("echo:987654321")
        assert caught.value.exit_code == 5, call
    with pytest.raises(wasmgear.BadInput):
        client.status("no-number")


def test_library_is_loaded_again_after_a_flush(bare) -> None:
    client = wasmgear.Client.from_url(bare.url)
    try:
        first = client.enqueue("echo", "before")
        bare.redis.execute_command("FUNCTION", "FLUSH")
        bare.redis.flushall()
        with pytest.raises(redis.ResponseError, match="Function not found"):
            bare.redis.execute_command("FCALL", "wg2_version", 0)
        again = client.enqueue("echo", "after")
        assert again.id == "echo:1" and first.id == "echo:1"
        assert client.status(again.id).state == "queued"
        assert bare.redis.execute_command("FCALL", "wg2_version", 0) == \
            client._proto.version.encode()
    finally:
        client.close()


def test_another_library_version_is_left_alone(bare) -> None:
    """A loaded v2 library of another build serves everyone: the client does not replace it."""
    proto = wasmgear._core.protocol()
    other = proto.library_text.replace(f"return '{proto.version}'", "return 'another-build'")
    assert other != proto.library_text
    bare.redis.execute_command("FUNCTION", "LOAD", "REPLACE", other)
    client = wasmgear.Client.from_url(bare.url)
    try:
        assert bare.redis.execute_command("FCALL", "wg2_version", 0) == b"another-build"
        assert client.status(client.enqueue("echo", "x").id).state == "queued"
    finally:
        client.close()


def test_a_job_not_started_by_its_deadline_ends_expired_and_can_be_retried(
        client: wasmgear.Client) -> None:
    """`expires_in`: the job is not leased by its deadline (its function is paused), so the
    next lease of the function ends it `expired` (error class `expired`) without running
    it; `wait` raises JobFailed for it; `retry` runs it without the deadline."""
    client.configure("echo", paused=True)
    try:
        enqueued = client.enqueue("echo", "too late", expires_in=timedelta(milliseconds=1))
        # Still queued, or already ended by a lease call of the paused function (its
        # housekeeping runs even so); never started.
        assert client.status(enqueued.id).state in ("queued", "expired")
        # The worker's lease calls of the paused function end it once its deadline passed.
        wait_until(lambda: client.status(enqueued.id).state == "expired", 60, "the job to expire")
    finally:
        client.configure("echo", paused=False)
    with pytest.raises(wasmgear.JobFailed) as caught:
        client.wait(enqueued.id, timeout=60)
    job = caught.value.job
    assert job.state == "expired" and job.is_final
    assert job.error is not None and job.error.class_ == "expired"
    assert "expired" in str(caught.value)
    assert client.wait(enqueued.id, timeout=5, check=False).state == "expired"
    # A dependency that has expired cannot be waited for.
    with pytest.raises(wasmgear.Conflict, match="expired"):
        client.enqueue("echo", "after it", after=[enqueued.id])
    assert client.retry(enqueued.id) is True
    again = client.wait(enqueued.id, timeout=60)
    assert again.state == "succeeded" and again.output == b"too late"
    # A deadline far enough ahead does not stop the job.
    later = client.enqueue("echo", "in time", expires_at=datetime.now(timezone.utc)
                           + timedelta(hours=1))
    assert client.wait(later.id, timeout=60).output == b"in time"


def test_bad_expiry_options_are_refused_and_write_nothing(bare) -> None:
    client = wasmgear.Client.from_url(bare.url)
    try:
        client.enqueue("echo", "first")
        keys_before = sorted(bare.redis.keys("*"))
        soon = datetime.now(timezone.utc) + timedelta(minutes=5)
        cases = [
            (dict(expires_in=5, expires_at=soon), "not both"),
            (dict(expires_in=0), "expires_in"),
            (dict(expires_in=-1), "expires_in"),
            (dict(expires_in=timedelta(days=3700)), "expires_in"),
            (dict(expires_at="tomorrow"), "expires_at"),
            (dict(expires_at=0), "expires_at"),
        ]
        for options, expected in cases:
            with pytest.raises(wasmgear.BadInput) as caught:
                client.enqueue("echo", "x", **options)  # type: ignore[arg-type]
            assert expected in str(caught.value), (expected, str(caught.value))
            assert not isinstance(caught.value, wasmgear.Conflict)
            assert sorted(bare.redis.keys("*")) == keys_before, f"{expected}: keys changed"
        # A time Redis' clock has passed: the queue refuses it (Conflict), writing nothing.
        with pytest.raises(wasmgear.Conflict, match="expires_at"):
            client.enqueue("echo", "x", expires_at=time.time() - 60)
        assert sorted(bare.redis.keys("*")) == keys_before
    finally:
        client.close()
