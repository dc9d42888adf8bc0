"""The viewer page (``signedStreamUrl``) in a real headless Chromium, driven by Playwright
(tests/browser.py: Debian's Chromium on an asyncio loop of its own, called from trio).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import httpx
import pytest
import trio

from tests.browser import NEEDS_CHROMIUM, BrowserThread

from .conftest import Rig, upgrade_refusal

if TYPE_CHECKING:
    from playwright.async_api import Page

pytestmark = NEEDS_CHROMIUM

_STEP_S = 10.0  # the bound of each step of a test, in trio and in Playwright
_STEP_MS = _STEP_S * 1000


@pytest.fixture(scope="module")
def chromium() -> Iterator[BrowserThread]:
    browser = BrowserThread()
    try:
        yield browser
    finally:
        browser.close()


@asynccontextmanager
async def open_page(chromium: BrowserThread) -> AsyncIterator[Page]:
    """A fresh page in a fresh browser context, closed on the way out."""
    browser = chromium.browser
    assert browser is not None

    async def new_page() -> Page:  # on the browser's loop, as every Playwright call
        context = await browser.new_context(viewport={"width": 800, "height": 900})
        context.set_default_timeout(_STEP_MS)
        try:
            return await context.new_page()
        except BaseException:
            await context.close()
            raise

    page = await chromium.call(new_page)
    try:
        yield page
    finally:
        with trio.CancelScope(shield=True), trio.move_on_after(_STEP_S):
            await chromium.call(page.context.close)


async def _devyard(chromium: BrowserThread, page: Page) -> dict[str, Any]:
    value: dict[str, Any] = await chromium.call(page.evaluate, "() => ({...window.devyard})")
    return value


async def _wait(chromium: BrowserThread, page: Page, expression: str, arg: Any = None) -> None:
    await chromium.call(page.wait_for_function, expression, arg=arg, timeout=_STEP_MS, polling=50)


async def _canvas_png(chromium: BrowserThread, page: Page) -> str:
    value: str = await chromium.call(
        page.evaluate, "() => document.getElementById('screen').toDataURL('image/png')"
    )
    return value


class Device:
    """The instance's device API (``apiUrl``) with its full token."""

    def __init__(self, client: httpx.AsyncClient, instance: dict[str, Any]) -> None:
        status = instance["status"]
        self.client = client
        self.url = status["apiUrl"]
        self.headers = {"Authorization": f"Bearer {status['token']}"}

    async def get(self, path: str) -> httpx.Response:
        response = await self.client.get(self.url + path, headers=self.headers)
        assert response.status_code == 200, response.text
        return response

    async def screenshot(self) -> bytes:
        return (await self.get("/screenshot")).content

    async def screen_changes(self, before: bytes) -> bytes:
        while (after := await self.screenshot()) == before:  # noqa: ASYNC110 (polls the API)
            await trio.sleep(0.05)
        return after

    async def input_logs(self) -> list[str]:
        items = (await self.get("/logs")).json()["items"]
        return [item["message"] for item in items if item["tag"] == "Input"]


@asynccontextmanager
async def watching(rig: Rig, chromium: BrowserThread) -> AsyncIterator[tuple[Page, Device]]:
    """A ready Android instance and the viewer page on its ``signedStreamUrl``, streaming."""
    with trio.fail_after(_STEP_S):
        instance = await rig.create("android")
    async with httpx.AsyncClient() as client, open_page(chromium) as page:
        device = Device(client, instance)
        with trio.fail_after(_STEP_S):
            response = await chromium.call(page.goto, instance["status"]["signedStreamUrl"])
            assert response is not None and response.status == 200
            await _wait(chromium, page, "() => window.devyard.decoded > 0")
        yield page, device


async def test_frames_arrive_and_fill_the_canvas_at_the_device_size(
    rig: Rig, chromium: BrowserThread
) -> None:
    async with watching(rig, chromium) as (page, device):
        with trio.fail_after(_STEP_S):
            described = (await device.get("/")).json()
            state = await _devyard(chromium, page)
            assert state["state"] == "streaming"
            assert state["lastError"] is None
            assert state["sent"] >= 1  # start
            hello = state["hello"]
            assert (hello["width"], hello["height"]) == (described["width"], described["height"])
            size = await chromium.call(
                page.evaluate,
                "() => { const c = document.getElementById('screen');"
                " return [c.width, c.height]; }",
            )
            assert size == [described["width"], described["height"]]
            # The canvas shows the device's picture, not the blank canvas it started with.
            blank = await chromium.call(
                page.evaluate,
                "([w, h]) => { const c = document.createElement('canvas');"
                " c.width = w; c.height = h; return c.toDataURL('image/png'); }",
                size,
            )
            assert await _canvas_png(chromium, page) != blank
            title = await chromium.call(page.text_content, "#title")
            assert title is not None and described["instanceId"] in title
            assert await chromium.call(page.text_content, "#status") == "live"


async def test_a_click_on_the_canvas_touches_the_device(rig: Rig, chromium: BrowserThread) -> None:
    async with watching(rig, chromium) as (page, device):
        with trio.fail_after(_STEP_S):
            described = (await device.get("/")).json()
            before = await device.screenshot()
            canvas_before = await _canvas_png(chromium, page)
            decoded = (await _devyard(chromium, page))["decoded"]
            box = await chromium.call(page.locator("#screen").bounding_box)
            assert box is not None
            # A quarter of the way in: the page must map CSS pixels to device pixels.
            await chromium.call(
                page.mouse.click, box["x"] + box["width"] / 4, box["y"] + box["height"] / 4
            )
            await device.screen_changes(before)
            await _wait(chromium, page, "n => window.devyard.decoded > n", decoded)
            await _wait(
                chromium,
                page,
                "before => document.getElementById('screen').toDataURL('image/png') !== before",
                canvas_before,
            )
            # the screen changed on the touch down; the touch up may still be on its way
            logs = await device.input_logs()
            while not any(m.startswith("touch up") for m in logs):
                await trio.sleep(0.02)
                logs = await device.input_logs()
            x, y = described["width"] // 4, described["height"] // 4
            downs = [m for m in logs if m.startswith("touch down")]
            assert len(downs) == 1, logs
            px, py = (int(v) for v in downs[0].rsplit(" at ", 1)[1].split(","))
            assert abs(px - x) <= 2 and abs(py - y) <= 2, (downs, x, y)


async def test_typing_on_the_focused_canvas_reaches_the_device(
    rig: Rig, chromium: BrowserThread
) -> None:
    async with watching(rig, chromium) as (page, device):
        with trio.fail_after(_STEP_S):
            await chromium.call(page.focus, "#screen")
            focused = await chromium.call(page.evaluate, "() => document.activeElement.id")
            assert focused == "screen"
            before = await device.screenshot()
            canvas_before = await _canvas_png(chromium, page)
            await chromium.call(page.keyboard.type, "hi")
            await device.screen_changes(before)
            await _wait(
                chromium,
                page,
                "before => document.getElementById('screen').toDataURL('image/png') !== before",
                canvas_before,
            )
            # the screen changed on the first key; the second may still be on its way
            logs = await device.input_logs()
            while logs.count("text (1 characters)") < 2:
                await trio.sleep(0.02)
                logs = await device.input_logs()
            assert logs.count("text (1 characters)") == 2, logs
            assert (await _devyard(chromium, page))["lastError"] is None


async def test_a_wrong_token_shows_no_frames(rig: Rig, chromium: BrowserThread) -> None:
    with trio.fail_after(_STEP_S):
        instance = await rig.create("android")
    good = instance["status"]["signedStreamUrl"]
    endpoint = instance["status"]["endpointWebSocketUrl"] + "?token=dys_wrong"
    async with open_page(chromium) as page:
        with trio.fail_after(_STEP_S):
            # The page itself needs the token...
            response = await chromium.call(page.goto, good.split("?")[0] + "?token=dys_wrong")
            assert response is not None and response.status == 401
            assert await chromium.call(page.query_selector, "#screen") is None
            # ... and so does its WebSocket: load the real page, but let it read a wrong token.
            console: list[str] = []

            async def listen() -> None:
                page.on("console", lambda message: console.append(message.text))

            await chromium.call(listen)
            await chromium.call(
                page.add_init_script,
                "history.replaceState(null, '', location.pathname + '?token=dys_wrong')",
            )
            response = await chromium.call(page.goto, good)
            assert response is not None and response.status == 200
            await _wait(chromium, page, "() => window.devyard.state === 'refused'")
            status, body = await upgrade_refusal(endpoint)
            assert (status, body["reason"]) == (401, "unauthorized")
            # The page says why and stops: no retries against a refusal that cannot change.
            await trio.sleep(1.5)  # past the first retry's delay
            state = await _devyard(chromium, page)
            assert (state["frames"], state["decoded"], state["hello"]) == (0, 0, None), state
            assert state["lastError"] == body["message"]
            assert await chromium.call(page.text_content, "#status") == body["message"]
            assert await chromium.call(page.get_attribute, "#status", "class") == "error"
            attempts = [m for m in console if m.startswith("WebSocket connection to")]
            assert len(attempts) == 1 and "/endpoint?token=dys_wrong" in attempts[0], console
