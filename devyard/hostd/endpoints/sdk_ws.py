"""The commercial SDKs' device sockets on ``apiUrl`` (``/ws`` Android, ``/signaling`` iOS).

`@limrun/api`'s instance clients (docs/sdk-device.md) speak JSON request/reply over one
WebSocket: ``{type, id, ...}`` -> ``{type: "<type>Result", id, ...}``. The edge carries the
WebSocket's messages over an ``sdk`` stream as relay messages (docs/protocol.md 6.3; open
fields ``instance_id`` and ``path``, ``ws`` or ``signaling``); this module answers them.

Every verb goes through the device API's own routes (`DeviceApi.route`, the code behind
``{apiUrl}/screenshot``, ``/input``, ``/apps`` ...) by `DeviceCalls`: no device verb is
implemented twice, and the device API's validation and errors apply as they are. The two
dialects (`sdk_android`, `sdk_ios`) only translate message shapes.

Theory of operation. One reader takes messages from the stream; each request runs as its own
task (at most `_IN_FLIGHT` at once, so a long install does not hold up a screenshot); every
answer goes through one bounded channel to one writer task. A message that is not JSON, not
an object, or has no ``type`` is answered ``{"type": "error", "message"}``; a request the
dialect does not know, or whose fields are wrong, gets its ``<type>Result`` with the
dialect's error shape. One bad message never ends the socket; only the caller leaving (or the
instance stopping) does.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any, Final, Protocol

import trio

from ...core import RelayChannel, accept_open, reject_open
from ...core.relay import MAX_RELAY_MESSAGE
from ..drivers import DeviceDriver
from .sdk_android import ANDROID
from .sdk_calls import DeviceCalls, Handler, SdkError
from .sdk_ios import IOS

log = logging.getLogger(__name__)

__all__ = ["serve_sdk_socket"]

_IN_FLIGHT: Final = 4  # requests answered at once on one socket
_OUTGOING: Final = 8  # answers waiting for the writer
_MAX_REQUEST: Final = 1024 * 1024  # a request message (JSON) at most


class Dialect(Protocol):
    """One SDK client's message shapes."""

    name: str

    def handler(self, kind: str) -> Handler | None:
        """The handler of a request type, None for a type this dialect does not know."""
        ...

    def failure(self, kind: str, request_id: str, error: SdkError) -> dict[str, Any]:
        """The ``<type>Result`` that reports *error*."""
        ...


def _dialect(path: str) -> Dialect | None:
    dialects: dict[str, Dialect] = {"ws": ANDROID, "signaling": IOS}
    return dialects.get(path.strip("/"))


async def serve_sdk_socket(
    stream: trio.abc.Stream, device: DeviceDriver, request: Mapping[str, Any]
) -> None:
    """Answer an ``sdk`` stream's requests until either side ends it."""
    dialect = _dialect(str(request.get("path", "")))
    if dialect is None:
        await reject_open(stream, "not-found", f"no SDK socket {request.get('path')!r}")
        return
    await accept_open(stream)
    channel = RelayChannel(stream)
    calls = DeviceCalls(device)
    outgoing, to_caller = trio.open_memory_channel[dict[str, Any]](_OUTGOING)
    room = trio.Semaphore(_IN_FLIGHT)  # the reader takes a place, the request's task frees it

    async def writer() -> None:
        async with to_caller:
            async for message in to_caller:
                text = json.dumps(message)
                if len(text) > MAX_RELAY_MESSAGE:  # the relay's bound: say so, not break off
                    kind = str(message.get("type", "")).removesuffix("Result")
                    too_large = SdkError("too_large", "the answer is too large to send")
                    text = json.dumps(dialect.failure(kind, str(message.get("id", "")), too_large))
                await channel.send(text)

    async def answer(
        kind: str, message: Mapping[str, Any], out: trio.MemorySendChannel[dict[str, Any]]
    ) -> None:
        try:
            async with out:
                reply = await _answer(dialect, calls, kind, message)
                if reply is not None:
                    await out.send(reply)
        finally:
            room.release()

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(writer)
            async with outgoing:
                while True:
                    try:
                        raw = await channel.receive()
                    except trio.EndOfChannel:
                        nursery.cancel_scope.cancel()  # the caller left: nobody to answer
                        break
                    parsed = _parse(raw)
                    if isinstance(parsed, str):
                        await outgoing.send({"type": "error", "message": parsed})
                        continue
                    await room.acquire()  # backpressure: no more tasks than answers in flight
                    nursery.start_soon(answer, parsed["type"], parsed, outgoing.clone())
    except* (trio.BrokenResourceError, trio.ClosedResourceError):
        pass  # the caller went away
    finally:
        await trio.aclose_forcefully(stream)


def _parse(raw: str | bytes) -> dict[str, Any] | str:
    """The request, or why it is not one."""
    if len(raw) > _MAX_REQUEST:
        return f"a request message is at most {_MAX_REQUEST} bytes"
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        return "the message is not JSON"
    if not isinstance(value, dict):
        return "the message must be a JSON object"
    if not isinstance(value.get("type"), str) or not value["type"]:
        return "the message has no 'type'"
    return value


async def _answer(
    dialect: Dialect, calls: DeviceCalls, kind: str, message: Mapping[str, Any]
) -> dict[str, Any] | None:
    raw_id = message.get("id")
    request_id = raw_id if isinstance(raw_id, str) else "" if raw_id is None else str(raw_id)
    handler = dialect.handler(kind)
    try:
        if handler is None:
            raise SdkError("unknown_type", f"the {dialect.name} socket has no request {kind!r}")
        reply = await handler(calls, message)
    except SdkError as exc:
        return dialect.failure(kind, request_id, exc)
    except Exception as exc:  # a bug in one handler answers its request, never ends the socket
        log.exception("SDK socket: %s failed", kind)
        return dialect.failure(kind, request_id, SdkError("internal", type(exc).__name__))
    if reply is None:
        return None
    return {"type": f"{kind}Result", "id": request_id, **reply}
