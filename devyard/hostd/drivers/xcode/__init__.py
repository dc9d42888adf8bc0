"""The ``xcode`` driver: Xcode build instances on macOS hosts, and the Xcode build sandbox of
iOS instances (``spec.sandbox.xcode.enabled``); see `device` and docs/xcode.md."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

from ..base import DeviceDriver, DeviceSpec, Platform
from .device import (
    DRIVER_NAME,
    XcodeConfig,
    XcodeDevice,
    XcodeSandbox,
    open_xcode_device,
    open_xcode_sandbox,
)
from .http import attach_sandbox, sandbox_of, xcode_route

__all__ = [
    "DRIVER_NAME",
    "XcodeConfig",
    "XcodeDevice",
    "XcodeSandbox",
    "open_with_xcode_sandbox",
    "open_xcode_device",
    "sandbox_of",
    "xcode_route",
]


@asynccontextmanager
async def open_with_xcode_sandbox(
    spec: DeviceSpec,
    *,
    opener: Callable[[DeviceSpec], AbstractAsyncContextManager[DeviceDriver]],
    config: XcodeConfig | None,
) -> AsyncIterator[DeviceDriver]:
    """*opener*'s device; an iOS one whose spec asks for an Xcode sandbox gets it attached for
    its lifetime (the instance fails to start when this host cannot build: no Xcode)."""
    async with opener(spec) as device:
        if spec.platform is not Platform.IOS or not spec.xcode_sandbox:
            yield device
            return
        async with open_xcode_sandbox(device, spec, config or XcodeConfig()) as sandbox:
            attach_sandbox(device, sandbox)
            try:
                yield device
            finally:
                attach_sandbox(device, None)
