"""Issue 15: what tools call through ``adb shell`` works on the virtual Android, with Debian's
real ``adb`` client through ``devyard adb connect`` (the real CLI, its background forwarder,
the edge's ``adbWebSocketUrl``, the host link): ``adb logcat -d``, ``adb shell dumpsys
window``, ``am start``, ``input``, ``wm size`` and ``adb install-multiple`` of split APKs built
here (the ``pm install-create / install-write / install-commit`` session the client drives).
"""

from __future__ import annotations

import os
import re
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

from devyard.hostd.drivers import LogLevel
from devyard.hostd.drivers.virtual import VirtualDevice
from tests.hostd.adb.conftest import AdbClient, adb, needs_adb
from tests.hostd.adb.test_android_tools import split_apk

from .conftest import Rig

pytestmark = [needs_adb, pytest.mark.slow]
__all__ = ["adb"]  # the fixture, imported for these tests


@asynccontextmanager
async def connected(rig: Rig, adb: AdbClient) -> AsyncIterator[tuple[str, VirtualDevice]]:
    """`devyard adb connect` for a new instance; yields the serial adb knows it by."""
    instance = await rig.create("android")
    device = rig.supervisor.device(instance["metadata"]["id"])
    assert isinstance(device, VirtualDevice)
    env = {**adb.env(), "ANDROID_ADB_SERVER_PORT": str(adb.server_port)}
    argv = [sys.executable, "-m", "devyard", "adb", "connect", instance["metadata"]["id"],
            "--server", rig.url, "--api-key-file", str(rig.api_key_file)]  # fmt: skip
    with trio.fail_after(60):
        result = await trio.run_process(
            argv, capture_stdout=True, capture_stderr=True, check=False, env=env
        )
    out = result.stdout.decode()
    match = re.search(r"forwarder pid (\d+) on (127\.0\.0\.1:\d+)", out)
    assert match is not None and result.returncode == 0, out + result.stderr.decode()
    try:
        yield match.group(2), device
    finally:
        os.kill(int(match.group(1)), signal.SIGTERM)


async def test_tools_commands_through_devyard_adb_connect(
    rig: Rig, adb: AdbClient, tmp_path: Path
) -> None:
    async with connected(rig, adb) as (serial, device):
        adb.serial = serial
        device.log(LogLevel.WARN, "ToolTest", "marker line")
        dumped = (await adb.run("logcat", "-d")).out
        assert re.search(r"(?m)^01-01 [\d:.]+  1000  1000 W ToolTest: marker line$", dumped)
        brief = (await adb.run("logcat", "-d", "-v", "brief", "-s", "ToolTest")).out
        assert brief == "W/ToolTest( 1000): marker line\n"
        await adb.run("logcat", "-c")
        assert "marker line" not in (await adb.run("logcat", "-d")).out

        started = await adb.run("shell", "am", "start", "-n", "com.android.settings/.Settings")
        assert "cmp=com.android.settings/.Settings" in started.out
        window = (await adb.run("shell", "dumpsys", "window")).out
        assert "mCurrentFocus=Window{" in window
        assert "u0 com.android.settings/com.android.settings.Settings}" in window
        activity = (await adb.run("shell", "dumpsys activity activities")).out
        assert "mResumedActivity: ActivityRecord{" in activity
        info = device.describe()
        size = (await adb.run("shell", "wm", "size")).out
        assert size == f"Physical size: {info.width}x{info.height}\n"
        await adb.run("shell", "input", "keyevent", "KEYCODE_HOME")
        assert device.foreground_app() is None

        base = split_apk(tmp_path / "base.apk", "com.example.splits", version="3.1")
        config = split_apk(tmp_path / "config.apk", "com.example.splits", "config.arm64_v8a")
        installed = await adb.run("install-multiple", str(base), str(config))
        assert "Success" in installed.out, installed.out + installed.err
        apps = {app.app_id: app for app in await device.list_apps()}
        assert apps["com.example.splits"].version == "3.1"
        listed = (await adb.run("shell", "pm", "list", "packages", "-3")).out
        assert listed == "package:com.example.splits\n"
        package = (await adb.run("shell", "dumpsys", "package", "com.example.splits")).out
        assert "versionName=3.1" in package and "splits=[base, config.arm64_v8a]" in package

        stray = split_apk(tmp_path / "stray.apk", "com.example.stray", "config.en")
        refused = await adb.run("install-multiple", str(base), str(stray), check=False)
        assert refused.status != 0
        assert "INSTALL_FAILED_INVALID_APK" in refused.out + refused.err
        assert "com.example.stray" not in {app.app_id for app in await device.list_apps()}


async def test_uiautomator_dump_and_pull_through_devyard_adb_connect(
    rig: Rig, adb: AdbClient, tmp_path: Path
) -> None:
    """What Appium and agents do for the element tree: ``adb shell uiautomator dump``, then
    ``adb pull`` of the file it names; the XML has the real attributes and the device's
    foreground app."""
    async with connected(rig, adb) as (serial, device):
        adb.serial = serial
        await adb.run("shell", "am", "start", "-n", "com.android.settings/.Settings")
        dumped = (await adb.run("shell", "uiautomator", "dump")).out
        assert "UI hierchary dumped to: /sdcard/window_dump.xml" in dumped  # (sic, as Android)
        local = tmp_path / "window_dump.xml"
        await adb.run("pull", "/sdcard/window_dump.xml", str(local))
        xml = local.read_text()
        assert xml.startswith("<?xml") and "<hierarchy" in xml
        for attribute in ("bounds=", "resource-id=", "content-desc=", "clickable=", "class="):
            assert attribute in xml, attribute
        assert 'package="com.android.settings"' in xml
        assert device.foreground_app() == "com.android.settings"
