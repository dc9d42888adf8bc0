"""``spec.sandbox.playwrightAndroid`` against ``devyard up`` (real processes, issue 15).

Playwright for Python's ``chromium.connect_over_cdp`` reaches the instance's headless Chromium
through the edge (``status.sandbox.playwrightAndroid.url``), opens a page on a loopback HTTP
server of the test, evaluates script and takes a screenshot; the device's own screenshot then
shows that page. The page server is on 127.0.0.2, which the host's network policy refuses to
devices (and so to their browser): it is reached the way an organization reaches its private
servers, through a tunnel held by a real ``devyard connector`` (the browser dials through the
instance's egress like its device). A Chrome flag entry of ``spec.initialAssets`` reaches the
browser's command line; deleting the instance ends the Chromium processes.

Playwright's async API needs asyncio while these tests run under trio: it lives on an asyncio
loop in a thread of its own (`AsyncioThread`), as in tests/server/gateway/test_viewer.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import signal
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
import trio
from PIL import Image

from ._cli import DEVYARD, Running, clean_env, start

try:
    from playwright.async_api import Playwright, async_playwright
except ImportError:  # pragma: no cover - depends on the environment
    HAVE_PLAYWRIGHT = False
else:
    HAVE_PLAYWRIGHT = True

CHROMIUM = Path("/usr/bin/chromium")
T = TypeVar("T")
MARKER = "devyard-cdp-marker"
AGENT = "devyard-sandbox-agent/1"
PAGE = (
    b"<!doctype html><title>" + MARKER.encode() + b"</title>"
    b"<body style='margin:0;background:#e01010'><h1>" + MARKER.encode() + b"</h1></body>"
)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not HAVE_PLAYWRIGHT, reason="playwright is not installed"),
    pytest.mark.skipif(not CHROMIUM.exists(), reason=f"{CHROMIUM} is missing (scripts/deps)"),
]


class AsyncioThread:
    """An asyncio loop in its own thread; `call` awaits a coroutine function there from trio."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()

    async def call(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        future = asyncio.run_coroutine_threadsafe(_awaited(fn, *args), self._loop)
        return await trio.to_thread.run_sync(future.result)

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(30)
        self._loop.close()


async def _until(check: Callable[[], Awaitable[bool]], seconds: float) -> None:
    """Poll *check* until it is true; fail the test after *seconds*."""
    with trio.fail_after(seconds):
        while not await check():  # noqa: ASYNC110 - another process's state
            await trio.sleep(0.05)


async def _awaited(fn: Callable[..., Awaitable[T]], *args: Any) -> T:
    return await fn(*args)


class PageServer:
    """An HTTP server on a private address that answers every request with `PAGE`."""

    def __init__(self) -> None:
        self.hits = 0

    async def handle(self, stream: trio.SocketStream) -> None:
        async with stream:
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = await stream.receive_some()
                if not chunk:
                    return
                data += chunk
            self.hits += 1
            head = b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: %d\r\n"
            await stream.send_all(head % len(PAGE) + b"Connection: close\r\n\r\n" + PAGE)


def _chromium_pids(instance_id: str) -> set[int]:
    """Processes whose command line names the instance's browser profile."""
    pids = set()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            cmdline = Path(f"/proc/{entry.name}/cmdline").read_bytes()
            if f"/{instance_id}/browser/profile".encode() in cmdline:
                pids.add(int(entry.name))
    return pids


def _red_share(png: bytes, box: tuple[float, float, float, float]) -> float:
    """The share of the pixels in *box* (fractions of the picture) that are the page's red."""
    with Image.open(io.BytesIO(png)) as image:
        rgb = image.convert("RGB")
        w, h = rgb.size
        crop = rgb.crop((int(box[0] * w), int(box[1] * h), int(box[2] * w), int(box[3] * h)))
        raw = crop.tobytes()
    pixels = [raw[i : i + 3] for i in range(0, len(raw), 3)]
    red = sum(1 for r, g, b in pixels if r > 180 and g < 80 and b < 80)
    return red / max(1, len(pixels))


@asynccontextmanager
async def _up_with_tunnel(tmp_path: Path) -> AsyncIterator[tuple[httpx.AsyncClient, int]]:
    data = tmp_path / "data"
    server = PageServer()
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, server.handle, 0, host="127.0.0.2"))
        port = int(listeners[0].socket.getsockname()[1])
        up: Running = await start(
            ["up", "--data-dir", str(data), "--port", "0"], clean_env(), tmp_path
        )
        url = (await up.read_until(r"serving at (http://127\.0\.0\.1:\d+)")).group(1)
        key = (data / "admin-api-key").read_text().strip()
        connector: trio.Process | None = None
        try:
            async with httpx.AsyncClient(
                base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=60
            ) as http:
                created = await http.post(
                    "/v1/tunnels", json={"name": "web", "selectors": [f"127.0.0.2:{port}"]}
                )
                assert created.status_code == 200, created.text
                token_file = tmp_path / "web-token"
                token_file.write_text(created.json()["token"])
                connector = await trio.lowlevel.open_process(
                    [
                        *DEVYARD,
                        "connector",
                        "run",
                        "--server",
                        url,
                        "--token-file",
                        str(token_file),
                    ],
                    env=clean_env(),
                )

                async def online() -> bool:
                    return bool((await http.get("/v1/tunnels/web")).json()["status"] == "online")

                await _until(online, 30)
                yield http, port
            assert server.hits >= 1, "the page came from the test's server, through the tunnel"
        finally:
            if connector is not None:
                connector.send_signal(signal.SIGTERM)
            assert await up.stop(signal.SIGTERM) == 0
            if connector is not None:
                await connector.wait()
            nursery.cancel_scope.cancel()


async def _create(http: httpx.AsyncClient, spec: dict[str, Any]) -> httpx.Response:
    while True:  # until the companion host daemon has registered there is no capacity
        created = await http.post(
            "/v1/android_instances", params={"wait": "true"}, json={"spec": spec}
        )
        if created.status_code != 409:
            return created
        await trio.sleep(0.1)


async def _drive(
    playwright: Playwright, cdp_url: str, headers: dict[str, str], page_url: str
) -> dict[str, Any]:
    browser = await playwright.chromium.connect_over_cdp(cdp_url, headers=headers, timeout=30_000)
    context = browser.contexts[0] if browser.contexts else await browser.new_context()
    page = await context.new_page()
    await page.goto(page_url, timeout=30_000)
    found = await page.evaluate("() => [document.title, navigator.userAgent, 6 * 7]")
    shot = await page.screenshot()
    return {"browser": browser, "page": page, "evaluated": found, "screenshot": shot}


async def test_playwright_drives_the_instances_browser_and_the_device_shows_it(
    tmp_path: Path,
) -> None:
    loop = AsyncioThread()
    playwright: Playwright | None = None
    try:
        playwright = await loop.call(lambda: async_playwright().start())
        with trio.fail_after(240):
            async with _up_with_tunnel(tmp_path) as (http, port):
                refused = await _create(http, {
                    "sandbox": {"playwrightAndroid": {"enabled": True}},
                    "initialAssets": [{"kind": "Configuration", "configuration": {
                        "kind": "ChromeFlag", "chromeFlag": "--remote-debugging-address=0.0.0.0"}}],
                })  # fmt: skip
                assert refused.status_code == 422, refused.text
                assert "remote-debugging-address" in refused.json()["message"]

                created = await _create(http, {
                    "tunnel": "web",
                    "sandbox": {"playwrightAndroid": {"enabled": True}},
                    "initialAssets": [{"kind": "Configuration", "configuration": {
                        "kind": "ChromeFlag", "chromeFlag": f"--user-agent={AGENT}"}}],
                })  # fmt: skip
                assert created.status_code == 200, created.text
                instance = created.json()
                instance_id, status = instance["id"], instance["status"]
                assert "sandbox" in status, instance
                cdp_url = status["sandbox"]["playwrightAndroid"]["url"]
                assert cdp_url.startswith("ws://") and cdp_url.endswith(f"/{instance_id}/cdp")
                token = {"Authorization": f"Bearer {status['token']}"}
                assert _chromium_pids(instance_id), "a Chromium runs for the instance"

                # No token, a wrong token: refused before any upgrade or discovery.
                http_url = "http" + cdp_url.removeprefix("ws")
                async with httpx.AsyncClient(timeout=30) as client:
                    bare = await client.get(f"{http_url}/json/version")
                    assert bare.status_code == 401, bare.text
                    wrong = await client.get(
                        f"{http_url}/json/version", headers={"Authorization": "Bearer nope"}
                    )
                    assert wrong.status_code in (401, 403), wrong.text
                    version = await client.get(f"{http_url}/json/version/", headers=token)
                    assert version.status_code == 200, version.text
                    assert version.json()["Browser"].startswith(("Chrome/", "HeadlessChrome/"))
                    assert version.json()["webSocketDebuggerUrl"] == cdp_url

                # Playwright over the ws URL, with the token as a header.
                page_url = f"http://127.0.0.2:{port}/"
                assert playwright is not None
                driven = await loop.call(_drive, playwright, cdp_url, token, page_url)
                assert driven["evaluated"] == [MARKER, AGENT, 42]
                assert _red_share(driven["screenshot"], (0.1, 0.6, 0.9, 0.9)) > 0.9

                # The device shows the page once its browser is in the foreground.
                api = status["apiUrl"]
                async with httpx.AsyncClient(headers=token, timeout=30) as device:
                    opened = await device.post(f"{api}/open-url", json={"url": page_url})
                    assert opened.status_code == 200, opened.text

                    async def shows_the_page() -> bool:
                        shot = await device.get(f"{api}/screenshot")
                        assert shot.status_code == 200
                        return _red_share(shot.content, (0.1, 0.5, 0.9, 0.8)) > 0.9

                    await _until(shows_the_page, 20)
                await loop.call(driven["browser"].close)

                # The http URL with ?token= (a tool that takes one bare URL): discovery works.
                query_url = f"{http_url}?token={status['token']}"
                again = await loop.call(_drive, playwright, query_url, {}, page_url)
                assert again["evaluated"][0] == MARKER
                await loop.call(again["browser"].close)

                pids = _chromium_pids(instance_id)
                deleted = await http.delete(f"/v1/android_instances/{instance_id}")
                assert deleted.status_code == 200, deleted.text

                async def browser_gone() -> bool:
                    await trio.lowlevel.checkpoint()
                    alive = [p for p in pids if not _ended(p)]
                    return not alive and not _chromium_pids(instance_id)

                await _until(browser_gone, 20)
    finally:
        if playwright is not None:
            await loop.call(playwright.stop)
        loop.close()


def _ended(pid: int) -> bool:
    """The process is gone (or a zombie its parent has not reaped yet)."""
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    return True
