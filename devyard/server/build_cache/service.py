"""The organization build cache on the server (docs/builds.md, "Gradle's build cache").

Entries are blobs of the configured backend's ``build-cache`` namespace under
``<org id>.<key>``; a row per entry (`store.build_cache`) keeps its size and last use. A
``put`` writes the blob, then the row, then evicts the organization's least recently used
entries until it fits `BuildCacheSettings.max_bytes` (the new entry last); a ``get`` touches
the row. The sweep drops entries unused for `BuildCacheSettings.max_idle_days`.

Hosts reach it over their link: a ``build_cache`` stream (`serve_host_stream`) opened for an
instance; the server checks that the instance is a build instance on that host and takes the
organization from the store, never from the host.
"""

from __future__ import annotations

import contextlib
import logging
import re
import time
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from typing import Any, Final

import trio

from ...core import accept_open, reject_open, send_message
from ..blobs.base import BlobNotFound, BlobStore, BlobStoreError, BlobTooLarge
from ..builds import host_build_instance
from ..store import errors as store_errors
from ..store.base import Store
from ..store.build_cache import BuildCacheStore, CacheEntry
from .settings import BuildCacheSettings

log = logging.getLogger(__name__)

__all__ = ["CONTENT_TYPE", "BadKey", "BuildCacheService", "EntryTooLarge", "check_key"]

CONTENT_TYPE: Final = "application/vnd.gradle.build-cache-artifact.v1"
#: Gradle's cache keys: hex (MD5 in Gradle 4 and 5, SHA-1/SHA-256 later), as hostd checks.
_KEY: Final = re.compile(r"[0-9a-f]{16,128}")
_CHUNK: Final = 256 * 1024
_BATCH: Final = 500
_MAX_LISTED: Final = 4096
ORPHAN_GRACE: Final = 3600.0


class BadKey(ValueError):
    """Not a build cache key (16 to 128 lowercase hex digits)."""


class EntryTooLarge(ValueError):
    def __init__(self, limit: int) -> None:
        super().__init__(f"a build cache entry is at most {limit} bytes")
        self.limit = limit


def check_key(key: str) -> str:
    if not _KEY.fullmatch(key):
        raise BadKey("a build cache key is 16 to 128 lowercase hex digits")
    return key


class BuildCacheService:
    def __init__(
        self,
        store: Store,
        entries: BuildCacheStore,
        blobs: BlobStore,
        settings: BuildCacheSettings,
        *,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.entries = entries
        self.blobs = blobs
        self.settings = settings
        self.wall_clock = wall_clock

    def __repr__(self) -> str:
        return f"BuildCacheService({self.blobs!r})"

    def _now(self) -> datetime:
        return datetime.fromtimestamp(self.wall_clock(), UTC)

    @staticmethod
    def _blob(org_id: str, key: str) -> str:
        return f"{org_id}.{key}"

    # ---- entries ----------------------------------------------------------------------------

    async def get(self, org_id: str, key: str) -> AsyncGenerator[bytes, None] | None:
        """The entry's bytes (its first chunk already read, so a missing blob is None)."""
        check_key(key)
        entry = await self.entries.get_cache_entry(org_id, key)
        if entry is None:
            return None
        chunks = self.blobs.read(self._blob(org_id, key))
        try:
            first = await anext(chunks, b"")
        except BlobNotFound:
            await self.entries.delete_cache_entry(org_id, key)
            return None
        await self.entries.touch_cache_entry(org_id, key, self._now())

        async def body() -> AsyncGenerator[bytes, None]:
            try:
                yield first
                async for chunk in chunks:
                    yield chunk
            finally:
                await chunks.aclose()

        return body()

    async def has(self, org_id: str, key: str) -> bool:
        return await self.entries.get_cache_entry(org_id, check_key(key)) is not None

    async def put(self, org_id: str, key: str, chunks: AsyncIterable[bytes]) -> int:
        """Store the entry (`EntryTooLarge` past the entry limit, nothing kept); its size.
        `BlobStoreError` when the backend fails."""
        check_key(key)
        limit = min(self.settings.max_entry, self.settings.max_bytes)
        try:
            written = await self.blobs.write(self._blob(org_id, key), chunks, max_size=limit)
        except BlobTooLarge:
            raise EntryTooLarge(limit) from None
        await self.entries.put_cache_entry(CacheEntry(org_id, key, written.size, self._now()))
        await self.evict(org_id, keep=key)
        return written.size

    async def evict(self, org_id: str, *, keep: str = "") -> int:
        """Remove the least recently used entries until the organization's fit; how many."""
        removed = 0
        total = await self.entries.cache_usage(org_id)
        while total > self.settings.max_bytes:
            oldest = await self.entries.cache_entries_by_use(org_id, limit=_BATCH)
            victims = [e for e in oldest if e.key != keep]
            if not victims:
                break
            for entry in victims:
                if total <= self.settings.max_bytes:
                    break
                await self._drop(entry)
                total -= entry.size
                removed += 1
        return removed

    async def _drop(self, entry: CacheEntry) -> None:
        await self.entries.delete_cache_entry(entry.org_id, entry.key)
        try:
            await self.blobs.delete(self._blob(entry.org_id, entry.key))
        except BlobStoreError as exc:  # the row is gone: the bytes are unreachable anyway
            log.warning("build cache blob %s not deleted: %s", entry.key, exc)

    async def sweep(self) -> int:
        """Remove every entry unused for `max_idle_days`; how many."""
        before = self._now() - timedelta(days=self.settings.max_idle_days)
        removed = 0
        while idle := await self.entries.idle_cache_entries(before, limit=_BATCH):
            for entry in idle:
                await self._drop(entry)
                removed += 1
        return removed

    async def sweep_deleted(self, *, grace: float = ORPHAN_GRACE) -> int:
        """Remove the blobs of organizations that no longer exist (their rows went with
        them), none written in the last *grace* seconds; how many."""
        cutoff = self.wall_clock() - grace
        by_org: dict[str, list[str]] = {}
        for blob in await self.blobs.list_blobs():
            org_id, dot, _ = blob.key.rpartition(".")
            if dot and blob.modified < cutoff:
                by_org.setdefault(org_id, []).append(blob.key)
        removed = 0
        for org_id, keys in by_org.items():
            try:
                await self.store.get_organization(org_id)
                continue
            except store_errors.NotFound:
                pass
            for key in keys:
                await self.blobs.delete(key)
                removed += 1
        return removed

    async def run_sweeper(self) -> None:
        while True:
            try:
                removed = await self.sweep() + await self.sweep_deleted()
            except (BlobStoreError, store_errors.StoreError) as exc:
                log.warning("sweeping the build cache failed, retrying later: %s", exc)
            else:
                if removed:
                    log.info("removed %d idle build cache entries", removed)
            await trio.sleep(self.settings.sweep_interval)

    # ---- the host's side --------------------------------------------------------------------

    async def serve_host_stream(
        self, host_id: str, request: dict[str, Any], stream: trio.abc.HalfCloseableStream
    ) -> None:
        """A ``build_cache`` stream a host opened for one of its instances: ``{op: "get",
        key}`` -> ``{found, size}`` and the bytes until EOF; ``{op: "put", key}`` ->
        ``{have}``, then (unless it had it) the bytes until EOF -> ``{ok, size | message}``;
        ``{op: "list", max_bytes}`` -> ``{entries: [{key, size}]}``, most recently used first."""
        instance_id = str(request.get("instance_id", ""))
        instance = await host_build_instance(self.store, host_id, instance_id)
        if instance is None:
            await reject_open(stream, "not-found", f"no build instance {instance_id} on this host")
            return
        org_id = instance.org_id
        op, key = request.get("op"), str(request.get("key", ""))
        if op in ("get", "put") and not _KEY.fullmatch(key):
            await reject_open(stream, "bad-request", "a build cache key is 16 to 128 hex digits")
            return
        if op == "get":
            await accept_open(stream)
            await self._send_entry(org_id, key, stream)
        elif op == "put":
            await accept_open(stream)
            await self._receive_entry(org_id, key, stream)
        elif op == "list":
            await accept_open(stream)
            budget = request.get("max_bytes")
            budget = budget if isinstance(budget, int) and budget > 0 else 0
            listed, total = [], 0
            for entry in await self.entries.cache_entries_by_use(
                org_id, limit=_MAX_LISTED, newest_first=True
            ):
                if total + entry.size > budget:
                    break
                total += entry.size
                listed.append({"key": entry.key, "size": entry.size})
            await send_message(stream, {"entries": listed})
        else:
            await reject_open(stream, "bad-request", "op must be get, put or list")

    async def _send_entry(
        self, org_id: str, key: str, stream: trio.abc.HalfCloseableStream
    ) -> None:
        try:
            body = await self.get(org_id, key)
        except BlobStoreError as exc:
            log.warning("build cache entry %s not readable: %s", key, exc)
            body = None
        if body is None:
            await send_message(stream, {"found": False})
            await stream.send_eof()
            return
        await send_message(stream, {"found": True})
        async with contextlib.aclosing(body):
            async for chunk in body:
                await stream.send_all(chunk)
        await stream.send_eof()

    async def _receive_entry(
        self, org_id: str, key: str, stream: trio.abc.HalfCloseableStream
    ) -> None:
        if await self.has(org_id, key):
            await self.entries.touch_cache_entry(org_id, key, self._now())
            await send_message(stream, {"have": True})
            return
        await send_message(stream, {"have": False})
        try:
            size = await self.put(org_id, key, _chunks(stream))
        except (EntryTooLarge, BlobStoreError) as exc:
            await send_message(stream, {"ok": False, "message": str(exc)})
            return
        await send_message(stream, {"ok": True, "size": size})


async def _chunks(stream: trio.abc.ReceiveStream) -> AsyncIterator[bytes]:
    while data := await stream.receive_some(_CHUNK):
        yield bytes(data)
