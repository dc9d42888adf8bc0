"""Issue 14 finding 7: what the host fetches as an initial app, against loopback servers.

A user's URL is fetched only where the host's policy allows (public addresses by default, so
every loopback server here is "private" unless the test opens it with ``allow``), within size
and time caps, and the error does not tell a refused address, a closed port and an open one
apart.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import zipfile
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path

import pytest
import trio
import trio.testing

from devyard.hostd.drivers import DeviceSpec, Platform
from devyard.hostd.drivers.virtual import VirtualDevice, open_virtual_device
from devyard.hostd.endpoints.api_errors import RequestError
from devyard.hostd.endpoints.device_api import ApiRequest, DeviceApi
from devyard.hostd.fetch import FetchLimits
from devyard.hostd.initial_assets import InitialAssetError, install_initial_assets
from devyard.hostd.netdial import DeviceNetwork, assign
from devyard.hostd.netpolicy import NetPolicy, parse_networks
from tests.ports import free_port

MIRROR = "127.0.0.3"  # stands for a private mirror
MIRROR_POLICY = NetPolicy(allow=parse_networks([f"{MIRROR}/32"]))


def _apk(package: str) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("devyard-package.txt", f"package={package}\n")
    return buffer.getvalue()


APK = _apk("com.acme.mirrored")


class Server:
    """A loopback HTTP server with a few behaviours by path; records what was asked."""

    def __init__(self) -> None:
        self.paths: list[str] = []
        self.redirect_to = ""
        self.stall = trio.Event()  # never set: a body that stops coming

    async def handle(self, stream: trio.SocketStream) -> None:
        # the host hangs up on a body it does not want: that is the point
        with contextlib.suppress(trio.BrokenResourceError):
            await self._answer(stream)

    async def _answer(self, stream: trio.SocketStream) -> None:
        async with stream:
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = await stream.receive_some()
                if not chunk:
                    return
                data += chunk
            path = data.split(b" ", 2)[1].decode()
            self.paths.append(path)
            if path.startswith("/app.apk"):
                await stream.send_all(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(APK))
                await stream.send_all(APK)
            elif path == "/big-declared":
                await stream.send_all(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n")
                await stream.send_all(b"x" * 100000)
            elif path == "/big-chunked":
                await stream.send_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
                for _ in range(30):
                    await stream.send_all(b"1000\r\n" + b"x" * 0x1000 + b"\r\n")
                await stream.send_all(b"0\r\n\r\n")
            elif path == "/slow":
                await stream.send_all(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc")
                await self.stall.wait()
            elif path == "/redirect":
                await stream.send_all(
                    b"HTTP/1.1 302 Found\r\nLocation: %s\r\nContent-Length: 0\r\n\r\n"
                    % self.redirect_to.encode()
                )
            else:
                await stream.send_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")


async def _serve(nursery: trio.Nursery, server: Server, host: str) -> int:
    listeners = await nursery.start(partial(trio.serve_tcp, server.handle, 0, host=host))
    return int(listeners[0].socket.getsockname()[1])


@pytest.fixture
async def device(tmp_path: Path) -> AsyncIterator[VirtualDevice]:
    spec = DeviceSpec(Platform.ANDROID, "android_assets_1", tmp_path / "sb")
    async with open_virtual_device(spec) as dev:
        yield dev


async def _install(device: VirtualDevice, url: str, workdir: Path, **kw: object) -> str | None:
    """None when installed, else the error message."""
    try:
        with trio.fail_after(20):
            await install_initial_assets(device, [{"name": "app.apk", "url": url}], workdir, **kw)  # type: ignore[arg-type]
    except InitialAssetError as exc:
        return str(exc)
    return None


async def test_private_and_loopback_urls_are_refused_by_default_without_an_oracle(
    device: VirtualDevice, nursery: trio.Nursery, tmp_path: Path
) -> None:
    server = Server()
    port = await _serve(nursery, server, "127.0.0.1")
    closed = free_port()
    refused = "could not fetch the initial asset 'app.apk' (not-allowed)"
    for url in [
        f"http://127.0.0.1:{port}/app.apk",  # open
        f"http://127.0.0.1:{closed}/app.apk",  # closed: the same answer
        f"http://localhost:{port}/app.apk",
        f"http://[::ffff:127.0.0.1]:{port}/app.apk",
        f"http://0.0.0.0:{port}/app.apk",
        "http://169.254.169.254/latest/meta-data/",
        "http://10.0.0.1:9/app.apk",
    ]:
        assert await _install(device, url, tmp_path / "w") == refused, url
    assert server.paths == []  # nothing ever connected
    assert await device.list_apps() == [] or all(
        a.app_id != "com.acme.mirrored" for a in await device.list_apps()
    )


async def test_an_allowed_mirror_installs_and_redirects_are_checked_again(
    device: VirtualDevice, nursery: trio.Nursery, tmp_path: Path
) -> None:
    mirror = Server()
    port = await _serve(nursery, mirror, MIRROR)
    inner = Server()
    inner_port = await _serve(nursery, inner, "127.0.0.1")
    policy = {"policy": MIRROR_POLICY}
    assert (
        await _install(device, f"http://{MIRROR}:{port}/app.apk", tmp_path / "a", **policy) is None
    )
    assert "com.acme.mirrored" in {a.app_id for a in await device.list_apps()}

    mirror.redirect_to = f"http://127.0.0.1:{inner_port}/app.apk"  # out of the allowed range
    message = await _install(device, f"http://{MIRROR}:{port}/redirect", tmp_path / "b", **policy)
    assert message == "could not fetch the initial asset 'app.apk' (not-allowed)"
    assert inner.paths == []
    mirror.redirect_to = "/app.apk?sig=1"  # within the mirror: followed
    assert (
        await _install(device, f"http://{MIRROR}:{port}/redirect", tmp_path / "c", **policy) is None
    )

    # An answer that is not the file, or no answer: one word, whatever the cause.
    unavailable = "could not fetch the initial asset 'app.apk' (unavailable)"
    closed = free_port()
    for url in [f"http://{MIRROR}:{port}/missing", f"http://{MIRROR}:{closed}/app.apk"]:
        assert await _install(device, url, tmp_path / "d", **policy) == unavailable, url


async def test_too_large_and_too_slow_bodies_are_refused(
    device: VirtualDevice, nursery: trio.Nursery, tmp_path: Path
) -> None:
    server = Server()
    port = await _serve(nursery, server, MIRROR)
    base = f"http://{MIRROR}:{port}"
    kw: dict[str, object] = {
        "policy": MIRROR_POLICY,
        "limits": FetchLimits(max_bytes=50_000, timeout=1.0),
    }
    for path in ("/big-declared", "/big-chunked"):
        message = await _install(device, base + path, tmp_path / "w", **kw)
        assert message == "could not fetch the initial asset 'app.apk' (too-large)", path
    message = await _install(device, base + "/slow", tmp_path / "w", **kw)
    assert message == "could not fetch the initial asset 'app.apk' (timed-out)"


async def test_signed_urls_stay_out_of_the_log(
    device: VirtualDevice,
    nursery: trio.Nursery,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = Server()
    port = await _serve(nursery, server, MIRROR)
    caplog.set_level(logging.INFO)
    url = f"http://{MIRROR}:{port}/app.apk?signature=TOPSECRET"
    assert await _install(device, url, tmp_path / "w", policy=MIRROR_POLICY) is None
    failing = f"http://{MIRROR}:{port}/missing?signature=TOPSECRET"
    assert await _install(device, failing, tmp_path / "x", policy=MIRROR_POLICY) is not None
    assert server.paths[0] == "/app.apk?signature=TOPSECRET"  # the signature was sent...
    assert caplog.records  # ...and something was logged, without it
    assert not [r for r in caplog.records if "TOPSECRET" in r.getMessage()]


async def test_the_device_api_installs_from_a_url_under_the_same_policy(
    device: VirtualDevice,
) -> None:
    """``POST {apiUrl}/apps`` with ``{"url"}`` (what MCP's install_app with a URL sends)."""

    async def install(url: str) -> str:
        body = trio.testing.MemoryReceiveStream()
        body.put_data(json.dumps({"url": url}).encode())
        body.put_eof()
        request = {"method": "POST", "path": "/apps", "content_type": "application/json"}
        try:
            response = await DeviceApi(device).route(ApiRequest.from_open(request, body))
        except RequestError as exc:
            return exc.message
        return str(json.loads(response.body)["id"])

    server = Server()
    async with trio.open_nursery() as nursery:
        port = await _serve(nursery, server, MIRROR)
        url = f"http://{MIRROR}:{port}/app.apk"
        assert await install(url) == "could not download the app (not-allowed)"
        assert server.paths == []  # refused before any connection
        assign(device, DeviceNetwork(MIRROR_POLICY))
        assert await install(url) == "com.acme.mirrored"
        nursery.cancel_scope.cancel()
