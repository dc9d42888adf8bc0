"""The emulator's files: ``adb push``/``pull`` through the sandbox, and ``ls``/``mkdir``/``rm``."""

from __future__ import annotations

import errno
import posixpath
import shutil
from collections.abc import AsyncIterable
from pathlib import Path

import trio

from .._errors import (
    DeviceError,
    DeviceFileError,
)
from ..base import (
    FileEntry,
)
from ._base import DeviceBase
from .adb import AdbResult, quote_all
from .parse import (
    errno_in,
    file_kind,
    parse_ls_line,
)

__all__ = ["FilesMixin"]


class FilesMixin(DeviceBase):
    async def push(
        self, device_path: str, data: bytes | AsyncIterable[bytes], *, mode: int = 0o644
    ) -> int:
        """Spooled to a file in the sandbox (its mode is what adb push sends), then pushed;
        adb creates the parent directories."""
        self._check_open()
        path = self._device_path(device_path)
        spool = trio.Path(self._spool_path())
        written = 0
        try:
            async with await spool.open("wb") as out:
                if isinstance(data, bytes | bytearray | memoryview):
                    written += len(data)
                    await out.write(data)
                else:
                    async for chunk in data:
                        written += len(chunk)
                        await out.write(chunk)
            await spool.chmod(mode & 0o7777)
            result = await self._adb.run(
                "push", str(spool), path, serial=self.serial,
                time_limit=self._config.transfer_timeout, check=False,
            )  # fmt: skip
            self._raise_file_error(result, path)
        finally:
            with trio.CancelScope(shield=True):
                await spool.unlink(missing_ok=True)
        return written

    async def pull(self, device_path: str) -> bytes:
        self._check_open()
        path = self._device_path(device_path)
        spool = trio.Path(self._spool_path())
        try:
            result = await self._adb.run(
                "pull", path, str(spool), serial=self.serial,
                time_limit=self._config.transfer_timeout, check=False,
            )  # fmt: skip
            self._raise_file_error(result, path)
            if await spool.is_dir():
                raise DeviceFileError(path, errno.EISDIR)
            return await spool.read_bytes()
        finally:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(_remove_host_path, Path(spool))

    async def stat(self, device_path: str) -> FileEntry:
        """From ``ls -lad``: mtime to the minute (toybox ls prints no seconds)."""
        self._check_open()
        path = self._device_path(device_path)
        result = await self._shell(quote_all(["ls", "-lad", path]), check=False)
        self._raise_file_error(result, path)
        for line in result.out.splitlines():
            entry = parse_ls_line(line)
            if entry is not None:
                name = posixpath.basename(path.rstrip("/")) or "/"
                return FileEntry(name, path, file_kind(entry.mode), entry.size, entry.mode,
                                 entry.mtime)  # fmt: skip
        raise DeviceError(f"ls -lad {path}: cannot read {result.text!r}")

    async def ls(self, device_path: str) -> list[FileEntry]:
        self._check_open()
        path = self._device_path(device_path)
        result = await self._shell(quote_all(["ls", "-la", path]), check=False)
        self._raise_file_error(result, path)
        entries = []
        for line in result.out.splitlines():
            entry = parse_ls_line(line)
            if entry is None or entry.name in (".", ".."):
                continue
            if entry.name == path:  # ls of a file lists the file itself
                return [await self.stat(path)]
            child = posixpath.join(path, entry.name)
            entries.append(FileEntry(entry.name, child, file_kind(entry.mode), entry.size,
                                     entry.mode, entry.mtime))  # fmt: skip
        return sorted(entries, key=lambda e: e.name)

    async def mkdir(self, device_path: str) -> None:
        self._check_open()
        path = self._device_path(device_path)
        self._raise_file_error(
            await self._shell(quote_all(["mkdir", "-p", path]), check=False), path
        )

    async def remove(self, device_path: str, *, recursive: bool = False) -> None:
        self._check_open()
        path = self._device_path(device_path)
        if path == "/":
            raise DeviceFileError(path, errno.EPERM)
        words = ["rm", "-r", path] if recursive else ["rm", path]
        self._raise_file_error(await self._shell(quote_all(words), check=False), path)

    @staticmethod
    def _raise_file_error(result: AdbResult, path: str) -> None:
        if result.status == 0:
            return
        code = errno_in(result.text)
        if code is not None:
            raise DeviceFileError(path, code)
        raise DeviceError(f"{path}: {result.text or f'adb exited {result.status}'}")


def _remove_host_path(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)
