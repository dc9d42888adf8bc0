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
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterable
from typing import Protocol

import attrs

__all__ = ["BlobNotFound", "BlobStore", "BlobTooLarge", "WrittenBlob"]


class BlobNotFound(LookupError):
    """No blob under that key."""


class BlobTooLarge(ValueError):
    """The stream went past the size limit given to ``write``; nothing was kept."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"more than {limit} bytes")
        self.limit = limit


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
