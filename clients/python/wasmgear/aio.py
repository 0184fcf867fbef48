"""The asyncio client, on `redis.asyncio`: the same operations as `Client` (they are written
once, in `_core`), awaited."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import Any, Awaitable, Callable, Dict, Mapping, Set, TypeVar, List, Optional, Sequence, Tuple, Union, overload

import redis.asyncio as aredis
from redis import exceptions as rx
from redis.asyncio.sentinel import Sentinel

from . import _core as core
from .crypto import KeyRing
from .client import (At, BatchJob, CallbackSpec, FlowDocument, Input, JobOptions, Policy,
                     Seconds, Throttle, cluster_enabled, connection_kwargs, node_kwargs, redact,
                     sentinel_kwargs)
from .errors import BadInput, NotFound, Unreachable, WaitTimeout, WasmgearError
from .models import (BatchStatus, CancelResult, Enqueued, Event, FlowStatus, FunctionConfig,
                     GroupConfig, GroupsOverview, Job, QueueInfo, SubmittedBatch,
                     SubmittedFlow)

log = logging.getLogger("wasmgear")

T = TypeVar("T")


def open_plain(url: str, kwargs: Dict[str, Any]) -> aredis.Redis:
    try:
        return aredis.Redis.from_url(url, **kwargs)
    except ValueError as e:
        raise BadInput(
            f"bad Redis URL {redact(url)}: {e} (use redis://[USER:PASSWORD@]HOST:PORT[/DB], "
            "rediss:// for TLS)"
        ) from None


async def _aclose(thing: Any) -> None:
    """Closes a redis.asyncio client or pub/sub (`aclose` since redis-py 5.0.1, `close`
    before)."""
    closer = getattr(thing, "aclose", None) or thing.close
    await closer()


class _Sentinels(Sentinel):
    """redis-py's asyncio Sentinel, saying when no sentinel names a primary what each one
    answered (see the sync client's)."""

    async def discover_master(self, service_name: str) -> Tuple[str, int]:
        problems: List[str] = []
        for i, sentinel in enumerate(self.sentinels):
            at = core.sentinel_label(sentinel)
            try:
                masters = await sentinel.sentinel_masters()
            except rx.RedisError as e:
                problems.append(f"{at}: {core.describe_sentinel_error(e)}")
                continue
            found, problem = core.named_primary(
                at, service_name, masters,
                lambda state: self.check_master_state(state, service_name))
            if found is None:
                problems.append(problem)
                continue
            self.sentinels[0], self.sentinels[i] = sentinel, self.sentinels[0]
            return found
        raise core.no_primary(problems)


class _PrimaryWatch:
    """Behind sentinels, the periodic check of which node is the primary (see the sync
    client's): idle command connections and a pub/sub connection follow a move."""

    def __init__(self, service: str, pool: Any) -> None:
        self._service = service
        self._pool = pool
        self._asked = time.monotonic()
        self._task: Optional["asyncio.Task[Any]"] = None

    async def primary(self) -> Optional[Tuple[str, int]]:
        """The primary the sentinels name now (None when none does); the pool follows it."""
        before = self._pool.master_address
        try:
            named = await self._pool.get_master_address()
        except rx.RedisError:
            return None  # no sentinel answers now: keep what works
        if before is not None and tuple(before) != tuple(named):
            log.warning("the Redis primary moved from %s to %s (service %s); following it",
                        _address(before), _address(named), self._service)
        return str(named[0]), int(named[1])

    async def moved(self, pubsub: Any) -> bool:
        """Whether `pubsub`'s connection is on another node than the primary named now."""
        conn = getattr(pubsub, "connection", None)
        host, port = getattr(conn, "host", None), getattr(conn, "port", None)
        if not host or port is None:
            return False
        named = await self.primary()
        return named is not None and named != (str(host), int(port))

    def follow_soon(self) -> None:
        """Asks (`primary`) in a task of its own, unless it was asked within CHECK_EVERY."""
        now = time.monotonic()
        busy = self._task is not None and not self._task.done()
        if busy or now - self._asked < core.CHECK_EVERY:
            return
        self._asked = now
        self._task = asyncio.ensure_future(self.primary())

    async def close(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):  # noqa: BLE001 - it is being dropped
                pass


def _address(address: Any) -> str:
    return f"{core.bracketed(str(address[0]))}:{address[1]}"


class _Held:
    """The connections one operation holds for its writes of jobs (core.Pinned; see the
    sync client's): one of the pool, or per node of a cluster, given back when it ends."""

    def __init__(self, client: "AsyncClient") -> None:
        self._client = client
        self._held: Dict[str, Tuple[Any, Callable[[Any], Awaitable[None]]]] = {}

    async def send(self, op: core.Pinned) -> List[Any]:
        name, take, give_back = self._client._pool_for(op.key())
        if name not in self._held:
            self._held[name] = (await take(), give_back)
        conn, give_back = self._held[name]
        try:
            await conn.send_packed_command(conn.pack_commands([cmd.args for cmd in op.cmds]))
            replies: List[Any] = []
            for _ in op.cmds:
                try:
                    replies.append(await conn.read_response())
                except rx.ResponseError as e:
                    replies.append(e)
        except BaseException:
            # A broken connection goes back to the pool, closed; the next send takes another
            # (behind sentinels, the pool asks them for the primary as it connects it).
            del self._held[name]
            try:
                await conn.disconnect()
            finally:
                await give_back(conn)
            raise
        for reply in replies:
            if isinstance(reply, rx.AskError) and self._client.cluster:
                # The slot moved: read the slots again, and take the new node's connection.
                self._held.pop(name)
                await give_back(conn)
                await self._client._conn.nodes_manager.initialize()
            if isinstance(reply, rx.ResponseError):
                raise reply
        return replies

    async def release(self) -> None:
        held, self._held = self._held, {}
        for conn, give_back in held.values():
            await give_back(conn)


async def _take(pool: Any) -> Any:
    """A connection from a redis-py pool (redis-py before 5.3 wants a command name)."""
    try:
        return await pool.get_connection()
    except TypeError:
        return await pool.get_connection("FCALL")


class _Listener:
    """The client's one pub/sub connection, shared by all its waits (see the sync client's
    listener): a task subscribes the channels the waits need and routes each event."""

    def __init__(self, proto: core.Protocol, make_redis: Callable[[], aredis.Redis],
                 watch: Optional[_PrimaryWatch] = None) -> None:
        self._router: core.Router["asyncio.Queue[Any]"] = core.Router(proto)
        self._make_redis = make_redis
        self._watch = watch
        self._changed = asyncio.Event()
        self._confirmed: Set[str] = set()
        self._hearing: Set[int] = set()
        self._todo: List[Tuple[str, List[str]]] = []
        self._task: Optional["asyncio.Task[None]"] = None
        self._closed = False
        self._lost = False

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def watch(self, ids: Sequence[str]) -> Tuple["asyncio.Queue[Any]", bool]:
        sink: "asyncio.Queue[Any]" = asyncio.Queue()
        new = self._router.add(ids, sink)
        if new:
            self._todo.append(("sub", new))
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self._run())
        self._notify()
        channels = self._router.channels_of(ids)
        deadline = time.monotonic() + core.limits().connect_timeout
        while not (self._closed or self._lost or all(c in self._confirmed for c in channels)):
            left = deadline - time.monotonic()
            if left <= 0:
                return sink, False
            try:
                await asyncio.wait_for(self._changed.wait(), left)
            except asyncio.TimeoutError:
                return sink, False
        hearing = not self._lost and not self._closed
        if hearing:
            self._hearing.add(id(sink))
        return sink, hearing

    def unwatch(self, ids: Sequence[str], sink: "asyncio.Queue[Any]") -> None:
        self._hearing.discard(id(sink))
        gone = self._router.remove(ids, sink)
        if gone:
            self._confirmed.difference_update(gone)
            self._todo.append(("unsub", gone))
        self._notify()

    def waiting(self) -> int:
        """How many (job, wait) routes are registered (for tests and diagnostics)."""
        return sum(len(s) for s in self._router.routes.values())

    def hearing(self) -> int:
        """How many waits started with their subscription confirmed (for tests)."""
        return len(self._hearing)

    async def close(self) -> None:
        self._closed = True
        self._notify()
        if self._task is not None:
            try:
                await asyncio.wait_for(self._task, 2.0)
            except (asyncio.TimeoutError, asyncio.CancelledError):
                pass

    def _broadcast(self, signal: str) -> None:
        for sink in self._router.sinks():
            sink.put_nowait(signal)

    async def _run(self) -> None:
        pubsub: Any = None
        checked = time.monotonic()
        try:
            while not self._closed:
                todo, self._todo = self._todo, []
                channels = self._router.channels()
                if not channels and not todo:
                    changed = self._changed
                    try:
                        await asyncio.wait_for(changed.wait(), 1.0)
                    except asyncio.TimeoutError:
                        pass
                    continue
                try:
                    if pubsub is None:
                        pubsub = self._make_redis().pubsub()
                        if channels:
                            await pubsub.subscribe(*channels)
                        todo = []  # every channel needed now is subscribed above
                    for kind, chs in todo:
                        if kind == "sub":
                            await pubsub.subscribe(*chs)
                        else:
                            await pubsub.unsubscribe(*chs)
                    if not channels:
                        continue
                    message = await pubsub.get_message(timeout=0.05)
                    if message is not None:
                        self._handle(message)
                    if (self._watch is not None
                            and time.monotonic() - checked >= core.CHECK_EVERY):
                        checked = time.monotonic()
                        if await self._watch.moved(pubsub):
                            raise rx.ConnectionError("the Redis primary moved")
                except Exception as e:  # noqa: BLE001 - whatever broke, reconnect; waits poll meanwhile
                    was_lost, self._lost = self._lost, True
                    self._confirmed.clear()
                    self._notify()
                    if not was_lost:
                        log.warning("lost the events connection (%s); reconnecting", e)
                        self._broadcast(core.LOST)
                    try:
                        if pubsub is not None:
                            await _aclose(pubsub)
                    except Exception:  # noqa: BLE001 - a broken connection may fail to close
                        pass
                    pubsub = None
                    changed = self._changed
                    try:
                        await asyncio.wait_for(changed.wait(), core.limits().wait_poll)
                    except asyncio.TimeoutError:
                        pass
        finally:
            if pubsub is not None:
                try:
                    await _aclose(pubsub)
                except Exception:  # noqa: BLE001
                    pass

    def _handle(self, message: Dict[str, Any]) -> None:
        kind = message.get("type")
        channel = core.text(message.get("channel"))
        if kind == "subscribe":
            self._confirmed.add(channel)
            if self._lost and all(c in self._confirmed for c in self._router.channels()):
                self._lost = False
                log.info("listening to events again (those published meanwhile were missed)")
                self._broadcast(core.RESUBSCRIBED)
            self._notify()
        elif kind == "unsubscribe":
            if channel not in self._router.refs:
                self._confirmed.discard(channel)
        elif kind == "message":
            for sink, event in self._router.route(channel, message.get("data")):
                sink.put_nowait(event)


class AsyncEventStream:
    """Events as they are published, from `AsyncClient.events`: `async for event in stream`
    (forever) or `await stream.get(timeout)`; `await stream.aclose()` it, or use `async with`.
    Subscribed once entered or first read."""

    def __init__(self, client: "AsyncClient", function: Optional[str]) -> None:
        self._client = client
        self._function = function
        self._buffer: List[Event] = []
        self._pubsub: Any = None
        self._closed = False
        self._checked = time.monotonic()

    async def start(self) -> "AsyncEventStream":
        """Subscribes (waiting for Redis' confirmation), if not done yet."""
        if self._pubsub is None and not self._closed:
            await self._subscribe()
        return self

    async def _subscribe(self) -> None:
        proto = self._client._proto
        pubsub = self._client._make_pubsub_redis().pubsub()
        try:
            if self._function is None:
                await pubsub.psubscribe(proto.all_events_pattern())
            else:
                await pubsub.subscribe(proto.events_channel(self._function))
            deadline = time.monotonic() + core.limits().connect_timeout
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise Unreachable("Redis did not confirm the subscription to the events")
                message = await pubsub.get_message(timeout=left)
                if message and message.get("type") in ("subscribe", "psubscribe"):
                    break
        except BaseException:
            await _aclose(pubsub)
            raise
        self._pubsub = pubsub

    async def get(self, timeout: Optional[float] = None) -> Optional[Event]:
        """The next event, or None when none came within `timeout` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._buffer:
            if self._closed:
                return None
            left = 1.0 if deadline is None else min(1.0, deadline - time.monotonic())
            if left <= 0:
                return None
            try:
                if self._pubsub is None:
                    await self._subscribe()
                message = await self._pubsub.get_message(timeout=left)
                watch = self._client._watch
                if watch is not None and time.monotonic() - self._checked >= core.CHECK_EVERY:
                    self._checked = time.monotonic()
                    if await watch.moved(self._pubsub):
                        raise rx.ConnectionError("the Redis primary moved")
            except (rx.ConnectionError, rx.TimeoutError, OSError, Unreachable) as e:
                if self._pubsub is not None:
                    log.warning("lost the connection to Redis (%s): events are missed until it is back", e)
                    try:
                        await _aclose(self._pubsub)
                    except Exception:  # noqa: BLE001
                        pass
                    self._pubsub = None
                await asyncio.sleep(min(core.limits().wait_poll, max(left, 0.01)))
                continue
            if message and message.get("type") in ("message", "pmessage"):
                function = self._client._proto.function_of_channel(core.text(message["channel"]))
                if function is not None:
                    self._buffer.extend(core.parse_message(function, message["data"]))
        return self._buffer.pop(0)

    def __aiter__(self) -> "AsyncEventStream":
        return self

    async def __anext__(self) -> Event:
        event = await self.get()
        if event is None:
            raise StopAsyncIteration
        return event

    async def aclose(self) -> None:
        self._closed = True
        if self._pubsub is not None:
            try:
                await _aclose(self._pubsub)
            finally:
                self._pubsub = None

    async def __aenter__(self) -> "AsyncEventStream":
        try:
            return await self.start()
        except (rx.RedisError, OSError) as e:
            raise core.map_error(e, self._client._url) from None

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()


class AsyncClient:
    """The asyncio client: `client = await AsyncClient.from_url(url)`, then the same methods
    as `Client`, awaited. Close it with `await client.aclose()` (or `async with`)."""

    def __init__(self, conn: Any, url: str, make_pubsub_redis: Callable[[], aredis.Redis],
                 cluster: bool, *, min_replicas: Optional[core.MinReplicas] = None,
                 watch: Optional[_PrimaryWatch] = None,
                 sentinels: Optional[_Sentinels] = None, keys: Optional[KeyRing] = None,
                 encrypt_all: bool = False) -> None:
        self._conn = conn
        self._url = redact(url)
        self._make_pubsub_redis = make_pubsub_redis
        self._proto = core.protocol()
        self._state = core.ClientState(min_replicas, keys, encrypt_all)
        self._watch = watch
        self._sentinels = sentinels
        self._listener = _Listener(self._proto, make_pubsub_redis, watch)
        self.cluster = cluster

    @property
    def min_replicas(self) -> int:
        """How many replicas confirm this client's writes of jobs (see `Client`)."""
        return self._state.min_replicas.count

    @property
    def min_replicas_timeout(self) -> float:
        """How long each write of jobs waits for its replicas, in seconds, per send."""
        return self._state.min_replicas.timeout

    @property
    def keys(self) -> Optional[KeyRing]:
        """The keys this client seals and opens job data with (None: it has none)."""
        return self._state.keys

    @classmethod
    async def from_url(cls, url: str, *, cluster: Optional[bool] = None, min_replicas: int = 0,
                       min_replicas_timeout: Optional[Seconds] = None,
                       key_file: Union[str, "os.PathLike[str]", None] = None,
                       keys: Optional[KeyRing] = None, encrypt_all: Optional[bool] = None,
                       **redis_kwargs: Any) -> "AsyncClient":
        """Connects as `Client.from_url` does (awaited): a redis:// or rediss:// URL, or a
        redis+sentinel:// (rediss+sentinel://) URL naming the sentinels of a replicated
        set; `min_replicas` and `min_replicas_timeout`, `key_file`, `keys` and
        `encrypt_all` (encrypted job data) as there."""
        replicas = core.min_replicas(min_replicas, min_replicas_timeout)
        ring, sealing_all = core.client_keys(key_file, keys, encrypt_all)
        parsed = core.parse_sentinel_url(url) if core.is_sentinel_url(url) else None
        if parsed is not None:
            return await cls._from_sentinels(url, parsed, cluster, replicas, redis_kwargs,
                                             ring, sealing_all)
        kwargs = {**connection_kwargs(), **redis_kwargs}
        shown = redact(url)
        seed = open_plain(url, kwargs)
        try:
            if cluster is None:
                cluster = cluster_enabled(await seed.info("cluster"))
            if cluster:
                from redis.asyncio.cluster import RedisCluster

                conn: Any = RedisCluster.from_url(url, **kwargs)
                await conn.initialize()
                await _aclose(seed)  # pub/sub opens its own connections to the seed node
            else:
                conn = seed
            client = cls(conn, url, lambda: open_plain(url, kwargs), bool(cluster),
                         min_replicas=replicas, keys=ring, encrypt_all=sealing_all)
            await client._ensure_library()
        except Unreachable as e:
            await _aclose(seed)
            raise Unreachable(f"cannot reach Redis at {shown}: {e}") from None
        except (rx.RedisError, OSError) as e:
            await _aclose(seed)
            raise core.map_error(e, shown) from None
        except WasmgearError:
            await _aclose(seed)
            raise
        return client

    @classmethod
    async def _from_sentinels(cls, url: str, parsed: core.SentinelUrl,
                              cluster: Optional[bool], replicas: core.MinReplicas,
                              redis_kwargs: Dict[str, Any], keys: Optional[KeyRing] = None,
                              encrypt_all: bool = False) -> "AsyncClient":
        """Connects to the primary the sentinels of `parsed` name (see `Client.from_url`)."""
        shown = redact(url)
        if cluster:
            raise BadInput(f"{shown} names sentinels of a replicated set, not a Redis "
                           "Cluster: leave cluster unset")
        kwargs = node_kwargs(parsed, {**connection_kwargs(), **redis_kwargs})
        # redis-py leaves Sentinel.__init__ unannotated (the only untyped call here).
        sentinels = _Sentinels(  # type: ignore[no-untyped-call]
            parsed.sentinels, sentinel_kwargs=sentinel_kwargs(parsed, redis_kwargs))
        conn = sentinels.master_for(parsed.service, **kwargs)
        watch = _PrimaryWatch(parsed.service, conn.connection_pool)

        def make_pubsub_redis() -> aredis.Redis:
            made: aredis.Redis = sentinels.master_for(parsed.service, **kwargs)
            return made

        client = cls(conn, url, make_pubsub_redis, False, min_replicas=replicas, watch=watch,
                     sentinels=sentinels, keys=keys, encrypt_all=encrypt_all)
        try:
            await client._ensure_library()
        except (rx.RedisError, OSError, WasmgearError) as e:
            await client.aclose()
            raise core.map_error(e, shown) from None
        return client

    # --- running the shared operations ---

    async def _execute(self, op: Any, receive: Any, held: _Held) -> Any:
        if isinstance(op, core.Cmd):
            return await self._conn.execute_command(*op.args)
        if isinstance(op, core.Pinned):
            return await held.send(op)
        if isinstance(op, core.LoadLibrary):
            return await self._load_library()
        if isinstance(op, core.Sleep):
            await asyncio.sleep(op.seconds)
            return None
        if isinstance(op, core.Receive) and receive is not None:
            return await receive(op.timeout)
        raise TypeError(f"unknown operation {op!r}")

    async def _drive(self, gen: core.Gen[T], receive: Any = None) -> T:
        reply: Any = None
        error: Optional[BaseException] = None
        held = _Held(self)
        if self._watch is not None:
            self._watch.follow_soon()
        try:
            while True:
                try:
                    op = gen.throw(error) if error is not None else gen.send(reply)
                except StopIteration as stop:
                    value: T = stop.value  # what the operation returned
                    return value
                reply, error = None, None
                try:
                    reply = await self._execute(op, receive, held)
                except rx.RedisError as e:
                    error = e
        except (rx.RedisError, OSError) as e:
            raise core.map_error(e, self._url) from None
        finally:
            gen.close()
            await held.release()

    def _pool_for(self, key: Optional[str]) -> Tuple[
            str, Callable[[], Awaitable[Any]], Callable[[Any], Awaitable[None]]]:
        """Where a Pinned send with first key `key` takes its connection: a name, how to
        take one and how to give it back (the server's pool, or the primary's behind
        sentinels; in a cluster, the node that holds the key's slot)."""
        if not self.cluster:
            pool = self._conn.connection_pool

            async def give_back(conn: Any) -> None:
                await pool.release(conn)

            return "", lambda: _take(pool), give_back
        node = self._conn.get_node_from_key(key) if key else self._conn.get_default_node()

        async def take() -> Any:
            return node.acquire_connection()

        async def give_back_to_node(conn: Any) -> None:
            node.release(conn)

        return str(node.name), take, give_back_to_node

    def _nodes(self) -> List[Any]:
        return list(self._conn.get_primaries()) if self.cluster else [None]

    async def _on_node(self, node: Any, *args: Any) -> Any:
        if node is None:
            return await self._conn.execute_command(*args)
        return await self._conn.execute_command(*args, target_nodes=node)

    async def _load_library(self) -> None:
        for node in self._nodes():
            try:
                await self._on_node(node, "FUNCTION", "LOAD", self._proto.library_text)
                error = None
            except rx.ResponseError as e:
                error = e
            core.load_ok(error)

    async def _ensure_library(self) -> None:
        for node in self._nodes():
            try:
                await self._on_node(node, "FCALL", self._proto.prefix + "version", 0)
                error = None
            except rx.ResponseError as e:
                error = e
            if core.version_action(error):
                try:
                    await self._on_node(node, "FUNCTION", "LOAD", self._proto.library_text)
                    error = None
                except rx.ResponseError as e:
                    error = e
                core.load_ok(error)

    # --- the API (see Client for each method) ---

    async def enqueue(
        self,
        function: str,
        input: Input = b"",
        *,
        priority: Union[int, str] = 0,
        delay: Optional[Seconds] = None,
        at: Optional[At] = None,
        attempts: Optional[int] = None,
        timeout: Optional[Seconds] = None,
        retention: Optional[Seconds] = None,
        failed_retention: Optional[Seconds] = None,
        uniq: Optional[str] = None,
        tags: Sequence[str] = (),
        after: Sequence[str] = (),
        on_failure: Optional[Mapping[str, Policy]] = None,
        group: Optional[str] = None,
        uniq_for: Optional[Seconds] = None,
        debounce: Optional[Seconds] = None,
        throttle: Optional[Throttle] = None,
        expires_in: Optional[Seconds] = None,
        expires_at: Optional[At] = None,
        traceparent: Optional[str] = None,
        tracestate: Optional[str] = None,
    ) -> Enqueued:
        options = dict(priority=priority, delay=delay, at=at, attempts=attempts,
                       timeout=timeout, retention=retention,
                       failed_retention=failed_retention, uniq=uniq, tags=tags, after=after,
                       on_failure=on_failure, group=group, uniq_for=uniq_for,
                       debounce=debounce, throttle=throttle, expires_in=expires_in,
                       expires_at=expires_at, traceparent=traceparent,
                       tracestate=tracestate)
        core.check_function(function)
        specs = [core.job_spec(input, options)]
        return (await self._drive(core.enqueue(self._proto, self._state, function, specs)))[0]

    async def enqueue_many(
        self, function: str, jobs: Sequence[Union[Input, Tuple[Input, JobOptions]]],
        **options: Any,
    ) -> List[Enqueued]:
        core.check_function(function)
        specs = core.job_specs(jobs, options)
        return await self._drive(core.enqueue(self._proto, self._state, function, specs))

    async def status(self, id: str) -> Job:
        return core.opened_job(self.keys, await self._drive(core.status(self._proto, id)))

    async def logs(self, id: str) -> str:
        return core.opened_log(self.keys, id, await self._drive(core.logs(self._proto, id)))

    async def input(self, id: str) -> Optional[bytes]:
        """Job `id`'s input while it is kept (as `Client.input`)."""
        data = await self._drive(core.job_input(self._proto, id))
        return core.opened_bytes(self.keys, id, "input", data)

    async def cancel(self, id: str) -> CancelResult:
        """Cancels job `id` and its unfinished children, and theirs (as `Client.cancel`)."""
        return await self._drive(core.cancel(self._proto, id))

    async def retry(self, id: str, *, fresh: bool = False) -> bool:
        return await self._drive(core.retry(self._proto, id, fresh))

    async def checkpoint(self, id: str) -> Optional[bytes]:
        data = await self._drive(core.checkpoint(self._proto, id))
        return core.opened_bytes(self.keys, id, "checkpoint", data)

    async def queues(self) -> List[QueueInfo]:
        return await self._drive(core.queues(self._proto))

    # --- function settings and groups (see Client for each method) ---

    async def config(self, function: str) -> FunctionConfig:
        return await self._drive(core.config(self._proto, function))

    async def configure(
        self,
        function: str,
        *,
        paused: Optional[bool] = None,
        concurrency: core.Count = core.KEEP,
        rate_limit: core.Rate = core.KEEP,
        keep_finished: core.Count = core.KEEP,
        group_concurrency: core.Count = core.KEEP,
        group_rate_limit: core.Rate = core.KEEP,
        min_replicas: core.Count = core.KEEP,
        encrypt: Optional[bool] = None,
    ) -> FunctionConfig:
        args = core.settings_args(paused=paused, concurrency=concurrency,
                                  rate_limit=rate_limit, keep_finished=keep_finished,
                                  group_concurrency=group_concurrency,
                                  group_rate_limit=group_rate_limit,
                                  min_replicas=min_replicas, encrypt=encrypt)
        return await self._drive(core.configure(self._proto, self._state, function, args))

    async def configure_group(
        self,
        function: str,
        group: str,
        *,
        concurrency: core.Count = core.KEEP,
        rate_limit: core.Rate = core.KEEP,
        paused: Optional[bool] = None,
    ) -> GroupConfig:
        core.check_group(group)
        args = core.group_args(group, concurrency=concurrency, rate_limit=rate_limit,
                               paused=paused)
        return await self._drive(core.configure_group(self._proto, self._state, function,
                                                      group, args))

    async def groups(self, function: str, limit: int = 20,
                     group: Optional[str] = None) -> GroupsOverview:
        return await self._drive(core.groups(self._proto, function, limit, group))

    # --- flows (see Client for each method) ---

    async def submit_flow(self, document: FlowDocument, *, traceparent: Optional[str] = None,
                          tracestate: Optional[str] = None) -> SubmittedFlow:
        trace = core.check_trace(traceparent, tracestate)
        return await self._drive(core.submit_flow(self._proto, self._state, document, trace))

    async def flow(self, id: int) -> FlowStatus:
        return await self._drive(core.opened_flow_status(self._proto, self.keys, id))

    async def cancel_flow(self, id: int) -> int:
        return await self._drive(core.cancel_flow(self._proto, id))

    async def retry_flow(self, id: int) -> List[str]:
        return await self._drive(core.retry_flow(self._proto, id))

    async def wait_flow(self, id: int, timeout: Optional[Seconds] = None) -> FlowStatus:
        seconds = core.timeout_seconds(timeout)
        deadline = None if seconds is None else time.monotonic() + seconds
        while True:
            status = await self.flow(id)
            pending = [job.id for job in status.jobs if not job.ended]
            if not pending:
                return status
            left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            try:
                await self.wait(pending, left, check=False)
            except NotFound:
                continue  # forgotten meanwhile: read the flow again
            except WaitTimeout as e:
                raise WaitTimeout(f"gave up waiting for flow {id} after {timeout}s; its jobs "
                                  "go on", e.ids) from None

    # --- batches (see Client for each method) ---

    async def open_batch(self, name: str = "", *, on_success: Optional[CallbackSpec] = None,
                         on_complete: Optional[CallbackSpec] = None) -> str:
        return await self._drive(core.open_batch(self._proto, name, on_success, on_complete))

    async def add_to_batch(self, id: str, jobs: Sequence[BatchJob]) -> List[str]:
        checked = core.batch_jobs(jobs)
        return await self._drive(core.add_to_batch(self._proto, self._state, id, checked))

    async def close_batch(self, id: str) -> None:
        await self._drive(core.close_batch(self._proto, id))

    async def batch(self, jobs: Sequence[BatchJob], *, name: str = "",
                    on_success: Optional[CallbackSpec] = None,
                    on_complete: Optional[CallbackSpec] = None) -> SubmittedBatch:
        checked = core.batch_jobs(jobs)
        return await self._drive(core.batch(self._proto, self._state, checked, name,
                                            on_success, on_complete))

    async def batch_status(self, id: str) -> BatchStatus:
        return await self._drive(core.batch_status(self._proto, id))

    # A str is a Sequence[str] too: the overloads overlap, and the first (one id) wins.
    @overload
    async def wait(self, ids: str, timeout: Optional[Seconds] = None,  # type: ignore[overload-overlap]
                   on_progress: Optional[core.ProgressCallback] = None, *,
                   check: bool = True) -> Job: ...

    @overload
    async def wait(self, ids: Sequence[str], timeout: Optional[Seconds] = None,
                   on_progress: Optional[core.ProgressCallback] = None, *,
                   check: bool = True) -> List[Job]: ...

    async def wait(self, ids: Union[str, Sequence[str]], timeout: Optional[Seconds] = None,
                   on_progress: Optional[core.ProgressCallback] = None, *,
                   check: bool = True) -> Union[Job, List[Job]]:
        """Waits until job `ids` (or every job of a list) has ended and returns its final
        status (a list for a list), as `Client.wait` does: the first read (`wg2_watch`) marks
        each job, whose `finish` event then carries its status (and a small text output), so
        that no read follows it. All waits of a client, in any task, share one
        subscription."""
        id_list, many = core.normalize_ids(ids)
        seconds = core.timeout_seconds(timeout)
        sink, hearing = await self._listener.watch(id_list)

        async def receive(wait: float) -> Any:
            try:
                return await asyncio.wait_for(sink.get(), max(wait, 0))
            except asyncio.TimeoutError:
                return None

        try:
            jobs = await self._drive(
                core.wait(self._proto, id_list, seconds, on_progress, hearing), receive
            )
        finally:
            self._listener.unwatch(id_list, sink)
        jobs = [core.opened_job(self.keys, job) for job in jobs]
        if check:
            core.outcome(jobs, many)
        return jobs if many else jobs[0]

    def events(self, function: Optional[str] = None) -> AsyncEventStream:
        """The events of `function` (of every function when None): `async with
        client.events() as stream: async for event in stream: ...`."""
        if function is not None:
            core.check_function(function)
        return AsyncEventStream(self, function)

    async def aclose(self) -> None:
        if self._watch is not None:
            await self._watch.close()
        await self._listener.close()
        await _aclose(self._conn)
        if self._sentinels is not None:
            for sentinel in self._sentinels.sentinels:
                await _aclose(sentinel)

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()
