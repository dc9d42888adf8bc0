"""The ``android-emulator`` driver.

**Attach** is tested for real: the virtual Android device serves its adbd on a loopback port
(`serve_adb_tcp`), the emulator driver attaches to it with Debian's real ``adb`` (its own
server port and HOME per test) and every verb goes through adb; each test checks the effect
on the virtual device. **Launch** needs KVM and the Android SDK, which this machine lacks:
a fake ``emulator`` script checks the command line, the boot deadline, the early-exit report
and that the process is killed. A real launch runs only with ``DEVYARD_TEST_AVD`` set.
"""

from __future__ import annotations

import errno
import io
import json
import os
import shutil
import stat
from collections.abc import AsyncIterator
from pathlib import Path

import attrs
import pytest
import trio
import trio.testing
from PIL import Image

from devyard.hostd.adb import AdbConfig, serve_adb_tcp
from devyard.hostd.adb.device import AdbDevice
from devyard.hostd.adb.packets import Command, Packet, PacketDecoder, encode_packet
from devyard.hostd.daemon import HostdConfig
from devyard.hostd.drivers import (
    AndroidDevice,
    AppNotFoundError,
    DeviceError,
    DeviceFileError,
    DeviceSpec,
    FileKind,
    InvalidInputError,
    InvalidSpecError,
    Key,
    Platform,
    PortClosedError,
    Rotation,
    ShellDevice,
    TouchAction,
    UnsupportedOperationError,
    drivers_by_name,
    open_device,
)
from devyard.hostd.drivers.emulator import EmulatorConfig, EmulatorDevice, Mode, emulator_argv
from devyard.hostd.drivers.emulator.device import open_emulator_device
from devyard.hostd.drivers.emulator.isolation import use_netns
from devyard.hostd.drivers.virtual import VirtualDevice
from devyard.hostd.endpoints.device_api import ApiRequest, DeviceApi
from tests.ports import free_port

from .conftest import package_apk

ADB = shutil.which("adb")
needs_adb = pytest.mark.skipif(
    ADB is None, reason="the adb client is not installed (apt install adb)"
)


def tool_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ADB_", "ANDROID_"))}
    env["HOME"] = str(home)
    env.pop("TERM", None)
    return env


async def kill_server(config: EmulatorConfig) -> None:
    assert ADB is not None
    with trio.move_on_after(10, shield=True):
        await trio.run_process(
            [ADB, "-P", str(config.adb_server_port), "kill-server"],
            env=dict(config.env or {}), check=False, capture_stdout=True, capture_stderr=True,
        )  # fmt: skip


@attrs.frozen
class Rig:
    virtual: VirtualDevice
    dev: EmulatorDevice
    config: EmulatorConfig


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    """The virtual device's adbd on a loopback port and the emulator driver attached to it."""
    if ADB is None:
        pytest.skip("the adb client is not installed (apt install adb)")
    home = tmp_path / "home"
    home.mkdir()
    virtual_spec = DeviceSpec(Platform.ANDROID, "virtual-1", tmp_path / "virtual")
    async with open_device(virtual_spec) as virtual, trio.open_nursery() as nursery:
        assert isinstance(virtual, VirtualDevice)
        port: int = await nursery.start(
            lambda task_status: serve_adb_tcp(virtual, config=AdbConfig(), task_status=task_status)
        )
        config = EmulatorConfig(
            adb_path=ADB, adb_server_port=free_port(), attach=f"127.0.0.1:{port}",
            env=tool_env(home), command_timeout=20, attach_timeout=30,
        )  # fmt: skip
        spec = DeviceSpec(Platform.ANDROID, "emulator-1", tmp_path / "emulator")
        try:
            async with open_emulator_device(spec, config) as dev:
                yield Rig(virtual, dev, config)
        finally:
            await kill_server(config)
            nursery.cancel_scope.cancel()


# -- configuration and registration ---------------------------------------------------------


def test_registered_and_advertises_android() -> None:
    assert "android-emulator" in drivers_by_name()
    config = HostdConfig("http://x", "t", "eu", Path("."), drivers=("android-emulator",))
    assert config.platforms == ["android"]


def test_config_from_env(tmp_path: Path) -> None:
    config = EmulatorConfig.from_env(
        {"ANDROID_SDK_ROOT": str(tmp_path), "DEVYARD_ADB_SERVER_PORT": "5099",
         "DEVYARD_EMULATOR_ATTACH": "10.0.0.2:5555, [::1]:5557",
         "DEVYARD_EMULATOR_ARGS": "-gpu swiftshader_indirect"}
    )  # fmt: skip
    assert config.mode is Mode.ATTACH
    assert config.attach == (("10.0.0.2", 5555), ("::1", 5557))
    assert config.adb_server_port == 5099
    assert config.tool_env()["ANDROID_ADB_SERVER_PORT"] == "5099"
    assert config.emulator_args == ("-gpu", "swiftshader_indirect")
    assert EmulatorConfig.from_env({"DEVYARD_EMULATOR_AVD": "pixel_8"}).mode is Mode.LAUNCH
    with pytest.raises(InvalidSpecError, match="HOST:PORT"):
        EmulatorConfig.from_env({"DEVYARD_EMULATOR_ATTACH": "nohost"})


def test_launch_command_line(tmp_path: Path) -> None:
    (tmp_path / "emulator").mkdir()
    tool = tmp_path / "emulator" / "emulator"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    config = EmulatorConfig(sdk_root=tmp_path, emulator_args=("-no-snapshot",))
    assert emulator_argv(config, "pixel_8", 5560) == [
        str(tool), "-avd", "pixel_8", "-no-window", "-no-audio", "-port", "5560", "-read-only",
        "-no-snapshot",
    ]  # fmt: skip


async def test_ios_spec_is_refused(tmp_path: Path) -> None:
    spec = DeviceSpec(Platform.IOS, "x", tmp_path / "s")
    with pytest.raises(InvalidSpecError, match="android"):
        async with open_emulator_device(spec, EmulatorConfig(adb_path="adb")):
            pass


# -- launch, with a fake emulator -----------------------------------------------------------

FAKE_EMULATOR = """#!/bin/sh
echo "$$ $*" > "$FAKE_EMULATOR_RECORD"
if [ -n "$FAKE_EMULATOR_FAIL" ]; then echo "PANIC: Unknown AVD name [$2]"; exit 1; fi
exec sleep 600
"""


def fake_sdk(tmp_path: Path) -> Path:
    sdk = tmp_path / "sdk"
    (sdk / "emulator").mkdir(parents=True)
    tool = sdk / "emulator" / "emulator"
    tool.write_text(FAKE_EMULATOR)
    tool.chmod(0o755)
    return sdk


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


@needs_adb
async def test_launch_runs_the_emulator_and_kills_it_when_it_does_not_boot(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    record = tmp_path / "argv"
    env = tool_env(home) | {"FAKE_EMULATOR_RECORD": str(record)}
    config = EmulatorConfig(
        sdk_root=fake_sdk(tmp_path), adb_path=ADB, adb_server_port=free_port(), avd="pixel_8",
        boot_timeout=3, env=env, base_port=5754,
    )  # fmt: skip
    spec = DeviceSpec(Platform.ANDROID, "launch-1", tmp_path / "sandbox")
    try:
        with pytest.raises(DeviceError, match=r"emulator-57\d\d did not boot within 3 s"):
            async with open_emulator_device(spec, config):
                pytest.fail("the fake emulator never boots")
    finally:
        await kill_server(config)
    pid, *argv = record.read_text().split()
    port = int(argv[argv.index("-port") + 1])
    assert port % 2 == 0 and port >= 5754
    fixed = ["-avd", "pixel_8", "-no-window", "-no-audio", "-port", str(port), "-read-only"]
    # In its own network namespace (root on Linux: test_emulator_netns.py) it asks hostd's DNS.
    dns = ["-dns-server", "127.0.0.1"] if use_netns(config) else []
    assert argv == fixed + dns
    assert not alive(int(pid)), "the emulator must be killed"
    assert not spec.sandbox_dir.exists()


@needs_adb
async def test_launch_reports_an_emulator_that_exits(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    env = tool_env(home) | {"FAKE_EMULATOR_RECORD": str(tmp_path / "argv"),
                            "FAKE_EMULATOR_FAIL": "1"}  # fmt: skip
    config = EmulatorConfig(
        sdk_root=fake_sdk(tmp_path), adb_path=ADB, adb_server_port=free_port(),
        boot_timeout=30, env=env, base_port=5754,
    )  # fmt: skip
    spec = DeviceSpec(Platform.ANDROID, "launch-2", tmp_path / "sandbox", model="no_such_avd")
    try:
        with trio.fail_after(15):
            with pytest.raises(DeviceError, match=r"status 1 .*Unknown AVD name \[no_such_avd\]"):
                async with open_emulator_device(spec, config):
                    pass
    finally:
        await kill_server(config)


async def test_launch_without_an_avd_is_a_spec_error(tmp_path: Path) -> None:
    config = EmulatorConfig(sdk_root=fake_sdk(tmp_path), adb_path="adb")
    spec = DeviceSpec(Platform.ANDROID, "launch-3", tmp_path / "sandbox")
    with pytest.raises(InvalidSpecError, match="AVD"):
        async with open_emulator_device(spec, config):
            pass
    assert not spec.sandbox_dir.exists()


@pytest.mark.skipif(
    not (os.environ.get("DEVYARD_TEST_AVD") and os.path.exists("/dev/kvm")),
    reason="a real emulator launch needs KVM, the Android SDK (ANDROID_SDK_ROOT) and an AVD "
    "named in DEVYARD_TEST_AVD; this machine has neither KVM nor the SDK",
)
async def test_launch_a_real_emulator(tmp_path: Path) -> None:  # pragma: no cover
    config = EmulatorConfig.from_env(os.environ)
    config = attrs.evolve(config, avd=os.environ["DEVYARD_TEST_AVD"])
    spec = DeviceSpec(Platform.ANDROID, "real-1", tmp_path / "sandbox")
    async with open_emulator_device(spec, config) as dev:
        assert dev.describe().width > 0
        png = await dev.screenshot()
        assert png.startswith(b"\x89PNG")
        stream = await dev.open_adb_transport()
        await stream.send_all(encode_packet(Packet(Command.CNXN, 0x01000001, 1 << 20, b"host::\0")))
        await stream.aclose()


# -- attach: every verb against the virtual device's adbd -----------------------------------


async def test_describe_and_properties(rig: Rig) -> None:
    assert isinstance(rig.dev, AndroidDevice)  # what the ADB bridge and the supervisor ask
    info, vinfo = rig.dev.describe(), rig.virtual.describe()
    assert info.driver == "android-emulator"
    assert info.platform is Platform.ANDROID
    assert (info.width, info.height, info.density) == (vinfo.width, vinfo.height, vinfo.density)
    assert info.model_name == vinfo.model_name
    assert info.os_version == vinfo.os_version
    assert rig.dev.properties()["ro.product.model"] == vinfo.model_name
    assert rig.dev.target.mode is Mode.ATTACH
    assert rig.dev.serial == f"127.0.0.1:{rig.config.attach[0][1]}"


async def test_screenshot_and_frames(rig: Rig) -> None:
    png = await rig.dev.screenshot()
    with Image.open(io.BytesIO(png)) as image:
        assert image.format == "PNG"
        assert image.size == (rig.virtual.describe().width, rig.virtual.describe().height)
    frames = rig.dev.frames(max_fps=20, max_size=300)
    with trio.fail_after(20):
        first = await anext(frames)
        assert (first.seq, first.keyframe, first.codec) == (0, True, "jpeg")
        assert max(first.width, first.height) == 300
        with Image.open(io.BytesIO(first.data)) as image:
            assert image.format == "JPEG" and image.size == (first.width, first.height)
        rig.dev.request_keyframe()  # nothing changed, but a keyframe was asked for
        second = await anext(frames)
        assert second.seq == 1 and second.pts_us > first.pts_us
        await rig.virtual.tap(0.5, 0.5)  # the picture changes: a frame follows
        third = await anext(frames)
        assert third.data != second.data
    await frames.aclose()  # type: ignore[attr-defined]
    with pytest.raises(UnsupportedOperationError):
        rig.dev.frames(codec="h264")  # type: ignore[arg-type]


async def test_the_element_tree_comes_through_uiautomator_dump(rig: Rig) -> None:
    assert await rig.dev.ui_tree() == await rig.virtual.ui_tree()
    await rig.virtual.launch("com.android.settings")
    tree = await rig.dev.ui_tree()
    assert tree == await rig.virtual.ui_tree() and tree.package == "com.android.settings"
    request = ApiRequest.from_open(
        {"method": "GET", "path": "/ui"}, trio.testing.MemoryReceiveStream()
    )
    response = await DeviceApi(rig.dev).route(request)
    assert json.loads(response.body)["package"] == "com.android.settings"


async def test_tap_touch_and_scroll_change_the_screen(rig: Rig) -> None:
    before = await rig.virtual.screenshot()
    await rig.dev.tap(0.3, 0.2)
    after_tap = await rig.virtual.screenshot()
    assert after_tap != before
    await rig.dev.touch(1, TouchAction.DOWN, 0.5, 0.8)
    await rig.dev.touch(1, TouchAction.MOVE, 0.5, 0.6)
    await rig.dev.touch(1, TouchAction.UP, 0.5, 0.4)  # replayed as `input swipe`
    assert await rig.virtual.screenshot() != after_tap
    await rig.dev.scroll(0.5, 0.5, 0.0, 0.3)
    with pytest.raises(InvalidInputError):
        await rig.dev.tap(1.5, 0.5)
    with pytest.raises(InvalidInputError):
        await rig.dev.scroll(0.5, 0.5, 0.0, 99)


async def test_apps_keys_and_text(rig: Rig, tmp_path: Path) -> None:
    apk = package_apk(tmp_path, "com.example.notes", "Notes")
    app = await rig.dev.install(apk)
    assert (app.app_id, app.label, app.version) == ("com.example.notes", "Notes", "1.0")
    assert "com.example.notes" in {a.app_id for a in await rig.virtual.list_apps()}
    listed = {a.app_id: a for a in await rig.dev.list_apps()}
    assert listed["com.example.notes"].label == "Notes"
    assert not listed["com.example.notes"].system
    assert any(a.system for a in listed.values())

    await rig.dev.launch("com.example.notes")
    assert rig.virtual.foreground_app() == "com.example.notes"
    seq = rig.virtual.logs()[-1].seq
    await rig.dev.text("hi there")  # `input text hi%sthere`
    typed = [e.message for e in rig.virtual.logs(after=seq) if e.tag == "Input"]
    assert "text (8 characters)" in typed
    await rig.dev.set_clipboard("pasted")
    assert await rig.dev.get_clipboard() == "pasted"
    seq = rig.virtual.logs()[-1].seq
    await rig.dev.key(Key.PASTE)  # types the clipboard
    assert "text (6 characters)" in [e.message for e in rig.virtual.logs(after=seq)]
    with pytest.raises(UnsupportedOperationError):
        await rig.dev.text("héllo")
    await rig.dev.key(Key.HOME)
    assert rig.virtual.foreground_app() is None
    await rig.dev.launch("com.example.notes")
    await rig.dev.terminate("com.example.notes")
    assert "com.example.notes" not in {a.app_id for a in await rig.virtual.list_apps()
                                       if a.running}  # fmt: skip

    await rig.dev.uninstall("com.example.notes")
    assert "com.example.notes" not in {a.app_id for a in await rig.virtual.list_apps()}
    for verb in (rig.dev.launch, rig.dev.terminate, rig.dev.uninstall):
        with pytest.raises(AppNotFoundError):
            await verb("com.example.notes")


async def test_open_url(rig: Rig) -> None:
    await rig.dev.open_url("https://example.com/a?b=c&d=e")
    assert any("dat=https://example.com/a?b=c&d=e" in e.message for e in rig.virtual.logs())
    with pytest.raises(InvalidInputError):
        await rig.dev.open_url("")


async def test_files(rig: Rig) -> None:
    dev, virtual = rig.dev, rig.virtual
    payload = os.urandom(1 << 20)
    assert await dev.push("/sdcard/Download/new dir/a b.bin", payload, mode=0o600) == len(payload)
    assert await virtual.pull("/sdcard/Download/new dir/a b.bin") == payload

    async def chunks() -> AsyncIterator[bytes]:
        yield b"hello "
        yield b"world"

    assert await dev.push("/data/local/tmp/streamed.txt", chunks()) == 11
    assert await virtual.pull("/data/local/tmp/streamed.txt") == b"hello world"
    await virtual.push("/sdcard/from-device.txt", b"device bytes")
    assert await dev.pull("/sdcard/from-device.txt") == b"device bytes"

    entry = await dev.stat("/sdcard/Download/new dir/a b.bin")
    assert (entry.name, entry.kind, entry.size) == ("a b.bin", FileKind.FILE, len(payload))
    assert stat.S_ISREG(entry.mode)
    assert abs(entry.mtime - (await virtual.stat("/sdcard/Download/new dir/a b.bin")).mtime) < 60
    directory = await dev.stat("/sdcard/Download/new dir")
    assert directory.kind is FileKind.DIRECTORY
    assert [e.name for e in await dev.ls("/sdcard/Download/new dir")] == ["a b.bin"]
    assert (await dev.ls("/sdcard/from-device.txt"))[0].kind is FileKind.FILE

    await dev.mkdir("/sdcard/made/deep")
    assert (await virtual.stat("/sdcard/made/deep")).kind is FileKind.DIRECTORY
    with pytest.raises(DeviceFileError) as caught:
        await dev.remove("/sdcard/made")
    assert caught.value.errno == errno.EISDIR
    await dev.remove("/sdcard/made", recursive=True)
    await dev.remove("/sdcard/from-device.txt")
    for path in ("/sdcard/made", "/sdcard/from-device.txt"):
        with pytest.raises(DeviceFileError):
            await virtual.stat(path)
    for verb in (dev.pull, dev.stat, dev.ls):
        with pytest.raises(DeviceFileError) as caught:
            await verb("/sdcard/missing")
        assert caught.value.errno == errno.ENOENT, verb
    with pytest.raises(DeviceFileError) as caught:
        await dev.pull("/sdcard/Download")
    assert caught.value.errno == errno.EISDIR
    with pytest.raises(InvalidInputError):
        await dev.pull("relative/path")


async def test_settings_and_rotate(rig: Rig) -> None:
    dev = rig.dev
    await dev.settings_put("global", "devyard_test", "a b")
    assert await dev.settings_get("global", "devyard_test") == "a b"
    assert (await dev.settings_list("global"))["devyard_test"] == "a b"
    assert await dev.settings_delete("global", "devyard_test")
    assert not await dev.settings_delete("global", "devyard_test")
    assert await dev.settings_get("global", "devyard_test") is None
    with pytest.raises(InvalidInputError):
        await dev.settings_get("nope", "x")

    width, height = dev.describe().width, dev.describe().height
    await dev.rotate(Rotation.LANDSCAPE)
    assert rig.virtual.describe().rotation is Rotation.LANDSCAPE
    assert (dev.describe().width, dev.describe().height) == (height, width)
    assert dev.describe().rotation is Rotation.LANDSCAPE
    with Image.open(io.BytesIO(await dev.screenshot())) as image:
        assert image.size == (height, width)
    await dev.tap(0.9, 0.9)  # landscape pixels reach the device
    await dev.rotate(Rotation.PORTRAIT)
    assert (dev.describe().width, dev.describe().height) == (width, height)


async def test_logs(rig: Rig) -> None:
    with trio.fail_after(20):
        seen = await rig.dev.wait_logs()  # logcat replays what the device logged so far
        assert any("boot completed" in e.message for e in seen)
        rig.virtual.log(rig.virtual.logs()[-1].level, "EmuTest", "from the device: a: b")
        last = seen[-1].seq
        while True:
            entries = await rig.dev.wait_logs(after=last)
            last = entries[-1].seq
            found = [e for e in entries if e.tag == "EmuTest"]
            if found:
                break
    assert found[0].message == "from the device: a: b"
    assert rig.dev.logs(after=0)[0].seq == 1


async def echo(stream: trio.SocketStream) -> None:
    async with stream:
        while data := await stream.receive_some(65536):
            await stream.send_all(data.upper())


async def test_device_sockets(rig: Rig) -> None:
    async with trio.open_nursery() as nursery:
        await nursery.start(rig.virtual.serve_port, 8080, echo)
        await nursery.start(rig.virtual.serve_abstract, "devtools", echo)
        for opened in (await rig.dev.open_port(8080), await rig.dev.open_abstract("devtools")):
            async with opened:
                with trio.fail_after(10):
                    await opened.send_all(b"ping")
                    assert await opened.receive_some(100) == b"PING"
        nursery.cancel_scope.cancel()
    with pytest.raises(PortClosedError):
        await rig.dev.open_port(9)
    with pytest.raises(PortClosedError):
        await rig.dev.open_abstract("nobody")
    with pytest.raises(InvalidInputError):
        await rig.dev.open_port(70000)


async def test_adb_transport_answers_cnxn(rig: Rig) -> None:
    stream = await rig.dev.open_adb_transport()
    async with stream:
        hello = Packet(Command.CNXN, 0x01000001, 1 << 20, b"host::features=shell_v2\0")
        await stream.send_all(encode_packet(hello))
        decoder = PacketDecoder()
        with trio.fail_after(10):
            packets: list[Packet] = []
            while not packets:
                packets = decoder.feed(await stream.receive_some(65536))
    assert packets[0].command is Command.CNXN
    assert packets[0].data.startswith(b"device::")
    assert rig.virtual.describe().model_name.encode() in packets[0].data


async def test_close_disconnects_and_refuses_verbs(rig: Rig) -> None:
    dev = rig.dev
    sandbox = dev._spec.sandbox_dir
    assert sandbox.is_dir()
    await dev.aclose()
    await dev.aclose()  # idempotent
    assert not sandbox.exists()
    with pytest.raises(trio.ClosedResourceError):
        await dev.screenshot()
    with pytest.raises(trio.ClosedResourceError):
        await dev.wait_logs(after=10**9)
    assert ADB is not None
    devices = await trio.run_process(
        [ADB, "-P", str(rig.config.adb_server_port), "devices"],
        env=dict(rig.config.env or {}), capture_stdout=True,
    )  # fmt: skip
    assert dev.serial not in devices.stdout.decode()


async def test_second_instance_needs_a_free_address(rig: Rig, tmp_path: Path) -> None:
    spec = DeviceSpec(Platform.ANDROID, "emulator-2", tmp_path / "second")
    with pytest.raises(DeviceError, match="in use"):
        async with open_emulator_device(spec, rig.config):
            pass


async def test_the_device_api_shell_runs_on_the_devices_own_shell(rig: Rig) -> None:
    """POST /shell by capability: the emulator is no AdbDevice, so the command goes to its
    own shell through `adb shell` (here the virtual device's adbd answers), never to hostd's
    interpreter, which would reach for verbs only the virtual device has."""
    assert not isinstance(rig.dev, AdbDevice) and isinstance(rig.dev, ShellDevice)
    async with trio.open_nursery() as nursery:
        await nursery.start(rig.virtual.serve_abstract, "devtools", echo)

        async def shell(command: str) -> dict[str, object]:
            body = trio.testing.MemoryReceiveStream()
            body.put_data(json.dumps({"command": command}).encode())
            body.put_eof()
            request = ApiRequest("POST", "/shell", {}, "application/json", body)
            response = await DeviceApi(rig.dev).route(request)
            assert response.status == 200, response.body
            answer: dict[str, object] = json.loads(response.body)
            return answer

        with trio.fail_after(20):
            sockets = await shell("cat /proc/net/unix")  # the device's listening() table
            failed = await shell("ls /nowhere")
        nursery.cancel_scope.cancel()
    assert sockets["exitCode"] == 0
    assert "@devtools" in str(sockets["stdout"])
    assert failed["exitCode"] != 0 and "nowhere" in str(failed["stderr"])
