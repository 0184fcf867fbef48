"""The pure part (no Redis): option checks, arguments, replies, events."""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta, timezone

import pytest

import wasmgear
from wasmgear import _core as core


def test_plain_job_sends_no_options() -> None:
    spec = core.job_spec("hi", {})
    assert spec.named == () and spec.input == b"hi"


def test_options_in_the_rust_clients_order() -> None:
    spec = core.job_spec(
        b"x",
        dict(priority="low", attempts=3, timeout=1.5, retention=timedelta(hours=25),
             failed_retention=60, delay=2, uniq="k", tags=["a", "b"], after=["f:1"]),
    )
    assert spec.named == (
        ("priority", "-10"), ("attempts", "3"), ("timeout", "1500"),
        ("failed_retention", "60000"), ("delay", "2000"), ("uniq", "k"),
        ("tag", "a"), ("tag", "b"), ("after", "f:1"),
    )


def test_expiry_is_sent_after_the_other_options() -> None:
    spec = core.job_spec(b"x", dict(uniq="k", throttle=(2, 1), expires_in=timedelta(seconds=3)))
    assert spec.named == (("uniq", "k"), ("throttle", "2"), ("throttle_ms", "1000"),
                          ("expires_in", "3000"))
    at = datetime(2030, 1, 1, tzinfo=timezone.utc)
    spec = core.job_spec(b"x", dict(priority=1, expires_at=at))
    assert spec.named == (("priority", "1"), ("expires_at", str(1893456000000)))
    assert core.job_spec(b"x", dict(expires_at=1893456000.5)).named == (
        ("expires_at", "1893456000500"),)


def test_an_expired_job_is_final_and_raises_job_failed() -> None:
    job = wasmgear.Job("f:1", "expired", 0, 0, 1, None, wasmgear.JobError("expired", "late"),
                       None, None, None, None, None, [], None, [], [], [], [], False, {})
    assert job.is_final
    with pytest.raises(wasmgear.JobFailed, match=r"expired before it started \[expired\] late"):
        core.outcome([job], False)


@pytest.mark.parametrize(
    "options, named",
    [
        ({"expires_in": 0}, "expires_in"),
        ({"expires_in": timedelta(days=3700)}, "expires_in"),
        ({"expires_in": 1, "expires_at": 2_000_000_000}, "not both"),
        ({"expires_at": "soon"}, "expires_at"),
        ({"expires_at": -5}, "expires_at"),
        ({"priority": True}, "priority"),
        ({"priority": 2.5}, "priority"),
        ({"attempts": "3"}, "attempts"),
        ({"timeout": "1s"}, "timeout"),
        ({"tags": "one"}, "tags"),
        ({"after": "f:1"}, "after"),
        ({"after": ["f:0"]}, "after"),
        ({"uniq": "a\x00b"}, "uniq"),
        ({"at": "tomorrow"}, "at"),
        ({"failed_retention": timedelta(days=4000)}, "failed_retention"),
        ({"colour": "red"}, "colour"),
    ],
)
def test_bad_options_name_the_option(options, named) -> None:
    with pytest.raises(wasmgear.BadInput, match=named):
        core.job_spec("x", options)


def test_job_ids() -> None:
    assert core.parse_job_id("my.fn-1:42") == ("my.fn-1", 42)
    for bad in ("echo", "echo:", "echo:0", ":1", "echo:x", "echo:-1", "bad name:1", "a:b:7", 5):
        with pytest.raises(wasmgear.BadInput):
            core.parse_job_id(bad)


def test_events_as_object_or_array() -> None:
    one = core.parse_message("echo", b'{"event":"create","id":"echo:1"}')
    assert [(e.kind, e.id, e.function) for e in one] == [("create", "echo:1", "echo")]
    many = core.parse_message(
        "echo",
        b'[{"event":"start","id":"echo:1","attempt":1},'
        b'{"event":"progress","id":"echo:1","seq":3,"done":"18446744073709551614","total":"0"},'
        b'{"event":"finish","id":"echo:1","state":"succeeded"},"junk",'
        b'{"event":"config","id":""},{"event":"later","id":"echo:1"}]',
    )
    assert [e.kind for e in many] == ["start", "progress", "finish", "config", "later"]
    assert many[1].done == 2**64 - 2 and many[1].total == 0 and many[1].seq == 3
    assert many[3].id is None
    assert core.parse_message("echo", b"not json") == []


def test_a_waited_jobs_finish_event_reads_as_gets_reply() -> None:
    """The record a waited job's finish event carries is read exactly as `wg2_get`'s reply
    (cjson's `{}` for an empty list included); the event's output is the job's output."""
    record = {"state": "succeeded", "attempt": 1, "max_attempts": 3, "priority": 0,
              "tags": {}, "after": {}, "dependents": {}, "history": [
                  {"attempt": 1, "outcome": "succeeded", "worker": "w", "started_ms": 1,
                   "ended_ms": 2, "version": "v"}],
              "progress": {"done": 5, "total": 5, "seq": 6}, "progress_seq": 6,
              "created_ms": 1700000000000, "finished_ms": 1700000000002}
    payload = json.dumps({"event": "finish", "id": "echo:4", "state": "succeeded",
                          "record": record, "output": "text\twith\r\nline ends"})
    [event] = core.parse_message("echo", payload.encode())
    job = core.records.finished_job("echo:4", event)
    assert job == core.parse_record("echo:4", json.dumps(record).encode(),
                                    b"text\twith\r\nline ends")
    assert job is not None and job.tags == [] and job.after == [] and job.dependents == []
    job.record["state"] = "changed"  # a copy: the event (shared by the waits) is left alone
    assert event.raw["record"]["state"] == "succeeded"
    # Without output (a failed job): none. Output omitted, a plain event, a record that
    # cannot be read: the wait reads the job instead.
    failed = {"event": "finish", "id": "fail:1", "state": "failed",
              "record": {**record, "state": "failed"}}
    read = [core.records.finished_job(e.id or "", e) for e in core.parse_message(
        "echo", json.dumps([failed, {**failed, "output_omitted": True},
                            {"event": "finish", "id": "fail:1", "state": "failed"},
                            {**failed, "record": {"no": "state"}}]).encode())]
    assert read[0] is not None and read[0].state == "failed" and read[0].output is None
    assert read[1:] == [None, None, None]


def test_a_checkpoint_reads_from_its_event_and_its_record() -> None:
    """A `checkpoint` event has its size in `bytes`; a record's `checkpoint` ({bytes, ms}) is
    the job's `checkpoint` (None without one); one that cannot be read is a ProtocolError."""
    [event] = core.parse_message("resume", b'{"event":"checkpoint","id":"resume:3","bytes":7}')
    assert (event.kind, event.id, event.bytes) == ("checkpoint", "resume:3", 7)
    assert core.parse_message("resume", b'{"event":"create","id":"resume:3"}')[0].bytes is None
    record = {"state": "failed", "checkpoint": {"bytes": 7, "ms": 1700000000123}}
    job = core.parse_record("resume:3", json.dumps(record).encode(), None)
    saved = datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=timezone.utc)
    assert job.checkpoint == wasmgear.CheckpointInfo(bytes=7, saved=saved)
    assert core.parse_record("resume:3", b'{"state":"failed"}', None).checkpoint is None
    for bad in ({"bytes": 7}, {"ms": 1}, [7, 1]):
        with pytest.raises(wasmgear.ProtocolError, match="record of job resume:3"):
            core.parse_record("resume:3", json.dumps({**record, "checkpoint": bad}).encode(),
                              None)


def test_checkpoint_and_retry_send_what_the_rust_client_sends() -> None:
    """`checkpoint` calls `checkpoint_get` read-only with the manifest's keys; `retry` ends
    with `fresh` only when asked, and refuses a `fresh` that is not a bool before sending
    anything."""
    proto = core.protocol()
    keys = [f"wg:{{resume}}:{suffix}" for suffix in ("jobs", "checkpoints", "stats", "events")]
    assert drive(core.checkpoint(proto, "resume:3"), {"wg2_checkpoint_get": b"5"}) == [
        ("FCALL_RO", "wg2_checkpoint_get", 4, *keys, "resume", 3)]
    moved = {"wg2_retry": [[3], [], 1]}
    for fresh, last in ((False, ("resume", "job", 3)), (True, ("resume", "job", 3, "fresh"))):
        [sent] = drive(core.retry(proto, "resume:3", fresh), moved)
        assert sent[0] == "FCALL" and sent[1] == "wg2_retry" and sent[-len(last):] == last
    for bad in ("yes", 1, None):
        with pytest.raises(wasmgear.BadInput, match=r"^fresh .* is neither True nor False$"):
            next(core.retry(proto, "resume:3", bad))  # raised before the first command


def test_router_shares_channels_and_routes_by_job() -> None:
    router = core.Router(core.protocol())
    a, b = object(), object()
    assert router.add(["echo:1", "echo:2"], a) == ["wg:{echo}:events"]
    assert router.add(["echo:2", "count:1"], b) == ["wg:{count}:events"]
    routed = router.route("wg:{echo}:events", b'[{"event":"finish","id":"echo:2","state":"failed"}]')
    assert {id(s) for s, _ in routed} == {id(a), id(b)}
    assert router.remove(["echo:1", "echo:2"], a) == []
    assert router.remove(["echo:2", "count:1"], b) == ["wg:{echo}:events", "wg:{count}:events"]
    assert router.channels() == []


def test_channel_names() -> None:
    proto = core.protocol()
    assert proto.events_channel("a.b") == "wg:{a.b}:events"
    assert proto.function_of_channel("wg:{a.b}:events") == "a.b"
    assert proto.function_of_channel("wg:{a.b}:work") is None
    assert proto.all_events_pattern() == "wg:{*}:events"


def test_error_mapping() -> None:
    import redis

    assert isinstance(core.map_error(redis.ResponseError("BADJOB job 1: nope")), wasmgear.BadInput)
    assert isinstance(core.map_error(redis.ResponseError("BADARGS x")), wasmgear.BadInput)
    assert isinstance(core.map_error(redis.ResponseError("NOJOB")), wasmgear.NotFound)
    assert isinstance(core.map_error(redis.ConnectionError("x")), wasmgear.Unreachable)
    assert isinstance(core.map_error(redis.TimeoutError("x")), wasmgear.Unreachable)
    codes = {cls.__name__: cls.exit_code for cls in (
        wasmgear.BadInput, wasmgear.NotFound, wasmgear.Unreachable, wasmgear.JobFailed,
        wasmgear.JobCancelled, wasmgear.WaitTimeout)}
    assert codes == {"BadInput": 2, "NotFound": 5, "Unreachable": 6, "JobFailed": 1,
                     "JobCancelled": 3, "WaitTimeout": 4}


def _manifest() -> dict:
    from importlib import resources
    import json
    folder = resources.files("wasmgear").joinpath("protocol")
    return json.loads(folder.joinpath("manifest.json").read_text("utf-8"))


def test_the_limits_are_the_shipped_manifests() -> None:
    """Every limit the client checks is the manifest's (crates/proto/src/limits.rs), none a copy."""
    shipped = _manifest()["limits"]
    limits = core.limits()
    for name, value in shipped.items():
        assert getattr(limits, name) == value, name
    assert limits.max_tags == 32 and limits.max_input_bytes == 16 * 1024 * 1024


def test_the_checks_follow_the_manifest(monkeypatch: pytest.MonkeyPatch) -> None:
    """A manifest with other limits makes the checks refuse by those: they are read, not copied."""
    import importlib
    module = importlib.import_module("wasmgear._core.base")
    manifest = _manifest()
    manifest["limits"].update(max_tags=1, max_priority=5, max_function_name_len=3,
                              max_key_bytes=2, max_attempts=2)
    proto = core.Protocol(manifest, "")
    monkeypatch.setattr(module, "_PROTOCOL", proto)
    core.job_spec("x", {"tags": ["a"], "priority": 5, "uniq": "ab", "attempts": 2})
    for options, named in (({"tags": ["a", "b"]}, "tags"), ({"priority": 6}, "priority"),
                           ({"uniq": "abc"}, "uniq"), ({"attempts": 3}, "attempts")):
        with pytest.raises(wasmgear.BadInput, match=named):
            core.job_spec("x", options)
    assert core.check_function("abc") == "abc"
    with pytest.raises(wasmgear.BadInput, match="1 to 3 characters"):
        core.check_function("abcd")


def test_a_manifest_without_a_limit_is_refused() -> None:
    """A damaged package (a manifest lacking a limit) says which one and to reinstall."""
    manifest = _manifest()
    del manifest["limits"]["max_tags"]
    with pytest.raises(wasmgear.ProtocolError, match="max_tags"):
        core.Protocol(manifest, "")


def test_at_and_batch_options_are_typed() -> None:
    """`at` takes a datetime or seconds since the epoch, in both clients' signatures, and a
    batch's per-job options are a typed dict: a type checker sees what they accept."""
    import typing
    from datetime import datetime

    for method in (wasmgear.Client.enqueue, wasmgear.AsyncClient.enqueue):
        hints = typing.get_type_hints(method)
        assert hints["at"] == typing.Optional[typing.Union[datetime, int, float]], method
    assert typing.get_type_hints(wasmgear.JobOptions)["at"] == typing.Optional[wasmgear.At]


def test_on_failure_is_sent_beside_after() -> None:
    """`on_failure` names dependencies given in `after` (ids as the Rust client writes them)
    and sends the policies other than `cancel` as `after_ignore` / `after_continue`."""
    spec = core.job_spec("x", {"after": ["f:1", "g:02", "h:3"],
                               "on_failure": {"g:2": "continue", "f:1": "ignore", "h:3": "cancel"}})
    assert spec.named == (
        ("after", "f:1"), ("after", "g:2"), ("after", "h:3"),
        ("after_ignore", "f:1"), ("after_continue", "g:2"),
    )
    assert spec.after == ("f:1", "g:2", "h:3") and spec.tolerated == ("f:1", "g:2")
    for options, message in (
        ({"after": ["f:1"], "on_failure": {"f:2": "ignore"}},
         "on_failure names f:2, which is not a dependency (add it to after)"),
        ({"after": ["f:1"], "on_failure": {"f:1": "skip"}}, "none of cancel, ignore and continue"),
        ({"after": ["f:1"], "on_failure": ["f:1"]}, "must map dependency ids"),
    ):
        with pytest.raises(wasmgear.BadInput, match=re.escape(message)):
            core.job_spec("x", options)


def test_durations_and_times_given_exactly_are_sent_exactly() -> None:
    from datetime import datetime, timezone

    at = datetime(2030, 1, 1, tzinfo=timezone.utc) + timedelta(milliseconds=1001)
    spec = core.job_spec("x", {"timeout": timedelta(milliseconds=1001), "at": at})
    assert spec.named == (("timeout", "1001"), ("at", str(1893456000000 + 1001)))


def checked(document: dict) -> list:
    """The names of the flow's jobs in the order it would be written, or the refusal."""
    flow = core.read_flow(document)
    order, _ = core.check_flow(flow)
    return [flow.jobs[i].name for i in order]


DIAMOND = {
    "name": "diamond",
    "jobs": {
        "d": {"function": "join", "after": ["c", {"job": "b", "on_failure": "ignore"}]},
        "c": {"function": "reverse", "input_json": {"n": 2, "a": [1, "é"]}, "after": ["a"]},
        "b": {"function": "reverse", "input": "bb1", "after": ["a"]},
        "a": {"function": "reverse", "input_base64": "YWEw"},
    },
}


def test_a_flow_document_reads_as_the_rust_clients() -> None:
    """Jobs in the order of their names, written dependencies first; inputs in three forms
    (JSON as serde_json writes it: compact, keys sorted); edges with their policies; an
    `after` entry with ':' names a job outside the flow."""
    flow = core.read_flow(DIAMOND)
    assert [job.name for job in flow.jobs] == ["a", "b", "c", "d"]
    assert checked(DIAMOND) == ["a", "b", "c", "d"]
    jobs = {job.name: job for job in flow.jobs}
    assert jobs["a"].input == b"aa0" and jobs["b"].input == b"bb1"
    assert jobs["c"].input == '{"a":[1,"é"],"n":2}'.encode()
    assert jobs["d"].input == b"" and jobs["d"].function == "join"
    assert jobs["d"].after == [wasmgear.FlowEdge("c", "cancel"), wasmgear.FlowEdge("b", "ignore")]
    outside = core.read_flow({"name": "o", "jobs": {"x": {
        "function": "f", "priority": 5, "delay_ms": 1001, "tags": ["t"],
        "after": ["g:3", {"job": "g:04", "on_failure": "continue"}]}}})
    _, specs = core.check_flow(outside)
    assert specs[0].named == (("priority", "5"), ("delay", "1001"), ("tag", "t"),
                              ("after", "g:3"), ("after", "g:4"), ("after_continue", "g:4"))
    # Kahn's order is stable: jobs keep their given order where the edges allow.
    assert checked({"name": "s", "jobs": {
        "z": {"function": "f"}, "y": {"function": "f", "after": ["z"]}, "x": {"function": "f"}}}
    ) == ["x", "z", "y"]


@pytest.mark.parametrize(
    "document, sentence",
    [
        ({"name": "cycle", "jobs": {"a": {"function": "reverse", "after": ["c"]},
                                    "b": {"function": "join", "after": ["a"]},
                                    "c": {"function": "reverse", "after": ["b"]}}},
         "the flow has a cycle: a → c → b → a (each waits on the next)"),
        ({"name": "tail", "jobs": {"a": {"function": "f"}, "b": {"function": "f", "after": ["a", "c"]},
                                   "c": {"function": "f", "after": ["d"]},
                                   "d": {"function": "f", "after": ["c"]}}},
         "the flow has a cycle: c → d → c (each waits on the next)"),
        ({"name": "unknown", "jobs": {"a": {"function": "reverse"},
                                      "b": {"function": "join", "after": ["nope"]}}},
         'job "b" waits on "nope", which the flow does not have'),
        ({"name": "self", "jobs": {"a": {"function": "reverse", "after": ["a"]}}},
         'job "a" waits on itself'),
        ({"name": "twice", "jobs": {"a": {"function": "f"}, "b": {"function": "f", "after": ["a", "a"]}}},
         'job "b" waits on "a" twice'),
        ({"name": "uniq", "jobs": {"u": {"function": "reverse", "uniq": "k"}}},
         'job "u": a flow\'s jobs are always new, so they take no uniq'),
        ({"name": "once", "jobs": {"u": {"function": "reverse", "once": "k"}}},
         'job "u": a flow\'s jobs are always new, so they take no once'),
        ({"name": "parent", "jobs": {"u": {"function": "reverse", "parent": "p:1"}}},
         'job "u": a flow\'s jobs are always new, so they take no parent'),
        ({"name": "big", "jobs": {f"j{i}": {"function": "reverse"} for i in range(10_001)}},
         'flow "big" has 10001 jobs, more than the 10000 a flow may have'),
        ({"name": "empty", "jobs": {}}, 'flow "empty" has no jobs'),
        ({"name": "", "jobs": {"a": {"function": "f"}}},
         'the flow\'s name "" must be 1 to 200 bytes without control characters'),
        ({"name": "a\tb", "jobs": {"a": {"function": "f"}}},
         'the flow\'s name "a\\tb" must be 1 to 200 bytes without control characters'),
        ({"name": "n", "jobs": {"bad name": {"function": "f"}}},
         'job name "bad name" must be 1 to 200 letters, digits, \'_\', \'-\' or \'.\''),
        ({"name": "n", "jobs": {"a": {"function": "bad fn"}}}, 'job "a": invalid function name'),
        ({"name": "n", "jobs": {"a": {"function": "f", "after": [{"job": "b", "on_failure": "x"}]},
                                "b": {"function": "f"}}},
         'job "a": on_failure "x" is none of cancel, ignore and continue'),
        ({"name": "n", "jobs": {"a": {"function": "f", "after": ["g:0"]}}},
         'job "a": after: "g:0" is not a job id'),
        ({"name": "n", "jobs": {"a": {"function": "f", "input": "x", "input_json": 1}}},
         'job "a": give one of input, input_base64 and input_json, not several'),
        ({"name": "n", "jobs": {"a": {"function": "f", "input_base64": "!!"}}},
         'job "a": input_base64 is not base64'),
        ({"name": "n", "jobs": {"a": {"function": "f", "attempts": 0}}},
         'job "a": attempts 0 is out of range'),
        ({"name": "n", "jobs": {"a": {"function": "f", "timeout_ms": 0}}},
         'job "a": timeout_ms 0 is out of range'),
        ({"name": "n", "jobs": {"a": {"function": "f", "at_ms": 0}}},
         'job "a": at_ms 0: the time to run at is not after 1970'),
        ({"name": "n", "jobs": {"a": {"function": "f", "delay_ms": 5, "at_ms": 1893456000000}}},
         'job "a": give a delay or a time to run at'),
        ({"name": "n", "jobs": {"a": {"function": "f", "input": "x" * (16 * 1024 * 1024 + 1)}}},
         'job "a": input of 16777217 bytes is larger than the limit of 16777216 bytes'),
        ({"name": "n", "jobs": {"a": {"function": "f", "after": [f"g:{i}" for i in range(1, 10_001)]},
                                "b": {"function": "f", "after": ["a"]},
                                "c": {"function": "f", "after": ["a", "b"] + [f"g:{i}" for i in range(1, 10_000)]}}},
         'job "c" has 10001 dependencies, more than the limit of 10000'),
        ({"name": "n", "jobs": {"a": {"function": "f", "colour": "red"}}},
         "the flow does not read: jobs.a: unknown field `colour`"),
        ({"name": "n", "jobs": {"a": {"function": "f", "priority": "high"}}},
         "the flow does not read: jobs.a.priority"),
        ({"name": "n"}, "the flow does not read: missing field `jobs`"),
        (["not", "a", "flow"], "the flow does not read"),
    ],
)
def test_a_bad_flow_is_refused_with_the_rust_clients_sentence(document, sentence) -> None:
    with pytest.raises(wasmgear.BadInput) as refused:
        checked(document)
    assert sentence in str(refused.value), str(refused.value)


def test_flow_records_and_ids() -> None:
    from wasmgear._core import flows

    created, name, jobs = flows.parse_flow_record(
        7, b'12|{"name":"n","jobs":[{"name":"a","id":"f:1"},'
           b'{"name":"b","id":"g:2","after":[{"job":"a","on_failure":"ignore"}]}]}')
    assert (created, name) == (12, "n")
    assert jobs == [("a", "f:1", []), ("b", "g:2", [wasmgear.FlowEdge("a", "ignore")])]
    for raw in (b"no bar", b"x|{}", b'1|{"name":"n"}', b'1|{"name":"n","jobs":[{"name":"a","id":"nope"}]}'):
        with pytest.raises(wasmgear.ProtocolError, match="flow 7 has a corrupt record"):
            flows.parse_flow_record(7, raw)
    for bad in (0, -1, True, "1", 2**64):
        with pytest.raises(wasmgear.BadInput, match="is not a whole number above 0"):
            core.check_flow_id(bad)
    assert flows.quoted('a"b\\c\n\x01é') == '"a\\"b\\\\c\\n\\u{1}é"'


def test_flow_status_counts_sinks_and_ended() -> None:
    edge = wasmgear.FlowEdge
    status = wasmgear.FlowStatus(1, "n", 0, [
        wasmgear.FlowJobStatus("a", "f:1", [], "succeeded", 3, None),
        wasmgear.FlowJobStatus("b", "f:2", [edge("a")], "missing", 0, None),
        wasmgear.FlowJobStatus("c", "f:3", [edge("a")], "waiting", 0, None),
        wasmgear.FlowJobStatus("d", "f:4", [edge("b"), edge("c", "continue")], "cancelled", 0, "x"),
        wasmgear.FlowJobStatus("e", "f:5", [], "expired", 0, "late"),
    ])
    assert status.counts == {"waiting": 1, "succeeded": 1, "cancelled": 1, "expired": 1,
                             "missing": 1}
    assert status.job("e").ended
    assert [j.name for j in status.sinks] == ["d", "e"]
    assert not status.ended and status.job("b").ended and not status.job("c").ended


def test_a_batch_definition_is_written_as_the_rust_clients_batch_spec() -> None:
    written = core.batch_definition(
        "album", wasmgear.Callback("on_ok", {"note": "é"}), {"function": "on_done"})
    assert written == ('{"name":"album","on_success":{"function":"on_ok","data":{"note":"é"}},'
                       '"on_complete":{"function":"on_done"}}')
    assert core.batch_definition("", None, None) == '{"name":""}'
    assert core.check_batch_id("0123abcdEF") == "0123abcdEF"
    for bad in ("", "g", "a" * 33, None, "12 34"):
        with pytest.raises(wasmgear.BadInput, match="1 to 32 hex digits"):
            core.check_batch_id(bad)


def test_a_batchs_jobs_are_checked_and_name_the_job_at_fault() -> None:
    jobs = core.batch_jobs([("echo", "a"), ("fail", b"b", {"attempts": 1, "delay": 2})])
    assert [(f, s.input, s.named) for f, s in jobs] == [
        ("echo", b"a", ()), ("fail", b"b", (("attempts", "1"), ("delay", "2000")))]
    with pytest.raises(wasmgear.BadInput, match=r"^job 2: attempts 0 is out of range"):
        core.batch_jobs([("echo", "a"), ("echo", "b", {"attempts": 0})])
    with pytest.raises(wasmgear.Conflict, match=r"^job 1: at .* more than 10 years ahead"):
        core.batch_jobs([("echo", "a", {"at": 10**12})])


def drive(gen: core.Gen, replies: dict) -> list:
    """Runs a generator, answering each command by the first matching entry of `replies`
    (the command's second argument, the function called); returns the commands sent."""
    sent = []
    reply = None
    try:
        op = gen.send(None)
        while True:
            assert isinstance(op, core.Cmd), op
            sent.append(op.args)
            reply = replies.get(op.args[1], replies.get(op.args[0]))
            op = gen.send(reply)
    except StopIteration:
        return sent


def test_a_batch_dependent_in_a_notify_is_counted_with_batch_done_then_told() -> None:
    """`cancel` answering `batch ID, G:N, cancelled` runs `batch_done` on the batch's slot
    (not `resolve`), enqueues the callbacks it answers due (with their once key), notes
    them (`batch_fired`), then `told` with the dependent `batch ID`."""
    proto = core.protocol()
    definition = core.batch_definition("b", None, wasmgear.Callback("on_done", 5))
    state = ["def", definition, "open", "0", "total", "1", "succeeded", "0", "failed", "0",
             "cancelled", "1", "created_ms", "1", "ended_ms", "2", "complete", "due"]
    sent = drive(core.deliver(proto, ["batch 00ff", "echo:3", "cancelled"]), {
        "wg2_batch_done": ["complete"],
        "wg2_batch_get": [state, ["echo:3", "cancelled"], []],
        "wg2_enqueue": [[7], "1", []],
        "wg2_batch_fired": 1,
        "wg2_told": 1,
        "SADD": 1,
    })
    names = [args[1] for args in sent]
    assert names == ["wg2_batch_done", "wg2_batch_get", "wg2_enqueue", proto.functions_key,
                     "wg2_batch_fired", "wg2_told"]
    keys = ["wg:{batch:00ff}:state", "wg:{batch:00ff}:members", "wg:{batch:00ff}:ended"]
    assert sent[0] == ("FCALL", "wg2_batch_done", 3, *keys, "echo:3", "cancelled")
    enqueue = sent[2]
    once = enqueue.index("once")
    assert enqueue[once + 1] == "batch:00ff:complete"
    assert json.loads(enqueue[-1]) == {
        "batch": "00ff", "name": "b", "callback": "complete", "total": 1, "succeeded": 0,
        "failed": 0, "cancelled": 1, "failed_ids": [], "cancelled_ids": ["echo:3"], "data": 5}
    assert sent[4] == ("FCALL", "wg2_batch_fired", 3, *keys, "complete", "on_done:7")
    assert sent[5][-1] == "batch 00ff" and sent[5][1] == "wg2_told"


def test_batch_status_reads_batch_get() -> None:
    state = ["def", '{"name":"n"}', "open", "1", "total", "4", "succeeded", "1",
             "failed", "1", "cancelled", "1", "created_ms", "1700000000000", "success", "due"]
    status, definition = core.batches.parse_batch(
        "ab", [state, [b"f:1", b"failed", b"g:2", b"cancelled"], []])
    assert definition == {"name": "n"}
    assert status == wasmgear.BatchStatus(
        id="ab", name="n", open=True, total=4, pending=1, succeeded=1, failed=1, cancelled=1,
        failed_ids=["f:1"], cancelled_ids=["g:2"], on_success="due", on_complete=None,
        created_ms=1700000000000, ended_ms=None)
    assert not status.ended and status.created is not None and status.ended_at is None
    assert core.batches.parse_batch("ab", [[], [], []]) == (None, {})


# --- Redis Sentinel URLs and min_replicas ------------------------------------------------

EXPECTED_SENTINEL = ("(expected redis+sentinel://[USER:PASSWORD@]HOST:PORT[,HOST:PORT...]/SERVICE"
                     "[?db=N&sentinel_user=U&sentinel_password=P], or rediss+sentinel:// for TLS)")


def test_sentinel_urls_parse_as_the_rust_clients() -> None:
    assert core.parse_sentinel_url("redis://127.0.0.1:6379") is None
    url = core.parse_sentinel_url(
        "redis+sentinel://:s3cret@10.0.0.1:26379,10.0.0.2,[::1]:5000/jobs?db=2")
    assert url is not None
    assert url.sentinels == [("10.0.0.1", 26379), ("10.0.0.2", core.DEFAULT_SENTINEL_PORT),
                             ("::1", 5000)]
    assert (url.service, url.db, url.tls) == ("jobs", 2, False)
    assert (url.username, url.password) == (None, "s3cret")
    assert (url.sentinel_user, url.sentinel_password) == (None, None)
    tls = core.parse_sentinel_url(
        "rediss+sentinel://app:p%40ss@h:1/s/?sentinel_user=watch&sentinel_password=p%40ss%20word")
    assert tls is not None and tls.tls and tls.service == "s"
    assert (tls.username, tls.password) == ("app", "p@ss")
    assert (tls.sentinel_user, tls.sentinel_password) == ("watch", "p@ss word")
    # Passwords stay out of what is shown.
    assert "s3cret" not in repr(url) and "p@ss" not in repr(tls)


@pytest.mark.parametrize(
    "url, reason",
    [
        ("redis+sentinel://h:1", "the path must be the name the sentinels know the set by "
                                 "(/SERVICE, as in `sentinel monitor SERVICE HOST PORT QUORUM`)"),
        ("redis+sentinel://h:1/", "the path must be the name the sentinels know the set by"),
        ("redis+sentinel://h:1/a/b", "the path must be the name the sentinels know the set by"),
        ("redis+sentinel://h:x/s", '"h:x" is not a sentinel address (HOST:PORT)'),
        ("redis+sentinel://h:0/s", '"h:0" is not a sentinel address (HOST:PORT)'),
        ("redis+sentinel://h:65536/s", '"h:65536" is not a sentinel address (HOST:PORT)'),
        ("redis+sentinel://h:1,,h:2/s", '"" is not a sentinel address (HOST:PORT)'),
        ("redis+sentinel://[::1/s", '"[::1" is not a sentinel address (HOST:PORT)'),
        ("redis+sentinel://h:1/s?db=-1", 'db must be a whole number >= 0, not "-1"'),
        ("redis+sentinel://h:1/s?db=x", 'db must be a whole number >= 0, not "x"'),
        ("redis+sentinel://h:1/s?master=x",
         'unknown parameter "master" (known: db, sentinel_user, sentinel_password)'),
    ],
)
def test_a_bad_sentinel_url_says_what_is_wrong_before_connecting(url: str, reason: str) -> None:
    with pytest.raises(wasmgear.BadInput) as caught:
        wasmgear.Client.from_url(url)
    message = str(caught.value)
    assert message.startswith(f'invalid Redis Sentinel URL "{url}": {reason}'), message
    assert message.endswith(EXPECTED_SENTINEL), message


def test_a_bad_sentinel_url_hides_its_passwords() -> None:
    with pytest.raises(wasmgear.BadInput) as caught:
        wasmgear.Client.from_url(
            "redis+sentinel://app:n0de-secret@h:1/s?sentinel_password=s3ntinel-secret&master=x")
    message = str(caught.value)
    assert message.startswith('invalid Redis Sentinel URL "redis+sentinel://app:***@h:1/s?'
                              'sentinel_password=***&master=x": unknown parameter "master"')
    assert "secret" not in message


def test_sentinel_passwords_are_redacted_as_the_rust_client_does() -> None:
    from wasmgear.client import redact

    assert (redact("redis+sentinel://:pw@h1:1,h2:2/jobs?db=1&sentinel_password=x")
            == "redis+sentinel://:***@h1:1,h2:2/jobs?db=1&sentinel_password=***")
    assert redact("rediss+sentinel://app:pw@h1/jobs") == "rediss+sentinel://app:***@h1/jobs"
    assert redact("redis+sentinel://token@h1/jobs") == "redis+sentinel://***@h1/jobs"
    assert redact("redis+sentinel://h1:1/jobs") == "redis+sentinel://h1:1/jobs"
    assert (redact("redis+sentinel://[::1]:5000/jobs?sentinel_user=u&sentinel_password=a%40b")
            == "redis+sentinel://[::1]:5000/jobs?sentinel_user=u&sentinel_password=***")
    # Plain URLs as before.
    assert redact("redis://:s3cret@host:1/2") == "redis://:***@host:1/2"


def test_no_primary_found_is_unreachable_naming_each_sentinel() -> None:
    error = core.no_primary(["sentinel 127.0.0.1:1: connection refused (x)",
                             'sentinel h:2 does not know the service "svc"'])
    mapped = core.map_error(error, "redis+sentinel://127.0.0.1:1,h:2/svc")
    assert isinstance(mapped, wasmgear.Unreachable)
    assert str(mapped) == (
        "cannot reach Redis at redis+sentinel://127.0.0.1:1,h:2/svc: no sentinel named a "
        "primary that answers as one: sentinel 127.0.0.1:1: connection refused (x); "
        'sentinel h:2 does not know the service "svc"')
    assert core.is_transient(error)


@pytest.mark.parametrize(
    "count, timeout, says",
    [
        (17, None, "min_replicas must be 0 to 16, not 17"),
        (-1, None, "min_replicas must be 0 to 16, not -1"),
        (True, None, "min_replicas must be 0 to 16, not True"),
        ("1", None, "min_replicas must be 0 to 16, not '1'"),
        (1, 0, "the min_replicas timeout must be at least 1 ms (WAIT with 0 waits forever)"),
        (1, -0.5, "at least 1 ms"),
        (1, timedelta(0), "at least 1 ms"),
        (1, 10, "the min_replicas timeout must be under 10 s"),
        (1, "1s", "is not a number of seconds or a timedelta"),
    ],
)
def test_min_replicas_are_checked_before_connecting(count: object, timeout: object,
                                                    says: str) -> None:
    # A port nothing listens on: the check comes first.
    with pytest.raises(wasmgear.BadInput, match=re.escape(says)):
        wasmgear.Client.from_url("redis://127.0.0.1:1", min_replicas=count,  # type: ignore[arg-type]
                                 min_replicas_timeout=timeout)  # type: ignore[arg-type]


def test_min_replicas_within_bounds() -> None:
    assert core.min_replicas(0) == core.MinReplicas(0, 1000)
    assert core.min_replicas(16, 0.2) == core.MinReplicas(16, 200)
    assert core.min_replicas(2, timedelta(milliseconds=1500)).timeout == 1.5
    # Under 1 ms is 1 ms (as the Rust client).
    assert core.min_replicas(1, 0.0001).timeout_ms == 1
    assert core.limits().max_min_replicas == 16


def test_the_functions_min_replicas_setting_is_checked() -> None:
    def args(value: object) -> list:
        return core.settings_args(paused=None, concurrency=core.KEEP, rate_limit=core.KEEP,
                                  keep_finished=core.KEEP, group_concurrency=core.KEEP,
                                  group_rate_limit=core.KEEP, min_replicas=value)

    assert args(core.KEEP) == []
    assert args(1) == ["min_replicas", "1"]
    assert args(16) == ["min_replicas", "16"]
    assert args(None) == ["min_replicas", ""]
    for bad in (0, 17, True, "2"):
        with pytest.raises(wasmgear.BadInput,
                           match=r"min_replicas must be 1 to 16 \(or None to ask for none\)"):
            args(bad)
    from wasmgear._core.settings import read_config

    assert read_config({"min_replicas": b"2"}).min_replicas == 2
    assert read_config({}).min_replicas is None


def test_not_replicated_says_what_was_written_as_the_rust_client() -> None:
    error = wasmgear.NotReplicated("the enqueue of 3 jobs of f", 2, 1, 250)
    assert isinstance(error, wasmgear.WasmgearError) and error.exit_code == 6
    assert (error.wanted, error.confirmed, error.timeout_ms) == (2, 1, 250)
    assert str(error) == (
        "the enqueue of 3 jobs of f was written to the Redis primary, but only 1 of the 2 "
        "replicas asked for confirmed it within 250 ms, even when sent again: if the primary "
        "fails now it may be lost. Check the replicas (INFO replication on the primary); the "
        "write is safe to send again (enqueue with a uniq key to be sure of one copy)")


def _drive_confirmed(min: "core.MinReplicas", setting: int, waits: list) -> list:
    """Runs invoke_confirmed against scripted replies: each send answers the enqueue reply
    (with the function's `setting`) and, with a WAIT, the next of `waits`. Returns what was
    sent (each Pinned's commands' names and WAIT's arguments)."""
    cmd = core.Cmd(("FCALL", "wg2_enqueue", 1, "k", "f"))
    gen = core.invoke_confirmed(cmd, lambda: "the enqueue of a job of f", min,
                                core.reply_setting)
    sent: list = []
    reply = None
    try:
        while True:
            op = gen.send(reply)
            assert isinstance(op, core.Pinned)
            sent.append([c.args[0] if c.args[0] != "WAIT" else c.args for c in op.cmds])
            reply = [[[b"1"], b"1", [], setting]]
            if len(op.cmds) == 2:
                reply.append(waits.pop(0))
    except StopIteration as stop:
        sent.append(("done", stop.value[3]))
    return sent


def test_writes_are_confirmed_as_invoke_confirmed_does() -> None:
    plain = core.MinReplicas(0, 1000)
    # Nothing asked: one plain send.
    assert _drive_confirmed(plain, 0, []) == [["FCALL"], ("done", 0)]
    # The client asks for 1: the call and its WAIT together.
    assert _drive_confirmed(core.MinReplicas(1, 200), 0, [1]) == [
        ["FCALL", ("WAIT", 1, 200)], ("done", 0)]
    # The function asks for 2 though the client asks for none: the same call again, waited.
    assert _drive_confirmed(plain, 2, [2]) == [
        ["FCALL"], ["FCALL", ("WAIT", 2, 1000)], ("done", 2)]
    # The function asks for more than the client: WAIT for the client's, then the most.
    assert _drive_confirmed(core.MinReplicas(1, 50), 3, [1, 3]) == [
        ["FCALL", ("WAIT", 1, 50)], ["FCALL", ("WAIT", 3, 50)], ("done", 3)]
    # Short three times: NotReplicated, with what the last WAIT confirmed.
    with pytest.raises(wasmgear.NotReplicated) as caught:
        _drive_confirmed(core.MinReplicas(2, 100), 0, [0, 1, 1])
    assert (caught.value.wanted, caught.value.confirmed, caught.value.timeout_ms) == (2, 1, 100)
    with pytest.raises(wasmgear.NotReplicated) as caught:
        _drive_confirmed(plain, 1, [0, 0])
    assert (caught.value.wanted, caught.value.confirmed) == (1, 0)


# --- Trace contexts (crates/proto/src/trace.rs's cases) ---------------------------------------

_PARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
_PARENT_REFUSED = ("is not a W3C traceparent: give 00-<32 hex trace id>-<16 hex span id>-<2 "
                   "hex flags>, in lower case, the ids not all zeros")


def test_a_valid_trace_context_is_kept_as_the_named_options() -> None:
    assert core.check_trace(_PARENT, "rojo=00f067aa0ba902b7") == (
        ("trace", _PARENT), ("tracestate", "rojo=00f067aa0ba902b7"))
    # Trimmed of spaces and tabs; a blank tracestate is none; no traceparent, no context.
    assert core.check_trace(f" \t{_PARENT} ", " ") == (("trace", _PARENT),)
    assert core.check_trace(_PARENT.replace("-01", "-00"), None) == (
        ("trace", _PARENT.replace("-01", "-00")),)
    assert core.check_trace(None, None) == () == core.check_trace(None, " ")
    # A later version's first four fields are kept as version 00.
    later = "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-09-what-comes-next"
    assert core.check_trace(later) == (
        ("trace", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-09"),)
    # The longest tracestate, every printable character.
    longest = "k=" + "v" * 510
    assert core.check_trace(_PARENT, longest)[1] == ("tracestate", longest)
    printable = "".join(chr(c) for c in range(0x21, 0x7F))
    assert core.check_trace(_PARENT, printable)[1] == ("tracestate", printable)
    # As job options: after the others, the Rust client's order.
    spec = core.job_spec("x", {"group": "g", "traceparent": _PARENT, "tracestate": "a=b"})
    assert spec.named == (("group", "g"), ("trace", _PARENT), ("tracestate", "a=b"))


def test_what_is_not_a_trace_context_is_refused_with_the_rust_client_s_sentence() -> None:
    for bad in [
        "",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-more",
        "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",
        "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0é",
        "0-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-",
    ]:
        with pytest.raises(wasmgear.BadInput) as refused:
            core.check_trace(bad)
        # Rust's {:?} of the value as given (its first 80 characters).
        assert str(refused.value) == f"traceparent {core.flows.quoted(bad[:80])} {_PARENT_REFUSED}"
    with pytest.raises(wasmgear.BadInput) as refused:
        core.check_trace(" 00-\"x\"\t\u0301" + "y" * 100)
    assert str(refused.value) == ('traceparent " 00-\\"x\\"\\t\\u{301}' + "y" * 71 + '" '
                                  + _PARENT_REFUSED)
    for bad_state in ("k=" + "v" * 511, "k=v\nx", "k=\x7f", "k=é"):
        with pytest.raises(wasmgear.BadInput) as refused:
            core.check_trace(_PARENT, bad_state)
        assert str(refused.value) == (
            "tracestate is not a W3C tracestate: give at most 512 bytes of printable ASCII "
            "(key=value members separated by commas)")
    with pytest.raises(wasmgear.BadInput, match="tracestate goes with a traceparent"):
        core.check_trace(None, "k=v")
    with pytest.raises(wasmgear.BadInput, match="traceparent 42 is not a string"):
        core.job_spec("x", {"traceparent": 42})
    assert core.limits().max_tracestate_bytes == 512
