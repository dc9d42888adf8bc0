"""The blob store interface: where asset bytes live, behind a Protocol an S3-compatible store
could implement (``write`` maps to a multipart upload, ``read`` to a ranged GET).

Contract of every implementation:

- ``write`` consumes an async iterable of chunks and never holds more than a bounded amount of
  it in memory; it computes the MD5 and size while streaming. It is atomic: until it returns,
  nothing is visible under ``key``, and if it fails or is cancelled nothing is left behind.
- Keys are chosen by the caller and never reused for different bytes (the asset layer writes a
  new key per upload and switches the database row to it), so a reader of a key never sees
  bytes change under it.
- ``delete`` of a missing key is not an error.
- A failure of the storage itself is a `BlobStoreError`, never a bare ``OSError``:
  `BlobStoreFull` when it has no room (disk full, quota), `BlobStoreUnavailable` otherwise
  (unreachable, read-only, failing). Callers answer it, they do not crash on it.
- ``list_blobs`` names every stored key with the time it was last written (or retired), so
  blobs that no row names (a crash between a write and the row switch, a delete cut short, a
  retired key) can be swept.
- ``retire`` is how bytes that a re-upload replaced go: a download that began before the
  re-upload keeps reading them to the end (never a mix of old and new bytes, never cut short
  by the re-upload), and they are removed later. The local directory unlinks at once (an open
  file stays readable); S3 and PostgreSQL keep the key and date it retired, and the orphan
  sweep removes it once its grace has passed since then (docs/blobs.md).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterable
from typing import Protocol

import attrs

__all__ = [
    "BlobNotFound",
    "BlobStore",
    "BlobStoreError",
    "BlobStoreFull",
    "BlobStoreUnavailable",
    "BlobTooLarge",
    "StoredBlob",
    "WrittenBlob",
]


class BlobNotFound(LookupError):
    """No blob under that key."""


class BlobTooLarge(ValueError):
    """The stream went past the size limit given to ``write``; nothing was kept."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"more than {limit} bytes")
        self.limit = limit


class BlobStoreError(Exception):
    """The blob store could not do what was asked; nothing half-done is visible."""


class BlobStoreFull(BlobStoreError):
    """No room left: the disk is full or a quota is reached."""


class BlobStoreUnavailable(BlobStoreError):
    """The store cannot be used now: unreachable, read-only, permissions, I/O errors."""


@attrs.frozen
class StoredBlob:
    key: str
    modified: float  # seconds since the epoch of its last write or its retirement (later one)


@attrs.frozen
class WrittenBlob:
    key: str
    md5: str  # lower-case hex
    size: int


class BlobStore(Protocol):
    async def write(self, key: str, chunks: AsyncIterable[bytes], *, max_size: int) -> WrittenBlob:
        """Store the bytes of *chunks* under *key*, atomically; `BlobTooLarge` past
        *max_size*."""

    def read(self, key: str) -> AsyncGenerator[bytes, None]:
        """The bytes under *key* in chunks; `BlobNotFound` on the first iteration if none."""

    async def delete(self, key: str) -> None:
        """Remove *key*; missing is fine."""

    async def retire(self, key: str) -> None:
        """*key*'s bytes were replaced: remove them once downloads already reading them could
        have finished (see above); missing is fine."""

    async def list_blobs(self) -> list[StoredBlob]:
        """Every stored blob (not writes in progress), in no particular order."""

    async def probe(self) -> None:
        """A cheap check that the store can be used now (readiness): `BlobStoreError` naming
        what is wrong otherwise. It may block on the network: the caller bounds and caches it
        (`service.AssetBlobs.readiness`)."""

    async def sweep_temporary(self, *, older_than: float) -> int:
        """Remove what writes that no longer run left behind (a process killed mid-write),
        never a live write's, none modified since *older_than* (epoch seconds); how many."""
