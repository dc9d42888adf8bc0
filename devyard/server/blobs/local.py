"""`LocalBlobStore`: blobs as files in one directory under the server's data dir.

Theory of operation. A write streams into ``<dir>/.tmp/<key>.<random>`` (same file system, so
the final ``os.replace`` is atomic), buffering at most `WRITE_BUFFER` bytes before each write
in a worker thread, where the MD5 is also updated (hashing 1 GiB is seconds of CPU the trio
thread must not spend). Then the file is fsynced, renamed to ``<dir>/<key>`` and the directory
fsynced, so after ``write`` returns the blob survives a crash, and before it returns nothing
exists under the key. A failed or cancelled write removes its temporary file (shielded), and
any previous blob under another key is untouched: an interrupted upload never damages the
bytes an asset already has.

A process killed mid-write (``kill -9``, a power cut) cannot remove its temporary file;
`sweep_temporary` does, later: it removes the files of ``.tmp`` that no write of this process
holds open and that nobody modified for the caller's grace (a write of another process on the
same directory touches its file at least every `WRITE_BUFFER` bytes, and the grace is an hour by
default). So a live upload is never touched, however slow its client.

Errors of the file system are translated once, here: ``ENOSPC``/``EDQUOT`` are
`BlobStoreFull`, any other ``OSError`` (a directory made read-only, ``EIO``) is
`BlobStoreUnavailable`; a missing key on read is `BlobNotFound`.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import secrets
from collections.abc import AsyncGenerator, AsyncIterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Final

import trio

from .base import (
    BlobNotFound,
    BlobStoreError,
    BlobStoreFull,
    BlobStoreUnavailable,
    BlobTooLarge,
    StoredBlob,
    WrittenBlob,
)

__all__ = ["READ_CHUNK", "WRITE_BUFFER", "LocalBlobStore"]

WRITE_BUFFER: Final = 1024 * 1024  # bytes gathered before one write in a worker thread
READ_CHUNK: Final = 1024 * 1024
_KEY_RE: Final = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]{0,199}")


_FULL: Final = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


def translate_os_error(exc: OSError) -> BlobStoreError:
    """The blob store's error for a file-system error."""
    if exc.errno in _FULL:
        return BlobStoreFull(f"the blob store is full: {exc.strerror or exc}")
    return BlobStoreUnavailable(f"the blob store failed: {exc.strerror or exc}")


@contextmanager
def _translated() -> Iterator[None]:
    try:
        yield
    except OSError as exc:
        raise translate_os_error(exc) from exc


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
        self._writing: set[str] = set()  # names in ``.tmp`` of this process's writes

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
        # Only the file system's errors are translated: the chunks' own (a client that went
        # away) pass through as they are.
        with _translated():
            await trio.to_thread.run_sync(self._prepare)
            temp = self._tmp / f"{key}.{secrets.token_hex(8)}"
            self._writing.add(temp.name)
            try:
                file: IO[bytes] = await self._open(temp)
            except BaseException:
                self._writing.discard(temp.name)
                raise
        digest = hashlib.md5(usedforsecurity=False)
        size = 0
        done = False
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
                    with _translated():
                        await trio.to_thread.run_sync(flush, data)
            if buffer:
                with _translated():
                    await trio.to_thread.run_sync(flush, bytes(buffer))

            def commit() -> None:
                file.flush()
                os.fsync(file.fileno())
                file.close()
                os.replace(temp, final)
                _fsync_dir(self.root)

            with _translated():
                await trio.to_thread.run_sync(commit)
            done = True
        finally:
            self._writing.discard(temp.name)
            if not done:
                with trio.CancelScope(shield=True):
                    await trio.to_thread.run_sync(_discard, file, temp)
        return WrittenBlob(key=key, md5=digest.hexdigest(), size=size)

    async def _open(self, temp: Path) -> IO[bytes]:
        """The temporary file of a write (a seam: tests make it fail like a full disk)."""
        return await trio.to_thread.run_sync(temp.open, "xb")

    async def read(self, key: str) -> AsyncGenerator[bytes, None]:
        path = self._path(key)
        try:
            file: IO[bytes] = await trio.to_thread.run_sync(path.open, "rb")
        except FileNotFoundError:
            raise BlobNotFound(key) from None
        except OSError as exc:
            raise translate_os_error(exc) from exc
        try:
            while True:
                with _translated():
                    chunk = await trio.to_thread.run_sync(file.read, READ_CHUNK)
                if not chunk:
                    return
                yield chunk
        finally:
            file.close()

    async def delete(self, key: str) -> None:
        with _translated():
            await trio.to_thread.run_sync(self._path(key).unlink, True)

    async def probe(self) -> None:
        """The directory (or the one it will be made in) can be written."""
        root = self.root

        def writable() -> bool:
            where = root if root.exists() else root.parent
            return where.is_dir() and os.access(where, os.W_OK | os.X_OK)

        if not await trio.to_thread.run_sync(writable):
            raise BlobStoreUnavailable("not writable")

    async def retire(self, key: str) -> None:
        """Unlinked at once: a download that opened the file keeps reading it (POSIX; on a
        shared file system only within one machine, docs/blobs.md)."""
        await self.delete(key)

    async def list_blobs(self) -> list[StoredBlob]:
        def scan() -> list[StoredBlob]:
            found: list[StoredBlob] = []
            try:
                entries = list(os.scandir(self.root))
            except FileNotFoundError:
                return found
            for entry in entries:
                if _KEY_RE.fullmatch(entry.name) is None:
                    continue
                try:
                    if entry.is_file(follow_symlinks=False):
                        found.append(StoredBlob(entry.name, entry.stat().st_mtime))
                except FileNotFoundError:
                    continue  # deleted while we looked
            return found

        with _translated():
            return await trio.to_thread.run_sync(scan)

    async def sweep_temporary(self, *, older_than: float) -> int:
        """Remove the temporary files of writes that no longer run: not written by this
        process now, and not modified since *older_than* (seconds since the epoch); how
        many."""
        writing = frozenset(self._writing)

        def sweep() -> int:
            removed = 0
            try:
                entries = list(os.scandir(self._tmp))
            except FileNotFoundError:
                return removed
            for entry in entries:
                if entry.name in writing:
                    continue
                try:
                    if not entry.is_file(follow_symlinks=False):
                        continue
                    if entry.stat(follow_symlinks=False).st_mtime >= older_than:
                        continue  # perhaps another process's write under way
                    os.unlink(entry.path)
                except FileNotFoundError:
                    continue  # gone meanwhile
                removed += 1
            return removed

        with _translated():
            return await trio.to_thread.run_sync(sweep)


def _discard(file: IO[bytes], temp: Path) -> None:
    file.close()
    temp.unlink(missing_ok=True)
