"""``forceBundleId`` (spec 2.3): once the app has entered the foreground, it is kept there."""

from __future__ import annotations

import logging
import plistlib
import zipfile
from functools import partial
from pathlib import Path

import pytest
import trio

from devyard.hostd.drivers import DeviceSpec, Key, Platform, open_device
from devyard.hostd.drivers.virtual import VirtualDevice
from devyard.hostd.initial_assets import forced_app, keep_in_foreground
from tests.polling import eventually


def _ipa(path: Path, bundle: str) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        info = {"CFBundleIdentifier": bundle, "CFBundleDisplayName": "Kiosk"}
        archive.writestr("Payload/Kiosk.app/Info.plist", plistlib.dumps(info))
    return path


async def _until_foreground(device: VirtualDevice, app: str | None) -> None:
    with trio.fail_after(5):
        while device.foreground_app() != app:  # noqa: ASYNC110 - polling the device's state
            await trio.sleep(0.02)


async def test_the_forced_app_comes_back_after_it_first_entered(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="devyard.hostd.initial_assets")
    assert forced_app([{"name": "a"}, {"forceBundleId": "com.example.kiosk"}]) == (
        "com.example.kiosk"
    )
    assert forced_app([{"name": "a", "forceBundleId": ""}]) is None
    spec = DeviceSpec(Platform.IOS, "force", tmp_path / "dev")
    async with open_device(spec) as device, trio.open_nursery() as nursery:
        assert isinstance(device, VirtualDevice)
        await device.install(_ipa(tmp_path / "kiosk.ipa", "com.example.kiosk"))
        nursery.start_soon(partial(keep_in_foreground, device, "com.example.kiosk", every=0.02))

        await device.key(Key.HOME)  # not entered yet: leaving the launcher alone is fine
        await trio.sleep(0.1)
        assert device.foreground_app() is None

        await device.launch("com.example.kiosk")
        await eventually(lambda: "entered the foreground" in caplog.text)  # the watcher saw it
        await device.key(Key.HOME)
        await _until_foreground(device, "com.example.kiosk")  # brought back
        await device.open_url("https://example.com/")
        await _until_foreground(device, "com.example.kiosk")
        nursery.cancel_scope.cancel()
