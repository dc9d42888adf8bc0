"""What the SDK socket's dialects share (sdk_ws.py): the device API's routes called in-process,
the error a request is answered with, and the readers of a request's fields."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import trio

from ..drivers import DeviceDriver, DeviceError
from .api_errors import Reason, RequestError, classify
from .device_api import ApiRequest, DeviceApi

__all__ = ["DeviceCalls", "Handler", "SdkError", "field", "optional"]


class SdkError(Exception):
    """A request the socket answers with the dialect's error: a code and a message."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class _Body(trio.abc.ReceiveStream):
    """A request body held in memory, as the device API's routes read one."""

    def __init__(self, data: bytes) -> None:
        self._data = data

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        await trio.lowlevel.checkpoint()
        size = max_bytes or len(self._data) or 1
        out, self._data = self._data[:size], self._data[size:]
        return out

    async def aclose(self) -> None:
        self._data = b""
        await trio.lowlevel.checkpoint()


class DeviceCalls:
    """The device API's routes, called in-process: ``(content type, body)`` or `SdkError`
    with the route's own reason as the code."""

    def __init__(self, device: DeviceDriver) -> None:
        self.device = device
        self._api = DeviceApi(device)

    async def call(
        self, method: str, path: str, body: object = None, *, query: str = ""
    ) -> tuple[str, bytes]:
        data = b"" if body is None else json.dumps(body).encode()
        request = ApiRequest.from_open(
            {"method": method, "path": path, "query": query,
             "content_type": "application/json" if body is not None else ""},
            _Body(data),
        )  # fmt: skip
        try:
            response = await self._api.route(request)
        except (RequestError, DeviceError, trio.ClosedResourceError) as exc:
            reason, message = classify(exc)
            raise SdkError(reason.value, message) from None
        return response.content_type, response.body

    async def json(self, method: str, path: str, body: object = None, *, query: str = "") -> Any:
        _, data = await self.call(method, path, body, query=query)
        return json.loads(data)

    async def input(self, **fields: object) -> None:
        await self.call("POST", "/input", fields)


#: A dialect's answer to one request: the message to send back, or None for no answer.
Handler = Callable[[DeviceCalls, Mapping[str, Any]], Awaitable[dict[str, Any] | None]]


# ---- field readers shared by the dialects ---------------------------------------------------


def field(message: Mapping[str, Any], name: str, kind: type | tuple[type, ...]) -> Any:
    """A required field of the request (bools are not numbers), or `SdkError`."""
    value = message.get(name)
    if (isinstance(value, bool) and kind is not bool) or not isinstance(value, kind):
        raise SdkError(Reason.BAD_REQUEST.value, f"{name!r} is required and of the wrong type")
    return value


def optional(message: Mapping[str, Any], name: str, kind: type | tuple[type, ...]) -> Any:
    if message.get(name) is None:
        return None
    return field(message, name, kind)
