"""Asset bytes: the blob store interface and its local-directory default, signed URLs, the
upload/download endpoint and the expiry sweep (docs/assets.md)."""

from __future__ import annotations

from .base import (
    BlobNotFound,
    BlobStore,
    BlobStoreError,
    BlobStoreFull,
    BlobStoreUnavailable,
    BlobTooLarge,
    StoredBlob,
    WrittenBlob,
)
from .http import BlobEndpoint, BlobRoutes
from .local import LocalBlobStore
from .service import (
    MAX_ASSET_BYTES,
    ORPHAN_GRACE,
    SWEEP_INTERVAL,
    URL_TTL,
    AssetBlobs,
    InitialAssetError,
    InitialAssetProblem,
    SignedUrls,
)
from .signing import BLOB_PATH_PREFIX, Operation, UrlSigner, load_signing_key

__all__ = [
    "BLOB_PATH_PREFIX",
    "MAX_ASSET_BYTES",
    "ORPHAN_GRACE",
    "SWEEP_INTERVAL",
    "URL_TTL",
    "AssetBlobs",
    "BlobEndpoint",
    "BlobNotFound",
    "BlobRoutes",
    "BlobStore",
    "BlobStoreError",
    "BlobStoreFull",
    "BlobStoreUnavailable",
    "BlobTooLarge",
    "InitialAssetError",
    "InitialAssetProblem",
    "LocalBlobStore",
    "Operation",
    "SignedUrls",
    "StoredBlob",
    "UrlSigner",
    "WrittenBlob",
    "load_signing_key",
]
