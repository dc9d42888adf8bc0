"""The browser relay (`gateway._relay`) ends quietly when the host resets its stream: the reset
comes out of the relay's nursery as an exception group, which the relay must treat like any
other end of the stream instead of letting it out as a traceback."""

from __future__ import annotations

import logging
from collections.abc import MutableMapping
from typing import Any

import pytest
import trio
import trio.testing

from devyard.server.edge.gateway import _relay
from tests.core.conftest import session_pair


async def test_a_host_reset_ends_the_relay_without_an_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    sent: list[MutableMapping[str, Any]] = []
    delivered = trio.Event()
    first = True

    async def receive() -> dict[str, Any]:
        nonlocal first
        if first:  # the browser sends one message, then stays connected and quiet
            first = False
            return {"type": "websocket.receive", "text": "tap"}
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    caplog.set_level(logging.INFO, logger="devyard.server.edge.gateway")
    async with session_pair() as (client, server), trio.open_nursery() as nursery:
        edge_side = await client.open_stream()

        async def host() -> None:
            stream = await server.accept_stream()
            await trio.testing.wait_all_tasks_blocked()  # the browser's message has arrived
            delivered.set()
            await stream.aclose()  # unread data thrown away: a reset, as TCP does

        nursery.start_soon(host)
        with trio.fail_after(10):
            await _relay(edge_side, receive, send, view_only=False)  # returns, does not raise
        assert delivered.is_set()
    assert "browser stream ended" in caplog.text
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
