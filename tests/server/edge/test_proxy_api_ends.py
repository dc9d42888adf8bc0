"""A device API request whose host stream ends before the answer's head (`gateway._proxy_api`):
the client gets a 502 APIError, never a bare 500. The end comes out of the proxy's nursery as an
exception group, which the proxy must take like the plain error."""

from __future__ import annotations

import json
from collections.abc import MutableMapping
from typing import Any

import pytest
import trio

from devyard.server.edge.gateway import _proxy_api
from tests.core.conftest import session_pair


@pytest.mark.parametrize("how", ["eof", "reset"])
async def test_a_stream_that_ends_before_the_head_is_a_502(how: str) -> None:
    sent: list[MutableMapping[str, Any]] = []
    requested = False

    async def receive() -> dict[str, Any]:
        nonlocal requested
        if not requested:
            requested = True
            return {"type": "http.request", "body": b'{"command": "x"}', "more_body": False}
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    async with session_pair() as (client, server), trio.open_nursery() as nursery:
        edge_side = await client.open_stream()

        async def host() -> None:
            stream = await server.accept_stream()
            if how == "eof":  # the request read, then the stream ends without an answer
                while await stream.receive_some(65536):
                    pass
                await stream.send_eof()
            else:  # unread data thrown away: a reset
                await stream.aclose()

        nursery.start_soon(host)
        with trio.fail_after(10):
            await _proxy_api(edge_side, receive, send)  # answers, does not raise
    assert sent[0]["type"] == "http.response.start"
    assert sent[0]["status"] == 502
    body = json.loads(b"".join(m.get("body", b"") for m in sent[1:]))
    assert body == {
        "message": "the device ended the request before answering",
        "reason": "bad_gateway",
    }
