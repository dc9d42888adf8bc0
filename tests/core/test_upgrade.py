"""The raw link handshake (core/upgrade.py) between two in-memory stream ends."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from devyard.core import UpgradeRejected, accept_upgrade
from devyard.core.upgrade import UPGRADE_PROTOCOL, PrefixedStream, dial_upgrade


async def test_accepted_upgrade_hands_over_bytes_that_came_with_the_101() -> None:
    client, server = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:

        async def serve() -> None:
            request = await accept_upgrade(server)
            assert request is not None
            assert (request.method, request.path, request.wants_upgrade) == ("GET", "/v1/x", True)
            assert request.header(b"authorization") == b"Bearer s3cret"
            assert request.target == "/v1/x?a=1"
            raw = await request.accept()
            await raw.send_all(b"first frames")  # may share a read with the 101
            assert await raw.receive_some(100) == b"from the client"

        nursery.start_soon(serve)
        stream = await dial_upgrade(
            client,
            host="edge:7443",
            path="/v1/x?a=1",
            headers=[(b"authorization", b"Bearer s3cret")],
        )
        received = b""
        while len(received) < len(b"first frames"):
            received += await stream.receive_some(5)
        assert received == b"first frames"
        await stream.send_all(b"from the client")


async def test_a_refusal_reaches_the_client_with_status_and_body() -> None:
    client, server = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:

        async def serve() -> None:
            request = await accept_upgrade(server)
            assert request is not None
            await request.reject(401, b'{"code": "token-invalid"}')

        nursery.start_soon(serve)
        with pytest.raises(UpgradeRejected) as rejected:
            await dial_upgrade(client, host="edge", path="/v1/x")
    assert rejected.value.status_code == 401
    assert rejected.value.body == b'{"code": "token-invalid"}'


@pytest.mark.parametrize(
    "sent",
    [
        b"\x16\x03\x01\x00\x05hello\r\n\r\n",  # a TLS hello on a plain port
        b"POST /v1/x HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc",  # has a body
        b"",  # connected, then hung up
    ],
)
async def test_what_is_not_an_upgrade_request_is_dropped(sent: bytes) -> None:
    client, server = trio.testing.memory_stream_pair()
    await client.send_all(sent)
    await client.send_eof()
    assert await accept_upgrade(server) is None


async def test_a_server_that_is_not_http_is_a_broken_link() -> None:
    client, server = trio.testing.memory_stream_pair()
    await server.send_all(b"SSH-2.0-OpenSSH_9.2\r\n")
    await server.send_eof()
    with pytest.raises(trio.BrokenResourceError):
        await dial_upgrade(client, host="edge", path="/v1/x")


async def test_prefixed_stream_serves_its_prefix_in_max_bytes_slices() -> None:
    left, right = trio.testing.memory_stream_pair()
    stream = PrefixedStream(left, b"abcdef")
    assert await stream.receive_some(4) == b"abcd"
    assert await stream.receive_some() == b"ef"
    await right.send_all(b"gh")
    assert await stream.receive_some() == b"gh"
    assert UPGRADE_PROTOCOL == "devyard-mux/1"
