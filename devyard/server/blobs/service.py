"""`AssetBlobs`: the bytes side of assets, between the store's rows and the blob store.

Theory of operation. The database row is the truth about which bytes an asset has: an upload
streams into the blob store under a *new* key (``<asset id>.<ulid>``), and only once that write
is complete and durable does ``set_asset_blob`` switch the row to it in one transaction; the
previous key is retired afterwards (`BlobStore.retire`). So an interrupted upload leaves the
previous bytes (and md5) in place, two concurrent uploads cannot leave a row whose md5
describes the other one's bytes, and a download that began before a re-upload reads the old
bytes to the end on every backend (the local directory unlinks them and an open file stays
readable; S3 and PostgreSQL keep them until the orphan grace has passed since the re-upload).
A crash between the switch and the delete leaves an unreferenced file, never a wrong one.

Deleting an asset removes its bytes *first*, then the row, so every step can be retried: a
blob-store failure leaves the row (and the client's retry finishes the job), a crash after the
blob went leaves a row whose retry deletes a missing blob (fine) and then the row. Bytes that
no row names (a crash between a write and the switch, an upload that switched a row while it
was being deleted) are orphans; the sweep removes those older than `ORPHAN_GRACE`, which is
far longer than the moment between a finished write and its row switch.

Expired assets (ttl) are removed by `run_sweeper`: at start and then every `SWEEP_INTERVAL`
it deletes the rows whose ``expires_at`` has passed with their blobs, then the orphaned blobs,
then the temporary files of uploads that no longer run (a server killed mid-upload), with the
same grace (`BlobStore.sweep_temporary`: a live upload's file is never touched).

`resolve_initial_assets` turns an instance's ``spec.initialAssets`` into what a host
installs: one entry per file, each with a URL the host downloads without a key.
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterable, Callable, Mapping
from typing import Any, Final

import attrs
import trio

from ..store import errors as store_errors
from ..store.base import Asset, Store
from ..store.ids import new_ulid
from .base import BlobNotFound, BlobStore, BlobStoreError
from .signing import Operation, UrlSigner

__all__ = [
    "MAX_ASSET_BYTES",
    "ORPHAN_GRACE",
    "SWEEP_INTERVAL",
    "URL_TTL",
    "AssetBlobs",
    "InitialAssetError",
    "InitialAssetProblem",
    "SignedUrls",
]

log = logging.getLogger(__name__)

URL_TTL: Final = 3600  # seconds a signed URL stays valid (checked when a request starts)
MAX_ASSET_BYTES: Final = 16 * 1024**3
SWEEP_INTERVAL: Final = 60.0
ORPHAN_GRACE: Final = 3600.0  # seconds an unnamed blob is left alone (a row switch is ms)
PROBE_TTL: Final = 3.0  # seconds a readiness probe's answer is reused (/readyz under load)
PROBE_TIMEOUT: Final = 2.0  # seconds a readiness probe may take before it is "timeout"


class InitialAssetProblem(enum.Enum):
    MISSING_FIELD = "missing_field"  # a source without its field (the document requires it)
    NOT_FOUND = "not_found"  # no such asset in the organization
    NO_BYTES = "no_bytes"  # the asset exists but nothing was uploaded yet
    WRONG_PLATFORM = "wrong_platform"  # an asset for the other platform
    NOT_INSTALLABLE = "not_installable"  # an instance that installs no apps (xcode, gradle)


class InitialAssetError(Exception):
    """``spec.initialAssets`` names something a host cannot install; the message names it."""

    def __init__(self, problem: InitialAssetProblem, message: str) -> None:
        super().__init__(message)
        self.problem = problem
        self.message = message


_SOURCE_FIELDS: Final = {
    "AssetName": "assetName",
    "AssetNames": "assetNames",
    "AssetIDs": "assetIds",
    "URL": "url",
    "URLs": "urls",
}


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
        orphan_grace: float = ORPHAN_GRACE,
        sweep_interval: float = SWEEP_INTERVAL,
        wall_clock: Callable[[], float] = time.time,
        presign: Callable[[str, int], str] | None = None,
        probe_ttl: float = PROBE_TTL,
    ) -> None:
        self.store = store
        self.blobs = blobs
        self.signer = signer
        self.max_size = max_size
        self.url_ttl = url_ttl
        self.orphan_grace = orphan_grace
        self.sweep_interval = sweep_interval
        self.wall_clock = wall_clock
        # docs/blobs.md presign_direct: the blob store's own URL of a key's bytes, for *ttl* s
        self.presign = presign
        self._sweeper: trio.CancelScope | None = None
        self.probe_ttl = probe_ttl
        self._probed: tuple[float, str] | None = None  # (trio time, answer) of the last probe
        self._probing = trio.Lock()

    # -- readiness --------------------------------------------------------------------------
    async def readiness(self) -> str:
        """``"ok"``, or what is wrong with the blob store (``"not writable"``, ``"timeout"``,
        the backend's error): one `BlobStore.probe` at a time, bounded by `PROBE_TIMEOUT`,
        its answer reused for ``probe_ttl`` (callers meanwhile wait for it, never a second
        probe), so a load balancer's checks do not become a request per check to S3."""
        async with self._probing:
            if self._probed is not None and trio.current_time() - self._probed[0] < self.probe_ttl:
                return self._probed[1]
            answer = "timeout"
            with trio.move_on_after(PROBE_TIMEOUT):
                try:
                    await self.blobs.probe()
                    answer = "ok"
                except BlobStoreError as exc:
                    answer = str(exc) or type(exc).__name__
            self._probed = (trio.current_time(), answer)
            return answer

    def __repr__(self) -> str:
        return f"AssetBlobs({self.blobs!r})"

    # -- signed URLs ------------------------------------------------------------------------
    def signed_url(
        self, base_url: str, op: Operation, asset_id: str, *, blob_key: str | None = None
    ) -> str:
        """Our signed URL of the asset; with `presign` and the asset's current *blob_key*,
        a download is the blob store's own presigned URL of those bytes instead."""
        if op is Operation.DOWNLOAD and blob_key is not None and self.presign is not None:
            return self.presign(blob_key, self.url_ttl)
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
        if previous is not None:  # downloads in progress finish with it (base.py)
            try:
                await self.blobs.retire(previous)
            except BlobStoreError as exc:  # the upload succeeded; the sweep removes it later
                log.warning("could not retire blob %s, the sweep will remove it: %s", previous, exc)
        return asset

    async def download(self, asset_id: str) -> tuple[Asset, AsyncGenerator[bytes, None]]:
        """The asset and its bytes; NotFound (store) when it has none."""
        asset = await self.store.get_asset(asset_id)
        if asset.blob_key is None:
            raise store_errors.NotFound("bytes of asset", asset_id)
        return asset, self.blobs.read(asset.blob_key)

    async def delete(self, org_id: str, asset_id: str) -> Asset:
        """The bytes, then the row (see the module's theory): NotFound (store) when there is
        no such asset, `BlobStoreError` with the row kept when the bytes could not go."""
        asset = await self.store.get_asset(asset_id, org_id=org_id)
        if asset.blob_key is not None:
            await self.blobs.delete(asset.blob_key)
        deleted = await self.store.delete_asset(org_id, asset_id)
        if deleted.blob_key is not None and deleted.blob_key != asset.blob_key:
            await self._delete_quietly(deleted.blob_key)  # uploaded meanwhile
        return deleted

    async def _delete_quietly(self, key: str) -> None:
        """Delete bytes no row names any more; a failure leaves an orphan for the sweep."""
        try:
            await self.blobs.delete(key)
        except BlobStoreError as exc:
            log.warning("could not delete blob %s, the sweep will: %s", key, exc)

    # -- spec.initialAssets (docs/assets.md "Initial apps") -----------------------------------
    async def resolve_initial_assets(
        self, org_id: str, platform: str, spec: Mapping[str, Any], *, base_url: str
    ) -> tuple[dict[str, Any], ...]:
        """What a host installs for ``spec.initialAssets``: one entry per file, in order,
        each with a URL it can download without a key (signed, under *base_url*, for assets).
        `InitialAssetError` names the first entry a host could not install."""
        entries = spec.get("initialAssets") or []
        if entries and platform not in ("ios", "android"):
            raise InitialAssetError(
                InitialAssetProblem.NOT_INSTALLABLE,
                "spec.initialAssets: only ios and android instances install apps",
            )
        resolved: list[dict[str, Any]] = []
        for index, entry in enumerate(entries):
            if entry.get("kind") == "Configuration":
                continue  # a Chrome flag for the browser sandbox: the host reads it from the spec
            common = {
                "kind": entry["kind"],
                "launchMode": entry.get("launchMode"),
                "forceBundleId": entry.get("forceBundleId"),
            }
            sources = entry.get("sources")
            if sources is None:
                files = await self._files(org_id, platform, entry, f"[{index}]", base_url)
                resolved.extend({**common, **item} for item in files)
                continue
            if platform != "android":  # split APKs are Android's
                raise InitialAssetError(
                    InitialAssetProblem.WRONG_PLATFORM,
                    f"spec.initialAssets[{index}].sources (split APKs) is for android"
                    f" instances, not {platform}",
                )
            parts: list[dict[str, Any]] = []
            for number, part in enumerate(sources):
                where = f"[{index}].sources[{number}]"
                parts.extend(await self._files(org_id, platform, part, where, base_url))
            # ONE app from all its files: the host installs them together (install-multiple)
            resolved.append({**common, "name": parts[0]["name"], "parts": parts})
        return tuple(resolved)

    async def _files(
        self, org_id: str, platform: str, entry: Mapping[str, Any], where: str, base_url: str
    ) -> list[dict[str, Any]]:
        """The files one source names: ``{name, url, md5}`` each, in order."""
        source = str(entry["source"])
        field = _SOURCE_FIELDS[source]
        value = entry.get(field)
        if not value:
            raise InitialAssetError(
                InitialAssetProblem.MISSING_FIELD,
                f"spec.initialAssets{where}.{field} is required for {source}",
            )
        files: list[dict[str, Any]] = []
        for item in list(value) if isinstance(value, list) else [value]:
            if source in ("URL", "URLs"):
                files.append({"name": str(item), "url": str(item), "md5": None})
                continue
            asset = await (
                self._asset_for(org_id, asset_id=str(item))
                if source == "AssetIDs"
                else self._asset_for(org_id, name=str(item))
            )
            if asset.md5 is None:
                raise InitialAssetError(
                    InitialAssetProblem.NO_BYTES,
                    f"spec.initialAssets: asset {asset.name!r} has no bytes yet",
                )
            if asset.os is not None and asset.os != platform:
                raise InitialAssetError(
                    InitialAssetProblem.WRONG_PLATFORM,
                    f"spec.initialAssets: asset {asset.name!r} is for {asset.os}, not {platform}",
                )
            url = self.signed_url(base_url, Operation.DOWNLOAD, asset.id, blob_key=asset.blob_key)
            files.append({"name": asset.name, "url": url, "md5": asset.md5})
        return files

    async def _asset_for(
        self, org_id: str, *, name: str | None = None, asset_id: str | None = None
    ) -> Asset:
        what = f"asset {name!r}" if name is not None else f"asset id {asset_id!r}"
        missing = InitialAssetError(
            InitialAssetProblem.NOT_FOUND, f"spec.initialAssets: {what} not found"
        )
        try:
            if asset_id is not None:
                return await self.store.get_asset(asset_id, org_id=org_id)
            found = await self.store.list_assets(org_id, name=name, limit=1)
        except store_errors.NotFound:
            raise missing from None
        if not found:
            raise missing
        return found[0]

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

    async def sweep_orphans(self) -> int:
        """Delete the blobs no asset row names, older than ``orphan_grace``; how many."""
        cutoff = self.wall_clock() - self.orphan_grace
        removed = 0
        for blob in await self.blobs.list_blobs():
            if blob.modified > cutoff:
                continue  # maybe a write whose row switch is under way
            asset_id = blob.key.partition(".")[0]  # keys are "<asset id>.<ulid>"
            try:
                named = (await self.store.get_asset(asset_id)).blob_key == blob.key
            except store_errors.NotFound:
                named = False
            if not named:
                await self.blobs.delete(blob.key)
                removed += 1
        if removed:
            log.info("removed %d orphaned blob(s)", removed)
        return removed

    async def sweep_temporary(self) -> int:
        """Delete the temporary files of uploads that no longer run, untouched for
        ``orphan_grace``; how many."""
        removed = await self.blobs.sweep_temporary(older_than=self.wall_clock() - self.orphan_grace)
        if removed:
            log.info("removed %d temporary file(s) of interrupted uploads", removed)
        return removed

    async def run_sweeper(
        self,
        *,
        interval: float | None = None,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Sweep now, then every *interval* seconds (default ``sweep_interval``) until
        `stop_sweeper` or cancellation."""
        every = self.sweep_interval if interval is None else interval
        with trio.CancelScope() as self._sweeper:
            task_status.started()
            while True:
                try:
                    await self.sweep_temporary()
                    await self.sweep_once()
                    await self.sweep_orphans()
                except (store_errors.StoreUnavailable, BlobNotFound, BlobStoreError) as exc:
                    log.warning("sweeping assets failed, retrying later: %r", exc)
                await trio.sleep(every)

    def stop_sweeper(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
