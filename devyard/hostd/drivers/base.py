"""The device driver interface: what hostd asks of a device, whatever runs it.

One object per device instance implements `DeviceDriver`. hostd's per-instance services (the
device API behind ``apiUrl``, the browser stream, ADB, MCP, the HTTP port proxy) code against
this protocol only, so the ``virtual`` driver that CI uses and the real drivers
(``android-emulator`` over adb + emulator, ``ios-simulator`` over ``xcrun simctl``) share every
code path above it. The verbs follow idb's and scrcpy's vocabulary (docs/devices.md).

Conventions every driver keeps:

- A driver is opened by an async context manager (see `registry.open_device`): entering boots
  or attaches to the device and creates its sandbox directory; leaving (or ``aclose()``) stops
  it and removes the sandbox. Nothing runs in the background outside that ``async with``.
- Touch coordinates are **normalized** floats in [0, 1] relative to the screen as currently
  rotated (x to the right, y down), so the browser, the API and ADB (which divides its pixel
  coordinates by `DeviceInfo.width` / `height`) all speak one unit. Out of range is an
  `InvalidInputError`, not a clamp.
- Device paths are absolute POSIX paths as the device sees them (``/sdcard/Download/a.txt``).
- Every async verb is a trio checkpoint and may block; timeouts belong to the caller's cancel
  scope. Sync members never block.
- Errors are the ones of `_errors.py`; a verb that the device kind lacks raises
  `UnsupportedOperationError` (a headless build machine has no screen).
"""

from __future__ import annotations

import enum
from collections.abc import AsyncIterable, AsyncIterator, Mapping
from pathlib import Path
from typing import Final, Protocol, runtime_checkable

import attrs
import trio

__all__ = [
    "AndroidDevice",
    "AppInfo",
    "Codec",
    "DeviceDriver",
    "DeviceInfo",
    "DeviceSpec",
    "FileEntry",
    "FileKind",
    "Frame",
    "GuestNetworkDevice",
    "Key",
    "LogEntry",
    "LogLevel",
    "Platform",
    "Rotation",
    "ShellDevice",
    "ShellResult",
    "TouchAction",
]


class Platform(enum.StrEnum):
    """The four instance kinds of the spec (section 2.1); also the API collection names."""

    IOS = "ios"
    ANDROID = "android"
    XCODE = "xcode"
    GRADLE = "gradle"


class TouchAction(enum.StrEnum):
    DOWN = "down"
    MOVE = "move"
    UP = "up"
    CANCEL = "cancel"


class Key(enum.StrEnum):
    """Keys that mean the same thing on every platform; characters go through ``text()``."""

    HOME = "home"
    BACK = "back"
    APP_SWITCH = "app_switch"
    ENTER = "enter"
    DELETE = "delete"  # backspace: delete before the cursor
    TAB = "tab"
    ESCAPE = "escape"
    PASTE = "paste"
    POWER = "power"
    VOLUME_UP = "volume_up"
    VOLUME_DOWN = "volume_down"
    MENU = "menu"


class Rotation(enum.IntEnum):
    """Clockwise degrees from the natural (portrait) orientation; Android's ROTATION_* * 90."""

    PORTRAIT = 0
    LANDSCAPE = 90
    PORTRAIT_UPSIDE_DOWN = 180
    LANDSCAPE_RIGHT = 270

    @property
    def is_landscape(self) -> bool:
        return self in (Rotation.LANDSCAPE, Rotation.LANDSCAPE_RIGHT)


class Codec(enum.StrEnum):
    JPEG = "jpeg"
    H264 = "h264"


class FileKind(enum.StrEnum):
    FILE = "file"
    DIRECTORY = "directory"
    SYMLINK = "symlink"
    OTHER = "other"


class LogLevel(enum.StrEnum):
    """Android logcat's priorities; iOS maps its levels onto them."""

    VERBOSE = "V"
    DEBUG = "D"
    INFO = "I"
    WARN = "W"
    ERROR = "E"


DEFAULT_MAX_FPS: Final = 30.0


@attrs.frozen
class DeviceSpec:
    """What hostd asks a driver to start: one instance, already placed on this host.

    ``model`` and ``os_version`` of None mean the platform's default. ``sandbox_dir`` is a
    directory the driver owns for the instance's lifetime: it must not exist yet; the driver
    creates it on start and removes it on close.
    """

    platform: Platform
    instance_id: str
    sandbox_dir: Path
    model: str | None = None
    os_version: str | None = None
    #: A tunnel-attached instance's egress proxy with its credentials,
    #: ``http://USER:PASSWORD@127.0.0.1:PORT`` (hostd/egress.py; hostd starts it before it opens
    #: the device). A driver whose device has its own network stack (`GuestNetworkDevice`)
    #: routes that network through it; None without a tunnel. A secret: never in a repr.
    http_proxy: str | None = attrs.field(default=None, repr=False)
    #: The organization the instance belongs to ("" when the order does not say): what a
    #: driver keeps per organization on the host (the gradle driver's Gradle user home).
    organization_id: str = ""
    #: ``spec.buildNetwork.allow`` of a build instance (or an iOS instance's Xcode sandbox):
    #: the destinations its builds may reach through the allowlist proxy (builds/sandbox_net).
    build_network: tuple[str, ...] = ()
    #: iOS ``spec.sandbox.xcode.enabled``: an Xcode build sandbox attached (drivers/xcode).
    xcode_sandbox: bool = False


@attrs.frozen
class DeviceInfo:
    """``describe()``: what the device is and what its screen looks like right now.

    ``width`` / ``height`` are the screen in pixels as currently rotated (0 for headless build
    machines); ``codecs`` are what ``frames()`` can produce, empty without a screen.
    """

    instance_id: str
    driver: str
    platform: Platform
    model: str
    model_name: str
    os_name: str
    os_version: str
    has_screen: bool
    width: int
    height: int
    rotation: Rotation
    density: int
    codecs: tuple[Codec, ...]


@attrs.frozen
class AppInfo:
    """An installed app. ``app_id`` is the Android package name or the iOS bundle id."""

    app_id: str
    label: str
    version: str = ""
    system: bool = False
    running: bool = False


@attrs.frozen
class ShellResult:
    """What one shell command printed and how it exited."""

    stdout: bytes
    stderr: bytes
    exit_code: int


@attrs.frozen
class FileEntry:
    """One directory entry or ``stat`` result; ``mode`` includes the type bits (st_mode)."""

    name: str
    path: str
    kind: FileKind
    size: int
    mode: int
    mtime: int


@attrs.frozen
class Frame:
    """One encoded frame of the screen.

    ``pts_us`` counts microseconds from the device's start (monotonic, trio's clock);
    ``seq`` counts frames of one ``frames()`` iterator from 0 (H.264: of the shared encoder, so
    a gap is a skipped frame). JPEG frames are all keyframes. ``capture_us`` is the wall clock
    (``time.time``, µs) when the picture was taken, 0 where the driver does not know it.
    """

    codec: Codec
    data: bytes = attrs.field(repr=lambda b: f"<{len(b)} bytes>")
    width: int
    height: int
    pts_us: int
    keyframe: bool
    seq: int
    capture_us: int = 0


@attrs.frozen
class LogEntry:
    """One device log line. ``seq`` grows by one per entry over the device's life."""

    seq: int
    time: float  # seconds since the device started
    level: LogLevel
    tag: str
    message: str


@runtime_checkable
class DeviceDriver(Protocol):
    """One running device instance, whatever drives it."""

    # -- identity and lifecycle -------------------------------------------------------------
    def describe(self) -> DeviceInfo: ...

    async def aclose(self) -> None:
        """Stop the device and remove its sandbox. Idempotent; survives cancellation."""

    # -- screen ---------------------------------------------------------------------------
    async def screenshot(self) -> bytes:
        """The screen as PNG bytes."""

    def frames(
        self,
        *,
        codec: Codec = Codec.JPEG,
        max_fps: float = DEFAULT_MAX_FPS,
        max_size: int | None = None,
    ) -> AsyncIterator[Frame]:
        """Encoded frames while the caller iterates: a new one when the screen changed, at
        most ``max_fps`` per second, the latest picture winning (no queue builds up). The
        first frame is a keyframe and comes at once. ``max_size`` caps the longer side."""
        ...

    def request_keyframe(self) -> None:
        """Make every ``frames()`` iterator send a keyframe next, even if nothing changed."""

    # -- input ------------------------------------------------------------------------------
    async def touch(self, pointer_id: int, action: TouchAction, x: float, y: float) -> None:
        """One pointer event at normalized (x, y)."""

    async def tap(self, x: float, y: float) -> None:
        """A DOWN then UP of pointer 0 at normalized (x, y)."""

    async def key(self, key: Key) -> None: ...

    async def text(self, text: str) -> None:
        """Type ``text`` into the focused field."""

    async def scroll(self, x: float, y: float, dx: float, dy: float) -> None:
        """Scroll at normalized (x, y) by (dx, dy) screen fractions; positive dy goes down
        the content (like a mouse wheel pulled towards the user)."""

    async def get_clipboard(self) -> str: ...

    async def set_clipboard(self, text: str) -> None: ...

    async def rotate(self, rotation: Rotation) -> None: ...

    # -- apps -------------------------------------------------------------------------------
    async def install(self, path: Path) -> AppInfo:
        """Install an app from a host file (.apk on Android; .ipa or .app on iOS)."""

    async def uninstall(self, app_id: str) -> None: ...

    async def launch(self, app_id: str) -> None:
        """Bring the app to the foreground, starting it if needed."""

    async def terminate(self, app_id: str) -> None: ...

    async def list_apps(self) -> list[AppInfo]: ...

    async def open_url(self, url: str) -> None: ...

    # -- files ------------------------------------------------------------------------------
    async def push(
        self, device_path: str, data: bytes | AsyncIterable[bytes], *, mode: int = 0o644
    ) -> int:
        """Write a file (creating parent directories); returns the bytes written."""

    async def pull(self, device_path: str) -> bytes: ...

    async def stat(self, device_path: str) -> FileEntry: ...

    async def ls(self, device_path: str) -> list[FileEntry]: ...

    async def mkdir(self, device_path: str) -> None:
        """Create a directory and its parents; an existing directory is fine."""

    async def remove(self, device_path: str, *, recursive: bool = False) -> None: ...

    # -- logs -------------------------------------------------------------------------------
    def logs(self, *, after: int = 0) -> list[LogEntry]:
        """The retained log entries with ``seq > after`` (a bounded ring buffer)."""
        ...

    async def wait_logs(self, *, after: int = 0) -> list[LogEntry]:
        """Like ``logs`` but waits until there is at least one entry."""

    # -- device sockets ---------------------------------------------------------------------
    async def open_port(self, port: int) -> trio.abc.HalfCloseableStream:
        """A stream to whatever listens on the device's TCP ``port`` (adb ``tcp:``)."""

    async def open_abstract(self, name: str) -> trio.abc.HalfCloseableStream:
        """A stream to the device's abstract unix socket ``name`` (adb ``localabstract:``)."""


@runtime_checkable
class AndroidDevice(DeviceDriver, Protocol):
    """What the device side of ADB needs beyond `DeviceDriver`: properties and settings."""

    def properties(self) -> Mapping[str, str]:
        """System properties as ``getprop`` lists them."""
        ...

    async def settings_get(self, namespace: str, key: str) -> str | None:
        """``settings get``: None when unset (the shell prints ``null``)."""

    async def settings_put(self, namespace: str, key: str, value: str) -> None: ...

    async def settings_delete(self, namespace: str, key: str) -> bool: ...

    async def settings_list(self, namespace: str) -> dict[str, str]: ...

    async def open_adb_transport(self) -> trio.abc.Stream | None:
        """A connection to the device's own adbd (an emulator's ADB port), for the ADB bridge
        to splice to; None when hostd must speak the device side itself (the virtual device)."""


@runtime_checkable
class ShellDevice(Protocol):
    """A device that runs shell commands itself (a real Android's own ``adb shell``), as
    opposed to the virtual device, whose shell hostd interprets (`devyard.hostd.adb`)."""

    async def run_shell(self, command: str) -> ShellResult:
        """Run ``command`` (already quoted for the device's shell) to its end; the caller
        bounds its time. Output is capped by the driver (`DeviceError` past the cap)."""
        ...


@runtime_checkable
class GuestNetworkDevice(Protocol):
    """A device with a network stack of its own (an emulator's guest), as opposed to one whose
    network commands hostd runs on the host (the virtual device). The host's ``127.0.0.1`` is
    not the device's loopback, so hostd writes no host address into its settings; its driver
    routes the device's traffic through `DeviceSpec.http_proxy` itself (or refuses the spec)."""

    @property
    def guest_network(self) -> bool:
        """True: the device's traffic leaves from its own stack, not from hostd."""
        ...
