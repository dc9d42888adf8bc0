"""The MCP server's way to the device: the device API (``apiUrl``) over the host link.

Every tool is a few device-API requests (docs/endpoints.md), carried as ``api`` streams to the
instance's host exactly as the gateway carries a client's request (docs/protocol.md 6.4): so
the MCP server has no verb of its own, and what works through ``apiUrl`` works here.
`DeviceApiError` carries the device API's ``{message, reason}`` and its status.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterable
from typing import Any, Final, Protocol

import attrs
import trio

from ...core import MuxStream, OpenError, RemoteProtocolError, receive_message
from ...core._groups import collapse_single_group
from ..hosts import HostUnavailableError, InstanceAccess

__all__ = ["DeviceApiClient", "DeviceApiError", "InstanceStreams", "Reply"]

#: The largest answer read into memory (a pulled file, a PNG of a big screen).
MAX_REPLY: Final = 64 * 1024 * 1024
_CHUNK: Final = 256 * 1024


class InstanceStreams(Protocol):
    """What the MCP server needs of the edge (`devyard.server.edge.Edge`)."""

    async def open_instance_stream(
        self, host_id: str, kind: str, instance_id: str, **fields: Any
    ) -> MuxStream: ...


class DeviceApiError(Exception):
    """The device API refused or could not be reached; *reason* is its ``reason``."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.message = message


@attrs.frozen
class Reply:
    status: int
    content_type: str
    body: bytes = attrs.field(repr=lambda b: f"<{len(b)} bytes>")

    def json(self) -> Any:
        return json.loads(self.body)


class DeviceApiClient:
    """Requests to one instance's device API."""

    def __init__(self, edge: InstanceStreams, access: InstanceAccess) -> None:
        self._edge = edge
        self._access = access

    @property
    def instance_id(self) -> str:
        return self._access.instance_id

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: str = "",
        json_body: Any = None,
        body: bytes | AsyncIterable[bytes] = b"",
        content_type: str = "",
    ) -> Reply:
        """One request; a status of 400 or more raises `DeviceApiError`."""
        if json_body is not None:
            body, content_type = json.dumps(json_body).encode(), "application/json"
        try:
            stream = await self._edge.open_instance_stream(
                self._access.host_id,
                "api",
                self._access.instance_id,
                method=method,
                path=path,
                query=query,
                content_type=content_type,
            )
        except HostUnavailableError as exc:
            raise DeviceApiError(503, "host_unavailable", f"the instance's host: {exc}") from None
        except OpenError as exc:
            raise DeviceApiError(410, "gone", exc.message) from None
        try:
            reply = await _exchange(stream, body)
        except (RemoteProtocolError, trio.BrokenResourceError, KeyError, ValueError) as exc:
            message = f"the device API answer broke off: {exc}"
            raise DeviceApiError(502, "bad_gateway", message) from None
        finally:
            await trio.aclose_forcefully(stream)
        if reply.status >= 400:
            try:
                error = reply.json()
                message, reason = str(error["message"]), str(error["reason"])
            except (ValueError, KeyError, TypeError):
                message, reason = reply.body[:200].decode(errors="replace"), "device_error"
            raise DeviceApiError(reply.status, reason, message)
        return reply

    async def get_json(self, path: str, query: str = "") -> Any:
        return (await self.request("GET", path, query=query)).json()

    async def post_json(self, path: str, value: Any) -> Any:
        return (await self.request("POST", path, json_body=value)).json()


async def _exchange(stream: MuxStream, body: bytes | AsyncIterable[bytes]) -> Reply:
    """Send the body while the answer comes back (either may come first)."""

    async def send_body() -> None:
        try:
            if isinstance(body, bytes):
                if body:
                    await stream.send_all(body)
            else:
                async for chunk in body:
                    await stream.send_all(chunk)
            await stream.send_eof()
        except (trio.BrokenResourceError, trio.ClosedResourceError, RemoteProtocolError):
            pass  # the host answered, or went away: the answer (or its absence) says which

    with collapse_single_group():
        async with trio.open_nursery() as nursery:
            nursery.start_soon(send_body)
            return await _read_reply(stream, nursery.cancel_scope)


async def _read_reply(stream: MuxStream, body_sender: trio.CancelScope) -> Reply:
    head = await receive_message(stream)
    data = bytearray()
    while chunk := await stream.receive_some(_CHUNK):
        data += chunk
        if len(data) > MAX_REPLY:
            raise ValueError(f"the answer is larger than {MAX_REPLY} bytes")
    body_sender.cancel()  # a route that answered without reading all of its body
    return Reply(int(head["status"]), str(head["content_type"]), bytes(data))
