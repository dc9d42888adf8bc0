"""A Gradle build instance: the virtual device's headless build machine (its files, logs and
``describe``) plus a real data plane, `BuildHost`: sync into a workspace, execs of Debian's
``gradle`` and JDK in a bubblewrap sandbox, their events, logs and artifacts.

Layout in the instance's sandbox directory: ``build/workspace`` (the synced tree, owned by
the build user), ``build/sync`` (staging), ``build/execs/<id>`` (logs, artifacts). Not under
the virtual device's ``fs/``: the files API follows no link, but a build may leave links, so
the build's tree is reachable only through the build routes. The organization's Gradle user
home is ``GradleConfig.gradle_homes/<organization id>``, kept across its instances.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Final

import attrs
import trio

from ...builds import BuildConfig, BuildHost, SandboxConfig, SandboxLimits
from ...builds.sandbox import USR_LINKS
from ...builds.sandbox_net import build_network
from ...netdial import network_of
from .._errors import InvalidSpecError
from ..base import DeviceInfo, DeviceSpec, Platform
from ..virtual import VirtualDevice

__all__ = ["DRIVER_NAME", "GradleConfig", "GradleDevice", "open_gradle_device"]

DRIVER_NAME: Final = "gradle"
#: The unprivileged user builds run as when hostd is root (Debian's ``nobody``).
DEFAULT_BUILD_UID: Final = 65534
_ORG: Final = re.compile(r"[A-Za-z0-9_\-]{1,128}")
_CLOSE_GRACE_S: Final = 10.0
DEBIAN_ANDROID_SDK: Final = "/usr/lib/android-sdk"


@attrs.frozen
class GradleConfig:
    """*gradle_homes*: where the organizations' Gradle user homes live (None: ``gradle-homes``
    next to the host's ``instances`` directory); *blob_stores*: the organizations' sync blobs
    (None: ``build-blobs`` there too). *build_uid*: None picks `DEFAULT_BUILD_UID`
    when hostd is root and hostd's own user otherwise."""

    gradle_homes: Path | None = None
    blob_stores: Path | None = None
    build_uid: int | None = None
    limits: SandboxLimits = attrs.field(factory=SandboxLimits)
    keepalive_s: float = 15.0
    gradle: str = "gradle"
    #: ANDROID_SDK_ROOT of gradle builds (a path the sandbox sees: under /usr); None looks for
    #: Debian's android-sdk (`DEBIAN_ANDROID_SDK`).
    android_sdk_root: str | None = None

    def build_config(self, spec: DeviceSpec) -> BuildConfig:
        data = spec.sandbox_dir.parent.parent
        homes = self.gradle_homes or data / "gradle-homes"
        blobs = self.blob_stores or data / "build-blobs"
        org = spec.organization_id or "_unowned"
        if not _ORG.fullmatch(org):
            raise InvalidSpecError(f"bad organization id {org!r}")
        uid = self.build_uid
        if uid is None and os.geteuid() == 0:
            uid = DEFAULT_BUILD_UID
        links = tuple(d for d in USR_LINKS if os.path.islink(f"/{d}"))
        binds = tuple(d for d in USR_LINKS if os.path.isdir(f"/{d}") and d not in links)
        sandbox = SandboxConfig(build_uid=uid, limits=self.limits, usr_links=links, ro_binds=binds)
        return BuildConfig(
            sandbox=sandbox,
            gradle_home=homes / org,
            blobs=blobs / org,
            gradle=self.gradle,
            keepalive_s=self.keepalive_s,
            android_sdk_root=self.android_sdk_root
            or (DEBIAN_ANDROID_SDK if os.path.isdir(DEBIAN_ANDROID_SDK) else None),
        )


class GradleDevice(VirtualDevice):
    """A headless Gradle build machine with a `BuildHost` (``builds``)."""

    def __init__(self, spec: DeviceSpec, builds: BuildHost) -> None:
        super().__init__(spec)
        self.builds = builds

    def describe(self) -> DeviceInfo:
        return attrs.evolve(super().describe(), driver=DRIVER_NAME)

    async def aclose(self) -> None:
        """Kill every exec's process tree first, then stop the device (removing the sandbox)."""
        self.builds.close()
        with trio.move_on_after(_CLOSE_GRACE_S, shield=True):
            for run in self.builds.list():
                await run.done.wait()
            await self.builds.wait_reports()  # the last build's log reaches the server
        self.builds.drop_webhooks()
        await super().aclose()


@asynccontextmanager
async def open_gradle_device(
    spec: DeviceSpec, config: GradleConfig | None = None
) -> AsyncIterator[GradleDevice]:
    """Start a Gradle build instance for ``spec``; on exit, kill its builds and remove its
    sandbox (the workspace with it)."""
    if spec.platform is not Platform.GRADLE:
        raise InvalidSpecError(f"the gradle driver runs gradle instances, not {spec.platform}")
    if shutil.which("bwrap") is None:
        raise InvalidSpecError("the gradle driver needs bubblewrap (Debian package bubblewrap)")
    build_config = (config or GradleConfig()).build_config(spec)
    async with trio.open_nursery() as nursery:
        host = BuildHost(spec.sandbox_dir / "build", build_config, nursery)
        device = GradleDevice(spec, host)
        async with device:
            await trio.to_thread.run_sync(host.create)
            nursery.start_soon(host.run_sweeper)  # the organization's blobs and build cache
            policy = lambda: network_of(device).policy  # noqa: E731 - assigned once it runs
            async with build_network(spec.build_network, host.directory / "net", policy) as proxy:
                if proxy is not None:  # spec.buildNetwork.allow: through the proxy only
                    sandbox = attrs.evolve(host.config.sandbox, proxy=proxy)
                    host.config = attrs.evolve(host.config, sandbox=sandbox)
                yield device
