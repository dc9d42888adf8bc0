"""The browser sandbox of an instance (spec 2.1 ``sandbox.playwrightAndroid``, docs/sandbox.md).

`run_browser_sandbox` runs an instance's `Chromium` and, while it runs,

- registers it for the device (`sandbox_of`), so the ``cdp`` streams the edge opens
  (docs/protocol.md 6, `serve_cdp`) reach its DevTools server: ``json/version`` is answered
  with the browser's version document (the edge points its ``webSocketDebuggerUrl`` at itself),
  any other path is a WebSocket to the browser (``devtools/...`` as given, else the browser
  endpoint), its messages relayed as relay messages;
- shows its page on a device that can (`PageScreen`, the virtual Android): while the browser
  app is in the foreground, the newest page target is captured (CDP ``Page.captureScreenshot``)
  every `SHOW_EVERY_S` and becomes the browser's content on the device screen and stream; a URL
  the device opens (``openUrl``, ``am start -d``, typing into the address field) is navigated
  to in that page.
"""

from __future__ import annotations

import base64
import itertools
import json
import logging
import weakref
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Final, Protocol, runtime_checkable

import attrs
import trio
from trio_websocket import ConnectionClosed, HandshakeError, WebSocketConnection, wrap_client_stream

from ...core import MuxStream, accept_open, reject_open
from ...core.channel import RelayChannel
from ...core.chrome_flags import chrome_flags
from ...core.relay import MAX_RELAY_MESSAGE
from ..drivers import DeviceDriver, DeviceError
from .chromium import BrowserConfig, BrowserDial, Chromium

log = logging.getLogger(__name__)

__all__ = [
    "SHOW_EVERY_S",
    "PageScreen",
    "browser_config",
    "run_browser_sandbox",
    "sandbox_of",
    "serve_cdp",
    "wants_browser",
]

SHOW_EVERY_S: Final = 0.5
_CALL_TIMEOUT_S: Final = 10.0

_SANDBOXES: weakref.WeakKeyDictionary[object, Chromium] = weakref.WeakKeyDictionary()


@runtime_checkable
class PageScreen(Protocol):
    """A device whose screen can show the browser sandbox's page (the virtual device)."""

    def browser_shown(self) -> bool: ...
    def browser_url(self) -> str: ...
    def page_viewport(self) -> tuple[int, int]: ...
    def show_page(self, png: bytes, url: str) -> None: ...


def wants_browser(spec: Mapping[str, Any]) -> bool:
    """Whether the instance's spec asks for the browser sandbox."""
    sandbox = spec.get("sandbox") or {}
    return bool((sandbox.get("playwrightAndroid") or {}).get("enabled", False))


def browser_config(spec: Mapping[str, Any], base: BrowserConfig | None = None) -> BrowserConfig:
    """The browser's configuration: *base* with the spec's Chrome flags (`ChromeFlagError`)."""
    config = BrowserConfig() if base is None else base
    flags = tuple(chrome_flags(spec.get("initialAssets") or []))
    return attrs.evolve(config, flags=flags)


def sandbox_of(device: object) -> Chromium | None:
    return _SANDBOXES.get(device)


async def run_browser_sandbox(
    device: DeviceDriver,
    sandbox_dir: Path,
    config: BrowserConfig,
    dial: BrowserDial,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run the instance's browser until cancelled (see the module doc); `DeviceError` if it
    fails. Started (``nursery.start``) once its DevTools server answers."""
    info = device.describe()
    if isinstance(device, PageScreen):
        width, height = device.page_viewport()
        config = attrs.evolve(config, width=max(200, width), height=max(200, height))
    chromium = Chromium(info.instance_id, sandbox_dir, config, dial)
    async with trio.open_nursery() as nursery:
        await nursery.start(chromium.run)
        _SANDBOXES[device] = chromium
        try:
            if isinstance(device, PageScreen):
                nursery.start_soon(_show_pages, chromium, device)
            task_status.started()
            await trio.sleep_forever()
        finally:
            _SANDBOXES.pop(device, None)


# ---- a small CDP client -------------------------------------------------------------------


class _Cdp:
    """Sequential CDP calls on one browser connection (events are read and dropped)."""

    def __init__(self, ws: WebSocketConnection) -> None:
        self._ws = ws
        self._ids = itertools.count(1)

    async def call(
        self, method: str, params: Mapping[str, Any] | None = None, session: str | None = None
    ) -> dict[str, Any]:
        call_id = next(self._ids)
        message: dict[str, Any] = {"id": call_id, "method": method, "params": dict(params or {})}
        if session is not None:
            message["sessionId"] = session
        with trio.fail_after(_CALL_TIMEOUT_S):
            await self._ws.send_message(json.dumps(message))
            while True:
                answer = json.loads(await self._ws.get_message())
                if answer.get("id") == call_id:
                    break
        if "error" in answer:
            raise DeviceError(f"CDP {method}: {answer['error'].get('message')}")
        result: dict[str, Any] = answer.get("result", {})
        return result


@asynccontextmanager
async def _devtools(
    chromium: Chromium, path: str, max_message: int
) -> AsyncIterator[WebSocketConnection]:
    """A WebSocket to the browser's DevTools *path*. The TCP stream is ours, and closed
    whatever happens (trio-websocket's own close may not finish under cancellation)."""
    tcp = await trio.open_tcp_stream("127.0.0.1", chromium.port)
    try:
        async with trio.open_nursery() as nursery:
            ws = await wrap_client_stream(
                nursery, tcp, "127.0.0.1", path, max_message_size=max_message
            )
            try:
                yield ws
            finally:
                nursery.cancel_scope.cancel()
    finally:
        await trio.aclose_forcefully(tcp)


async def _show_pages(chromium: Chromium, screen: PageScreen) -> None:
    """Until cancelled; if the browser's connection breaks, the browser's own task reports
    why (its exit ends the instance), so this one just stops."""
    try:
        async with _devtools(chromium, chromium.browser_path, MAX_RELAY_MESSAGE * 4) as ws:
            await _show_loop(_Cdp(ws), screen, chromium.instance_id)
    except (ConnectionClosed, HandshakeError, OSError) as exc:
        log.info("browser of %s: the screen lost its connection: %r", chromium.instance_id, exc)


async def _show_loop(cdp: _Cdp, screen: PageScreen, instance_id: str) -> None:
    seen: list[str] = []  # page target ids, in the order they first appeared
    sessions: dict[str, str] = {}
    navigated = screen.browser_url()
    while True:
        await trio.sleep(SHOW_EVERY_S)
        if not screen.browser_shown():
            continue
        try:
            navigated = await _show_once(cdp, screen, seen, sessions, navigated)
        except (DeviceError, trio.TooSlowError) as exc:
            log.debug("browser of %s: no picture this time: %s", instance_id, exc)


async def _show_once(
    cdp: _Cdp, screen: PageScreen, seen: list[str], sessions: dict[str, str], navigated: str
) -> str:
    """Capture the newest page onto *screen*; navigate it first when the device's browser
    URL changed since it was last shown. Returns the URL shown."""
    targets = (await cdp.call("Target.getTargets"))["targetInfos"]
    pages = {t["targetId"]: t for t in targets if t.get("type") == "page"}
    seen[:] = [t for t in seen if t in pages] + [t for t in pages if t not in seen]
    if not seen:
        return navigated
    target = seen[-1]
    for gone in set(sessions) - set(pages):
        del sessions[gone]
    if target not in sessions:
        attached = await cdp.call("Target.attachToTarget", {"targetId": target, "flatten": True})
        sessions[target] = str(attached["sessionId"])
    session = sessions[target]
    wanted = screen.browser_url()
    if wanted and wanted != navigated and wanted != pages[target].get("url"):
        await cdp.call("Page.navigate", {"url": wanted}, session=session)
    shot = await cdp.call("Page.captureScreenshot", {"format": "png"}, session=session)
    info = await cdp.call("Target.getTargetInfo", {"targetId": target})
    url = str(info.get("targetInfo", {}).get("url", ""))
    screen.show_page(base64.b64decode(shot["data"]), url)
    return url


# ---- the ``cdp`` stream kind ---------------------------------------------------------------


async def serve_cdp(stream: MuxStream, device: DeviceDriver, request: Mapping[str, Any]) -> None:
    """One ``cdp`` stream (see the module doc)."""
    chromium = sandbox_of(device)
    if chromium is None:
        await reject_open(
            stream, "bad-request",
            "this instance has no browser sandbox (spec.sandbox.playwrightAndroid.enabled)",
        )  # fmt: skip
        return
    path = str(request.get("path", "")).strip("/")
    if path in ("json/version", "json/version/"):
        await accept_open(stream)
        document = {k: v for k, v in chromium.version.items() if k != "webSocketDebuggerUrl"}
        await RelayChannel(stream).send(json.dumps(document))
        return
    target = "/" + path if path.startswith("devtools/") else chromium.browser_path
    try:
        async with _devtools(chromium, target, MAX_RELAY_MESSAGE) as ws:
            await accept_open(stream)
            await _relay(RelayChannel(stream), ws)
    except HandshakeError as exc:
        await reject_open(stream, "not-found", f"no DevTools endpoint /{path}: {exc}")


async def _relay(channel: RelayChannel, ws: WebSocketConnection) -> None:
    async def to_browser(cancel: trio.CancelScope) -> None:
        while True:
            try:
                message = await channel.receive()
            except trio.EndOfChannel:
                break
            await ws.send_message(message)
        cancel.cancel()

    async def from_browser(cancel: trio.CancelScope) -> None:
        try:
            while True:
                await channel.send(await ws.get_message())
        except ConnectionClosed:
            pass
        cancel.cancel()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(to_browser, nursery.cancel_scope)
        nursery.start_soon(from_browser, nursery.cancel_scope)
