"""``spec.initialAssets`` on the host: download each app the order lists and install it on the
device before the instance is reported ready.

The server resolved the entries (docs/assets.md): each has a ``url`` the host can GET without
a key (a signed asset URL, or the user's own URL) and, for assets, the ``md5`` the bytes must
have. Files stream to ``<sandbox>/initial-assets/`` (never whole in memory), are checked, then
installed in order; ``launchMode: ForegroundIfRunning`` brings the app to the foreground once
installed. Any failure is an `InitialAssetError` (a `DeviceError`), so the instance ends with
that message instead of becoming ready without its apps.

An entry with ``parts`` (``sources`` in the spec: an Android app split into several APKs)
installs ONE app from all its files, as ``pm install-multiple`` does: every part is
downloaded and checked, then the set is validated (`packages.read_splits`: one base, one
package, one versionCode, no split twice) and installed through the driver's
`InstallsSplits` when it has one; the virtual device (whose package manager is hostd's)
installs the validated set as its base APK's app. A driver of a real device without
`InstallsSplits` refuses the entry rather than install a base without its splits.

A URL is the user's: the host fetches it only where its `NetPolicy` allows (public addresses
by default, checked on the resolved address at connect time and again for every redirect; the
devyard server's own origin, which signs asset URLs, is trusted), within `AssetLimits` (size,
whole-download time, per-read time; fetch.py). The error says "could not fetch the initial
asset NAME (CLASS)" with a `FetchFailure` class that does not tell a refused address, a closed
port and a silent one apart; the details go to the host's log, without the URL's query
(signatures). No HTTP client library logs the URL at all: fetch.py speaks h11 itself.
"""

from __future__ import annotations

import hashlib
import logging
import re
import ssl
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Final, Protocol, runtime_checkable

import trio

from .drivers import AppInfo, DeviceDriver, DeviceError, InstallError, ShellDevice
from .drivers._shared.packages import read_splits
from .fetch import FetchError, FetchLimits, fetch, origin_of
from .netpolicy import NetPolicy

__all__ = [
    "InitialAssetError",
    "InstallsSplits",
    "forced_app",
    "install_initial_assets",
    "keep_in_foreground",
]

log = logging.getLogger(__name__)

_UNSAFE: Final = re.compile(r"[^A-Za-z0-9._-]")


class InitialAssetError(DeviceError):
    """An initial app could not be downloaded or installed."""


def _file_name(index: int, entry: dict[str, Any]) -> str:
    base = str(entry.get("name") or "app").rstrip("/").rsplit("/", 1)[-1].split("?", 1)[0]
    return f"{index}-{_UNSAFE.sub('_', base)[:100] or 'app'}"


async def _download(
    entry: dict[str, Any],
    path: Path,
    policy: NetPolicy,
    trusted: frozenset[tuple[str, int]],
    limits: FetchLimits | None,
    *,
    tls: ssl.SSLContext | None,
) -> None:
    url = str(entry.get("url"))
    name = entry.get("name")
    shown = url.split("?", 1)[0]  # never log a signature
    digest = hashlib.md5(usedforsecurity=False)
    try:
        async with await trio.open_file(path, "wb") as file:

            async def sink(data: bytes) -> None:
                digest.update(data)
                await file.write(data)

            await fetch(url, sink, policy=policy, trusted=trusted, limits=limits, tls=tls)
    except FetchError as exc:
        log.info("initial app %r from %s: %s (%s)", name, shown, exc.failure.value, exc)
        message = f"could not fetch the initial asset {name!r} ({exc.failure.value})"
        raise InitialAssetError(message) from None
    md5 = entry.get("md5")
    if md5 is not None and digest.hexdigest() != md5:
        log.info("initial app %r from %s: md5 %s is not %s", name, shown, digest.hexdigest(), md5)
        raise InitialAssetError(f"could not fetch the initial asset {name!r} (checksum-mismatch)")


async def install_initial_assets(
    device: DeviceDriver,
    entries: Sequence[dict[str, Any]],
    workdir: Path,
    *,
    policy: NetPolicy | None = None,
    trusted: Iterable[str] = (),
    limits: FetchLimits | None = None,
    tls: ssl.SSLContext | None = None,
) -> None:
    """Download and install every entry in order (see the module docstring).

    *policy* decides which addresses the host may fetch from (public ones by default);
    *trusted* are base URLs whose origin is fetched from whatever its address (the devyard
    server, which signs the asset URLs); *tls* verifies https servers (``--ca-file``).
    """
    if not entries:
        await trio.lowlevel.checkpoint()
        return
    policy = NetPolicy() if policy is None else policy
    origins = frozenset(o[1:] for o in map(origin_of, trusted) if o is not None)
    await trio.to_thread.run_sync(lambda: workdir.mkdir(mode=0o700, parents=True, exist_ok=True))
    for index, entry in enumerate(entries):
        parts = entry.get("parts")
        try:
            if isinstance(parts, list) and parts:
                paths: list[Path] = []
                for number, part in enumerate(parts):
                    path = workdir / _file_name(index, {"name": f"{number}-{part.get('name')}"})
                    await _download(part, path, policy, origins, limits, tls=tls)
                    paths.append(path)
                app_id = await _install_splits(device, paths)
            else:
                path = workdir / _file_name(index, entry)
                await _download(entry, path, policy, origins, limits, tls=tls)
                app_id = (await device.install(path)).app_id
        except InitialAssetError:
            raise
        except DeviceError as exc:
            raise InitialAssetError(f"installing {entry.get('name')!r}: {exc}") from exc
        log.info("installed initial app %s (%s)", app_id, entry.get("name"))
        if entry.get("launchMode") == "ForegroundIfRunning":
            await device.launch(app_id)


@runtime_checkable
class InstallsSplits(Protocol):
    """A driver that installs one app from several APKs itself (``adb install-multiple``)."""

    async def install_splits(self, paths: Sequence[Path]) -> AppInfo: ...


async def _install_splits(device: DeviceDriver, paths: list[Path]) -> str:
    """One app from its split APKs (the module docstring); its id."""
    split_set = await trio.to_thread.run_sync(read_splits, paths)
    if isinstance(device, InstallsSplits):
        return (await device.install_splits(paths)).app_id
    if isinstance(device, ShellDevice):
        raise InstallError(f"{device} cannot install split APKs (install-multiple) yet")
    app = await device.install(split_set.base)
    log.info("installed %s from a base and %d split(s)", app.app_id, len(split_set.splits))
    return app.app_id


@runtime_checkable
class ReportsForeground(Protocol):
    """A device that can say which app is in the foreground (the virtual device can)."""

    def foreground_app(self) -> str | None: ...


def forced_app(assets: Sequence[dict[str, Any]], spec: dict[str, Any] | None = None) -> str | None:
    """The app to keep in the foreground: the spec's ``forceBundleId`` (spec 2.1, iOS), else
    the first initial app entry's (the ``initialAssets`` form), else None."""
    bundle = (spec or {}).get("forceBundleId")
    if isinstance(bundle, str) and bundle:
        return bundle
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
