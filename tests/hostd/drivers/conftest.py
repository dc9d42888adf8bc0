"""Fixtures for the driver tests: started virtual devices in a fresh sandbox under tmp_path."""

from __future__ import annotations

import zipfile
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path

import pytest

from devyard.hostd.drivers import DeviceSpec, Platform
from devyard.hostd.drivers.virtual import VirtualDevice, open_virtual_device

OpenDevice = Callable[..., AbstractAsyncContextManager[VirtualDevice]]


@pytest.fixture
def open_dev(tmp_path: Path) -> OpenDevice:
    """``async with open_dev(Platform.IOS, model="ipad") as dev``: a fresh sandbox each call."""
    counter = iter(range(1_000_000))

    def open_dev(
        platform: Platform = Platform.ANDROID,
        *,
        model: str | None = None,
        os_version: str | None = None,
        sandbox: Path | None = None,
    ) -> AbstractAsyncContextManager[VirtualDevice]:
        n = next(counter)
        spec = DeviceSpec(
            platform=platform,
            instance_id=f"{platform}_test_{n}",
            sandbox_dir=sandbox or tmp_path / f"sandbox-{n}",
            model=model,
            os_version=os_version,
        )
        return open_virtual_device(spec)

    return open_dev


@pytest.fixture
async def android(open_dev: OpenDevice) -> AsyncIterator[VirtualDevice]:
    async with open_dev(Platform.ANDROID) as dev:
        yield dev


@pytest.fixture
async def iphone(open_dev: OpenDevice) -> AsyncIterator[VirtualDevice]:
    async with open_dev(Platform.IOS) as dev:
        yield dev


def make_apk(path: Path, **files: str | bytes) -> Path:
    """A zip at ``path`` holding ``files``, name -> content."""
    with zipfile.ZipFile(path, "w") as archive:
        for name, content in files.items():
            archive.writestr(name, content)
    return path


def package_apk(tmp_path: Path, package: str, label: str, name: str = "app.apk") -> Path:
    return make_apk(
        tmp_path / name, **{"devyard-package.txt": f"{package}\nlabel={label}\nversion=1.0\n"}
    )
