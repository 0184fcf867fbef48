"""Acknowledged means replicated, when asked (the Rust client's crates/client/src/
replication.rs).

Redis replicates asynchronously: a primary that fails right after a write may take it with
it, and a replica promoted in its place never saw it. A write that must survive that is
followed, on the same connection, by `WAIT N TIMEOUT`, which answers once N replicas have
confirmed every write the connection made (or the timeout passed, with how many did).
`MinReplicas` is how many a client asks for; a function's own `min_replicas` setting (which
the enqueue script's reply carries) can ask for more.

A write whose replicas fall short is sent again with its call id: on the same primary it is
answered as the first time and written once; on a primary promoted without it, it is
written there. When the replicas still fall short the caller gets NotReplicated."""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Callable, Tuple

from ..errors import BadInput, NotReplicated
from .base import Cmd, Gen, MinReplicas, Pinned, limits, log
from .calls import call_retrying

#: How many times a write of jobs is sent (with its call id) before replicas that fall
#: short are reported.
CONFIRM_ATTEMPTS = 3


def min_replicas(count: Any, timeout: Any = None) -> MinReplicas:
    """`count` replicas (0 to the manifest's `max_min_replicas`), waited for at most
    `timeout` (seconds or a timedelta; more than 0 and less than the response timeout; None:
    the manifest's `min_replicas_timeout_ms`) per send; else BadInput."""
    most = limits().max_min_replicas
    if not isinstance(count, int) or isinstance(count, bool) or not 0 <= count <= most:
        raise BadInput(f"min_replicas must be 0 to {most}, not {count!r}")
    if timeout is None:
        return MinReplicas(count, limits().min_replicas_timeout_ms)
    if isinstance(timeout, timedelta):
        seconds = timeout.total_seconds()
    elif isinstance(timeout, (int, float)) and not isinstance(timeout, bool):
        seconds = float(timeout)
    else:
        raise BadInput(f"the min_replicas timeout {timeout!r} is not a number of seconds or "
                       "a timedelta")
    if not seconds > 0:
        raise BadInput("the min_replicas timeout must be at least 1 ms (WAIT with 0 waits "
                       "forever)")
    ceiling = limits().response_timeout
    if seconds >= ceiling:
        raise BadInput(f"the min_replicas timeout must be under {ceiling:g} s, the client's "
                       f"response timeout (WAIT holds the reply that long), not {seconds:g} s")
    return MinReplicas(count, max(1, int(seconds * 1000)))


def invoke_confirmed(cmd: Cmd, what: Callable[[], str], min: MinReplicas,
                     function_setting: Callable[[Any], int]) -> Gen[Any]:
    """Sends `cmd` (which carries a call id) and has it confirmed by `min` replicas, or by as
    many as the function's own setting asks (`function_setting` reads it from the reply),
    whichever is more: the call and `WAIT wanted timeout` go in one pipeline on the
    connection the operation holds for it. `what` names the write in the NotReplicated
    raised when they fall short after CONFIRM_ATTEMPTS sends."""
    wanted = min.count
    confirmed = 0
    reply: Any = None
    for attempt in range(CONFIRM_ATTEMPTS):
        if wanted == 0:
            replies = yield from call_retrying(Pinned((cmd,)))
            reply = replies[0]
            wanted = function_setting(reply)
            if wanted == 0:
                return reply
            # The function asks for replicas: the call again (answered from what it
            # remembered) with its WAIT.
            continue
        reply, replicas = yield from call_retrying(
            Pinned((cmd, Cmd(("WAIT", wanted, min.timeout_ms)))))
        wanted = max(wanted, function_setting(reply))
        if int(replicas) >= wanted:
            return reply
        confirmed = int(replicas)
        log.warning("replicas fell short of confirming %s (%d of %d, attempt %d); sending it "
                    "again with its call id", what(), confirmed, wanted, attempt + 1)
    error = NotReplicated(what(), wanted, confirmed, min.timeout_ms)
    error.reply = reply  # the write's reply, for the caller to say what was written
    raise error


def reply_setting(reply: Any) -> int:
    """The function's `min_replicas` as the enqueue script's reply carries it (its 4th
    element; 0 when unset, or from a library that has none)."""
    try:
        return max(int(reply[3]), 0)
    except (IndexError, TypeError, ValueError):
        return 0


__all__: Tuple[str, ...] = ("CONFIRM_ATTEMPTS", "MinReplicas", "invoke_confirmed",
                            "min_replicas", "reply_setting")
