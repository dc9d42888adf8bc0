"""Signed asset URLs: HMAC-SHA256 over (operation, asset id, expiry), pure and synchronous.

A signed URL reads ``/blobs/<asset id>?op=upload|download&expires=<unix seconds>&sig=<hex>``.
The signature binds all three, so an upload URL cannot be turned into a download URL, moved to
another asset or extended. It works without an API key: holding it is the permission, until it
expires. The key is 32 random bytes kept in the data dir (``asset-signing-key``, mode 0600,
created exclusively on first start), shared by every replica that shares the data dir;
replacing the file invalidates every URL issued so far.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
from pathlib import Path
from typing import Final
from urllib.parse import urlencode

from ..keyfile import load_or_create_key

__all__ = [
    "BLOB_PATH_PREFIX",
    "SIGNING_KEY_FILE",
    "BadSignature",
    "ExpiredSignature",
    "Operation",
    "UrlSigner",
    "load_signing_key",
]

BLOB_PATH_PREFIX: Final = "/blobs/"
SIGNING_KEY_FILE: Final = "asset-signing-key"
_KEY_BYTES: Final = 32


class Operation(enum.StrEnum):
    UPLOAD = "upload"
    DOWNLOAD = "download"


class BadSignature(ValueError):
    """Missing, malformed or wrong signature parameters."""


class ExpiredSignature(ValueError):
    """A valid signature past its expiry."""


class UrlSigner:
    def __init__(self, key: bytes) -> None:
        if len(key) < 16:
            raise ValueError("signing key too short")
        self._key = key

    def __repr__(self) -> str:
        return "UrlSigner(<key>)"

    def _mac(self, op: Operation, asset_id: str, expires: int) -> str:
        message = f"{op.value}\n{asset_id}\n{expires}".encode()
        return hmac.new(self._key, message, hashlib.sha256).hexdigest()

    def url(self, base_url: str, op: Operation, asset_id: str, expires: int) -> str:
        query = urlencode(
            {"op": op.value, "expires": expires, "sig": self._mac(op, asset_id, expires)}
        )
        return f"{base_url.rstrip('/')}{BLOB_PATH_PREFIX}{asset_id}?{query}"

    def verify(self, op: Operation, asset_id: str, query: dict[str, str], now: float) -> None:
        """Raises `BadSignature` or `ExpiredSignature` unless *query* signs *op* on *asset_id*."""
        if query.get("op") != op.value:
            raise BadSignature(f"this URL is not signed for {op.value}")
        expires_text, sig = query.get("expires", ""), query.get("sig", "")
        if not expires_text.isdigit() or len(expires_text) > 12 or not sig:
            raise BadSignature("missing or malformed signature parameters")
        expires = int(expires_text)
        if not hmac.compare_digest(sig.encode(), self._mac(op, asset_id, expires).encode()):
            raise BadSignature("bad signature")
        if now >= expires:
            raise ExpiredSignature("the signed URL has expired")


def load_signing_key(data_dir: Path) -> bytes:
    """The key in *data_dir*, created (0600, exclusively) when missing. Blocking (start-up)."""
    return load_or_create_key(data_dir / SIGNING_KEY_FILE, _KEY_BYTES)
