"""Secrets the server must use again (an OIDC client secret), encrypted at rest.

AES-256-GCM with a key kept in the data directory (``accounts-secret-key``, 64 hex digits,
created 0600 on first use, like the blob signing key); each value gets a fresh 96-bit nonce,
and the organization id is the associated data, so a ciphertext copied to another
organization's row does not decrypt. Stored as ``v1:<base64 nonce+ciphertext>``. A database
leaked without the data directory yields no client secret. Several servers over one
PostgreSQL must share the key file (docs/accounts.md).
"""

from __future__ import annotations

import base64
import secrets
from pathlib import Path
from typing import Final

import trio
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from ..keyfile import load_or_create_key

__all__ = ["KEY_FILE", "SecretBox", "SecretBoxError", "load_secret_box"]

KEY_FILE: Final = "accounts-secret-key"
_VERSION: Final = "v1:"
_KEY_BYTES: Final = 32


class SecretBoxError(Exception):
    """A stored value that does not decrypt (another key, another organization, damaged)."""


class SecretBox:
    def __init__(self, key: bytes) -> None:
        if len(key) != _KEY_BYTES:
            raise ValueError("an AES-256 key has 32 bytes")
        self._aead = AESGCM(key)

    def __repr__(self) -> str:
        return "<SecretBox>"

    def seal(self, plaintext: str, *, context: str) -> str:
        nonce = secrets.token_bytes(12)
        sealed = self._aead.encrypt(nonce, plaintext.encode(), context.encode())
        return _VERSION + base64.b64encode(nonce + sealed).decode()

    def open(self, stored: str, *, context: str) -> str:
        if not stored.startswith(_VERSION):
            raise SecretBoxError("unknown format")
        try:
            raw = base64.b64decode(stored.removeprefix(_VERSION), validate=True)
            return self._aead.decrypt(raw[:12], raw[12:], context.encode()).decode()
        except (InvalidTag, ValueError) as exc:
            raise SecretBoxError("the value does not decrypt with this key") from exc


def _load_key(data_dir: Path) -> bytes:
    return load_or_create_key(data_dir / KEY_FILE, _KEY_BYTES)


async def load_secret_box(data_dir: Path) -> SecretBox:
    """The box of *data_dir*'s key, created when missing."""
    return SecretBox(await trio.to_thread.run_sync(_load_key, data_dir))
