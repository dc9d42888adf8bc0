"""The virtual device: one object per instance, implementing `DeviceDriver` and `AndroidDevice`.

Public API (stable; the ADB device side and the per-instance services code against it)::

    async with open_virtual_device(spec) as dev:        # or: async with VirtualDevice(spec)
        dev.describe() -> DeviceInfo                      # width/height as currently rotated
        dev.sandbox -> Path                               # the instance's sandbox directory
        # screen (UnsupportedOperationError on headless xcode/gradle)
        await dev.screenshot() -> bytes                   # PNG, byte-identical for same inputs
        dev.frames(codec=Codec.JPEG, max_fps=30, max_size=None) -> AsyncIterator[Frame]
        dev.request_keyframe() -> None
        # input: coordinates normalized to [0, 1] of the rotated screen
        await dev.touch(pointer_id, TouchAction.DOWN|MOVE|UP|CANCEL, x, y)
        await dev.tap(x, y)
        await dev.key(Key.HOME | Key.BACK | ...)
        await dev.text("hello")                           # into the visible text field
        await dev.scroll(x, y, dx, dy)
        await dev.get_clipboard() -> str ; await dev.set_clipboard(text)
        await dev.rotate(Rotation.LANDSCAPE)
        # apps: app_id = Android package name / iOS bundle id
        await dev.install(Path) -> AppInfo                # .apk, or .ipa / .app directory
        await dev.uninstall(app_id) ; await dev.launch(app_id) ; await dev.terminate(app_id)
        await dev.list_apps() -> list[AppInfo] ; await dev.open_url(url)
        dev.foreground_app() -> str | None
        # files: absolute device paths, kept under dev.sandbox / "fs"
        await dev.push(path, bytes | AsyncIterable[bytes], mode=0o644) -> int
        await dev.pull(path) -> bytes ; await dev.stat(path) -> FileEntry
        await dev.ls(path) -> list[FileEntry] ; await dev.mkdir(path)
        await dev.remove(path, recursive=False)
        dev.resolve_path(path) -> Path                    # host path of a device path
        # logs: bounded ring buffer
        dev.logs(after=0) -> list[LogEntry] ; await dev.wait_logs(after=0)
        dev.log(level, tag, message) -> None              # e.g. the adb side logging a command
        # Android only (UnsupportedOperationError elsewhere)
        dev.properties() -> Mapping[str, str] ; dev.getprop(name) -> str  ("" if unset)
        await dev.settings_get(ns, key) -> str | None ; await dev.settings_put(ns, key, value)
        await dev.settings_delete(ns, key) -> bool ; await dev.settings_list(ns) -> dict
        # device sockets: loopback TCP ports stand in for device ports (see ports.py)
        await dev.open_port(port) -> HalfCloseableStream  ; await dev.open_abstract(name)
        await nursery.start(dev.serve_port, port, handler)      # listen on a device port
        await nursery.start(dev.serve_abstract, name, handler)
        dev.map_port(port, host_port) ; dev.map_abstract(name, host_port) ; dev.unmap_*(...)
        dev.listening() -> list[ListeningSocket]          # for /proc/net/tcp, /proc/net/unix
    await dev.aclose()                                    # idempotent; removes the sandbox
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import NoReturn

import trio

from ..base import (
    DEFAULT_MAX_FPS,
    AppInfo,
    Codec,
    DeviceInfo,
    DeviceSpec,
    FileEntry,
    Frame,
    Key,
    LogEntry,
    LogLevel,
    Rotation,
    TouchAction,
)
from .ports import ListeningSocket, PortHandler

__all__ = ["VirtualDevice", "open_virtual_device"]


class VirtualDevice:
    def __init__(self, spec: DeviceSpec) -> None:
        self._spec = spec

    async def start(self) -> None:
        raise NotImplementedError

    async def aclose(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> VirtualDevice:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    @property
    def sandbox(self) -> Path:
        return self._spec.sandbox_dir

    def describe(self) -> DeviceInfo:
        raise NotImplementedError

    async def screenshot(self) -> bytes:
        raise NotImplementedError

    def frames(
        self,
        *,
        codec: Codec = Codec.JPEG,
        max_fps: float = DEFAULT_MAX_FPS,
        max_size: int | None = None,
    ) -> AsyncIterator[Frame]:
        raise NotImplementedError

    def request_keyframe(self) -> None:
        raise NotImplementedError

    async def touch(self, pointer_id: int, action: TouchAction, x: float, y: float) -> None:
        raise NotImplementedError

    async def tap(self, x: float, y: float) -> None:
        raise NotImplementedError

    async def key(self, key: Key) -> None:
        raise NotImplementedError

    async def text(self, text: str) -> None:
        raise NotImplementedError

    async def scroll(self, x: float, y: float, dx: float, dy: float) -> None:
        raise NotImplementedError

    async def get_clipboard(self) -> str:
        raise NotImplementedError

    async def set_clipboard(self, text: str) -> None:
        raise NotImplementedError

    async def rotate(self, rotation: Rotation) -> None:
        raise NotImplementedError

    async def install(self, path: Path) -> AppInfo:
        raise NotImplementedError

    async def uninstall(self, app_id: str) -> None:
        raise NotImplementedError

    async def launch(self, app_id: str) -> None:
        raise NotImplementedError

    async def terminate(self, app_id: str) -> None:
        raise NotImplementedError

    async def list_apps(self) -> list[AppInfo]:
        raise NotImplementedError

    async def open_url(self, url: str) -> None:
        raise NotImplementedError

    def foreground_app(self) -> str | None:
        raise NotImplementedError

    async def push(
        self, device_path: str, data: bytes | AsyncIterable[bytes], *, mode: int = 0o644
    ) -> int:
        raise NotImplementedError

    async def pull(self, device_path: str) -> bytes:
        raise NotImplementedError

    async def stat(self, device_path: str) -> FileEntry:
        raise NotImplementedError

    async def ls(self, device_path: str) -> list[FileEntry]:
        raise NotImplementedError

    async def mkdir(self, device_path: str) -> None:
        raise NotImplementedError

    async def remove(self, device_path: str, *, recursive: bool = False) -> None:
        raise NotImplementedError

    def resolve_path(self, device_path: str) -> Path:
        raise NotImplementedError

    def logs(self, *, after: int = 0) -> list[LogEntry]:
        raise NotImplementedError

    async def wait_logs(self, *, after: int = 0) -> list[LogEntry]:
        raise NotImplementedError

    def log(self, level: LogLevel, tag: str, message: str) -> None:
        raise NotImplementedError

    def properties(self) -> Mapping[str, str]:
        raise NotImplementedError

    def getprop(self, name: str) -> str:
        raise NotImplementedError

    async def settings_get(self, namespace: str, key: str) -> str | None:
        raise NotImplementedError

    async def settings_put(self, namespace: str, key: str, value: str) -> None:
        raise NotImplementedError

    async def settings_delete(self, namespace: str, key: str) -> bool:
        raise NotImplementedError

    async def settings_list(self, namespace: str) -> dict[str, str]:
        raise NotImplementedError

    async def open_port(self, port: int) -> trio.abc.HalfCloseableStream:
        raise NotImplementedError

    async def open_abstract(self, name: str) -> trio.abc.HalfCloseableStream:
        raise NotImplementedError

    async def serve_port(
        self,
        port: int,
        handler: PortHandler,
        *,
        task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
    ) -> NoReturn:
        raise NotImplementedError

    async def serve_abstract(
        self,
        name: str,
        handler: PortHandler,
        *,
        task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
    ) -> NoReturn:
        raise NotImplementedError

    def map_port(self, port: int, host_port: int) -> None:
        raise NotImplementedError

    def unmap_port(self, port: int) -> None:
        raise NotImplementedError

    def map_abstract(self, name: str, host_port: int) -> None:
        raise NotImplementedError

    def unmap_abstract(self, name: str) -> None:
        raise NotImplementedError

    def listening(self) -> list[ListeningSocket]:
        raise NotImplementedError


@asynccontextmanager
async def open_virtual_device(spec: DeviceSpec) -> AsyncIterator[VirtualDevice]:
    """Start a virtual device for ``spec``; close it and remove its sandbox on exit."""
    async with VirtualDevice(spec) as device:
        yield device
