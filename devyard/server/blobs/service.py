"""`AssetBlobs`: the bytes side of assets, between the store's rows and the blob store.

Theory of operation. The database row is the truth about which bytes an asset has: an upload
streams into the blob store under a *new* key (``<asset id>.<ulid>``), and only once that write
is complete and durable does ``set_asset_blob`` switch the row to it in one transaction; the
previous key is deleted afterwards. So an interrupted upload leaves the previous bytes (and
md5) in place, two concurrent uploads cannot leave a row whose md5 describes the other one's
bytes, and a download that opened the old file keeps reading it (POSIX unlink semantics).
A crash between the switch and the delete leaves an unreferenced file, never a wrong one.

Expired assets (ttl) are removed by `run_sweeper`: every `SWEEP_INTERVAL` it deletes the rows
whose ``expires_at`` has passed and then their blobs.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncGenerator, AsyncIterable, Callable
from typing import Final

import attrs
import trio

from ..store import errors as store_errors
from ..store.base import Asset, Store
from ..store.ids import new_ulid
from .base import BlobNotFound, BlobStore
from .signing import Operation, UrlSigner

__all__ = ["MAX_ASSET_BYTES", "SWEEP_INTERVAL", "URL_TTL", "AssetBlobs", "SignedUrls"]

log = logging.getLogger(__name__)

URL_TTL: Final = 3600  # seconds a signed URL stays valid (checked when a request starts)
MAX_ASSET_BYTES: Final = 16 * 1024**3
SWEEP_INTERVAL: Final = 60.0


@attrs.frozen
class SignedUrls:
    upload: str
    download: str


class AssetBlobs:
    def __init__(
        self,
        store: Store,
        blobs: BlobStore,
        signer: UrlSigner,
        *,
        max_size: int = MAX_ASSET_BYTES,
        url_ttl: int = URL_TTL,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.blobs = blobs
        self.signer = signer
        self.max_size = max_size
        self.url_ttl = url_ttl
        self.wall_clock = wall_clock
        self._sweeper: trio.CancelScope | None = None

    def __repr__(self) -> str:
        return f"AssetBlobs({self.blobs!r})"

    # -- signed URLs ------------------------------------------------------------------------
    def signed_url(self, base_url: str, op: Operation, asset_id: str) -> str:
        expires = int(self.wall_clock()) + self.url_ttl
        return self.signer.url(base_url, op, asset_id, expires)

    def signed_urls(self, base_url: str, asset_id: str) -> SignedUrls:
        return SignedUrls(
            upload=self.signed_url(base_url, Operation.UPLOAD, asset_id),
            download=self.signed_url(base_url, Operation.DOWNLOAD, asset_id),
        )

    def verify(self, op: Operation, asset_id: str, query: dict[str, str]) -> None:
        """Raises `signing.BadSignature` / `signing.ExpiredSignature`."""
        self.signer.verify(op, asset_id, query, self.wall_clock())

    # -- bytes ------------------------------------------------------------------------------
    async def upload(self, asset_id: str, chunks: AsyncIterable[bytes]) -> Asset:
        """Stream *chunks* in as the asset's new bytes. NotFound (store) if the asset does not
        exist or was deleted while the bytes arrived; `BlobTooLarge` past ``max_size``."""
        await self.store.get_asset(asset_id)  # fail before reading a byte
        key = f"{asset_id}.{new_ulid()}"
        written = await self.blobs.write(key, chunks, max_size=self.max_size)
        try:
            asset, previous = await self.store.set_asset_blob(
                asset_id, blob_key=key, md5=written.md5, size=written.size
            )
        except BaseException:
            with trio.CancelScope(shield=True):
                await self.blobs.delete(key)
            raise
        if previous is not None:
            await self.blobs.delete(previous)
        return asset

    async def download(self, asset_id: str) -> tuple[Asset, AsyncGenerator[bytes, None]]:
        """The asset and its bytes; NotFound (store) when it has none."""
        asset = await self.store.get_asset(asset_id)
        if asset.blob_key is None:
            raise store_errors.NotFound("bytes of asset", asset_id)
        return asset, self.blobs.read(asset.blob_key)

    async def delete(self, org_id: str, asset_id: str) -> Asset:
        asset = await self.store.delete_asset(org_id, asset_id)
        if asset.blob_key is not None:
            await self.blobs.delete(asset.blob_key)
        return asset

    # -- expiry -----------------------------------------------------------------------------
    async def sweep_once(self) -> int:
        """Delete every expired asset and its bytes; how many were deleted."""
        deleted = 0
        while expired := await self.store.list_expired_assets():
            for asset in expired:
                try:
                    await self.delete(asset.org_id, asset.id)
                except store_errors.NotFound:
                    continue  # deleted meanwhile by its owner
                deleted += 1
        if deleted:
            log.info("removed %d expired asset(s)", deleted)
        return deleted

    async def run_sweeper(
        self,
        *,
        interval: float = SWEEP_INTERVAL,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Sweep every *interval* seconds until `stop_sweeper` or cancellation."""
        with trio.CancelScope() as self._sweeper:
            task_status.started()
            while True:
                try:
                    await self.sweep_once()
                except (store_errors.StoreUnavailable, BlobNotFound, OSError) as exc:
                    log.warning("sweeping expired assets failed, retrying later: %r", exc)
                await trio.sleep(interval)

    def stop_sweeper(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
