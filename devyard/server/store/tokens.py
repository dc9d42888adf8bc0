"""Bearer secrets: generation, parsing and verification. Pure functions, no I/O.

Every credential devyard issues reads ``<prefix>_<lookup>_<secret><checksum>`` (docs/security.md):

- ``<prefix>`` names the kind (`TokenKind`): ``dy`` API key, ``dyst`` scoped token, ``dyt``
  tunnel token, ``dyi`` instance token, ``dys`` stream token, ``dyv`` view token (derived,
  never stored: `server.viewing`), ``dyh`` host token. It lets a
  secret scanner (GitHub's, a pre-commit hook) recognise a leaked credential and its kind;
- ``<lookup>`` is 12 base62 characters (~71 bits), a non-secret handle the store indexes;
- ``<secret>`` is 43 base62 characters of 256 random bits;
- ``<checksum>`` is the CRC32 of everything before it in 6 base62 digits, zero-padded (as
  GitHub's own ``ghp_`` tokens do), so that a scanner can tell a real token from a random
  string of the same shape offline, and a typo is refused without a store query.

Credentials issued before the checksum existed (the same form without the 6 checksum
characters) still parse and verify: the checksum is a filter, the hash is the authority.

Of API keys, scoped tokens, tunnel and host tokens only ``sha256:<hex>`` of the whole token
is kept (instance and stream tokens are kept as issued: docs/security.md says why). Why
SHA-256 and not a password KDF (bcrypt, scrypt, argon2): a slow KDF exists to make guessing a
*low-entropy* human password expensive. A token with 256 random bits cannot be guessed
whatever the hash speed, so a fast hash loses nothing, and it keeps authentication (done on
every request) at microseconds instead of tens of milliseconds of CPU. A leaked database
still yields no usable key. Verification compares digests in constant time
(`hmac.compare_digest`); the lookup id only selects the row, so a wrong secret and an unknown
key cost the caller the same answer.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import re
import secrets
import zlib
from collections.abc import Mapping
from typing import Final

import attrs

__all__ = [
    "API_KEY_PREFIX",
    "CHECKSUM_LENGTH",
    "PREFIXES",
    "SCANNER_PATTERNS",
    "NewSecret",
    "TokenKind",
    "checksum",
    "hash_secret",
    "kind_of",
    "new_api_key",
    "new_scoped_token",
    "new_secret",
    "new_token",
    "parse_api_key",
    "parse_scoped_token",
    "parse_token",
    "token_from",
    "verify_api_key",
    "verify_secret",
]


class TokenKind(enum.StrEnum):
    API_KEY = "api_key"
    SCOPED_TOKEN = "scoped_token"  # noqa: S105 - a kind, not a secret
    TUNNEL_TOKEN = "tunnel_token"  # noqa: S105
    INSTANCE_TOKEN = "instance_token"  # noqa: S105
    STREAM_TOKEN = "stream_token"  # noqa: S105
    VIEW_TOKEN = "view_token"  # noqa: S105
    HOST_TOKEN = "host_token"  # noqa: S105


PREFIXES: Final[Mapping[TokenKind, str]] = {
    TokenKind.API_KEY: "dy",
    TokenKind.SCOPED_TOKEN: "dyst",
    TokenKind.TUNNEL_TOKEN: "dyt",
    TokenKind.INSTANCE_TOKEN: "dyi",
    TokenKind.STREAM_TOKEN: "dys",
    TokenKind.VIEW_TOKEN: "dyv",
    TokenKind.HOST_TOKEN: "dyh",
}
_KINDS: Final[Mapping[str, TokenKind]] = {prefix: kind for kind, prefix in PREFIXES.items()}

API_KEY_PREFIX: Final = PREFIXES[TokenKind.API_KEY]
SCOPED_TOKEN_PREFIX: Final = PREFIXES[TokenKind.SCOPED_TOKEN]
_BASE62: Final = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
LOOKUP_LENGTH: Final = 12  # ~71 bits: a handle, not a secret; collisions are Conflict
SECRET_LENGTH: Final = 43  # 256 bits in base62
CHECKSUM_LENGTH: Final = 6  # 62**6 > 2**32: a CRC32 always fits
_HASH_SCHEME: Final = "sha256:"
_B62: Final = "[0-9A-Za-z]"

SCANNER_PATTERNS: Final[Mapping[TokenKind, str]] = {
    kind: (
        rf"(?<![0-9A-Za-z_]){prefix}_{_B62}{{{LOOKUP_LENGTH}}}_"
        rf"{_B62}{{{SECRET_LENGTH + CHECKSUM_LENGTH}}}(?![0-9A-Za-z_])"
    )
    for kind, prefix in PREFIXES.items()
}
"""Per kind, the regular expression a secret scanner uses to find tokens issued now (those
with a checksum; docs/security.md). A match whose last 6 characters are not `checksum` of
the rest is not ours."""


@attrs.frozen
class NewSecret:
    """A freshly issued secret: show ``plaintext`` once, store the other two."""

    plaintext: str = attrs.field(repr=False)
    lookup_id: str
    secret_hash: str = attrs.field(repr=False)


def _encode62(value: int, length: int) -> str:
    chars = []
    for _ in range(length):
        value, digit = divmod(value, 62)
        chars.append(_BASE62[digit])
    return "".join(reversed(chars))


def _base62(nbits: int, length: int) -> str:
    return _encode62(secrets.randbits(nbits), length)


def checksum(body: str) -> str:
    """The 6-character checksum of *body* (the token without its last 6 characters)."""
    return _encode62(zlib.crc32(body.encode()), CHECKSUM_LENGTH)


def _pattern(prefix: str) -> re.Pattern[str]:
    return re.compile(
        rf"({re.escape(prefix)}_({_B62}{{{LOOKUP_LENGTH}}})_{_B62}{{{SECRET_LENGTH}}})"
        rf"({_B62}{{{CHECKSUM_LENGTH}}})?"
    )


_PATTERNS: Final[Mapping[TokenKind, re.Pattern[str]]] = {
    kind: _pattern(prefix) for kind, prefix in PREFIXES.items()
}


def kind_of(plaintext: str) -> TokenKind | None:
    """The kind a token's prefix names, or ``None``; says nothing about validity."""
    prefix, sep, _ = plaintext.partition("_")
    return _KINDS.get(prefix) if sep else None


def parse_token(kind: TokenKind, plaintext: str) -> str | None:
    """The lookup id of a well-formed token of *kind* (with a right checksum, or of the
    older form without one), or ``None``: answer "invalid" without a store query."""
    match = _PATTERNS[kind].fullmatch(plaintext)
    if match is None:
        return None
    body, lookup_id, check = match.groups()
    if check is not None and not hmac.compare_digest(check, checksum(body)):
        return None
    return lookup_id


def hash_secret(plaintext: str) -> str:
    """The stored form of a secret."""
    return _HASH_SCHEME + hashlib.sha256(plaintext.encode()).hexdigest()


def verify_secret(plaintext: str, secret_hash: str) -> bool:
    """Constant-time check of a presented secret against its stored hash."""
    return hmac.compare_digest(hash_secret(plaintext).encode(), secret_hash.encode())


def new_token(kind: TokenKind) -> NewSecret:
    """``<prefix>_<lookup>_<secret><checksum>`` with its lookup id and hash."""
    lookup_id = _base62(71, LOOKUP_LENGTH)
    body = f"{PREFIXES[kind]}_{lookup_id}_{_base62(256, SECRET_LENGTH)}"
    plaintext = body + checksum(body)
    return NewSecret(plaintext=plaintext, lookup_id=lookup_id, secret_hash=hash_secret(plaintext))


def token_from(kind: TokenKind, lookup_id: str, value: int) -> str:
    """The token of *kind* whose lookup is *lookup_id* and whose secret encodes *value* (below
    2**256): for tokens derived rather than drawn (`server.viewing`)."""
    if not 0 <= value < 2**256 or len(lookup_id) != LOOKUP_LENGTH:
        raise ValueError("a token needs a 12-character lookup and a 256-bit value")
    body = f"{PREFIXES[kind]}_{lookup_id}_{_encode62(value, SECRET_LENGTH)}"
    return body + checksum(body)


def new_secret(prefix: str) -> NewSecret:
    """A new token of the kind *prefix* names (``dyt``, ``dyi``...); ValueError for others."""
    kind = _KINDS.get(prefix)
    if kind is None:
        raise ValueError(f"no token kind has the prefix {prefix!r}")
    return new_token(kind)


def new_api_key() -> NewSecret:
    """A new API key, ``dy_...``."""
    return new_token(TokenKind.API_KEY)


def new_scoped_token() -> NewSecret:
    """A new scoped token, ``dyst_...`` (docs/scoped-tokens.md)."""
    return new_token(TokenKind.SCOPED_TOKEN)


def parse_scoped_token(plaintext: str) -> str | None:
    """The lookup id of a well-formed scoped token, or ``None``."""
    return parse_token(TokenKind.SCOPED_TOKEN, plaintext)


def parse_api_key(plaintext: str) -> str | None:
    """The lookup id of a well-formed API key, or ``None`` (answer 401 without a query)."""
    return parse_token(TokenKind.API_KEY, plaintext)


def verify_api_key(plaintext: str, secret_hash: str) -> bool:
    """Whether ``plaintext`` is the key whose stored hash is ``secret_hash``."""
    return verify_secret(plaintext, secret_hash)
