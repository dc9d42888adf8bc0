"""``spec.initialAssets`` on the host: download each app the order lists and install it on the
device before the instance is reported ready.

The server resolved the entries (docs/assets.md): each has a ``url`` the host can GET without
a key (a signed asset URL, or the user's own URL) and, for assets, the ``md5`` the bytes must
have. Files stream to ``<sandbox>/initial-assets/`` (never whole in memory), are checked, then
installed in order; ``launchMode: ForegroundIfRunning`` brings the app to the foreground once
installed. Any failure is an `InitialAssetError` (a `DeviceError`), so the instance ends with
that message instead of becoming ready without its apps.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final, Protocol, runtime_checkable

import httpx
import trio

from .drivers import DeviceDriver, DeviceError

__all__ = [
    "DOWNLOAD_TIMEOUT",
    "InitialAssetError",
    "forced_app",
    "install_initial_assets",
    "keep_in_foreground",
]

log = logging.getLogger(__name__)

DOWNLOAD_TIMEOUT: Final = httpx.Timeout(30.0)  # per connect / read, not for the whole file
_UNSAFE: Final = re.compile(r"[^A-Za-z0-9._-]")


class InitialAssetError(DeviceError):
    """An initial app could not be downloaded or installed."""


def _file_name(index: int, entry: dict[str, Any]) -> str:
    base = str(entry.get("name") or "app").rstrip("/").rsplit("/", 1)[-1].split("?", 1)[0]
    return f"{index}-{_UNSAFE.sub('_', base)[:100] or 'app'}"


async def _download(http: httpx.AsyncClient, url: str, path: Path, md5: str | None) -> None:
    digest = hashlib.md5(usedforsecurity=False)
    shown = url.split("?", 1)[0]  # never log a signature
    try:
        async with http.stream("GET", url) as response:
            if response.status_code != 200:
                raise InitialAssetError(f"download of {shown} failed: HTTP {response.status_code}")
            async with await trio.open_file(path, "wb") as file:
                async for chunk in response.aiter_bytes():
                    digest.update(chunk)
                    await file.write(chunk)
    except httpx.HTTPError as exc:
        raise InitialAssetError(f"download of {shown} failed: {exc!r}") from exc
    if md5 is not None and digest.hexdigest() != md5:
        raise InitialAssetError(f"download of {shown}: md5 {digest.hexdigest()} is not {md5}")


async def install_initial_assets(
    device: DeviceDriver, entries: Sequence[dict[str, Any]], workdir: Path
) -> None:
    """Download and install every entry in order (see the module docstring)."""
    if not entries:
        await trio.lowlevel.checkpoint()
        return
    await trio.to_thread.run_sync(lambda: workdir.mkdir(parents=True, exist_ok=True))
    async with httpx.AsyncClient(timeout=DOWNLOAD_TIMEOUT, follow_redirects=True) as http:
        for index, entry in enumerate(entries):
            path = workdir / _file_name(index, entry)
            await _download(http, str(entry["url"]), path, entry.get("md5"))
            try:
                app = await device.install(path)
            except DeviceError as exc:
                raise InitialAssetError(f"installing {entry.get('name')!r}: {exc}") from exc
            log.info("installed initial app %s (%s)", app.app_id, entry.get("name"))
            if entry.get("launchMode") == "ForegroundIfRunning":
                await device.launch(app.app_id)


@runtime_checkable
class ReportsForeground(Protocol):
    """A device that can say which app is in the foreground (the virtual device can)."""

    def foreground_app(self) -> str | None: ...


def forced_app(assets: Sequence[dict[str, Any]]) -> str | None:
    """The ``forceBundleId`` of the order's initial apps, if one asks for it."""
    for entry in assets:
        bundle = entry.get("forceBundleId")
        if isinstance(bundle, str) and bundle:
            return bundle
    return None


async def keep_in_foreground(device: DeviceDriver, app_id: str, *, every: float = 0.25) -> None:
    """``forceBundleId``: once *app_id* has been in the foreground, bring it back whenever
    something else takes its place (Home, another app, a URL). Runs until cancelled."""
    if not isinstance(device, ReportsForeground):
        log.warning("%s cannot report its foreground app: forceBundleId is not enforced", device)
        return
    entered = False
    while True:
        await trio.sleep(every)
        current = device.foreground_app()
        if current == app_id:
            if not entered:
                log.info("%s entered the foreground: keeping it there", app_id)
            entered = True
        elif entered:
            log.info("%s left the foreground for %s: bringing it back", app_id, current)
            try:
                await device.launch(app_id)
            except DeviceError as exc:  # uninstalled meanwhile: nothing left to keep
                log.info("cannot bring %s back: %s", app_id, exc)
                return
