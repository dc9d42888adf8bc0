"""The server's organization build cache, the second tier behind the host's (docs/builds.md).

A host's `cas.BuildCache` is the organization's local directory cache: what the builds in the
sandbox use (they have no network). `ServerCache` reaches the server's cache of the same
organization over the host's link, on ``build_cache`` streams opened for the instance (the
server takes the organization from the instance, never from the host):

    {op: "get", key}        -> {found}, then the entry's bytes until EOF
    {op: "put", key}        -> {have}; unless it had it, the bytes until EOF -> {ok, size}
    {op: "list", max_bytes} -> {entries: [{key, size}]}, most recently used first

`cas.BuildCache` reads through it (a local miss of ``GET /cache/{key}`` asks the server) and
writes through it (a ``PUT`` is stored here and there). Around each Gradle exec of the
instance (`BuildHost`) the host *pulls* the server's most recently used entries it lacks, up
to `PULL_MAX_BYTES`, into the directory before the build, and *pushes* the entries the build
wrote (newer than its start) after it, so a build on another host, or on this one after its
disk was wiped, gets ``FROM-CACHE``. Every call is bounded in time and best-effort: the build
never fails because the server's cache is unreachable.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final

import trio

from ...core import MuxError, RemoteProtocolError, receive_message

if TYPE_CHECKING:
    from .cas import BuildCache

__all__ = ["PULL_MAX_BYTES", "ServerCache", "pull", "push_since"]

log = logging.getLogger(__name__)

#: Opens a stream of the instance to the server with these open fields (supervisor's egress).
Opener = Callable[[dict[str, Any]], Awaitable[trio.abc.Stream]]

PULL_MAX_BYTES: Final = 256 * 1024**2
CALL_TIMEOUT_S: Final = 30.0
PULL_TIMEOUT_S: Final = 60.0
PUSH_TIMEOUT_S: Final = 300.0
MAX_PUSHED: Final = 4096
_CHUNK: Final = 256 * 1024
_FAILURES: Final = (
    ConnectionError,  # the link is down (supervisor.LinkDown)
    MuxError,  # refused, or the stream broke
    RemoteProtocolError,
    trio.BrokenResourceError,
    trio.ClosedResourceError,
    trio.TooSlowError,
)


class ServerCache:
    def __init__(self, opener: Opener, *, timeout: float = CALL_TIMEOUT_S) -> None:
        self._open = opener
        self.timeout = timeout

    def __repr__(self) -> str:
        return "ServerCache()"

    async def get(self, key: str, limit: int) -> bytes | None:
        """The server's entry (None: it has none, it is larger than *limit*, or it cannot
        be reached)."""
        try:
            with trio.fail_after(self.timeout):
                stream = await self._open({"kind": "build_cache", "op": "get", "key": key})
                async with stream:
                    if not (await receive_message(stream)).get("found"):
                        return None
                    data = bytearray()
                    while chunk := await stream.receive_some(_CHUNK):
                        data += chunk
                        if len(data) > limit:
                            return None
                    return bytes(data)
        except _FAILURES as exc:
            log.info("the server's build cache did not answer for %s: %r", key, exc)
            return None

    async def put(self, key: str, data: bytes) -> bool:
        """Store the entry on the server (True: stored, or it had it already)."""
        try:
            with trio.fail_after(self.timeout):
                stream = await self._open({"kind": "build_cache", "op": "put", "key": key})
                async with stream:
                    if (await receive_message(stream)).get("have"):
                        return True
                    for start in range(0, len(data), _CHUNK):
                        await stream.send_all(data[start : start + _CHUNK])
                    if isinstance(stream, trio.abc.HalfCloseableStream):
                        await stream.send_eof()
                    answer = await receive_message(stream)
        except _FAILURES as exc:
            log.info("the server's build cache did not take %s: %r", key, exc)
            return False
        if not answer.get("ok"):
            log.warning("the server's build cache refused %s: %s", key, answer.get("message"))
        return bool(answer.get("ok"))

    async def list(self, max_bytes: int) -> list[tuple[str, int]]:
        """The server's most recently used entries, up to *max_bytes* in all."""
        try:
            with trio.fail_after(self.timeout):
                stream = await self._open(
                    {"kind": "build_cache", "op": "list", "max_bytes": max_bytes}
                )
                async with stream:
                    answer = await receive_message(stream)
        except _FAILURES as exc:
            log.info("the server's build cache did not list: %r", exc)
            return []
        entries = answer.get("entries")
        if not isinstance(entries, list):
            return []
        return [
            (str(e["key"]), int(e["size"]))
            for e in entries
            if isinstance(e, dict)
            and isinstance(e.get("key"), str)
            and isinstance(e.get("size"), int)
        ]


async def _once(data: bytes) -> AsyncIterator[bytes]:
    yield data


async def pull(cache: BuildCache, max_bytes: int = PULL_MAX_BYTES) -> int:
    """Before a build: the server's recent entries this host lacks, into the directory; how
    many."""
    server = cache.upstream
    if server is None:
        return 0
    fetched = 0
    with trio.move_on_after(PULL_TIMEOUT_S):
        present = set(await trio.to_thread.run_sync(cache.keys))
        for key, size in await server.list(max_bytes):
            if key in present or size > cache.max_entry:
                continue
            data = await server.get(key, cache.max_entry)
            if data is not None:
                await cache.put_local(key, _once(data))
                fetched += 1
    if fetched:
        log.info("pulled %d build cache entries from the server", fetched)
    return fetched


async def push_since(cache: BuildCache, since: float) -> int:
    """After a build: the entries it wrote (modified since *since*, epoch seconds) to the
    server; how many it took."""
    server = cache.upstream
    if server is None:
        return 0
    pushed = 0
    started = time.monotonic()
    with trio.move_on_after(PUSH_TIMEOUT_S):
        for key in (await trio.to_thread.run_sync(cache.keys, since))[:MAX_PUSHED]:
            data = await cache.read_local(key)
            if data is not None and await server.put(key, data):
                pushed += 1
    if pushed:
        log.info("pushed %d build cache entries in %.1f s", pushed, time.monotonic() - started)
    return pushed
