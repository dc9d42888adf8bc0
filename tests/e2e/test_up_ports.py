"""``targetHttpPortUrlPrefix`` against ``devyard up`` (issue 15): real processes end to end.

An HTTP server (Hypercorn) and a WebSocket echo server (trio-websocket) run in this test and
listen on the virtual device's ports 8080 and 8081 the way a developer's Metro server does:
``adb reverse`` through ``devyard adb forward`` with the real ``adb``. httpx and trio-websocket
reach them through the prefix. 64 MiB go each way while the peak memory of the ``devyard up``
process (server, edge and host daemon in one) is measured: its high-water mark is reset
(``/proc/PID/clear_refs``) before each transfer, and must grow by less than a bound well under
the body's size, so a proxy that held a whole body fails the test.
"""

from __future__ import annotations

import hashlib
import re
import signal
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import attrs
import httpx
import pytest
import trio
from trio_websocket import open_websocket_url

from tests.device_apps import DeviceHttp, pattern, serve_device_http, serve_device_ws
from tests.hostd.adb.conftest import AdbClient, adb, needs_adb

from ._cli import DEVYARD, Running, clean_env, create_ready_android, run, start

pytestmark = [pytest.mark.slow, needs_adb]
__all__ = ["adb"]  # the fixture, imported for these tests

BIG = 64 * 1024 * 1024
#: Peak memory growth allowed while BIG bytes cross the proxy: what the bounded buffers on the
#: way (ASGI queue, mux windows, the ADB reverse path, 1 MiB reads) may hold, and far less
#: than a buffered body.
GROWTH_BOUND = 40 * 1024 * 1024
_LISTENING = re.compile(rb"forwarding 127\.0\.0\.1:(\d+) ")


@attrs.define
class Up:
    running: Running
    url: str
    data: Path
    http: httpx.AsyncClient
    instance: dict[str, Any] = attrs.field(factory=dict)

    @property
    def prefix(self) -> str:
        return str(self.instance["status"]["targetHttpPortUrlPrefix"])

    @property
    def token(self) -> str:
        return str(self.instance["status"]["token"])


@asynccontextmanager
async def _up(tmp_path: Path) -> AsyncIterator[Up]:
    data = tmp_path / "data"
    running = await start(["up", "--data-dir", str(data), "--port", "0"], clean_env(), tmp_path)
    try:
        with trio.fail_after(60):
            url = (await running.read_until(r"serving at (http://127\.0\.0\.1:\d+)")).group(1)
        key = (data / "admin-api-key").read_text().strip()
        auth = {"Authorization": f"Bearer {key}"}
        async with httpx.AsyncClient(base_url=url, headers=auth, timeout=60) as http:
            yield Up(running, url, data, http, await create_ready_android(http))
    finally:
        with trio.move_on_after(30, shield=True):
            assert await running.stop(signal.SIGINT) == 0


@asynccontextmanager
async def _forwarder(up: Up) -> AsyncIterator[int]:
    """``devyard adb forward`` for the instance; yields its local port."""
    argv = [*DEVYARD, "adb", "forward", up.instance["metadata"]["id"], "--server", up.url,
            "--api-key-file", str(up.data / "admin-api-key")]  # fmt: skip
    async with trio.open_nursery() as nursery:
        proc: trio.Process = await nursery.start(
            partial(trio.run_process, argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                    check=False, env=clean_env())
        )  # fmt: skip
        assert proc.stdout is not None
        seen = b""
        with trio.fail_after(30):
            while (match := _LISTENING.search(seen)) is None:
                chunk = await proc.stdout.receive_some()
                assert chunk, f"the forwarder stopped: {seen!r}"
                seen += chunk
        try:
            yield int(match.group(1))
        finally:
            proc.terminate()
            with trio.move_on_after(10):
                await proc.wait()


def _peak_reset(pid: int) -> int:
    """Reset the process's peak RSS to its current RSS; return that (bytes)."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")
    return _status_kib(pid, "VmRSS") * 1024


def _peak(pid: int) -> int:
    return _status_kib(pid, "VmHWM") * 1024


def _status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} in /proc/{pid}/status")


async def test_device_ports_through_the_prefix(
    tmp_path: Path, adb: AdbClient, nursery: trio.Nursery
) -> None:
    app = DeviceHttp()
    app_port = await nursery.start(serve_device_http, app)
    ws_port = await nursery.start(serve_device_ws)
    async with _up(tmp_path) as up, _forwarder(up) as forwarded:
        adb.serial = await adb.connect(forwarded)
        await adb.run("reverse", "tcp:8080", f"tcp:{app_port}")
        await adb.run("reverse", "tcp:8081", f"tcp:{ws_port}")
        pid = up.running.process.pid
        bearer = {"Authorization": f"Bearer {up.token}"}
        async with httpx.AsyncClient(base_url=up.prefix, timeout=120) as http:
            # plain HTTP, with both kinds of token
            hello = await http.get("8080/hello", headers=bearer)
            assert (hello.status_code, hello.text) == (200, "hello from the device")
            by_query = await http.get("8080/echo-request", params={"token": up.token, "q": "1"})
            assert by_query.json()["query"] == "q=1", "?token= opens it and is not forwarded"

            # refusals: no token, a wrong one, another organization's key and instance token
            beta = await run(
                ["admin", "bootstrap", "--data-dir", str(up.data), "--org", "beta"],
                clean_env(), tmp_path,
            )  # fmt: skip
            assert beta.returncode == 0, beta.stderr
            beta_key = beta.stdout.decode().splitlines()[-1]
            up.http.headers["Authorization"] = f"Bearer {beta_key}"
            theirs = await create_ready_android(up.http)
            for token in (None, "dyi_wrong", beta_key, theirs["status"]["token"]):
                headers = {} if token is None else {"Authorization": f"Bearer {token}"}
                refused = await http.get("8080/hello", headers=headers)
                assert refused.status_code == 401, (token, refused.text)
                assert refused.json()["reason"] == "unauthorized"
            closed = await http.get("9/", headers=bearer)
            assert (closed.status_code, closed.json()["reason"]) == (502, "port_closed")

            # chunked, 64 MiB each way, in bounded memory
            async def upload() -> AsyncIterator[bytes]:
                for piece in pattern(BIG):
                    yield piece

            expected = hashlib.sha256()
            for piece in pattern(BIG):
                expected.update(piece)
            before = _peak_reset(pid)
            counted = await http.post("8080/count", content=upload(), headers=bearer)
            up_growth = _peak(pid) - before
            assert counted.json() == {"size": BIG, "sha256": expected.hexdigest()}

            before = _peak_reset(pid)
            digest, size = hashlib.sha256(), 0
            async with http.stream("GET", "8080/bytes", params={"n": BIG}, headers=bearer) as got:
                assert got.headers["transfer-encoding"] == "chunked"
                async for chunk in got.aiter_raw():
                    digest.update(chunk)
                    size += len(chunk)
            down_growth = _peak(pid) - before
            assert (size, digest.hexdigest()) == (BIG, expected.hexdigest())
            print(f"peak growth: upload {up_growth >> 20} MiB, download {down_growth >> 20} MiB")
            assert up_growth < GROWTH_BOUND, f"upload: peak grew {up_growth >> 20} MiB"
            assert down_growth < GROWTH_BOUND, f"download: peak grew {down_growth >> 20} MiB"

        # WebSocket: a real client, the device's echo server
        ws_prefix = "ws" + up.prefix.removeprefix("http")
        with trio.fail_after(60):
            async with open_websocket_url(f"{ws_prefix}8081/?token={up.token}") as ws:
                for message in ("hello ✓", b"\x00\x01binary", bytes(1024 * 1024)):
                    await ws.send_message(message)
                    assert await ws.get_message() == message
