"""Browser sessions: an API key pasted once becomes a cookie (docs/accounts.md).

The cookie ``devyard_session`` holds ``dyses_<lookup>_<secret>``: the lookup selects the row,
the store keeps ``sha256:`` of the whole value (high entropy: a fast hash loses nothing, as
for API keys). It is HttpOnly, SameSite=Strict, Path=/, Secure when the server is reached
over TLS, and lives as long as the session.

CSRF: SameSite=Strict already keeps other sites' requests from carrying the cookie; as a
second, independent defence every state-changing request authenticated by the cookie must
send the session's CSRF token in ``X-CSRF-Token``. The token is returned once in the body of
the sign-in and in the readable cookie ``devyard_csrf`` (so a reloaded page finds it); the
store keeps its hash and the server compares in constant time. A request with an
``Authorization`` header ignores the cookies altogether.
"""

from __future__ import annotations

import re
import secrets
from typing import Final

import attrs

from ..store.tokens import hash_secret, verify_secret

__all__ = [
    "CSRF_COOKIE",
    "CSRF_HEADER",
    "SESSION_COOKIE",
    "NewSession",
    "csrf_matches",
    "new_session",
    "parse_session",
    "verify_cookie",
]

SESSION_COOKIE: Final = "devyard_session"
CSRF_COOKIE: Final = "devyard_csrf"
CSRF_HEADER: Final = "X-CSRF-Token"
_PREFIX: Final = "dyses"
_FORM: Final = re.compile(r"dyses_([0-9a-f]{16})_[A-Za-z0-9_-]{43}")


@attrs.frozen
class NewSession:
    """A fresh session's secrets: set the cookie and show the CSRF token once; store hashes."""

    cookie: str = attrs.field(repr=False)
    lookup_id: str
    secret_hash: str = attrs.field(repr=False)
    csrf_token: str = attrs.field(repr=False)
    csrf_hash: str = attrs.field(repr=False)


def new_session() -> NewSession:
    lookup_id = secrets.token_hex(8)
    cookie = f"{_PREFIX}_{lookup_id}_{secrets.token_urlsafe(32)}"
    csrf = secrets.token_urlsafe(32)
    return NewSession(
        cookie=cookie,
        lookup_id=lookup_id,
        secret_hash=hash_secret(cookie),
        csrf_token=csrf,
        csrf_hash=hash_secret(csrf),
    )


def parse_session(cookie: str) -> str | None:
    """The lookup id of a well-formed session cookie, or None (no store query then)."""
    match = _FORM.fullmatch(cookie)
    return None if match is None else match.group(1)


def csrf_matches(presented: str | None, csrf_hash: str) -> bool:
    return bool(presented) and verify_secret(presented or "", csrf_hash)


def verify_cookie(cookie: str, secret_hash: str) -> bool:
    return verify_secret(cookie, secret_hash)
