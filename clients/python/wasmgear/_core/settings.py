"""A function's settings and its groups, as the Rust client has them (crates/client/src/
admin.rs, `Client::configure` and `config`; groups.rs, `configure_group` and `groups`).

A function's settings are shared by all workers: `paused`, `concurrency`, `rate_limit`,
`keep_finished`, the default limits of each of its groups, `group_concurrency` and
`group_rate_limit`, `min_replicas` (how many replicas confirm each write of its jobs), and
`encrypt` (it stores only encrypted input: see `wasmgear.crypto`).
A job enqueued with a `group` (a tenant, customer or document key) is leased round robin
with the other groups' jobs, each group within its own limits (set with `configure_group`,
over the function's defaults) and paused on its own if need be. Every value is checked
before anything is sent; a setting given as None is cleared (the default applies again),
one left out (KEEP) is not changed."""

from __future__ import annotations

import enum
from datetime import timedelta
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

from ..errors import BadInput, ProtocolError
from ..models import FunctionConfig, GroupConfig, GroupInfo, GroupsOverview, RateLimit
from .base import Cmd, Gen, Protocol, check_function, limits, text
from .calls import ClientState, call
from .operations import register
from .options import MAX_WHOLE, _duration_ms, check_flag, check_group

#: The most groups one `groups` call lists (crates/proto/src/limits.rs, MAX_GROUPS_LISTED;
#: the manifest does not carry it).
MAX_GROUPS_LISTED = 1000


class Keep(enum.Enum):
    """The type of KEEP."""

    KEEP = "keep"


#: The default of each setting of `configure` and `configure_group`: leave it as it is
#: (None clears it).
KEEP = Keep.KEEP

#: A count setting as given: a whole number, None (clear it) or KEEP.
Count = Union[int, None, Keep]
#: A rate limit as given: (leases, interval) with the interval in seconds or a timedelta,
#: None (clear it) or KEEP.
Rate = Union[Tuple[int, Any], RateLimit, None, Keep]


def _count(name: str, value: Any, zero: str) -> str:
    """A count setting's value as sent ('' clears it); `zero` says why 0 is refused."""
    if value is None:
        return ""
    if not isinstance(value, int) or isinstance(value, bool):
        raise BadInput(f"{name} {value!r} is not a whole number (give None to clear it)")
    if value == 0:
        raise BadInput(zero)
    if not 1 <= value <= MAX_WHOLE:
        raise BadInput(f"{name} {value} is out of range 1..={MAX_WHOLE}")
    return str(value)


def _rate(limit_name: str, interval_name: str, rate: Any) -> List[str]:
    """A rate limit's two settings and their values ('' clears them)."""
    if rate is None:
        return [limit_name, "", interval_name, ""]
    if not isinstance(rate, (tuple, list)) or len(rate) != 2:
        raise BadInput(f"{limit_name} {rate!r} is not a rate limit: give (leases, interval), "
                       "the interval in seconds or a timedelta (or None to clear it)")
    leases, interval = rate
    if not isinstance(leases, int) or isinstance(leases, bool) or not 0 <= leases <= MAX_WHOLE:
        raise BadInput(f"{limit_name} {rate!r}: {leases!r} leases is not a whole number in "
                       f"1..={MAX_WHOLE}")
    ms = _duration_ms(interval_name, interval)
    if leases == 0 or ms == 0:
        raise BadInput("a rate limit needs at least 1 job per interval of at least 1ms")
    return [limit_name, str(leases), interval_name, str(ms)]


def _paused(value: Any) -> str:
    return "1" if check_flag("paused", value) else ""


def _min_replicas(value: Any) -> str:
    """The function's `min_replicas` as sent ('' clears it): 1 to the manifest's
    `max_min_replicas`, or None."""
    if value is None:
        return ""
    most = limits().max_min_replicas
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= most:
        raise BadInput(f"min_replicas must be 1 to {most} (or None to ask for none), "
                       f"not {value!r}")
    return str(value)


def settings_args(*, paused: Optional[bool], concurrency: Any, rate_limit: Any,
                  keep_finished: Any, group_concurrency: Any,
                  group_rate_limit: Any, min_replicas: Any = KEEP,
                  encrypt: Optional[bool] = None) -> List[str]:
    """The SETTING VALUE pairs of `configure` for the settings given (not KEEP; `paused`
    and `encrypt` None are left as they are), checked as the Rust client checks them."""
    args: List[str] = []
    if paused is not None:
        args += ["paused", _paused(paused)]
    if encrypt is not None:
        args += ["encrypt", "1" if check_flag("encrypt", encrypt) else ""]
    if concurrency is not KEEP:
        args += ["concurrency", _count(
            "concurrency", concurrency,
            "a concurrency cap of 0 would stop the queue; pause it instead (paused=True)")]
    if rate_limit is not KEEP:
        args += _rate("rate_limit", "rate_interval_ms", rate_limit)
    if keep_finished is not KEEP:
        args += ["keep_finished", _count(
            "keep_finished", keep_finished,
            "keep at least 1 finished job (results would vanish at once)")]
    if group_concurrency is not KEEP:
        args += ["group_concurrency", _count(
            "group_concurrency", group_concurrency,
            "a group concurrency of 0 would stop every group; pause the function or a group "
            "instead")]
    if group_rate_limit is not KEEP:
        args += _rate("group_rate_limit", "group_rate_interval_ms", group_rate_limit)
    if min_replicas is not KEEP:
        args += ["min_replicas", _min_replicas(min_replicas)]
    return args


def group_args(group: str, *, concurrency: Any, rate_limit: Any,
               paused: Optional[bool]) -> List[str]:
    """The SETTING VALUE pairs of `configure_group` for the settings given, checked."""
    args: List[str] = []
    if paused is not None:
        args += ["paused", _paused(paused)]
    if concurrency is not KEEP:
        args += ["concurrency", _count(
            "concurrency", concurrency,
            f"a concurrency of 0 would stop group {group!r}; pause it instead")]
    if rate_limit is not KEEP:
        args += _rate("rate_limit", "rate_interval_ms", rate_limit)
    return args


def _number(value: Any) -> Optional[int]:
    """A setting's text as a whole number, or None."""
    if value is None:
        return None
    try:
        return int(text(value))
    except ValueError:
        return None


def _rate_of(leases: Optional[int], ms: Optional[int]) -> Optional[RateLimit]:
    if leases is None or ms is None:
        return None
    return RateLimit(leases, timedelta(milliseconds=ms))


def read_config(all: Mapping[str, Any]) -> FunctionConfig:
    """A function's settings from its `config` hash (as the Rust client's `read_config`)."""
    def number(name: str) -> Optional[int]:
        return _number(all.get(name))

    return FunctionConfig(
        paused=all.get("paused") is not None and text(all["paused"]) == "1",
        concurrency=number("concurrency"),
        rate_limit=_rate_of(number("rate_limit"), number("rate_interval_ms")),
        keep_finished=number("keep_finished"),
        group_concurrency=number("group_concurrency"),
        group_rate_limit=_rate_of(number("group_rate_limit"), number("group_rate_interval_ms")),
        min_replicas=number("min_replicas"),
        encrypt=all.get("encrypt") is not None and text(all["encrypt"]) == "1",
    )


def _as_map(reply: Any) -> Dict[str, Any]:
    """A hash as a reply gives it: a dict (redis-py's HGETALL) or a flat list."""
    if isinstance(reply, dict):
        return {text(k): v for k, v in reply.items()}
    flat = list(reply or [])
    return {text(flat[i]): flat[i + 1] for i in range(0, len(flat) - 1, 2)}


def group_config(own: str) -> GroupConfig:
    """A group's own settings from the queue's text `CONCURRENCY|RATE_LIMIT|RATE_INTERVAL_MS|
    PAUSED` ('' where it has none; a rate without its interval is none)."""
    parts = own.split("|")

    def number(i: int) -> Optional[int]:
        return _number(parts[i]) if i < len(parts) and parts[i] else None

    return GroupConfig(
        concurrency=number(0),
        rate_limit=_rate_of(number(1), number(2)),
        paused=len(parts) > 3 and parts[3] == "1",
    )


def configure(proto: Protocol, state: ClientState, function: str,
              args: List[str]) -> Gen[FunctionConfig]:
    """Changes `function`'s settings (`args`, from `settings_args`); returns them afterwards."""
    check_function(function)
    yield from register(proto, state, function)
    reply = yield from call(proto.fcall("configure", function, *args))
    return read_config(_as_map(reply))


def config(proto: Protocol, function: str) -> Gen[FunctionConfig]:
    """`function`'s settings."""
    check_function(function)
    reply = yield Cmd(("HGETALL", proto.key(function, "config")))
    return read_config(_as_map(reply))


def configure_group(proto: Protocol, state: ClientState, function: str, group: str,
                    args: List[str]) -> Gen[GroupConfig]:
    """Changes group `group`'s own settings (`args`, from `group_args`); returns them
    afterwards."""
    check_function(function)
    check_group(group)
    yield from register(proto, state, function)
    reply = yield from call(proto.fcall("configure_group", function, group, *args))
    own = [text(x) for x in reply or []]
    if len(own) != 4:
        raise ProtocolError(f"configure_group answered {len(own)} settings, not 4", reply)
    return group_config("|".join(own))


def check_groups_limit(limit: Any) -> int:
    if (not isinstance(limit, int) or isinstance(limit, bool)
            or not 1 <= limit <= MAX_GROUPS_LISTED):
        raise BadInput(f"list 1 to {MAX_GROUPS_LISTED} groups, not {limit!r}")
    return limit


def groups(proto: Protocol, function: str, limit: int,
           group: Optional[str]) -> Gen[GroupsOverview]:
    """`function`'s groups, the deepest first: at most `limit`, or `group` alone."""
    check_function(function)
    check_groups_limit(limit)
    if group is not None:
        check_group(group)
    reply = yield from call(proto.fcall("groups", function, limit, group or ""))
    try:
        count, truncated, ungrouped, rows = reply
        listed = []
        for row in rows or []:
            name, ready, running, own, waits = row
            listed.append(GroupInfo(
                group=text(name),
                ready=int(ready),
                running=int(running),
                config=group_config(text(own)),
                rate_limited_until_ms=int(waits) if int(waits) > 0 else None,
            ))
    except (TypeError, ValueError) as e:
        raise ProtocolError(f"groups answered what this client cannot read ({e})", reply) from None
    return GroupsOverview(groups=int(count), truncated=int(truncated) == 1,
                          ungrouped_ready=int(ungrouped), listed=listed)
