"""Issue 14 finding 10: a failing blob store is an answer, deletes finish on retry, orphans go.

A real server (Hypercorn on 127.0.0.1 port 0) over a real local blob directory. A full disk is
a `LocalBlobStore` whose file writes raise ``ENOSPC`` (the blob store is ours; the subclass
only replaces the file it writes to); an unusable directory is a real one the store cannot
write in. Neither is an empty 500: 507 and 503 APIErrors with a JSON body.
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import IO, Any, cast

import httpx
import pytest
import trio

from devyard.server.api.app import api_state
from devyard.server.api.serve import BoundServer, serve_api
from devyard.server.blobs import AssetBlobs, LocalBlobStore, UrlSigner, load_signing_key
from devyard.server.config import ListenAddress, RateLimitConfig, ServerConfig
from devyard.server.store import Store
from devyard.server.store.errors import NotFound

from .conftest import Callers

_OCTET = {"Content-Type": "application/octet-stream"}


class _FullFile:
    """A file on a disk with no room left: every write fails like the kernel's."""

    def __init__(self, file: IO[bytes]) -> None:
        self._file = file

    def write(self, data: bytes) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def flush(self) -> None:
        self._file.flush()

    def fileno(self) -> int:
        return self._file.fileno()

    def close(self) -> None:
        self._file.close()


class _FullDisk(LocalBlobStore):
    async def _open(self, temp: Path) -> IO[bytes]:
        return cast(IO[bytes], _FullFile(await super()._open(temp)))


class _FlakyDeletes(LocalBlobStore):
    """Deletes fail with EIO while ``failing`` is set (a disk that errors, then recovers)."""

    failing = False

    async def delete(self, key: str) -> None:
        if self.failing:
            try:
                raise OSError(errno.EIO, os.strerror(errno.EIO))
            except OSError as exc:
                from devyard.server.blobs.local import translate_os_error  # noqa: PLC0415

                raise translate_os_error(exc) from exc
        await super().delete(key)


@asynccontextmanager
async def _serving(
    store: Store, tmp_path: Path, blobs: LocalBlobStore
) -> AsyncIterator[tuple[BoundServer, AssetBlobs]]:
    config = ServerConfig(
        data_dir=tmp_path / "data",
        listen=ListenAddress("127.0.0.1", 0),
        shutdown_grace=2,
        rate_limit=RateLimitConfig(enabled=False),
    )
    assets = AssetBlobs(store, blobs, UrlSigner(load_signing_key(tmp_path / "data")))
    async with trio.open_nursery() as nursery:
        shutdown = trio.Event()
        bound = await nursery.start(
            partial(
                serve_api, api_state(store, config, assets=assets), shutdown_trigger=shutdown.wait
            )
        )
        yield bound, assets
        shutdown.set()


async def _new_asset(http: httpx.AsyncClient, url: str, callers: Callers) -> dict[str, Any]:
    response = await http.put(
        f"{url}/v1/assets", json={"name": "app.apk"}, headers=callers.member.headers
    )
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def _api_error(response: httpx.Response, status: int, reason: str) -> None:
    assert response.status_code == status, (response.status_code, response.text)
    assert response.headers["content-type"].startswith("application/json")
    assert response.json()["reason"] == reason and response.json()["message"]


def _blob_files(root: Path) -> list[str]:
    return sorted(p.name for p in root.rglob("*") if p.is_file())


async def test_a_full_disk_is_507_with_a_body_and_keeps_nothing(
    store: Store, tmp_path: Path, callers: Callers
) -> None:
    root = tmp_path / "blobs"
    async with (
        _serving(store, tmp_path, _FullDisk(root)) as (bound, _),
        httpx.AsyncClient() as http,
    ):
        asset = await _new_asset(http, bound.base_url, callers)
        response = await http.put(asset["signedUploadUrl"], content=b"x" * 5000, headers=_OCTET)
        _api_error(response, 507, "insufficient_storage")
        assert _blob_files(root) == []
        stored = await store.get_asset(asset["id"])
        assert stored.md5 is None and stored.blob_key is None


def _make_unwritable(root: Path) -> None:
    (root / ".tmp").parent.mkdir(parents=True)
    if os.geteuid() != 0:
        root.chmod(0o500)  # a directory the server may not write in
    else:
        (root / ".tmp").write_bytes(b"")  # root writes anywhere: a path that cannot be a dir


async def test_an_unwritable_blob_directory_is_503_with_a_body(
    store: Store, tmp_path: Path, callers: Callers
) -> None:
    root = tmp_path / "blobs"
    _make_unwritable(root)
    try:
        async with (
            _serving(store, tmp_path, LocalBlobStore(root)) as (bound, _),
            httpx.AsyncClient() as http,
        ):
            asset = await _new_asset(http, bound.base_url, callers)
            response = await http.put(asset["signedUploadUrl"], content=b"x", headers=_OCTET)
            _api_error(response, 503, "unavailable")
            assert response.headers["retry-after"]
    finally:
        root.chmod(0o700)


async def test_a_delete_cut_short_is_finished_by_its_retry(
    store: Store, tmp_path: Path, callers: Callers, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "blobs"
    blobs = _FlakyDeletes(root)
    async with _serving(store, tmp_path, blobs) as (bound, _), httpx.AsyncClient() as http:
        url, headers = bound.base_url, callers.member.headers
        for _ in range(2):
            asset = await _new_asset(http, url, callers)
            upload = await http.put(asset["signedUploadUrl"], content=b"bytes", headers=_OCTET)
            assert upload.status_code == 200
            key = (await store.get_asset(asset["id"])).blob_key
            assert key is not None

            # 1. The blob store fails: an APIError, and the asset is still there.
            blobs.failing = True
            response = await http.delete(f"{url}/v1/assets/{asset['id']}", headers=headers)
            _api_error(response, 503, "unavailable")
            assert (await store.get_asset(asset["id"])).blob_key == key
            blobs.failing = False
            assert await http.get(f"{url}/v1/assets/{asset['id']}", headers=headers)

            # 2. A crash after the bytes went, before the row: the first half, done by hand.
            await LocalBlobStore(root).delete(key)
            download = await http.get(asset["signedDownloadUrl"])
            _api_error(download, 404, "not_found")  # an answer, not a cut response

            # The retry finishes the job.
            response = await http.delete(f"{url}/v1/assets/{asset['id']}", headers=headers)
            assert response.status_code == 200, response.text
            with pytest.raises(NotFound):
                await store.get_asset(asset["id"])
            assert _blob_files(root) == []
            again = await http.delete(f"{url}/v1/assets/{asset['id']}", headers=headers)
            _api_error(again, 404, "not_found")
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]


async def test_the_sweep_removes_orphaned_bytes_after_a_grace(
    store: Store, tmp_path: Path, callers: Callers
) -> None:
    root = tmp_path / "blobs"
    now = [1_000_000.0]
    clock: Callable[[], float] = lambda: now[0]  # noqa: E731
    blobs = LocalBlobStore(root)
    assets = AssetBlobs(
        store, blobs, UrlSigner(load_signing_key(tmp_path)), orphan_grace=3600, wall_clock=clock
    )
    named = await store.upsert_asset(org_id=callers.admin.org_id, name="kept")
    await assets.upload(named.id, _one(b"kept"))
    gone = await store.upsert_asset(org_id=callers.admin.org_id, name="gone")
    # Bytes no row names: an asset deleted with its bytes left behind, and a second blob of a
    # live asset that its row never switched to (a crash between the write and the switch).
    for key in (f"{gone.id}.01ORPHAN", f"{named.id}.01UNSWITCHED"):
        await blobs.write(key, _one(b"orphan"), max_size=100)
    await store.delete_asset(callers.admin.org_id, gone.id)
    stored = await store.get_asset(named.id)
    assert stored.blob_key is not None
    for name in os.listdir(root):
        if name != ".tmp":
            os.utime(root / name, (now[0] - 10, now[0] - 10))

    assert await assets.sweep_orphans() == 0  # younger than the grace: maybe a switch under way
    now[0] += 3600
    assert await assets.sweep_orphans() == 2
    assert _blob_files(root) == [stored.blob_key]
    assert await assets.sweep_orphans() == 0


async def _one(data: bytes) -> AsyncIterator[bytes]:
    await trio.lowlevel.checkpoint()
    yield data
