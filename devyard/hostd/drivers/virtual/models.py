"""The catalog of virtual device models: screen sizes, OS versions, system apps, properties.

Screens are sized for fast PNG and JPEG encoding, not for pixel-perfect fidelity: Android
phones render at half a Pixel's 1080x2400 (540x1200, 210 dpi), iOS devices at one pixel per
point (iPhone 393x852, iPad 820x1180, Watch 198x242). docs/devices.md lists them all.
"""

from __future__ import annotations

from typing import Final

import attrs

from .._errors import InvalidSpecError
from ..base import DeviceSpec, Platform

__all__ = [
    "ANDROID_SDK",
    "MODELS",
    "ModelProfile",
    "SystemApp",
    "android_properties",
    "profile",
]


@attrs.frozen
class SystemApp:
    """A preinstalled app: shown on the launcher, cannot be uninstalled."""

    app_id: str
    label: str


@attrs.frozen
class ModelProfile:
    """One model of one platform. ``width``/``height`` are portrait; 0 means headless."""

    platform: Platform
    model: str
    model_name: str
    os_name: str
    os_versions: tuple[str, ...]
    width: int = 0
    height: int = 0
    density: int = 0
    browser: str = ""
    system_apps: tuple[SystemApp, ...] = ()

    @property
    def has_screen(self) -> bool:
        return self.width > 0

    @property
    def default_os(self) -> str:
        return self.os_versions[-1]

    @property
    def is_watch(self) -> bool:
        return self.model == "watch"


ANDROID_SDK: Final = {"13": 33, "14": 34, "15": 35}
_ANDROID_CODENAME: Final = {"13": "TP1A", "14": "UQ1A", "15": "AP3A"}

_ANDROID_APPS: Final = (
    SystemApp("com.android.chrome", "Chrome"),
    SystemApp("com.android.settings", "Settings"),
    SystemApp("com.google.android.apps.messaging", "Messages"),
    SystemApp("com.android.camera2", "Camera"),
    SystemApp("com.google.android.documentsui", "Files"),
)
_IOS_APPS: Final = (
    SystemApp("com.apple.mobilesafari", "Safari"),
    SystemApp("com.apple.Preferences", "Settings"),
    SystemApp("com.apple.MobileSMS", "Messages"),
    SystemApp("com.apple.camera", "Camera"),
    SystemApp("com.apple.DocumentsApp", "Files"),
)
_WATCH_APPS: Final = (
    SystemApp("com.apple.NanoSettings", "Settings"),
    SystemApp("com.apple.NanoHeartRate", "Heart"),
    SystemApp("com.apple.NanoTimer", "Timer"),
)

_ANDROID_VERSIONS: Final = tuple(ANDROID_SDK)
_IOS_VERSIONS: Final = ("17.5", "18.2")

MODELS: Final[dict[Platform, dict[str, ModelProfile]]] = {
    Platform.ANDROID: {
        "pixel": ModelProfile(
            Platform.ANDROID, "pixel", "Virtual Pixel", "Android", _ANDROID_VERSIONS,
            540, 1200, 210, "com.android.chrome", _ANDROID_APPS,
        ),
        "pixel-tablet": ModelProfile(
            Platform.ANDROID, "pixel-tablet", "Virtual Pixel Tablet", "Android",
            _ANDROID_VERSIONS, 800, 1280, 160, "com.android.chrome", _ANDROID_APPS,
        ),
    },
    Platform.IOS: {
        "iphone": ModelProfile(
            Platform.IOS, "iphone", "iPhone 15", "iOS", _IOS_VERSIONS,
            393, 852, 163, "com.apple.mobilesafari", _IOS_APPS,
        ),
        "iphone-duo": ModelProfile(
            Platform.IOS, "iphone-duo", "iPhone 15 Pro Max", "iOS", _IOS_VERSIONS,
            430, 932, 163, "com.apple.mobilesafari", _IOS_APPS,
        ),
        "ipad": ModelProfile(
            Platform.IOS, "ipad", "iPad Air", "iPadOS", _IOS_VERSIONS,
            820, 1180, 132, "com.apple.mobilesafari", _IOS_APPS,
        ),
        "watch": ModelProfile(
            Platform.IOS, "watch", "Apple Watch Series 9 (45mm)", "watchOS", ("10.5", "11.2"),
            198, 242, 163, "", _WATCH_APPS,
        ),
    },
    Platform.XCODE: {
        "xcode": ModelProfile(Platform.XCODE, "xcode", "Xcode build machine", "macOS", ("15",)),
    },
    Platform.GRADLE: {
        "gradle": ModelProfile(Platform.GRADLE, "gradle", "Gradle build machine", "Linux", ("12",)),
    },
}  # fmt: skip

_DEFAULT_MODEL: Final = {
    Platform.ANDROID: "pixel",
    Platform.IOS: "iphone",
    Platform.XCODE: "xcode",
    Platform.GRADLE: "gradle",
}


def profile(spec: DeviceSpec) -> tuple[ModelProfile, str]:
    """The model profile and OS version ``spec`` asks for; `InvalidSpecError` if unknown."""
    models = MODELS[Platform(spec.platform)]
    name = spec.model or _DEFAULT_MODEL[spec.platform]
    found = models.get(name)
    if found is None:
        known = ", ".join(models)
        raise InvalidSpecError(f"unknown {spec.platform} model {name!r} (known: {known})")
    version = spec.os_version or found.default_os
    if version not in found.os_versions:
        known = ", ".join(found.os_versions)
        raise InvalidSpecError(
            f"{found.model} has no {found.os_name} version {version!r} (known: {known})"
        )
    return found, version


def android_properties(model: ModelProfile, os_version: str, serial: str) -> dict[str, str]:
    """What ``getprop`` lists on the virtual Android device (and what CNXN advertises)."""
    sdk = ANDROID_SDK[os_version]
    device = "devyard_" + model.model.replace("-", "_")
    build_id = f"{_ANDROID_CODENAME[os_version]}.{sdk}0101.001"
    fingerprint = f"devyard/{device}/{device}:{os_version}/{build_id}/1:user/release-keys"
    props = {
        "ro.product.manufacturer": "devyard",
        "ro.product.brand": "devyard",
        "ro.product.model": model.model_name,
        "ro.product.name": device,
        "ro.product.device": device,
        "ro.product.cpu.abi": "x86_64",
        "ro.product.cpu.abilist": "x86_64,arm64-v8a",
        "ro.product.locale": "en-US",
        "ro.build.version.release": os_version,
        "ro.build.version.release_or_codename": os_version,
        "ro.build.version.sdk": str(sdk),
        "ro.build.version.codename": "REL",
        "ro.build.id": build_id,
        "ro.build.type": "user",
        "ro.build.tags": "release-keys",
        "ro.build.fingerprint": fingerprint,
        "ro.build.characteristics": "tablet" if "tablet" in model.model else "default",
        "ro.sf.lcd_density": str(model.density),
        "ro.serialno": serial,
        "ro.boot.serialno": serial,
        "ro.debuggable": "1",
        "ro.secure": "1",
        "ro.kernel.qemu": "0",
        "sys.boot_completed": "1",
        "dev.bootcomplete": "1",
        "init.svc.bootanim": "stopped",
        "persist.sys.timezone": "UTC",
        "service.adb.root": "0",
    }
    return dict(sorted(props.items()))
