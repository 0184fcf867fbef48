"""Fixtures: a real redis-server on a free port, and a real wasmgear worker running the example
plugins (echo, count, fail). No mocks.

WASMGEAR_BIN overrides the worker binary (default: the repository's target/debug/wasmgear);
WASMGEAR_PLUGINS the directory of built plugins (default: target/plugins/wasm32-wasip2/debug,
else .../release, whichever has echo.wasm); WASMGEAR_OTLP_RECEIVER the OTLP receiver the
tracing tests export the worker's spans to (default: target/debug/otlp-receiver).
"""

from __future__ import annotations

import json
import os
import select
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any, Awaitable, Callable, Dict, Iterator, List, Optional, Sequence, TypeVar

import pytest
import redis

import wasmgear

T = TypeVar("T")

REPO = Path(__file__).resolve().parents[3]
PLUGINS = ("echo", "count", "fail")


def binary() -> Path:
    path = Path(os.environ.get("WASMGEAR_BIN") or REPO / "target" / "debug" / "wasmgear")
    if not path.is_file():
        pytest.fail(f"the wasmgear binary {path} is missing: build it (cargo build) or set WASMGEAR_BIN")
    return path


def plugin_dir() -> Path:
    if os.environ.get("WASMGEAR_PLUGINS"):
        return Path(os.environ["WASMGEAR_PLUGINS"])
    base = REPO / "target" / "plugins" / "wasm32-wasip2"
    for profile in ("debug", "release"):
        if (base / profile / "echo.wasm").is_file():
            return base / profile
    pytest.fail(f"no built plugins under {base}: build them or set WASMGEAR_PLUGINS")
    raise AssertionError


def wait_until(condition: Callable[[], object], timeout: float, what: str, every: float = 0.02) -> object:
    """Polls `condition` until it is truthy (returns it), failing after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(every)


async def eventually(probe: Callable[[], Awaitable[T]], timeout: float, what: str, every: float = 0.02) -> T:
    """Awaits `probe` until it answers something truthy (returned), failing after `timeout`
    seconds: the bounded wait of the asyncio tests, polling every `every` seconds."""
    import asyncio

    deadline = time.monotonic() + timeout
    while True:
        value = await probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(every)


async def wait_until_async(condition: Callable[[], object], timeout: float, what: str, every: float = 0.02) -> object:
    """`eventually` for a plain (not awaited) `condition`."""

    async def probe() -> object:
        return condition()

    return await eventually(probe, timeout, what, every)


#: Every process the tests started, so that none outlives the session (pytest_sessionfinish),
#: whatever failed on the way.
STARTED: List[subprocess.Popen] = []


def spawn(args: Sequence[str], **kwargs: object) -> subprocess.Popen:
    process = subprocess.Popen(list(args), **kwargs)  # type: ignore[call-overload]
    STARTED.append(process)
    return process


def end(process: subprocess.Popen, grace: float = 10) -> None:
    """Stops `process` (TERM, then KILL after `grace` seconds) and reaps it."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(grace)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    for process in STARTED:
        end(process, 5)


def free_port(bus: bool = False) -> int:
    """A free TCP port on 127.0.0.1; with `bus`, one whose cluster bus port (+10000) is free
    too."""
    for _ in range(100):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if not bus:
            return port
        if port + 10000 < 65536:
            try:
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port + 10000))
                return port
            except OSError:
                continue
    raise AssertionError("no free port found")


class RedisServer:
    def __init__(self, workdir: Path, port: int = 0, extra: Sequence[str] = ()) -> None:
        self.port = port or free_port()
        self.url = f"redis://127.0.0.1:{self.port}"
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.log = open(workdir / "redis.log", "ab")
        self.process = spawn(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(workdir), *extra],
            stdout=self.log, stderr=subprocess.STDOUT,
        )
        self.redis = redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=5)

        def up() -> bool:
            if self.process.poll() is not None:
                raise AssertionError(f"redis-server exited: {(workdir / 'redis.log').read_text()}")
            try:
                return bool(self.redis.ping())
            except redis.ConnectionError:
                return False

        try:
            wait_until(up, 15, "redis-server to answer PING")
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        self.redis.close()
        end(self.process)
        self.log.close()


class Worker:
    def __init__(self, url: str, workdir: Path, plugins: Sequence[str] = PLUGINS,
                 env: Optional[Dict[str, str]] = None,
                 manifests: Optional[Dict[str, str]] = None,
                 aliases: Optional[Dict[str, str]] = None) -> None:
        """Serves copies of `plugins`; `manifests` maps a plugin's name to the text of its
        manifest (`NAME.toml` beside `NAME.wasm`); `aliases` maps a function's name to the
        plugin a copy of which serves it under that name (`on_ok` → `echo`)."""
        folder = workdir / "plugins"
        folder.mkdir(parents=True, exist_ok=True)
        for name in plugins:
            shutil.copy(plugin_dir() / f"{name}.wasm", folder / f"{name}.wasm")
        for name, plugin in (aliases or {}).items():
            shutil.copy(plugin_dir() / f"{plugin}.wasm", folder / f"{name}.wasm")
        for name, manifest in (manifests or {}).items():
            (folder / f"{name}.toml").write_text(manifest)
        self.log_path = workdir / "worker.log"
        self.log = open(self.log_path, "wb")
        self.process = spawn(
            [str(binary()), "worker", "--redis", url, "--plugins", str(folder),
             "--concurrency", "4"],
            stdout=self.log, stderr=subprocess.STDOUT,
            env={**os.environ, "NO_COLOR": "1", "WASMGEAR_HOME": str(workdir / "home"),
                 **(env or {})},
        )

        def started() -> bool:
            if self.process.poll() is not None:
                raise AssertionError(f"the worker exited: {self.log_path.read_text()}")
            return "worker started" in self.log_path.read_text(errors="replace")

        try:
            wait_until(started, 120, "the worker to start", every=0.1)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        end(self.process, 20)
        self.log.close()


class OtlpReceiver:
    """The real OTLP receiver (crates/testkit's `otlp-receiver`): it takes spans over
    OTLP/HTTP and gRPC and lists them as JSON at `GET /spans`. Its first line says its ports;
    it stops when its standard input closes."""

    def __init__(self) -> None:
        path = Path(os.environ.get("WASMGEAR_OTLP_RECEIVER")
                    or REPO / "target" / "debug" / "otlp-receiver")
        if not path.is_file():
            pytest.fail(f"the OTLP receiver {path} is missing: build it (cargo build -p "
                        "wasmgear-testkit --bin otlp-receiver) or set WASMGEAR_OTLP_RECEIVER")
        self.process = spawn([str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        try:
            assert self.process.stdout is not None
            ready, _, _ = select.select([self.process.stdout], [], [], 30)
            if not ready:
                raise AssertionError("the OTLP receiver said nothing within 30 s")
            words = self.process.stdout.readline().decode().split()
            if len(words) != 4 or words[0] != "http" or words[2] != "grpc":
                raise AssertionError(f"the OTLP receiver's first line is {' '.join(words)!r}")
            self.http_port, self.grpc_port = int(words[1]), int(words[3])
        except BaseException:
            self.stop()
            raise
        #: What a process exporting here over OTLP/HTTP is given.
        self.endpoint = f"http://127.0.0.1:{self.http_port}"

    def spans(self) -> List[Dict[str, Any]]:
        """Every span received so far."""
        with urllib.request.urlopen(f"{self.endpoint}/spans", timeout=10) as answer:
            listed: List[Dict[str, Any]] = json.loads(answer.read())
        return listed

    def process_spans(self, job_id: str, timeout: float = 60) -> List[Dict[str, Any]]:
        """The worker's `process FUNCTION` spans (kind consumer) of job `job_id`, waiting
        (at most `timeout` seconds) until there is one."""
        function = job_id.rpartition(":")[0]

        def found() -> List[Dict[str, Any]]:
            return [s for s in self.spans()
                    if s["name"] == f"process {function}" and s["kind"] == "consumer"
                    and s["attributes"].get("messaging.message.id") == job_id]

        spans: List[Dict[str, Any]] = wait_until(
            found, timeout, f"the worker's process span of {job_id}", every=0.05)
        return spans

    def stop(self) -> None:
        if self.process.stdin is not None and not self.process.stdin.closed:
            try:
                self.process.stdin.close()
            except OSError:
                pass
        end(self.process, 10)
        if self.process.stdout is not None:
            self.process.stdout.close()


def otlp_env(receiver: OtlpReceiver) -> Dict[str, str]:
    """What makes a worker export its spans to `receiver` (OTLP/HTTP, protobuf), a batch
    every 50 ms."""
    return {
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        "OTEL_BSP_SCHEDULE_DELAY": "50",
    }


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    s = RedisServer(tmp_path_factory.mktemp("redis"))
    yield s
    s.stop()


@pytest.fixture(scope="session")
def worker(server: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Worker]:
    w = Worker(server.url, tmp_path_factory.mktemp("worker"))
    yield w
    w.stop()


@pytest.fixture
def url(server: RedisServer, worker: Worker) -> str:
    """The URL of a Redis that a live worker serves (echo, count, fail)."""
    return server.url


@pytest.fixture
def client(url: str) -> Iterator[wasmgear.Client]:
    c = wasmgear.Client.from_url(url)
    yield c
    c.close()


@pytest.fixture
def bare(tmp_path: Path) -> Iterator[RedisServer]:
    """A fresh redis-server of its own, that no worker serves."""
    s = RedisServer(tmp_path / "bare-redis")
    yield s
    s.stop()


def cli(url: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    """Runs the wasmgear CLI against `url`."""
    result = subprocess.run(
        [str(binary()), *args, "--redis", url], capture_output=True, text=True, timeout=60,
        env={**os.environ, "NO_COLOR": "1"},
    )
    if check and result.returncode != 0:
        raise AssertionError(f"wasmgear {' '.join(args)} exited {result.returncode}: {result.stderr}")
    return result


def numsub(r: redis.Redis, channel: str) -> int:
    reply: List = r.execute_command("PUBSUB", "NUMSUB", channel)
    return int(reply[1])


def events_channel(function: str) -> str:
    return f"wg:{{{function}}}:events"


def make_user(server: RedisServer, role: str, name: str) -> str:
    """Makes the Redis user `name` (password `pw-NAME`) of `role` with the `ACL SETUSER` line
    `wasmgear acl ROLE --user NAME` prints (as tests/all/redis_acl.rs does); returns its
    URL."""
    result = subprocess.run([str(binary()), "acl", role, "--user", name], capture_output=True,
                            text=True, timeout=60, env={**os.environ, "NO_COLOR": "1"})
    assert result.returncode == 0, result.stderr
    words = result.stdout.replace(">PASSWORD", f">pw-{name}").split()
    assert words[:2] == ["ACL", "SETUSER"], result.stdout
    server.redis.execute_command(*words)
    return f"redis://{name}:pw-{name}@127.0.0.1:{server.port}"


def refusals(server: RedisServer, user: str) -> List[str]:
    """What Redis' ACL log says `user` was refused (`REASON OBJECT`, newest first)."""
    def text(value: Any) -> str:
        return value.decode() if isinstance(value, bytes) else str(value)

    found = []
    for entry in server.redis.acl_log(1000):
        fields = {text(k): v for k, v in entry.items()}
        if text(fields.get("username", "")) == user:
            found.append(f"{text(fields.get('reason', ''))} {text(fields.get('object', ''))}")
    return found
