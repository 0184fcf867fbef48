"""Sending calls: Redis errors as this package's, which failures may pass, sending a call
again after one, loading the library, and what one client remembers between calls."""

from __future__ import annotations

import random
import threading
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Set, Union

from redis import exceptions as rx

from ..errors import (BadInput, Conflict, EncryptionError, NotFound, ProtocolError, Unreachable,
                      WasmgearError)
from .base import Cmd, Gen, LoadLibrary, MinReplicas, Pinned, Sleep, limits, log
from .sentinel import NoPrimaryFound, wants_password

if TYPE_CHECKING:  # pragma: no cover
    from ..crypto import KeyRing

#: How often an `enqueue` that failed in a way that may pass is sent again (same call id).
RETRIES = 6


def is_transient(error: BaseException) -> bool:
    """Whether a failed command may succeed when sent again: the connection dropped or timed
    out, or the server is loading (not a script's error reply, not a refused password)."""
    if isinstance(error, rx.AuthenticationError):
        return False
    # MOVED/ASK reach a caller only from a Pinned send in a cluster (its driver has read the
    # slots again); redis-py follows them for the other calls.
    return isinstance(error, (rx.ConnectionError, rx.TimeoutError, rx.TryAgainError,
                              rx.ClusterDownError, rx.AskError))


def describe_connect_error(url: str, error: BaseException) -> str:
    """Why connecting failed, in words that say what to do."""
    message = str(error)
    lower = message.lower()
    if wants_password(error):
        return (f"cannot reach Redis at {url}: the server wants a password: give it in the URL "
                "(redis://:PASSWORD@HOST:PORT or redis://USER:PASSWORD@HOST:PORT)")
    if "wrongpass" in lower or "invalid password" in lower or isinstance(error, rx.AuthenticationError):
        return f"cannot reach Redis at {url}: the user or password in the URL was refused"
    if "refused" in lower:
        return f"cannot reach Redis at {url}: connection refused: is redis-server running there? ({message})"
    return (f"cannot reach Redis at {url}: {message} (is the host right, and is it Redis, with "
            "TLS if the URL says rediss://?)")


def map_error(error: BaseException, url: str = "") -> WasmgearError:
    """A Redis error as the WasmgearError the CLI would exit with."""
    if isinstance(error, WasmgearError):
        return error
    message = str(error)
    if isinstance(error, NoPrimaryFound):
        return Unreachable(f"cannot reach Redis at {url or 'the server'}: no sentinel named a "
                           f"primary that answers as one: {message}")
    if isinstance(error, (rx.ConnectionError, rx.TimeoutError, rx.AuthenticationError, OSError)):
        return Unreachable(describe_connect_error(url or "the server", error))
    if isinstance(error, rx.ResponseError):
        code, _, detail = message.partition(" ")
        if code in ("BADJOB", "BADARGS"):
            return BadInput(detail)
        if code == "CONFLICT":
            return Conflict(detail)
        if code == "ENCRYPT":
            # The function stores only encrypted input (`configure(F, encrypt=True)`): the
            # Rust client's words, naming where the key file is given.
            return EncryptionError(f"{detail} (WASMGEAR_ENCRYPTION_KEY_FILE)")
        if code == "NOJOB":
            return NotFound(detail or "no such job")
        if code in ("NOPERM", "NOAUTH", "WRONGPASS"):
            return Unreachable(f"Redis refused: {message}")
    return ProtocolError(f"Redis answered an error: {message}", error)


def backoff(attempt: int) -> float:
    """The pause before sending a call again: 50 ms, then twice as long each time (at most
    2 s), lengthened by a random part of up to as much again."""
    delay: float = min(0.05 * float(2 ** attempt), 2.0)
    return delay + random.uniform(0, delay)

# --- Calls ------------------------------------------------------------------------------


def call(cmd: Union[Cmd, Pinned]) -> Gen[Any]:
    """Sends `cmd` (a command, or commands Pinned to the operation's own connection);
    answered `Function not found` (a server flushed or restarted without the library), loads
    the library and sends it once more."""
    try:
        return (yield cmd)
    except rx.ResponseError as e:
        if "function not found" not in str(e).lower():
            raise
    yield LoadLibrary()
    return (yield cmd)


def call_retrying(cmd: Union[Cmd, Pinned]) -> Gen[Any]:
    """Sends `cmd`, which is safe to send twice (it carries a call id), again while it fails
    in a way that may pass, up to RETRIES times (PROTOCOL.md, "Lost replies")."""
    attempt = 0
    while True:
        try:
            return (yield from call(cmd))
        except rx.RedisError as e:
            if attempt >= RETRIES or not is_transient(e):
                raise
            pause = backoff(attempt)
            first = cmd.cmds[0] if isinstance(cmd, Pinned) else cmd
            log.warning("%s failed (%s); sending it again in %.0f ms with the same call id",
                        first.args[1], e, pause * 1000)
        yield Sleep(pause)
        attempt += 1


class ClientState:
    """What one client remembers between calls: the functions it has listed in the
    directory, and per function the ids of `enqueue` calls answered since its previous one
    (sent as `acked`, so the server forgets them at once). `min_replicas` is how many
    replicas must confirm its writes of jobs (see `replication`). `keys` seal the inputs it
    writes for the functions found to store only encrypted input (`sealed`), or for every
    function with `encrypt_all`, and open what it reads (see `opening`)."""

    def __init__(self, min_replicas: Optional[MinReplicas] = None,
                 keys: Optional["KeyRing"] = None, encrypt_all: bool = False) -> None:
        self.min_replicas = min_replicas or MinReplicas(0, limits().min_replicas_timeout_ms)
        self.keys = keys
        self.encrypt_all = encrypt_all and keys is not None
        self.lock = threading.Lock()
        self.registered: Set[str] = set()
        self.answered: Dict[str, List[str]] = {}
        self.sealed: Set[str] = set()

    def seals(self, function: str) -> bool:
        """Whether the inputs of `function`'s jobs are sealed: there are keys, and every input
        is, or the function was found to take only sealed ones."""
        with self.lock:
            return self.keys is not None and (self.encrypt_all or function in self.sealed)

    def note_sealed(self, function: str) -> None:
        """Remembers that `function` takes only sealed inputs (its `ENCRYPT` refusal)."""
        with self.lock:
            self.sealed.add(function)

    def take_answered(self, function: str) -> List[str]:
        with self.lock:
            return self.answered.pop(function, [])

    def give_back(self, function: str, ids: List[str]) -> None:
        with self.lock:
            self.answered.setdefault(function, [])[:0] = ids

    def note_answered(self, function: str, call_id: str) -> None:
        with self.lock:
            self.answered.setdefault(function, []).append(call_id)


def version_action(error: Optional[BaseException]) -> bool:
    """Whether the library must be loaded, from what `FCALL wg2_version 0` answered: only
    when it is missing. Another SHA is left alone: within v2, the library loaded last
    serves everyone (the workers load theirs)."""
    if error is None:
        return False
    message = str(error).lower()
    if isinstance(error, rx.ResponseError) and "function not found" in message:
        return True
    if isinstance(error, rx.ResponseError) and "unknown command" in message:
        raise ProtocolError(
            f"this Redis cannot run the wasmgear library: {error} (Redis 7.0 or newer is "
            "needed: it has Functions)"
        )
    raise error


#: What a user who may not load the library (one made by `wasmgear acl`: it may not run
#: `FUNCTION LOAD`) is told when this version's library is not there: the Rust client's words.
MAY_NOT_LOAD = (
    "the queue's library (this build's version) is not loaded on this Redis, and this Redis "
    "user may not load it (FUNCTION LOAD): run any wasmgear command once as a user who may "
    "(the default user, or the admin who made the users with `wasmgear acl`), or start a "
    "worker as one"
)


def load_ok(error: Optional[BaseException]) -> None:
    """Accepts what `FUNCTION LOAD` (without REPLACE) answered: `already exists` means another
    client loaded it first. A refusal (NOPERM: a least-privilege user) says who may load it."""
    if error is None:
        return
    if isinstance(error, rx.ResponseError):
        message = str(error).lower()
        if "already exists" in message:
            return
        if "unknown command" in message:
            raise ProtocolError(
                f"cannot load the wasmgear library: {error} (Redis 7.0 or newer is needed: it has Functions)"
            )
        if isinstance(error, rx.NoPermissionError) or "noperm" in message:
            raise ProtocolError(MAY_NOT_LOAD, error)
    raise error
