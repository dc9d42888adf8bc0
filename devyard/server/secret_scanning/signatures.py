"""The signature on a leaked-token report: ECDSA P-256 with SHA-256 over the raw body.

GitHub's secret-scanning partner program (../shared/design/callbacks.md, section 5.2) signs
each report it POSTs. Two headers carry the signature: ``Github-Public-Key-Identifier`` names
the key, ``Github-Public-Key-Signature`` is the base64 of a DER ECDSA signature over the raw
request body, exactly as received (never a re-serialised parse). The public keys are published
at a key endpoint as ``{"public_keys": [{"key_identifier", "key" (PEM), "is_current"}]}``; the
identifier is an opaque lookup name, not a digest of the key.

`KeyRing` keeps the keys by identifier. An identifier it does not know makes it fetch the
endpoint again, at most once per ``cooldown`` (so anonymous callers naming random identifiers
cost one outbound request a minute, and GitHub's unauthenticated rate limit is never hit), with
the fetch bounded in time and size. A fetch replaces the whole set, so a key the endpoint
withdrew stops verifying after the next fetch; a failed fetch keeps the keys it had.
"""

from __future__ import annotations

import base64
import binascii
import enum
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Final

import httpx
import trio
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import load_pem_public_key

log = logging.getLogger(__name__)

__all__ = [
    "KEY_ID_HEADER",
    "SIGNATURE_HEADER",
    "KeyRing",
    "SignatureError",
    "SignatureReason",
    "fetch_keys",
    "load_public_keys",
    "verify_signature",
]

KEY_ID_HEADER: Final = "Github-Public-Key-Identifier"
SIGNATURE_HEADER: Final = "Github-Public-Key-Signature"
FETCH_TIMEOUT: Final = 10.0  # seconds for one fetch of the key endpoint, all included
REFRESH_COOLDOWN: Final = 60.0  # seconds between two fetches
MAX_KEYS_BYTES: Final = 256 * 1024
MAX_KEY_ID_CHARS: Final = 256
MAX_SIGNATURE_CHARS: Final = 512  # a DER P-256 signature is at most 72 bytes: 96 in base64


class SignatureReason(enum.StrEnum):
    MISSING = "missing_signature"
    MALFORMED = "malformed_signature"
    UNKNOWN_KEY = "unknown_signing_key"
    INVALID = "invalid_signature"
    KEYS_UNAVAILABLE = "signing_keys_unavailable"


class SignatureError(Exception):
    """The report is not shown to come from the code host; ``reason`` says why."""

    def __init__(self, reason: SignatureReason, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


PublicKeys = Mapping[str, ec.EllipticCurvePublicKey]


def load_public_keys(document: bytes) -> dict[str, ec.EllipticCurvePublicKey]:
    """The P-256 keys of a key-endpoint answer, by identifier; ValueError if it is not one.
    Entries of another shape or curve are skipped (a future key type is not an outage)."""
    try:
        data = json.loads(document)
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"the key endpoint's answer is not JSON: {exc}") from None
    entries = data.get("public_keys") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise ValueError("the key endpoint's answer has no public_keys list")
    keys: dict[str, ec.EllipticCurvePublicKey] = {}
    for entry in entries:
        if not isinstance(entry, dict):
            continue
        key_id, pem = entry.get("key_identifier"), entry.get("key")
        if not isinstance(key_id, str) or not isinstance(pem, str):
            continue
        try:
            key = load_pem_public_key(pem.encode())
        except (ValueError, UnsupportedAlgorithm, UnicodeEncodeError):
            continue
        if isinstance(key, ec.EllipticCurvePublicKey) and isinstance(key.curve, ec.SECP256R1):
            keys[key_id] = key
    return keys


def verify_signature(key: ec.EllipticCurvePublicKey, body: bytes, signature: str) -> bool:
    """Whether *signature* (base64 DER) is *key*'s ECDSA-SHA256 signature of *body*.
    SignatureError(MALFORMED) when it is not base64 at all."""
    try:
        der = base64.b64decode(signature.encode("ascii"), validate=True)
    except (binascii.Error, ValueError, UnicodeEncodeError):
        raise SignatureError(SignatureReason.MALFORMED, "the signature is not base64") from None
    try:
        key.verify(der, body, ec.ECDSA(hashes.SHA256()))
    except InvalidSignature:
        return False
    return True


async def fetch_keys(url: str, *, within: float = FETCH_TIMEOUT) -> bytes:
    """The body of ``GET url``, bounded in time and size; SignatureError(KEYS_UNAVAILABLE)."""

    def unavailable(why: str) -> SignatureError:
        return SignatureError(
            SignatureReason.KEYS_UNAVAILABLE, f"the signing keys could not be fetched: {why}"
        )

    chunks: list[bytes] = []
    with trio.move_on_after(within) as scope:
        try:
            async with (
                httpx.AsyncClient(timeout=within, follow_redirects=False) as client,
                client.stream("GET", url, headers={"Accept": "application/json"}) as response,
            ):
                if response.status_code != 200:
                    raise unavailable(f"the key endpoint answered {response.status_code}")
                size = 0
                async for chunk in response.aiter_bytes():
                    size += len(chunk)
                    if size > MAX_KEYS_BYTES:
                        raise unavailable(f"the answer is larger than {MAX_KEYS_BYTES} bytes")
                    chunks.append(chunk)
        except httpx.HTTPError as exc:
            raise unavailable(type(exc).__name__) from None
    if scope.cancelled_caught:
        raise unavailable(f"no answer within {within:g} s")
    return b"".join(chunks)


class KeyRing:
    """The code host's public keys by identifier, fetched from *url* when one is unknown."""

    def __init__(
        self,
        url: str,
        *,
        clock: Callable[[], float] = trio.current_time,
        cooldown: float = REFRESH_COOLDOWN,
        fetch: Callable[[str], Awaitable[bytes]] = fetch_keys,
    ) -> None:
        self.url = url
        self._clock = clock
        self._cooldown = cooldown
        self._fetch = fetch
        self._keys: dict[str, ec.EllipticCurvePublicKey] = {}
        self._fetched_at: float | None = None
        self._failure: SignatureError | None = None
        self._lock = trio.Lock()

    def __repr__(self) -> str:
        return f"<KeyRing {self.url} {len(self._keys)} keys>"

    async def key(self, key_id: str) -> ec.EllipticCurvePublicKey:
        """The key named *key_id*, fetching the set again if it is unknown and the last fetch
        is older than the cooldown."""
        known = self._keys.get(key_id)
        if known is not None:
            return known
        async with self._lock:
            known = self._keys.get(key_id)
            if known is not None:
                return known
            now = self._clock()
            if self._fetched_at is None or now - self._fetched_at >= self._cooldown:
                self._fetched_at = now
                try:
                    self._keys = load_public_keys(await self._fetch(self.url))
                    self._failure = None
                except ValueError as exc:
                    self._failure = SignatureError(SignatureReason.KEYS_UNAVAILABLE, str(exc))
                except SignatureError as exc:
                    self._failure = exc
                if self._failure is not None:
                    log.warning("secret scanning: %s (%s)", self._failure.message, self.url)
            known = self._keys.get(key_id)
            if known is not None:
                return known
            if self._failure is not None:
                raise self._failure
        raise SignatureError(SignatureReason.UNKNOWN_KEY, "the signing key is not known")

    async def verify(self, body: bytes, key_id: str | None, signature: str | None) -> None:
        """Return if *signature* is a current key's signature of *body*; SignatureError."""
        if not key_id or not signature:
            raise SignatureError(
                SignatureReason.MISSING,
                f"the {KEY_ID_HEADER} and {SIGNATURE_HEADER} headers are required",
            )
        if len(key_id) > MAX_KEY_ID_CHARS or len(signature) > MAX_SIGNATURE_CHARS:
            raise SignatureError(SignatureReason.MALFORMED, "the signature headers are too long")
        key = await self.key(key_id)
        if not verify_signature(key, body, signature):
            raise SignatureError(
                SignatureReason.INVALID, "the signature does not match the request body"
            )
