"""Issue 14 finding 10, what remained: the temporary file of an upload whose server was killed
(``kill -9``) mid-upload is swept after the restart, while a live upload's file is never
touched, however long its client stalls. The real `devyard up` runs as a subprocess."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import trio

from tests.polling import eventually

from ._cli import Running, clean_env, start

pytestmark = pytest.mark.slow

FIRST = b"x" * (1024 * 1024 + 1)  # past the store's write buffer: bytes reach the file
LONG_AGO = 3600.0 * 24
ENV = {"DEVYARD_BLOB_SWEEP_INTERVAL": "0.2", "DEVYARD_BLOB_ORPHAN_GRACE": "5"}


async def _up(data: Path, cwd: Path) -> tuple[Running, str]:
    up = await start(["up", "--data-dir", str(data), "--port", "0"], clean_env(**ENV), cwd)
    url = (await up.read_until(r"serving at (http://127\.0\.0\.1:\d+)")).group(1)
    return up, url


def _temps(data: Path) -> list[Path]:
    tmp = data / "blobs" / ".tmp"
    return sorted(tmp.iterdir()) if tmp.is_dir() else []


def _age(path: Path) -> None:
    old = time.time() - LONG_AGO
    os.utime(path, (old, old))


async def _stalled_upload(
    http: httpx.AsyncClient, name: str, release: trio.Event, answers: list[httpx.Response]
) -> None:
    asset = await http.put("/v1/assets", json={"name": name})
    assert asset.status_code == 200, asset.text

    async def body() -> AsyncIterator[bytes]:
        yield FIRST
        await release.wait()  # a client that stalls mid-upload
        yield b"end"

    answers.append(
        await http.put(
            asset.json()["signedUploadUrl"],
            content=body(),
            headers={"Content-Type": "application/octet-stream"},
        )
    )


async def test_a_killed_uploads_file_is_swept_and_a_live_ones_never(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with trio.fail_after(120):
        up, url = await _up(data, tmp_path)
        auth = {"Authorization": f"Bearer {(data / 'admin-api-key').read_text().strip()}"}
        try:
            async with httpx.AsyncClient(base_url=url, headers=auth, timeout=60) as http:
                # a live upload, stalled, whose file looks a day old: the sweep leaves it
                release, answers = trio.Event(), list[httpx.Response]()
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(_stalled_upload, http, "live.apk", release, answers)
                    await eventually(lambda: len(_temps(data)) == 1)
                    (live,) = _temps(data)
                    await eventually(lambda: live.stat().st_size >= len(FIRST))
                    _age(live)
                    planted = live.with_name("left-by-a-dead-process")
                    planted.write_bytes(b"stale")
                    _age(planted)
                    await eventually(lambda: not planted.exists())  # a sweep ran since
                    assert live.exists()
                    release.set()
                (answer,) = answers
                assert answer.status_code == 200, answer.text
                assert _temps(data) == []

                # an upload under way when the server is killed leaves its file behind
                async with trio.open_nursery() as nursery:
                    never, lost = trio.Event(), list[httpx.Response]()
                    nursery.start_soon(_stalled_upload, http, "killed.apk", never, lost)
                    await eventually(lambda: len(_temps(data)) == 1)
                    (left,) = _temps(data)
                    await eventually(lambda: left.stat().st_size >= len(FIRST))
                    up.process.send_signal(signal.SIGKILL)
                    await up.process.wait()
                    nursery.cancel_scope.cancel()  # the stalled client never notices
                assert lost == []
                assert left.exists()
        finally:
            if up.process.returncode is None:
                up.process.kill()
                await up.process.wait()

        up, url = await _up(data, tmp_path)
        try:
            # the file is younger than the grace: the sweep at start keeps it, a later one
            # (once it is older than the grace) removes it
            await eventually(lambda: not left.exists(), seconds=30)
            assert _temps(data) == []
        finally:
            assert await up.stop(signal.SIGINT) == 0
