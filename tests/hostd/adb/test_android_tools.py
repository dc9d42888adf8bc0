"""The shell commands tools call through ``adb shell`` (issue 15), against the virtual device:
logcat's options and formats, dumpsys window / activity / package, am start, pm's install
sessions. The real ``adb`` client runs them in tests/server/gateway/test_adb_tools.py.
"""

from __future__ import annotations

import re
import zipfile
from pathlib import Path

from devyard.hostd.drivers import LogLevel
from devyard.hostd.drivers.virtual import VirtualDevice

from .test_interpreter import run


def split_apk(path: Path, package: str, split: str | None = None, version: str = "") -> Path:
    """An APK whose devyard-package.txt names its package, version and split."""
    lines = [f"package={package}", f"version={version}" if version else "", "versionCode=7"]
    if split is not None:
        lines.append(f"split={split}")
    with zipfile.ZipFile(path, "w") as apk:
        apk.writestr("devyard-package.txt", "\n".join(line for line in lines if line) + "\n")
        apk.writestr("classes.dex" if split is None else "res/x.arsc", b"\0" * 100)
    return path


async def test_logcat_filters_formats_and_clear(device: VirtualDevice) -> None:
    device.log(LogLevel.INFO, "Alpha", "one")
    device.log(LogLevel.WARN, "Beta", "two")
    device.log(LogLevel.DEBUG, "Alpha", "three")
    status, out, _ = await run(device, "logcat -d")
    assert status == 0
    assert re.search(r"(?m)^01-01 \d\d:\d\d:\d\d\.\d{3}  1000  1000 W Beta    : two$", out), out
    _, out, _ = await run(device, "logcat -d -s Alpha")
    assert out.count("Alpha") == 2 and "Beta" not in out
    _, out, _ = await run(device, "logcat -d Alpha:I *:S")
    assert [line.split(": ", 1)[1] for line in out.splitlines()] == ["one"]
    _, out, _ = await run(device, "logcat -d -v brief *:W")
    assert out == "W/Beta    ( 1000): two\n"
    _, out, _ = await run(device, "logcat -d -v raw -e ^t")
    assert out.splitlines() == ["two", "three"]
    _, out, _ = await run(device, "logcat -v tag -t 1")
    assert out == "D/Alpha   : three\n"
    assert (await run(device, "logcat -d -v nonsense"))[0] == 1
    # what `adb logcat` sends: the client's ANDROID_LOG_TAGS are logcat's default filter
    line = "export ANDROID_LOG_TAGS=\"'Beta:W *:S'\" ; exec logcat -d -v raw"
    assert (await run(device, line))[1] == "two\n"
    assert (await run(device, "logcat -c"))[0] == 0
    assert (await run(device, "logcat -d"))[1] == ""
    device.log(LogLevel.ERROR, "Gamma", "after clear")
    assert (await run(device, "logcat -d -v raw"))[1] == "after clear\n"


async def test_am_start_and_dumpsys_show_the_focused_app(device: VirtualDevice) -> None:
    _, out, _ = await run(device, "dumpsys window")
    assert "mCurrentFocus=Window{" in out and "NexusLauncherActivity" in out
    status, out, _ = await run(device, "am start -W -n com.android.settings/.SubSettings")
    assert status == 0
    assert out.startswith("Starting: Intent { cmp=com.android.settings/.SubSettings }\n")
    assert "Status: ok\n" in out and "Activity: com.android.settings/.SubSettings\n" in out
    _, out, _ = await run(device, "dumpsys window windows | grep -E 'mCurrentFocus|mFocusedApp'")
    focus, app = out.splitlines()
    assert re.fullmatch(
        r"  mCurrentFocus=Window\{[0-9a-f]{7} u0 com\.android\.settings/"
        r"com\.android\.settings\.SubSettings\}",
        focus,
    ), focus
    assert " u0 com.android.settings/.SubSettings t" in app
    _, out, _ = await run(device, "dumpsys activity activities | grep mResumedActivity")
    assert "com.android.settings/.SubSettings" in out
    _, out, _ = await run(device, "dumpsys activity top")
    assert "ACTIVITY com.android.settings/.SubSettings " in out and " pid=" in out
    info = device.describe()
    _, out, _ = await run(device, "dumpsys window displays")
    assert f"init={info.width}x{info.height} {info.density}dpi" in out
    status, _, err = await run(device, "am start -n com.nope/.Main")
    assert status == 1 and "Error: Activity class {com.nope/com.nope.Main} does not exist." in err
    _, out, _ = await run(device, "am start -a android.intent.action.VIEW -d https://example.com/")
    assert "act=android.intent.action.VIEW dat=https://example.com/" in out
    assert device.foreground_app() == "com.android.chrome"
    assert (await run(device, "am force-stop com.android.chrome"))[0] == 0
    assert device.foreground_app() is None
    assert (await run(device, "dumpsys nosuch"))[0] == 1


async def test_install_sessions_install_one_app_from_its_splits(
    device: VirtualDevice, tmp_path: Path
) -> None:
    base = split_apk(tmp_path / "base.apk", "com.example.split", version="2.5")
    hdpi = split_apk(tmp_path / "hdpi.apk", "com.example.split", "config.xxhdpi")
    other = split_apk(tmp_path / "other.apk", "com.example.other", "config.en")

    async def session(*files: Path) -> tuple[int, str]:
        status, out, _ = await run(
            device, f"pm install-create -S {sum(f.stat().st_size for f in files)}"
        )
        assert status == 0, out
        match = re.fullmatch(r"Success: created install session \[(\d+)\]\n", out)
        assert match is not None, out
        number = match.group(1)
        for i, apk in enumerate(files):
            data = apk.read_bytes()
            line = f"pm install-write -S {len(data)} {number} {i}_{apk.name} -"
            written = await run(device, line, stdin=data)
            assert written[:2] == (0, f"Success: streamed {len(data)} bytes\n"), written
        status, out, _ = await run(device, f"pm install-commit {number}")
        return status, out

    assert await session(base, hdpi) == (0, "Success\n")
    apps = {app.app_id: app for app in await device.list_apps()}
    assert apps["com.example.split"].version == "2.5"
    assert "com.example.other" not in apps
    _, out, _ = await run(device, "dumpsys package com.example.split")
    assert "    versionName=2.5\n" in out and "    versionCode=7 " in out
    assert "splits=[base, config.xxhdpi]" in out
    _, out, _ = await run(device, "pm list packages -3")
    assert out == "package:com.example.split\n"
    _, out, _ = await run(device, "pm list packages -U -i split")
    assert re.fullmatch(r"package:com\.example\.split installer=null uid:\d+\n", out), out
    assert (await run(device, "pm list packages -d"))[1] == ""
    _, out, _ = await run(device, "pm list packages -s chrome")
    assert out == "package:com.android.chrome\n"

    status, out = await session(base, other)
    assert status == 1 and out.startswith("Failure [INSTALL_FAILED_INVALID_APK: split APKs of")
    status, out = await session(hdpi)
    assert status == 1 and out.startswith("Failure [INSTALL_FAILED_MISSING_SPLIT")
    assert (await run(device, "pm install-commit 1"))[1].startswith(
        "Failure [INSTALL_FAILED_INVALID_SESSION"
    )
    number = (await run(device, "pm install-create"))[1].split("[")[1].split("]")[0]
    assert (await run(device, f"pm install-abandon {number}"))[1] == "Success\n"
    assert [e.name for e in await device.ls("/data/local/tmp")] == [], "staging is removed"
