"""A re-upload of an asset does not cut a download in progress (docs/blobs.md, Consistency), on
each backend: the local directory, S3 (``moto_server``) and PostgreSQL large objects.

The download is `AssetBlobs.download`'s reader, the one the ``/blobs/`` endpoint streams: it
reads 2 MiB in three fetches (S3: ranges, 1 MiB here instead of 8 to keep the test short;
PostgreSQL: 1 MiB chunks), and the re-upload finishes between two of them. Before
`BlobStore.retire`, S3 and PostgreSQL deleted the old bytes there and the download failed
halfway."""

from __future__ import annotations

import hashlib
import math
import os
import time
from collections.abc import AsyncGenerator
from contextlib import aclosing
from pathlib import Path

import pytest
import trio

from devyard.server.blobs import AssetBlobs, BlobNotFound, UrlSigner, load_signing_key
from devyard.server.blobs.s3 import S3BlobStore
from devyard.server.store import open_store

from .conftest import Backend

_SIZE = 2 * 1024 * 1024 + 3  # three fetches: 1 MiB ranges (S3, set below) or chunks
_GRACE = 600.0


async def _chunks(data: bytes, size: int = 1024 * 1024) -> AsyncGenerator[bytes, None]:
    for start in range(0, len(data), size):
        await trio.lowlevel.checkpoint()
        yield data[start : start + size]


def _small_ranges(backend: Backend) -> None:
    if isinstance(backend.store, S3BlobStore):
        backend.store.range_bytes = 1024 * 1024


def _sha(parts: list[bytes]) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part)
    return digest.hexdigest()


async def test_a_reupload_does_not_cut_a_download_in_progress(
    blob_backend: Backend, tmp_path: Path
) -> None:
    _small_ranges(blob_backend)
    clock = [time.time()]
    async with open_store(str(tmp_path / "db.sqlite3")) as store:
        assets = AssetBlobs(
            store,
            blob_backend.store,
            UrlSigner(load_signing_key(tmp_path)),
            orphan_grace=_GRACE,
            wall_clock=lambda: clock[0],
        )
        org = await store.create_organization("acme")
        asset = await store.upsert_asset(org_id=org.id, name="app.apk")
        old, new = os.urandom(_SIZE), os.urandom(_SIZE)
        await assets.upload(asset.id, _chunks(old))
        old_key = (await store.get_asset(asset.id)).blob_key

        _, reading = await assets.download(asset.id)
        async with aclosing(reading):
            got = [await anext(reading)]  # the download has begun
            before = time.time()
            await assets.upload(asset.id, _chunks(new))  # the re-upload ends meanwhile
            got += [chunk async for chunk in reading]
        assert _sha(got) == _sha([old]), "the download did not get the old bytes whole"

        # a download that begins now gets the new bytes
        _, reading = await assets.download(asset.id)
        async with aclosing(reading):
            assert _sha([chunk async for chunk in reading]) == _sha([new])

        # the replaced bytes stay for the orphan grace, counted from the re-upload
        listed = {blob.key: blob.modified for blob in await blob_backend.store.list_blobs()}
        if blob_backend.name == "local":
            assert old_key not in listed  # unlinked at once; an open file stays readable
        else:
            assert old_key in listed
            assert listed[old_key] >= math.floor(before)  # S3 dates to the second
            clock[0] = math.floor(before) + _GRACE - 1
            assert await assets.sweep_orphans() == 0
            clock[0] = time.time() + _GRACE + 2
            assert await assets.sweep_orphans() == 1
        current = (await store.get_asset(asset.id)).blob_key
        assert [blob.key for blob in await blob_backend.store.list_blobs()] == [current]


async def test_a_download_whose_bytes_are_deleted_fails_rather_than_ends_short(
    blob_backend: Backend, tmp_path: Path
) -> None:
    """Deleting the asset (not a re-upload) removes its bytes at once: a download then fails
    with `BlobNotFound` on S3 and PostgreSQL (the endpoint's response is cut before its
    Content-Length, which clients see), never a short read that looks whole."""
    _small_ranges(blob_backend)
    async with open_store(str(tmp_path / "db.sqlite3")) as store:
        assets = AssetBlobs(store, blob_backend.store, UrlSigner(load_signing_key(tmp_path)))
        org = await store.create_organization("acme")
        asset = await store.upsert_asset(org_id=org.id, name="app.apk")
        data = os.urandom(_SIZE)
        await assets.upload(asset.id, _chunks(data))
        _, reading = await assets.download(asset.id)
        async with aclosing(reading):
            got = [await anext(reading)]
            await assets.delete(org.id, asset.id)
            if blob_backend.name == "local":  # the open file is still read to its end
                got += [chunk async for chunk in reading]
                assert _sha(got) == _sha([data])
            else:
                with pytest.raises(BlobNotFound):
                    got += [chunk async for chunk in reading]
