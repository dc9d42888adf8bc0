"""The tunnels service: the rules of spec 2.5 / 4.6 over the store, told to the edge.

The API calls this module; the edge's connector links (`devyard.server.edge.connectors`)
implement `TunnelHub` and are told about every change that concerns connected connectors: a
selector change (``config``), and the end of a token or tunnel (rotation, revocation,
deletion), after which every connector of the tunnel gets a permanent error and exits.

The hub is built first, over a `StoreTunnelDirectory` (token checks and quick-tunnel
deletion, store only); the service is built after it and given it. Neither holds the other
the other way round.

Tokens are ``dyt_<lookup>_<secret><checksum>`` (`store.tokens.new_secret`), stored hashed; the
plaintext leaves this module only in the result of `create` and `rotate`.
"""

from __future__ import annotations

import calendar
import enum
import re
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Final, Protocol

import attrs
import trio

from ...core.selectors import SelectorError, parse_selectors
from ..store import errors as store_errors
from ..store import tokens
from ..store.base import Store, Tunnel
from ..store.rows import utc_now

__all__ = [
    "DEFAULT_EXPIRY_MONTHS",
    "EXPIRY_WARNING",
    "TOKEN_PREFIX",
    "ConnectorInfo",
    "EndReason",
    "InvalidTunnelField",
    "StoreTunnelDirectory",
    "TokenExpired",
    "TokenInvalid",
    "TunnelConnections",
    "TunnelHub",
    "TunnelService",
    "TunnelStatus",
    "add_months",
    "parse_tunnel_token",
]

TOKEN_PREFIX: Final = tokens.PREFIXES[tokens.TokenKind.TUNNEL_TOKEN]
DEFAULT_EXPIRY_MONTHS: Final = 12
MIN_EXPIRY_MONTHS: Final = 1
MAX_EXPIRY_MONTHS: Final = 60
EXPIRY_WARNING: Final = timedelta(days=14)
_NAME_RE: Final = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")


class InvalidTunnelField(ValueError):
    """A tunnel field that breaks a rule; ``field`` names it (the API's 400 says which)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


class TokenInvalid(Exception):
    """An unknown, malformed, rotated or revoked tunnel token."""


class TokenExpired(Exception):
    """A tunnel token past its expiry."""


class EndReason(enum.StrEnum):
    """Why every connector of a tunnel must go (each maps to a GO_AWAY code and exit code)."""

    ROTATED = "token-rotated"
    REVOKED = "token-revoked"
    EXPIRED = "token-expired"
    DELETED = "tunnel-deleted"


@attrs.frozen
class ConnectorInfo:
    id: str
    hostname: str
    version: str
    os: str
    connected_since: datetime


@attrs.frozen
class TunnelStatus:
    active: ConnectorInfo | None = None
    standbys: tuple[ConnectorInfo, ...] = ()

    @property
    def online(self) -> bool:
        return self.active is not None


class TunnelHub(Protocol):
    """What the service tells the edge; implemented by the connector links."""

    def status(self, org_id: str, name: str) -> TunnelStatus: ...

    async def on_tunnel_changed(self, tunnel: Tunnel) -> None:
        """Selectors changed: connected connectors get ``config``."""

    async def on_tunnel_ended(self, tunnel: Tunnel, reason: EndReason) -> None:
        """Token or tunnel gone: every connector gets a permanent error and is closed."""

    async def end_organization(self, org_id: str) -> int:
        """The organization is deleted: every connector of its tunnels is told (as for a
        deleted tunnel) and closed, whether or not its tunnel's row is still there."""


class TunnelConnections(TunnelHub, Protocol):
    """The edge's data path into tunnels (``BoundServer.tunnels``), for the instances service
    and the host daemon's egress: implemented by `devyard.server.edge.connectors.ConnectorHub`.
    """

    async def open_tunnel_stream(
        self,
        org_id: str,
        tunnel_name: str,
        dest: str,
        instance_id: str,
        *,
        selector_version: int | None = None,
    ) -> trio.abc.Stream:
        """A stream to *dest* through the tunnel's active connector (``tunnel-dial``)."""

    async def probe(self, org_id: str, tunnel_name: str) -> bool:
        """Whether the tunnel's active connector answers a ``probe`` stream."""


def add_months(when: datetime, months: int) -> datetime:
    """*when* plus calendar months (the 31st becomes the month's last day)."""
    index = when.month - 1 + months
    year, month = when.year + index // 12, index % 12 + 1
    day = min(when.day, calendar.monthrange(year, month)[1])
    return when.replace(year=year, month=month, day=day)


def parse_tunnel_token(token: str) -> str | None:
    """The lookup id of a well-formed tunnel token, else None (no query needed)."""
    return tokens.parse_token(tokens.TokenKind.TUNNEL_TOKEN, token)


def _check_name(name: str) -> str:
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
        raise InvalidTunnelField(
            "name",
            "lowercase letters, digits and dashes, at most 63 characters, "
            "starting and ending with a letter or digit",
        )
    return name


def _check_selectors(items: Sequence[str]) -> tuple[str, ...]:
    if not items:
        raise InvalidTunnelField("selectors", "at least one selector is needed")
    try:
        return tuple(str(s) for s in parse_selectors(items))
    except SelectorError as exc:
        raise InvalidTunnelField("selectors", str(exc)) from None


def _check_months(months: int) -> int:
    if isinstance(months, bool) or not MIN_EXPIRY_MONTHS <= months <= MAX_EXPIRY_MONTHS:
        raise InvalidTunnelField(
            "tokenExpiryMonths", f"must be {MIN_EXPIRY_MONTHS} to {MAX_EXPIRY_MONTHS}"
        )
    return months


class StoreTunnelDirectory:
    """What the connector hub asks of the store: which tunnel a token opens, and the deletion
    of a quick tunnel whose connectors are gone (`devyard.server.edge.connectors`)."""

    def __init__(self, store: Store, *, now: Callable[[], datetime] = utc_now) -> None:
        self._store = store
        self._now = now

    def __repr__(self) -> str:
        return "<StoreTunnelDirectory>"

    async def authenticate(self, token: str) -> Tunnel:
        """The tunnel a connector's token opens; TokenInvalid or TokenExpired otherwise."""
        lookup = parse_tunnel_token(token)
        if lookup is None:
            raise TokenInvalid("malformed tunnel token")
        try:
            credential = await self._store.get_tunnel_by_token(lookup)
        except store_errors.NotFound:
            raise TokenInvalid("unknown tunnel token") from None
        if not tokens.verify_secret(token, credential.token_hash):
            raise TokenInvalid("unknown tunnel token")
        if credential.tunnel.token_expires_at <= self._now():
            raise TokenExpired(f"the token expired at {credential.tunnel.token_expires_at}")
        return credential.tunnel

    async def delete_ephemeral(self, tunnel: Tunnel) -> bool:
        """Delete a quick tunnel if it still is the one given (not a new one of that name).
        The hub calls this once it holds no connector of the tunnel: nobody is left to tell."""
        try:
            current = await self._store.get_tunnel(tunnel.org_id, tunnel.name)
            if current.id != tunnel.id or not current.ephemeral:
                return False
            await self._store.delete_tunnel(tunnel.org_id, tunnel.name)
        except store_errors.NotFound:
            return False
        return True


class TunnelService:
    """Tunnels of every organization; *hub* (the edge's connector links) hears about every
    change that concerns a connected connector. Without a hub (the API alone) no connector
    can be connected, so there is nobody to tell and every tunnel is offline."""

    def __init__(
        self,
        store: Store,
        hub: TunnelHub | None = None,
        *,
        now: Callable[[], datetime] = utc_now,
    ) -> None:
        self.store = store
        self._hub = hub
        self._directory = StoreTunnelDirectory(store, now=now)
        self._now = now

    def __repr__(self) -> str:
        return f"<TunnelService hub={type(self._hub).__name__}>"

    async def create(
        self,
        org_id: str,
        name: str,
        selectors: Sequence[str],
        *,
        expiry_months: int = DEFAULT_EXPIRY_MONTHS,
        ephemeral: bool = False,
    ) -> tuple[Tunnel, str]:
        """The new tunnel and its token (shown once). Conflict when the name is taken."""
        _check_name(name)
        items = _check_selectors(selectors)
        months = _check_months(expiry_months)
        secret = tokens.new_secret(TOKEN_PREFIX)
        tunnel = await self.store.create_tunnel(
            org_id=org_id,
            name=name,
            selectors=items,
            ephemeral=ephemeral,
            token_lookup=secret.lookup_id,
            token_hash=secret.secret_hash,
            token_expires_at=add_months(self._now(), months),
        )
        return tunnel, secret.plaintext

    async def get(self, org_id: str, name: str) -> Tunnel:
        return await self.store.get_tunnel(org_id, name)

    async def list(self, org_id: str) -> list[Tunnel]:
        return await self.store.list_tunnels(org_id)

    async def set_selectors(self, org_id: str, name: str, selectors: Sequence[str]) -> Tunnel:
        tunnel = await self.store.set_tunnel_selectors(org_id, name, _check_selectors(selectors))
        if self._hub is not None:
            await self._hub.on_tunnel_changed(tunnel)
        return tunnel

    async def rotate(
        self, org_id: str, name: str, *, expiry_months: int = DEFAULT_EXPIRY_MONTHS
    ) -> tuple[Tunnel, str]:
        """A new token; the old one stops working and its connectors exit."""
        months = _check_months(expiry_months)
        secret = tokens.new_secret(TOKEN_PREFIX)
        tunnel = await self.store.rotate_tunnel_token(
            org_id,
            name,
            token_lookup=secret.lookup_id,
            token_hash=secret.secret_hash,
            token_expires_at=add_months(self._now(), months),
        )
        await self._tell_ended(tunnel, EndReason.ROTATED)
        return tunnel, secret.plaintext

    async def revoke(self, org_id: str, name: str) -> Tunnel:
        """The token stops working (a leaked-token report); a rotation makes a new one."""
        dead = tokens.new_secret(TOKEN_PREFIX)  # its plaintext is dropped: nothing matches it
        tunnel = await self.store.rotate_tunnel_token(
            org_id,
            name,
            token_lookup=dead.lookup_id,
            token_hash=dead.secret_hash,
            token_expires_at=self._now(),
        )
        await self._tell_ended(tunnel, EndReason.REVOKED)
        return tunnel

    async def delete(self, org_id: str, name: str) -> Tunnel:
        tunnel = await self.store.delete_tunnel(org_id, name)
        await self._tell_ended(tunnel, EndReason.DELETED)
        return tunnel

    async def authenticate(self, token: str) -> Tunnel:
        """The tunnel a connector's token opens; TokenInvalid or TokenExpired otherwise."""
        return await self._directory.authenticate(token)

    async def end_organization(self, org_id: str) -> int:
        """Deletes every tunnel of *org_id* (their tokens stop working) and closes every
        connector of the organization, also one of a tunnel whose row went in an earlier,
        interrupted attempt. Idempotent; returns how many tunnels it deleted."""
        deleted = 0
        for tunnel in await self.store.list_tunnels(org_id):
            try:
                await self.delete(org_id, tunnel.name)
            except store_errors.NotFound:
                continue  # deleted meanwhile
            deleted += 1
        if self._hub is not None:
            await self._hub.end_organization(org_id)
        return deleted

    async def _tell_ended(self, tunnel: Tunnel, reason: EndReason) -> None:
        if self._hub is not None:
            await self._hub.on_tunnel_ended(tunnel, reason)

    def status(self, tunnel: Tunnel) -> TunnelStatus:
        if self._hub is None:
            return TunnelStatus()
        return self._hub.status(tunnel.org_id, tunnel.name)
