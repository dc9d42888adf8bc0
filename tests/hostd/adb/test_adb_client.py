"""End to end with Debian's real `adb` client (29.0.6) against the virtual device (issue 6).

Each test has its own adb server (`adb -P`), HOME and device; `adb connect 127.0.0.1:PORT`
reaches our serve_adb_tcp directly (the WebSocket bridge comes later).
"""

from __future__ import annotations

import io
import logging
import os
import zipfile
from pathlib import Path

import pytest
import trio
from PIL import Image

from devyard.hostd.adb import DEFAULT_FEATURES
from devyard.hostd.drivers.virtual import VirtualDevice
from tests.ports import free_port

from .conftest import AdbClient, needs_adb, serve

pytestmark = [needs_adb, pytest.mark.slow]


def make_apk(path: Path, package: str) -> Path:
    """A tiny zip-based APK; the virtual device reads the package from a text manifest."""
    with zipfile.ZipFile(path, "w") as apk:
        apk.writestr("AndroidManifest.xml", f'<manifest package="{package}"/>')
        apk.writestr("classes.dex", b"dex\n035\0" + bytes(4000))
    return path


async def test_devices_lists_our_model(connected: AdbClient, device: VirtualDevice) -> None:
    listing = (await connected.run("devices", "-l", serial="")).out
    line = next(line for line in listing.splitlines() if line.startswith(connected.serial))
    props = device.properties()
    assert " device " in line
    assert f"model:{props['ro.product.model'].replace(' ', '_')}" in line
    assert f"product:{props['ro.product.name']}" in line
    assert f"device:{props['ro.product.device']}" in line


async def test_shell_output_and_exit_status(connected: AdbClient) -> None:
    assert (await connected.run("shell", "echo", "hi")).out == "hi\n"
    assert (await connected.run("shell", "false", check=False)).status == 1
    assert (await connected.run("shell", "exit 3", check=False)).status == 3
    missing = await connected.run("shell", "nosuch", check=False)
    assert (missing.status, missing.err) == (127, "sh: nosuch: not found\n")
    assert (await connected.run("shell", "echo a && false || echo b")).out == "a\nb\n"
    assert (await connected.run("shell", "cat", stdin=b"from stdin")).out == "from stdin"
    # -x: the v1 shell (no shell protocol, as Playwright uses it): raw output, status lost
    assert (await connected.run("shell", "-x", "echo", "v1")).out == "v1\n"
    assert (await connected.run("exec-out", "echo", "exec")).out == "exec\n"


async def test_push_and_pull_are_byte_identical(connected: AdbClient, tmp_path: Path) -> None:
    payload = os.urandom(3 * 1024 * 1024 + 12345)
    source, back = tmp_path / "big.bin", tmp_path / "back.bin"
    source.write_bytes(payload)
    pushed = await connected.run("push", str(source), "/sdcard/Download/")
    assert "1 file pushed" in pushed.out
    listing = (await connected.run("shell", "ls", "-l", "/sdcard/Download/big.bin")).out
    assert str(len(payload)) in listing
    await connected.run("pull", "/sdcard/Download/big.bin", str(back))
    assert back.read_bytes() == payload
    assert "big.bin" in (await connected.run("ls", "/sdcard/Download")).out
    into_a_file = await connected.run(
        "push", str(source), "/sdcard/Download/big.bin/inside", check=False
    )
    assert into_a_file.status == 1
    assert "Not a directory" in into_a_file.out + into_a_file.err
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "a.txt").write_bytes(b"a")
    (tree / "sub" / "b.bin").write_bytes(payload[:100_000])
    await connected.run("push", str(tree), "/sdcard/tree")  # SEND per file, parents made
    await connected.run("pull", "/sdcard/tree", str(tmp_path / "tree_back"))  # listed, RECV each
    assert (tmp_path / "tree_back" / "a.txt").read_bytes() == b"a"
    assert (tmp_path / "tree_back" / "sub" / "b.bin").read_bytes() == payload[:100_000]
    missing = await connected.run("pull", "/sdcard/nothing", str(tmp_path / "x"), check=False)
    assert missing.status == 1
    assert "No such file or directory" in missing.out + missing.err


INSTALL_ROUTES = {
    # name: (advertised features, adb install flags, the service that must carry the APK)
    "abb_exec": (DEFAULT_FEATURES, (), "abb_exec:package\0install"),
    "cmd": (
        tuple(f for f in DEFAULT_FEATURES if f != "abb_exec"),
        (),
        "exec:cmd package 'install'",
    ),
    "push": (DEFAULT_FEATURES, ("--no-streaming",), "pm 'install' '/data/local/tmp/app.apk'"),
}


@pytest.mark.parametrize("route", sorted(INSTALL_ROUTES))
async def test_install_by_every_route(
    route: str,
    adb: AdbClient,
    device: VirtualDevice,
    nursery: trio.Nursery,
    caplog: pytest.LogCaptureFixture,
) -> None:
    features, flags, service = INSTALL_ROUTES[route]
    caplog.set_level(logging.DEBUG, logger="devyard.hostd.adb.connection")
    adb.serial = await adb.connect(await serve(nursery, device, features))
    package = f"com.example.{route}"
    apk = make_apk(adb.home / "app.apk", package)
    result = await adb.run("install", *flags, str(apk))
    assert "Success" in result.out
    services = [
        str(record.args[0])
        for record in caplog.records
        if isinstance(record.args, tuple) and record.args  # (not the one-mapping form)
    ]
    assert any(service in opened for opened in services), services
    assert f"package:{package}\n" in (await adb.run("shell", "pm", "list", "packages")).out
    assert package in {app.app_id for app in await device.list_apps()}
    if route == "push":  # adb removes the pushed copy
        assert "app.apk" not in (await adb.run("shell", "ls", "/data/local/tmp")).out
    assert "Success" in (await adb.run("uninstall", package)).out
    assert package not in (await adb.run("shell", "pm", "list", "packages")).out


async def _serve_upper(stream: trio.SocketStream) -> None:
    async with stream:
        while data := await stream.receive_some():
            await stream.send_all(data.upper())


async def _exchange(port: int, data: bytes) -> bytes:
    with trio.fail_after(10):
        async with await trio.open_tcp_stream("127.0.0.1", port) as stream:
            await stream.send_all(data)
            got = b""
            while len(got) < len(data):
                chunk = await stream.receive_some()
                assert chunk, "closed early"
                got += chunk
            return got


async def test_forward_to_device_sockets(
    connected: AdbClient, device: VirtualDevice, nursery: trio.Nursery
) -> None:
    await nursery.start(device.serve_port, 8080, _serve_upper)
    await nursery.start(device.serve_abstract, "devtools_test", _serve_upper)
    tcp_port, abstract_port, closed_port = free_port(), free_port(), free_port()
    await connected.run("forward", f"tcp:{tcp_port}", "tcp:8080")
    await connected.run("forward", f"tcp:{abstract_port}", "localabstract:devtools_test")
    await connected.run("forward", f"tcp:{closed_port}", "tcp:8099")  # nothing listens there
    assert await _exchange(tcp_port, b"hello" * 20000) == b"HELLO" * 20000
    assert await _exchange(abstract_port, b"abstract") == b"ABSTRACT"
    with trio.fail_after(10):
        async with await trio.open_tcp_stream("127.0.0.1", closed_port) as stream:
            assert await stream.receive_some() == b""  # refused on the device: closed at once
    assert "@devtools_test" in (await connected.run("shell", "cat", "/proc/net/unix")).out


async def test_reverse_forwarding(
    connected: AdbClient, device: VirtualDevice, nursery: trio.Nursery
) -> None:
    listeners = await nursery.start(trio.serve_tcp, _serve_upper, 0)
    host_port = listeners[0].socket.getsockname()[1]
    await connected.run("reverse", "tcp:9000", f"tcp:{host_port}")
    listing = (await connected.run("reverse", "--list")).out
    assert f"tcp:9000 tcp:{host_port}" in listing
    for _ in range(3):  # each device-side connection is a stream the device opens
        with trio.fail_after(10):
            async with await device.open_port(9000) as stream:
                await stream.send_all(b"from the device")
                got = b""
                while len(got) < 15:
                    got += await stream.receive_some()
        assert got == b"FROM THE DEVICE"
    refused = await connected.run("reverse", "--no-rebind", "tcp:9000", "tcp:1", check=False)
    assert refused.status == 1
    await connected.run("reverse", "--remove", "tcp:9000")
    assert "tcp:9000" not in (await connected.run("reverse", "--list")).out
    with pytest.raises(ConnectionRefusedError):
        await device.open_port(9000)
    await connected.run("reverse", "tcp:9001", f"tcp:{host_port}")
    await connected.run("reverse", "--remove-all")
    assert (await connected.run("reverse", "--list")).out.strip() == ""


async def test_screencap_and_input_tap(connected: AdbClient, device: VirtualDevice) -> None:
    before = (await connected.run("exec-out", "screencap", "-p")).stdout
    assert before.startswith(b"\x89PNG\r\n\x1a\n")
    image = Image.open(io.BytesIO(before))
    info = device.describe()
    assert image.size == (info.width, info.height)
    size = (await connected.run("shell", "wm", "size")).out
    assert size == f"Physical size: {info.width}x{info.height}\n"
    await connected.run("shell", "input", "tap", str(info.width // 2), str(info.height // 3))
    after = (await connected.run("exec-out", "screencap", "-p")).stdout
    assert after.startswith(b"\x89PNG") and after != before


async def test_root_remount_and_reboot_fail_fast(connected: AdbClient) -> None:
    with trio.fail_after(10):
        root = await connected.run("root", check=False)
        remount = await connected.run("remount", check=False)
        reboot = await connected.run("reboot", check=False)
    assert "cannot run as root" in root.out
    assert remount.status == 1
    assert "not supported" in remount.err
    assert "not supported" in reboot.out
    assert (await connected.run("shell", "echo", "still here")).out == "still here\n"


async def test_device_commands(connected: AdbClient, device: VirtualDevice) -> None:
    model = device.properties()["ro.product.model"]
    assert (await connected.run("shell", "getprop", "ro.product.model")).out == model + "\n"
    await connected.run("shell", "settings", "put", "global", "devyard_test", "42")
    assert (await connected.run("shell", "settings get global devyard_test")).out == "42\n"
    assert (await connected.run("shell", "settings get global unset_key")).out == "null\n"
    await connected.run("shell", "mkdir -p /sdcard/a/b && echo x > /sdcard/a/b/f.txt")
    assert (await connected.run("shell", "cat /sdcard/a/b/f.txt")).out == "x\n"
    assert (await connected.run("shell", "ls /sdcard/a")).out == "b\n"
    await connected.run("shell", "rm", "-r", "/sdcard/a")
    gone = await connected.run("shell", "ls", "/sdcard/a", check=False)
    assert gone.status == 1
    assert "No such file" in gone.err
    await connected.run("shell", "am", "start", "-n", "com.android.settings/.Settings")
    assert device.foreground_app() == "com.android.settings"
    logs = (await connected.run("shell", "logcat", "-d")).out
    assert logs.strip(), "logcat -d printed nothing"
