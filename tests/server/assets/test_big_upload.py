"""A 1 GiB upload to a real ``devyard server`` process, streamed: the server's peak memory
stays far below the upload's size. The client sends from a generator (no 1 GiB object)."""

from __future__ import annotations

import hashlib
import re
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import trio

from tests.e2e._cli import clean_env, run, start

pytestmark = pytest.mark.slow

GIB = 1024**3
CHUNK = 1024 * 1024
MAX_GROWTH = 128 * 1024 * 1024  # the server may grow this much while receiving 1 GiB


def _memory_kib(pid: int, field: str) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    match = re.search(rf"^{field}:\s+(\d+) kB$", status, re.MULTILINE)
    assert match is not None, status
    return int(match.group(1))


async def test_a_1_gib_upload_streams_with_bounded_server_memory(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    env = clean_env()
    boot = await run(
        ["admin", "bootstrap", "--data-dir", str(data_dir), "--org", "acme"], env, tmp_path
    )
    assert boot.returncode == 0, boot.stderr
    key = boot.stdout.decode().strip().splitlines()[-1]
    server = await start(
        ["server", "--data-dir", str(data_dir), "--listen", "127.0.0.1:0"], env, tmp_path
    )
    try:
        with trio.fail_after(30):
            url = (await server.read_until(r"serving at (http://\S+)")).group(1)
        pid = server.process.pid
        async with httpx.AsyncClient(timeout=300) as http:
            asset = (
                await http.put(
                    f"{url}/v1/assets",
                    json={"name": "big.bin"},
                    headers={"Authorization": f"Bearer {key}"},
                )
            ).json()
            baseline = _memory_kib(pid, "VmRSS") * 1024
            digest = hashlib.md5(usedforsecurity=False)
            block = bytes(range(256)) * (CHUNK // 256)

            async def gigabyte() -> AsyncIterator[bytes]:
                for i in range(GIB // CHUNK):
                    chunk = i.to_bytes(8, "big") + block[8:]
                    digest.update(chunk)
                    yield chunk

            with trio.fail_after(280):
                response = await http.put(
                    asset["signedUploadUrl"],
                    content=gigabyte(),
                    headers={"Content-Type": "application/octet-stream"},
                )
            assert response.status_code == 200, response.text
            assert response.json()["size"] == GIB
            assert response.json()["md5"] == digest.hexdigest()
            peak = _memory_kib(pid, "VmHWM") * 1024
            assert peak - baseline < MAX_GROWTH, (baseline, peak)
        [stored] = [p for p in (data_dir / "blobs").iterdir() if p.is_file()]
        assert stored.stat().st_size == GIB
    finally:
        with trio.fail_after(30):
            await server.stop(signal.SIGINT)
