"""Host tokens: what a host daemon presents (``Authorization: Bearer``) to open a host link.

A token is ``dyh_<key id>_<secret><checksum>`` (`store.tokens`, docs/security.md; tokens made
before the checksum, ``dyh_<12 hex>_<43 url-safe base64>``, still verify); one token stands for
one host, whose id is ``host_<key id>``, so a host that reconnects keeps its id. Only a SHA-256
of each token is kept, one ``<key id> <sha256 hex>`` line per token in ``DATA_DIR/host-tokens``
(mode 0600), beside
the admin key file: host tokens are operator credentials, not organization data, so they live
with the server's other local secrets instead of in the store (docs/edge.md).
"""

from __future__ import annotations

import hashlib
import hmac
import os
from pathlib import Path
from typing import Final

from ..store.tokens import PREFIXES, TokenKind, new_token

__all__ = ["HOST_TOKENS_FILE", "HostTokens", "create_host_token", "host_id_of"]

HOST_TOKENS_FILE: Final = "host-tokens"
_PREFIX: Final = PREFIXES[TokenKind.HOST_TOKEN] + "_"


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def host_id_of(key_id: str) -> str:
    return f"host_{key_id}"


class HostTokens:
    """The hashed host tokens of a data dir; re-read on every check (they are few)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __repr__(self) -> str:
        return f"HostTokens({str(self.path)!r})"

    def _entries(self) -> dict[str, str]:
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return {}
        entries: dict[str, str] = {}
        for line in text.splitlines():
            parts = line.split()
            if len(parts) == 2:
                entries[parts[0]] = parts[1]
        return entries

    def verify(self, token: str) -> str | None:
        """The host id *token* stands for, or None. Blocking (reads a small file)."""
        if not token.startswith(_PREFIX):
            return None
        key_id, _, secret = token[len(_PREFIX) :].partition("_")
        if not key_id or not secret:
            return None
        expected = self._entries().get(key_id)
        if expected is None or not hmac.compare_digest(expected, _digest(token)):
            return None
        return host_id_of(key_id)


def create_host_token(path: Path) -> tuple[str, str]:
    """Add a new token to *path*; return ``(host_id, token)``. The token is shown once."""
    secret = new_token(TokenKind.HOST_TOKEN)
    key_id, token = secret.lookup_id, secret.plaintext
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    with os.fdopen(fd, "a") as out:
        out.write(f"{key_id} {_digest(token)}\n")
    return host_id_of(key_id), token
