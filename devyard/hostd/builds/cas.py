"""Content-addressed stores on the host, one per organization: sync blobs and Gradle's build
cache (docs/builds.md).

`BlobStore` keeps the bytes of synced files by SHA-256 (``<root>/<aa>/<sha256>``), shared by
every instance of the organization on this host, so a second instance of the same repository
uploads nothing. A blob is written to a temporary file, hash-checked, then renamed into place:
a blob that exists is whole and holds what its name says. The store lies outside every
sandbox (builds never see it); a commit copies blobs into the workspace, never links them (a
build may write its tree).

`BuildCache` answers Gradle's HTTP build cache protocol (``GET``/``PUT /cache/{key}``) from
the organization's Gradle user home's local build cache directory (``caches/build-cache-1``,
one file per key): the directory the instance's own builds use with ``--build-cache`` (they
have no network, so they use the directory, not the URL), so an entry a customer's CI puts
is a hit for the instance's next build, and the reverse.

Cleanup (docs/builds.md, "Cleanup"). Each live instance *pins* the blobs it still refers to
(`BlobStore.pin`: the manifests of its recent ``/sync/missing``, the tree it holds, the
artifacts of its kept execs) in ``<root>/pins/<owner>``; `BlobStore.sweep` removes every blob
no live pin names and nobody used for a grace (a use touches the blob's mtime), and the pins
of instances whose directory is gone. `BuildCache` is bounded: past `BuildCache.max_bytes`
a ``PUT`` evicts the least recently used entries (Gradle itself touches an entry's mtime when
a build loads it, and so does ``GET``), and `BuildCache.sweep` drops entries unused for
`BuildCache.max_idle_s`.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import secrets
import shutil
import stat
import tempfile
import time
from collections.abc import AsyncIterator, Iterable
from pathlib import Path
from typing import Any, Final

import trio

from .errors import BuildError, BuildReason
from .server_cache import ServerCache
from .sync import DecodedBody

__all__ = ["BlobStore", "BuildCache", "check_key", "check_sha"]

MAX_BLOB: Final = 2 * 1024**3
MAX_CACHE_ENTRY: Final = 512 * 1024**2
MAX_CACHE_BYTES: Final = 10 * 1024**3
CACHE_MAX_IDLE_S: Final = 7 * 24 * 3600.0
_PINS: Final = "pins"
_SHA: Final = re.compile(r"[0-9a-f]{64}")
#: Gradle's cache keys: hex (MD5 in Gradle 4 and 5, SHA-1/SHA-256 later).
_CACHE_KEY: Final = re.compile(r"[0-9a-f]{16,128}")
_CACHE_DIR: Final = ("caches", "build-cache-1")


def check_sha(value: str) -> str:
    if not _SHA.fullmatch(value):
        raise BuildError(BuildReason.BAD_REQUEST, f"{value[:80]!r} is not a lowercase hex SHA-256")
    return value


async def _write_checked(
    directory: Path,
    dest: Path,
    pieces: AsyncIterator[bytes],
    limit: int,
    *,
    sha256: str | None = None,
) -> int:
    """Write *pieces* to a temporary file in *directory*, check the size (and the hash), then
    rename it to *dest*. The number of bytes; `BuildError` and nothing at *dest* otherwise."""
    handle, name = await trio.to_thread.run_sync(
        lambda: tempfile.mkstemp(prefix=".put-", dir=directory)
    )
    temp = Path(name)
    try:
        digest, size = hashlib.sha256(), 0
        async with await trio.open_file(handle, "wb") as out:
            async for piece in pieces:
                size += len(piece)
                if size > limit:
                    raise BuildError(BuildReason.TOO_LARGE, f"the body exceeds {limit} bytes")
                digest.update(piece)
                await out.write(piece)
        if sha256 is not None and digest.hexdigest() != sha256:
            raise BuildError(BuildReason.BAD_REQUEST, f"the body does not hash to {sha256}")

        def place() -> None:
            os.chmod(temp, 0o644)
            dest.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
            os.replace(temp, dest)

        await trio.to_thread.run_sync(place)
        return size
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)


class BlobStore:
    """An organization's sync blobs on this host (`sync.BlobSource`)."""

    def __init__(self, root: Path, *, max_blob: int = MAX_BLOB) -> None:
        self.root = root
        self.max_blob = max_blob

    def create(self) -> None:
        (self.root / "tmp").mkdir(mode=0o700, parents=True, exist_ok=True)

    def _where(self, sha256: str) -> Path:
        return self.root / sha256[:2] / sha256

    def has(self, sha256: str) -> bool:
        where = self._where(sha256)
        if not where.is_file():
            return False
        self.touch(sha256)  # asked for by a sync: used
        return True

    def path(self, sha256: str) -> Path | None:
        where = self._where(sha256)
        return where if where.is_file() else None

    def copy(self, sha256: str, dest: Path) -> bool:
        try:
            shutil.copyfile(self._where(sha256), dest, follow_symlinks=False)
        except FileNotFoundError:
            return False
        self.touch(sha256)
        return True

    def touch(self, sha256: str) -> None:
        """Mark a blob used now (the sweep's grace counts from its last use)."""
        with contextlib.suppress(OSError):
            os.utime(self._where(sha256))

    def pin(self, owner: Path, shas: Iterable[str]) -> None:
        """*owner* (a live instance's directory) refers to *shas*: the sweep keeps them while
        the directory exists. Replaces the owner's previous pins (blocking)."""
        pins = self.root / _PINS
        pins.mkdir(mode=0o700, exist_ok=True)
        name = hashlib.sha256(str(owner).encode()).hexdigest()[:32]
        body = "\n".join([str(owner), *sorted(set(shas))]) + "\n"
        temp = pins / f".{name}.{secrets.token_hex(4)}"
        temp.write_text(body)
        os.replace(temp, pins / name)

    def unpin(self, owner: Path) -> None:
        name = hashlib.sha256(str(owner).encode()).hexdigest()[:32]
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.root / _PINS / name)

    def _pinned(self) -> set[str]:
        """The blobs live owners pin; the pins of owners that are gone are removed."""
        pinned: set[str] = set()
        pins = self.root / _PINS
        with contextlib.suppress(FileNotFoundError), os.scandir(pins) as entries:
            for entry in entries:
                try:
                    lines = Path(entry.path).read_text().splitlines()
                except OSError:
                    continue
                if entry.name.startswith(".") or not lines or not Path(lines[0]).exists():
                    if entry.name.startswith(".") and not _old(entry.path, 3600.0):
                        continue  # a pin being written
                    with contextlib.suppress(OSError):
                        os.unlink(entry.path)
                    continue
                pinned.update(lines[1:])
        return pinned

    def sweep(self, grace_s: float) -> int:
        """Remove the blobs no live instance pins and nobody used for *grace_s* seconds, and
        upload leftovers as old; how many blobs (blocking)."""
        pinned = self._pinned()
        removed = 0
        with contextlib.suppress(FileNotFoundError), os.scandir(self.root) as shards:
            for shard in shards:
                if shard.name == _PINS or not shard.is_dir(follow_symlinks=False):
                    continue
                with os.scandir(shard.path) as blobs:
                    for blob in blobs:
                        keep = blob.name in pinned and shard.name != "tmp"
                        if keep or not _old(blob.path, grace_s):
                            continue
                        with contextlib.suppress(OSError):
                            os.unlink(blob.path)
                            removed += shard.name != "tmp"
        return removed

    async def put(self, sha256: str, chunks: AsyncIterator[bytes], encoding: str) -> dict[str, Any]:
        """Store the (decoded) body as blob *sha256*; `BuildError` when it hashes otherwise."""
        check_sha(sha256)
        body = DecodedBody(chunks, encoding, self.max_blob)
        if await trio.to_thread.run_sync(self.has, sha256):
            async for _ in body.rest():  # already there: read and drop the body
                pass
            return {"sha256": sha256, "stored": False}
        size = await _write_checked(
            self.root / "tmp", self._where(sha256), body.rest(), self.max_blob, sha256=sha256
        )
        return {"sha256": sha256, "size": size, "stored": True}


class BuildCache:
    """Gradle's HTTP build cache over an organization's local build cache directory,
    ``<gradle home>/caches/build-cache-1``. Builds can write the Gradle home: every step below
    it is opened with ``O_NOFOLLOW`` relative to its parent's descriptor, so a link a build
    left there is refused, never followed."""

    def __init__(
        self,
        gradle_home: Path,
        *,
        owner: tuple[int, int] | None = None,
        max_entry: int = MAX_CACHE_ENTRY,
        max_bytes: int = MAX_CACHE_BYTES,
        max_idle_s: float = CACHE_MAX_IDLE_S,
    ) -> None:
        self.gradle_home = gradle_home
        self.owner = owner
        self.max_entry = min(max_entry, max_bytes)
        self.max_bytes = max_bytes
        self.max_idle_s = max_idle_s
        #: The server's cache of the organization (server_cache.py): read and written through.
        self.upstream: ServerCache | None = None

    def _entries(self, directory: int) -> list[tuple[float, int, str]]:
        """(mtime, size, key) of the cache's entries, least recently used first."""
        found = []
        for name in os.listdir(directory):
            if not _CACHE_KEY.fullmatch(name):
                continue
            with contextlib.suppress(OSError):
                st = os.stat(name, dir_fd=directory, follow_symlinks=False)
                if stat.S_ISREG(st.st_mode):
                    found.append((st.st_mtime, st.st_blocks * 512, name))
        return sorted(found)

    def _evict(self, directory: int, keep: str) -> int:
        """Remove least recently used entries until the cache fits `max_bytes` (*keep*, just
        stored, last of all); how many."""
        entries = self._entries(directory)
        total = sum(size for _, size, _ in entries)
        removed = 0
        for _, size, key in sorted(entries, key=lambda e: e[2] == keep):
            if total <= self.max_bytes:
                break
            with contextlib.suppress(OSError):
                os.unlink(key, dir_fd=directory)
                total -= size
                removed += 1
        return removed

    def sweep(self) -> int:
        """Remove entries no build used for `max_idle_s` (blocking); how many."""
        try:
            directory = self._open_dir(create=False)
        except BuildError:
            return 0
        if directory is None:
            return 0
        removed = 0
        try:
            cutoff = time.time() - self.max_idle_s
            for mtime, _, key in self._entries(directory):
                if mtime < cutoff:
                    with contextlib.suppress(OSError):
                        os.unlink(key, dir_fd=directory)
                        removed += 1
        finally:
            os.close(directory)
        return removed

    def _open_dir(self, create: bool) -> int | None:
        flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
        fd = os.open(self.gradle_home, flags)
        try:
            for name in _CACHE_DIR:
                try:
                    step = os.open(name, flags, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        return None
                    os.mkdir(name, 0o755, dir_fd=fd)
                    if self.owner is not None:
                        os.chown(name, *self.owner, dir_fd=fd, follow_symlinks=False)
                    step = os.open(name, flags, dir_fd=fd)
                os.close(fd)
                fd = step
        except OSError as exc:
            os.close(fd)
            raise BuildError(
                BuildReason.CONFLICT, f"the build cache directory is not usable: {exc.strerror}"
            ) from None
        return fd

    def _read(self, key: str) -> bytes | None:
        directory = self._open_dir(create=False)
        if directory is None:
            return None
        try:
            fd = os.open(key, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=directory)
        except OSError:
            return None
        finally:
            os.close(directory)
        with os.fdopen(fd, "rb") as handle:
            st = os.fstat(handle.fileno())
            if not stat.S_ISREG(st.st_mode) or st.st_size > self.max_entry:
                return None
            with contextlib.suppress(OSError):
                os.utime(handle.fileno())  # used: the last to be evicted
            return handle.read(self.max_entry + 1)

    def keys(self, since: float = 0.0) -> list[str]:
        """The entries' keys, those modified since *since* (epoch seconds) only (blocking)."""
        try:
            directory = self._open_dir(create=False)
        except BuildError:
            return []
        if directory is None:
            return []
        try:
            return [key for mtime, _, key in self._entries(directory) if mtime >= since]
        finally:
            os.close(directory)

    async def read_local(self, key: str) -> bytes | None:
        return await trio.to_thread.run_sync(self._read, check_key(key))

    async def get(self, key: str) -> bytes | None:
        """The entry here, else the server's (kept here too)."""
        entry = await self.read_local(key)
        if entry is None and self.upstream is not None:
            entry = await self.upstream.get(key, self.max_entry)
            if entry is not None:
                await self.put_local(key, _once(entry))
        return entry

    async def put(self, key: str, chunks: AsyncIterator[bytes]) -> int:
        """Store the entry here, then on the server (best-effort)."""
        size = await self.put_local(key, chunks)
        if self.upstream is not None:
            entry = await self.read_local(key)
            if entry is not None:
                await self.upstream.put(key, entry)
        return size

    async def put_local(self, key: str, chunks: AsyncIterator[bytes]) -> int:
        check_key(key)
        temp = f".put-{secrets.token_hex(8)}"

        def start() -> tuple[int, int]:
            directory = self._open_dir(create=True)
            assert directory is not None
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
            return directory, os.open(temp, flags, 0o644, dir_fd=directory)

        directory, fd = await trio.to_thread.run_sync(start)
        try:
            size = 0
            async with await trio.open_file(fd, "wb") as out:
                async for piece in chunks:
                    size += len(piece)
                    if size > self.max_entry:
                        raise BuildError(
                            BuildReason.TOO_LARGE,
                            f"a cache entry is at most {self.max_entry} bytes",
                        )
                    await out.write(piece)

            def place() -> None:
                if self.owner is not None:
                    os.chown(temp, *self.owner, dir_fd=directory, follow_symlinks=False)
                os.replace(temp, key, src_dir_fd=directory, dst_dir_fd=directory)
                self._evict(directory, key)

            await trio.to_thread.run_sync(place)
            return size
        finally:
            closing = getattr(chunks, "aclose", None)
            if closing is not None:  # a refused body's generator ends here, not at GC
                await closing()
            with contextlib.suppress(OSError):
                os.unlink(temp, dir_fd=directory)
            os.close(directory)


async def _once(data: bytes) -> AsyncIterator[bytes]:
    yield data


def _old(path: str, seconds: float) -> bool:
    try:
        return os.stat(path, follow_symlinks=False).st_mtime < time.time() - seconds
    except OSError:
        return False


def check_key(key: str) -> str:
    if not _CACHE_KEY.fullmatch(key):
        raise BuildError(BuildReason.BAD_REQUEST, "a build cache key is 16 to 128 hex digits")
    return key
