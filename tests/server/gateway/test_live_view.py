"""The live view's protocol 2 (docs/live-view.md) through the edge: H.264 decoded by WebCodecs
in headless Chromium, the JPEG fallback the page negotiates without it, and the H.264 stream
decoded here with PyAV. (Protocol 1 viewers: test_streams.py and test_viewer.py.)"""

from __future__ import annotations

import base64
import io
import json
import struct
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, TypeVar

import av
import httpx
import pytest
import trio
import trio_websocket
from PIL import Image, ImageChops, ImageStat

from tests.browser import NEEDS_CHROMIUM, BrowserThread

from .conftest import Rig
from .test_viewer import _devyard, _wait, open_page

if TYPE_CHECKING:
    from playwright.async_api import Page

T = TypeVar("T")
_V2 = struct.Struct(">BBQIQ")  # kind, flags, pts us, seq, capture us
_STEP_S = 10.0


@pytest.fixture(scope="module")
def chromium() -> Iterator[BrowserThread]:
    browser = BrowserThread()
    try:
        yield browser
    finally:
        browser.close()


def _needs_chromium(test: T) -> T:
    for mark in NEEDS_CHROMIUM:
        test = mark(test)  # type: ignore[assignment]  # (a mark returns what it decorates)
    return test


def _difference(a: Image.Image, b: Image.Image) -> float:
    diff = ImageChops.difference(a.convert("RGB"), b.convert("RGB"))
    return sum(ImageStat.Stat(diff).mean) / 3


async def _canvas(chromium: BrowserThread, page: Page) -> Image.Image:
    url: str = await chromium.call(
        page.evaluate, "() => document.getElementById('screen').toDataURL('image/png')"
    )
    return Image.open(io.BytesIO(base64.b64decode(url.partition(",")[2])))


async def _screenshot(client: httpx.AsyncClient, status: dict[str, Any]) -> Image.Image:
    headers = {"Authorization": f"Bearer {status['token']}"}
    response = await client.get(status["apiUrl"] + "/screenshot", headers=headers)
    assert response.status_code == 200, response.text
    return Image.open(io.BytesIO(response.content))


async def _webcodecs_h264(chromium: BrowserThread, page: Page) -> bool:
    supported: bool = await chromium.call(
        page.evaluate,
        "async () => typeof VideoDecoder === 'function' &&"
        " (await VideoDecoder.isConfigSupported({codec: 'avc1.42C01F'})).supported",
    )
    return supported


async def _watch(
    rig: Rig, chromium: BrowserThread, page: Page, query: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Open the viewer on a new instance; return (instance status, window.devyard)."""
    instance = await rig.create("android")
    status = instance["status"]
    response = await chromium.call(page.goto, status["signedStreamUrl"] + query)
    assert response is not None and response.status == 200
    await _wait(chromium, page, "() => window.devyard.decoded > 0")
    return status, await _devyard(chromium, page)


@_needs_chromium
async def test_the_page_decodes_h264_with_webcodecs(rig: Rig, chromium: BrowserThread) -> None:
    async with httpx.AsyncClient() as client, open_page(chromium) as page:
        with trio.fail_after(3 * _STEP_S):
            status, state = await _watch(rig, chromium, page, "&stats")
            # Debian's headless Chromium has WebCodecs with H.264; where a build does not, the
            # page negotiates JPEG (the next test forces that path everywhere).
            assert await _webcodecs_h264(chromium, page), "this Chromium cannot decode H.264"
            assert (state["protocol"], state["codec"], state["lastError"]) == (2, "h264", None)
            assert _difference(await _canvas(chromium, page), await _screenshot(client, status)) < 4
            # input through the page changes the device; the change arrives as a delta frame
            decoded = state["decoded"]
            box = await chromium.call(page.locator("#screen").bounding_box)
            assert box is not None
            x, y = box["x"] + box["width"] / 3, box["y"] + box["height"] / 3
            await chromium.call(page.mouse.move, x, y)
            await chromium.call(page.mouse.down)
            await _wait(chromium, page, "n => window.devyard.decoded > n", decoded)
            await chromium.call(page.mouse.up)
            # one evaluate reads both, so a frame decoded in between cannot split them
            state, samples = await chromium.call(
                page.evaluate, "() => [{...window.devyard}, [...window.devyardSamples]]"
            )
            assert state["lastError"] is None and state["waitingForKey"] == 0
            assert len(samples) == state["decoded"]
            assert all(0 <= latency < 5000 for _, latency in samples), samples
            await _wait(
                chromium,
                page,
                "() => document.getElementById('stats').textContent.startsWith('h264')",
            )


@_needs_chromium
async def test_without_webcodecs_the_page_negotiates_jpeg(
    rig: Rig, chromium: BrowserThread
) -> None:
    async with httpx.AsyncClient() as client, open_page(chromium) as page:
        with trio.fail_after(3 * _STEP_S):
            # (?codec=jpeg makes the page act as one without VideoDecoder)
            status, state = await _watch(rig, chromium, page, "&codec=jpeg")
            assert (state["protocol"], state["codec"], state["lastError"]) == (2, "jpeg", None)
            assert _difference(await _canvas(chromium, page), await _screenshot(client, status)) < 4
            samples = await chromium.call(page.evaluate, "() => window.devyardSamples")
            assert samples and all(0 <= latency < 5000 for _, latency in samples)


async def _next(ws: trio_websocket.WebSocketConnection) -> str | bytes:
    message: str | bytes = await ws.get_message()
    return message


async def _next_json(ws: trio_websocket.WebSocketConnection) -> dict[str, Any]:
    while isinstance(message := await _next(ws), bytes):
        pass
    value: dict[str, Any] = json.loads(message)
    return value


async def test_protocol_2_h264_decodes_and_carries_seq_and_capture_time(rig: Rig) -> None:
    instance = await rig.create("android")
    status = instance["status"]
    url = f"{status['endpointWebSocketUrl']}?token={status['streamToken']}"
    decoder = av.CodecContext.create("h264", "r")
    with trio.fail_after(3 * _STEP_S):
        async with trio_websocket.open_websocket_url(url) as ws:
            hello = await _next_json(ws)
            assert (hello["protocol"], hello["protocols"]) == (1, [1, 2])
            assert hello["codecs"] == ["jpeg", "h264"]
            # protocol 1 frames cannot carry H.264; protocol 2 refuses codecs nobody offers
            await ws.send_message(json.dumps({"type": "start", "codec": "h264"}))
            assert (await _next_json(ws))["message"] == "protocol 1 streams jpeg only"
            await ws.send_message(json.dumps({"type": "start", "protocol": 2, "accept": "vp9"}))
            refused = await _next_json(ws)
            assert refused["type"] == "error" and "none of 'vp9'" in refused["message"]

            start: dict[str, Any] = {"type": "start", "protocol": 2, "accept": "av1,h264,jpeg"}
            await ws.send_message(json.dumps({**start, "ackWindow": 65}))
            refused = await _next_json(ws)
            assert refused["message"] == "start: 'ackWindow' must be an integer from 0 to 64"
            await ws.send_message(json.dumps({**start, "maxFps": 60, "ackWindow": 1}))
            assert await _next_json(ws) == {"type": "started", "protocol": 2, "codec": "h264"}
            seqs, keys = [], []
            for step in range(6):
                message = await _next(ws)
                assert isinstance(message, bytes)
                kind, flags, _pts, seq, capture_us = _V2.unpack_from(message)
                assert kind == 1  # H.264
                assert 0 < time.time() * 1e6 - capture_us < 10e6  # the host's clock, here
                seqs.append(seq)
                # with a window of one, the next frame waits for this ack
                await ws.send_message(json.dumps({"type": "ack", "count": step + 1}))
                keys.append(flags & 1)
                (picture,) = decoder.decode(av.Packet(message[_V2.size :]))
                assert isinstance(picture, av.VideoFrame)
                assert (picture.width, picture.height) == (hello["width"], hello["height"])
                touch = {"type": "touch", "pointerId": 0, "action": "down" if step == 0 else "move"}
                await ws.send_message(json.dumps({**touch, "x": 0.2 + step / 20, "y": 0.5}))
            assert keys == [1, 0, 0, 0, 0, 0]
            assert seqs == list(range(seqs[0], seqs[0] + 6))
