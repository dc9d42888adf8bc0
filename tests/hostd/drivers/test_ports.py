"""Device sockets: something listens "on the device", open_port reaches it (for the HTTP proxy
of targetHttpPortUrlPrefix and adb's tcp:/localabstract: services)."""

from __future__ import annotations

import pytest
import trio

from devyard.hostd.drivers import InvalidInputError, PortClosedError
from devyard.hostd.drivers._shared.ports import ListeningSocket, SocketKind
from devyard.hostd.drivers.virtual import VirtualDevice


async def tiny_http(stream: trio.SocketStream) -> None:
    """An HTTP/1.0 server answering every request with its request line."""
    request = b""
    while b"\r\n\r\n" not in request:
        chunk = await stream.receive_some(4096)
        if not chunk:
            return
        request += chunk
    line = request.split(b"\r\n", 1)[0]
    body = b"you asked: " + line
    await stream.send_all(b"HTTP/1.0 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    await stream.aclose()


async def read_all(stream: trio.abc.ReceiveStream) -> bytes:
    data = b""
    while chunk := await stream.receive_some(65536):
        data += chunk
    return data


async def test_http_server_on_a_device_port(android: VirtualDevice) -> None:
    async with trio.open_nursery() as nursery:
        host_port = await nursery.start(android.serve_port, 8080, tiny_http)
        assert android.listening() == [ListeningSocket(SocketKind.TCP, 8080, host_port)]
        stream = await android.open_port(8080)
        async with stream:
            await stream.send_all(b"GET /hello?x=1 HTTP/1.0\r\nHost: device\r\n\r\n")
            response = await read_all(stream)
        assert response.startswith(b"HTTP/1.0 200 OK")
        assert response.endswith(b"you asked: GET /hello?x=1 HTTP/1.0")
        nursery.cancel_scope.cancel()
    assert android.listening() == []
    with pytest.raises(PortClosedError):
        await android.open_port(8080)


async def echo_until_eof(stream: trio.SocketStream) -> None:
    received = await read_all(stream)
    await stream.send_all(received[::-1])
    await stream.aclose()


async def test_abstract_socket_and_half_close(android: VirtualDevice) -> None:
    async with trio.open_nursery() as nursery:
        await nursery.start(android.serve_abstract, "chrome_devtools_remote", echo_until_eof)
        stream = await android.open_abstract("chrome_devtools_remote")
        async with stream:
            await stream.send_all(b"abc")
            await stream.send_eof()  # the server reads to EOF, then still answers
            assert await read_all(stream) == b"cba"
        nursery.cancel_scope.cancel()


async def test_map_port_points_at_an_existing_loopback_listener(android: VirtualDevice) -> None:
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.serve_listeners, echo_until_eof, listeners)
        android.map_abstract("webview_devtools_remote_1234", port)
        stream = await android.open_abstract("webview_devtools_remote_1234")
        async with stream:
            await stream.send_all(b"xy")
            await stream.send_eof()
            assert await read_all(stream) == b"yx"
        android.unmap_abstract("webview_devtools_remote_1234")
        with pytest.raises(PortClosedError):
            await android.open_abstract("webview_devtools_remote_1234")
        nursery.cancel_scope.cancel()


async def test_port_errors(android: VirtualDevice) -> None:
    with pytest.raises(PortClosedError, match="nothing listens on device tcp socket 9"):
        await android.open_port(9)
    with pytest.raises(InvalidInputError):
        await android.open_port(70000)
    android.map_port(5000, 1)  # mapped, but nothing listens behind it: refused, clearly
    with pytest.raises(PortClosedError, match="refused"):
        await android.open_port(5000)
    with pytest.raises(InvalidInputError, match="already in use"):
        android.map_port(5000, 2)


async def test_closing_the_device_refuses_new_connections(android: VirtualDevice) -> None:
    android.map_port(7000, 12345)
    await android.aclose()
    assert android.listening() == []
    with pytest.raises(trio.ClosedResourceError):
        await android.open_port(7000)
