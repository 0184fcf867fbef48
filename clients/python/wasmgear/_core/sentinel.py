"""Redis Sentinel URLs, as the Rust client reads them (crates/client/src/sentinel.rs): a
`redis+sentinel://` (or `rediss+sentinel://`, TLS) URL names the sentinels watching a
replicated set and the name they know it by (its service); the clients ask them for the
primary, and again when it moves (see `wasmgear.client` and `wasmgear.aio`).

    redis+sentinel://[USER:PASSWORD@]HOST[:PORT][,HOST[:PORT]...]/SERVICE[?db=N&sentinel_user=U&sentinel_password=P]

USER:PASSWORD are the data nodes'; the sentinels' own user and password are the query's
`sentinel_user` and `sentinel_password` (percent-encoded). Parsing does no I/O."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, List, Optional, Tuple
from urllib.parse import parse_qsl, unquote

from redis import exceptions as rx
from redis.sentinel import MasterNotFoundError

from ..errors import BadInput

#: The port of a sentinel whose address names none.
DEFAULT_SENTINEL_PORT = 26379

#: How long one sentinel may take to answer (connecting, then each reply) before the next
#: is asked, in seconds (sentinel.rs, ASK_TIMEOUT).
ASK_TIMEOUT = 2.0

#: How often a pub/sub connection behind sentinels checks that the primary has not moved,
#: in seconds (sentinel.rs, CHECK_EVERY): a primary demoted to a replica keeps its clients.
CHECK_EVERY = 2.0

SCHEMES = ("redis+sentinel://", "rediss+sentinel://")

EXPECTED = ("expected redis+sentinel://[USER:PASSWORD@]HOST:PORT[,HOST:PORT...]/SERVICE"
            "[?db=N&sentinel_user=U&sentinel_password=P], or rediss+sentinel:// for TLS")

_WHOLE = re.compile(r"\+?[0-9]+\Z")
_INTEGER = re.compile(r"[+-]?[0-9]+\Z")


class NoPrimaryFound(MasterNotFoundError):
    """No sentinel named a primary: the message says what each one answered."""


@dataclass(frozen=True)
class SentinelUrl:
    """What a `redis+sentinel://` (or `rediss+sentinel://`) URL says."""

    #: The sentinels, as (host, port), in the order given.
    sentinels: List[Tuple[str, int]]
    #: The name the sentinels know the set by (`sentinel monitor NAME ...`).
    service: str
    #: The database on the primary.
    db: int = 0
    #: Whether the sentinels and the nodes are reached over TLS.
    tls: bool = False
    #: The data nodes' user and password (percent-decoded); None where the URL has none.
    username: Optional[str] = field(default=None, repr=False)
    password: Optional[str] = field(default=None, repr=False)
    #: The sentinels' own user and password (`sentinel_user`, `sentinel_password`).
    sentinel_user: Optional[str] = field(default=None, repr=False)
    sentinel_password: Optional[str] = field(default=None, repr=False)


def is_sentinel_url(url: object) -> bool:
    return isinstance(url, str) and url.startswith(SCHEMES)


def debug_quoted(text: str) -> str:
    """`text` in double quotes, as Rust's `{:?}` writes a string."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    escaped = escaped.replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")
    return f'"{escaped}"'


def bracketed(host: str) -> str:
    """A host as a URL writes it (an IPv6 address in brackets)."""
    return f"[{host}]" if ":" in host else host


def parse_sentinel_url(url: str) -> Optional[SentinelUrl]:
    """The URL's parts; None when `url` is not a sentinel URL; BadInput saying what is
    wrong (with the passwords as ***) when it is one that does not parse."""
    if url.startswith("redis+sentinel://"):
        tls, rest = False, url[len("redis+sentinel://"):]
    elif url.startswith("rediss+sentinel://"):
        tls, rest = True, url[len("rediss+sentinel://"):]
    else:
        return None
    try:
        return _parse_rest(tls, rest)
    except ValueError as e:
        raise BadInput(
            f"invalid Redis Sentinel URL {debug_quoted(redact_sentinel(url))}: {e} ({EXPECTED})"
        ) from None


def _parse_rest(tls: bool, rest: str) -> SentinelUrl:
    before_query, _, query = rest.partition("?")
    authority, _, path = before_query.partition("/")
    userinfo: Optional[str] = None
    hosts = authority
    if "@" in authority:
        userinfo, _, hosts = authority.rpartition("@")
    sentinels = [parse_address(address) for address in hosts.split(",")]
    service = path.rstrip("/")
    if not service or "/" in service:
        raise ValueError("the path must be the name the sentinels know the set by (/SERVICE, "
                         "as in `sentinel monitor SERVICE HOST PORT QUORUM`)")
    username = password = None
    if userinfo is not None:
        user, colon, secret = userinfo.partition(":")
        username = unquote(user) or None
        password = unquote(secret) if colon else None
    db = 0
    sentinel_user = sentinel_password = None
    for name, value in parse_qsl(query, keep_blank_values=True):
        if name == "db":
            if not _INTEGER.match(value) or int(value) < 0 or int(value) >= 2**63:
                raise ValueError(f"db must be a whole number >= 0, not {debug_quoted(value)}")
            db = int(value)
        elif name == "sentinel_user":
            sentinel_user = value
        elif name == "sentinel_password":
            sentinel_password = value
        else:
            raise ValueError(f"unknown parameter {debug_quoted(name)} "
                             "(known: db, sentinel_user, sentinel_password)")
    return SentinelUrl(sentinels, service, db, tls, username, password, sentinel_user,
                       sentinel_password)


def parse_address(address: str) -> Tuple[str, int]:
    """`HOST[:PORT]` or `[IPV6][:PORT]`."""
    bad = ValueError(f"{debug_quoted(address)} is not a sentinel address (HOST:PORT)")
    port: Optional[str]
    if address.startswith("["):
        host, closed, after = address[1:].partition("]")
        if not closed or (after and not after.startswith(":")):
            raise bad
        port = after[1:] if after else None
    elif ":" in address:
        host, _, port = address.rpartition(":")
    else:
        host, port = address, None
    if not host:
        raise bad
    if port is None:
        return host, DEFAULT_SENTINEL_PORT
    if not _WHOLE.match(port) or not 0 < int(port) < 65536:
        raise bad
    return host, int(port)


def redact_sentinel(url: str) -> str:
    """A sentinel URL with the nodes' password and the sentinels' (`sentinel_password`)
    replaced by `***` (as the Rust client's `redact`)."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    before_query, has_query, query = rest.partition("?")
    authority, has_path, path = before_query.partition("/")
    if "@" in authority:
        userinfo, _, hosts = authority.rpartition("@")
        user, colon, _ = userinfo.partition(":")
        authority = f"{user}:***@{hosts}" if colon else f"***@{hosts}"
    shown = f"{scheme}://{authority}"
    if has_path:
        shown += "/" + path
    if has_query:
        pairs = ["sentinel_password=***" if pair.partition("=")[0] == "sentinel_password"
                 and "=" in pair else pair for pair in query.split("&")]
        shown += "?" + "&".join(pairs)
    return shown


def wants_password(error: BaseException) -> bool:
    """Whether `error` says the server wants a password none was given for (NOAUTH; the
    message of a refused HELLO does not say NOAUTH, its code does)."""
    message = str(error)
    lower = message.lower()
    return (getattr(error, "status_code", None) == "NOAUTH" or "NOAUTH" in message
            or "authentication required" in lower or "already authenticated" in lower)


def describe_sentinel_error(error: BaseException) -> str:
    """What went wrong talking to a sentinel or a node, in words that say what to do."""
    message = str(error)
    if wants_password(error):
        return ("it wants a password: give the nodes' in the URL (USER:PASSWORD@), the "
                "sentinels' as ?sentinel_password=... (and ?sentinel_user=...)")
    if "WRONGPASS" in message or isinstance(error, rx.AuthenticationError):
        return "the user or password was refused"
    if isinstance(error, rx.TimeoutError):
        return f"no answer within {ASK_TIMEOUT:g} s"
    if "refused" in message.lower() or _refused(error):
        return f"connection refused ({message})"
    if isinstance(error, rx.ResponseError):
        return f"it does not answer like a sentinel ({message})"
    return message


def _refused(error: BaseException) -> bool:
    """Whether `error` comes of a refused connection (redis.asyncio words it "Connect call
    failed", the cause a ConnectionRefusedError)."""
    seen = 0
    cause: Optional[BaseException] = error
    while cause is not None and seen < 10:
        if isinstance(cause, ConnectionRefusedError):
            return True
        cause, seen = cause.__cause__ or cause.__context__, seen + 1
    return "connect call failed" in str(error).lower()


def sentinel_label(sentinel: object) -> str:
    """`sentinel HOST:PORT` of a redis-py client of one sentinel."""
    kwargs = getattr(getattr(sentinel, "connection_pool", None), "connection_kwargs", {})
    host, port = str(kwargs.get("host", "?")), kwargs.get("port", "?")
    return f"sentinel {bracketed(host)}:{port}"


def named_primary(at: str, service: str, masters: object,
                  usable: Callable[[Any], bool]) -> Tuple[Optional[Tuple[str, int]], str]:
    """What one sentinel's `SENTINEL MASTERS` (as redis-py parses it) says of `service`: the
    primary's (host, port), or None and why not. `usable(state)` is redis-py's check that
    the sentinel counts the primary up."""
    state = masters.get(service) if isinstance(masters, dict) else None
    if not isinstance(state, dict):
        return None, (f"{at} does not know the service {debug_quoted(service)} (is it the "
                      "name in `sentinel monitor`?)")
    host, port = str(state.get("ip")), int(state.get("port") or 0)
    if not usable(state):
        return None, (f"{at} names {bracketed(host)}:{port}, but counts it down or not the "
                      "primary (a failover may be under way)")
    return (host, port), ""


def no_primary(problems: List[str]) -> NoPrimaryFound:
    return NoPrimaryFound("; ".join(problems) or "no sentinel given")
