"""The Android commands of the interpreter: getprop, input, monkey, pm / cmd, screencap, wm,
settings, and the made-up /proc/net/unix (logcat: logcat.py; am, dumpsys: activity_commands.py;
``pm install-create/-write/-commit``: install_sessions.py).

Each maps onto one verb of the device (devyard.hostd.drivers.base) and prints what the real
command prints where tools read it: `pm install` prints `Success` (adb install checks it),
`pm list packages` prints `package:NAME` lines, `settings get` prints `null` for unset, `wm
size` prints `Physical size: WxH`. `input` takes pixels, as on a device; the device takes
normalized coordinates, so we divide by the current screen size.
"""

from __future__ import annotations

import io as _io
import itertools
import struct
from collections.abc import AsyncIterator, Sequence
from typing import Final

import trio
from PIL import Image

from ..drivers._errors import AppNotFoundError, DeviceFileError, InstallError
from ..drivers.base import Key, LogLevel, TouchAction
from ..netdial import network_of
from . import uiautomator as _uiautomator  # noqa: F401  (registers `uiautomator`)
from .activity_commands import uid_of
from .install_sessions import SESSION_VERBS, pm_session
from .interpreter import (
    SPECIAL_FILES,
    CommandIO,
    Interpreter,
    ParseError,
    Stdin,
    command,
    device_path,
)

__all__ = ["KEYCODES"]

_NAMED_KEYS: Final = {
    "HOME": (3, Key.HOME), "BACK": (4, Key.BACK), "APP_SWITCH": (187, Key.APP_SWITCH),
    "ENTER": (66, Key.ENTER), "DEL": (67, Key.DELETE), "TAB": (61, Key.TAB),
    "ESCAPE": (111, Key.ESCAPE), "PASTE": (279, Key.PASTE), "POWER": (26, Key.POWER),
    "VOLUME_UP": (24, Key.VOLUME_UP), "VOLUME_DOWN": (25, Key.VOLUME_DOWN),
    "MENU": (82, Key.MENU),
}  # fmt: skip
# KEYCODE_0..9 are 7..16, KEYCODE_A..Z are 29..54, KEYCODE_SPACE is 62: they type text.
_TEXT_KEYS: Final = {
    **{str(d): (7 + d, str(d)) for d in range(10)},
    **{chr(65 + i): (29 + i, chr(97 + i)) for i in range(26)},
    "SPACE": (62, " "),
}
#: `input keyevent` arguments, by KEYCODE_ name (with or without the prefix) and by number.
KEYCODES: Final[dict[str, Key | str]] = {
    **{f"KEYCODE_{name}": key for name, (_, key) in _NAMED_KEYS.items()},
    **{f"KEYCODE_{name}": text for name, (_, text) in _TEXT_KEYS.items()},
    **{name: key for name, (_, key) in _NAMED_KEYS.items()},
    **{str(code): key for code, key in _NAMED_KEYS.values()},
    **{str(code): text for code, text in _TEXT_KEYS.values()},
}
_INPUT_SOURCES: Final = frozenset(
    {"touchscreen", "touchpad", "mouse", "keyboard", "dpad", "gamepad", "stylus", "trackball"}
)
_install_ids = itertools.count(1)


#: The device's own egress proxy with its credentials (tunnel-attached instances only): what
#: an app on this device uses to reach its tunnel. Read-only, and only this device's: the
#: credentials open no other instance's proxy (netdial.py).
PROXY_PROPERTY: Final = "devyard.proxy"


@command("getprop")
async def _getprop(sh: Interpreter, argv: Sequence[str], io: CommandIO) -> int:
    props = dict(sh.device.properties())
    own = network_of(sh.device).proxy
    if own is not None:
        props[PROXY_PROPERTY] = own.url
    if len(argv) == 1:
        await io.out("".join(f"[{k}]: [{v}]\n" for k, v in sorted(props.items())))
    else:
        await io.out(props.get(argv[1], argv[2] if len(argv) > 2 else "") + "\n")
    return 0


# ---- input -------------------------------------------------------------------------------


def _point(sh: Interpreter, x: str, y: str) -> tuple[float, float]:
    info = sh.device.describe()
    try:
        return float(x) / info.width, float(y) / info.height
    except (ValueError, ZeroDivisionError):
        raise ParseError(f"input: bad coordinates {x!r} {y!r}") from None


@command("input")
async def _input(sh: Interpreter, argv: Sequence[str], io: CommandIO) -> int:
    args = list(argv[1:])
    if args and args[0] in _INPUT_SOURCES:
        args.pop(0)
    if not args:
        await io.err("usage: input [<source>] <command> [<arg>...]\n")
        return 1
    verb, rest = args[0], args[1:]
    dev = sh.device
    if verb == "tap" and len(rest) == 2:
        await dev.tap(*_point(sh, *rest))
    elif verb in ("swipe", "draganddrop") and len(rest) in (4, 5):
        (x1, y1), (x2, y2) = _point(sh, rest[0], rest[1]), _point(sh, rest[2], rest[3])
        duration = min(float(rest[4]) / 1000, 5.0) if len(rest) == 5 else 0.3
        steps = 10
        await dev.touch(0, TouchAction.DOWN, x1, y1)
        for i in range(1, steps + 1):
            await trio.sleep(duration / steps)
            f = i / steps
            await dev.touch(0, TouchAction.MOVE, x1 + (x2 - x1) * f, y1 + (y2 - y1) * f)
        await dev.touch(0, TouchAction.UP, x2, y2)
    elif verb == "text" and rest:
        await dev.text(" ".join(rest).replace("%s", " "))
    elif verb == "keyevent" and rest:
        for code in rest:
            if code.startswith("--"):
                continue
            key = KEYCODES.get(code)
            if key is None:
                await io.err(f"input: unknown keycode {code}\n")
                return 1
            if isinstance(key, Key):
                await dev.key(key)
            else:
                await dev.text(key)
    else:
        await io.err(f"input: bad command {' '.join(args)!r}\n")
        return 1
    return 0


# ---- activities --------------------------------------------------------------------------


def _options(args: Sequence[str], with_value: frozenset[str]) -> dict[str, str]:
    found: dict[str, str] = {}
    it = iter(args)
    for arg in it:
        if arg in with_value:
            found[arg] = next(it, "")
        elif arg.startswith("-"):
            found[arg] = ""
        else:
            found.setdefault("", arg)  # the first positional argument
    return found


@command("monkey")
async def _monkey(sh: Interpreter, argv: Sequence[str], io: CommandIO) -> int:
    opts = _options(argv[1:], frozenset({"-p", "-c", "-s", "--throttle"}))
    if "-p" not in opts:
        await io.err("monkey: only `monkey -p PACKAGE ...` is supported\n")
        return 1
    await sh.device.launch(opts["-p"])
    await io.out("Events injected: 1\n")
    return 0


# ---- packages ----------------------------------------------------------------------------

_PM_VALUED: Final = frozenset(
    {"-S", "-i", "-p", "--user", "--install-location", "--abi", "--originating-uri",
     "--referrer", "--pkg", "--install-reason"}
)  # fmt: skip


async def _stdin_bytes(stdin: Stdin, size: int) -> AsyncIterator[bytes]:
    left = size
    while left > 0:
        chunk = await stdin.read()
        if not chunk:
            raise InstallError(f"the APK ended {left} bytes short of -S {size}")
        yield chunk[:left]
        left -= len(chunk)


async def _pm_install(sh: Interpreter, args: Sequence[str], io: CommandIO) -> int:
    opts = _options(args, _PM_VALUED)
    path = opts.get("")
    dev = sh.device
    try:
        if path is None:
            if not opts.get("-S", "").isdigit():
                await io.err("Error: APK content must be streamed (-S SIZE) or given as a path\n")
                return 1
            staged = f"/data/local/tmp/.adb-install-{next(_install_ids)}.apk"
            try:
                await dev.push(staged, _stdin_bytes(io.stdin, int(opts["-S"])))
                app = await dev.install(dev.resolve_path(staged))
            finally:
                await dev.remove(staged)
        else:
            await dev.stat(device_path(path))
            app = await dev.install(dev.resolve_path(device_path(path)))
    except (InstallError, DeviceFileError) as exc:
        await io.out(f"Failure [INSTALL_FAILED_INVALID_APK: {exc}]\n")
        return 1
    dev.log(LogLevel.INFO, "PackageManager", f"installed {app.app_id}")
    await io.out("Success\n")
    return 0


@command("pm")
async def _pm(sh: Interpreter, argv: Sequence[str], io: CommandIO) -> int:
    verb, args = (argv[1] if len(argv) > 1 else ""), argv[2:]
    dev = sh.device
    if verb == "install":
        return await _pm_install(sh, args, io)
    if verb in SESSION_VERBS:  # install-create / -write / -commit / -abandon (adb install-multiple)
        return await pm_session(sh, verb, args, io)
    if verb == "list" and tuple(args[:1]) == ("packages",):
        opts = _options(args[1:], frozenset({"--user"}))
        lines = []
        for app in sorted(await dev.list_apps(), key=lambda a: a.app_id):
            if ("-s" in opts and not app.system) or ("-3" in opts and app.system):
                continue
            if opts.get("", "") not in app.app_id or "-d" in opts:  # every app is enabled
                continue
            prefix = f"/data/app/{app.app_id}/base.apk=" if "-f" in opts else ""
            extra = " versionCode:1" if "--show-versioncode" in opts else ""
            extra += " installer=null" if "-i" in opts else ""
            extra += f" uid:{uid_of(app.app_id)}" if "-U" in opts else ""
            lines.append(f"package:{prefix}{app.app_id}{extra}\n")
        await io.out("".join(lines))
        return 0
    if verb == "uninstall" and args:
        try:
            await dev.uninstall(args[-1])
        except AppNotFoundError:
            await io.out("Failure [DELETE_FAILED_INTERNAL_ERROR]\n")
            return 1
        await io.out("Success\n")
        return 0
    if verb == "path" and args:
        if args[-1] not in {app.app_id for app in await dev.list_apps()}:
            return 1
        await io.out(f"package:/data/app/{args[-1]}/base.apk\n")
        return 0
    await io.err(f"pm: unsupported command {verb!r}\n")
    return 1


_CMD_SERVICES: Final = {"package": "pm", "settings": "settings", "activity": "am",
                        "input": "input", "window": "wm"}  # fmt: skip


@command("cmd")
async def _cmd(sh: Interpreter, argv: Sequence[str], io: CommandIO) -> int:
    if len(argv) < 2:
        await io.err("cmd: No service specified; use -l to list all services\n")
        return 20
    target = _CMD_SERVICES.get(argv[1])
    if target is None:
        await io.err(f"cmd: Can't find service: {argv[1]}\n")
        return 20
    return await sh.run_argv([target, *argv[2:]], io)


# ---- screen ------------------------------------------------------------------------------


@command("screencap")
async def _screencap(sh: Interpreter, argv: Sequence[str], io: CommandIO) -> int:
    args = [a for a in argv[1:] if a != "-p"]
    png = await sh.device.screenshot()
    if args:
        await sh.device.push(device_path(args[0]), png)
        return 0
    if "-p" in argv:
        await io.stdout(png)
        return 0
    # raw RGBA_8888 after a 12-byte header (width, height, format 1), as `screencap` prints it
    image = Image.open(_io.BytesIO(png)).convert("RGBA")
    await io.stdout(struct.pack("<III", image.width, image.height, 1) + image.tobytes())
    return 0


@command("wm")
async def _wm(sh: Interpreter, argv: Sequence[str], io: CommandIO) -> int:
    info = sh.device.describe()
    verb = argv[1] if len(argv) > 1 else ""
    if verb == "size" and len(argv) == 2:
        await io.out(f"Physical size: {info.width}x{info.height}\n")
    elif verb == "density" and len(argv) == 2:
        await io.out(f"Physical density: {info.density}\n")
    else:
        await io.err("wm: only `wm size` and `wm density` are supported\n")
        return 1
    return 0


# ---- settings and logs -------------------------------------------------------------------


@command("settings")
async def _settings(sh: Interpreter, argv: Sequence[str], io: CommandIO) -> int:
    args = list(argv[1:])
    if args[:1] == ["--user"]:
        del args[:2]
    dev = sh.device
    match args:
        case ["get", namespace, key]:
            value = await dev.settings_get(namespace, key)
            await io.out(f"{'null' if value is None else value}\n")
        case ["put", namespace, key, value, *_]:
            await dev.settings_put(namespace, key, value)
        case ["delete", namespace, key]:
            deleted = await dev.settings_delete(namespace, key)
            await io.out(f"Deleted {int(deleted)} rows\n")
        case ["list", namespace]:
            values = await dev.settings_list(namespace)
            await io.out("".join(f"{k}={v}\n" for k, v in sorted(values.items())))
        case _:
            await io.err("usage: settings [--user N] get|put|delete|list NAMESPACE [KEY [VALUE]]\n")
            return 1
    return 0


@command("remount")
async def _remount(sh: Interpreter, argv: Sequence[str], io: CommandIO) -> int:
    await io.err("remount is not supported on a devyard virtual device\n")
    return 1


def _proc_net_unix(sh: Interpreter) -> bytes:
    lines = ["Num       RefCount Protocol Flags    Type St Inode Path\n"]
    for i, sock in enumerate(sh.device.listening()):
        if str(sock.kind) == "localabstract":
            lines.append(
                f"{i:016x}: 00000002 00000000 00010000 0001 01 {10000 + i} @{sock.address}\n"
            )
    return "".join(lines).encode()


SPECIAL_FILES["/proc/net/unix"] = _proc_net_unix
