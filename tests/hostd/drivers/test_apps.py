"""Installing, listing, launching and removing apps; package ids read from the file."""

from __future__ import annotations

import plistlib
import zipfile
from pathlib import Path

import pytest

from devyard.hostd.drivers import (
    AppNotFoundError,
    InstallError,
    InvalidInputError,
    Platform,
    UnsupportedOperationError,
)
from devyard.hostd.drivers._shared.packages import read_package
from devyard.hostd.drivers.virtual import VirtualDevice

from . import axml
from .conftest import OpenDevice, make_apk, package_apk


@pytest.mark.parametrize(
    ("files", "name", "expected"),
    [
        ({"devyard-package.txt": "com.example.todo\n"}, "x.apk", ("com.example.todo", "Todo", "")),
        (
            {"devyard-package.txt": "# test\npackage=org.demo.app\nlabel=Demo\nversion=3.1\n"},
            "x.apk",
            ("org.demo.app", "Demo", "3.1"),
        ),
        (
            {"AndroidManifest.xml": '<manifest xmlns:android="http://schemas.android.com/apk/'
             'res/android" package="com.acme.shop" android:versionName="1.4"><application '
             'android:label="Acme Shop"/></manifest>'},
            "x.apk",
            ("com.acme.shop", "Acme Shop", "1.4"),
        ),
        (
            {"AndroidManifest.xml": '<manifest package="com.acme.ref"><application '
             'android:label="@string/app_name"/></manifest>'},
            "x.apk",
            ("com.acme.ref", "Ref", ""),
        ),
        ({"classes.dex": b"dex\n035"}, "com.vendor.tool.apk", ("com.vendor.tool", "Tool", "")),
        ({"classes.dex": b"dex\n035"}, "My App-2.apk", ("sideload.my_app_2", "My app 2", "")),
    ],
)  # fmt: skip
def test_android_package_detection(
    tmp_path: Path, files: dict[str, str | bytes], name: str, expected: tuple[str, str, str]
) -> None:
    info = read_package(Platform.ANDROID, make_apk(tmp_path / name, **files))
    assert (info.app_id, info.label, info.version) == expected


@pytest.mark.parametrize("utf8", [False, True])
def test_binary_manifest_of_a_real_apk(tmp_path: Path, utf8: bool) -> None:
    data = axml.manifest("com.real.app", "2.5", "Real App", utf8=utf8)
    apk = make_apk(tmp_path / "base.apk", **{"AndroidManifest.xml": data})
    info = read_package(Platform.ANDROID, apk)
    assert (info.app_id, info.label, info.version) == ("com.real.app", "Real App", "2.5")


def test_binary_manifest_with_a_label_reference_falls_back_to_the_id(tmp_path: Path) -> None:
    data = axml.manifest("com.real.refs", "1", "unused", label_ref=True)
    info = read_package(
        Platform.ANDROID, make_apk(tmp_path / "a.apk", **{"AndroidManifest.xml": data})
    )
    assert (info.app_id, info.label) == ("com.real.refs", "Refs")


def test_a_damaged_binary_manifest_falls_back_to_the_file_name(tmp_path: Path) -> None:
    data = axml.manifest("com.real.app", "2.5", "Real App")[:40]
    info = read_package(
        Platform.ANDROID, make_apk(tmp_path / "com.from.name.apk", **{"AndroidManifest.xml": data})
    )
    assert info.app_id == "com.from.name"


def test_not_a_zip_is_refused_like_pm_install(tmp_path: Path) -> None:
    fake = tmp_path / "fake.apk"
    fake.write_bytes(b"not a zip at all")
    with pytest.raises(InstallError, match="INSTALL_PARSE_FAILED_NOT_APK"):
        read_package(Platform.ANDROID, fake)
    with pytest.raises(InstallError, match="no such file"):
        read_package(Platform.ANDROID, tmp_path / "missing.apk")


def test_ios_bundle_detection(tmp_path: Path) -> None:
    plist = {"CFBundleIdentifier": "com.example.Notes", "CFBundleDisplayName": "Notes+",
             "CFBundleShortVersionString": "4.2"}  # fmt: skip
    ipa = tmp_path / "Notes.ipa"
    with zipfile.ZipFile(ipa, "w") as archive:
        archive.writestr(
            "Payload/Notes.app/Info.plist", plistlib.dumps(plist, fmt=plistlib.FMT_BINARY)
        )
    info = read_package(Platform.IOS, ipa)
    assert (info.app_id, info.label, info.version) == ("com.example.Notes", "Notes+", "4.2")

    app = tmp_path / "Weather.app"
    app.mkdir()
    (app / "Info.plist").write_bytes(plistlib.dumps({"CFBundleIdentifier": "com.example.weather",
                                                     "CFBundleName": "Weather"}))  # fmt: skip
    info = read_package(Platform.IOS, app)
    assert (info.app_id, info.label) == ("com.example.weather", "Weather")

    bare = tmp_path / "Bare.app"
    bare.mkdir()
    assert read_package(Platform.IOS, bare).app_id == "sideload.bare"


async def test_install_list_launch_terminate_uninstall(
    android: VirtualDevice, tmp_path: Path
) -> None:
    app = await android.install(package_apk(tmp_path, "com.example.todo", "Todo List"))
    assert (app.app_id, app.label, app.version, app.system, app.running) == (
        "com.example.todo", "Todo List", "1.0", False, False,
    )  # fmt: skip
    apps = {a.app_id: a for a in await android.list_apps()}
    assert apps["com.android.chrome"].system and not apps["com.example.todo"].system
    assert (
        android.package_path("com.example.todo")
        == android.sandbox / "apps" / "com.example.todo" / "base.apk"
    )
    assert android.package_path("com.android.chrome") is None

    await android.launch("com.example.todo")
    assert android.foreground_app() == "com.example.todo"
    await android.terminate("com.example.todo")
    assert android.foreground_app() is None
    assert not {a.app_id: a for a in await android.list_apps()}["com.example.todo"].running

    await android.launch("com.example.todo")
    await android.uninstall("com.example.todo")
    assert android.foreground_app() is None
    assert "com.example.todo" not in {a.app_id for a in await android.list_apps()}
    assert not (android.sandbox / "apps" / "com.example.todo").exists()
    with pytest.raises(AppNotFoundError):
        await android.uninstall("com.example.todo")
    with pytest.raises(AppNotFoundError):
        android.package_path("com.example.todo")


async def test_reinstall_replaces_and_stops_the_running_app(
    android: VirtualDevice, tmp_path: Path
) -> None:
    await android.install(package_apk(tmp_path, "com.example.todo", "Todo"))
    await android.launch("com.example.todo")
    await android.install(package_apk(tmp_path, "com.example.todo", "Todo 2", name="v2.apk"))
    assert android.foreground_app() is None
    labels = [a.label for a in await android.list_apps() if a.app_id == "com.example.todo"]
    assert labels == ["Todo 2"]


async def test_system_apps_are_protected(android: VirtualDevice, tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="system app"):
        await android.uninstall("com.android.settings")
    with pytest.raises(InstallError, match="system app"):
        await android.install(package_apk(tmp_path, "com.android.chrome", "Evil Chrome"))


async def test_wrong_platform_packages_are_refused(iphone: VirtualDevice, tmp_path: Path) -> None:
    plain = tmp_path / "notes.txt"
    plain.write_text("hello")
    with pytest.raises(InstallError, match=r"neither an \.ipa"):
        await iphone.install(plain)


async def test_apps_and_settings_persist_in_the_sandbox(
    open_dev: OpenDevice, tmp_path: Path
) -> None:
    """Within one instance (its sandbox) apps and settings survive a driver restart;
    a new sandbox starts fresh."""
    sandbox = tmp_path / "persist"
    apk = package_apk(tmp_path, "com.example.todo", "Todo List")
    first = open_dev(Platform.ANDROID, sandbox=sandbox)
    dev = await first.__aenter__()
    await dev.install(apk)
    await dev.settings_put("global", "http_proxy", "10.0.0.1:3128")
    await dev.push("/sdcard/Download/kept.txt", b"kept")
    # A crash of the driver: no aclose, the sandbox stays, the next start adopts it.
    async with open_dev(Platform.ANDROID, sandbox=sandbox) as again:
        assert "com.example.todo" in {a.app_id for a in await again.list_apps()}
        assert await again.settings_get("global", "http_proxy") == "10.0.0.1:3128"
        assert await again.pull("/sdcard/Download/kept.txt") == b"kept"
    assert not sandbox.exists()
    await first.__aexit__(None, None, None)
    async with open_dev(Platform.ANDROID) as fresh:
        assert "com.example.todo" not in {a.app_id for a in await fresh.list_apps()}


async def test_settings_get_put_delete_list(android: VirtualDevice) -> None:
    assert await android.settings_get("global", "device_name") == "Virtual Pixel"
    assert await android.settings_get("secure", "nope") is None
    await android.settings_put("system", "screen_brightness", "200")
    assert (await android.settings_list("system"))["screen_brightness"] == "200"
    assert await android.settings_delete("system", "screen_brightness")
    assert not await android.settings_delete("system", "screen_brightness")
    with pytest.raises(InvalidInputError, match="namespace"):
        await android.settings_get("bogus", "x")
    with pytest.raises(InvalidInputError, match="key"):
        await android.settings_put("global", "two words", "x")


async def test_watch_has_no_browser(open_dev: OpenDevice) -> None:
    async with open_dev(Platform.IOS, model="watch") as watch:
        with pytest.raises(UnsupportedOperationError, match="no browser"):
            await watch.open_url("https://example.com")
