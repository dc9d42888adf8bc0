"""The ``xcode`` driver: an Xcode build instance on a macOS host, and the Xcode build sandbox
attached to an iOS instance (``spec.sandbox.xcode.enabled``). docs/xcode.md.

Both are a `BuildHost` (sync, execs, events, logs, artifacts) whose ``xcodebuild`` execs are
planned by `plan.plan_xcodebuild` and run in the sandbox's *direct* mode: there is no
bubblewrap on macOS, so the keeper alone bounds them (limits, death with hostd, disk quota)
and the build runs as hostd's user in the instance's workspace. The tools are found on
`XcodeConfig.tools_path` (the CLI hands down ``DEVYARD_XCODE_TOOLS`` and ``PATH``); on a host
that is not macOS the driver starts only with `XcodeConfig.allow_non_macos` (tests and
development, with a fake ``xcodebuild``: the code paths are the same).

Layout in the instance's directory (``build/`` for an xcode instance, ``xcode-sandbox/`` next
to an iOS device): ``workspace`` (the synced tree), ``sync``, ``execs/<id>``, ``home`` (the
build's HOME and TMPDIR), ``secrets`` (signing material while an exec runs).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Final

import attrs
import trio

from ...builds import BuildConfig, BuildHost, SandboxConfig, SandboxLimits
from ...builds.commands import ExecPlan, plan_exec
from ...builds.execs import Exec, ExecStatus
from ...builds.sandbox_net import build_network
from ...netdial import network_of
from .._errors import InvalidSpecError
from ..base import DeviceDriver, DeviceInfo, DeviceSpec, Platform
from ..virtual import VirtualDevice
from .plan import DERIVED_DATA, KEYCHAIN, Secrets, XcodeTools, plan_xcodebuild
from .seatbelt import profile

__all__ = [
    "DRIVER_NAME",
    "XcodeConfig",
    "XcodeDevice",
    "XcodeSandbox",
    "open_xcode_device",
    "open_xcode_sandbox",
]

DRIVER_NAME: Final = "xcode"
_CLOSE_GRACE_S: Final = 10.0
#: The instance's ``sandbox-exec`` profile, in its directory (outside the workspace).
PROFILE: Final = "sandbox.sb"


def _free_port() -> int:
    """A free port on the host's loopback for the instance's allowlist relay (macOS builds
    share the host's network: each instance needs a port of its own)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@attrs.frozen
class XcodeConfig:
    """*tools_path*: a ``PATH`` to find ``xcodebuild`` and ``xcodegen`` on. *allow_non_macos*:
    start on a host that is not macOS (a fake ``xcodebuild``; tests, development)."""

    tools_path: str = "/usr/bin:/usr/local/bin:/opt/homebrew/bin"
    allow_non_macos: bool = False
    limits: SandboxLimits = attrs.field(factory=SandboxLimits)
    keepalive_s: float = 15.0

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> XcodeConfig:
        """``DEVYARD_XCODE_TOOLS`` (a PATH searched first) and ``PATH``;
        ``DEVYARD_XCODE_ALLOW_NON_MACOS=1`` (the CLI reads the environment, not the driver)."""
        path = ":".join(p for p in (env.get("DEVYARD_XCODE_TOOLS"), env.get("PATH")) if p)
        allow = env.get("DEVYARD_XCODE_ALLOW_NON_MACOS", "") == "1"
        return cls(tools_path=path or cls.tools_path, allow_non_macos=allow)

    def tools(self) -> XcodeTools:
        if sys.platform != "darwin" and not self.allow_non_macos:
            raise InvalidSpecError(
                "the xcode driver runs on macOS hosts (DEVYARD_XCODE_ALLOW_NON_MACOS=1 starts it "
                "elsewhere, for tests and development with a fake xcodebuild)"
            )
        xcodebuild = shutil.which("xcodebuild", path=self.tools_path)
        if xcodebuild is None:
            raise InvalidSpecError("this host has no xcodebuild (Xcode, or DEVYARD_XCODE_TOOLS)")
        sandbox_exec = shutil.which("sandbox-exec", path=self.tools_path)
        if sandbox_exec is None and sys.platform == "darwin":
            raise InvalidSpecError("this host has no sandbox-exec to confine builds in")
        return XcodeTools(
            xcodebuild,
            shutil.which("xcodegen", path=self.tools_path),
            security=shutil.which("security", path=self.tools_path),
            sandbox_exec=sandbox_exec,
        )


class _Builds:
    """A `BuildHost` whose ``xcodebuild`` execs the driver plans, and their secrets."""

    def __init__(
        self, directory: Path, config: XcodeConfig, nursery: trio.Nursery, on_end: Any = None
    ) -> None:
        self._nursery = nursery
        self.tools = config.tools()
        self.directory = directory
        self.secrets = Secrets(directory / "secrets")
        self._on_end = on_end
        sandbox = SandboxConfig(bwrap=None, limits=config.limits)
        build_config = BuildConfig(
            sandbox=sandbox,
            gradle_home=directory / "home",
            keepalive_s=config.keepalive_s,
            planner=self._plan,
        )
        self.host = BuildHost(directory, build_config, nursery, on_end=self._ended)

    def _plan(self, body: dict[str, Any]) -> ExecPlan | None:
        if body.get("command") != "xcodebuild":
            return None
        base = plan_exec({**body, "command": "run", "commandLine": "xcodebuild"})
        return plan_xcodebuild(
            body,
            tools=self.tools,
            workspace=self.host.workspace.root,
            home=self.directory / "home",
            secrets=self.secrets,
            base=base,
        )

    def _ended(self, run: Exec) -> None:
        for where in self.secrets.take():  # the ended exec's signing material
            if self.tools.security is not None and (where / KEYCHAIN).exists():
                self._nursery.start_soon(self._drop_keychain, where)
            else:
                shutil.rmtree(where, ignore_errors=True)
        if self._on_end is not None:
            self._on_end(run)

    async def _drop_keychain(self, where: Path) -> None:
        """A keychain the build's own cleanup left (a cancelled build: SIGKILL skips the
        script's ``trap``): ``security delete-keychain`` (also off the search list), then the
        directory."""
        assert self.tools.security is not None
        with trio.CancelScope(shield=True), trio.move_on_after(_CLOSE_GRACE_S):
            await trio.run_process(
                [self.tools.security, "delete-keychain", str(where / KEYCHAIN)],
                check=False,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        await trio.to_thread.run_sync(shutil.rmtree, where, True)

    def create(self) -> None:
        self.host.create()
        (self.directory / "home" / "tmp").mkdir(mode=0o700, exist_ok=True)
        self.secrets.root.mkdir(mode=0o700, parents=True, exist_ok=True)

    def confine(self, proxy: Path | None) -> None:
        """The builds' sandbox: ``sandbox-exec`` with the instance's profile (seatbelt.py;
        none on a host without it), and the allowlist relay when *proxy* (blocking)."""
        sandbox = self.host.config.sandbox
        if proxy is not None:
            sandbox = attrs.evolve(sandbox, proxy=proxy, proxy_port=_free_port())
        if self.tools.sandbox_exec is not None:
            workspace = self.host.workspace.root
            writable = [workspace, workspace / DERIVED_DATA, self.directory / "home"]
            writable.append(self.secrets.root)
            text = profile(
                writable=[p.resolve() for p in writable],
                proxy_port=sandbox.proxy_port if proxy is not None else None,
                proxy_socket=proxy.resolve() if proxy is not None else None,
            )
            where = self.directory / PROFILE
            where.write_text(text)
            sandbox = attrs.evolve(sandbox, wrapper=(self.tools.sandbox_exec, "-f", str(where)))
        self.host.config = attrs.evolve(self.host.config, sandbox=sandbox)

    async def aclose(self) -> None:
        self.host.close()
        with trio.move_on_after(_CLOSE_GRACE_S, shield=True):
            for run in self.host.list():
                await run.done.wait()
            await self.host.wait_reports()
        self.secrets.clear()


class XcodeDevice(VirtualDevice):
    """A headless Xcode build machine with a `BuildHost` (``builds``)."""

    def __init__(self, spec: DeviceSpec, builds: _Builds) -> None:
        super().__init__(spec)
        self._builds = builds
        self.builds = builds.host

    def describe(self) -> DeviceInfo:
        return attrs.evolve(super().describe(), driver=DRIVER_NAME)

    async def aclose(self) -> None:
        await self._builds.aclose()
        await super().aclose()


@asynccontextmanager
async def open_xcode_device(
    spec: DeviceSpec, config: XcodeConfig | None = None
) -> AsyncIterator[XcodeDevice]:
    """Start an Xcode build instance for *spec*; on exit, kill its builds and remove its
    directory (workspace, secrets) with the sandbox."""
    if spec.platform is not Platform.XCODE:
        raise InvalidSpecError(f"the xcode driver runs xcode instances, not {spec.platform}")
    config = config or XcodeConfig()
    async with trio.open_nursery() as nursery:
        builds = _Builds(spec.sandbox_dir / "build", config, nursery)
        device = XcodeDevice(spec, builds)
        async with device:
            await trio.to_thread.run_sync(builds.create)
            policy = lambda: network_of(device).policy  # noqa: E731 - assigned once it runs
            async with build_network(spec.build_network, builds.directory / "net", policy) as net:
                await trio.to_thread.run_sync(builds.confine, net)
                yield device


@attrs.define
class LatestBuild:
    build_id: str
    sdk: str
    bundle_id: str | None = None
    install_state: str = "notInstalled"
    install_ms: int | None = None
    error: str | None = None

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "buildId": self.build_id,
            "sdk": self.sdk,
            "installState": self.install_state,
        }
        if self.bundle_id is not None:
            out["bundleId"] = self.bundle_id
        if self.install_ms is not None:
            out["installDurationMs"] = self.install_ms
        if self.error is not None:
            out["installError"] = self.error
        return out


class XcodeSandbox:
    """The Xcode build sandbox of one iOS instance: its `BuildHost` (``builds``), and every
    successful simulator build installed onto that instance's device (`latest`)."""

    def __init__(
        self, device: DeviceDriver, spec: DeviceSpec, builds: _Builds, nursery: trio.Nursery
    ) -> None:
        self.device = device
        self._nursery = nursery
        self.spec = spec
        self._builds = builds
        self.builds = builds.host
        self.latest: LatestBuild | None = None
        self.installed = trio.Event()  # set after each install attempt (then replaced)

    def ended(self, run: Exec) -> None:
        if run.plan.kind != "xcodebuild" or run.status is not ExecStatus.SUCCEEDED:
            return
        sdk = "iphonesimulator"
        if "-sdk" in run.plan.argv:
            sdk = run.plan.argv[run.plan.argv.index("-sdk") + 1]
        self.latest = LatestBuild(run.id, sdk)
        if sdk == "iphonesimulator":
            self._nursery.start_soon(self._install, self.latest)

    async def _install(self, latest: LatestBuild) -> None:
        products = self.builds.workspace.root / DERIVED_DATA / "Build" / "Products"
        apps = sorted(await trio.to_thread.run_sync(lambda: list(products.glob("*/*.app"))))
        started = time.monotonic()
        try:
            if not apps:
                raise InvalidSpecError("the build made no .app")
            info = await self.device.install(apps[0])
        except Exception as exc:  # any failure is the build's install state
            latest.error = str(exc)
        else:
            latest.bundle_id = info.app_id
            latest.install_state = "installedOnAttachedSimulator"
            latest.install_ms = round((time.monotonic() - started) * 1000)
        self.installed.set()
        self.installed = trio.Event()

    def status(self) -> dict[str, Any]:
        info = self.device.describe()
        target = {
            "udid": self.spec.instance_id,
            "name": info.model_name,
            "model": info.model,
            "osVersion": info.os_version,
            "platform": "iOS Simulator",
            "arch": "arm64",
            "screenWidth": info.width,
            "screenHeight": info.height,
        }
        out: dict[str, Any] = {
            "attached": True,
            "simulator": {"iosInstanceId": self.spec.instance_id, "target": target},
        }
        if self.latest is not None:
            out["latestBuild"] = self.latest.describe()
        return out


@asynccontextmanager
async def open_xcode_sandbox(
    device: DeviceDriver, spec: DeviceSpec, config: XcodeConfig
) -> AsyncIterator[XcodeSandbox]:
    """The Xcode build sandbox of the iOS instance *spec* runs as *device*; on exit its builds
    are killed (the directory goes with the instance's)."""
    async with trio.open_nursery() as nursery:
        sandbox: XcodeSandbox | None = None

        def ended(run: Exec) -> None:
            if sandbox is not None:
                sandbox.ended(run)

        builds = _Builds(spec.sandbox_dir / "xcode-sandbox", config, nursery, on_end=ended)
        sandbox = XcodeSandbox(device, spec, builds, nursery)
        await trio.to_thread.run_sync(builds.create)
        try:
            policy = lambda: network_of(device).policy  # noqa: E731 - assigned once it runs
            async with build_network(spec.build_network, builds.directory / "net", policy) as net:
                await trio.to_thread.run_sync(builds.confine, net)
                yield sandbox
        finally:
            await builds.aclose()
