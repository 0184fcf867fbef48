"""The synchronous client, on redis-py's `redis.Redis` (or `RedisCluster`)."""

from __future__ import annotations

import inspect
import logging
import os
import queue
import threading
import time
from datetime import datetime, timedelta
from typing import Any, Callable, Dict, Mapping, Set, TypedDict, TypeVar, Iterator, List, Optional, Sequence, Tuple, Union, overload
from urllib.parse import urlsplit, urlunsplit

import redis
from redis import exceptions as rx
from redis.backoff import NoBackoff
from redis.retry import Retry
from redis.sentinel import Sentinel

from . import _core as core
from .crypto import KeyRing
from .errors import BadInput, NotFound, Unreachable, WaitTimeout, WasmgearError
from .models import (BatchStatus, Callback, CancelResult, Enqueued, Event, FlowStatus,
                     FunctionConfig, GroupConfig, GroupsOverview, Job, QueueInfo,
                     RateLimit, SubmittedBatch, SubmittedFlow)

log = logging.getLogger("wasmgear")

T = TypeVar("T")

#: A job's input: bytes, or text (sent as UTF-8).
Input = Union[bytes, str]
#: A duration: seconds, or a timedelta.
Seconds = Union[int, float, timedelta]
#: When a job is to run: a datetime (a naive one is local time) or seconds since the Unix
#: epoch; not in the past (by Redis' clock), at most 10 years ahead.
At = Union[datetime, int, float]
#: The failure policy of a dependency: `cancel` (the default: the job is cancelled when the
#: dependency fails, is cancelled or is gone), `ignore` (the job runs without it, and reads
#: it as failed, its error where its output would be) or `continue` (the job runs once
#: every one of its dependencies has ended, whatever became of them).
Policy = str
#: A throttle (see `Client.enqueue`): at most `count` jobs per period (seconds or a
#: timedelta), as a (count, period) pair or a RateLimit(limit, interval).
Throttle = Union[Tuple[int, Seconds], RateLimit]
#: A flow document (see `Client.submit_flow`): {"name": ..., "jobs": {NAME: {...}, ...}}.
FlowDocument = Mapping[str, Any]


class JobOptions(TypedDict, total=False):
    """The options of one job of `enqueue_many` given as an (input, options) pair: the
    keyword arguments of `enqueue`."""

    priority: Union[int, str]
    delay: Optional[Seconds]
    at: Optional[At]
    attempts: Optional[int]
    timeout: Optional[Seconds]
    retention: Optional[Seconds]
    failed_retention: Optional[Seconds]
    uniq: Optional[str]
    tags: Sequence[str]
    after: Sequence[str]
    on_failure: Optional[Mapping[str, Policy]]
    group: Optional[str]
    uniq_for: Optional[Seconds]
    debounce: Optional[Seconds]
    throttle: Optional[Throttle]
    expires_in: Optional[Seconds]
    expires_at: Optional[At]
    traceparent: Optional[str]
    tracestate: Optional[str]


#: A job of a batch (see `Client.batch`): (function, input), or (function, input, options)
#: with `options` the keyword arguments of `enqueue` (a JobOptions dict).
BatchJob = Union[Tuple[str, Input], Tuple[str, Input, JobOptions]]
#: A batch's callback: a `Callback(function, data)`, or {"function": ..., "data": ...}.
CallbackSpec = Union[Callback, Mapping[str, Any]]


def redact(url: str) -> str:
    """`url` with its password (or a lone user name, which Redis takes for one) hidden; a
    Sentinel URL's nodes' password and `sentinel_password` too."""
    if core.is_sentinel_url(url):
        return core.redact_sentinel(url)
    try:
        parts = urlsplit(url)
    except ValueError:
        return "(a Redis URL)"
    if "@" not in parts.netloc:
        return url
    userinfo, _, host = parts.netloc.rpartition("@")
    user, colon, _ = userinfo.partition(":")
    hidden = f"{user}:***" if colon else "***"
    return urlunsplit(parts._replace(netloc=f"{hidden}@{host}"))


def connection_kwargs() -> Dict[str, Any]:
    """redis-py settings shared by both clients: bytes replies, the timeouts PROTOCOL.md
    describes, no retries of redis-py's own (the client retries what is safe to send
    twice, with the same call id), and no `CLIENT SETINFO` naming redis-py on connecting:
    a least-privilege user (`wasmgear acl`) may not run it, and each refusal would fill
    Redis' ACL log."""
    return {
        "socket_timeout": core.limits().response_timeout,
        "socket_connect_timeout": core.limits().connect_timeout,
        "retry": Retry(NoBackoff(), 0),
        "decode_responses": False,
        **_NO_SETINFO,
    }


#: What tells redis-py not to send `CLIENT SETINFO`: `driver_info=None` where it takes
#: `driver_info` (and warns of `lib_name`), else `lib_name` and `lib_version` None.
_NO_SETINFO: Dict[str, Any] = (
    {"driver_info": None}
    if "driver_info" in inspect.signature(redis.Redis.__init__).parameters
    else {"lib_name": None, "lib_version": None}
)


def open_plain(url: str, kwargs: Dict[str, Any]) -> redis.Redis:
    try:
        return redis.Redis.from_url(url, **kwargs)
    except ValueError as e:
        raise BadInput(
            f"bad Redis URL {redact(url)}: {e} (use redis://[USER:PASSWORD@]HOST:PORT[/DB], "
            "rediss:// for TLS)"
        ) from None


def cluster_enabled(info: Any) -> bool:
    """Whether `INFO cluster` says the server is part of a cluster."""
    if isinstance(info, dict):
        if "cluster_enabled" not in info:
            raise Unreachable("it answered, but not like Redis (no cluster section in INFO)")
        return str(info["cluster_enabled"]) == "1"
    raise Unreachable("it answered, but not like Redis (no cluster section in INFO)")


def sentinel_kwargs(parsed: core.SentinelUrl, redis_kwargs: Mapping[str, Any]) -> Dict[str, Any]:
    """redis-py settings for the connections to the sentinels (shared by both clients): their
    own user and password, TLS as the URL says (with the `ssl_*` settings given for the
    nodes), and ASK_TIMEOUT to answer before the next sentinel is asked."""
    kwargs: Dict[str, Any] = {
        "socket_timeout": core.ASK_TIMEOUT,
        "socket_connect_timeout": core.ASK_TIMEOUT,
        "retry": Retry(NoBackoff(), 0),
        "decode_responses": False,
    }
    if parsed.tls:
        kwargs["ssl"] = True
        kwargs.update({k: v for k, v in redis_kwargs.items() if k.startswith("ssl_")})
    if parsed.sentinel_user is not None:
        kwargs["username"] = parsed.sentinel_user
    if parsed.sentinel_password is not None:
        kwargs["password"] = parsed.sentinel_password
    return kwargs


def node_kwargs(parsed: core.SentinelUrl, kwargs: Mapping[str, Any]) -> Dict[str, Any]:
    """redis-py settings for the connections to the primary: `kwargs`, with the URL's
    database, user, password and TLS."""
    out = dict(kwargs)
    out["db"] = parsed.db
    if parsed.tls:
        out["ssl"] = True
    if parsed.username is not None:
        out["username"] = parsed.username
    if parsed.password is not None:
        out["password"] = parsed.password
    return out


class _Sentinels(Sentinel):
    """redis-py's Sentinel, asking each sentinel in turn for the primary and saying, when
    none names one, what each answered (as the Rust client's `find_primary`)."""

    def discover_master(self, service_name: str) -> Tuple[str, int]:
        problems: List[str] = []
        for i, sentinel in enumerate(self.sentinels):
            at = core.sentinel_label(sentinel)
            try:
                masters = sentinel.sentinel_masters()
            except rx.RedisError as e:
                problems.append(f"{at}: {core.describe_sentinel_error(e)}")
                continue
            check: Any = self.check_master_state  # (unannotated in redis-py)
            found, problem = core.named_primary(
                at, service_name, masters, lambda state: bool(check(state, service_name)))
            if found is None:
                problems.append(problem)
                continue
            # The sentinel that answered is asked first next time.
            self.sentinels[0], self.sentinels[i] = sentinel, self.sentinels[0]
            return found
        raise core.no_primary(problems)


def _address(address: Any) -> str:
    return f"{core.bracketed(str(address[0]))}:{address[1]}"


class _PrimaryWatch:
    """Behind sentinels, the Rust client's periodic check (sentinel.rs, CHECK_EVERY): which
    node do they name as the primary? When it moved, the command connections idle in
    redis-py's pool (`pool`) are closed, so that the next command connects to the new one,
    and a pub/sub connection still on the old one (a demoted primary keeps its clients) is
    made again. Commands that meet the move first (connection lost, READONLY) ask at once."""

    def __init__(self, service: str, pool: Any) -> None:
        self._service = service
        self._pool = pool
        self._lock = threading.Lock()
        self._asked = time.monotonic()
        self._busy = False
        self._closed = False

    def primary(self) -> Optional[Tuple[str, int]]:
        """The primary the sentinels name now (None when none does); the pool follows it."""
        before = self._pool.master_address
        try:
            named = self._pool.get_master_address()
        except rx.RedisError:
            return None  # no sentinel answers now: keep what works
        if before is not None and tuple(before) != tuple(named):
            log.warning("the Redis primary moved from %s to %s (service %s); following it",
                        _address(before), _address(named), self._service)
        return str(named[0]), int(named[1])

    def moved(self, pubsub: Any) -> bool:
        """Whether `pubsub`'s connection is on another node than the primary named now."""
        conn = getattr(pubsub, "connection", None)
        host, port = getattr(conn, "host", None), getattr(conn, "port", None)
        if not host or port is None:
            return False
        named = self.primary()
        return named is not None and named != (str(host), int(port))

    def follow_soon(self) -> None:
        """Asks (`primary`) in the background, unless it was asked within CHECK_EVERY."""
        with self._lock:
            now = time.monotonic()
            if self._closed or self._busy or now - self._asked < core.CHECK_EVERY:
                return
            self._busy, self._asked = True, now
        threading.Thread(target=self._follow, name="wasmgear-sentinel", daemon=True).start()

    def _follow(self) -> None:
        try:
            self.primary()
        finally:
            with self._lock:
                self._busy = False

    def close(self) -> None:
        with self._lock:
            self._closed = True


class _Held:
    """The connections one operation holds for its writes of jobs (core.Pinned): taken from
    the pool on first use (in a cluster, one per node), given back when it ends. A `WAIT`
    sent on one counts every write the operation made there."""

    def __init__(self, client: "Client") -> None:
        self._client = client
        self._held: Dict[str, Tuple[Any, Any]] = {}

    def send(self, op: core.Pinned) -> List[Any]:
        name, pool = self._client._pool_for(op.key())
        if name not in self._held:
            self._held[name] = (pool, _take(pool))
        pool, conn = self._held[name]
        try:
            conn.send_packed_command(conn.pack_commands([cmd.args for cmd in op.cmds]))
            replies: List[Any] = []
            for _ in op.cmds:
                try:
                    replies.append(conn.read_response())
                except rx.ResponseError as e:
                    replies.append(e)
        except BaseException:
            # A broken connection goes back to the pool, closed; the next send takes another
            # (behind sentinels, the pool asks them for the primary as it connects it).
            del self._held[name]
            try:
                conn.disconnect()
            finally:
                pool.release(conn)
            raise
        for reply in replies:
            if isinstance(reply, rx.AskError) and self._client.cluster:
                # The slot moved: read the slots again, and take the new node's connection.
                self._held.pop(name)
                pool.release(conn)
                self._client._conn.nodes_manager.initialize()
            if isinstance(reply, rx.ResponseError):
                raise reply
        return replies

    def release(self) -> None:
        held, self._held = self._held, {}
        for pool, conn in held.values():
            pool.release(conn)


def _take(pool: Any) -> Any:
    """A connection from a redis-py pool (redis-py before 5.3 wants a command name)."""
    try:
        return pool.get_connection()
    except TypeError:
        return pool.get_connection("FCALL")


class _Listener:
    """The client's one pub/sub connection, shared by all its waits: a thread subscribes the
    channels the waits need (core.Router) and hands each event to the waits of its job.
    When the connection drops it tells the waits (LOST), reconnects, subscribes again and
    tells them (RESUBSCRIBED), so they re-read what they may have missed."""

    def __init__(self, proto: core.Protocol, make_redis: Callable[[], redis.Redis],
                 watch: Optional[_PrimaryWatch] = None) -> None:
        self._router: core.Router["queue.Queue[Any]"] = core.Router(proto)
        self._make_redis = make_redis
        self._watch = watch
        self._cond = threading.Condition()
        self._confirmed: Set[str] = set()
        self._hearing: Set[int] = set()
        self._todo: List[Tuple[str, List[str]]] = []
        self._thread: Optional[threading.Thread] = None
        self._closed = False
        self._lost = False

    def watch(self, ids: Sequence[str]) -> Tuple["queue.Queue[Any]", bool]:
        """Routes the events of `ids` to a new queue; returns it and whether the
        subscription is confirmed (so that nothing published from now on is missed)."""
        sink: "queue.Queue[Any]" = queue.Queue()
        with self._cond:
            new = self._router.add(ids, sink)
            if new:
                self._todo.append(("sub", new))
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="wasmgear-events", daemon=True
                )
                self._thread.start()
            self._cond.notify_all()
            channels = self._router.channels_of(ids)
            ok = self._cond.wait_for(
                lambda: self._closed
                or self._lost
                or all(c in self._confirmed for c in channels),
                core.limits().connect_timeout,
            )
            hearing = bool(ok) and not self._lost and not self._closed
            if hearing:
                self._hearing.add(id(sink))
            return sink, hearing

    def unwatch(self, ids: Sequence[str], sink: "queue.Queue[Any]") -> None:
        with self._cond:
            self._hearing.discard(id(sink))
            gone = self._router.remove(ids, sink)
            if gone:
                self._confirmed.difference_update(gone)
                self._todo.append(("unsub", gone))
            self._cond.notify_all()

    def waiting(self) -> int:
        """How many (job, wait) routes are registered (for tests and diagnostics)."""
        with self._cond:
            return sum(len(s) for s in self._router.routes.values())

    def hearing(self) -> int:
        """How many waits started with their subscription confirmed (for tests)."""
        with self._cond:
            return len(self._hearing)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(2.0)

    def _broadcast(self, signal: str) -> None:
        with self._cond:
            sinks = self._router.sinks()
        for sink in sinks:
            sink.put(signal)

    def _run(self) -> None:
        pubsub: Any = None
        checked = time.monotonic()
        while True:
            with self._cond:
                if self._closed:
                    break
                todo, self._todo = self._todo, []
                channels = self._router.channels()
                if pubsub is not None and not channels and not todo:
                    # Nothing to listen to: sleep until a wait needs a channel.
                    self._cond.wait(1.0)
                    continue
            try:
                if pubsub is None:
                    # redis-py leaves Redis.pubsub unannotated (the only untyped call here).
                    pubsub = self._make_redis().pubsub()  # type: ignore[no-untyped-call]
                    if channels:
                        pubsub.subscribe(*channels)
                        conn = pubsub.connection
                        log.debug("subscribing to %d channels on %s:%s", len(channels),
                                  getattr(conn, "host", "?"), getattr(conn, "port", "?"))
                    todo = []  # every channel needed now is subscribed above
                    if not channels:
                        continue
                for kind, chs in todo:
                    if kind == "sub":
                        pubsub.subscribe(*chs)
                    else:
                        pubsub.unsubscribe(*chs)
                message = pubsub.get_message(timeout=0.05)
                if message is not None:
                    self._handle(message)
                if self._watch is not None and time.monotonic() - checked >= core.CHECK_EVERY:
                    checked = time.monotonic()
                    if self._watch.moved(pubsub):
                        raise rx.ConnectionError("the Redis primary moved")
            except Exception as e:  # noqa: BLE001 - whatever broke, reconnect; waits poll meanwhile
                with self._cond:
                    was_lost, self._lost = self._lost, True
                    self._confirmed.clear()
                    self._cond.notify_all()
                if not was_lost:
                    log.warning("lost the events connection (%s); reconnecting", e)
                    self._broadcast(core.LOST)
                else:
                    log.debug("the events connection is still lost (%s)", e)
                try:
                    if pubsub is not None:
                        pubsub.close()
                except Exception:  # noqa: BLE001 - a broken connection may fail to close
                    pass
                pubsub = None
                with self._cond:
                    if not self._closed:
                        self._cond.wait(core.limits().wait_poll)
        if pubsub is not None:
            try:
                pubsub.close()
            except Exception:  # noqa: BLE001
                pass

    def _handle(self, message: Dict[str, Any]) -> None:
        kind = message.get("type")
        channel = core.text(message.get("channel"))
        if kind == "subscribe":
            back = False
            with self._cond:
                self._confirmed.add(channel)
                if self._lost and all(c in self._confirmed for c in self._router.channels()):
                    self._lost = False
                    back = True
                self._cond.notify_all()
            if back:
                log.info("listening to events again (those published meanwhile were missed)")
                self._broadcast(core.RESUBSCRIBED)
        elif kind == "unsubscribe":
            with self._cond:
                if channel not in self._router.refs:
                    self._confirmed.discard(channel)
        elif kind == "message":
            with self._cond:
                pairs = self._router.route(channel, message.get("data"))
            for sink, event in pairs:
                sink.put(event)


class EventStream:
    """Events as they are published, from `Client.events`: iterate over it (forever), or
    call `get(timeout)`; `close()` it (or use it as a context manager). Subscribed when
    returned, so nothing published afterwards is missed. Events published while the
    connection is down are missed (a warning is logged); the stream reconnects."""

    def __init__(self, client: "Client", function: Optional[str]) -> None:
        self._client = client
        self._function = function
        self._buffer: List[Event] = []
        self._pubsub: Any = None
        self._closed = False
        self._checked = time.monotonic()
        self._subscribe()

    def _subscribe(self) -> None:
        proto = self._client._proto
        # redis-py leaves Redis.pubsub unannotated (the only untyped call here).
        pubsub = self._client._make_pubsub_redis().pubsub()  # type: ignore[no-untyped-call]
        try:
            if self._function is None:
                pubsub.psubscribe(proto.all_events_pattern())
            else:
                pubsub.subscribe(proto.events_channel(self._function))
            deadline = time.monotonic() + core.limits().connect_timeout
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise Unreachable("Redis did not confirm the subscription to the events")
                message = pubsub.get_message(timeout=left)
                if message and message.get("type") in ("subscribe", "psubscribe"):
                    break
        except BaseException:
            pubsub.close()
            raise
        self._pubsub = pubsub

    def get(self, timeout: Optional[float] = None) -> Optional[Event]:
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
                    self._subscribe()
                    log.info("listening to events again (those published meanwhile were missed)")
                message = self._pubsub.get_message(timeout=left)
                watch = self._client._watch
                if watch is not None and time.monotonic() - self._checked >= core.CHECK_EVERY:
                    self._checked = time.monotonic()
                    if watch.moved(self._pubsub):
                        raise rx.ConnectionError("the Redis primary moved")
            except (rx.ConnectionError, rx.TimeoutError, OSError, Unreachable) as e:
                if self._pubsub is not None:
                    log.warning("lost the connection to Redis (%s): events are missed until it is back", e)
                    try:
                        self._pubsub.close()
                    except Exception:  # noqa: BLE001
                        pass
                    self._pubsub = None
                time.sleep(min(core.limits().wait_poll, max(left, 0.01)))
                continue
            if message and message.get("type") in ("message", "pmessage"):
                function = self._client._proto.function_of_channel(core.text(message["channel"]))
                if function is not None:
                    self._buffer.extend(core.parse_message(function, message["data"]))
        return self._buffer.pop(0)

    def __iter__(self) -> Iterator[Event]:
        return self

    def __next__(self) -> Event:
        event = self.get()
        if event is None:
            raise StopIteration
        return event

    def close(self) -> None:
        self._closed = True
        if self._pubsub is not None:
            try:
                self._pubsub.close()
            finally:
                self._pubsub = None

    def __enter__(self) -> "EventStream":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class Client:
    """A connection to a wasmgear queue for producers and operators (thread-safe).

    Make one with `Client.from_url("redis://127.0.0.1:6379")`; close it with `close()` or use
    it as a context manager."""

    def __init__(self, conn: Any, url: str, make_pubsub_redis: Callable[[], redis.Redis],
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
        """How many replicas confirm this client's writes of jobs (0: none asked; a
        function's own `min_replicas` setting may ask for more)."""
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
    def from_url(cls, url: str, *, cluster: Optional[bool] = None, min_replicas: int = 0,
                 min_replicas_timeout: Optional[Seconds] = None,
                 key_file: Union[str, "os.PathLike[str]", None] = None,
                 keys: Optional[KeyRing] = None, encrypt_all: Optional[bool] = None,
                 **redis_kwargs: Any) -> "Client":
        """Connects to the Redis at `url` (redis://[USER:PASSWORD@]HOST:PORT[/DB], rediss://
        for TLS). Asks the server (`INFO cluster`) whether it is part of a Redis Cluster, and
        then routes each call by its keys (`cluster=True`/`False` decides instead). Loads the
        wasmgear library unless it is there. Extra keyword arguments go to redis-py.

        A Redis Sentinel URL, redis+sentinel://[USER:PASSWORD@]HOST[:PORT][,HOST[:PORT]...]
        /SERVICE[?db=N&sentinel_user=U&sentinel_password=P] (rediss+sentinel:// for TLS;
        port 26379 by default; USER:PASSWORD are the nodes'), asks the sentinels for the
        primary: commands and pub/sub go there, and follow it when it moves.

        `min_replicas` (0 to 16): every write of jobs (enqueue, enqueue_many, flows,
        batches) is confirmed by that many replicas (`WAIT`, at most `min_replicas_timeout`
        seconds per send, 1 s by default) before it returns, else NotReplicated; a
        function's own `min_replicas` setting (`configure`) can ask for more. Bad values
        raise BadInput before anything is sent.

        Encrypted job data (`wasmgear.crypto`): with `key_file` (a key file, `ID BASE64` a
        line; WASMGEAR_ENCRYPTION_KEY_FILE names it when not given) or `keys` (a KeyRing),
        the client seals the inputs it writes for the functions that store only encrypted
        input (`configure(F, encrypt=True)`; it learns which from their refusal, and sends
        the jobs again sealed), or for every function with `encrypt_all` (or
        WASMGEAR_ENCRYPT_ALL=1); it opens what it reads of sealed jobs (outputs, error
        messages, logs, inputs, checkpoints). Without keys, an enqueue on such a function
        raises EncryptionError, writing nothing, and sealed data reads as it is stored.
        The key file is read before anything is sent (EncryptionError when it does not
        read)."""
        replicas = core.min_replicas(min_replicas, min_replicas_timeout)
        ring, sealing_all = core.client_keys(key_file, keys, encrypt_all)
        parsed = core.parse_sentinel_url(url) if core.is_sentinel_url(url) else None
        if parsed is not None:
            return cls._from_sentinels(url, parsed, cluster, replicas, redis_kwargs,
                                       ring, sealing_all)
        kwargs = {**connection_kwargs(), **redis_kwargs}
        shown = redact(url)
        seed = open_plain(url, kwargs)
        try:
            if cluster is None:
                cluster = cluster_enabled(seed.info("cluster"))
            if cluster:
                from redis.cluster import RedisCluster

                conn: Any = RedisCluster.from_url(url, **kwargs)
                seed.close()  # pub/sub opens its own connections to the seed node
            else:
                conn = seed
            client = cls(conn, url, lambda: open_plain(url, kwargs), bool(cluster),
                         min_replicas=replicas, keys=ring, encrypt_all=sealing_all)
            client._ensure_library()
        except Unreachable as e:
            seed.close()
            raise Unreachable(f"cannot reach Redis at {shown}: {e}") from None
        except (rx.RedisError, OSError) as e:
            seed.close()
            raise core.map_error(e, shown) from None
        except WasmgearError:
            seed.close()
            raise
        return client

    @classmethod
    def _from_sentinels(cls, url: str, parsed: core.SentinelUrl, cluster: Optional[bool],
                        replicas: core.MinReplicas, redis_kwargs: Dict[str, Any],
                        keys: Optional[KeyRing] = None,
                        encrypt_all: bool = False) -> "Client":
        """Connects to the primary the sentinels of `parsed` name (see `from_url`)."""
        shown = redact(url)
        if cluster:
            raise BadInput(f"{shown} names sentinels of a replicated set, not a Redis "
                           "Cluster: leave cluster unset")
        kwargs = node_kwargs(parsed, {**connection_kwargs(), **redis_kwargs})
        # redis-py leaves the sync Sentinel unannotated (the untyped calls here).
        sentinels = _Sentinels(  # type: ignore[no-untyped-call]
            parsed.sentinels, sentinel_kwargs=sentinel_kwargs(parsed, redis_kwargs))
        conn: redis.Redis = sentinels.master_for(  # type: ignore[no-untyped-call]
            parsed.service, **kwargs)
        watch = _PrimaryWatch(parsed.service, conn.connection_pool)

        def make_pubsub_redis() -> redis.Redis:
            made: redis.Redis = sentinels.master_for(  # type: ignore[no-untyped-call]
                parsed.service, **kwargs)
            return made

        client = cls(conn, url, make_pubsub_redis, False, min_replicas=replicas, watch=watch,
                     sentinels=sentinels, keys=keys, encrypt_all=encrypt_all)
        try:
            client._ensure_library()
        except (rx.RedisError, OSError, WasmgearError) as e:
            client.close()
            raise core.map_error(e, shown) from None
        return client

    # --- running the shared operations ---

    def _execute(self, op: Any, receive: Optional[Callable[[float], Any]], held: _Held) -> Any:
        if isinstance(op, core.Cmd):
            return self._conn.execute_command(*op.args)
        if isinstance(op, core.Pinned):
            return held.send(op)
        if isinstance(op, core.LoadLibrary):
            return self._load_library()
        if isinstance(op, core.Sleep):
            time.sleep(op.seconds)
            return None
        if isinstance(op, core.Receive) and receive is not None:
            return receive(op.timeout)
        raise TypeError(f"unknown operation {op!r}")

    def _drive(self, gen: core.Gen[T], receive: Optional[Callable[[float], Any]] = None) -> T:
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
                    reply = self._execute(op, receive, held)
                except rx.RedisError as e:
                    error = e
        except rx.RedisError as e:
            raise core.map_error(e, self._url) from None
        except OSError as e:
            raise core.map_error(e, self._url) from None
        finally:
            gen.close()
            held.release()

    def _pool_for(self, key: Optional[str]) -> Tuple[str, Any]:
        """The pool a Pinned send with first key `key` takes its connection from, and its
        name: the server's (or the primary's, behind sentinels), or in a cluster the pool
        of the node that holds the key's slot."""
        if not self.cluster:
            return "", self._conn.connection_pool
        node = self._conn.get_node_from_key(key) if key else self._conn.get_default_node()
        return str(node.name), self._conn.get_redis_connection(node).connection_pool

    def _nodes(self) -> List[Any]:
        return list(self._conn.get_primaries()) if self.cluster else [None]

    def _on_node(self, node: Any, *args: Any) -> Any:
        if node is None:
            return self._conn.execute_command(*args)
        return self._conn.execute_command(*args, target_nodes=node)

    def _load_library(self) -> None:
        for node in self._nodes():
            try:
                self._on_node(node, "FUNCTION", "LOAD", self._proto.library_text)
                error = None
            except rx.ResponseError as e:
                error = e
            core.load_ok(error)

    def _ensure_library(self) -> None:
        for node in self._nodes():
            try:
                self._on_node(node, "FCALL", self._proto.prefix + "version", 0)
                error = None
            except rx.ResponseError as e:
                error = e
            if core.version_action(error):
                try:
                    self._on_node(node, "FUNCTION", "LOAD", self._proto.library_text)
                    error = None
                except rx.ResponseError as e:
                    error = e
                core.load_ok(error)

    # --- the API ---

    def enqueue(
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
        """Enqueues one job of `function` and returns its id (and whether it is new: False
        when the `uniq` key answered with another job, whose id it is). `after` lists the
        jobs it waits for; `on_failure` maps some of them to their policy (`cancel`, the
        default, `ignore` or `continue`). `group` is the job's group (a tenant, customer or
        document key: 1 to 200 bytes of printable ASCII but space, '"', '\\' and '|'): the
        function's ready jobs are leased round robin across their groups, each within its
        own limits (see `configure_group`).

        With `uniq`, at most one of (each 1ms to 10 years): `uniq_for`, once the key's job
        has succeeded, the key goes on answering with it for this long; `debounce`, the job
        waits this long, and enqueued again with the key before it has started it takes the
        new input and waits again (not with `delay` or `at`); `throttle` (count, period), at
        most `count` jobs are made with the key per period, the latest made answering the
        rest (the key does not join unfinished jobs then).

        `expires_in` (1ms to 10 years from now, by Redis' clock) or `expires_at` (a time, not
        passed by Redis' clock, else Conflict), not both: a job not started by then ends
        `expired` (error class `expired`) and never runs; `retry` runs it without the
        deadline.

        `traceparent` (a W3C traceparent, `00-TRACEID-SPANID-FLAGS` in lower-case hex) and
        `tracestate` (with it; at most 512 bytes of printable ASCII) are the trace context the
        job carries: a worker that exports spans makes its span of each attempt a child of
        that span. Without them, when the OpenTelemetry API is installed, the job carries
        the context of the `send FUNCTION` span (kind producer) the client opens in the
        current context around the call, else the current span's, else none.

        Raises BadInput, having written nothing, for a bad option."""
        options = dict(priority=priority, delay=delay, at=at, attempts=attempts,
                       timeout=timeout, retention=retention,
                       failed_retention=failed_retention, uniq=uniq, tags=tags, after=after,
                       on_failure=on_failure, group=group, uniq_for=uniq_for,
                       debounce=debounce, throttle=throttle, expires_in=expires_in,
                       expires_at=expires_at, traceparent=traceparent,
                       tracestate=tracestate)
        core.check_function(function)
        specs = [core.job_spec(input, options)]
        return self._drive(core.enqueue(self._proto, self._state, function, specs))[0]

    def enqueue_many(
        self, function: str, jobs: Sequence[Union[Input, Tuple[Input, JobOptions]]],
        **options: Any,
    ) -> List[Enqueued]:
        """Enqueues many jobs of `function`: each an input, or an (input, options dict) pair
        whose options (the keyword arguments of `enqueue`) add to `options`. Every job is
        checked before any is sent. Up to 1000 jobs (the manifest's `enqueue_batch`) go in one atomic call; a bigger batch
        takes several calls, and an error of a later call (see `enqueued` on the error)
        leaves the earlier calls' jobs enqueued."""
        core.check_function(function)
        specs = core.job_specs(jobs, options)
        return self._drive(core.enqueue(self._proto, self._state, function, specs))

    def status(self, id: str) -> Job:
        """Everything known about job `id` (NotFound when there is no such job). With keys,
        a sealed output and error messages are opened (EncryptionError naming the job and
        the part that does not open); without, a sealed message reads `<encrypted (key
        "K"); no key here ...>` and a sealed output is as stored."""
        return core.opened_job(self.keys, self._drive(core.status(self._proto, id)))

    def logs(self, id: str) -> str:
        """Job `id`'s log: each attempt's log lines, stdout and stderr (the newest 256 KiB);
        with keys, each sealed attempt opened (without, said to be sealed)."""
        return core.opened_log(self.keys, id, self._drive(core.logs(self._proto, id)))

    def input(self, id: str) -> Optional[bytes]:
        """Job `id`'s input while it is kept (None once the job is forgotten); with keys,
        opened when sealed."""
        data = self._drive(core.job_input(self._proto, id))
        return core.opened_bytes(self.keys, id, "input", data)

    def cancel(self, id: str) -> CancelResult:
        """Cancels job `id`: a waiting one at once, a running one by asking its worker to stop
        it (it then ends `cancelled`). Its unfinished children (the jobs it enqueued), theirs,
        and so on down are cancelled too, one `cancel` each, whatever became of `id` itself.
        The result is `id`'s own. Safe to repeat: if Redis fails half-way, cancel again."""
        return self._drive(core.cancel(self._proto, id))

    def retry(self, id: str, *, fresh: bool = False) -> bool:
        """Runs failed or cancelled job `id` again; False when it had not ended so. It
        resumes from the checkpoint it keeps, if any; `fresh` drops that checkpoint, so
        that it starts from the beginning (BadInput, before any call, unless True or
        False)."""
        return self._drive(core.retry(self._proto, id, fresh))

    def checkpoint(self, id: str) -> Optional[bytes]:
        """The checkpoint job `id` keeps for its next attempt to resume from (its size and
        time are on `status(id).checkpoint`), or None: it never saved one, it succeeded, a
        retry with `fresh` dropped it, or the job is gone. With keys, opened when sealed."""
        data = self._drive(core.checkpoint(self._proto, id))
        return core.opened_bytes(self.keys, id, "checkpoint", data)

    def queues(self) -> List[QueueInfo]:
        """Every known function's queue: jobs per state, live workers, paused."""
        return self._drive(core.queues(self._proto))

    # --- function settings and groups ---

    def config(self, function: str) -> FunctionConfig:
        """`function`'s settings, shared by all workers (None where it has none)."""
        return self._drive(core.config(self._proto, function))

    def configure(
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
        """Changes `function`'s settings, shared by all workers (idle workers see the change
        at once), and returns them afterwards. A setting left out is not changed; None
        clears it. `paused` True: workers lease none of its jobs (enqueueing goes on).
        `concurrency`: the most of its jobs running at once; `rate_limit`: (leases,
        interval), the interval in seconds or a timedelta; `keep_finished`: the most
        finished jobs kept. `group_concurrency` and `group_rate_limit` are the limits of
        each of its groups, unless a group has its own (`configure_group`); a group
        concurrency of 1 makes each group a sequence. `min_replicas` (1 to 16): every
        client's enqueue of its jobs, and every worker's completion of them, is confirmed
        by that many replicas (a client's own `min_replicas` may ask for more). `encrypt`
        True: it stores only encrypted input (an enqueue without the key file is refused;
        False takes plain input again). Raises BadInput, having written nothing, for a bad
        value (0 is refused: pause instead, or None to ask for no replicas)."""
        args = core.settings_args(paused=paused, concurrency=concurrency,
                                  rate_limit=rate_limit, keep_finished=keep_finished,
                                  group_concurrency=group_concurrency,
                                  group_rate_limit=group_rate_limit,
                                  min_replicas=min_replicas, encrypt=encrypt)
        return self._drive(core.configure(self._proto, self._state, function, args))

    def configure_group(
        self,
        function: str,
        group: str,
        *,
        concurrency: core.Count = core.KEEP,
        rate_limit: core.Rate = core.KEEP,
        paused: Optional[bool] = None,
    ) -> GroupConfig:
        """Changes the own settings of `group` of `function` (idle workers see the change at
        once) and returns them afterwards. A setting left out is not changed; None clears
        it (the function's `group_concurrency` or `group_rate_limit` applies again).
        `concurrency` 1 makes the group a sequence: its jobs run one at a time, in order.
        `paused` True: workers lease none of its jobs (the other groups go on). Raises
        BadInput, having written nothing, for a bad group key or value."""
        core.check_group(group)
        args = core.group_args(group, concurrency=concurrency, rate_limit=rate_limit,
                               paused=paused)
        return self._drive(core.configure_group(self._proto, self._state, function, group,
                                                args))

    def groups(self, function: str, limit: int = 20,
               group: Optional[str] = None) -> GroupsOverview:
        """The groups of `function`, the deepest (most ready jobs) first: at most `limit`
        of them (1 to 1000), or `group` alone. Each has its ready jobs, its jobs holding a
        slot (running), its own settings and until when it waits for its rate window."""
        return self._drive(core.groups(self._proto, function, limit, group))

    # --- flows ---

    def submit_flow(self, document: FlowDocument, *, traceparent: Optional[str] = None,
                    tracestate: Optional[str] = None) -> SubmittedFlow:
        """Submits a flow: named jobs of any functions and the edges between them, given as
        the flow document the HTTP API and the CLI read::

            {"name": "album",
             "jobs": {"a": {"function": "reverse", "input": "abc"},
                      "b": {"function": "join",
                            "after": ["a", {"job": "c", "on_failure": "ignore"}]},
                      "c": {"function": "reverse", "input_json": {"n": 2}}}}

        A job takes `function`, its input (`input` text, `input_base64` or `input_json`),
        `priority`, `delay_ms`, `at_ms`, `attempts`, `timeout_ms`, `retention_ms`,
        `failed_retention_ms`, `tags`, `group`, and `after`: names of jobs of the flow, or ids of
        jobs outside it, each a string or {"job": ..., "on_failure": "cancel" | "ignore" |
        "continue"}. The whole graph is checked first (names, unknown jobs, cycles, at most
        10,000 jobs, every job's options): BadInput, with nothing written, names what is
        wrong. `traceparent` and `tracestate` are the trace context every job of the flow
        carries (as `enqueue`'s; without them, each write's send span's). Returns the flow's
        id and each job's id by name."""
        trace = core.check_trace(traceparent, tracestate)
        return self._drive(core.submit_flow(self._proto, self._state, document, trace))

    def flow(self, id: int) -> FlowStatus:
        """Flow `id` and how each of its jobs stands (NotFound when there is no such flow).
        With keys, a job's sealed error is opened and a sealed output's size is its size
        opened; without, a sealed error says it is sealed."""
        return self._drive(core.opened_flow_status(self._proto, self.keys, id))

    def cancel_flow(self, id: int) -> int:
        """Cancels every unfinished job of flow `id` (as `cancel`: a running one is asked
        to stop). Returns how many were unfinished."""
        return self._drive(core.cancel_flow(self._proto, id))

    def retry_flow(self, id: int) -> List[str]:
        """Runs flow `id`'s failed and cancelled jobs again, every one after those it waits
        on; succeeded jobs keep their outputs. Returns the ids of the jobs run again."""
        return self._drive(core.retry_flow(self._proto, id))

    def wait_flow(self, id: int, timeout: Optional[Seconds] = None) -> FlowStatus:
        """Waits until every job of flow `id` has ended (or is gone), at most `timeout`
        (WaitTimeout after it; the jobs go on), and returns how the flow stands then. A
        job that failed or was cancelled raises nothing: look at the states."""
        seconds = core.timeout_seconds(timeout)
        deadline = None if seconds is None else time.monotonic() + seconds
        while True:
            status = self.flow(id)
            pending = [job.id for job in status.jobs if not job.ended]
            if not pending:
                return status
            left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            try:
                self.wait(pending, left, check=False)
            except NotFound:
                continue  # forgotten meanwhile: read the flow again
            except WaitTimeout as e:
                raise WaitTimeout(f"gave up waiting for flow {id} after {timeout}s; its jobs "
                                  "go on", e.ids) from None

    # --- batches ---

    def open_batch(self, name: str = "", *, on_success: Optional[CallbackSpec] = None,
                   on_complete: Optional[CallbackSpec] = None) -> str:
        """Opens a batch: jobs are added with `add_to_batch` until `close_batch`. Once it is
        closed, a job of `on_success`'s function is enqueued when every job has succeeded,
        and one of `on_complete`'s when all have ended, however (exactly one of each); each
        callback's input is the batch's outcome as JSON (see `Callback`). Returns its id
        (16 hex digits). BadInput for a bad name or callback, nothing written."""
        return self._drive(core.open_batch(self._proto, name, on_success, on_complete))

    def add_to_batch(self, id: str, jobs: Sequence[BatchJob]) -> List[str]:
        """Adds jobs of any functions to open batch `id`, each (function, input) or
        (function, input, options dict). Every job is checked first, and what the queue's
        state could refuse (`at` passed, a dependency gone, failed or cancelled): BadInput
        (or Conflict), nothing written. The batch counts the jobs before they are written,
        so none ends uncounted; then each function's jobs are written in one call. NotFound
        when there is no such batch, Conflict when it is closed. Returns the jobs' ids, in
        order."""
        checked = core.batch_jobs(jobs)
        return self._drive(core.add_to_batch(self._proto, self._state, id, checked))

    def close_batch(self, id: str) -> None:
        """Closes batch `id` (NotFound when there is no such batch; closing it again changes
        nothing): no job can be added any more, and its callbacks are enqueued once all its
        jobs have ended (now, if they have)."""
        self._drive(core.close_batch(self._proto, id))

    def batch(self, jobs: Sequence[BatchJob], *, name: str = "",
              on_success: Optional[CallbackSpec] = None,
              on_complete: Optional[CallbackSpec] = None) -> SubmittedBatch:
        """Opens a batch, adds `jobs` and closes it (see `open_batch` and `add_to_batch`):
        the usual way. Every job is checked before the batch is opened. Returns the batch's
        id and its jobs' ids."""
        checked = core.batch_jobs(jobs)
        return self._drive(core.batch(self._proto, self._state, checked, name, on_success,
                                      on_complete))

    def batch_status(self, id: str) -> BatchStatus:
        """How batch `id` stands: open, total, pending, succeeded, failed, cancelled, the
        failed and cancelled jobs' ids, each callback (None, `due` or its job's id), when it
        opened and ended (NotFound when there is no such batch)."""
        return self._drive(core.batch_status(self._proto, id))

    # A str is a Sequence[str] too: the overloads overlap, and the first (one id) wins.
    @overload
    def wait(self, ids: str, timeout: Optional[Seconds] = None,  # type: ignore[overload-overlap]
             on_progress: Optional[core.ProgressCallback] = None, *, check: bool = True) -> Job: ...

    @overload
    def wait(self, ids: Sequence[str], timeout: Optional[Seconds] = None,
             on_progress: Optional[core.ProgressCallback] = None, *,
             check: bool = True) -> List[Job]: ...

    def wait(self, ids: Union[str, Sequence[str]], timeout: Optional[Seconds] = None,
             on_progress: Optional[core.ProgressCallback] = None, *,
             check: bool = True) -> Union[Job, List[Job]]:
        """Waits until job `ids` (or every job of a list) has ended and returns its final
        status (a list for a list). Progress reports go to `on_progress(Progress)` in order.
        Raises WaitTimeout after `timeout` (the jobs go on); with `check` (the default)
        raises JobFailed when a job failed, else JobCancelled when one was cancelled (the
        final statuses are on the error). All waits of a client, in any thread, share one
        subscription. Each job is read first with `wg2_watch`, which marks it as waited on:
        its `finish` event then carries its status (and its output, when small and text),
        which the wait returns without reading the job again. With keys, the statuses are
        opened as `status` opens them."""
        id_list, many = core.normalize_ids(ids)
        seconds = core.timeout_seconds(timeout)
        sink, hearing = self._listener.watch(id_list)

        def receive(wait: float) -> Any:
            try:
                return sink.get(timeout=max(wait, 0))
            except queue.Empty:
                return None

        try:
            jobs = self._drive(core.wait(self._proto, id_list, seconds, on_progress, hearing), receive)
        finally:
            self._listener.unwatch(id_list, sink)
        jobs = [core.opened_job(self.keys, job) for job in jobs]
        if check:
            core.outcome(jobs, many)
        return jobs if many else jobs[0]

    def events(self, function: Optional[str] = None) -> EventStream:
        """The events of `function` (of every function when None) as they are published."""
        if function is not None:
            core.check_function(function)
        try:
            return EventStream(self, function)
        except (rx.RedisError, OSError) as e:
            raise core.map_error(e, self._url) from None

    def close(self) -> None:
        if self._watch is not None:
            self._watch.close()
        self._listener.close()
        self._conn.close()
        if self._sentinels is not None:
            for sentinel in self._sentinels.sentinels:
                sentinel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


__all__ = ["BatchJob", "CallbackSpec", "Client", "EventStream", "FlowDocument", "Policy",
           "WasmgearError"]
