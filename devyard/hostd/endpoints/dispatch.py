"""Accept the edge's streams on a host link and route each to its instance's endpoint."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Final

import trio

from ...core import (
    MuxStream,
    ProtocolError,
    Session,
    SessionBrokenError,
    accept_open,
    read_open,
    reject_open,
    tracing,
)
from ...core.adb_splice import adb_splice
from ..adb import ProtocolError as AdbProtocolError
from ..adb import serve_adb
from ..adb.device import AdbDevice
from ..browser import serve_cdp
from ..builds import BuildHost, is_build_path, serve_build_api
from ..drivers import AndroidDevice, DeviceDriver, Platform
from ..drivers.xcode import xcode_route
from .browser import serve_browser_stream
from .device_api import serve_device_api
from .ports import serve_port_stream
from .sdk_ws import serve_sdk_socket

log = logging.getLogger(__name__)

__all__ = ["serve_streams"]

_PREAMBLE_TIMEOUT_S: Final = 10.0

#: A running instance's device and the event set when it stops (its streams end with it).
DeviceLookup = Callable[[str], tuple[DeviceDriver, trio.Event] | None]


async def serve_streams(session: Session, devices: DeviceLookup) -> None:
    """Serve every stream the edge opens until the session ends."""
    async with trio.open_nursery() as nursery:
        while True:
            try:
                stream = await session.accept_stream()
            except (trio.EndOfChannel, SessionBrokenError):
                return
            nursery.start_soon(_serve_one, stream, devices)


async def _serve_one(stream: MuxStream, devices: DeviceLookup) -> None:
    """One stream, whatever happens to it: its failure ends it, never the host link (the
    `serve_streams` nursery) and with it every other instance's streams on this host."""
    request: dict[str, Any] = {}
    try:
        try:
            with trio.fail_after(_PREAMBLE_TIMEOUT_S):
                request = await read_open(stream)
        except (trio.TooSlowError, ProtocolError) as exc:
            log.info("stream %d: bad open preamble: %s", stream.stream_id, exc)
            return
        await _route(stream, request, devices)
    except* (trio.BrokenResourceError, trio.ClosedResourceError):
        pass  # the edge or the device went away: nothing to answer
    except* AdbProtocolError as group:
        log.info("stream %d: %s", stream.stream_id, _describe(request, group.exceptions[0]))
    except* Exception as group:
        # A bug in one handler must not take the host's other streams down with it.
        log.error(
            "stream %d: %s", stream.stream_id, _describe(request, group.exceptions[0]),
            exc_info=group.exceptions[0],
        )  # fmt: skip
    finally:
        await trio.aclose_forcefully(stream)


def _describe(request: dict[str, Any], exc: BaseException) -> str:
    kind, instance_id = request.get("kind", "?"), request.get("instance_id", "?")
    return f"{kind} stream of {instance_id} failed: {type(exc).__name__}: {exc}"


async def _route(stream: MuxStream, request: dict[str, Any], devices: DeviceLookup) -> None:
    instance_id = str(request.get("instance_id", ""))
    found = devices(instance_id)
    if found is None:
        await reject_open(stream, "not-found", f"no instance {instance_id} runs on this host")
        return
    device, stopped = found
    async with trio.open_nursery() as nursery:

        async def end_with_the_instance() -> None:
            await stopped.wait()
            nursery.cancel_scope.cancel()

        nursery.start_soon(end_with_the_instance)
        with tracing.serving_span(tracing.HOSTD, request):  # an api stream's span, if tracing
            await _serve_kind(stream, request, device)
        nursery.cancel_scope.cancel()


async def _serve_kind(stream: MuxStream, request: dict[str, Any], device: DeviceDriver) -> None:
    kind = request["kind"]
    instance_id = str(request.get("instance_id", ""))
    if kind == "api":
        await accept_open(stream)
        builds = getattr(device, "builds", None)  # a build instance's data plane (builds/)
        xcode = xcode_route(device, request)  # /simulator, an iOS instance's /xcode/... sandbox
        if xcode is not None:
            await xcode(stream)
        elif isinstance(builds, BuildHost) and is_build_path(request.get("path")):
            await serve_build_api(stream, builds, request)
        else:
            await serve_device_api(stream, device, request)
    elif kind == "device-stream":
        if not device.describe().has_screen:
            await reject_open(stream, "bad-request", f"instance {instance_id} has no screen")
            return
        await accept_open(stream)
        await serve_browser_stream(stream, device)
    elif kind == "adb":
        await _serve_adb_kind(stream, device)
    elif kind == "cdp":  # the browser sandbox (hostd/browser)
        await serve_cdp(stream, device, request)
    elif kind == "http":  # targetHttpPortUrlPrefix: bytes to a device TCP port
        await serve_port_stream(stream, device, request)
    elif kind == "sdk":  # the commercial SDKs' device sockets on apiUrl (sdk_ws.py)
        await serve_sdk_socket(stream, device, request)
    else:
        await reject_open(stream, "bad-request", f"unknown stream kind {kind!r}")


async def _serve_adb_kind(stream: MuxStream, device: DeviceDriver) -> None:
    """By capability: a device with its own adbd (an emulator) gets one bridge to it; a
    device whose ADB device side hostd speaks (`AdbDevice`, the virtual one) is served here."""
    if not isinstance(device, AndroidDevice) or device.describe().platform is not Platform.ANDROID:
        await reject_open(stream, "bad-request", "ADB is for Android instances")
        return
    adbd = await device.open_adb_transport()
    if adbd is None and not isinstance(device, AdbDevice):
        await reject_open(stream, "bad-request", "this device has no ADB")
        return
    await accept_open(stream)
    if adbd is not None:
        # an emulator's own adbd: one bridge for both; its writes (pulls) are acknowledged
        # here, next to it (docs/adb.md, "Early acknowledgement")
        await adb_splice(adbd, stream)
    elif isinstance(device, AdbDevice):
        await serve_adb(stream, device)  # the virtual device: we are its adbd
