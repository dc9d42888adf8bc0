"""The per-instance sandbox directory: the device's filesystem, installed apps and saved state.

Layout (docs/devices.md)::

    <sandbox>/fs/          the device's filesystem: device path /a/b is <sandbox>/fs/a/b
    <sandbox>/apps/<id>/   the installed package of each app, as handed to install
    <sandbox>/state.json   installed apps and settings, rewritten (atomically) on change

Device paths are absolute POSIX paths, normalized lexically (``..`` cannot climb above the
device root), and Android's ``/sdcard`` is an alias of ``/storage/emulated/0`` as on a real
device. Nothing here ever creates a symlink, so lexical normalization keeps every path inside
the sandbox. All blocking calls run in worker threads; errors become `DeviceFileError` with
the errno a device shell would print.
"""

from __future__ import annotations

import errno
import json
import os
import posixpath
import shutil
import stat as stat_module
from collections.abc import AsyncIterable, Callable
from pathlib import Path
from typing import Any, Final, TypeVar

import trio

from .._errors import DeviceFileError, InvalidInputError
from ..base import FileEntry, FileKind, Platform

__all__ = ["Sandbox"]

T = TypeVar("T")

_ALIASES: Final = (
    ("/sdcard", "/storage/emulated/0"),
    ("/storage/self/primary", "/storage/emulated/0"),
)
# Device paths, not host paths: "/tmp" here is <sandbox>/fs/tmp (hence the noqa: S108).
_SKELETON: Final[dict[Platform, tuple[str, ...]]] = {
    Platform.ANDROID: (
        "/storage/emulated/0/Download",
        "/storage/emulated/0/DCIM",
        "/storage/emulated/0/Pictures",
        "/data/local/tmp",
        "/system/bin",
    ),
    Platform.IOS: ("/Documents", "/Library/Caches", "/tmp"),  # noqa: S108
    Platform.XCODE: ("/workspace", "/tmp"),  # noqa: S108
    Platform.GRADLE: ("/workspace", "/tmp"),  # noqa: S108
}  # fmt: skip
_STATE: Final = "state.json"


def _kind(mode: int) -> FileKind:
    if stat_module.S_ISDIR(mode):
        return FileKind.DIRECTORY
    if stat_module.S_ISREG(mode):
        return FileKind.FILE
    if stat_module.S_ISLNK(mode):
        return FileKind.SYMLINK
    return FileKind.OTHER


class Sandbox:
    """One instance's directory; every method that touches the disk is async."""

    def __init__(self, root: Path, platform: Platform) -> None:
        self.root = root
        self.fs = root / "fs"
        self.apps = root / "apps"
        self._platform = platform

    # -- lifecycle ------------------------------------------------------------------------
    async def create(self) -> dict[str, Any]:
        """Create the layout (an existing sandbox is adopted); returns the saved state."""

        def create() -> dict[str, Any]:
            for path in _SKELETON[self._platform]:
                (self.fs / path.lstrip("/")).mkdir(parents=True, exist_ok=True)
            self.apps.mkdir(parents=True, exist_ok=True)
            try:
                loaded = json.loads((self.root / _STATE).read_text())
            except (FileNotFoundError, ValueError):
                return {}
            return loaded if isinstance(loaded, dict) else {}

        return await self._run(create)

    async def destroy(self) -> None:
        await trio.to_thread.run_sync(lambda: shutil.rmtree(self.root, ignore_errors=True))

    async def save_state(self, state: dict[str, Any]) -> None:
        data = json.dumps(state, indent=1, sort_keys=True)

        def save() -> None:
            temporary = self.root / f".{_STATE}.tmp"
            temporary.write_text(data)
            temporary.replace(self.root / _STATE)

        await self._run(save)

    # -- paths ----------------------------------------------------------------------------
    def normalize(self, device_path: str) -> str:
        """The device path as the caller spelled it, normalized lexically (``a/../b`` is
        ``b``, no trailing slash); `InvalidInputError` unless it is absolute."""
        if not device_path.startswith("/") or "\x00" in device_path:
            raise InvalidInputError(f"not an absolute device path: {device_path!r}")
        return ("/" + posixpath.normpath(device_path).lstrip("/")).rstrip("/") or "/"

    def canonical(self, device_path: str) -> str:
        """The normalized path with aliases resolved: the one real name of the file."""
        path = self.normalize(device_path)
        for alias, target in _ALIASES:
            if path == alias or path.startswith(alias + "/"):
                path = target + path[len(alias) :]
        return path

    def resolve(self, device_path: str) -> Path:
        """The host path of a device path (which need not exist)."""
        path = self.canonical(device_path)
        return self.fs / path.lstrip("/") if path != "/" else self.fs

    # -- file operations ------------------------------------------------------------------
    async def stat(self, device_path: str) -> FileEntry:
        path, host = self.normalize(device_path), self.resolve(device_path)
        return await self._run(lambda: self._entry(path, host), path)

    async def ls(self, device_path: str) -> list[FileEntry]:
        path, host = self.normalize(device_path), self.resolve(device_path)

        def ls() -> list[FileEntry]:
            if not host.is_dir():
                return [self._entry(path, host)]
            return [
                self._entry(posixpath.join(path, child.name), child)
                for child in sorted(host.iterdir(), key=lambda p: p.name)
            ]

        return await self._run(ls, path)

    async def mkdir(self, device_path: str) -> None:
        path, host = self.normalize(device_path), self.resolve(device_path)
        await self._run(lambda: host.mkdir(parents=True, exist_ok=True), path)

    async def remove(self, device_path: str, *, recursive: bool) -> None:
        path, host = self.normalize(device_path), self.resolve(device_path)
        if path == "/":
            raise DeviceFileError(path, errno.EPERM)

        def remove() -> None:
            if host.is_dir() and not host.is_symlink():
                if not recursive:
                    raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR))
                shutil.rmtree(host)
            else:
                host.unlink()

        await self._run(remove, path)

    async def read(self, device_path: str) -> bytes:
        path, host = self.normalize(device_path), self.resolve(device_path)
        return await self._run(host.read_bytes, path)

    async def write(
        self,
        device_path: str,
        chunks: AsyncIterable[bytes],
        *,
        mode: int,
        mtime: int | None,
    ) -> int:
        """Stream ``chunks`` into a temporary file beside the target, then rename it in:
        a cancelled or failed push leaves no half-written file behind."""
        path, host = self.normalize(device_path), self.resolve(device_path)
        if path == "/":
            raise DeviceFileError(path, errno.EISDIR)
        await self._run(lambda: host.parent.mkdir(parents=True, exist_ok=True), path)
        if await trio.Path(host).is_dir():
            raise DeviceFileError(path, errno.EISDIR)
        temporary = trio.Path(host.parent / f".{host.name}.devyard-partial")
        written = 0
        try:
            async with await trio.open_file(temporary, "wb") as file:
                async for chunk in chunks:
                    await file.write(chunk)
                    written += len(chunk)

            def finish() -> None:
                os.chmod(temporary, mode & 0o7777)
                if mtime is not None:
                    os.utime(temporary, (mtime, mtime))
                os.replace(temporary, host)

            await self._run(finish, path)
        except BaseException:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(lambda: Path(temporary).unlink(missing_ok=True))
            raise
        return written

    # -- helpers --------------------------------------------------------------------------
    def _entry(self, path: str, host: Path) -> FileEntry:
        st = host.lstat()
        return FileEntry(
            name=posixpath.basename(path) or "/",
            path=path,
            kind=_kind(st.st_mode),
            size=st.st_size,
            mode=st.st_mode,
            mtime=int(st.st_mtime),
        )

    async def _run(self, function: Callable[[], T], device_path: str = "") -> T:
        """Run blocking file I/O in a thread; OSError becomes DeviceFileError once, here."""
        try:
            return await trio.to_thread.run_sync(function)
        except OSError as exc:
            code = exc.errno or errno.EIO
            raise DeviceFileError(device_path or str(self.root), code) from exc
