"""Encrypted job data (wasmgear.crypto), as tests/all/encryption.rs runs it for the Rust
client: the envelope byte for byte (the pinned vector of crates/proto/src/crypto.rs), the key
file, and against a real redis-server and a real worker holding the key file
(WASMGEAR_ENCRYPTION_KEY_FILE): functions set `--encrypt` take only sealed input, a client with
the key seals (learning which functions need it from their refusal) and reads the outputs,
errors, logs, inputs and checkpoints opened, no plaintext is left in Redis, a client without
the key is refused with nothing written, and a ciphertext moved to another job does not open."""

from __future__ import annotations

import asyncio
import base64
import subprocess
from pathlib import Path
from typing import Iterator, List, Tuple

import pytest
import redis

import wasmgear
from conftest import RedisServer, Worker, binary, cli
from wasmgear import _core as core
from wasmgear.crypto import MAGIC, TEXT_PREFIX, KeyRing, is_sealed, sealed_with

WAIT = 120

#: The key file of the Rust client's `crypto_vectors` (k2 seals, k1 opens what it sealed).
FILE = ("# rotated 2026-11-28\n"
        "k2 AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA=\n"
        "k1 ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8=  # the first key\n")
K1 = "k1 ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8=\n"

#: What a client without keys reads in place of a text the key "k1" sealed.
NOTICE = ('<encrypted (key "k1"); no key here (give the key file: '
          'WASMGEAR_ENCRYPTION_KEY_FILE)>')


# --- The envelope and the key file (no server) ------------------------------------------


def test_the_envelope_is_the_rust_clients_byte_for_byte() -> None:
    ring = KeyRing.parse("keys", FILE)
    assert ring.current == "k2" and ring.ids == ["k2", "k1"]
    sealed = ring._seal_with_nonce("echo:1", "input", b"hello", bytes([7] * 12))
    assert sealed.hex() == ("007767656e6331026b32070707070707070707070707"
                            "82a6453f042645a893ed10f0c5e389a1107bf4c2db")
    assert len(sealed) == len(MAGIC) + 1 + 2 + 12 + 5 + 16
    assert ring.open("echo:1", "input", sealed) == b"hello"


def test_sealed_data_opens_only_as_its_job_and_field() -> None:
    ring = KeyRing.parse("keys", FILE)
    sealed = ring.seal("resize:7", "input", b"secret")
    assert is_sealed(sealed) and b"secret" not in sealed
    assert sealed_with(sealed) == "k2"
    assert ring.open("resize:7", "input", sealed) == b"secret"
    for job, field in (("resize:8", "input"), ("resize:7", "output")):
        with pytest.raises(wasmgear.EncryptionError) as refused:
            ring.open(job, field, sealed)
        assert str(refused.value) == (f'encrypted data of {job} ({field}) does not open with '
                                      'key "k2": it was changed, or belongs to another job')
    changed = sealed[:-1] + bytes([sealed[-1] ^ 1])
    with pytest.raises(wasmgear.EncryptionError):
        ring.open("resize:7", "input", changed)
    assert ring.open("resize:7", "input", b"plain") == b"plain"
    # Cut short: an EncryptionError, never another error.
    for cut in range(len(MAGIC), min(len(sealed), 40)):
        with pytest.raises(wasmgear.EncryptionError):
            ring.open("resize:7", "input", sealed[:cut])
    with pytest.raises(wasmgear.EncryptionError, match="cut short or garbled"):
        ring.open("resize:7", "input", sealed[:12])


def test_old_keys_open_what_they_sealed_and_a_missing_key_is_named() -> None:
    sealed = KeyRing.parse("old", K1).seal("f:1", "output", b"out")
    assert KeyRing.parse("keys", FILE).open("f:1", "output", sealed) == b"out"
    other = KeyRing.parse("x", KeyRing.new_key_line("k9"))
    with pytest.raises(wasmgear.EncryptionError) as refused:
        other.open("f:1", "output", sealed)
    assert str(refused.value) == ('encrypted with key "k1", which is not in this key file '
                                  '(add it to read the data)')


def test_text_fields_hold_the_envelope_in_base64() -> None:
    ring = KeyRing.parse("keys", FILE)
    sealed = ring.seal_text("f:1", "error", "it broke")
    assert sealed.startswith(TEXT_PREFIX) and sealed_with(sealed) == "k2"
    assert base64.b64decode(sealed[len(TEXT_PREFIX):]).startswith(MAGIC)
    assert ring.open_text("f:1", "error", sealed) == "it broke"
    assert ring.open_text("f:1", "error", "plain") == "plain"
    with pytest.raises(wasmgear.EncryptionError, match=r"f:1 \(error\) is cut short"):
        ring.open_text("f:1", "error", "wgenc1:!!")


@pytest.mark.parametrize("text, says", [
    ("", "keys: it holds no key (add one with `wasmgear keys new FILE ID`)"),
    ("# only a comment\n\n", "it holds no key"),
    ("k1\n", "keys: line 1: expected `ID BASE64KEY`"),
    ("\n# c\nk1 a b\n", "keys: line 3: expected"),
    ("k1 notbase64!\n", "line 1: the key is not base64"),
    ("k1 AAAA\n", "line 1: the key is 3 bytes, not 32"),
    ("bad/id " + K1.split()[1] + "\n", 'key id "bad/id" must be 1 to 32 of [A-Za-z0-9_.-]'),
    ("x" * 33 + " " + K1.split()[1] + "\n", "must be 1 to 32"),
    (K1 + K1, 'line 2: key id "k1" is used twice'),
    # Not the canonical base64 of 32 bytes (trailing bits set): refused as the Rust
    # client refuses it.
    ("k1 ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj9=\n", "line 1: the key is not base64"),
])
def test_bad_key_files_are_refused_naming_the_file_and_line(text: str, says: str) -> None:
    with pytest.raises(wasmgear.EncryptionError) as refused:
        KeyRing.parse("keys", text)
    assert str(refused.value).startswith("the encryption key file keys: ")
    assert says in str(refused.value)
    assert isinstance(refused.value, wasmgear.BadInput)


def test_a_key_ring_shows_its_ids_never_its_keys(tmp_path: Path) -> None:
    path = tmp_path / "keys"
    path.write_text("k2 AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA=\r\n" + K1)
    ring = KeyRing.load(path)
    assert repr(ring) == "KeyRing(['k2', 'k1'])" and "AQID" not in repr(ring)
    with pytest.raises(wasmgear.EncryptionError, match="cannot read the encryption key file"):
        KeyRing.load(tmp_path / "missing")


def test_a_log_is_opened_attempt_by_attempt() -> None:
    ring = KeyRing.parse("keys", FILE)
    first = ring.seal_text("echo:3", "log", "--- attempt 1\nline one\n")
    second = ring.seal_text("echo:3", "log", "--- attempt 2\nline two")
    log = f"{first}\n{second}\n"
    assert core.opened_log(ring, "echo:3", log) == (
        "--- attempt 1\nline one\n--- attempt 2\nline two\n")
    # Without keys, each sealed line says so (naming the key), its line break kept.
    said = ('<encrypted (key "k2"); no key here (give the key file: '
            'WASMGEAR_ENCRYPTION_KEY_FILE)>\n')
    assert core.opened_log(None, "echo:3", f"plain\n{first}\n{second}") == (
        "plain\n" + said + said)
    assert core.said_sealed("wgenc1:!!") == said.replace('"k2"', '"?"').rstrip("\n")
    assert core.said_sealed("plain") == "plain"
    # The front of the oldest attempt cut by the log's size limit.
    assert core.opened_log(ring, "echo:3", f"{first[40:]}\n{second}\n") == (
        "[the start of this attempt's encrypted log was cut]\n--- attempt 2\nline two\n")
    with pytest.raises(wasmgear.EncryptionError, match=r"echo:4 \(log\) does not open"):
        core.opened_log(ring, "echo:4", log)


def test_a_client_takes_its_keys_from_its_options_or_the_environment(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "keys"
    path.write_text(FILE)
    monkeypatch.delenv("WASMGEAR_ENCRYPTION_KEY_FILE", raising=False)
    monkeypatch.delenv("WASMGEAR_ENCRYPT_ALL", raising=False)
    assert core.client_keys(None, None, None) == (None, False)
    keys, everything = core.client_keys(str(path), None, None)
    assert keys is not None and keys.current == "k2" and not everything
    monkeypatch.setenv("WASMGEAR_ENCRYPTION_KEY_FILE", str(path))
    monkeypatch.setenv("WASMGEAR_ENCRYPT_ALL", "1")
    keys, everything = core.client_keys(None, None, None)
    assert keys is not None and keys.ids == ["k2", "k1"] and everything
    monkeypatch.setenv("WASMGEAR_ENCRYPT_ALL", "false")
    assert core.client_keys(None, None, None)[1] is False
    monkeypatch.delenv("WASMGEAR_ENCRYPTION_KEY_FILE")
    with pytest.raises(wasmgear.BadInput, match="encrypt_all needs the keys"):
        core.client_keys(None, None, True)
    with pytest.raises(wasmgear.EncryptionError, match="cannot read the encryption key file"):
        core.client_keys(tmp_path / "missing", None, None)


# --- Against a real Redis and a real worker holding the key file -------------------------


class Setup:
    """A Redis of its own, the key file, and a worker holding it that serves `echo`,
    `fail` and `resume` (each set `--encrypt`) and `echo_plain` (a copy of echo, not set)."""

    def __init__(self, server: RedisServer, keys: Path) -> None:
        self.server = server
        self.url = server.url
        self.keys = keys


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    folder = tmp_path_factory.mktemp("encryption")
    keys = folder / "keys"
    subprocess.run([str(binary()), "keys", "new", str(keys), "k1"], check=True,
                   capture_output=True, timeout=60)
    server = RedisServer(folder / "redis")
    try:
        for function in ("echo", "fail", "resume"):
            cli(server.url, "config", function, "--encrypt", "--new")
        worker = Worker(server.url, folder / "worker", plugins=("echo", "fail", "resume"),
                        aliases={"echo_plain": "echo"},
                        env={"WASMGEAR_ENCRYPTION_KEY_FILE": str(keys)})
        try:
            yield Setup(server, keys)
        finally:
            worker.stop()
    finally:
        server.stop()


def dump(r: redis.Redis) -> List[Tuple[bytes, bytes]]:
    """Every key of the Redis with each of its values (fields, members, scores, entries)."""
    out: List[Tuple[bytes, bytes]] = []
    for key in sorted(r.scan_iter(count=1000)):
        kind = r.type(key)
        if kind == b"string":
            values = [r.get(key)]
        elif kind == b"hash":
            values = [part for pair in sorted(r.hgetall(key).items()) for part in pair]
        elif kind == b"list":
            values = r.lrange(key, 0, -1)
        elif kind == b"set":
            values = sorted(r.smembers(key))
        elif kind == b"zset":
            values = [str(part).encode() if isinstance(part, float) else part
                      for pair in r.zrange(key, 0, -1, withscores=True) for part in pair]
        elif kind == b"stream":
            values = [part for _, entry in r.xrange(key) for pair in entry.items()
                      for part in pair]
        else:
            raise AssertionError(f"key {key!r} is a {kind!r}: dump it too")
        out.extend((key, value or b"") for value in values)
    return out


def number(job_id: str) -> int:
    """The number of job `job_id` (`FUNCTION:NUMBER`)."""
    return int(job_id.rpartition(":")[2])


def holds(values: List[Tuple[bytes, bytes]], needle: str) -> bool:
    return any(needle.encode() in key or needle.encode() in value for key, value in values)


def written(r: redis.Redis, function: str) -> List[Tuple[bytes, bytes]]:
    """What a write of jobs of `function` changes (its jobs, inputs, numbers, queues, counts
    and remembered calls), leaving out what the worker renews as it lives."""
    return [(key, value) for key, value in dump(r)
            if key.startswith(f"wg:{{{function}}}:".encode())
            and key.rpartition(b":")[2] not in (b"workers", b"idle", b"idle-args", b"stats")]


def test_a_client_without_the_key_is_refused_and_nothing_is_written(setup: Setup) -> None:
    before = written(setup.server.redis, "echo")
    with wasmgear.Client.from_url(setup.url, key_file=None) as client:
        assert client.keys is None and client.config("echo").encrypt
        with pytest.raises(wasmgear.EncryptionError) as refused:
            client.enqueue("echo", "MARKER-REFUSED-1")
        assert str(refused.value) == (
            "job 1: function echo stores only encrypted input (config --encrypt): give the "
            "producer the key file (WASMGEAR_ENCRYPTION_KEY_FILE)")
        assert isinstance(refused.value, wasmgear.BadInput) and refused.value.exit_code == 2
        with pytest.raises(wasmgear.EncryptionError, match="stores only encrypted input"):
            client.enqueue_many("echo", ["MARKER-REFUSED-2", "MARKER-REFUSED-3"])
    assert written(setup.server.redis, "echo") == before
    assert not holds(dump(setup.server.redis), "MARKER-REFUSED")


def test_sealed_in_sealed_out_and_no_plaintext_in_redis(setup: Setup) -> None:
    with wasmgear.Client.from_url(setup.url, key_file=setup.keys) as client:
        job = client.enqueue("echo", "MARKER-IN-1")
        # Refused plain, the client learnt that echo takes only sealed input.
        assert client._state.sealed == {"echo"}
        done = client.wait(job.id, WAIT)
        assert done.output == b"MARKER-IN-1"
        assert client.status(job.id).output == b"MARKER-IN-1"
        assert client.input(job.id) == b"MARKER-IN-1"
        many = client.enqueue_many("echo", ["MARKER-IN-2", ("MARKER-IN-3", {"priority": 1})])
        assert [j.output for j in client.wait([j.id for j in many], WAIT)] == [
            b"MARKER-IN-2", b"MARKER-IN-3"]
        # Nothing plain of the jobs is in Redis; what is there is sealed.
        r = setup.server.redis
        stored = r.hget("wg:{echo}:input", number(job.id))
        assert isinstance(stored, bytes) and sealed_with(stored) == "k1"
        assert r.hget("wg:{echo}:output", number(job.id))[:len(MAGIC)] == MAGIC
    values = dump(setup.server.redis)
    assert not holds(values, "MARKER-IN")
    assert holds(values, "\0wgenc1")
    # A client without the key reads the envelopes as they are.
    with wasmgear.Client.from_url(setup.url) as blind:
        assert sealed_with(blind.status(job.id).output or b"") == "k1"
        assert sealed_with(blind.input(job.id) or b"") == "k1"


def test_a_failing_jobs_error_and_log_are_sealed_and_opened(setup: Setup) -> None:
    with wasmgear.Client.from_url(setup.url, key_file=setup.keys) as client:
        job = client.enqueue("fail", "MARKER-ERR", attempts=1)
        with pytest.raises(wasmgear.JobFailed) as failed:
            client.wait(job.id, WAIT)
        assert "failed on purpose: MARKER-ERR" in str(failed.value)
        status = client.status(job.id)
        assert status.error is not None and "failed on purpose: MARKER-ERR" in status.error.message
        assert "failed on purpose: MARKER-ERR" in status.record["error"]["message"]
        assert any("MARKER-ERR" in (a.message or "") for a in status.history)
        assert "failing on purpose" in client.logs(job.id)
    values = dump(setup.server.redis)
    for secret in ("MARKER-ERR", "failing on purpose", "failed on purpose"):
        assert not holds(values, secret), f"{secret} is in Redis in clear"
    # A client without the key is told each text is sealed, never given the envelope.
    with wasmgear.Client.from_url(setup.url, key_file=None) as blind:
        for said in (blind.status(job.id), blind.wait(job.id, WAIT, check=False)):
            assert said.error is not None and said.error.message == NOTICE
            assert said.record["error"]["message"] == NOTICE
            assert [a.message for a in said.history] == [NOTICE]
            assert [e["message"] for e in said.record["history"]] == [NOTICE]
        log = blind.logs(job.id)
        assert NOTICE + "\n" in log and TEXT_PREFIX not in log and log.endswith("\n")


def test_a_checkpoint_is_sealed_and_opened(setup: Setup) -> None:
    with wasmgear.Client.from_url(setup.url, key_file=setup.keys) as client:
        job = client.enqueue("resume", "10", attempts=1)
        with pytest.raises(wasmgear.JobFailed):
            client.wait(job.id, WAIT)
        assert client.checkpoint(job.id) == b"5"
    with wasmgear.Client.from_url(setup.url) as blind:
        assert sealed_with(blind.checkpoint(job.id) or b"") == "k1"


def test_flows_and_batches_seal_with_their_reserved_numbers(setup: Setup) -> None:
    with wasmgear.Client.from_url(setup.url, key_file=setup.keys) as client:
        flow = client.submit_flow({"name": "sealed", "jobs": {
            "a": {"function": "echo", "input": "MARKER-FLOW-A"},
            "b": {"function": "echo", "input": "MARKER-FLOW-B", "after": ["a"]}}})
        done = client.wait(list(flow.jobs.values()), WAIT)
        assert sorted(j.output or b"" for j in done) == [b"MARKER-FLOW-A", b"MARKER-FLOW-B"]
        submitted = client.batch([("echo", "MARKER-BATCH-1"), ("echo", "MARKER-BATCH-2")])
        done = client.wait(submitted.jobs, WAIT)
        assert [j.output for j in done] == [b"MARKER-BATCH-1", b"MARKER-BATCH-2"]
    values = dump(setup.server.redis)
    assert not holds(values, "MARKER-FLOW") and not holds(values, "MARKER-BATCH")


def test_a_flows_sealed_errors_open_and_its_output_sizes_are_as_opened(setup: Setup) -> None:
    with wasmgear.Client.from_url(setup.url, key_file=setup.keys) as client:
        flow = client.submit_flow({"name": "sealed outcomes", "jobs": {
            "ok": {"function": "echo", "input": "MARKER-OUTCOME-OK"},
            "bad": {"function": "fail", "input": "MARKER-OUTCOME-BAD", "attempts": 1}}})
        status = client.wait_flow(flow.id, WAIT)
        jobs = {job.name: job for job in status.jobs}
        assert (jobs["ok"].state, jobs["bad"].state) == ("succeeded", "failed")
        assert jobs["ok"].output_bytes == len("MARKER-OUTCOME-OK") and jobs["ok"].error is None
        assert jobs["bad"].error is not None
        assert "failed on purpose: MARKER-OUTCOME-BAD" in jobs["bad"].error
        # Read again, it is opened once again from what is stored, not twice.
        assert client.flow(flow.id) == status
    stored = setup.server.redis.hstrlen("wg:{echo}:output", number(flow.jobs["ok"]))
    assert stored == len("MARKER-OUTCOME-OK") + len(MAGIC) + 1 + len("k1") + 12 + 16

    async def read_async() -> wasmgear.FlowStatus:
        client = await wasmgear.AsyncClient.from_url(setup.url, key_file=setup.keys)
        try:
            return await client.flow(flow.id)
        finally:
            await client.aclose()

    assert asyncio.run(read_async()) == status
    with wasmgear.Client.from_url(setup.url, key_file=None) as blind:
        jobs = {job.name: job for job in blind.flow(flow.id).jobs}
        assert jobs["bad"].error == NOTICE
        assert jobs["ok"].output_bytes == stored


def test_encrypt_all_seals_a_function_not_set_to_encrypt(setup: Setup) -> None:
    with wasmgear.Client.from_url(setup.url, key_file=setup.keys, encrypt_all=True) as client:
        assert not client.config("echo_plain").encrypt
        job = client.enqueue("echo_plain", "MARKER-ALL")
        assert client.wait(job.id, WAIT).output == b"MARKER-ALL"
    assert sealed_with(setup.server.redis.hget("wg:{echo_plain}:input", number(job.id))) == "k1"
    assert not holds(dump(setup.server.redis), "MARKER-ALL")


def test_a_ciphertext_moved_to_another_job_does_not_open(setup: Setup) -> None:
    with wasmgear.Client.from_url(setup.url, key_file=setup.keys) as client:
        first = client.enqueue("echo", "MARKER-FIRST")
        client.wait(first.id, WAIT)
        later = client.enqueue("echo", "MARKER-LATER", delay=3600)
        r = setup.server.redis
        r.hset("wg:{echo}:input", number(later.id), r.hget("wg:{echo}:input", number(first.id)))
        with pytest.raises(wasmgear.EncryptionError) as moved:
            client.input(later.id)
        assert str(moved.value) == (
            f'encrypted data of {later.id} (input) does not open with key "k1": it was '
            "changed, or belongs to another job")
        client.cancel(later.id)


def test_configure_sets_and_clears_encrypt(setup: Setup) -> None:
    with wasmgear.Client.from_url(setup.url) as client:
        assert client.configure("encrypt_me", encrypt=True).encrypt
        assert client.config("encrypt_me").encrypt
        with pytest.raises(wasmgear.EncryptionError):
            client.enqueue("encrypt_me", "MARKER-NOT-WRITTEN", delay=3600)
        assert not client.configure("encrypt_me", encrypt=False).encrypt
        with pytest.raises(wasmgear.BadInput, match="encrypt 1 is neither True nor False"):
            client.configure("encrypt_me", encrypt=1)  # type: ignore[arg-type]


def test_the_async_client_seals_and_opens(setup: Setup) -> None:
    async def run() -> Tuple[bytes, bytes]:
        client = await wasmgear.AsyncClient.from_url(setup.url, key_file=setup.keys)
        try:
            job = await client.enqueue("echo", "MARKER-ASYNC")
            done = await client.wait(job.id, WAIT)
            return done.output or b"", await client.input(job.id) or b""
        finally:
            await client.aclose()

    assert asyncio.run(run()) == (b"MARKER-ASYNC", b"MARKER-ASYNC")
    assert not holds(dump(setup.server.redis), "MARKER-ASYNC")
