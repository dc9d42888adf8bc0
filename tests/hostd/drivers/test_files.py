"""The sandbox: created on start, removed on close; device files live inside it and only there."""

from __future__ import annotations

import errno
import stat
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio

from devyard.hostd.drivers import DeviceFileError, FileKind, InvalidInputError, Platform
from devyard.hostd.drivers.virtual import VirtualDevice

from .conftest import OpenDevice


async def test_sandbox_is_created_on_start_and_removed_on_close(
    open_dev: OpenDevice, tmp_path: Path
) -> None:
    sandbox = tmp_path / "instance"
    async with open_dev(Platform.ANDROID, sandbox=sandbox) as dev:
        assert dev.sandbox == sandbox
        assert (sandbox / "fs" / "data" / "local" / "tmp").is_dir()
        await dev.push("/data/local/tmp/x.bin", b"x")
        assert (sandbox / "fs" / "data" / "local" / "tmp" / "x.bin").read_bytes() == b"x"
    assert not sandbox.exists()


async def test_sandbox_is_removed_even_when_the_body_is_cancelled(
    open_dev: OpenDevice, tmp_path: Path
) -> None:
    sandbox = tmp_path / "cancelled"
    with trio.move_on_after(0.01):
        async with open_dev(Platform.IOS, sandbox=sandbox):
            await trio.sleep_forever()
    assert not sandbox.exists()


async def test_push_pull_stat_ls_mkdir_remove(android: VirtualDevice) -> None:
    written = await android.push(
        "/sdcard/Download/notes/a.txt", b"hello", mode=0o600, mtime=1_700_000_000
    )
    assert written == 5
    assert await android.pull("/sdcard/Download/notes/a.txt") == b"hello"
    entry = await android.stat("/sdcard/Download/notes/a.txt")
    assert (entry.name, entry.path, entry.kind, entry.size) == (
        "a.txt", "/sdcard/Download/notes/a.txt", FileKind.FILE, 5,
    )  # fmt: skip
    assert stat.S_ISREG(entry.mode) and stat.S_IMODE(entry.mode) == 0o600
    assert entry.mtime == 1_700_000_000
    await android.mkdir("/sdcard/Download/notes/sub/deeper")
    listing = await android.ls("/sdcard/Download/notes")
    assert [(e.name, e.kind) for e in listing] == [
        ("a.txt", FileKind.FILE),
        ("sub", FileKind.DIRECTORY),
    ]
    # /sdcard is an alias of /storage/emulated/0, as on a device.
    assert await android.pull("/storage/emulated/0/Download/notes/a.txt") == b"hello"
    with pytest.raises(DeviceFileError) as info:
        await android.remove("/sdcard/Download/notes")
    assert info.value.errno == errno.EISDIR
    await android.remove("/sdcard/Download/notes", recursive=True)
    assert [e.name for e in await android.ls("/sdcard/Download")] == []


async def test_streamed_push_writes_all_chunks(android: VirtualDevice) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        for i in range(64):
            yield bytes([i]) * 65536
            await trio.lowlevel.checkpoint()

    assert await android.push("/data/local/tmp/big.bin", chunks()) == 64 * 65536
    data = await android.pull("/data/local/tmp/big.bin")
    assert len(data) == 64 * 65536 and data[-1] == 63


async def test_a_failed_push_leaves_no_file(android: VirtualDevice) -> None:
    async def broken() -> AsyncIterator[bytes]:
        yield b"partial"
        raise ConnectionResetError("the adb client went away")

    with pytest.raises(ConnectionResetError):
        await android.push("/data/local/tmp/half.bin", broken())
    assert [e.name for e in await android.ls("/data/local/tmp")] == []


async def test_paths_cannot_leave_the_sandbox(android: VirtualDevice, tmp_path: Path) -> None:
    (tmp_path / "secret").write_text("do not read")
    await android.push("/../../../../secret", b"inside")
    assert (tmp_path / "secret").read_text() == "do not read"
    assert android.resolve_path("/../../secret") == android.sandbox / "fs" / "secret"
    with pytest.raises(InvalidInputError, match="absolute"):
        await android.pull("relative/path")
    with pytest.raises(InvalidInputError):
        await android.pull("/a\x00b")


async def test_file_errors_carry_errno(android: VirtualDevice) -> None:
    with pytest.raises(DeviceFileError) as info:
        await android.pull("/sdcard/missing.txt")
    assert info.value.errno == errno.ENOENT
    assert str(info.value) == "/sdcard/missing.txt: No such file or directory"
    with pytest.raises(DeviceFileError) as info:
        await android.ls("/nowhere")
    assert info.value.errno == errno.ENOENT
    with pytest.raises(DeviceFileError) as info:
        await android.pull("/sdcard")
    assert info.value.errno == errno.EISDIR
    with pytest.raises(DeviceFileError) as info:
        await android.remove("/")
    assert info.value.errno == errno.EPERM


async def test_ls_of_a_file_lists_the_file(android: VirtualDevice) -> None:
    await android.push("/data/local/tmp/one", b"1")
    assert [e.path for e in await android.ls("/data/local/tmp/one")] == ["/data/local/tmp/one"]


async def test_ios_sandbox_layout(iphone: VirtualDevice) -> None:
    names = {e.name for e in await iphone.ls("/")}
    assert {"Documents", "Library", "tmp"} <= names


async def test_a_sandbox_that_cannot_be_made_fails_start_clearly(
    open_dev: OpenDevice, tmp_path: Path
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    with pytest.raises(DeviceFileError) as info:
        async with open_dev(Platform.ANDROID, sandbox=blocker / "sandbox"):
            raise AssertionError("started on an impossible sandbox")
    assert info.value.errno == errno.ENOTDIR
    assert blocker.read_text() == "not a directory"
