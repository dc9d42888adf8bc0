"""macOS isolation of Xcode builds, with fakes of Apple's tools (tests/builds/fakes): every
build runs under ``sandbox-exec -f <the instance's profile>`` (the generated profile: writes
only to the workspace, DerivedData, the build's home and its secrets; no IP network, or only
the allowlist relay), and a signed build gets a temporary keychain, created, unlocked,
imported into, partition-listed and deleted, also when the build is cancelled. The fakes
record their argv; Seatbelt and the keychain themselves cannot run here (Linux). An xcode
device in this process (the driver's code path, the real keeper, real processes)."""

from __future__ import annotations

import base64
import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from devyard.hostd.drivers.base import DeviceSpec, Platform
from devyard.hostd.drivers.xcode import XcodeConfig, XcodeDevice, open_xcode_device
from devyard.hostd.drivers.xcode.seatbelt import profile, quote
from tests.polling import eventually

FAKES = Path(__file__).with_name("fakes")
PASSWORD = "p12-password-hunter2"
CERTIFICATE = base64.b64encode(b"fake PKCS#12 bytes").decode()


@asynccontextmanager
async def _device(tmp_path: Path, *allow: str) -> AsyncIterator[XcodeDevice]:
    config = XcodeConfig(tools_path=f"{FAKES}:{os.environ['PATH']}", allow_non_macos=True)
    spec = DeviceSpec(
        Platform.XCODE, "xc-1", tmp_path / "instances" / "xc-1", build_network=tuple(allow)
    )
    async with open_xcode_device(spec, config) as device:
        project = device.builds.workspace.root / "App.xcodeproj"
        await trio.Path(project).mkdir(parents=True)
        yield device


def _lines(path: Path) -> list[Any]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


async def _build(device: XcodeDevice, **extra: object) -> tuple[str, str]:
    body = {"command": "xcodebuild", "xcodebuild": {"scheme": "App", "sdk": "iphonesimulator"}}
    run = device.builds.start({**body, **extra})
    with trio.fail_after(60):
        await run.done.wait()
    log = run.log_path.read_text()
    return str(run.exit_code), log


def test_the_profile_confines_writes_and_the_network() -> None:
    closed = profile(writable=[Path("/w/ws"), Path('/w/odd "name"')])
    assert closed.startswith("(version 1)\n")
    assert '(deny file-write*)\n(allow file-write*\n    (subpath "/w/ws")' in closed
    assert '(subpath "/w/odd \\"name\\"")' in closed  # quoted as a Scheme string
    assert '(deny network-outbound (remote ip "*:*"))' in closed
    assert "localhost:" not in closed and "unix-socket" not in closed
    opened = profile(writable=[Path("/w")], proxy_port=41234, proxy_socket=Path("/w/net/p.sock"))
    assert '(allow network-outbound (remote ip "localhost:41234"))' in opened
    assert '(allow network-bind (local ip "localhost:41234"))' in opened
    assert '(remote unix-socket (path-literal "/w/net/p.sock"))' in opened
    with pytest.raises(ValueError, match="control character"):
        quote("/w/new\nline")


async def test_builds_run_under_the_profile_with_a_temporary_keychain(tmp_path: Path) -> None:
    async with _device(tmp_path) as device:
        directory = device.builds.directory
        workspace = device.builds.workspace.root
        sb = directory / "sandbox.sb"
        text = sb.read_text()
        for writable in (workspace, workspace / "build/DerivedData", directory / "home"):
            assert f"(subpath {quote(writable.resolve())})" in text, text
        assert f"(subpath {quote((directory / 'secrets').resolve())})" in text
        assert '(deny network-outbound (remote ip "*:*"))' in text and "localhost:" not in text

        signing = {"certificateP12Base64": CERTIFICATE, "certificatePassword": PASSWORD}
        code, log = await _build(device, signing=signing)
        assert code == "0", log
        # the build ran under sandbox-exec with the instance's profile
        (call,) = _lines(Path(f"{sb}.calls"))
        assert call["argv"][:3] == ["-f", str(sb), "env"] and call["profile"] == text
        # the keychain's life, in order, one keychain, deleted at the end
        calls = _lines(directory / "security-calls.jsonl")
        assert [c[0] for c in calls] == [
            "create-keychain",
            "set-keychain-settings",
            "unlock-keychain",
            "import",
            "set-key-partition-list",
            "delete-keychain",
        ], calls
        keychain = calls[0][-1]
        assert Path(keychain).parent.parent == directory / "secrets"
        assert calls[0][1] == "-p" and calls[2][1:] == ["-p", calls[0][2], keychain]
        assert calls[3][1].endswith("certificate.p12") and ["-k", keychain] == calls[3][2:4]
        assert calls[3][4:6] == ["-P", PASSWORD]  # the p12's password, to security only
        assert calls[4][-3:] == ["-k", calls[0][2], keychain]
        assert calls[5] == ["delete-keychain", keychain]
        assert not await trio.Path(keychain).exists()
        assert f"OTHER_CODE_SIGN_FLAGS = --keychain {keychain}" in log
        assert "1 identity imported." in log
        # no secret in the output: the p12 password and the keychain's
        assert PASSWORD not in log and calls[0][2] not in log and "***" in log

        # a cancelled build skips its script's cleanup: hostd deletes the keychain
        calls_file = directory / "security-calls.jsonl"
        calls_file.unlink()
        body = {"command": "xcodebuild", "xcodebuild": {"scheme": "App"}, "signing": signing}
        run = device.builds.start({**body, "buildSettings": {"FAKE_HANG": "YES"}})
        with trio.fail_after(60):
            while not any("Hanging" in e.data for e in run.events):
                await run.wait_beyond(run.last_id)
        device.builds.cancel(run.id)
        await run.done.wait()
        await eventually(
            lambda: (
                not (directory / "secrets").exists() or not any((directory / "secrets").iterdir())
            )
        )
        calls = _lines(calls_file)
        assert [c[0] for c in calls][-1] == "delete-keychain", calls
        assert calls[-1][-1] == calls[0][-1]
        assert not await trio.Path(calls[0][-1]).exists()


async def test_an_allowlist_opens_only_the_relay_port(tmp_path: Path) -> None:
    async with _device(tmp_path, "example.com:443") as device:
        sandbox = device.builds.config.sandbox
        port = sandbox.proxy_port
        assert sandbox.proxy is not None and port > 0
        text = (device.builds.directory / "sandbox.sb").read_text()
        assert f'(allow network-outbound (remote ip "localhost:{port}"))' in text
        assert f"(path-literal {quote(sandbox.proxy.resolve())})" in text
        run = device.builds.start({"command": "run", "commandLine": "echo $https_proxy"})
        with trio.fail_after(60):
            await run.done.wait()
        out = [e.data for e in run.events if e.type == "stdout"]
        assert run.exit_code == 0 and out == [f"http://127.0.0.1:{port}"], run.events
