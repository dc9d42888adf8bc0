"""The local blob store, the signer and the asset bytes service (expiry sweep)."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from datetime import timedelta
from functools import partial
from pathlib import Path

import pytest
import trio

from devyard.server.blobs import (
    AssetBlobs,
    BlobNotFound,
    BlobTooLarge,
    LocalBlobStore,
    Operation,
    UrlSigner,
    load_signing_key,
)
from devyard.server.blobs.signing import BadSignature, ExpiredSignature
from devyard.server.store import Store, open_store
from devyard.server.store.errors import NotFound
from tests.polling import until

from .test_store import Clock


async def _chunks(*parts: bytes, fail_after: int | None = None) -> AsyncGenerator[bytes, None]:
    for i, part in enumerate(parts):
        if fail_after is not None and i == fail_after:
            raise ConnectionResetError("client went away")
        await trio.lowlevel.checkpoint()
        yield part


async def _read(blobs: LocalBlobStore, key: str) -> bytes:
    return b"".join([chunk async for chunk in blobs.read(key)])


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


async def test_write_is_streamed_hashed_and_atomic(tmp_path: Path) -> None:
    blobs = LocalBlobStore(tmp_path / "blobs")
    parts = [b"a" * 700_000, b"b" * 700_000, b"c"]
    written = await blobs.write("k1", _chunks(*parts), max_size=10**7)
    data = b"".join(parts)
    assert (written.md5, written.size) == (hashlib.md5(data).hexdigest(), len(data))
    assert await _read(blobs, "k1") == data
    assert _files(tmp_path / "blobs") == ["k1"]
    await blobs.delete("k1")
    await blobs.delete("k1")  # missing is fine
    with pytest.raises(BlobNotFound):
        await _read(blobs, "k1")


async def test_a_failed_a_cancelled_or_a_too_large_write_leaves_nothing(tmp_path: Path) -> None:
    blobs = LocalBlobStore(tmp_path / "blobs")
    await blobs.write("old", _chunks(b"previous"), max_size=100)
    big = b"x" * 600_000
    with pytest.raises(ConnectionResetError):
        await blobs.write("new", _chunks(big, big, big, fail_after=2), max_size=10**7)
    async with aclosing(_chunks(big, big)) as chunks:
        with pytest.raises(BlobTooLarge):
            await blobs.write("new", chunks, max_size=1_000_000)

    async def forever() -> AsyncGenerator[bytes, None]:
        yield big
        await trio.sleep_forever()

    async with aclosing(forever()) as chunks:
        with trio.move_on_after(0.2):
            await blobs.write("new", chunks, max_size=10**7)
    assert _files(tmp_path / "blobs") == ["old"]
    assert await _read(blobs, "old") == b"previous"


async def test_keys_cannot_escape_the_directory(tmp_path: Path) -> None:
    blobs = LocalBlobStore(tmp_path / "blobs")
    for key in ["../x", "a/b", "", ".hidden", "a\x00"]:
        with pytest.raises(ValueError, match="invalid blob key"):
            await blobs.write(key, _chunks(b"x"), max_size=10)


def test_signatures_bind_operation_asset_and_expiry(tmp_path: Path) -> None:
    key = load_signing_key(tmp_path)
    assert load_signing_key(tmp_path) == key  # kept, not regenerated
    assert (tmp_path / "asset-signing-key").stat().st_mode & 0o777 == 0o600
    signer = UrlSigner(key)
    url = signer.url("http://h", Operation.UPLOAD, "asset_1", 1000)
    query = dict(part.split("=", 1) for part in url.split("?", 1)[1].split("&"))
    signer.verify(Operation.UPLOAD, "asset_1", query, now=999)
    with pytest.raises(ExpiredSignature):
        signer.verify(Operation.UPLOAD, "asset_1", query, now=1000)
    with pytest.raises(BadSignature):
        signer.verify(Operation.DOWNLOAD, "asset_1", query, now=0)
    with pytest.raises(BadSignature):
        signer.verify(Operation.UPLOAD, "asset_2", query, now=0)
    with pytest.raises(BadSignature):
        signer.verify(Operation.UPLOAD, "asset_1", {**query, "expires": "1001"}, now=0)
    with pytest.raises(BadSignature):
        UrlSigner(load_signing_key(tmp_path / "other")).verify(
            Operation.UPLOAD, "asset_1", query, now=0
        )


@pytest.fixture
async def store(tmp_path: Path, clock: Clock) -> AsyncIterator[Store]:
    async with open_store(str(tmp_path / "db.sqlite3"), clock=clock) as opened:
        yield opened


@pytest.fixture
def clock() -> Clock:
    return Clock()


async def test_the_sweeper_removes_expired_assets_and_their_bytes(
    store: Store, clock: Clock, tmp_path: Path
) -> None:
    blobs = LocalBlobStore(tmp_path / "blobs")
    assets = AssetBlobs(store, blobs, UrlSigner(load_signing_key(tmp_path)))
    org = await store.create_organization("acme")
    short = await store.upsert_asset(org_id=org.id, name="short", ttl_s=10)
    kept = await store.upsert_asset(org_id=org.id, name="kept")
    await assets.upload(short.id, _chunks(b"short-lived"))
    await assets.upload(kept.id, _chunks(b"kept"))
    assert await assets.sweep_once() == 0

    clock.now += timedelta(seconds=11)
    async with trio.open_nursery() as nursery:
        await nursery.start(
            lambda task_status: assets.run_sweeper(interval=0.01, task_status=task_status)
        )

        async def swept() -> bool:  # the bytes go before the row: wait for both
            if len(_files(tmp_path / "blobs")) != 1:
                return False
            try:
                await store.get_asset(short.id)
            except NotFound:
                return True
            return False

        await until(swept)
        assets.stop_sweeper()
    with pytest.raises(NotFound):
        await store.get_asset(short.id)
    assert (await store.get_asset(kept.id)).md5 == hashlib.md5(b"kept").hexdigest()


async def test_an_upload_to_a_deleted_asset_keeps_no_bytes(store: Store, tmp_path: Path) -> None:
    blobs = LocalBlobStore(tmp_path / "blobs")
    assets = AssetBlobs(store, blobs, UrlSigner(load_signing_key(tmp_path)))
    org = await store.create_organization("acme")
    asset = await store.upsert_asset(org_id=org.id, name="a")

    async def deleting_midway() -> AsyncGenerator[bytes, None]:
        yield b"first half"
        await store.delete_asset(org.id, asset.id)
        yield b"second half"

    with pytest.raises(NotFound):
        await assets.upload(asset.id, deleting_midway())
    assert _files(tmp_path / "blobs") == []


async def test_a_serving_api_sweeps_at_start_and_shuts_down_promptly(
    store: Store, clock: Clock, tmp_path: Path
) -> None:
    from devyard.server.api.app import api_state  # noqa: PLC0415
    from devyard.server.api.serve import serve_api  # noqa: PLC0415
    from devyard.server.config import ListenAddress, ServerConfig  # noqa: PLC0415

    org = await store.create_organization("acme")
    asset = await store.upsert_asset(org_id=org.id, name="old", ttl_s=10)
    clock.now += timedelta(seconds=11)
    config = ServerConfig(data_dir=tmp_path / "data", listen=ListenAddress("127.0.0.1", 0))
    shutdown = trio.Event()
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            await nursery.start(
                partial(serve_api, api_state(store, config), shutdown_trigger=shutdown.wait)
            )

            async def gone() -> bool:
                try:
                    await store.get_asset(asset.id)
                except NotFound:
                    return True
                return False

            for _ in range(1000):  # pragma: no branch
                if await gone():
                    break
                await trio.sleep(0.01)
            shutdown.set()
            start = trio.current_time()
        assert trio.current_time() - start < 10  # the sweeper does not hold the shutdown
    assert await gone()
