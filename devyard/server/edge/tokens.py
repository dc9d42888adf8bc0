"""Host tokens: what a host daemon presents (``Authorization: Bearer``) to open a host link.

A token is ``dyh_<key id>_<secret><checksum>`` (`store.tokens`, docs/security.md; tokens made
before the checksum, ``dyh_<12 hex>_<43 url-safe base64>``, still verify); one token stands for
one host, whose id is ``host_<key id>``, so a host that reconnects keeps its id. Only a SHA-256
of each token is kept, one ``<key id> <sha256 hex>`` line per token in ``DATA_DIR/host-tokens``
(mode 0600), beside
the admin key file: host tokens are operator credentials, not organization data, so they live
with the server's other local secrets instead of in the store (docs/edge.md).

Operators list, revoke and rotate them (``devyard admin host-token list|revoke|rotate``): a
revoke removes the line, a rotation replaces the hash with a new token's of the same key id (so
the host keeps its id). The running server notices within `RECHECK_INTERVAL`
(`drop_revoked_hosts`): the link of a host whose token is gone is closed, and its reconnect is
refused with 401, which the host daemon takes as permanent. A rotated host's link stays up (it
authenticated when it linked); its next link needs the new token.

Replicas of a cluster (``[cluster]`` on PostgreSQL) share one set of tokens in the database
instead: `cluster.tokens.SharedHostTokens` is a `HostTokens` whose methods read the
``host_tokens`` table (docs/scale-out.md "Host tokens"). Callers that can await use the async
methods (`check`, `live_host_ids`, `create`, `revoke_host`, `rotate_host`), the same for both;
the blocking ones (`verify`...) stay for callers that run them in a worker thread.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import secrets
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Final, NoReturn

import trio

from ..store.errors import StoreUnavailable
from ..store.tokens import PREFIXES, TokenKind, new_token, token_from
from ._route import Refusal

__all__ = [
    "HOST_TOKENS_FILE",
    "RECHECK_INTERVAL",
    "HostTokens",
    "HostTokensUnavailable",
    "create_host_token",
    "drop_revoked_hosts",
    "host_id_of",
]

log = logging.getLogger(__name__)

HOST_TOKENS_FILE: Final = "host-tokens"
RECHECK_INTERVAL: Final = 2.0  # seconds between the edge's checks for revoked host tokens
_PREFIX: Final = PREFIXES[TokenKind.HOST_TOKEN] + "_"


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def host_id_of(key_id: str) -> str:
    return f"host_{key_id}"


def _key_id_of(host_id: str) -> str:
    return host_id.removeprefix("host_")


def key_id_of(host_id: str) -> str:
    """The key id of ``host_<key id>``."""
    return _key_id_of(host_id)


def rotated_token(key_id: str) -> str:
    """A new token of the same key id (so of the same host)."""
    return token_from(TokenKind.HOST_TOKEN, key_id, secrets.randbits(256))


def new_host_token() -> tuple[str, str]:
    """A fresh ``(key id, token)``."""
    secret = new_token(TokenKind.HOST_TOKEN)
    return secret.lookup_id, secret.plaintext


def parse_host_token(token: str) -> str | None:
    """The key id of a token shaped like a host token, else None (nothing verified)."""
    if not token.startswith(_PREFIX):
        return None
    key_id, _, secret = token[len(_PREFIX) :].partition("_")
    return key_id if key_id and secret else None


def token_digest(token: str) -> str:
    """What is stored of a host token: the SHA-256 hex of the whole token."""
    return _digest(token)


def same_digest(expected: str, token: str) -> bool:
    return hmac.compare_digest(expected, _digest(token))


class HostTokensUnavailable(Refusal, StoreUnavailable):
    """The tokens cannot be read now (the shared database, or the file). A `Refusal` (503,
    retried by the host daemon: never the permanent 401) where a link is authenticated, a
    `StoreUnavailable` (503) for the API."""

    def __init__(self, message: str) -> None:
        super().__init__(503, "unavailable", message)


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

    def host_ids(self) -> list[str]:
        """The hosts with a live token, in file order. Blocking (reads a small file)."""
        return [host_id_of(key_id) for key_id in self._entries()]

    def revoke(self, host_id: str) -> bool:
        """Removes *host_id*'s token; False when it has none. Blocking."""
        entries = self._entries()
        if entries.pop(_key_id_of(host_id), None) is None:
            return False
        self._write(entries)
        return True

    def rotate(self, host_id: str) -> str | None:
        """A new token for *host_id* (same host id), the old one dead; None when it has no
        token. The token is shown once. Blocking."""
        entries = self._entries()
        key_id = _key_id_of(host_id)
        if key_id not in entries:
            return None
        token = rotated_token(key_id)
        entries[key_id] = _digest(token)
        self._write(entries)
        return token

    def _write(self, entries: dict[str, str]) -> None:
        """Replaces the file atomically (mode 0600): a reader sees the old or the new list."""
        fd, temp = tempfile.mkstemp(dir=self.path.parent, prefix=".host-tokens.")
        try:
            with os.fdopen(fd, "w") as out:
                out.writelines(f"{k} {v}\n" for k, v in entries.items())
            os.replace(temp, self.path)
        except BaseException:
            Path(temp).unlink(missing_ok=True)
            raise

    def verify(self, token: str) -> str | None:
        """The host id *token* stands for, or None. Blocking (reads a small file)."""
        key_id = parse_host_token(token)
        if key_id is None:
            return None
        expected = self._entries().get(key_id)
        if expected is None or not same_digest(expected, token):
            return None
        return host_id_of(key_id)

    def file_entries(self) -> dict[str, str]:
        """``key id -> hash`` of the data-dir file (what a cluster imports). Blocking."""
        return self._entries()

    # ---- the async face, the same for the file and the shared table -------------------------

    async def check(self, token: str) -> str | None:
        """`verify`, awaitable."""
        return await trio.to_thread.run_sync(self.verify, token)

    async def live_host_ids(self) -> list[str]:
        """`host_ids`, awaitable; `HostTokensUnavailable` when they cannot be read."""
        try:
            return await trio.to_thread.run_sync(self.host_ids)
        except OSError as exc:
            raise HostTokensUnavailable(f"cannot read the host tokens: {exc.strerror}") from exc

    async def create(self) -> tuple[str, str]:
        """A new token: ``(host_id, token)``, the token shown once."""
        return await trio.to_thread.run_sync(create_host_token, self.path)

    async def revoke_host(self, host_id: str) -> bool:
        """`revoke`, awaitable."""
        return await trio.to_thread.run_sync(self.revoke, host_id)

    async def rotate_host(self, host_id: str) -> str | None:
        """`rotate`, awaitable."""
        return await trio.to_thread.run_sync(self.rotate, host_id)


def create_host_token(path: Path) -> tuple[str, str]:
    """Add a new token to *path*; return ``(host_id, token)``. The token is shown once."""
    key_id, token = new_host_token()
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    with os.fdopen(fd, "a") as out:
        out.write(f"{key_id} {_digest(token)}\n")
    return host_id_of(key_id), token


async def drop_revoked_hosts(
    tokens: HostTokens,
    linked: Callable[[], Iterable[str]],
    drop: Callable[[str], None],
    *,
    interval: float = RECHECK_INTERVAL,
) -> NoReturn:
    """Every *interval*, closes (*drop*) the link of each *linked* host whose token was
    revoked; runs until cancelled. Tokens that cannot be read (the file, or the shared
    table of a cluster) are logged and tried again; links are kept meanwhile."""
    while True:
        await trio.sleep(interval)
        hosts = list(linked())
        if not hosts:
            continue
        try:
            live = set(await tokens.live_host_ids())
        except HostTokensUnavailable as exc:
            log.warning("%s; links are kept", exc)
            continue
        for host_id in hosts:
            if host_id not in live:
                log.warning("host %s: its token was revoked; closing its link", host_id)
                drop(host_id)
