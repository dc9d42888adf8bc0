"""hostd's ``sdk`` stream (hostd/endpoints/sdk_ws.py, docs/sdk-device.md) in process: a bug in
one request's handler answers that request and the socket goes on; a slow request does not
hold up the next; a path that is no SDK socket is refused. The SDK itself drives the same
stream end to end in tests/e2e/test_sdk_device.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio

from devyard.core import OpenError, RelayChannel, request_open
from devyard.hostd.drivers import DeviceSpec, Platform, open_device
from devyard.hostd.drivers.virtual import VirtualDevice

from .test_endpoints import edge_side


class BuggyTap(VirtualDevice):
    """A device whose tap has a bug (not a device error)."""

    async def tap(self, x: float, y: float) -> None:
        raise RuntimeError("a bug")


async def _ask(channel: RelayChannel, message: dict[str, object]) -> dict[str, object]:
    await channel.send(json.dumps(message))
    answer = await channel.receive()
    assert isinstance(answer, str)
    value = json.loads(answer)
    assert isinstance(value, dict)
    return value


async def test_a_handler_bug_answers_its_request_and_the_socket_goes_on(tmp_path: Path) -> None:
    device = BuggyTap(DeviceSpec(Platform.ANDROID, "buggy", tmp_path / "a"))
    async with device, edge_side({"buggy": device}) as edge:
        stream = await edge.open_stream()
        await request_open(stream, "sdk", instance_id="buggy", path="ws")
        channel = RelayChannel(stream)
        with trio.fail_after(10):
            tapped = await _ask(channel, {"type": "tap", "id": "1", "x": 5, "y": 5})
            assert tapped["type"] == "tapResult" and tapped["id"] == "1"
            assert tapped["error"] == {"code": "internal", "message": "RuntimeError",
                                       "retriable": False}  # fmt: skip
            bad = await _ask(channel, {"type": "findElement", "id": "2", "selector": {"x": 1}})
            assert bad["error"]["code"] == "bad_request"  # type: ignore[index]
            found = await _ask(channel, {"type": "findElement", "id": "3", "selector": {}})
            assert found["payload"]["count"] > 1  # type: ignore[index]
        await stream.aclose()


async def test_a_slow_request_does_not_hold_up_the_next(tmp_path: Path) -> None:
    async with (
        open_device(DeviceSpec(Platform.IOS, "ios", tmp_path / "a")) as ios,
        edge_side({"ios": ios}) as edge,
    ):
        stream = await edge.open_stream()
        await request_open(stream, "sdk", instance_id="ios", path="signaling")
        channel = RelayChannel(stream)
        slow = {"type": "performActions", "id": "slow",
                "actions": [{"type": "wait", "durationMs": 60_000}]}  # fmt: skip
        await channel.send(json.dumps(slow))
        with trio.fail_after(10):  # far less than the wait: answered beside it
            info = await _ask(channel, {"type": "deviceInfo", "id": "info"})
        assert info["id"] == "info" and info["udid"] == "ios"
        await stream.aclose()  # ends the wait with the socket


@pytest.mark.parametrize("path", ["", "reverse-tunnel", "../ws"])
async def test_a_path_that_is_no_sdk_socket_is_refused(tmp_path: Path, path: str) -> None:
    async with (
        open_device(DeviceSpec(Platform.ANDROID, "virt", tmp_path / "a")) as virtual,
        edge_side({"virt": virtual}) as edge,
    ):
        stream = await edge.open_stream()
        with pytest.raises(OpenError) as refused:
            await request_open(stream, "sdk", instance_id="virt", path=path)
        assert refused.value.code == "not-found"
        await stream.aclose()
