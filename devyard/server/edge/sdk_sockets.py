"""The commercial SDKs' WebSockets under ``apiUrl`` (docs/sdk-device.md).

``{apiUrl}/ws`` (the Android instance client) and ``{apiUrl}/signaling`` (the iOS one) are
relayed message for message to the host over an ``sdk`` stream, which answers them
(hostd/endpoints/sdk_ws.py); both clients put the instance token in the query. The iOS
client's reverse tunnel (``{apiUrl}/reverse-tunnel?remotePort=N``, device to caller) needs a
listener inside the device that the virtual device does not have: it is answered with the
tunnel protocol's own error message, ``{"type": "error", "message"}``, which the SDK turns
into a rejected ``startReverseTunnel``, and closed.
"""

from __future__ import annotations

import contextlib
import json
from typing import Final

import trio

from ...core import RemoteProtocolError
from .asgi_stream import Send

__all__ = ["REVERSE_TUNNEL", "SDK_SOCKETS", "refuse_reverse_tunnel"]

SDK_SOCKETS: Final = frozenset({"ws", "signaling"})
REVERSE_TUNNEL: Final = "reverse-tunnel"
_REFUSAL: Final = json.dumps(
    {"type": "error", "message": "reverse tunnels are not supported on this device"}
)


async def refuse_reverse_tunnel(send: Send) -> None:
    with contextlib.suppress(RemoteProtocolError, trio.BrokenResourceError, OSError):
        await send({"type": "websocket.accept"})
        await send({"type": "websocket.send", "text": _REFUSAL})
        await send({"type": "websocket.close", "code": 1000})
