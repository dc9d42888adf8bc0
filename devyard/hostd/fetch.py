"""A policy-checked HTTP GET for the host's downloads on a user's behalf (initial apps).

Connections go through `open_checked` (netdial.py): the URL's name is resolved, every
address checked against the `NetPolicy`, and only an allowed address is dialled, by number,
at connect time, for the first URL and for every redirect. ``trusted`` origins (the devyard
server that signs asset URLs) are dialled as configured. h11 reads the answer: one request per
connection (``Connection: close``), bounded heads, a byte cap and a deadline for the whole
download, and a read timeout per receive. Failures are a `FetchError` whose `FetchFailure`
class does not tell a refused address, a closed port and a silent one apart.

Nothing here logs: the caller logs what it wants, without the URL's query (signatures).
"""

from __future__ import annotations

import enum
import ssl
from collections.abc import Awaitable, Callable, Collection
from typing import Final
from urllib.parse import urljoin, urlsplit

import attrs
import h11
import trio

from .netdial import DialReason, DialRefused, open_checked
from .netpolicy import NetPolicy

__all__ = ["FetchError", "FetchFailure", "FetchLimits", "fetch", "origin_of"]

_REDIRECTS: Final = frozenset({301, 302, 303, 307, 308})
_RECEIVE: Final = 64 * 1024
_MAX_HEAD: Final = 64 * 1024


@attrs.frozen
class FetchLimits:
    """Bounds on one download: bytes, the whole fetch, each connect and each read."""

    max_bytes: int = 4 * 1024**3  # the largest APK / IPA we expect (Play's limit is 4 GB)
    timeout: float = 600.0  # the whole download, redirects included
    io_timeout: float = 30.0  # each connect and each read
    max_redirects: int = 5


class FetchFailure(enum.Enum):
    """Why a download failed: a class, never the network's details."""

    NOT_ALLOWED = "not-allowed"  # the host's network policy refuses the URL's address
    BAD_URL = "bad-url"
    UNAVAILABLE = "unavailable"  # no connection, no 200 answer, or a broken one
    TOO_LARGE = "too-large"
    TIMED_OUT = "timed-out"


class FetchError(Exception):
    """``failure`` is for the user; the message (a detail) is for the host's log."""

    def __init__(self, failure: FetchFailure, detail: str) -> None:
        super().__init__(detail)
        self.failure = failure


def origin_of(url: str) -> tuple[str, str, int] | None:
    """(scheme, host, port) of an http(s) or ws(s) URL; None for anything else."""
    parts = urlsplit(url)
    scheme = {"ws": "http", "wss": "https"}.get(parts.scheme, parts.scheme)
    if scheme not in ("http", "https") or not parts.hostname:
        return None
    try:
        return scheme, parts.hostname.lower(), parts.port or (443 if scheme == "https" else 80)
    except ValueError:  # a port out of range
        return None


async def _connect(
    origin: tuple[str, str, int],
    policy: NetPolicy,
    *,
    trusted: bool,
    limits: FetchLimits,
    tls: ssl.SSLContext | None,
) -> trio.abc.Stream:
    scheme, host, port = origin
    stream: trio.abc.Stream
    try:
        if trusted:
            with trio.fail_after(limits.io_timeout):
                stream = await trio.open_tcp_stream(host, port)
        else:
            stream = await open_checked(host, port, policy, limit_s=limits.io_timeout)
    except DialRefused as exc:
        if exc.reason is DialReason.NOT_ALLOWED:
            detail = exc.refusal.value if exc.refusal is not None else "refused"
            raise FetchError(FetchFailure.NOT_ALLOWED, detail) from None
        raise FetchError(FetchFailure.UNAVAILABLE, exc.reason.value) from None
    except (OSError, trio.TooSlowError) as exc:
        raise FetchError(FetchFailure.UNAVAILABLE, f"connect: {type(exc).__name__}") from None
    if scheme == "http":
        return stream
    secure = trio.SSLStream(stream, tls or ssl.create_default_context(), server_hostname=host)
    try:
        with trio.fail_after(limits.io_timeout):
            await secure.do_handshake()
    except (trio.BrokenResourceError, trio.TooSlowError, ssl.SSLError, OSError) as exc:
        await trio.aclose_forcefully(secure)
        raise FetchError(FetchFailure.UNAVAILABLE, f"TLS: {type(exc).__name__}") from None
    return secure


async def _next(conn: h11.Connection, stream: trio.abc.Stream, limits: FetchLimits) -> h11.Event:
    while True:
        try:
            event = conn.next_event()
        except h11.RemoteProtocolError as exc:
            raise FetchError(FetchFailure.UNAVAILABLE, f"HTTP: {exc}") from None
        if event is not h11.NEED_DATA:
            assert not isinstance(event, type)
            return event
        try:
            with trio.fail_after(limits.io_timeout):
                data = await stream.receive_some(_RECEIVE)
        except trio.TooSlowError:
            raise FetchError(FetchFailure.UNAVAILABLE, "read timeout") from None
        except (trio.BrokenResourceError, ssl.SSLError, OSError) as exc:
            raise FetchError(FetchFailure.UNAVAILABLE, f"read: {type(exc).__name__}") from None
        conn.receive_data(bytes(data))


async def _get_once(
    url: str,
    policy: NetPolicy,
    trusted: Collection[tuple[str, int]],
    limits: FetchLimits,
    sink: Callable[[bytes], Awaitable[None]],
    *,
    tls: ssl.SSLContext | None,
) -> str | None:
    """GET *url* into *sink*; the next URL if the answer is a redirect."""
    origin = origin_of(url)
    if origin is None or urlsplit(url).scheme not in ("http", "https"):
        raise FetchError(FetchFailure.BAD_URL, "not an http(s) URL")
    _, host, port = origin
    parts = urlsplit(url)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    stream = await _connect(origin, policy, trusted=(host, port) in trusted, limits=limits, tls=tls)
    async with stream:
        conn = h11.Connection(h11.CLIENT, max_incomplete_event_size=_MAX_HEAD)
        headers = [
            ("Host", parts.netloc.rsplit("@", 1)[-1]),
            ("User-Agent", "devyard-hostd"),
            ("Accept", "*/*"),
            ("Connection", "close"),
        ]
        request = conn.send(h11.Request(method="GET", target=target, headers=headers))
        request += conn.send(h11.EndOfMessage())
        try:
            await stream.send_all(request)
        except (trio.BrokenResourceError, OSError) as exc:
            raise FetchError(FetchFailure.UNAVAILABLE, f"send: {type(exc).__name__}") from None
        event = await _next(conn, stream, limits)
        while isinstance(event, h11.InformationalResponse):
            event = await _next(conn, stream, limits)
        if not isinstance(event, h11.Response):
            raise FetchError(FetchFailure.UNAVAILABLE, "no answer")
        location = next((v for k, v in event.headers if k == b"location"), None)
        if event.status_code in _REDIRECTS and location:
            return urljoin(url, location.decode("latin-1"))
        if event.status_code != 200:
            raise FetchError(FetchFailure.UNAVAILABLE, f"HTTP {event.status_code}")
        length = next((v for k, v in event.headers if k == b"content-length"), None)
        if length is not None and int(length) > limits.max_bytes:
            raise FetchError(FetchFailure.TOO_LARGE, f"Content-Length {int(length)}")
        size = 0
        while not isinstance(event := await _next(conn, stream, limits), h11.EndOfMessage):
            if not isinstance(event, h11.Data):
                raise FetchError(FetchFailure.UNAVAILABLE, "the body broke off")
            size += len(event.data)
            if size > limits.max_bytes:
                raise FetchError(FetchFailure.TOO_LARGE, f"over {limits.max_bytes} bytes")
            await sink(bytes(event.data))
    return None


async def fetch(
    url: str,
    sink: Callable[[bytes], Awaitable[None]],
    *,
    policy: NetPolicy,
    trusted: Collection[tuple[str, int]] = (),
    limits: FetchLimits | None = None,
    tls: ssl.SSLContext | None = None,
) -> None:
    """GET *url* (following redirects, each checked again) into *sink*, or `FetchError`.
    *tls* verifies https servers (default: the system's trust store)."""
    limits = FetchLimits() if limits is None else limits
    with trio.move_on_after(limits.timeout) as scope:
        for _ in range(limits.max_redirects + 1):
            next_url = await _get_once(url, policy, trusted, limits, sink, tls=tls)
            if next_url is None:
                return
            url = next_url
        raise FetchError(FetchFailure.UNAVAILABLE, "too many redirects")
    assert scope.cancelled_caught
    raise FetchError(FetchFailure.TIMED_OUT, f"not done within {limits.timeout:g} s")
