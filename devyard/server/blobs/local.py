"""`LocalBlobStore`: blobs as files in one directory under the server's data dir.

Theory of operation. A write streams into ``<dir>/.tmp/<key>.<random>`` (same file system, so
the final ``os.replace`` is atomic), buffering at most `WRITE_BUFFER` bytes before each write
in a worker thread, where the MD5 is also updated (hashing 1 GiB is seconds of CPU the trio
thread must not spend). Then the file is fsynced, renamed to ``<dir>/<key>`` and the directory
fsynced, so after ``write`` returns the blob survives a crash, and before it returns nothing
exists under the key. A failed or cancelled write removes its temporary file (shielded), and
any previous blob under another key is untouched: an interrupted upload never damages the
bytes an asset already has.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
from collections.abc import AsyncGenerator, AsyncIterable
from pathlib import Path
from typing import IO, Final

import trio

from .base import BlobNotFound, BlobTooLarge, WrittenBlob

__all__ = ["READ_CHUNK", "WRITE_BUFFER", "LocalBlobStore"]

WRITE_BUFFER: Final = 1024 * 1024  # bytes gathered before one write in a worker thread
READ_CHUNK: Final = 1024 * 1024
_KEY_RE: Final = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]{0,199}")


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class LocalBlobStore:
    """A `BlobStore` in *root* (created 0700 if missing)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._tmp = root / ".tmp"

    def __repr__(self) -> str:
        return f"LocalBlobStore({str(self.root)!r})"

    def _path(self, key: str) -> Path:
        if _KEY_RE.fullmatch(key) is None:
            raise ValueError(f"invalid blob key {key!r}")
        return self.root / key

    def _prepare(self) -> None:
        self._tmp.mkdir(mode=0o700, parents=True, exist_ok=True)

    async def write(self, key: str, chunks: AsyncIterable[bytes], *, max_size: int) -> WrittenBlob:
        final = self._path(key)
        await trio.to_thread.run_sync(self._prepare)
        temp = self._tmp / f"{key}.{secrets.token_hex(8)}"
        digest = hashlib.md5(usedforsecurity=False)
        size = 0
        done = False
        file: IO[bytes] = await trio.to_thread.run_sync(temp.open, "xb")
        try:
            buffer = bytearray()

            def flush(data: bytes) -> None:
                file.write(data)
                digest.update(data)

            async for chunk in chunks:
                size += len(chunk)
                if size > max_size:
                    raise BlobTooLarge(max_size)
                buffer += chunk
                if len(buffer) >= WRITE_BUFFER:
                    data, buffer = bytes(buffer), bytearray()
                    await trio.to_thread.run_sync(flush, data)
            if buffer:
                await trio.to_thread.run_sync(flush, bytes(buffer))

            def commit() -> None:
                file.flush()
                os.fsync(file.fileno())
                file.close()
                os.replace(temp, final)
                _fsync_dir(self.root)

            await trio.to_thread.run_sync(commit)
            done = True
        finally:
            if not done:
                with trio.CancelScope(shield=True):
                    await trio.to_thread.run_sync(_discard, file, temp)
        return WrittenBlob(key=key, md5=digest.hexdigest(), size=size)

    async def read(self, key: str) -> AsyncGenerator[bytes, None]:
        path = self._path(key)
        try:
            file: IO[bytes] = await trio.to_thread.run_sync(path.open, "rb")
        except FileNotFoundError:
            raise BlobNotFound(key) from None
        try:
            while chunk := await trio.to_thread.run_sync(file.read, READ_CHUNK):
                yield chunk
        finally:
            file.close()

    async def delete(self, key: str) -> None:
        await trio.to_thread.run_sync(self._path(key).unlink, True)


def _discard(file: IO[bytes], temp: Path) -> None:
    file.close()
    temp.unlink(missing_ok=True)
