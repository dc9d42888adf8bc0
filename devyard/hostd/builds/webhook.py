"""The build-completion webhook of an exec (``webhook: {url, headers?, secret?}``).

When the exec ends, hostd POSTs its description (``GET /exec/{id}``'s JSON, plus
``"event": "build.completed"``) to *url* over HTTPS with the request's own *headers* (at most
16) and a signature of the body:

    X-Devyard-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>

*secret* is the caller's (16 to 256 characters), or one hostd makes for the exec and returns
once, as ``webhookSecret`` in the answer of ``POST /exec``. A receiver recomputes the HMAC
over the raw body, compares in constant time and rejects stale ``t`` (replays). A URL whose
host resolves to a non-global address (loopback, private, link-local...) is not called, and
the connection goes to the address that was checked (`devyard.core.pinning`), so DNS cannot
answer differently between the check and the connection.
Delivery:
at most `WebhookPolicy.attempts` tries, ``backoff_s`` doubling between them, on a connection
error, a timeout, 408, 429 or a 5xx; any 2xx is delivered; another status gives up at once.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import secrets
import ssl
import time
from collections.abc import Mapping
from typing import Any, Final
from urllib.parse import urlsplit

import attrs
import httpx
import trio

from ...core.pinning import AddressPolicy, PinningError, pin
from .errors import BuildError, BuildReason

__all__ = ["WebhookPolicy", "WebhookSpec", "deliver", "parse_webhook", "signature"]

MAX_HEADERS: Final = 16
_HEADER_NAME: Final = re.compile(r"[A-Za-z0-9!#$%&'*+.^_`|~-]{1,128}")
_RESERVED: Final = frozenset({"host", "content-type", "content-length", "transfer-encoding"})
_RETRY_STATUSES: Final = frozenset({408, 429})


def _bad(message: str) -> BuildError:
    return BuildError(BuildReason.BAD_REQUEST, message)


@attrs.frozen
class WebhookSpec:
    url: str
    headers: tuple[tuple[str, str], ...] = ()
    secret: str = attrs.field(default="", repr=False)
    generated: bool = False  # hostd made the secret (POST /exec returns it)


@attrs.frozen
class WebhookPolicy:
    """*ssl_context*: None is the system's trust store. *allow_private*: deliver to loopback,
    private, link-local and other non-global addresses (off: hostd's network position must not
    be a way in). *allow_http*: for tests only."""

    attempts: int = 5
    backoff_s: float = 1.0
    timeout_s: float = 10.0
    ssl_context: ssl.SSLContext | None = None
    allow_private: bool = False
    allow_http: bool = False


def parse_webhook(value: object, *, allow_http: bool = False) -> WebhookSpec | None:
    """The exec body's ``webhook``, checked; None when absent."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise _bad("webhook must be an object {url, headers?, secret?}")
    url = value.get("url")
    if not isinstance(url, str) or len(url) > 2048:
        raise _bad("webhook.url must be a URL")
    parts = urlsplit(url)
    schemes = ("https", "http") if allow_http else ("https",)
    if parts.scheme not in schemes or not parts.hostname or parts.username or parts.password:
        raise _bad("webhook.url must be an https:// URL without credentials")
    raw_headers = value.get("headers") or {}
    if isinstance(raw_headers, list):
        raw_headers = {h.get("name"): h.get("value") for h in raw_headers if isinstance(h, dict)}
    if not isinstance(raw_headers, dict) or len(raw_headers) > MAX_HEADERS:
        raise _bad(f"webhook.headers must be an object of at most {MAX_HEADERS} headers")
    headers = []
    for name, text in raw_headers.items():
        if not isinstance(name, str) or not _HEADER_NAME.fullmatch(name):
            raise _bad(f"webhook.headers: bad header name {name!r}")
        if name.lower() in _RESERVED or name.lower().startswith("x-devyard-"):
            raise _bad(f"webhook.headers: {name} is set by devyard")
        if not isinstance(text, str) or len(text) > 8192 or re.search(r"[\r\n\x00]", text):
            raise _bad(f"webhook.headers: the value of {name} must be one line of text")
        headers.append((name, text))
    secret = value.get("secret")
    generated = secret is None
    if generated:
        secret = secrets.token_hex(32)
    if not isinstance(secret, str) or not 16 <= len(secret) <= 256:
        raise _bad("webhook.secret must be a string of 16 to 256 characters")
    return WebhookSpec(url, tuple(headers), secret, generated)


def signature(secret: str, timestamp: int, body: bytes) -> str:
    """The ``X-Devyard-Signature`` value of *body* sent at *timestamp*."""
    message = str(timestamp).encode() + b"." + body
    digest = hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={digest}"


async def deliver(
    spec: WebhookSpec, payload: Mapping[str, Any], policy: WebhookPolicy
) -> dict[str, Any]:
    """POST *payload* to the webhook until delivered or out of attempts; what happened
    (``{delivered, attempts, status?, error?}``, never the secret or the headers)."""
    body = json.dumps({"event": "build.completed", **payload}).encode()
    url, pinned_headers, extensions = spec.url, {}, {}
    if not policy.allow_private:
        try:
            pinned = await pin(spec.url, AddressPolicy())
        except PinningError:
            return {"delivered": False, "attempts": 0, "error": "the URL's address is not public"}
        url, pinned_headers, extensions = pinned.url, pinned.headers, pinned.extensions
    verify: ssl.SSLContext | bool = policy.ssl_context or True
    outcome: dict[str, Any] = {"delivered": False, "attempts": 0}
    delay = policy.backoff_s
    async with httpx.AsyncClient(verify=verify, timeout=policy.timeout_s) as client:
        for attempt in range(1, policy.attempts + 1):
            outcome["attempts"] = attempt
            headers = dict(spec.headers) | pinned_headers
            headers["Content-Type"] = "application/json"
            headers["X-Devyard-Event"] = "build.completed"
            headers["X-Devyard-Delivery"] = str(payload.get("execId", ""))
            headers["X-Devyard-Signature"] = signature(spec.secret, int(time.time()), body)
            retry = True
            try:
                answer = await client.post(
                    url, content=body, headers=headers, extensions=extensions
                )
            except httpx.HTTPError as exc:
                outcome["error"] = type(exc).__name__
            else:
                outcome["status"] = answer.status_code
                outcome.pop("error", None)
                if 200 <= answer.status_code < 300:
                    outcome["delivered"] = True
                    return outcome
                retry = answer.status_code >= 500 or answer.status_code in _RETRY_STATUSES
            if not retry or attempt == policy.attempts:
                break
            await trio.sleep(delay)
            delay *= 2
    return outcome
