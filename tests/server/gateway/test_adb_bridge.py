"""Issue 6 through the whole path: the real `adb` -> ``devyard adb forward`` (the real CLI, a
subprocess) -> the edge's ``adbWebSocketUrl`` -> the host link -> the virtual device.

The device-side behaviour in depth (every service, all install routes with chosen features)
is tested directly in tests/hostd/adb; here each user-visible adb operation crosses the bridge.
"""

from __future__ import annotations

import io
import os
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio
from PIL import Image

from devyard.client.adb_forward import AdbTarget, check_reachable
from devyard.core import UpgradeRejected, open_transport
from devyard.hostd.drivers.virtual import VirtualDevice
from tests.hostd.adb.conftest import AdbClient, adb, needs_adb
from tests.hostd.adb.test_adb_client import make_apk
from tests.ports import free_port

from .conftest import Rig, open_gateway_rig

pytestmark = [needs_adb, pytest.mark.slow]
__all__ = ["adb"]  # the fixture, imported for these tests

_LISTENING = re.compile(rb"forwarding 127\.0\.0\.1:(\d+) ")


@asynccontextmanager
async def forwarder(rig: Rig, instance_id: str, *extra: str) -> AsyncIterator[int]:
    """`devyard adb forward` as a subprocess; yields its port once it listens."""
    argv = [sys.executable, "-m", "devyard", "adb", "forward", instance_id, "--server",
            rig.url, "--api-key-file", str(rig.api_key_file), *extra]  # fmt: skip
    async with trio.open_nursery() as nursery:
        run = partial(
            trio.run_process, argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False
        )
        proc: trio.Process = await nursery.start(run)
        assert proc.stdout is not None
        seen = b""
        with trio.fail_after(30):
            while (match := _LISTENING.search(seen)) is None:
                chunk = await proc.stdout.receive_some()
                assert chunk, f"the forwarder stopped: {seen!r}"
                seen += chunk
        # Over the raw link port when the server has one (and not --websocket), else the WS.
        raw = rig.bound.link_port is not None and "--websocket" not in extra
        assert (b"over the raw link port" if raw else b"over WebSocket") in seen, seen
        try:
            yield int(match.group(1))
        finally:
            proc.terminate()
            with trio.move_on_after(10):
                await proc.wait()


async def _ready_android(rig: Rig) -> tuple[dict[str, Any], VirtualDevice]:
    instance = await rig.create("android")
    device = rig.supervisor.device(instance["metadata"]["id"])
    assert isinstance(device, VirtualDevice)
    return instance, device


@pytest.fixture(params=["websocket", "raw"])
async def any_rig(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Rig]:
    """The rig without and with the raw link port (hostd and the forwarder then use it)."""
    async with open_gateway_rig(tmp_path / "rig", raw=request.param == "raw") as made:
        yield made


async def test_adb_works_through_the_bridge(any_rig: Rig, adb: AdbClient, tmp_path: Path) -> None:
    rig = any_rig
    instance, device = await _ready_android(rig)
    async with forwarder(rig, instance["metadata"]["id"]) as port:
        adb.serial = await adb.connect(port)
        listing = (await adb.run("devices", "-l", serial="")).out
        model = device.properties()["ro.product.model"].replace(" ", "_")
        assert f"model:{model}" in listing

        assert (await adb.run("shell", "echo", "hi")).out == "hi\n"
        assert (await adb.run("shell", "false", check=False)).status == 1

        payload = os.urandom(4 * 1024 * 1024 + 77)
        source, back = tmp_path / "big.bin", tmp_path / "back.bin"
        source.write_bytes(payload)
        await adb.run("push", str(source), "/sdcard/Download/big.bin")
        await adb.run("pull", "/sdcard/Download/big.bin", str(back))
        assert back.read_bytes() == payload

        for flags, package in (((), "com.example.streamed"), (("--no-streaming",), "com.ex.pm")):
            apk = make_apk(tmp_path / f"{package}.apk", package)
            assert "Success" in (await adb.run("install", *flags, str(apk))).out
            assert package in {app.app_id for app in await device.list_apps()}

        shot = (await adb.run("exec-out", "screencap", "-p")).stdout
        image = Image.open(io.BytesIO(shot))
        assert image.size == (device.describe().width, device.describe().height)


async def _serve_upper(stream: trio.SocketStream) -> None:
    async with stream:
        while data := await stream.receive_some():
            await stream.send_all(data.upper())


async def test_forward_and_reverse_through_the_bridge(
    rig: Rig, adb: AdbClient, nursery: trio.Nursery
) -> None:
    instance, device = await _ready_android(rig)
    await nursery.start(device.serve_port, 8080, _serve_upper)
    async with forwarder(rig, instance["metadata"]["id"]) as port:
        adb.serial = await adb.connect(port)
        local = free_port()
        await adb.run("forward", f"tcp:{local}", "tcp:8080")
        with trio.fail_after(10):
            async with await trio.open_tcp_stream("127.0.0.1", local) as stream:
                await stream.send_all(b"through")
                got = b""
                while len(got) < 7:
                    got += await stream.receive_some()
        assert got == b"THROUGH"

        listeners = await nursery.start(trio.serve_tcp, _serve_upper, 0)
        host_port = listeners[0].socket.getsockname()[1]
        await adb.run("reverse", "tcp:9000", f"tcp:{host_port}")
        with trio.fail_after(10):
            async with await device.open_port(9000) as stream:
                await stream.send_all(b"reverse")
                got = b""
                while len(got) < 7:
                    got += await stream.receive_some()
        assert got == b"REVERSE"


async def test_a_bad_instance_fails_fast_with_the_reason(rig: Rig) -> None:
    instance, _ = await _ready_android(rig)
    await rig.delete(instance)
    argv = [sys.executable, "-m", "devyard", "adb", "forward", instance["metadata"]["id"],
            "--server", rig.url, "--api-key-file", str(rig.api_key_file)]  # fmt: skip
    with trio.fail_after(30):
        result = await trio.run_process(argv, capture_stdout=True, capture_stderr=True, check=False)
    assert result.returncode == 1
    assert b"is terminated, not ready" in result.stderr
    assert b"Traceback" not in result.stderr


async def test_a_wrong_api_key_fails_fast(rig: Rig, tmp_path: Path) -> None:
    instance, _ = await _ready_android(rig)
    wrong = tmp_path / "wrong-key"
    wrong.write_text("dy_nope_nope")
    argv = [sys.executable, "-m", "devyard", "adb", "forward", instance["metadata"]["id"],
            "--server", rig.url, "--api-key-file", str(wrong)]  # fmt: skip
    with trio.fail_after(30):
        result = await trio.run_process(argv, capture_stdout=True, capture_stderr=True, check=False)
    assert result.returncode == 4  # authentication (docs/cli.md exit codes)
    assert b"HTTP 401" in result.stderr


async def test_connect_runs_adb_connect_with_a_background_forwarder(
    rig: Rig, adb: AdbClient
) -> None:
    instance, _ = await _ready_android(rig)
    env = {**adb.env(), "ANDROID_ADB_SERVER_PORT": str(adb.server_port)}
    argv = [sys.executable, "-m", "devyard", "adb", "connect", instance["metadata"]["id"],
            "--server", rig.url, "--api-key-file", str(rig.api_key_file)]  # fmt: skip
    with trio.fail_after(60):
        result = await trio.run_process(
            argv, capture_stdout=True, capture_stderr=True, check=False, env=env
        )
    out = result.stdout.decode()
    match = re.search(r"forwarder pid (\d+) on (127\.0\.0\.1:\d+)", out)
    assert match is not None, out + result.stderr.decode()
    pid, serial = int(match.group(1)), match.group(2)
    try:
        assert result.returncode == 0, out
        assert f"connected to {serial}" in out
        assert (await adb.run("shell", "echo", "hi", serial=serial)).out == "hi\n"
    finally:
        os.kill(pid, signal.SIGTERM)


async def test_the_raw_adb_path_checks_what_the_websocket_checks(
    tmp_path: Path, adb: AdbClient
) -> None:
    async with open_gateway_rig(tmp_path / "rig", raw=True) as rig:
        instance, _ = await _ready_android(rig)
        instance_id, token = instance["metadata"]["id"], instance["status"]["token"]
        ws_url = instance["status"]["adbWebSocketUrl"]
        raw = f"tcp://127.0.0.1:{rig.bound.link_port}/v1/instances/{instance_id}"
        with trio.fail_after(20):
            for url, bearer, status in (
                (f"{raw}/adb", "wrong", 401),  # the instance token, checked before the upgrade
                (f"{raw}/endpoint", token, 404),  # only adb is served on the raw port
            ):
                with pytest.raises(UpgradeRejected) as refused:
                    headers = [(b"authorization", f"Bearer {bearer}".encode())]
                    async with open_transport(url, extra_headers=headers):
                        pass
                assert refused.value.status_code == status
            # The WebSocket's 101 names the raw port; --websocket keeps the forwarder off it.
            target = await check_reachable(AdbTarget(instance_id, ws_url, token))
            assert target.raw_url == f"{raw}/adb"
            async with forwarder(rig, instance_id, "--websocket") as port:
                adb.serial = await adb.connect(port)
                assert (await adb.run("shell", "echo", "over ws")).out == "over ws\n"
