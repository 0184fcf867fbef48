"""The pure part (no Redis): option checks, arguments, replies, events."""

from __future__ import annotations

from datetime import timedelta

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


@pytest.mark.parametrize(
    "options, named",
    [
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
