"""Every model and OS version describes itself; bad specs fail before anything starts."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from devyard.hostd.drivers import (
    AndroidDevice,
    Codec,
    DeviceDriver,
    DeviceSpec,
    InvalidSpecError,
    Platform,
    Rotation,
    UnsupportedOperationError,
    drivers_by_name,
    open_device,
)
from devyard.hostd.drivers.virtual import VirtualDevice

from .conftest import OpenDevice

SCREENS = [
    (Platform.ANDROID, None, "pixel", "Android", 540, 1200),
    (Platform.ANDROID, "pixel-tablet", "pixel-tablet", "Android", 800, 1280),
    (Platform.IOS, None, "iphone", "iOS", 393, 852),
    (Platform.IOS, "iphone", "iphone", "iOS", 393, 852),
    (Platform.IOS, "iphone-duo", "iphone-duo", "iOS", 430, 932),
    (Platform.IOS, "ipad", "ipad", "iPadOS", 820, 1180),
    (Platform.IOS, "watch", "watch", "watchOS", 198, 242),
]


def test_virtual_device_is_a_device_driver_statically_and_at_runtime(tmp_path: Path) -> None:
    driver: type[DeviceDriver] = VirtualDevice
    android: type[AndroidDevice] = VirtualDevice
    device = VirtualDevice(DeviceSpec(Platform.ANDROID, "a", tmp_path / "s"))
    assert isinstance(device, DeviceDriver)
    assert isinstance(device, AndroidDevice)
    assert driver is android
    assert not (tmp_path / "s").exists()  # constructing does no I/O


@pytest.mark.parametrize("case", SCREENS, ids=lambda case: f"{case[0]}-{case[1]}")
async def test_models_describe_their_screen(
    open_dev: OpenDevice, case: tuple[Platform, str | None, str, str, int, int]
) -> None:
    platform, model, expected, os_name, width, height = case
    async with open_dev(platform, model=model) as dev:
        info = dev.describe()
        assert (info.platform, info.model, info.os_name) == (platform, expected, os_name)
        assert (info.width, info.height, info.rotation) == (width, height, Rotation.PORTRAIT)
        assert info.has_screen and info.codecs == (Codec.JPEG, Codec.H264)
        assert info.driver == "virtual" and info.instance_id.startswith(str(platform))
        png = await dev.screenshot()
        assert png.startswith(b"\x89PNG\r\n\x1a\n")


@pytest.mark.parametrize(("version", "sdk"), [("13", "33"), ("14", "34"), ("15", "35")])
async def test_android_versions_and_properties(
    open_dev: OpenDevice, version: str, sdk: str
) -> None:
    async with open_dev(Platform.ANDROID, os_version=version) as dev:
        assert dev.describe().os_version == version
        props = dev.properties()
        assert props["ro.build.version.release"] == version
        assert props["ro.build.version.sdk"] == sdk
        assert props["ro.product.model"] == "Virtual Pixel"
        assert props["ro.product.name"] == props["ro.product.device"] == "devyard_pixel"
        assert props["ro.serialno"] == dev.describe().instance_id
        assert props["sys.boot_completed"] == "1"
        assert dev.getprop("ro.build.version.sdk") == sdk
        assert dev.getprop("no.such.property") == ""


async def test_android_default_os_is_the_newest(android: VirtualDevice) -> None:
    assert android.describe().os_version == "15"


@pytest.mark.parametrize(
    ("platform", "os_name"), [(Platform.XCODE, "macOS"), (Platform.GRADLE, "Linux")]
)
async def test_build_machines_are_headless_with_a_sandbox(
    open_dev: OpenDevice, platform: Platform, os_name: str
) -> None:
    async with open_dev(platform) as dev:
        info = dev.describe()
        assert (info.platform, info.model, info.os_name) == (platform, str(platform), os_name)
        assert not info.has_screen and (info.width, info.height) == (0, 0) and info.codecs == ()
        with pytest.raises(UnsupportedOperationError, match="no screen"):
            await dev.screenshot()
        with pytest.raises(UnsupportedOperationError):
            dev.frames()
        with pytest.raises(UnsupportedOperationError):
            await dev.tap(0.5, 0.5)
        with pytest.raises(UnsupportedOperationError, match="install"):
            await dev.install(dev.sandbox)
        assert await dev.list_apps() == []
        await dev.push("/workspace/build.gradle", b"plugins {}")
        assert await dev.pull("/workspace/build.gradle") == b"plugins {}"


async def test_ios_has_no_android_api(iphone: VirtualDevice) -> None:
    with pytest.raises(UnsupportedOperationError):
        iphone.properties()
    with pytest.raises(UnsupportedOperationError):
        await iphone.settings_get("global", "device_name")


@pytest.mark.parametrize(
    ("platform", "model", "os_version", "message"),
    [
        (Platform.IOS, "iphone-17-ultra", None, "unknown ios model 'iphone-17-ultra'"),
        (Platform.ANDROID, "nexus", None, "unknown android model 'nexus'"),
        (Platform.ANDROID, None, "12", "no Android version '12'"),
        (Platform.IOS, "watch", "18.2", "no watchOS version '18.2'"),
    ],
)
def test_unknown_model_or_version_is_a_clear_error(
    tmp_path: Path, platform: Platform, model: str | None, os_version: str | None, message: str
) -> None:
    spec = DeviceSpec(platform, "x", tmp_path / "s", model=model, os_version=os_version)
    with pytest.raises(InvalidSpecError, match=message) as info:
        VirtualDevice(spec)
    assert "known:" in str(info.value)
    assert not (tmp_path / "s").exists()


async def test_registry_opens_virtual_and_refuses_unknown_drivers(tmp_path: Path) -> None:
    assert set(drivers_by_name()) == {"virtual", "android-emulator", "gradle", "xcode"}
    spec = DeviceSpec(Platform.ANDROID, "reg", tmp_path / "s")
    async with open_device(spec) as dev:
        assert dev.describe().driver == "virtual"
    with pytest.raises(InvalidSpecError, match="unknown driver 'ios-simulator'"):
        open_device(spec, "ios-simulator")


async def test_closed_device_refuses_verbs(android: VirtualDevice) -> None:
    await android.aclose()
    await android.aclose()  # idempotent
    with pytest.raises(trio.ClosedResourceError):
        await android.screenshot()
    with pytest.raises(trio.ClosedResourceError):
        await android.pull("/data/local/tmp/x")
