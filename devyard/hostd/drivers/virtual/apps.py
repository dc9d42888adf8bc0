"""The apps of one virtual device: the model's system apps plus what was installed.

System apps come from the model catalog and can be neither replaced nor uninstalled. An
installed app keeps a copy of the file it was installed from under ``<sandbox>/apps/<id>/``
(``base.apk`` on Android, as ``pm path`` would show; the .ipa or .app under its own name on
iOS) and a record in the sandbox's state file, so it outlives a restart of the driver on the
same sandbox. Installing an id that is already installed replaces it (``adb install -r``).
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any, Final

import attrs
import trio

from .._errors import AppNotFoundError, InstallError, InvalidInputError, UnsupportedOperationError
from .._shared.packages import read_package
from ..base import AppInfo, Platform
from .models import ModelProfile
from .ui import UiApp

__all__ = ["AppStore", "InstalledApp"]

_APP_ID_RE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


@attrs.frozen
class InstalledApp:
    app_id: str
    label: str
    version: str


class AppStore:
    def __init__(self, model: ModelProfile, platform: Platform, directory: Path) -> None:
        self._model = model
        self._platform = platform
        self._directory = directory
        self._system = {app.app_id: app.label for app in model.system_apps}
        self._installed: dict[str, InstalledApp] = {}  # install order

    def load(self, saved: list[dict[str, Any]]) -> None:
        for entry in saved:
            app = InstalledApp(str(entry["app_id"]), str(entry["label"]), str(entry["version"]))
            self._installed[app.app_id] = app

    def dump(self) -> list[dict[str, Any]]:
        return [attrs.asdict(app) for app in self._installed.values()]

    def launcher(self) -> tuple[UiApp, ...]:
        """Every app as the launcher shows it: system apps first, then in install order."""
        system = tuple(UiApp(app_id, label) for app_id, label in self._system.items())
        return system + tuple(UiApp(a.app_id, a.label) for a in self._installed.values())

    def info(self, app_id: str, *, running: bool) -> AppInfo:
        installed = self._installed.get(app_id)
        if installed is not None:
            return AppInfo(app_id, installed.label, installed.version, False, running)
        if app_id in self._system:
            return AppInfo(app_id, self._system[app_id], "", True, running)
        raise AppNotFoundError(app_id)

    def _require_platform(self) -> None:
        if self._platform not in (Platform.ANDROID, Platform.IOS):
            raise UnsupportedOperationError(f"{self._platform} instances do not install apps")

    async def install(self, source: Path) -> tuple[InstalledApp, bool]:
        """Install ``source``; returns the app and whether it replaced an installed one."""
        self._require_platform()
        package = await trio.to_thread.run_sync(read_package, self._platform, source)
        if package.app_id in self._system:
            raise InstallError(f"{package.app_id} is a system app and cannot be replaced")
        if not _APP_ID_RE.fullmatch(package.app_id):
            raise InstallError(f"bad app id {package.app_id!r}")
        target = self._directory / package.app_id
        name = "base.apk" if self._platform is Platform.ANDROID else source.name

        def copy() -> None:
            shutil.rmtree(target, ignore_errors=True)
            target.mkdir(parents=True)
            if source.is_dir():
                shutil.copytree(source, target / name, symlinks=True)
            else:
                shutil.copyfile(source, target / name)

        try:
            await trio.to_thread.run_sync(copy)
        except OSError as exc:
            raise InstallError(f"cannot copy {source.name}: {exc}") from exc
        replaced = package.app_id in self._installed
        app = InstalledApp(package.app_id, package.label, package.version)
        self._installed[app.app_id] = app
        return app, replaced

    async def uninstall(self, app_id: str) -> None:
        self._require_platform()
        if app_id not in self._installed:
            if app_id in self._system:
                raise InvalidInputError(f"{app_id} is a system app and cannot be uninstalled")
            raise AppNotFoundError(app_id)
        del self._installed[app_id]
        target = self._directory / app_id
        await trio.to_thread.run_sync(lambda: shutil.rmtree(target, ignore_errors=True))

    def package_path(self, app_id: str) -> Path | None:
        """The host path of an installed app's package file, None for system apps."""
        if app_id not in self._installed:
            if app_id in self._system:
                return None
            raise AppNotFoundError(app_id)
        name = "base.apk" if self._platform is Platform.ANDROID else None
        directory = self._directory / app_id
        if name is not None:
            return directory / name
        return next(iter(sorted(directory.iterdir())), None) if directory.is_dir() else None
