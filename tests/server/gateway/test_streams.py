"""``endpointWebSocketUrl``, ``signedStreamUrl`` and ``adbWebSocketUrl`` through the edge."""

from __future__ import annotations

import gc
import json
import struct
from typing import Any

import httpx
import pytest
import trio
import trio_websocket

from devyard.hostd.adb.packets import Command, Packet, PacketDecoder, encode_packet

from .conftest import Rig, upgrade_refusal

_MEDIA = struct.Struct(">BBQ")


async def _next_json(ws: trio_websocket.WebSocketConnection) -> dict[str, Any]:
    while True:
        message = await ws.get_message()
        if isinstance(message, str):
            value: dict[str, Any] = json.loads(message)
            return value


async def _next_frame(ws: trio_websocket.WebSocketConnection) -> tuple[int, int, bytes]:
    while True:
        message = await ws.get_message()
        if isinstance(message, bytes):
            kind, flags, _pts = _MEDIA.unpack_from(message)
            return kind, flags, message[_MEDIA.size :]


async def test_browser_stream_frames_and_input(rig: Rig) -> None:
    instance = await rig.create("android")
    status = instance["status"]
    url = f"{status['endpointWebSocketUrl']}?token={status['streamToken']}"
    with trio.fail_after(20):
        async with trio_websocket.open_websocket_url(url) as ws:
            hello = await _next_json(ws)
            assert hello["type"] == "hello"
            assert hello["protocol"] == 1
            assert "jpeg" in hello["codecs"]
            await ws.send_message(json.dumps({"type": "start", "codec": "jpeg", "maxFps": 30}))
            kind, flags, first = await _next_frame(ws)
            assert (kind, flags & 1) == (3, 1)
            assert first[:2] == b"\xff\xd8"  # a JPEG
            for action in ("down", "up"):
                touch = {"type": "touch", "pointerId": 0, "action": action, "x": 0.5, "y": 0.5}
                await ws.send_message(json.dumps(touch))
            await ws.send_message(json.dumps({"type": "text", "text": "hi"}))
            _, _, changed = await _next_frame(ws)
            assert changed != first
            await ws.send_message(json.dumps({"type": "warp"}))
            error = await _next_json(ws)
            assert error == {"type": "error", "message": "unknown message type 'warp'"}


@pytest.mark.parametrize("which", ["none", "wrong"])
async def test_refused_before_the_upgrade(rig: Rig, which: str) -> None:
    instance = await rig.create("android")
    base = instance["status"]["endpointWebSocketUrl"]
    url = base if which == "none" else base + "?token=dys_wrong"
    status, body = await upgrade_refusal(url)
    assert (status, body["reason"]) == (401, "unauthorized")


async def test_terminated_instance_is_gone(rig: Rig) -> None:
    instance = await rig.create("android")
    status = instance["status"]
    await rig.delete(instance)
    url = f"{status['endpointWebSocketUrl']}?token={status['streamToken']}"
    status_code, body = await upgrade_refusal(url)
    assert status_code == 410
    assert "terminated" in body["message"]


async def test_viewer_page_needs_its_token(rig: Rig) -> None:
    instance = await rig.create("android")
    status = instance["status"]
    async with httpx.AsyncClient() as client:
        page = await client.get(status["signedStreamUrl"])
        assert page.status_code == 200
        assert page.headers["content-type"].startswith("text/html")
        assert page.headers["referrer-policy"] == "no-referrer"
        assert b"/endpoint" in page.content
        bare = await client.get(status["signedStreamUrl"].split("?")[0])
        assert bare.status_code == 401


# When the server closes a WebSocket, trio-websocket 0.12 leaves the client's socket to the GC
# (docs/edge.md, open points): collect it here, where its ResourceWarning is expected.
@pytest.mark.filterwarnings("ignore::ResourceWarning")
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
async def test_adb_bytes_reach_the_device(rig: Rig) -> None:
    try:
        await _adb_bytes_reach_the_device(rig)
    finally:
        gc.collect()


async def _adb_bytes_reach_the_device(rig: Rig) -> None:
    instance = await rig.create("android")
    status = instance["status"]
    headers = [(b"Authorization", f"Bearer {status['token']}".encode())]
    with trio.fail_after(20):
        async with trio_websocket.open_websocket_url(
            status["adbWebSocketUrl"], extra_headers=headers
        ) as ws:
            connect = Packet(Command.CNXN, 0x01000001, 1024 * 1024, b"host::\0")
            await ws.send_message(encode_packet(connect))
            decoder = PacketDecoder()
            packets: list[Packet] = []
            while not packets:
                message = await ws.get_message()
                assert isinstance(message, bytes), "ADB travels in binary messages"
                packets = decoder.feed(message)
            assert packets[0].command is Command.CNXN
            assert b"device::" in packets[0].data
            await rig.delete(instance)  # the instance ends: so does its ADB WebSocket
            with pytest.raises(trio_websocket.ConnectionClosed):
                while True:
                    await ws.get_message()


async def test_adb_refuses_the_stream_token_and_ios(rig: Rig) -> None:
    android = await rig.create("android")
    ios = await rig.create("ios")
    cases = [
        (android["status"]["adbWebSocketUrl"], android["status"]["streamToken"], 403),
        (
            android["status"]["adbWebSocketUrl"].replace(
                android["metadata"]["id"], ios["metadata"]["id"]
            ),
            ios["status"]["token"],
            400,
        ),
    ]
    for url, token, status_code in cases:
        refused, _ = await upgrade_refusal(url, {"Authorization": f"Bearer {token}"})
        assert refused == status_code
