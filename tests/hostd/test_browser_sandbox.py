"""The browser sandbox on its own (hostd/browser, docs/sandbox.md), with Debian's real Chromium
and a virtual device: the host's network policy applies to the browser (a loopback server is
never reached, the page shows the proxy's refusal), the memory watchdog ends a browser over its
limit, and nothing of it outlives the sandbox. The whole path through the edge, with
Playwright, is tests/e2e/test_browser_sandbox.py.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
from trio_websocket import open_websocket

from devyard.core._groups import leaves
from devyard.core.chrome_flags import parse_chrome_flag
from devyard.hostd import commands
from devyard.hostd.browser import BrowserConfig, Chromium, run_browser_sandbox
from devyard.hostd.browser.chromium import DEFAULT_CHROMIUM, DEFAULT_MEMORY_LIMIT
from devyard.hostd.browser.sandbox import sandbox_of
from devyard.hostd.drivers import DeviceError, DeviceSpec, Platform, open_device
from devyard.hostd.drivers.virtual import VirtualDevice
from devyard.hostd.egress import EgressProxy

CHROMIUM = Path("/usr/bin/chromium")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not CHROMIUM.exists(), reason=f"{CHROMIUM} is missing (scripts/deps)"),
]


def _profile_pids(sandbox: Path) -> set[int]:
    pids = set()
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if (
                    str(sandbox / "browser" / "profile").encode()
                    in Path(f"/proc/{entry.name}/cmdline").read_bytes()
                ):
                    pids.add(int(entry.name))
    return pids


def _alive(pid: int) -> bool:
    """The process exists and is not a zombie (a dead child its new parent has not reaped)."""
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    return False


@contextlib.asynccontextmanager
async def _device(tmp_path: Path) -> AsyncIterator[VirtualDevice]:
    spec = DeviceSpec(Platform.ANDROID, "browser-test", tmp_path / "instance")
    async with open_device(spec) as device:
        assert isinstance(device, VirtualDevice)
        yield device


async def _call(
    ws: Any, call_id: int, method: str, params: dict[str, Any], session: str = ""
) -> Any:
    message: dict[str, Any] = {"id": call_id, "method": method, "params": params}
    if session:
        message["sessionId"] = session
    await ws.send_message(json.dumps(message))
    while True:
        answer = json.loads(await ws.get_message())
        if answer.get("id") == call_id:
            return answer.get("result", answer.get("error"))


async def test_the_policy_applies_to_the_browser(tmp_path: Path) -> None:
    hits = 0

    async def loopback_server(stream: trio.SocketStream) -> None:
        nonlocal hits
        hits += 1
        await stream.aclose()

    with trio.fail_after(60):
        async with _device(tmp_path) as device, trio.open_nursery() as nursery:
            listeners = await nursery.start(
                partial(trio.serve_tcp, loopback_server, 0, host="127.0.0.1")
            )
            port = listeners[0].socket.getsockname()[1]
            dial = EgressProxy("browser-test", (), None).dial  # the default policy
            sandbox_dir = tmp_path / "instance"
            await nursery.start(run_browser_sandbox, device, sandbox_dir, BrowserConfig(), dial)
            chromium = sandbox_of(device)
            assert isinstance(chromium, Chromium)
            args = chromium.argv()
            assert f"--user-data-dir={sandbox_dir / 'browser' / 'profile'}" in args
            assert "--proxy-bypass-list=<-loopback>" in args
            assert not chromium.proxy.host.startswith("127.0.0.1")
            async with open_websocket(
                "127.0.0.1", chromium.port, chromium.browser_path, use_ssl=False
            ) as ws:
                target = (await _call(ws, 1, "Target.createTarget", {"url": "about:blank"}))[
                    "targetId"
                ]
                session = (
                    await _call(
                        ws, 2, "Target.attachToTarget", {"targetId": target, "flatten": True}
                    )
                )["sessionId"]
                await _call(ws, 3, "Page.navigate", {"url": f"http://127.0.0.1:{port}/"}, session)
                text = ""
                for call_id in range(4, 400):  # until the answer is on the page
                    expression = "document.body ? document.body.innerText : ''"
                    got = await _call(
                        ws, call_id, "Runtime.evaluate", {"expression": expression}, session
                    )
                    text = str(got.get("result", {}).get("value", ""))
                    if text:
                        break
                    await trio.sleep(0.05)
            assert hits == 0, "the browser never reached the host's loopback"
            assert text, "the page shows the proxy's refusal or Chrome's error page"
            pids = _profile_pids(sandbox_dir)
            assert pids
            nursery.cancel_scope.cancel()
        assert not {p for p in pids if _alive(p)}, "the whole group ended"


async def test_a_browser_over_its_memory_limit_ends(tmp_path: Path) -> None:
    config = attrs.evolve(BrowserConfig(), memory_limit=1024 * 1024)
    dial = EgressProxy("browser-test", (), None).dial
    with trio.fail_after(60):
        async with _device(tmp_path) as device:
            with pytest.raises(BaseExceptionGroup) as ended:
                async with trio.open_nursery() as nursery:
                    await nursery.start(
                        run_browser_sandbox, device, tmp_path / "instance", config, dial
                    )
                    await trio.sleep_forever()
    errors = [e for e in leaves(ended.value) if isinstance(e, DeviceError)]
    assert errors and "over its limit of 1 MiB" in str(errors[0]), ended.value
    assert not _profile_pids(tmp_path / "instance")


def test_flags_reach_the_command_line_and_local_state(tmp_path: Path) -> None:
    flags = tuple(map(parse_chrome_flag, ["--lang=de", "enable-foo@1", "--force-dark-mode"]))
    chromium = Chromium("t", tmp_path, attrs.evolve(BrowserConfig(), flags=flags), _no_dial)
    args = chromium.argv()
    assert args[-3:] == ["--lang=de", "--force-dark-mode", "about:blank"]
    assert "enable-foo@1" not in " ".join(args)
    chromium._prepare()
    state = json.loads((tmp_path / "browser" / "profile" / "Local State").read_text())
    assert state == {"browser": {"enabled_labs_experiments": ["enable-foo@1"]}}


async def _no_dial(host: str, port: int) -> trio.abc.Stream:
    raise AssertionError("not dialled")


def test_the_cli_defaults_are_the_browsers() -> None:
    assert str(DEFAULT_CHROMIUM) == commands._CHROMIUM
    assert commands._BROWSER_MEMORY_MIB << 20 == DEFAULT_MEMORY_LIMIT
