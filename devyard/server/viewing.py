"""View-only access to an instance's stream (issue 14 finding 3; docs/security.md, "The
stream-token model"). Pure except `credential_live`, which asks the store.

Who may control an instance gets its stream token (``dys_``), which drives the device from a
browser. Everyone else who may see the instance (viewer role, read-only key, scoped token)
gets a **view token** in ``signedStreamUrl``: it opens the viewer page and the stream, and of
the browser's messages only those that ask for frames (`VIEW_MESSAGES`) reach the host.

A view token is ``dyv_<lookup>_<secret><checksum>``: ``<lookup>`` is the lookup id of the API
key or scoped token it was made for, ``<secret>`` the SHA-256 of the instance's stream token
and that lookup id. Nothing is stored: the instance's stream token and the credential's row
are the state, so a view token stops opening the stream when the instance ends (its stream
token is cleared) or when that key or scoped token is revoked, expires, or loses its minting
key. Knowing a view token tells nothing about the stream token (a one-way hash of 256 random
bits).
"""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Final

from .store import errors as store_errors
from .store import tokens
from .store.base import Store
from .store.tokens import TokenKind

__all__ = [
    "MAX_VIEW_MESSAGE_CHARS",
    "VIEW_MESSAGES",
    "credential_live",
    "verify_view_token",
    "view_message_allowed",
    "view_token",
]

_DOMAIN: Final = b"devyard view token\0"
#: What a view-only browser may send: ask for frames, stop them, keep the socket alive.
VIEW_MESSAGES: Final = frozenset({"start", "stop", "requestFrame", "keepAlive", "ack"})
MAX_VIEW_MESSAGE_CHARS: Final = 1024


def view_token(stream_token: str, credential_lookup: str) -> str:
    """The view token of the instance whose stream token is *stream_token*, made for the API
    key or scoped token whose lookup id is *credential_lookup*."""
    digest = hashlib.sha256(
        _DOMAIN + stream_token.encode() + b"\0" + credential_lookup.encode()
    ).digest()
    return tokens.token_from(TokenKind.VIEW_TOKEN, credential_lookup, int.from_bytes(digest, "big"))


def verify_view_token(token: str, stream_token: str | None) -> str | None:
    """The credential lookup id *token* was made for, if it is a view token of the instance
    whose stream token is *stream_token*; else None. Constant-time in the secret."""
    if not stream_token:
        return None
    lookup = tokens.parse_token(TokenKind.VIEW_TOKEN, token)
    if lookup is None:
        return None
    expected = view_token(stream_token, lookup)
    return lookup if hmac.compare_digest(expected.encode(), token.encode()) else None


async def credential_live(store: Store, org_id: str, credential_lookup: str) -> bool:
    """Whether an API key or scoped token of *org_id* with this lookup id is live now (not
    revoked, not expired, its minting key not revoked)."""
    try:
        key = await store.get_api_key_by_lookup(credential_lookup)
    except store_errors.NotFound:
        pass
    else:
        return key.api_key.org_id == org_id
    try:
        scoped = await store.get_scoped_token_by_lookup(credential_lookup)
    except store_errors.NotFound:
        return False
    return scoped.token.org_id == org_id


def view_message_allowed(message: str | bytes) -> bool:
    """Whether a view-only browser's stream message may reach the host: a small JSON object
    whose ``type`` is one of `VIEW_MESSAGES`. Input, clipboard, open-URL, rotate and
    screenshot messages, binary frames and anything malformed are not."""
    if not isinstance(message, str) or len(message) > MAX_VIEW_MESSAGE_CHARS:
        return False
    try:
        data = json.loads(message)
    except (ValueError, RecursionError):
        return False
    return isinstance(data, dict) and data.get("type") in VIEW_MESSAGES
