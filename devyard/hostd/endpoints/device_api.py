"""The per-instance device API (``apiUrl``), served by the host on a mux stream.

The edge terminates the client's HTTP request and carries it as an ``api`` stream
(docs/protocol.md 6.4): the open request holds ``method``, ``path``, ``query`` and
``content_type``; after the ok reply the request body follows until EOF. The host answers with
one message ``{"status", "content_type"}`` followed by the response body until EOF.

Routes (docs/endpoints.md is the user's reference):

    GET    /                 describe
    GET    /screenshot       PNG (``format=jpeg``, ``maxEdge``, ``quality``: imaging.py)
    GET    /ui               the element tree as JSON (drivers/uitree.py)
    POST   /input            {"type": "tap"|"swipe"|"touch"|"text"|"key"|"scroll"|"rotate", ...}
    POST   /open-url         {"url"}
    GET    /apps             installed apps
    POST   /apps             install (the body is the .apk / .ipa; or JSON {"url"})
    POST   /apps/{id}/launch, /apps/{id}/terminate; DELETE /apps/{id}
    POST   /shell            Android: {"command"} -> {"stdout", "stderr", "exitCode"}
    GET    /files?path=      pull (a directory gives its listing as JSON)
    PUT    /files?path=      push (the body), streamed
    DELETE /files?path=      remove (``recursive=true`` for directories)
    GET    /clipboard, PUT /clipboard {"text"}
    GET    /logs?after=N     retained log entries

Coordinates are screen pixels of the current orientation, as ``adb shell input tap`` takes them.
Errors are ``{"message", "reason"}``; `api_errors` names the reasons and holds the one table
from a reason to the status a web API would use.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, Final
from urllib.parse import parse_qs

import attrs
import trio

from ...core import send_message, tracing
from ..adb.device import AdbDevice
from ..adb.interpreter import CommandIO, Interpreter
from ..drivers import (
    DeviceDriver,
    DeviceError,
    FileEntry,
    FileKind,
    Key,
    Platform,
    Rotation,
    ShellDevice,
    ShellResult,
    TouchAction,
)
from ..drivers.uitree import UiTreeDevice, tree_json
from ..fetch import FetchError, fetch
from ..netdial import network_of
from .api_errors import STATUS, Reason, RequestError, classify
from .imaging import MIN_EDGE, transcode

log = logging.getLogger(__name__)

__all__ = ["ApiRequest", "serve_device_api"]

MAX_JSON_BODY: Final = 1024 * 1024
MAX_SHELL_OUTPUT: Final = 16 * 1024 * 1024
SHELL_TIMEOUT_S: Final = 60.0
_CHUNK: Final = 256 * 1024
_SWIPE_STEPS: Final = 10
_DRAIN_TIMEOUT_S: Final = 30.0


@attrs.frozen
class ApiRequest:
    method: str
    path: str
    query: Mapping[str, list[str]]
    content_type: str
    body: trio.abc.ReceiveStream

    @classmethod
    def from_open(cls, request: Mapping[str, Any], body: trio.abc.ReceiveStream) -> ApiRequest:
        return cls(
            method=str(request.get("method", "GET")).upper(),
            path="/" + str(request.get("path", "")).strip("/"),
            query=parse_qs(str(request.get("query", "")), keep_blank_values=True),
            content_type=str(request.get("content_type") or ""),
            body=body,
        )

    def arg(self, name: str, default: str | None = None) -> str:
        values = self.query.get(name)
        if values:
            return values[0]
        if default is None:
            raise RequestError(Reason.BAD_REQUEST, f"the query parameter {name!r} is required")
        return default

    async def chunks(self) -> AsyncIterator[bytes]:
        while True:
            data = await self.body.receive_some(_CHUNK)
            if not data:
                return
            yield bytes(data)

    async def read(self, limit: int) -> bytes:
        out = bytearray()
        async for chunk in self.chunks():
            out += chunk
            if len(out) > limit:
                raise RequestError(Reason.TOO_LARGE, f"the request body exceeds {limit} bytes")
        return bytes(out)

    async def json(self) -> dict[str, Any]:
        raw = await self.read(MAX_JSON_BODY)
        try:
            value = json.loads(raw or b"{}")
        except ValueError as exc:
            raise RequestError(Reason.BAD_REQUEST, f"the body is not JSON: {exc}") from None
        except RecursionError:  # nested deeper than the parser goes: no route takes that
            raise RequestError(Reason.BAD_REQUEST, "the body nests too deeply") from None
        if not isinstance(value, dict):
            raise RequestError(Reason.BAD_REQUEST, "the body must be a JSON object")
        return value


@attrs.frozen
class Response:
    status: int = 200
    content_type: str = "application/json"
    body: bytes = b""

    @classmethod
    def of_json(cls, value: object, status: int = 200) -> Response:
        return cls(status, "application/json", json.dumps(value).encode())


def _field(body: Mapping[str, Any], name: str, kind: type | tuple[type, ...]) -> Any:
    value = body.get(name)
    if isinstance(value, bool) or not isinstance(value, kind):
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise RequestError(Reason.BAD_REQUEST, f"{name!r} is required and must be a {names}")
    return value


def _number(body: Mapping[str, Any], name: str, default: float | None = None) -> float:
    if default is not None and name not in body:
        return default
    try:
        value = float(_field(body, name, (int, float)))
    except OverflowError:  # an integer past float's range
        value = math.inf
    if not math.isfinite(value):
        raise RequestError(Reason.BAD_REQUEST, f"{name!r} must be a finite number")
    return value


def _entry(entry: FileEntry) -> dict[str, Any]:
    return {
        "name": entry.name,
        "path": entry.path,
        "kind": entry.kind.value,
        "size": entry.size,
        "mode": entry.mode,
        "mtime": entry.mtime,
    }


def _app(app: Any) -> dict[str, Any]:
    return {
        "id": app.app_id,
        "label": app.label,
        "version": app.version,
        "system": app.system,
        "running": app.running,
    }


class DeviceApi:
    """The routes of one request against one device."""

    def __init__(self, device: DeviceDriver) -> None:
        self.device = device

    def _normalized(self, x: float, y: float) -> tuple[float, float]:
        info = self.device.describe()
        if not info.has_screen:
            raise RequestError(Reason.UNSUPPORTED, "this instance has no screen")
        if not (0 <= x < info.width and 0 <= y < info.height):
            raise RequestError(
                Reason.BAD_REQUEST,
                f"({x:g}, {y:g}) is outside the {info.width}x{info.height} screen",
            )
        return x / info.width, y / info.height

    async def route(self, req: ApiRequest) -> Response:
        parts = [p for p in req.path.split("/") if p]
        method = req.method
        match parts:
            case [] if method == "GET":
                return Response.of_json(_describe(self.device))
            case ["screenshot"] if method == "GET":
                return await self._screenshot(req)
            case ["ui"] if method == "GET":
                device = self.device
                if not isinstance(device, UiTreeDevice):
                    raise RequestError(Reason.UNSUPPORTED, "this device lists no elements")
                return Response.of_json(tree_json(await device.ui_tree()))
            case ["input"] if method == "POST":
                await self._input(await req.json())
                return Response.of_json({"ok": True})
            case ["open-url"] if method == "POST":
                body = await req.json()
                await self.device.open_url(_field(body, "url", str))
                return Response.of_json({"ok": True})
            case ["apps"] if method == "GET":
                apps = await self.device.list_apps()
                return Response.of_json({"items": [_app(a) for a in apps]})
            case ["apps"] if method == "POST":
                return Response.of_json(await self._install(req), 201)
            case ["apps", app_id, "launch"] if method == "POST":
                await self.device.launch(app_id)
                return Response.of_json({"ok": True})
            case ["apps", app_id, "terminate"] if method == "POST":
                await self.device.terminate(app_id)
                return Response.of_json({"ok": True})
            case ["apps", app_id] if method == "DELETE":
                await self.device.uninstall(app_id)
                return Response.of_json({"ok": True})
            case ["shell"] if method == "POST":
                return Response.of_json(await self._shell(await req.json()))
            case ["files"]:
                return await self._files(req)
            case ["clipboard"] if method == "GET":
                return Response.of_json({"text": await self.device.get_clipboard()})
            case ["clipboard"] if method == "PUT":
                await self.device.set_clipboard(_field(await req.json(), "text", str))
                return Response.of_json({"ok": True})
            case ["logs"] if method == "GET":
                after = _int_arg(req, "after", 0)
                entries = self.device.logs(after=after)
                return Response.of_json(
                    {
                        "items": [
                            {
                                "seq": e.seq,
                                "time": e.time,
                                "level": e.level.value,
                                "tag": e.tag,
                                "message": e.message,
                            }
                            for e in entries
                        ]
                    }
                )
        known = {"", "screenshot", "ui", "input", "open-url", "apps", "shell", "files", "clipboard"}
        if (parts[:1] and parts[0] in known) or not parts:
            raise RequestError(Reason.METHOD_NOT_ALLOWED, f"{method} is not allowed on {req.path}")
        raise RequestError(Reason.NOT_FOUND, f"no device API route {req.path}")

    async def _screenshot(self, req: ApiRequest) -> Response:
        png = await self.device.screenshot()
        fmt = req.arg("format", "png")
        if fmt not in ("png", "jpeg"):
            raise RequestError(Reason.BAD_REQUEST, "'format' must be png or jpeg")
        max_edge = _int_arg(req, "maxEdge", 0) or None
        quality = _int_arg(req, "quality", 80)
        if max_edge is not None and max_edge < MIN_EDGE:
            raise RequestError(Reason.BAD_REQUEST, f"'maxEdge' must be at least {MIN_EDGE}")
        if not 1 <= quality <= 95:
            raise RequestError(Reason.BAD_REQUEST, "'quality' must be within 1-95")
        if fmt == "png" and max_edge is None:
            return Response(200, "image/png", png)
        data = await trio.to_thread.run_sync(
            functools.partial(transcode, png, fmt=fmt, max_edge=max_edge, quality=quality)
        )
        return Response(200, f"image/{fmt}", data)

    async def _input(self, body: Mapping[str, Any]) -> None:
        kind = _field(body, "type", str)
        device = self.device
        if kind == "tap":
            await device.tap(*self._normalized(_number(body, "x"), _number(body, "y")))
        elif kind == "swipe":
            x1, y1 = self._normalized(_number(body, "x1"), _number(body, "y1"))
            x2, y2 = self._normalized(_number(body, "x2"), _number(body, "y2"))
            duration = _number(body, "durationMs", 300) / 1000
            await device.touch(0, TouchAction.DOWN, x1, y1)
            for step in range(1, _SWIPE_STEPS + 1):
                f = step / _SWIPE_STEPS
                await trio.sleep(max(0.0, min(duration, 5.0)) / _SWIPE_STEPS)
                await device.touch(0, TouchAction.MOVE, x1 + (x2 - x1) * f, y1 + (y2 - y1) * f)
            await device.touch(0, TouchAction.UP, x2, y2)
        elif kind == "touch":
            action = _enum(TouchAction, _field(body, "action", str), "action")
            x, y = self._normalized(_number(body, "x"), _number(body, "y"))
            await device.touch(int(_number(body, "pointerId", 0)), action, x, y)
        elif kind == "text":
            await device.text(_field(body, "text", str))
        elif kind == "key":
            await device.key(_enum(Key, _field(body, "key", str), "key"))
        elif kind == "scroll":
            x, y = self._normalized(_number(body, "x"), _number(body, "y"))
            await device.scroll(x, y, _number(body, "dx", 0.0), _number(body, "dy"))
        elif kind == "rotate":
            degrees = int(_number(body, "rotation"))
            try:
                rotation = Rotation(degrees)
            except ValueError:
                raise RequestError(
                    Reason.BAD_REQUEST, "rotation must be 0, 90, 180 or 270"
                ) from None
            await device.rotate(rotation)
        else:
            raise RequestError(
                Reason.BAD_REQUEST,
                f"unknown input type {kind!r} (tap, swipe, touch, text, key, scroll, rotate)",
            )

    async def _install(self, req: ApiRequest) -> dict[str, Any]:
        """The body is the app; or, as JSON ``{"url"}``, hostd downloads it first through the
        device's network policy (fetch.py: what initial apps from a URL go through)."""
        info = self.device.describe()
        suffix = ".apk" if info.platform is Platform.ANDROID else ".ipa"
        url = None
        if req.content_type.split(";")[0].strip() == "application/json":
            url = _field(await req.json(), "url", str)
        with tempfile.TemporaryDirectory(prefix="devyard-install-") as tmp:
            path = Path(tmp) / f"upload{req.arg('suffix', suffix)[-8:]}"
            async with await trio.open_file(path, "wb") as out:
                if url is None:
                    async for chunk in req.chunks():
                        await out.write(chunk)
                else:

                    async def sink(data: bytes) -> None:
                        await out.write(data)

                    try:
                        network = network_of(self.device)
                        await fetch(url, sink, policy=network.policy, trusted=network.trusted)
                    except FetchError as exc:
                        log.info("install from a URL: %s (%s)", exc.failure.value, exc)
                        raise RequestError(
                            Reason.BAD_REQUEST,
                            f"could not download the app ({exc.failure.value})",
                        ) from None
            return _app(await self.device.install(path))

    async def _shell(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """By capability: the virtual device's shell is interpreted here (`AdbDevice`); a
        device with a shell of its own (`ShellDevice`, an emulator's adbd) runs it."""
        command = _field(body, "command", str)
        device = self.device
        if device.describe().platform is not Platform.ANDROID:
            raise RequestError(Reason.UNSUPPORTED, "POST /shell is for Android instances")
        out, err = bytearray(), bytearray()  # what the interpreter printed, if it runs
        result: ShellResult | None = None
        with trio.move_on_after(SHELL_TIMEOUT_S):
            if isinstance(device, AdbDevice):
                status = await _interpret(device, command, out, err)
                result = ShellResult(bytes(out), bytes(err), status)
            elif isinstance(device, ShellDevice):
                result = await device.run_shell(command)
            else:
                raise RequestError(Reason.UNSUPPORTED, "this device has no shell")
        if result is None:
            err += f"devyard: the command timed out after {SHELL_TIMEOUT_S:g} s\n".encode()
            result = ShellResult(bytes(out), bytes(err), 124)  # what timeout(1) exits with
        return {
            "stdout": result.stdout.decode(errors="replace"),
            "stderr": result.stderr.decode(errors="replace"),
            "exitCode": result.exit_code,
        }

    async def _files(self, req: ApiRequest) -> Response:
        path = req.arg("path")
        device = self.device
        if req.method == "GET":
            entry = await device.stat(path)
            if entry.kind is FileKind.DIRECTORY:
                entries = await device.ls(path)
                return Response.of_json({"path": path, "items": [_entry(e) for e in entries]})
            return Response(200, "application/octet-stream", await device.pull(path))
        if req.method == "PUT":
            written = await device.push(path, req.chunks())
            return Response.of_json({"path": path, "size": written}, 201)
        if req.method == "DELETE":
            await device.remove(path, recursive=req.arg("recursive", "false") == "true")
            return Response.of_json({"ok": True})
        raise RequestError(Reason.METHOD_NOT_ALLOWED, f"{req.method} is not allowed on /files")


async def _interpret(device: AdbDevice, command: str, out: bytearray, err: bytearray) -> int:
    """The command through hostd's own shell interpreter, printing into ``out``/``err``."""

    def sink(buffer: bytearray) -> Callable[[bytes], Awaitable[None]]:
        async def write(data: bytes) -> None:
            if len(buffer) + len(data) > MAX_SHELL_OUTPUT:
                raise RequestError(Reason.TOO_LARGE, "the command printed more than 16 MiB")
            buffer.extend(data)

        return write

    return await Interpreter(device).run_line(command, CommandIO(sink(out), sink(err)))


def _describe(device: DeviceDriver) -> dict[str, Any]:
    info = device.describe()
    return {
        "instanceId": info.instance_id,
        "driver": info.driver,
        "platform": info.platform.value,
        "model": info.model,
        "modelName": info.model_name,
        "osName": info.os_name,
        "osVersion": info.os_version,
        "hasScreen": info.has_screen,
        "width": info.width,
        "height": info.height,
        "rotation": int(info.rotation),
        "density": info.density,
        "codecs": [c.value for c in info.codecs],
    }


def _int_arg(req: ApiRequest, name: str, default: int) -> int:
    raw = req.arg(name, str(default))
    try:
        return int(raw)
    except ValueError:
        raise RequestError(Reason.BAD_REQUEST, f"{name!r} must be an integer") from None


def _enum(kind: Any, value: str, name: str) -> Any:
    try:
        return kind(value)
    except ValueError:
        allowed = ", ".join(m.value for m in kind)
        raise RequestError(Reason.BAD_REQUEST, f"{name!r} must be one of {allowed}") from None


def _error_response(exc: RequestError | DeviceError | trio.ClosedResourceError) -> Response:
    """The device API's HTTP boundary: an error's reason, its status from the one table."""
    reason, message = classify(exc)
    return Response.of_json({"message": message, "reason": reason.value}, STATUS[reason])


async def serve_device_api(
    stream: trio.abc.HalfCloseableStream, device: DeviceDriver, request: Mapping[str, Any]
) -> None:
    """Answer one request (the open preamble was accepted by the caller); close the stream."""
    req = ApiRequest.from_open(request, stream)
    try:
        response = await DeviceApi(device).route(req)
    except (RequestError, DeviceError, trio.ClosedResourceError) as exc:
        response = _error_response(exc)
    tracing.record_status(tracing.HOSTD, response.status)  # on the request's span, if tracing
    if response.status >= 500:
        log.warning("device API %s %s: %s", req.method, req.path, response.body[:200])
    try:
        await send_message(
            stream, {"status": response.status, "content_type": response.content_type}
        )
        for start in range(0, len(response.body), _CHUNK):
            await stream.send_all(response.body[start : start + _CHUNK])
        await stream.send_eof()
        # Whatever body the route did not read is discarded until the edge closes its side:
        # closing with unread data would reset the stream and lose the response in flight.
        with trio.move_on_after(_DRAIN_TIMEOUT_S):
            while await stream.receive_some(_CHUNK):
                pass
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        log.info("device API %s %s: the edge went away", req.method, req.path)
    finally:
        await trio.aclose_forcefully(stream)
