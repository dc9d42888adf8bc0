"""The ``android-emulator`` driver: `AndroidDevice` over the real ``adb`` CLI.

    async with open_emulator_device(spec, config) as dev:     # config: EmulatorConfig.from_env
        ...every DeviceDriver / AndroidDevice verb...
        await dev.open_adb_transport()   # TCP to the emulator's own adbd: the bridge splices it

How the device was obtained (launch or attach) is `target.Target`; from then on every verb is
an adb command against ``target.serial``, bounded by the config's timeouts (a timeout is an
`AdbError`, a `DeviceError`). What each verb runs:

| verb | adb |
|---|---|
| describe (cached) | ``getprop``, ``wm density``, ``settings get system user_rotation``, |
| | and one ``screencap`` for the size as rotated |
| screenshot | ``exec-out screencap -p`` (refreshes the cached size) |
| frames | a ``screencap`` per frame, re-encoded as JPEG by Pillow, sent when the picture changed |
| tap / touch / scroll | ``input tap``; ``input swipe`` replayed when the pointer goes up |
| key / text | ``input keyevent KEYCODE_*`` / ``input text`` (``%s`` for spaces) |
| clipboard | kept here; ``Key.PASTE`` types it (adb cannot set a device clipboard) |
| rotate | ``settings put system accelerometer_rotation 0`` + ``user_rotation R`` |
| install / uninstall | ``adb install -r`` / ``adb uninstall`` (app id read from the APK here) |
| launch / terminate | ``monkey -p PKG -c android.intent.category.LAUNCHER 1`` / ``am force-stop`` |
| list apps | ``pm list packages`` (+ ``-s``; ``ps -A -o NAME`` for running, best effort) |
| open URL | ``am start -a android.intent.action.VIEW -d URL`` |
| push / pull | ``adb push`` / ``adb pull`` through a file in the sandbox |
| stat / ls / mkdir / remove | ``ls -lad`` / ``ls -la`` / ``mkdir -p`` / ``rm [-r]`` |
| logs | a ``logcat -v threadtime`` follower into a ring buffer, restarted if it ends |
| properties (cached) | ``getprop`` at start |
| settings | ``settings get/put/delete/list`` |
| open_port, open_abstract | ``tcp:P``, ``localabstract:NAME`` via the adb server's smart socket |

Sync members (`describe`, `properties`, `logs`, `frames`, `request_keyframe`) never block: they
read what the last adb answer left in this object.
"""

from __future__ import annotations

import enum
import errno
import functools
import hashlib
import io
import math
import os
import posixpath
import shutil
import subprocess
from collections.abc import AsyncIterable, AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Final

import attrs
import trio
from PIL import Image

from .._errors import (
    AppNotFoundError,
    DeviceError,
    DeviceFileError,
    InstallError,
    InvalidInputError,
    InvalidSpecError,
    UnsupportedOperationError,
)
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
from ..virtual.logbuffer import LogBuffer
from ..virtual.packages import label_from_id, read_package
from .adb import AdbCli, AdbError, AdbResult, quote_all
from .config import EmulatorConfig
from .parse import (
    errno_in,
    file_kind,
    parse_getprop,
    parse_logcat_line,
    parse_ls_line,
    parse_packages,
    parse_settings_list,
    parse_wm,
    png_size,
)
from .target import Target, acquire

__all__ = ["DRIVER_NAME", "EmulatorDevice", "open_emulator_device"]

DRIVER_NAME: Final = "android-emulator"
MAX_SCROLL: Final = 10.0  # screen heights per scroll call, as the virtual device
_TAP_SLOP: Final = 0.04  # of the shorter side: less movement than this is a tap
_LONG_PRESS_S: Final = 0.5
_SWIPE_MS: Final = (100, 5000)
_SCROLL_STEP: Final = 0.5  # screen fractions per swipe of a scroll
_MAX_SCROLL_SWIPES: Final = 20
_IDLE_FRAME_POLL_S: Final = 0.1  # unchanged screen: screencap at most this often
_JPEG_QUALITY: Final = 80
_LOGCAT_RESTART_S: Final = 1.0
_SETTINGS_NAMESPACES: Final = frozenset({"system", "secure", "global"})
_KEYCODES: Final = {
    Key.HOME: "KEYCODE_HOME", Key.BACK: "KEYCODE_BACK", Key.APP_SWITCH: "KEYCODE_APP_SWITCH",
    Key.ENTER: "KEYCODE_ENTER", Key.DELETE: "KEYCODE_DEL", Key.TAB: "KEYCODE_TAB",
    Key.ESCAPE: "KEYCODE_ESCAPE", Key.PASTE: "KEYCODE_PASTE", Key.POWER: "KEYCODE_POWER",
    Key.VOLUME_UP: "KEYCODE_VOLUME_UP", Key.VOLUME_DOWN: "KEYCODE_VOLUME_DOWN",
    Key.MENU: "KEYCODE_MENU",
}  # fmt: skip


class _State(enum.Enum):
    NEW = "new"
    RUNNING = "running"
    CLOSED = "closed"


@attrs.define
class _Pointer:
    start: tuple[int, int]
    last: tuple[int, int]
    down_at: float


def _encode_jpeg(png: bytes, max_size: int | None) -> tuple[bytes, int, int]:
    with Image.open(io.BytesIO(png)) as image:
        picture = image.convert("RGB")
    if max_size is not None and max(picture.size) > max_size:
        picture.thumbnail((max_size, max_size))
    out = io.BytesIO()
    picture.save(out, "JPEG", quality=_JPEG_QUALITY)
    return out.getvalue(), picture.width, picture.height


class EmulatorDevice:
    """One Android device driven through adb; see the module docstring."""

    def __init__(self, spec: DeviceSpec, config: EmulatorConfig) -> None:
        if Platform(spec.platform) is not Platform.ANDROID:
            raise InvalidSpecError(f"the android-emulator driver runs android, not {spec.platform}")
        self._spec = spec
        self._config = config
        self._adb = AdbCli(
            config.resolve_adb(), config.adb_server_port, config.tool_env(), config.command_timeout
        )
        self._state = _State.NEW
        self._target: Target | None = None
        self._background = trio.CancelScope()
        self._logs = LogBuffer()
        self._started_at = 0.0
        self._properties: dict[str, str] = {}
        self._size = (0, 0)
        self._rotation = Rotation.PORTRAIT
        self._density = 0
        self._clipboard = ""
        self._pointers: dict[int, _Pointer] = {}
        self._labels: dict[str, tuple[str, str]] = {}  # installed here: id -> (label, version)
        self._keyframe_requested = trio.Event()
        self._keyframe_generation = 0
        self._spool = iter(range(1, 1 << 62))

    def __repr__(self) -> str:
        serial = self._target.serial if self._target else "-"
        return f"<EmulatorDevice {self._spec.instance_id} {serial} {self._state.value}>"

    # -- lifecycle --------------------------------------------------------------------------
    async def start(self) -> None:
        """Create the sandbox, get the device (launch or attach) and read what describe()
        needs. Call once, then run `follow_logs` in a task; `aclose` undoes both."""
        if self._state is not _State.NEW:
            raise RuntimeError("an EmulatorDevice starts once")
        self._state = _State.RUNNING
        self._started_at = trio.current_time()
        self._logs = LogBuffer(started_at=self._started_at)
        await trio.Path(self._spec.sandbox_dir).mkdir(parents=True, exist_ok=True)
        self._target = await acquire(self._config, self._adb, self._spec)
        await self._refresh_describe()

    async def aclose(self) -> None:
        """Stop following logs, kill the emulator or disconnect, remove the sandbox."""
        if self._state is _State.CLOSED:
            await trio.lowlevel.checkpoint()
            return
        self._state = _State.CLOSED
        self._background.cancel()
        self._logs.close()
        self._keyframe_requested.set()  # frame iterators wake up and see CLOSED
        with trio.CancelScope(shield=True):
            if self._target is not None:
                await self._target.stop()
            sandbox = self._spec.sandbox_dir
            await trio.to_thread.run_sync(lambda: shutil.rmtree(sandbox, ignore_errors=True))

    @property
    def serial(self) -> str:
        return self._require_target().serial

    @property
    def target(self) -> Target:
        return self._require_target()

    def describe(self) -> DeviceInfo:
        target = self._target
        props = self._properties
        return DeviceInfo(
            instance_id=self._spec.instance_id,
            driver=DRIVER_NAME,
            platform=Platform.ANDROID,
            model=self._spec.model or (target.name if target else "") or "emulator",
            model_name=props.get("ro.product.model", "Android Emulator"),
            os_name="Android",
            os_version=props.get("ro.build.version.release", self._spec.os_version or ""),
            has_screen=True,
            width=self._size[0],
            height=self._size[1],
            rotation=self._rotation,
            density=self._density,
            codecs=(Codec.JPEG,),
        )

    async def _refresh_describe(self) -> None:
        self._properties = parse_getprop((await self._shell("getprop")).out)
        density = parse_wm((await self._shell("wm density", check=False)).out, "density")
        fallback = self._properties.get("ro.sf.lcd_density", "0")
        self._density = int(density) if density and density.isdigit() else int(fallback or 0)
        rotation = (await self._shell("settings get system user_rotation", check=False)).out
        if rotation.strip() in ("0", "1", "2", "3"):
            self._rotation = Rotation(int(rotation.strip()) * 90)
        try:
            await self.screenshot()  # the framebuffer's size is the size as rotated
        except (AdbError, ValueError):
            size = parse_wm((await self._shell("wm size", check=False)).out, "size") or "0x0"
            width, _, height = size.partition("x")
            natural = (int(width), int(height)) if width.isdigit() and height.isdigit() else (0, 0)
            landscape = self._rotation.is_landscape
            self._size = (natural[1], natural[0]) if landscape else natural

    # -- screen -----------------------------------------------------------------------------
    async def screenshot(self) -> bytes:
        self._check_open()
        result = await self._adb.run("exec-out", "screencap -p", serial=self.serial)
        png = result.stdout
        try:
            self._size = png_size(png)
        except ValueError:
            raise AdbError(f"screencap gave no PNG: {result.text[:200]!r}") from None
        return png

    def frames(
        self,
        *,
        codec: Codec = Codec.JPEG,
        max_fps: float = DEFAULT_MAX_FPS,
        max_size: int | None = None,
    ) -> AsyncIterator[Frame]:
        self._check_open()
        if codec is not Codec.JPEG:
            raise UnsupportedOperationError(f"the android-emulator driver sends jpeg, not {codec}")
        if not (math.isfinite(max_fps) and max_fps > 0):
            raise InvalidInputError(f"max_fps must be positive: {max_fps}")
        if max_size is not None and max_size < 1:
            raise InvalidInputError(f"max_size must be positive: {max_size}")
        return self._frames(max_fps, max_size)

    async def _frames(self, max_fps: float, max_size: int | None) -> AsyncIterator[Frame]:
        """Pull-paced: a screencap only when the viewer wants the next frame, so the newest
        picture always wins and nothing queues. Unchanged pictures are not sent."""
        spacing = 1.0 / max_fps
        seq, last_digest, seen_generation = 0, b"", -1
        while True:
            self._check_open()
            captured_at = trio.current_time()
            png = await self.screenshot()
            digest = hashlib.blake2b(png, digest_size=16).digest()
            forced = seen_generation != self._keyframe_generation
            if forced or digest != last_digest:
                seen_generation, last_digest = self._keyframe_generation, digest
                jpeg, width, height = await trio.to_thread.run_sync(_encode_jpeg, png, max_size)
                pts = int((captured_at - self._started_at) * 1_000_000)
                yield Frame(Codec.JPEG, jpeg, width, height, pts, True, seq)
                seq += 1
                await trio.sleep_until(captured_at + spacing)
            else:
                await trio.sleep_until(captured_at + spacing)
                with trio.move_on_at(captured_at + max(spacing, _IDLE_FRAME_POLL_S)):
                    await self._keyframe_requested.wait()

    def request_keyframe(self) -> None:
        self._check_open()
        self._keyframe_generation += 1
        self._keyframe_requested.set()
        self._keyframe_requested = trio.Event()

    # -- input ------------------------------------------------------------------------------
    async def touch(self, pointer_id: int, action: TouchAction, x: float, y: float) -> None:
        """adb cannot hold a finger down: DOWN and MOVE are recorded, and UP replays the
        gesture as one ``input tap`` (little movement, short), or ``input swipe`` (a drag, or
        a long press: a swipe that does not move). CANCEL forgets the pointer."""
        self._check_open()
        point = self._pixels(x, y)
        action = TouchAction(action)
        now = trio.current_time()
        if action is TouchAction.DOWN:
            self._pointers[pointer_id] = _Pointer(point, point, now)
        elif action is TouchAction.MOVE:
            if pointer_id in self._pointers:
                self._pointers[pointer_id].last = point
        elif action is TouchAction.CANCEL:
            self._pointers.pop(pointer_id, None)
        else:
            pointer = self._pointers.pop(pointer_id, None)
            if pointer is not None:
                await self._gesture(pointer.start, point, now - pointer.down_at)
                return
        await trio.lowlevel.checkpoint()

    async def _gesture(self, start: tuple[int, int], end: tuple[int, int], held: float) -> None:
        slop = _TAP_SLOP * min(self._size)
        moved = math.dist(start, end) >= slop
        if not moved and held < _LONG_PRESS_S:
            await self._input("tap", *start)
        else:
            ms = max(_SWIPE_MS[0], min(_SWIPE_MS[1], round(held * 1000)))
            await self._input("swipe", *start, *end, ms)

    async def tap(self, x: float, y: float) -> None:
        self._check_open()
        await self._input("tap", *self._pixels(x, y))

    async def key(self, key: Key) -> None:
        self._check_open()
        key = Key(key)
        if key is Key.PASTE:
            await self.text(self._clipboard)  # the device's clipboard is not ours to set
            return
        await self._input("keyevent", _KEYCODES[key])

    async def text(self, text: str) -> None:
        """``input text``, one line at a time with ENTER between. ASCII only: the device's
        ``input text`` cannot type other characters."""
        self._check_open()
        bad = next((c for c in text if (ord(c) < 32 and c != "\n") or ord(c) == 127), None)
        if bad is not None:
            raise InvalidInputError(f"text may not contain control character {bad!r}")
        if not text.isascii():
            raise UnsupportedOperationError("adb's `input text` types ASCII characters only")
        for i, line in enumerate(text.split("\n")):
            if i:
                await self._input("keyevent", _KEYCODES[Key.ENTER])
            if line:
                await self._input("text", line.replace(" ", "%s"))

    async def scroll(self, x: float, y: float, dx: float, dy: float) -> None:
        """Swipes the other way (content follows the finger), in steps of half a screen."""
        self._check_open()
        self._pixels(x, y)
        if not all(math.isfinite(d) and abs(d) <= MAX_SCROLL for d in (dx, dy)):
            raise InvalidInputError(f"scroll amounts must be within ±{MAX_SCROLL:g}: {dx}, {dy}")
        steps = min(_MAX_SCROLL_SWIPES, max(1, math.ceil(max(abs(dx), abs(dy)) / _SCROLL_STEP)))
        ex = min(1.0, max(0.0, x - dx / steps))
        ey = min(1.0, max(0.0, y - dy / steps))
        if (ex, ey) == (x, y):
            await trio.lowlevel.checkpoint()
            return
        for _ in range(steps):
            await self._input("swipe", *self._pixels(x, y), *self._pixels(ex, ey), 300)

    async def get_clipboard(self) -> str:
        self._check_open()
        await trio.lowlevel.checkpoint()
        return self._clipboard

    async def set_clipboard(self, text: str) -> None:
        """Kept in hostd: ``Key.PASTE`` types it. (Android 10+ lets only the focused app or
        the IME write the clipboard; adb has no verb for it.)"""
        self._check_open()
        self._clipboard = text
        await trio.lowlevel.checkpoint()

    async def rotate(self, rotation: Rotation) -> None:
        self._check_open()
        rotation = Rotation(rotation)
        await self._shell("settings put system accelerometer_rotation 0")
        await self._shell(f"settings put system user_rotation {rotation.value // 90}")
        if rotation.is_landscape != self._rotation.is_landscape:
            self._size = (self._size[1], self._size[0])
        self._rotation = rotation

    # -- apps -------------------------------------------------------------------------------
    async def install(self, path: Path) -> AppInfo:
        self._check_open()
        path = Path(path)
        if not await trio.Path(path).is_file():
            raise InstallError(f"{path}: no such file")
        package = await trio.to_thread.run_sync(read_package, Platform.ANDROID, path)
        result = await self._adb.run(
            "install", "-r", str(path), serial=self.serial,
            time_limit=self._config.transfer_timeout, check=False,
        )  # fmt: skip
        if result.status != 0 or "Success" not in result.out:
            failure = next((ln for ln in result.text.splitlines() if "Failure" in ln), "")
            raise InstallError(f"adb install {path.name}: {failure or result.text}")
        self._labels[package.app_id] = (package.label, package.version)
        self._log(LogLevel.INFO, f"installed {package.app_id}")
        return AppInfo(package.app_id, package.label, package.version)

    async def uninstall(self, app_id: str) -> None:
        self._check_open()
        await self._require_app(app_id)
        result = await self._adb.run(
            "uninstall", app_id, serial=self.serial,
            time_limit=self._config.transfer_timeout, check=False,
        )  # fmt: skip
        if "Success" not in result.out:
            raise DeviceError(f"adb uninstall {app_id}: {result.text}")
        self._labels.pop(app_id, None)

    async def launch(self, app_id: str) -> None:
        self._check_open()
        await self._require_app(app_id)
        await self._shell(
            quote_all(["monkey", "-p", app_id, "-c", "android.intent.category.LAUNCHER", "1"])
        )

    async def terminate(self, app_id: str) -> None:
        self._check_open()
        await self._require_app(app_id)
        await self._shell(quote_all(["am", "force-stop", app_id]))

    async def list_apps(self) -> list[AppInfo]:
        """Labels: what `install` read from the APK, else the id's last segment (``pm``
        prints no labels). ``running`` needs ``ps -A``; without it every app reads False."""
        self._check_open()
        every = parse_packages((await self._shell("pm list packages")).out)
        system = set(parse_packages((await self._shell("pm list packages -s")).out))
        processes = await self._shell("ps -A -o NAME", check=False)
        running = set(processes.out.split()) if processes.status == 0 else set()
        apps = []
        for app_id in sorted(every):
            label, version = self._labels.get(app_id, (label_from_id(app_id), ""))
            apps.append(AppInfo(app_id, label, version, app_id in system, app_id in running))
        return apps

    async def open_url(self, url: str) -> None:
        self._check_open()
        if not url.strip() or any(ord(c) < 32 for c in url):
            raise InvalidInputError(f"not a URL: {url!r}")
        words = ["am", "start", "-a", "android.intent.action.VIEW", "-d", url]
        result = await self._shell(quote_all(words), check=False)
        if result.status != 0 or "Error:" in result.text:
            raise DeviceError(f"am start {url}: {result.text}")

    # -- files ------------------------------------------------------------------------------
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

    # -- logs -------------------------------------------------------------------------------
    def logs(self, *, after: int = 0) -> list[LogEntry]:
        return self._logs.since(after)

    async def wait_logs(self, *, after: int = 0) -> list[LogEntry]:
        return await self._logs.wait(after)

    async def follow_logs(self) -> None:
        """``adb logcat -v threadtime`` into `logs` for the device's life: no deadline, it
        ends when `aclose` cancels it; restarted a second after it exits. Never raises."""
        with self._background:
            while True:
                argv = self._adb.argv("shell", "logcat -v threadtime", serial=self.serial)
                try:
                    await self._read_logcat(argv)
                except (OSError, trio.BrokenResourceError) as exc:
                    self._log(LogLevel.WARN, f"logcat: {exc}")
                await trio.sleep(_LOGCAT_RESTART_S)

    async def _read_logcat(self, argv: list[str]) -> None:
        async with trio.open_nursery() as nursery:
            follow = functools.partial(
                trio.run_process, argv, stdin=b"", stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL, env=self._adb.env, check=False,
            )  # fmt: skip
            proc: trio.Process = await nursery.start(follow)
            assert proc.stdout is not None
            pending = b""
            async for chunk in proc.stdout:
                lines = (pending + chunk).split(b"\n")
                pending = lines.pop()
                for raw in lines:
                    parsed = parse_logcat_line(raw.decode(errors="replace"))
                    if parsed is not None:
                        self._logs.append(*parsed)

    def _log(self, level: LogLevel, message: str) -> None:
        self._logs.append(level, "devyard", message)

    # -- Android properties and settings ----------------------------------------------------
    def properties(self) -> Mapping[str, str]:
        """``getprop`` as read when the device started."""
        self._check_open()
        return dict(self._properties)

    async def settings_get(self, namespace: str, key: str) -> str | None:
        self._check_open()
        result = await self._shell(quote_all(["settings", "get", _ns(namespace), key]))
        value = result.out.rstrip("\n")
        return None if value == "null" else value

    async def settings_put(self, namespace: str, key: str, value: str) -> None:
        self._check_open()
        await self._shell(quote_all(["settings", "put", _ns(namespace), key, value]))
        if namespace == "system" and key == "user_rotation" and value in ("0", "1", "2", "3"):
            rotation = Rotation(int(value) * 90)
            if rotation.is_landscape != self._rotation.is_landscape:
                self._size = (self._size[1], self._size[0])
            self._rotation = rotation

    async def settings_delete(self, namespace: str, key: str) -> bool:
        self._check_open()
        result = await self._shell(quote_all(["settings", "delete", _ns(namespace), key]))
        words = result.out.split()  # "Deleted 1 rows"
        return len(words) >= 2 and words[0] == "Deleted" and words[1] not in ("0", "")

    async def settings_list(self, namespace: str) -> dict[str, str]:
        self._check_open()
        return parse_settings_list((await self._shell(f"settings list {_ns(namespace)}")).out)

    # -- device sockets ---------------------------------------------------------------------
    async def open_port(self, port: int) -> trio.abc.HalfCloseableStream:
        """A stream to device TCP ``port`` (`PortClosedError` if nothing listens). ADB has no
        half-close: ``send_eof`` ends the device stream both ways."""
        self._check_open()
        if not 0 < port < 65536:
            raise InvalidInputError(f"bad device port {port}")
        return await self._adb.open_service(self.serial, f"tcp:{port}")

    async def open_abstract(self, name: str) -> trio.abc.HalfCloseableStream:
        self._check_open()
        if not name or "\0" in name:
            raise InvalidInputError(f"bad abstract socket name {name!r}")
        return await self._adb.open_service(self.serial, f"localabstract:{name}")

    async def open_adb_transport(self) -> trio.abc.Stream:
        """A TCP connection to the device's own adbd (the emulator's console port + 1, or the
        attach address): the ADB bridge splices the user's adb to it."""
        self._check_open()
        host, port = self.target.adbd
        try:
            return await trio.open_tcp_stream(host, port)
        except OSError as exc:
            raise DeviceError(f"adbd of {self.serial} at {host}:{port}: {exc}") from exc

    # -- helpers ----------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._state is _State.CLOSED:
            raise trio.ClosedResourceError(f"{self._spec.instance_id} is closed")
        if self._state is _State.NEW or self._target is None:
            raise RuntimeError("the device has not been started")

    def _require_target(self) -> Target:
        if self._target is None:
            raise RuntimeError("the device has not been started")
        return self._target

    async def _shell(self, command: str, *, check: bool = True) -> AdbResult:
        return await self._adb.shell(self.serial, command, check=check)

    async def _input(self, *args: str | int) -> None:
        await self._shell(quote_all(["input", *(str(a) for a in args)]))

    async def _require_app(self, app_id: str) -> None:
        if not app_id or any(c.isspace() for c in app_id):
            raise AppNotFoundError(app_id)
        result = await self._shell(quote_all(["pm", "path", app_id]), check=False)
        if result.status != 0 or "package:" not in result.out:
            raise AppNotFoundError(app_id)

    def _pixels(self, x: float, y: float) -> tuple[int, int]:
        if not (math.isfinite(x) and math.isfinite(y) and 0 <= x <= 1 and 0 <= y <= 1):
            raise InvalidInputError(f"coordinates must be normalized to [0, 1]: ({x}, {y})")
        width, height = self._size
        return min(width - 1, int(x * width)), min(height - 1, int(y * height))

    def _device_path(self, device_path: str) -> str:
        if not device_path.startswith("/") or "\0" in device_path or "\n" in device_path:
            raise InvalidInputError(f"device paths are absolute: {device_path!r}")
        return posixpath.normpath(device_path)

    def _spool_path(self) -> Path:
        return self._spec.sandbox_dir / f"transfer-{next(self._spool)}"

    @staticmethod
    def _raise_file_error(result: AdbResult, path: str) -> None:
        if result.status == 0:
            return
        code = errno_in(result.text)
        if code is not None:
            raise DeviceFileError(path, code)
        raise DeviceError(f"{path}: {result.text or f'adb exited {result.status}'}")


def _ns(namespace: str) -> str:
    if namespace not in _SETTINGS_NAMESPACES:
        raise InvalidInputError(f"settings namespace must be system, secure or global: {namespace}")
    return namespace


def _remove_host_path(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


@asynccontextmanager
async def open_emulator_device(
    spec: DeviceSpec, config: EmulatorConfig | None = None
) -> AsyncIterator[EmulatorDevice]:
    """Launch or attach (``config``, default: `EmulatorConfig.from_env`); stop on exit."""
    device = EmulatorDevice(spec, config or EmulatorConfig.from_env(os.environ))
    try:
        await device.start()
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(device.follow_logs)
                try:
                    yield device
                finally:
                    nursery.cancel_scope.cancel()
        except BaseExceptionGroup as group:
            # follow_logs never raises: a lone exception is the body's; raise it as the
            # virtual driver would, not wrapped in the nursery's group.
            if len(group.exceptions) == 1:
                raise group.exceptions[0] from None
            raise
    finally:
        with trio.CancelScope(shield=True):
            await device.aclose()
