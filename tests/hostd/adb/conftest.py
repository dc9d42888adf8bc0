"""Fixtures for the ADB tests: a virtual Android device, our ADB server for it, and the real
`adb` client isolated per test (its own server port and HOME, killed at teardown).

Tests that need the client skip, with the reason, where `adb` is not installed; CI installs it
(Debian package `adb`). Every client call runs under `trio.run_process` with a deadline.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import attrs
import pytest
import trio

from devyard.hostd.adb import DEFAULT_FEATURES, AdbConfig, serve_adb_tcp
from devyard.hostd.drivers import DeviceSpec, Platform, open_device
from devyard.hostd.drivers.virtual import VirtualDevice
from tests.ports import free_port

ADB = shutil.which("adb")
needs_adb = pytest.mark.skipif(
    ADB is None, reason="the adb client is not installed (apt install adb)"
)
CLIENT_DEADLINE = 60.0


@attrs.frozen
class Result:
    status: int
    stdout: bytes
    stderr: bytes

    @property
    def out(self) -> str:
        return self.stdout.decode()

    @property
    def err(self) -> str:
        return self.stderr.decode()


@attrs.define
class AdbClient:
    """The real adb client with its own server port and HOME."""

    server_port: int
    home: Path
    serial: str = ""

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ADB_", "ANDROID_"))}
        env["HOME"] = str(self.home)
        env.pop("TERM", None)  # adb passes TERM to shell v2; keep service strings stable
        return env

    async def run(
        self, *args: str, stdin: bytes = b"", serial: str | None = None, check: bool = True
    ) -> Result:
        assert ADB is not None
        target = serial if serial is not None else self.serial
        argv = [ADB, "-P", str(self.server_port), *(["-s", target] if target else []), *args]
        with trio.fail_after(CLIENT_DEADLINE):
            proc = await trio.run_process(
                argv, stdin=stdin, capture_stdout=True, capture_stderr=True,
                env=self.env(), check=False,
            )  # fmt: skip
        result = Result(proc.returncode, proc.stdout, proc.stderr)
        if check and result.status != 0:
            raise AssertionError(f"{' '.join(args)} exited {result.status}: {result.err}")
        return result

    async def connect(self, port: int) -> str:
        serial = f"127.0.0.1:{port}"
        result = await self.run("connect", serial, serial="")
        assert f"connected to {serial}" in result.out, result.out + result.err
        return serial


@pytest.fixture
async def device(tmp_path: Path) -> AsyncIterator[VirtualDevice]:
    spec = DeviceSpec(Platform.ANDROID, "adb-test", tmp_path / "instance")
    async with open_device(spec) as dev:
        assert isinstance(dev, VirtualDevice)
        yield dev


async def serve(nursery: trio.Nursery, device: VirtualDevice, features: tuple[str, ...]) -> int:
    """Our ADB server for `device` advertising `features`; returns its port."""
    config = AdbConfig(features=features)
    port: int = await nursery.start(
        lambda task_status: serve_adb_tcp(device, config=config, task_status=task_status)
    )
    return port


@pytest.fixture
async def adb(tmp_path: Path) -> AsyncIterator[AdbClient]:
    if ADB is None:
        pytest.skip("the adb client is not installed (apt install adb)")
    home = tmp_path / "home"
    home.mkdir()
    client = AdbClient(free_port(), home)
    try:
        yield client
    finally:
        with trio.move_on_after(10, shield=True):
            await client.run("kill-server", serial="", check=False)


@pytest.fixture
async def connected(adb: AdbClient, device: VirtualDevice, nursery: trio.Nursery) -> AdbClient:
    """The adb client connected to the device, which advertises the default features."""
    adb.serial = await adb.connect(await serve(nursery, device, DEFAULT_FEATURES))
    return adb
