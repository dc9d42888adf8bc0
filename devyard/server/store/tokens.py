"""Bearer secrets: generation, parsing and verification. Pure functions, no I/O.

An API key reads ``dy_<lookup>_<secret>``: the fixed ``dy_`` prefix lets secret scanners
recognise a leaked key, ``<lookup>`` (12 base62 characters) is a non-secret handle the store
indexes, ``<secret>`` is 43 base62 characters of 256 random bits. The store keeps only
``sha256:<hex>`` of the whole key.

Why SHA-256 and not a password KDF (bcrypt, scrypt, argon2): a slow KDF exists to make
guessing a *low-entropy* human password expensive. A key with 256 random bits cannot be
guessed whatever the hash speed, so a fast hash loses nothing, and it keeps authentication
(done on every request) at microseconds instead of tens of milliseconds of CPU. A leaked
database still yields no usable key. Verification compares digests in constant time
(`hmac.compare_digest`); the lookup id only selects the row, so a wrong secret and an
unknown key cost the caller the same answer.

Later credentials (instance, tunnel and scoped tokens) use `new_secret` with their own
prefix and the same hashing.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from typing import Final

import attrs

__all__ = [
    "API_KEY_PREFIX",
    "NewSecret",
    "hash_secret",
    "new_api_key",
    "new_scoped_token",
    "new_secret",
    "parse_api_key",
    "parse_scoped_token",
    "verify_api_key",
    "verify_secret",
]

API_KEY_PREFIX: Final = "dy"
SCOPED_TOKEN_PREFIX: Final = "dyst"  # noqa: S105 (a prefix, not a secret)
_BASE62: Final = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
LOOKUP_LENGTH: Final = 12  # ~71 bits: a handle, not a secret; collisions are Conflict
SECRET_LENGTH: Final = 43  # 256 bits in base62
_HASH_SCHEME: Final = "sha256:"


@attrs.frozen
class NewSecret:
    """A freshly issued secret: show ``plaintext`` once, store the other two."""

    plaintext: str = attrs.field(repr=False)
    lookup_id: str
    secret_hash: str = attrs.field(repr=False)


def _base62(nbits: int, length: int) -> str:
    value = secrets.randbits(nbits)
    chars = []
    for _ in range(length):
        value, digit = divmod(value, 62)
        chars.append(_BASE62[digit])
    return "".join(chars)


def _pattern(prefix: str) -> re.Pattern[str]:
    return re.compile(
        rf"{re.escape(prefix)}_([0-9A-Za-z]{{{LOOKUP_LENGTH}}})_[0-9A-Za-z]{{{SECRET_LENGTH}}}"
    )


_API_KEY_RE: Final = _pattern(API_KEY_PREFIX)
_SCOPED_TOKEN_RE: Final = _pattern(SCOPED_TOKEN_PREFIX)


def hash_secret(plaintext: str) -> str:
    """The stored form of a secret."""
    return _HASH_SCHEME + hashlib.sha256(plaintext.encode()).hexdigest()


def verify_secret(plaintext: str, secret_hash: str) -> bool:
    """Constant-time check of a presented secret against its stored hash."""
    return hmac.compare_digest(hash_secret(plaintext).encode(), secret_hash.encode())


def new_secret(prefix: str) -> NewSecret:
    """``<prefix>_<lookup>_<secret>`` with its lookup id and hash."""
    lookup_id = _base62(71, LOOKUP_LENGTH)
    plaintext = f"{prefix}_{lookup_id}_{_base62(256, SECRET_LENGTH)}"
    return NewSecret(plaintext=plaintext, lookup_id=lookup_id, secret_hash=hash_secret(plaintext))


def new_api_key() -> NewSecret:
    """A new API key, ``dy_...``."""
    return new_secret(API_KEY_PREFIX)


def new_scoped_token() -> NewSecret:
    """A new scoped token, ``dyst_...`` (docs/scoped-tokens.md)."""
    return new_secret(SCOPED_TOKEN_PREFIX)


def parse_scoped_token(plaintext: str) -> str | None:
    """The lookup id of a well-formed scoped token, or ``None``."""
    match = _SCOPED_TOKEN_RE.fullmatch(plaintext)
    return match.group(1) if match else None


def parse_api_key(plaintext: str) -> str | None:
    """The lookup id of a well-formed API key, or ``None`` (answer 401 without a query)."""
    match = _API_KEY_RE.fullmatch(plaintext)
    return match.group(1) if match else None


def verify_api_key(plaintext: str, secret_hash: str) -> bool:
    """Whether ``plaintext`` is the key whose stored hash is ``secret_hash``."""
    return verify_secret(plaintext, secret_hash)
