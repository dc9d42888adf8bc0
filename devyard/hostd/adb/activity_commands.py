"""`am` and `dumpsys` as tools call them through `adb shell` (docs/adb.md, "Shell commands").

The virtual device has apps, not activities: an app's activity is the one ``am start -n`` last
named for it (per device), else ``.MainActivity``. What tools grep for is printed in the real
layout: ``mCurrentFocus=Window{... u0 PKG/ACTIVITY}`` and ``mFocusedApp=ActivityRecord{...}``
(``dumpsys window``), ``topResumedActivity=`` / ``ResumedActivity:`` / ``mResumedActivity:``
(``dumpsys activity activities``), ``ACTIVITY PKG/ACT ... pid=N`` (``dumpsys activity top``),
``versionName=`` / ``versionCode=`` (``dumpsys package PKG``), ``init=WxH DPIdpi cur=WxH``
(``dumpsys window displays``), ``mInputShown=`` (``dumpsys input_method``). With no app in the
foreground the launcher (`LAUNCHER`) has the focus.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import weakref
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Final

import trio

from ..drivers._errors import AppNotFoundError
from ..drivers.base import AppInfo, LogLevel
from .install_sessions import splits_of
from .interpreter import CommandIO, Interpreter, command

__all__ = ["LAUNCHER", "activity_of", "uid_of"]

LAUNCHER: Final = "com.google.android.apps.nexuslauncher/.NexusLauncherActivity"
_DEFAULT_ACTIVITY: Final = ".MainActivity"
_AM_VALUED: Final = frozenset(
    {"-a", "-d", "-t", "-c", "-n", "-f", "--user", "-e", "--es", "--ei", "--ez", "--el", "--ef",
     "--eu", "--esn", "-p", "--display", "--windowingMode", "--activityType", "-P",
     "--start-profiler", "--sampling", "-R"}
)  # fmt: skip
_TWO_VALUES: Final = frozenset({"-e", "--es", "--ei", "--ez", "--el", "--ef", "--eu"})
_VIEW: Final = "android.intent.action.VIEW"

#: Per device: package -> the activity ``am start -n`` last started for it.
_ACTIVITIES: weakref.WeakKeyDictionary[object, dict[str, str]] = weakref.WeakKeyDictionary()


def _short(pkg: str, activity: str) -> str:
    """``pkg/.Act`` for ``pkg/pkg.Act``, as Android prints component names."""
    return "." + activity.removeprefix(pkg + ".") if activity.startswith(pkg + ".") else activity


def activity_of(device: object, pkg: str) -> str:
    """The component ``pkg/activity`` of *pkg* on *device* (short form)."""
    activity = _ACTIVITIES.get(device, {}).get(pkg, _DEFAULT_ACTIVITY)
    return f"{pkg}/{_short(pkg, activity)}"


def _hex(*parts: object) -> str:
    return hashlib.sha256("/".join(map(str, parts)).encode()).hexdigest()[:7]


def uid_of(pkg: str) -> int:
    """The app's (stable, made-up) Linux uid, as dumpsys and `pm list packages -U` show it."""
    return 10000 + int(hashlib.sha256(pkg.encode()).hexdigest()[:4], 16) % 9000


def _task(pkg: str) -> int:
    return 100 + uid_of(pkg) % 900


def _pid(pkg: str) -> int:
    return 2000 + uid_of(pkg) % 20000


def _foreground(device: object) -> str | None:
    """The app in the foreground, for a device that says (the virtual one does)."""
    found = getattr(device, "foreground_app", None)
    value = found() if callable(found) else None
    return value if isinstance(value, str) else None


def _focus(sh: Interpreter) -> str:
    foreground = _foreground(sh.device)
    return LAUNCHER if foreground is None else activity_of(sh.device, foreground)


def _full(component: str) -> str:
    """``pkg/pkg.Act`` (the window title form) for ``pkg/.Act``."""
    pkg, _, activity = component.partition("/")
    return f"{pkg}/{pkg}{activity}" if activity.startswith(".") else component


# ---- am ----------------------------------------------------------------------------------


def _am_options(args: Sequence[str]) -> tuple[dict[str, str], list[str]]:
    opts: dict[str, str] = {}
    positional: list[str] = []
    it = iter(args)
    for arg in it:
        if arg in _TWO_VALUES:
            next(it, "")
            next(it, "")
        elif arg in _AM_VALUED:
            opts[arg] = next(it, "")
        elif arg.startswith("-"):
            opts[arg] = ""
        else:
            positional.append(arg)
    return opts, positional


async def _am_start(sh: Interpreter, args: Sequence[str], io: CommandIO) -> int:
    opts, positional = _am_options(args)
    component = opts.get("-n", "")
    action = opts.get("-a", "")
    data = opts.get("-d", "") or (positional[0] if positional else "")
    fields = [f"act={action}" if action else "", f"dat={data}" if data else ""]
    fields += [f"cmp={component}" if component else "", f"pkg={opts['-p']}" if "-p" in opts else ""]
    await io.out(f"Starting: Intent {{ {' '.join(f for f in fields if f)} }}\n")
    dev = sh.device
    started_at = trio.current_time()
    pkg, _, activity = component.partition("/")
    pkg = pkg or opts.get("-p", "")
    try:
        if "-S" in opts and pkg:
            await dev.terminate(pkg)
        if data and (not pkg or (action == _VIEW and not component)):
            await dev.open_url(data)
            pkg = _foreground(dev) or pkg
        elif pkg:
            await dev.launch(pkg)
            if activity:
                _ACTIVITIES.setdefault(dev, {})[pkg] = activity
        else:
            await io.err("Error: Activity not started, unable to resolve Intent\n")
            return 1
    except AppNotFoundError:
        shown = _full(component) if component else pkg
        await io.err(f"Error type 3\nError: Activity class {{{shown}}} does not exist.\n")
        return 1
    dev.log(
        LogLevel.INFO, "ActivityTaskManager", f"START u0 {{{' '.join(f for f in fields if f)}}}"
    )
    if "-W" in opts:
        took = max(1, round((trio.current_time() - started_at) * 1000))
        await io.out(
            f"Status: ok\nLaunchState: COLD\nActivity: {activity_of(dev, pkg)}\n"
            f"TotalTime: {took}\nWaitTime: {took}\nComplete\n"
        )
    return 0


@command("am")
async def _am(sh: Interpreter, argv: Sequence[str], io: CommandIO) -> int:
    verb, args = (argv[1] if len(argv) > 1 else ""), list(argv[2:])
    if verb in ("start", "start-activity"):
        return await _am_start(sh, args, io)
    if verb in ("force-stop", "kill", "stop-app") and args:
        pkg = args[-1]
        with contextlib.suppress(AppNotFoundError):  # as on a device: quietly
            await sh.device.terminate(pkg)
        return 0
    if verb == "get-current-user":
        await io.out("0\n")
        return 0
    if verb == "stack" and args[:1] == ["list"]:
        focus = _focus(sh)
        pkg = focus.partition("/")[0]
        await io.out(f"RootTask id={_task(pkg)} bounds=[0,0][0,0] displayId=0 userId=0\n"
                     f"  taskId={_task(pkg)}: {_full(focus)} visible=true\n")  # fmt: skip
        return 0
    await io.err(f"am: unsupported command {verb!r}\n")
    return 1


# ---- dumpsys -----------------------------------------------------------------------------


def _window_focus(sh: Interpreter) -> str:
    focus = _focus(sh)
    pkg = focus.partition("/")[0]
    return (
        f"  mCurrentFocus=Window{{{_hex('w', focus)} u0 {_full(focus)}}}\n"
        f"  mFocusedApp=ActivityRecord{{{_hex('a', focus)} u0 {focus} t{_task(pkg)}}}\n"
    )


def _displays(sh: Interpreter) -> str:
    info = sh.device.describe()
    w, h, dpi = info.width, info.height, info.density
    rotation = int(info.rotation) // 90
    return (
        "WINDOW MANAGER DISPLAY CONTENTS (dumpsys window displays)\n"
        f"  Display: mDisplayId=0 rootTasks=1\n"
        f"    init={w}x{h} {dpi}dpi base={w}x{h} {dpi}dpi cur={w}x{h} app={w}x{h} "
        f"rng={min(w, h)}x{min(w, h)}-{max(w, h)}x{max(w, h)}\n"
        f"    mRotation={rotation} mCurrentRotation=ROTATION_{rotation * 90}\n"
        "    mDisplayFrozen=false mScreenOnEarly=true mScreenOnFully=true\n"
    )


async def _dumpsys_window(sh: Interpreter, args: Sequence[str], io: CommandIO) -> None:
    what = args[0] if args else ""
    if what in ("", "displays", "d"):
        await io.out(_displays(sh) + "\n")
    if what in ("", "windows", "w"):
        focus = _focus(sh)
        await io.out(
            "WINDOW MANAGER WINDOWS (dumpsys window windows)\n"
            f"  Window #0 Window{{{_hex('w', focus)} u0 {_full(focus)}}}:\n"
            "    mDisplayId=0 rootTaskId=1 mOwnerUid=10000 showForAllUsers=false\n"
            "    isOnScreen=true isVisible=true\n"
        )
    if what in ("", "windows", "w", "policy"):
        await io.out(
            "\n  mDreamingLockscreen=false mShowingDream=false isKeyguardShowing=false\n"
            "  mScreenOnEarly=true mScreenOnFully=true mAwake=true\n"
        )
    await io.out(_window_focus(sh))


def _record(sh: Interpreter, focus: str) -> str:
    pkg = focus.partition("/")[0]
    return f"ActivityRecord{{{_hex('a', focus)} u0 {focus} t{_task(pkg)}}}"


async def _dumpsys_activity(sh: Interpreter, args: Sequence[str], io: CommandIO) -> None:
    focus = _focus(sh)
    pkg = focus.partition("/")[0]
    if args[:1] == ["top"]:
        await io.out(
            "TASK dumpsys activity top\n"
            f"TASK {uid_of(pkg)}:{pkg} id={_task(pkg)} userId=0\n"
            f"  ACTIVITY {focus} {_hex('a', focus)} pid={_pid(pkg)}\n"
        )
        return
    running = [a for a in await sh.device.list_apps() if a.running]
    record = _record(sh, focus)
    lines = [
        "ACTIVITY MANAGER ACTIVITIES (dumpsys activity activities)",
        "Display #0 (activities from top to bottom):",
        f"  * Task{{{_hex('t', pkg)} #{_task(pkg)} type=standard A={uid_of(pkg)}:{pkg} U=0 "
        "visible=true mode=fullscreen translucent=false sz=1}",
        f"    topResumedActivity={record}",
        f"    * Hist  #0: {record}",
    ]
    for app in running:
        if app.app_id != pkg:
            app_id = app.app_id
            other = activity_of(sh.device, app_id)
            lines.append(f"  * Task{{{_hex('t', app_id)} #{_task(app_id)} type=standard "
                         f"A={uid_of(app_id)}:{app_id} U=0 visible=false sz=1}}")  # fmt: skip
            lines.append(f"    * Hist  #0: {_record(sh, other)}")
    lines += [
        "",
        f"  ResumedActivity: {record}",
        f"  mResumedActivity: {record}",
        f"  mFocusedApp={record}",
        "",
    ]
    await io.out("\n".join(lines) + "\n")


def _version_code(path: Path | None) -> str:
    """``versionCode`` from the installed file: devyard-package.txt or a text manifest."""
    if path is None:
        return "1"
    try:
        with zipfile.ZipFile(path) as apk:
            names = set(apk.namelist())
            for name, pattern in (
                ("devyard-package.txt", r"(?m)^\s*versionCode\s*=\s*(\d+)"),
                ("AndroidManifest.xml", r'android:versionCode\s*=\s*"(\d+)"'),
            ):
                if name in names:
                    text = apk.read(name)[: 1 << 20].decode("utf-8", "replace")
                    if match := re.search(pattern, text):
                        return match.group(1)
    except (OSError, zipfile.BadZipFile):
        pass
    return "1"


async def _dumpsys_package(sh: Interpreter, args: Sequence[str], io: CommandIO) -> int:
    wanted = [a for a in args if not a.startswith("-")]
    apps = {a.app_id: a for a in await sh.device.list_apps()}
    if not wanted:
        await io.out("Packages:\n" + "".join(f"  Package [{p}]\n" for p in sorted(apps)))
        return 0
    pkg = wanted[0]
    app = apps.get(pkg)
    if app is None:
        await io.out(f"Unable to find package: {pkg}\n")
        return 0
    await io.out(await _package_block(sh, app))
    return 0


async def _package_block(sh: Interpreter, app: AppInfo) -> str:
    pkg = app.app_id
    found = getattr(sh.device, "package_path", None)
    path = found(pkg) if callable(found) else None
    path = path if isinstance(path, Path) else None
    code = await trio.to_thread.run_sync(_version_code, path)
    code_path = f"/system/app/{pkg}" if app.system else f"/data/app/{pkg}"
    splits = ", ".join(["base", *splits_of(sh.device, pkg)])
    flags = "SYSTEM HAS_CODE" if app.system else "HAS_CODE ALLOW_CLEAR_USER_DATA ALLOW_BACKUP"
    sdk = sh.device.properties().get("ro.build.version.sdk") or "34"
    return (
        "Packages:\n"
        f"  Package [{pkg}] ({_hex('p', pkg)}):\n"
        f"    userId={uid_of(pkg)}\n"
        f"    pkg=Package{{{_hex('p', pkg)} {pkg}}}\n"
        f"    codePath={code_path}\n"
        f"    versionCode={code} minSdk=21 targetSdk={sdk}\n"
        f"    versionName={app.version or '1.0'}\n"
        f"    splits=[{splits}]\n"
        f"    flags=[ {flags} ]\n"
        "    installerPackageName=null\n"
        f"  User 0: ceDataInode=0 installed=true hidden=false suspended=false "
        f"stopped={'false' if app.running else 'true'} notLaunched=false enabled=0\n"
    )


_SERVICES: Final = ("activity", "input_method", "package", "window", "display")


@command("dumpsys")
async def _dumpsys(sh: Interpreter, argv: Sequence[str], io: CommandIO) -> int:
    service, args = (argv[1] if len(argv) > 1 else ""), list(argv[2:])
    if service == "-l":
        await io.out("Currently running services:\n" + "".join(f"  {s}\n" for s in _SERVICES))
        return 0
    if service == "window":
        await _dumpsys_window(sh, args, io)
    elif service == "activity":
        await _dumpsys_activity(sh, args, io)
    elif service == "package":
        return await _dumpsys_package(sh, args, io)
    elif service == "input_method":
        await io.out("  mInputShown=false mShowRequested=false\n  mServedInputConnection=null\n")
    elif service == "display":
        info = sh.device.describe()
        await io.out(
            f"  mDefaultDisplayInfo=DisplayInfo{{real {info.width} x {info.height}, "
            f"density {info.density}}}\n  mState=ON\n"
        )
    elif not service:
        await io.err("dumpsys: give a service (dumpsys -l lists them)\n")
        return 1
    else:
        await io.err(f"Can't find service: {service}\n")
        return 1
    return 0
