"""The virtual device: one object per instance, implementing `DeviceDriver` and `AndroidDevice`.

Public API (stable; the ADB device side and the per-instance services code against it)::

    async with open_virtual_device(spec) as dev:        # or: async with VirtualDevice(spec)
        dev.describe() -> DeviceInfo                      # width/height as currently rotated
        dev.sandbox -> Path                               # the instance's sandbox directory
        # screen (UnsupportedOperationError on headless xcode/gradle)
        await dev.screenshot() -> bytes                   # PNG, byte-identical for same inputs
        dev.frames(codec=Codec.JPEG, max_fps=30, max_size=None) -> AsyncIterator[Frame]
        dev.request_keyframe() -> None
        await dev.ui_tree() -> UiNode                     # the element tree (uitree.py)
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
        dev.foreground_app() -> str | None ; dev.package_path(app_id) -> Path | None
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

Theory of operation. The device is a shell over parts that each own one kind of state: the
UI (`ui.Screen`, a frozen value held by `frames.LiveScreen`), installed apps (`apps.AppStore`),
Android settings (`settings.AndroidSettings`), files (`sandbox.Sandbox`), device sockets
(`ports.PortTable`) and the log (`logbuffer.LogBuffer`). Input verbs are synchronous
transitions of the screen value (``_apply``) followed by a checkpoint; anything that touches
the disk runs in a worker thread. Apps and settings are written to the sandbox's state file
after every change, so a driver restarted on the same sandbox finds them again. Lifecycle:
NEW -> RUNNING (``start``) -> CLOSED (``aclose``); verbs outside RUNNING raise, and closing
ends every frame iterator and log follower and refuses new socket connections.
"""

from __future__ import annotations

import enum
import functools
import math
from collections.abc import AsyncIterable, AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from types import TracebackType
from typing import Final, NoReturn
from urllib.parse import urlsplit

import attrs
import trio

from .._errors import AppNotFoundError, InvalidInputError, UnsupportedOperationError
from .._shared import video
from .._shared.logbuffer import LogBuffer
from .._shared.ports import ListeningSocket, PortHandler, PortTable, SocketKind
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
    Platform,
    Rotation,
    TouchAction,
)
from ..uitree import UiNode
from .apps import AppStore
from .frames import LiveScreen
from .models import android_properties, profile
from .sandbox import Sandbox
from .settings import AndroidSettings
from .tree import tree_of
from .ui import LogLines, Screen

__all__ = ["DRIVER_NAME", "VirtualDevice", "open_virtual_device"]

DRIVER_NAME: Final = "virtual"
MAX_SCROLL: Final = 10.0  # screen heights per scroll call
_VIDEO: Final = (Codec.H264,) if video.AVAILABLE else ()


class _State(enum.Enum):
    NEW = "new"
    RUNNING = "running"
    CLOSED = "closed"


def _type_line(line: str, screen: Screen, log: LogLines) -> Screen:
    return screen.type_text(line)


async def _once(data: bytes) -> AsyncIterator[bytes]:
    yield data


class VirtualDevice:
    """A virtual device; see the module docstring for the API."""

    def __init__(self, spec: DeviceSpec) -> None:
        self._spec = spec
        self._model, self._os_version = profile(spec)
        self._platform = Platform(spec.platform)
        self._sandbox = Sandbox(spec.sandbox_dir, self._platform)
        self._ports = PortTable()
        self._logs = LogBuffer()
        self._live = LiveScreen(Screen(self._model), started_at=0.0)
        self._state = _State.NEW
        self._apps = AppStore(self._model, self._platform, self._sandbox.apps)
        self._settings = AndroidSettings(self._model, spec.instance_id)
        self._properties = (
            android_properties(self._model, self._os_version, spec.instance_id)
            if self._platform is Platform.ANDROID
            else {}
        )
        self._clipboard = ""

    def __repr__(self) -> str:
        return f"<VirtualDevice {self._spec.instance_id} {self._model.model} {self._state.value}>"

    # -- lifecycle --------------------------------------------------------------------------
    async def start(self) -> None:
        """Create (or adopt) the sandbox and boot. Call once."""
        if self._state is not _State.NEW:
            raise RuntimeError("a VirtualDevice starts once")
        now = trio.current_time()
        self._live.started_at = now
        self._logs = LogBuffer(started_at=now)
        try:
            saved = await self._sandbox.create()
        except BaseException:
            self._state = _State.CLOSED
            with trio.CancelScope(shield=True):
                await self._sandbox.destroy()
            raise
        self._state = _State.RUNNING
        self._apps.load(saved.get("apps", []))
        self._settings.load(saved.get("settings", {}))
        self._refresh_launcher()
        self.log(LogLevel.INFO, "devyard", f"boot completed: {self._model.model_name}, "
                 f"{self._model.os_name} {self._os_version}")  # fmt: skip

    async def aclose(self) -> None:
        """Stop the device and remove its sandbox; idempotent, survives cancellation."""
        if self._state is _State.CLOSED:
            await trio.lowlevel.checkpoint()
            return
        self._state = _State.CLOSED
        self._live.close()
        self._logs.close()
        self._ports.close()
        with trio.CancelScope(shield=True):
            await self._sandbox.destroy()

    async def __aenter__(self) -> VirtualDevice:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()

    @property
    def sandbox(self) -> Path:
        return self._spec.sandbox_dir

    def describe(self) -> DeviceInfo:
        has_screen = self._model.has_screen
        width, height = self._live.screen.size if has_screen else (0, 0)
        return DeviceInfo(
            instance_id=self._spec.instance_id,
            driver=DRIVER_NAME,
            platform=self._platform,
            model=self._model.model,
            model_name=self._model.model_name,
            os_name=self._model.os_name,
            os_version=self._os_version,
            has_screen=has_screen,
            width=width,
            height=height,
            rotation=self._live.screen.rotation,
            density=self._model.density,
            codecs=(Codec.JPEG, *_VIDEO) if has_screen else (),
        )

    # -- screen -----------------------------------------------------------------------------
    async def screenshot(self) -> bytes:
        self._require_screen()
        return await self._live.png()

    def frames(
        self,
        *,
        codec: Codec = Codec.JPEG,
        max_fps: float = DEFAULT_MAX_FPS,
        max_size: int | None = None,
    ) -> AsyncIterator[Frame]:
        self._require_screen()
        if codec is Codec.H264 and _VIDEO:
            return self._live.h264_frames(max_fps=max_fps, max_size=max_size)
        if codec is not Codec.JPEG:
            raise UnsupportedOperationError(f"the virtual device cannot encode {codec}")
        return self._live.frames(max_fps=max_fps, max_size=max_size)

    def request_keyframe(self) -> None:
        self._require_screen()
        self._live.request_keyframe()

    async def ui_tree(self) -> UiNode:
        """The screen's element tree (`uitree.UiTreeDevice`), from the current screen value."""
        self._require_screen()
        await trio.lowlevel.checkpoint()
        return tree_of(self._live.screen)

    # -- input ------------------------------------------------------------------------------
    async def touch(self, pointer_id: int, action: TouchAction, x: float, y: float) -> None:
        self._require_screen()
        px, py = self._pixels(x, y)
        action = TouchAction(action)
        if action is not TouchAction.MOVE:
            self.log(LogLevel.DEBUG, "Input", f"touch {action} pointer={pointer_id} at {px},{py}")
        self._apply(lambda screen, log: screen.touch(pointer_id, action, px, py, log))
        await trio.lowlevel.checkpoint()

    async def tap(self, x: float, y: float) -> None:
        await self.touch(0, TouchAction.DOWN, x, y)
        await self.touch(0, TouchAction.UP, x, y)

    async def key(self, key: Key) -> None:
        self._require_screen()
        key = Key(key)
        self.log(LogLevel.DEBUG, "Input", f"key {key}")
        if key is Key.PASTE:
            self._apply(lambda screen, log: screen.type_text(self._clipboard))
        else:
            self._apply(lambda screen, log: screen.key(key, log))
        await trio.lowlevel.checkpoint()

    async def text(self, text: str) -> None:
        self._require_screen()
        bad = next((c for c in text if (ord(c) < 32 and c != "\n") or ord(c) == 127), None)
        if bad is not None:
            raise InvalidInputError(f"text may not contain control character {bad!r}")
        # Typed text may be a password: log its length only.
        self.log(LogLevel.DEBUG, "Input", f"text ({len(text)} characters)")
        for i, line in enumerate(text.split("\n")):
            if i:
                self._apply(lambda screen, log: screen.key(Key.ENTER, log))
            self._apply(functools.partial(_type_line, line))
        await trio.lowlevel.checkpoint()

    async def scroll(self, x: float, y: float, dx: float, dy: float) -> None:
        self._require_screen()
        self._pixels(x, y)
        if not all(math.isfinite(d) and abs(d) <= MAX_SCROLL for d in (dx, dy)):
            raise InvalidInputError(f"scroll amounts must be within ±{MAX_SCROLL:g}: {dx}, {dy}")
        height = self._live.screen.size[1]
        self._apply(lambda screen, log: screen.scroll(round(dy * height)))
        await trio.lowlevel.checkpoint()

    async def get_clipboard(self) -> str:
        self._require_screen()
        await trio.lowlevel.checkpoint()
        return self._clipboard

    async def set_clipboard(self, text: str) -> None:
        self._require_screen()
        self._clipboard = text
        self.log(LogLevel.DEBUG, "Clipboard", f"set ({len(text)} characters)")
        await trio.lowlevel.checkpoint()

    async def rotate(self, rotation: Rotation) -> None:
        self._require_screen()
        rotation = Rotation(rotation)
        self._apply(lambda screen, log: screen.rotate(rotation))
        self.log(LogLevel.INFO, "WindowManager", f"rotation {rotation.value}")
        if self._platform is Platform.ANDROID:
            self._settings.put("system", "user_rotation", str(rotation.value // 90))
            await self._save_state()
        else:
            await trio.lowlevel.checkpoint()

    # -- apps -------------------------------------------------------------------------------
    async def install(self, path: Path) -> AppInfo:
        self._check_open()
        app, replaced = await self._apps.install(Path(path))
        if replaced:  # an update stops the running app, as on Android
            self._apply(lambda screen, log: screen.terminate(app.app_id))
        self._refresh_launcher()
        await self._save_state()
        self.log(LogLevel.INFO, "PackageManager", f"installed {app.app_id} {app.version}")
        return self._app_info(app.app_id)

    async def uninstall(self, app_id: str) -> None:
        self._check_open()
        await self._apps.uninstall(app_id)
        self._apply(lambda screen, log: screen.terminate(app_id))
        self._refresh_launcher()
        await self._save_state()
        self.log(LogLevel.INFO, "PackageManager", f"uninstalled {app_id}")

    def package_path(self, app_id: str) -> Path | None:
        """Host path of an installed app's package (``pm path``); None for system apps."""
        self._check_open()
        return self._apps.package_path(app_id)

    async def launch(self, app_id: str) -> None:
        self._require_screen()
        self._require_app(app_id)
        self._apply(lambda screen, log: screen.launch(app_id))
        self.log(LogLevel.INFO, "ActivityManager", f"Start proc {app_id}")
        await trio.lowlevel.checkpoint()

    async def terminate(self, app_id: str) -> None:
        self._require_screen()
        self._require_app(app_id)
        if app_id in self._live.screen.running:
            self._apply(lambda screen, log: screen.terminate(app_id))
            self.log(LogLevel.INFO, "ActivityManager", f"Killing {app_id}: terminated")
        await trio.lowlevel.checkpoint()

    async def list_apps(self) -> list[AppInfo]:
        self._check_open()
        await trio.lowlevel.checkpoint()
        return [self._app_info(app.app_id) for app in self._live.screen.apps]

    async def open_url(self, url: str) -> None:
        self._require_screen()
        if not self._model.browser:
            raise UnsupportedOperationError(f"{self._model.model_name} has no browser")
        if not urlsplit(url).scheme or any(c.isspace() for c in url):
            raise InvalidInputError(f"not an absolute URL: {url!r}")
        self._apply(lambda screen, log: screen.open_url(url))
        self.log(LogLevel.INFO, "ActivityManager", f"START act=VIEW dat={url}")
        await trio.lowlevel.checkpoint()

    def foreground_app(self) -> str | None:
        return self._live.screen.foreground

    # -- the browser sandbox's page (hostd/browser: `PageScreen`) ---------------------------
    def browser_shown(self) -> bool:
        """Whether the browser app is in the foreground (its page is on the screen)."""
        screen = self._live.screen
        return bool(self._model.browser) and screen.foreground == self._model.browser

    def browser_url(self) -> str:
        """The URL the browser shows (set by `open_url`, typing, or `show_page`)."""
        return self._live.screen.url

    def page_viewport(self) -> tuple[int, int]:
        """Pixels of the browser's content area, as the screen is rotated now."""
        area = self._live.screen.layout.content
        return area.width, area.height

    def show_page(self, png: bytes, url: str) -> None:
        """Show the browser sandbox's page *png* (at *url*) as the browser's content."""
        self._live.update(attrs.evolve(self._live.screen, page=png, url=url or ""))

    # -- files ------------------------------------------------------------------------------
    async def push(
        self,
        device_path: str,
        data: bytes | AsyncIterable[bytes],
        *,
        mode: int = 0o644,
        mtime: int | None = None,
    ) -> int:
        self._check_open()
        chunks = _once(data) if isinstance(data, bytes | bytearray) else data
        return await self._sandbox.write(device_path, chunks, mode=mode, mtime=mtime)

    async def pull(self, device_path: str) -> bytes:
        self._check_open()
        return await self._sandbox.read(device_path)

    async def stat(self, device_path: str) -> FileEntry:
        self._check_open()
        return await self._sandbox.stat(device_path)

    async def ls(self, device_path: str) -> list[FileEntry]:
        self._check_open()
        return await self._sandbox.ls(device_path)

    async def mkdir(self, device_path: str) -> None:
        self._check_open()
        await self._sandbox.mkdir(device_path)

    async def remove(self, device_path: str, *, recursive: bool = False) -> None:
        self._check_open()
        await self._sandbox.remove(device_path, recursive=recursive)

    def resolve_path(self, device_path: str) -> Path:
        return self._sandbox.resolve(device_path)

    # -- logs -------------------------------------------------------------------------------
    def logs(self, *, after: int = 0) -> list[LogEntry]:
        return self._logs.since(after)

    async def wait_logs(self, *, after: int = 0) -> list[LogEntry]:
        return await self._logs.wait(after)

    def log(self, level: LogLevel, tag: str, message: str) -> None:
        self._logs.append(level, tag, message)

    # -- Android properties and settings ----------------------------------------------------
    def properties(self) -> Mapping[str, str]:
        self._require_android()
        return dict(self._properties)

    def getprop(self, name: str) -> str:
        self._require_android()
        return self._properties.get(name, "")

    async def settings_get(self, namespace: str, key: str) -> str | None:
        self._require_android()
        await trio.lowlevel.checkpoint()
        return self._settings.get(namespace, key)

    async def settings_put(self, namespace: str, key: str, value: str) -> None:
        self._require_android()
        self._settings.put(namespace, key, value)
        if namespace == "system" and key == "user_rotation" and value in ("0", "1", "2", "3"):
            # As on a device with auto-rotate off: user_rotation is the rotation.
            rotation = Rotation(int(value) * 90)
            self._apply(lambda screen, log: screen.rotate(rotation))
        await self._save_state()

    async def settings_delete(self, namespace: str, key: str) -> bool:
        self._require_android()
        existed = self._settings.delete(namespace, key)
        await self._save_state()
        return existed

    async def settings_list(self, namespace: str) -> dict[str, str]:
        self._require_android()
        await trio.lowlevel.checkpoint()
        return self._settings.list(namespace)

    # -- device sockets ---------------------------------------------------------------------
    async def open_port(self, port: int) -> trio.abc.HalfCloseableStream:
        self._check_open()
        return await self._ports.connect(SocketKind.TCP, port)

    async def open_adb_transport(self) -> None:
        """None: hostd serves ADB for this device itself (devyard.hostd.adb)."""
        self._check_open()
        await trio.lowlevel.checkpoint()

    async def open_abstract(self, name: str) -> trio.abc.HalfCloseableStream:
        self._check_open()
        return await self._ports.connect(SocketKind.ABSTRACT, name)

    async def serve_port(
        self,
        port: int,
        handler: PortHandler,
        *,
        task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
    ) -> NoReturn:
        """Listen on device TCP ``port`` until cancelled; started() gets the loopback port."""
        self._check_open()
        await self._ports.serve(SocketKind.TCP, port, handler, task_status=task_status)

    async def serve_abstract(
        self,
        name: str,
        handler: PortHandler,
        *,
        task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
    ) -> NoReturn:
        """Listen on abstract socket ``name`` until cancelled (see `serve_port`)."""
        self._check_open()
        await self._ports.serve(SocketKind.ABSTRACT, name, handler, task_status=task_status)

    def map_port(self, port: int, host_port: int) -> None:
        """Route device TCP ``port`` to something already listening on 127.0.0.1:host_port."""
        self._ports.map(SocketKind.TCP, port, host_port)

    def unmap_port(self, port: int) -> None:
        self._ports.unmap(SocketKind.TCP, port)

    def map_abstract(self, name: str, host_port: int) -> None:
        self._ports.map(SocketKind.ABSTRACT, name, host_port)

    def unmap_abstract(self, name: str) -> None:
        self._ports.unmap(SocketKind.ABSTRACT, name)

    def listening(self) -> list[ListeningSocket]:
        return self._ports.listening()

    # -- helpers ----------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._state is _State.CLOSED:
            raise trio.ClosedResourceError(f"{self._spec.instance_id} is closed")
        if self._state is _State.NEW:
            raise RuntimeError("the device has not been started")

    def _require_screen(self) -> None:
        self._check_open()
        if not self._model.has_screen:
            raise UnsupportedOperationError(
                f"{self._spec.instance_id} is a {self._model.model_name}: it has no screen"
            )

    def _require_android(self) -> None:
        self._check_open()
        if self._platform is not Platform.ANDROID:
            raise UnsupportedOperationError(f"{self._platform} devices have no Android API")

    def _require_app(self, app_id: str) -> None:
        if self._live.screen.app(app_id) is None:
            raise AppNotFoundError(app_id)

    def _pixels(self, x: float, y: float) -> tuple[int, int]:
        """Normalized (x, y) to pixels of the rotated screen; out of range is an error."""
        if not (math.isfinite(x) and math.isfinite(y) and 0 <= x <= 1 and 0 <= y <= 1):
            raise InvalidInputError(f"coordinates must be normalized to [0, 1]: ({x}, {y})")
        width, height = self._live.screen.size
        return min(width - 1, int(x * width)), min(height - 1, int(y * height))

    def _apply(self, transition: Callable[[Screen, LogLines], Screen]) -> None:
        lines: LogLines = []
        self._live.update(transition(self._live.screen, lines))
        for tag, message in lines:
            self.log(LogLevel.INFO, tag, message)

    def _refresh_launcher(self) -> None:
        apps = self._apps.launcher()
        self._apply(lambda screen, log: screen.with_apps(apps))

    def _app_info(self, app_id: str) -> AppInfo:
        return self._apps.info(app_id, running=app_id in self._live.screen.running)

    async def _save_state(self) -> None:
        android = self._platform is Platform.ANDROID
        state = {"apps": self._apps.dump(), "settings": self._settings.dump() if android else {}}
        await self._sandbox.save_state(state)


@asynccontextmanager
async def open_virtual_device(spec: DeviceSpec) -> AsyncIterator[VirtualDevice]:
    """Start a virtual device for ``spec``; close it and remove its sandbox on exit."""
    async with VirtualDevice(spec) as device:
        yield device
