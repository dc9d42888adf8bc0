"""State and helpers every part of `EmulatorDevice` shares (see device.py)."""

from __future__ import annotations

import enum
import math
import posixpath
from pathlib import Path

import attrs
import trio

from .._errors import (
    AppNotFoundError,
    InvalidInputError,
    InvalidSpecError,
)
from .._shared.logbuffer import LogBuffer
from ..base import (
    DeviceSpec,
    LogLevel,
    Platform,
    Rotation,
)
from .adb import AdbCli, AdbResult, quote_all
from .config import EmulatorConfig
from .target import Target

__all__ = ["DeviceBase", "Pointer", "State"]


class State(enum.Enum):
    NEW = "new"
    RUNNING = "running"
    CLOSED = "closed"


@attrs.define
class Pointer:
    start: tuple[int, int]
    last: tuple[int, int]
    down_at: float


class DeviceBase:
    """The device's state and helpers; `_screen`, `_input`, `_files` and `device` add the
    verbs (`device.EmulatorDevice` is the whole driver)."""

    def __init__(self, spec: DeviceSpec, config: EmulatorConfig) -> None:
        if Platform(spec.platform) is not Platform.ANDROID:
            raise InvalidSpecError(f"the android-emulator driver runs android, not {spec.platform}")
        self._spec = spec
        self._config = config
        self._adb = AdbCli(
            config.resolve_adb(), config.adb_server_port, config.tool_env(), config.command_timeout
        )
        self._state = State.NEW
        self._target: Target | None = None
        self._background = trio.CancelScope()
        self._logs = LogBuffer()
        self._started_at = 0.0
        self._properties: dict[str, str] = {}
        self._size = (0, 0)
        self._rotation = Rotation.PORTRAIT
        self._density = 0
        self._clipboard = ""
        self._pointers: dict[int, Pointer] = {}
        self._labels: dict[str, tuple[str, str]] = {}  # installed here: id -> (label, version)
        self._keyframe_requested = trio.Event()
        self._keyframe_generation = 0
        self._spool = iter(range(1, 1 << 62))

    @property
    def serial(self) -> str:
        return self._require_target().serial

    @property
    def target(self) -> Target:
        return self._require_target()

    # -- helpers ----------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._state is State.CLOSED:
            raise trio.ClosedResourceError(f"{self._spec.instance_id} is closed")
        if self._state is State.NEW or self._target is None:
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

    def _log(self, level: LogLevel, message: str) -> None:
        self._logs.append(level, "devyard", message)
