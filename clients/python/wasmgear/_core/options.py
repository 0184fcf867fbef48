"""One job's input and options, checked the way the Rust client checks them
(`EnqueueOptions::validate`), against the manifest's limits, before anything is sent."""

from __future__ import annotations

import time
import unicodedata
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple

from ..errors import BadInput, Conflict
from . import propagation
from .base import limits, parse_job_id

OPTION_NAMES = (
    "priority",
    "delay",
    "at",
    "attempts",
    "timeout",
    "retention",
    "failed_retention",
    "uniq",
    "tags",
    "after",
    "on_failure",
    "group",
    "uniq_for",
    "debounce",
    "throttle",
    "expires_in",
    "expires_at",
    "traceparent",
    "tracestate",
)

#: The largest count the queue takes (the library's MAX_WHOLE, 2^53 - 1).
MAX_WHOLE = 2**53 - 1

#: The failure policies of a dependency edge (PROTOCOL.md, "Failure policies"): `cancel` (the
#: default: the job is cancelled), `ignore` and `continue`, and the named option that sends
#: each of the last two beside `after`.
POLICIES = ("cancel", "ignore", "continue")
POLICY_OPTIONS = {"ignore": "after_ignore", "continue": "after_continue"}

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MS = timedelta(milliseconds=1)


@dataclass(frozen=True)
class JobSpec:
    """One job, checked: its input and its named options as the script takes them."""

    input: bytes
    named: Tuple[Tuple[str, str], ...]
    after: Tuple[str, ...]
    at_ms: Optional[int]
    #: The dependencies whose failure the job tolerates (`ignore` or `continue`): the
    #: client does not check them before enqueueing.
    tolerated: Tuple[str, ...] = ()


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_flag(name: str, value: Any) -> bool:
    """`value` if it is True or False (not 1, nor "yes"), else BadInput naming `name`."""
    if not isinstance(value, bool):
        raise BadInput(f"{name} {value!r} is neither True nor False")
    return value


def _duration_ms(name: str, value: Any) -> int:
    """A duration given as seconds (int or float) or a timedelta, in ms (rounded down; a
    timedelta exactly)."""
    if isinstance(value, timedelta):
        if value < timedelta(0):
            raise BadInput(f"{name} {value!r} is negative: give 0 seconds or more")
        ms = value // _MS
        if ms > limits().max_duration_ms:
            raise BadInput(f"{name} {value!r} is longer than 10 years")
        return ms
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    else:
        raise BadInput(
            f"{name} {value!r} is not a duration: give seconds (a number) or a datetime.timedelta"
        )
    if seconds != seconds or seconds < 0:  # NaN or negative
        raise BadInput(f"{name} {value!r} is negative: give 0 seconds or more")
    if seconds * 1000 > limits().max_duration_ms:
        raise BadInput(f"{name} {value!r} is longer than 10 years")
    return int(seconds * 1000)


def _check_key(what: str, key: Any) -> str:
    if not isinstance(key, str):
        raise BadInput(f"{what} {key!r} is not a string")
    size = len(key.encode("utf-8"))
    if size == 0 or size > limits().max_key_bytes:
        raise BadInput(f"{what} {key!r} must be 1 to {limits().max_key_bytes} bytes long")
    if any(unicodedata.category(c) == "Cc" for c in key):
        raise BadInput(f"{what} {key!r} contains a control character")
    return key


def check_group(group: Any) -> str:
    """`group` if it is a group key (a tenant, customer or document key), else BadInput, as
    the Rust client's `check_group`: 1 to `max_key_bytes` bytes of printable ASCII but
    space, `"`, `\\` and `|` (the queue keeps it as is in its records and indexes)."""
    if not isinstance(group, str):
        raise BadInput(f"group {group!r} is not a string")
    size = len(group.encode("utf-8"))
    if size == 0 or size > limits().max_key_bytes:
        raise BadInput(f"group {group!r} must be 1 to {limits().max_key_bytes} bytes long")
    for c in group:
        if not "!" <= c <= "~" or c in "\"\\|":
            raise BadInput(
                f"group {group!r} holds {c!r}: a group key is printable ASCII without spaces, "
                "'\"', '\\' or '|'"
            )
    return group


def _time_ms(name: str, value: Any) -> int:
    """A time given as a datetime (a naive one is local time) or seconds since the Unix
    epoch, in ms since the epoch."""
    if isinstance(value, datetime) and value.tzinfo is not None:
        return (value - _EPOCH) // _MS
    if isinstance(value, datetime):
        # A naive datetime is local time, as Python's datetime.timestamp() reads it.
        return int(value.timestamp() * 1000)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value == value:
        return int(value * 1000)
    raise BadInput(
        f"{name} {value!r} is not a time: give a datetime (or seconds since the Unix epoch)"
    )


def _expiry(options: Mapping[str, Any]) -> List[Tuple[str, str]]:
    """The named option of `expires_in` (1ms to 10 years) or `expires_at` (after 1970; the
    queue refuses one its clock has passed), one at most: a job not started by then ends
    `expired` and never runs."""
    expires_in, expires_at = options.get("expires_in"), options.get("expires_at")
    if expires_in is not None and expires_at is not None:
        raise BadInput("give expires_in or expires_at, not both")
    if expires_in is not None:
        ms = _duration_ms("expires_in", expires_in)
        if ms < 1:
            raise BadInput(f"expires_in {expires_in!r} is out of range 1ms..=10 years")
        return [("expires_in", str(ms))]
    if expires_at is not None:
        ms = _time_ms("expires_at", expires_at)
        if not 1 <= ms <= MAX_WHOLE:
            raise BadInput(f"expires_at {expires_at!r} is not after 1970")
        return [("expires_at", str(ms))]
    return []


def _input_bytes(value: Any) -> bytes:
    if isinstance(value, str):
        data = value.encode("utf-8")
    elif isinstance(value, (bytes, bytearray, memoryview)):
        data = bytes(value)
    else:
        raise BadInput(f"input {type(value).__name__} is neither bytes nor str")
    if len(data) > limits().max_input_bytes:
        raise BadInput(
            f"input of {len(data)} bytes is larger than the limit of {limits().max_input_bytes} bytes"
        )
    return data


def _window_ms(name: str, value: Any) -> int:
    """A window of `uniq_for`, `debounce` or `throttle`, in ms: 1ms to 10 years."""
    ms = _duration_ms(name, value)
    if ms < 1:
        raise BadInput(f"{name} {value!r} is out of range 1ms..=10 years")
    return ms


def _dedup(options: Mapping[str, Any], uniq: bool, delayed: bool) -> List[Tuple[str, str]]:
    """The named options of `uniq_for`, `debounce` and `throttle`, checked as the Rust
    client's `check_dedup`: each with `uniq` (the key it works on), one at most, within
    bounds; `debounce` without a delay or time to run at (it is the job's delay)."""
    given = [name for name in ("uniq_for", "debounce", "throttle")
             if options.get(name) is not None]
    if not given:
        return []
    if not uniq:
        raise BadInput(f"{given[0]} works on a uniq key: give uniq too")
    if len(given) > 1:
        raise BadInput(f"give one of uniq_for, debounce and throttle, not "
                       f"{' and '.join(given)}")
    name = given[0]
    value = options[name]
    if name == "uniq_for":
        return [("uniq_for", str(_window_ms("uniq_for", value)))]
    if name == "debounce":
        ms = _window_ms("debounce", value)
        if delayed:
            raise BadInput("debounce is the job's delay: give no delay or time to run at "
                           "(at) with it")
        return [("debounce", str(ms))]
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise BadInput(f"throttle {value!r} is not a throttle: give (jobs, period), the "
                       "period in seconds or a timedelta (or a RateLimit)")
    jobs, period = value
    if not _is_int(jobs) or not 1 <= jobs <= MAX_WHOLE:
        raise BadInput(f"throttle {value!r}: {jobs!r} jobs is not a whole number in "
                       f"1..={MAX_WHOLE}")
    return [("throttle", str(jobs)), ("throttle_ms", str(_window_ms("throttle period", period)))]


def job_spec(input: Any, options: Mapping[str, Any], now_ms: Optional[int] = None) -> JobSpec:
    """Checks one job's input and options the way the Rust client does
    (`EnqueueOptions::validate`, same limits), naming the option at fault; builds the named
    options that differ from the defaults, in the Rust client's order."""
    unknown = [name for name in options if name not in OPTION_NAMES]
    if unknown:
        raise BadInput(
            f"unknown option {unknown[0]!r}: the options are {', '.join(OPTION_NAMES)}"
        )
    data = _input_bytes(input)
    named: List[Tuple[str, str]] = []

    priority = options.get("priority", 0)
    if priority is None:
        priority = 0
    if isinstance(priority, str):
        if priority in limits().priority_names:
            priority = limits().priority_names[priority]
        else:
            try:
                priority = int(priority, 10)
            except ValueError:
                raise BadInput(
                    f"priority {priority!r} is neither low, normal, high nor a number"
                ) from None
    if not _is_int(priority):
        raise BadInput(f"priority {priority!r} is neither low, normal, high nor a whole number")
    if not limits().min_priority <= priority <= limits().max_priority:
        raise BadInput(f"priority {priority} is out of range {limits().min_priority}..={limits().max_priority}")
    if priority != 0:
        named.append(("priority", str(priority)))

    attempts = options.get("attempts")
    if attempts is not None:
        if not _is_int(attempts) or not 1 <= attempts <= limits().max_attempts:
            raise BadInput(f"attempts {attempts!r} is out of range 1..={limits().max_attempts}")
        named.append(("attempts", str(attempts)))

    timeout = options.get("timeout")
    if timeout is not None:
        ms = _duration_ms("timeout", timeout)
        if isinstance(timeout, timedelta):
            positive = timeout > timedelta(0)
        else:
            positive = timeout > 0
        if not positive or ms > limits().max_duration_ms:
            raise BadInput(f"timeout {timeout!r} is out of range 1ms..=10 years")
        named.append(("timeout", str(max(ms, 1))))

    retention = options.get("retention")
    if retention is not None:
        ms = _duration_ms("retention", retention)
        if ms < limits().min_retention_ms:
            raise BadInput(f"retention {retention!r} is out of range 1s..=10 years")
        if ms != limits().default_retention_ms:
            named.append(("retention", str(ms)))

    failed_retention = options.get("failed_retention")
    if failed_retention is not None:
        ms = _duration_ms("failed_retention", failed_retention)
        if ms != limits().default_failed_retention_ms:
            named.append(("failed_retention", str(ms)))

    delay = options.get("delay")
    delay_ms = 0 if delay is None else _duration_ms("delay", delay)
    at = options.get("at")
    at_ms: Optional[int] = None
    if at is not None:
        if delay_ms > 0:
            raise BadInput("give a delay or a time to run at (at), not both")
        at_ms = _time_ms("at", at)
        now = int(time.time() * 1000) if now_ms is None else now_ms
        if at_ms <= 0:
            raise BadInput(f"at {at!r}: the time to run at is not after 1970")
        # Too far ahead by this clock: a conflict with the time, as a time already passed
        # by the queue's clock is.
        if at_ms > now + limits().max_duration_ms:
            raise Conflict(f"at {at!r}: the time to run at is more than 10 years ahead; give a nearer one")
    if delay_ms > 0:
        named.append(("delay", str(delay_ms)))
    if at_ms is not None:
        named.append(("at", str(at_ms)))

    uniq = options.get("uniq")
    if uniq is not None:
        named.append(("uniq", _check_key("uniq key", uniq)))

    tags = options.get("tags") or ()
    if isinstance(tags, (str, bytes)):
        raise BadInput(f"tags {tags!r} must be a list of strings, not one string")
    tags = list(tags)
    if len(tags) > limits().max_tags:
        raise BadInput(f"tags: {len(tags)} tags are more than the limit of {limits().max_tags}")
    for tag in tags:
        named.append(("tag", _check_key("tag", tag)))

    after = options.get("after") or ()
    if isinstance(after, (str, bytes)):
        raise BadInput(f"after {after!r} must be a list of job ids, not one string")
    after = list(after)
    if len(after) > limits().max_dependencies:
        raise BadInput(
            f"after: {len(after)} dependencies are more than the limit of {limits().max_dependencies}"
        )
    ids = []
    for dependency in after:
        function, number = parse_job_id(dependency, "dependency (after)")
        ids.append(f"{function}:{number}")
        named.append(("after", ids[-1]))

    on_failure = options.get("on_failure") or {}
    if not isinstance(on_failure, Mapping):
        raise BadInput(
            f"on_failure {on_failure!r} must map dependency ids to cancel, ignore or continue"
        )
    policies: Dict[str, str] = {}
    known = set(ids)
    for dependency, policy in on_failure.items():
        function, number = parse_job_id(dependency, "dependency (on_failure)")
        key = f"{function}:{number}"
        if key not in known:
            raise BadInput(
                f"on_failure names {key}, which is not a dependency (add it to after)"
            )
        if policy not in POLICIES:
            raise BadInput(
                f"on_failure {policy!r} (of {key}) is none of cancel, ignore and continue"
            )
        policies[key] = policy
    # Beside `after`, in its order: the policies other than the default.
    tolerated = [i for i in dict.fromkeys(ids) if policies.get(i, "cancel") != "cancel"]
    for dependency in tolerated:
        named.append((POLICY_OPTIONS[policies[dependency]], dependency))

    group = options.get("group")
    if group is not None:
        named.append(("group", check_group(group)))
    named += _dedup(options, uniq is not None, delay_ms > 0 or at_ms is not None)
    named += _expiry(options)
    # The job's own trace context; without one, the enqueue's (see `propagation`).
    named += propagation.check_trace(options.get("traceparent"), options.get("tracestate"))
    return JobSpec(data, tuple(named), tuple(ids), at_ms, tuple(tolerated))


def job_specs(
    items: Iterable[Any], defaults: Mapping[str, Any]
) -> List[JobSpec]:
    """Checks every job of a batch (each an input, or an (input, options) pair whose options
    add to `defaults`), naming the job at fault in a batch of several."""
    items = list(items)
    specs = []
    for i, item in enumerate(items):
        if isinstance(item, tuple):
            if len(item) != 2 or not isinstance(item[1], Mapping):
                raise BadInput(
                    f"job {i + 1} of the batch: give an input, or a pair (input, options dict)"
                )
            input, own = item
            options = {**defaults, **own}
        else:
            input, options = item, dict(defaults)
        try:
            specs.append(job_spec(input, options))
        except BadInput as e:
            if len(items) > 1:
                raise BadInput(f"job {i + 1} of the batch: {e}") from None
            raise
    return specs