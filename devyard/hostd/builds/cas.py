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
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Final

import trio

from .errors import BuildError, BuildReason
from .sync import DecodedBody

__all__ = ["BlobStore", "BuildCache", "check_key", "check_sha"]

MAX_BLOB: Final = 2 * 1024**3
MAX_CACHE_ENTRY: Final = 512 * 1024**2
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
        return self._where(sha256).is_file()

    def path(self, sha256: str) -> Path | None:
        where = self._where(sha256)
        return where if where.is_file() else None

    def copy(self, sha256: str, dest: Path) -> bool:
        try:
            shutil.copyfile(self._where(sha256), dest, follow_symlinks=False)
        except FileNotFoundError:
            return False
        return True

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
    ) -> None:
        self.gradle_home = gradle_home
        self.owner = owner
        self.max_entry = max_entry

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
            return handle.read(self.max_entry + 1)

    async def get(self, key: str) -> bytes | None:
        check_key(key)
        return await trio.to_thread.run_sync(self._read, key)

    async def put(self, key: str, chunks: AsyncIterator[bytes]) -> int:
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

            await trio.to_thread.run_sync(place)
            return size
        finally:
            with contextlib.suppress(OSError):
                os.unlink(temp, dir_fd=directory)
            os.close(directory)


def check_key(key: str) -> str:
    if not _CACHE_KEY.fullmatch(key):
        raise BuildError(BuildReason.BAD_REQUEST, "a build cache key is 16 to 128 hex digits")
    return key
