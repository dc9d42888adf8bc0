"""The xcode driver's routes besides ``/sync`` and ``/exec`` (the HTTP boundary).

An xcode instance's ``apiUrl``: ``GET /simulator`` (nothing attached) and ``POST /simulator``
(refused: attach a simulator by creating an iOS instance with ``spec.sandbox.xcode.enabled``,
whose sandbox is attached from the start). An iOS instance's ``status.sandbox.xcode.url`` is
its ``apiUrl`` + ``/xcode``: ``/xcode/sync``, ``/xcode/exec...`` (the build API, `serve_build_api`)
and ``/xcode/simulator`` (the attached simulator and its latest build's install state, as the
SDK's ``getSimulator``/``attachSimulator`` read them).
"""

from __future__ import annotations

import functools
import json
import weakref
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

import trio

from ....core import send_message
from ...builds import serve_build_api
from .device import XcodeDevice, XcodeSandbox

__all__ = ["attach_sandbox", "sandbox_of", "xcode_route"]

Route = Callable[[trio.abc.HalfCloseableStream], Awaitable[None]]
_SANDBOXES: weakref.WeakKeyDictionary[object, XcodeSandbox] = weakref.WeakKeyDictionary()
_DRAIN_S: Final = 30.0


def attach_sandbox(device: object, sandbox: XcodeSandbox | None) -> None:
    if sandbox is None:
        _SANDBOXES.pop(device, None)
    else:
        _SANDBOXES[device] = sandbox


def sandbox_of(device: object) -> XcodeSandbox | None:
    return _SANDBOXES.get(device)


async def _answer(status: int, value: object, stream: trio.abc.HalfCloseableStream) -> None:
    try:
        with trio.move_on_after(_DRAIN_S):  # the request body, until the edge's EOF
            while await stream.receive_some(65536):
                pass
        await send_message(stream, {"status": status, "content_type": "application/json"})
        await stream.send_all(json.dumps(value).encode())
        await stream.send_eof()
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass
    finally:
        await trio.aclose_forcefully(stream)


def _simulator(sandbox: XcodeSandbox, method: str) -> Route:
    status = sandbox.status()
    if method == "POST":  # already attached, for good: the SDK's attach answer
        latest = status.get("latestBuild") or {}
        installed = latest.get("installState") == "installedOnAttachedSimulator"
        status = {**status, "alreadyAttached": True, "installedLastBuild": installed}
    return functools.partial(_answer, 200, status)


def xcode_route(device: object, request: Mapping[str, Any]) -> Route | None:
    """The route of an ``api`` request that is the xcode driver's, None for any other."""
    method = str(request.get("method", "GET")).upper()
    parts = [p for p in str(request.get("path", "")).split("/") if p]
    sandbox = sandbox_of(device)
    if sandbox is not None and parts[:1] == ["xcode"]:
        rest = parts[1:]
        if rest == ["simulator"] and method in ("GET", "POST"):
            return _simulator(sandbox, method)
        if rest[:1] in (["sync"], ["exec"]):
            inner = {**request, "path": "/".join(rest)}
            return functools.partial(_serve_build, sandbox, inner)
        error = {
            "message": f"no Xcode sandbox route {method} /{'/'.join(parts)}",
            "reason": "not_found",
        }
        return functools.partial(_answer, 404, error)
    if isinstance(device, XcodeDevice) and parts == ["simulator"]:
        if method == "GET":
            return functools.partial(_answer, 200, {"attached": False})
        error = {
            "message": "attaching a running simulator is not available here: create the iOS "
            "instance with spec.sandbox.xcode.enabled and build with its status.sandbox.xcode.url",
            "reason": "unsupported",
        }
        return functools.partial(_answer, 400, error)
    return None


async def _serve_build(
    sandbox: XcodeSandbox, request: Mapping[str, Any], stream: trio.abc.HalfCloseableStream
) -> None:
    await serve_build_api(stream, sandbox.builds, request)
