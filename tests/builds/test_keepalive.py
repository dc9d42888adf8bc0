"""The event stream's keep-alive comments, on a `BuildHost` served over a socket pair (the
``api`` stream's framing) with a short keep-alive period: a silent build still shows life."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import trio

from devyard.core import receive_message
from devyard.hostd.builds import BuildConfig, BuildHost, SandboxConfig, serve_build_api
from devyard.hostd.builds.sandbox import USR_LINKS


def _usr_links() -> tuple[str, ...]:
    return tuple(d for d in USR_LINKS if os.path.islink(f"/{d}"))


async def test_a_silent_exec_streams_keep_alive_comments(tmp_path: Path) -> None:
    if shutil.which("bwrap") is None:
        pytest.skip("scripts/deps installs bubblewrap")
    links = _usr_links()
    uid = 65534 if os.geteuid() == 0 else None
    sandbox = SandboxConfig(build_uid=uid, usr_links=links)
    config = BuildConfig(sandbox=sandbox, gradle_home=tmp_path / "home", keepalive_s=0.2)
    async with trio.open_nursery() as nursery:
        host = BuildHost(tmp_path / "build", config, nursery)
        host.create()
        run = host.start({"command": "run", "commandLine": "sleep 1; echo done"})
        ours, theirs = trio.socket.socketpair()
        client, server = trio.SocketStream(ours), trio.SocketStream(theirs)
        request = {"method": "GET", "path": f"exec/{run.id}/events"}
        nursery.start_soon(serve_build_api, server, host, request)
        await client.send_eof()
        head = await receive_message(client)
        assert head == {"status": 200, "content_type": "text/event-stream"}
        body = b""
        with trio.fail_after(30):
            while chunk := await client.receive_some(4096):
                body += chunk
        await client.aclose()
    text = body.decode()
    assert text.startswith("retry: 2000\n\n")
    assert ": keep-alive\n\n" in text.partition("data: done")[0], text
    assert text.endswith("event: exitCode\ndata: 0\n\n")
