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
| ui_tree | ``uiautomator dump`` to its default file, then ``cat`` it; parsed (`uitree`) |
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
| run_shell | ``shell COMMAND`` (the device API's ``POST /shell``) |
| open_port, open_abstract | ``tcp:P``, ``localabstract:NAME`` via the adb server's smart socket |

The verbs live by section: `_screen` (screencap, frames), `_input` (gestures, keys, text),
`_files` (push, pull, ls) and this module (lifecycle, apps, logs, settings, sockets), over
the state and helpers of `_base`.

Sync members (`describe`, `properties`, `logs`, `frames`, `request_keyframe`) never block: they
read what the last adb answer left in this object.
"""

from __future__ import annotations

import functools
import math
import shutil
import subprocess
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Final

import trio

from ....core._groups import collapse_single_group
from .._errors import (
    DeviceError,
    InstallError,
    InvalidInputError,
)
from .._shared.logbuffer import LogBuffer
from .._shared.packages import label_from_id, read_package
from ..base import (
    AppInfo,
    Codec,
    DeviceInfo,
    DeviceSpec,
    LogEntry,
    LogLevel,
    Platform,
    Rotation,
    ShellResult,
)
from ._base import State
from ._files import FilesMixin
from ._input import InputMixin
from ._screen import ScreenMixin
from .adb import AdbError, quote_all
from .config import EmulatorConfig
from .parse import (
    parse_getprop,
    parse_logcat_line,
    parse_packages,
    parse_settings_list,
    parse_wm,
)
from .target import acquire

__all__ = ["DRIVER_NAME", "EmulatorDevice", "open_emulator_device"]

DRIVER_NAME: Final = "android-emulator"
_LOGCAT_RESTART_S: Final = 1.0
MAX_SHELL_OUTPUT: Final = 16 * 1024 * 1024  # as the device API's POST /shell
_SETTINGS_NAMESPACES: Final = frozenset({"system", "secure", "global"})


class EmulatorDevice(ScreenMixin, InputMixin, FilesMixin):
    """One Android device driven through adb; see the module docstring."""

    #: `GuestNetworkDevice`: the guest has its own network stack; a tunnel-attached instance's
    #: proxy is given to the emulator at launch (target.emulator_env), never to its settings.
    guest_network = True

    def __repr__(self) -> str:
        serial = self._target.serial if self._target else "-"
        return f"<EmulatorDevice {self._spec.instance_id} {serial} {self._state.value}>"

    # -- lifecycle --------------------------------------------------------------------------
    async def start(self, network: trio.Nursery) -> None:
        """Create the sandbox, get the device (launch or attach) and read what describe()
        needs. Call once, then run `follow_logs` in a task; `aclose` undoes both. A launched
        emulator's namespace relays run in ``network`` until `aclose` (isolation.py)."""
        if self._state is not State.NEW:
            raise RuntimeError("an EmulatorDevice starts once")
        self._state = State.RUNNING
        self._started_at = trio.current_time()
        self._logs = LogBuffer(started_at=self._started_at)
        await trio.Path(self._spec.sandbox_dir).mkdir(parents=True, exist_ok=True)
        self._target = await acquire(self._config, self._adb, self._spec, network)
        await self._refresh_describe()

    async def aclose(self) -> None:
        """Stop following logs, kill the emulator or disconnect, remove the sandbox."""
        if self._state is State.CLOSED:
            await trio.lowlevel.checkpoint()
            return
        self._state = State.CLOSED
        self._background.cancel()
        self._logs.close()
        self._keyframe_requested.set()  # frame iterators wake up and see CLOSED
        with trio.CancelScope(shield=True):
            if self._target is not None:
                await self._target.stop()
            sandbox = self._spec.sandbox_dir
            await trio.to_thread.run_sync(lambda: shutil.rmtree(sandbox, ignore_errors=True))

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

    # -- shell ------------------------------------------------------------------------------
    async def run_shell(self, command: str) -> ShellResult:
        """``adb shell COMMAND`` on the device's own shell (shell v2 keeps stderr and the exit
        status apart). The caller bounds its time; cancelling it kills the adb client."""
        self._check_open()
        result = await self._adb.shell(self.serial, command, time_limit=math.inf, check=False)
        if len(result.stdout) + len(result.stderr) > MAX_SHELL_OUTPUT:
            raise DeviceError(f"the command printed more than {MAX_SHELL_OUTPUT} bytes")
        return ShellResult(result.stdout, result.stderr, result.status)

    async def open_adb_transport(self) -> trio.abc.Stream:
        """A TCP connection to the device's own adbd (the emulator's console port + 1, or the
        attach address): the ADB bridge splices the user's adb to it."""
        self._check_open()
        host, port = self.target.adbd
        try:
            return await trio.open_tcp_stream(host, port)
        except OSError as exc:
            raise DeviceError(f"adbd of {self.serial} at {host}:{port}: {exc}") from exc


def _ns(namespace: str) -> str:
    if namespace not in _SETTINGS_NAMESPACES:
        raise InvalidInputError(f"settings namespace must be system, secure or global: {namespace}")
    return namespace


@asynccontextmanager
async def open_emulator_device(
    spec: DeviceSpec, config: EmulatorConfig | None = None
) -> AsyncIterator[EmulatorDevice]:
    """Launch or attach as ``config`` says (hostd's CLI loads it: `EmulatorConfig.from_env`;
    default: tools from ``PATH``, launch mode); stop on exit."""
    device = EmulatorDevice(spec, config or EmulatorConfig())
    # A lone exception is the body's (follow_logs and the relays never raise), raised as the
    # virtual driver would raise it, not wrapped in the nursery's group.
    with collapse_single_group():
        async with trio.open_nursery() as nursery:
            try:
                await device.start(nursery)
                nursery.start_soon(device.follow_logs)
                yield device
            finally:
                with trio.CancelScope(shield=True):
                    await device.aclose()  # the emulator first, then its namespace's relays
                nursery.cancel_scope.cancel()
