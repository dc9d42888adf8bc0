"""Spec 2.1: ``spec.forceBundleId`` on an iOS instance (beside the ``initialAssets`` form).
The app is not launched at start; once it entered the foreground, the host brings it back
whenever it is left. Another platform, or a malformed id, is refused."""

from __future__ import annotations

import logging
import plistlib
import zipfile
from pathlib import Path
from typing import Any

import httpx
import pytest

from devyard.hostd.drivers.virtual import VirtualDevice
from tests.polling import eventually

from .conftest import Rig

KIOSK = "com.example.kiosk"


def _ipa(path: Path, bundle: str) -> bytes:
    with zipfile.ZipFile(path, "w") as archive:
        info = {"CFBundleIdentifier": bundle, "CFBundleDisplayName": "Kiosk"}
        archive.writestr("Payload/Kiosk.app/Info.plist", plistlib.dumps(info))
    return path.read_bytes()


def _device(rig: Rig, instance: dict[str, Any]) -> VirtualDevice:
    device = rig.supervisor.device(instance["metadata"]["id"])
    assert isinstance(device, VirtualDevice)
    return device


async def test_force_bundle_id_keeps_the_app_in_front_once_it_entered(
    rig: Rig, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="devyard.hostd.initial_assets")
    instance = await rig.create("ios", forceBundleId=KIOSK)
    assert instance["spec"]["forceBundleId"] == KIOSK
    status = instance["status"]
    api, auth = status["apiUrl"], {"Authorization": f"Bearer {status['token']}"}
    device = _device(rig, instance)
    async with httpx.AsyncClient(headers=auth, timeout=30) as http:
        # installed after start (the field does not need an initial asset), never launched
        installed = await http.post(api + "/apps", content=_ipa(tmp_path / "k.ipa", KIOSK))
        assert installed.status_code == 201, installed.text
        assert device.foreground_app() is None

        launched = await http.post(f"{api}/apps/{KIOSK}/launch")
        assert launched.status_code == 200, launched.text
        await eventually(lambda: device.foreground_app() == KIOSK)
        # the host's watcher saw it enter (before that, leaving it is allowed)
        await eventually(lambda: f"{KIOSK} entered the foreground" in caplog.text)
        home = await http.post(api + "/input", json={"type": "key", "key": "home"})
        assert home.status_code == 200, home.text
        await eventually(lambda: device.foreground_app() == KIOSK, seconds=10)
        opened = await http.post(api + "/open-url", json={"url": "https://example.com/"})
        assert opened.status_code == 200, opened.text
        await eventually(lambda: device.foreground_app() == KIOSK, seconds=10)


async def test_force_bundle_id_is_ios_only_and_validated(rig: Rig) -> None:
    android = await rig.client.post(
        "/v1/android_instances", json={"spec": {"forceBundleId": KIOSK}}
    )
    assert android.status_code == 422, android.text
    assert android.json()["reason"] == "field_not_allowed"
    assert "spec.forceBundleId" in android.json()["message"]
    for bad in ("", "has space", "a" * 256, 7):
        refused = await rig.client.post("/v1/ios_instances", json={"spec": {"forceBundleId": bad}})
        assert refused.status_code == 400, (bad, refused.text)
        assert "forceBundleId" in refused.json()["message"], refused.text
