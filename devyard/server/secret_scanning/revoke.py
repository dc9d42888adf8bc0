"""What a leaked-token report does: find the credential, revoke it, tell its owner.

A reported string is matched by its prefix (`store.tokens.TokenKind`) and then by hash, as
authentication would: an API key or a scoped token by lookup id and SHA-256, a tunnel token
the same way, an instance or stream token by the live instance it opens, a host token against
the operator's host-token file. A match is acted on at once:

- API key: revoked (its scoped tokens die with it);
- scoped token: revoked;
- tunnel token: replaced by a dead one (`TunnelService.revoke`), its connectors told to exit;
  an admin rotates the tunnel for a new token;
- instance or stream token: the instance is ended, which clears both of its tokens (they live
  exactly as long as the instance, docs/security.md);
- host token: not an organization's credential; the operator is told in the server log at
  WARNING (revoke it by removing its line from ``DATA_DIR/host-tokens``).

The owning organization is told through its audit log (`Store.add_audit_event`, kind
``token_leaked``, with the credential's id, the reporter, ``source`` and ``url``; never the
token). This deployment has no mail configuration, so the same fact is logged at WARNING for
the operator, without the token.

The label answered is ``true_positive`` when the string was a live credential of this
deployment (and is now revoked), ``false_positive`` otherwise: unknown, malformed, with a
wrong checksum, or already revoked, expired or ended, so there was nothing left to revoke.
"""

from __future__ import annotations

import enum
import logging
from typing import Final

import attrs
import trio

from ..edge.tokens import HostTokens
from ..instances import InstanceService
from ..store import errors as store_errors
from ..store import tokens
from ..store.base import Store
from ..store.tokens import TokenKind
from ..tunnels import TunnelService, parse_tunnel_token
from .reports import Report

log = logging.getLogger(__name__)

__all__ = ["AUDIT_KIND", "Finding", "Label", "LeakResponder"]

AUDIT_KIND: Final = "token_leaked"


class Label(enum.StrEnum):
    TRUE_POSITIVE = "true_positive"
    FALSE_POSITIVE = "false_positive"


@attrs.frozen
class Finding:
    """A live credential a report matched, and what was done to it."""

    kind: TokenKind
    org_id: str | None  # None: an operator credential (host token)
    subject: str  # the credential's id (key_..., stk_..., tunnel id, instance id, host id)
    action: str


class LeakResponder:
    """Acts on leaked-token reports for the whole deployment."""

    def __init__(
        self,
        store: Store,
        *,
        tunnels: TunnelService,
        instances: InstanceService,
        host_tokens: HostTokens | None,
        reporter: str = "github",
    ) -> None:
        self._store = store
        self._tunnels = tunnels
        self._instances = instances
        self._host_tokens = host_tokens
        self._reporter = reporter

    def __repr__(self) -> str:
        return f"<LeakResponder {self._reporter}>"

    async def handle(self, report: Report) -> Label:
        finding = await self.revoke(report.token)
        if finding is None:
            return Label.FALSE_POSITIVE
        await self._tell(finding, report)
        return Label.TRUE_POSITIVE

    async def revoke(self, token: str) -> Finding | None:
        """Revoke the live credential *token* is, if any; what it was and what was done."""
        kind = tokens.kind_of(token)
        if kind is TokenKind.API_KEY:
            return await self._api_key(token)
        if kind is TokenKind.SCOPED_TOKEN:
            return await self._scoped_token(token)
        if kind is TokenKind.TUNNEL_TOKEN:
            return await self._tunnel_token(token)
        if kind in (TokenKind.INSTANCE_TOKEN, TokenKind.STREAM_TOKEN):
            return await self._instance_token(kind, token)
        if kind is TokenKind.HOST_TOKEN and self._host_tokens is not None:
            host_id = await trio.to_thread.run_sync(self._host_tokens.verify, token)
            if host_id is not None:
                return Finding(kind, None, host_id, "reported to the operator")
        return None

    async def _api_key(self, token: str) -> Finding | None:
        lookup = tokens.parse_api_key(token)
        if lookup is None:
            return None
        try:
            credential = await self._store.get_api_key_by_lookup(lookup)
        except store_errors.NotFound:
            return None
        if not tokens.verify_api_key(token, credential.secret_hash):
            return None
        key = credential.api_key
        await self._store.revoke_api_key(key.org_id, key.id)
        return Finding(TokenKind.API_KEY, key.org_id, key.id, "revoked")

    async def _scoped_token(self, token: str) -> Finding | None:
        lookup = tokens.parse_scoped_token(token)
        if lookup is None:
            return None
        try:
            credential = await self._store.get_scoped_token_by_lookup(lookup)
        except store_errors.NotFound:
            return None
        if not tokens.verify_secret(token, credential.secret_hash):
            return None
        scoped = credential.token
        await self._store.revoke_scoped_token(scoped.org_id, scoped.id)
        return Finding(TokenKind.SCOPED_TOKEN, scoped.org_id, scoped.id, "revoked")

    async def _tunnel_token(self, token: str) -> Finding | None:
        lookup = parse_tunnel_token(token)
        if lookup is None:
            return None
        try:
            credential = await self._store.get_tunnel_by_token(lookup)
        except store_errors.NotFound:
            return None
        if not tokens.verify_secret(token, credential.token_hash):
            return None
        tunnel = credential.tunnel
        try:
            await self._tunnels.revoke(tunnel.org_id, tunnel.name)
        except store_errors.NotFound:
            return None  # deleted meanwhile: nothing left to revoke
        return Finding(TokenKind.TUNNEL_TOKEN, tunnel.org_id, tunnel.id, "revoked")

    async def _instance_token(self, kind: TokenKind, token: str) -> Finding | None:
        try:
            instance, stream_only = await self._store.get_instance_by_token(token)
        except store_errors.NotFound:
            return None
        if stream_only != (kind is TokenKind.STREAM_TOKEN):
            return None  # a prefix that lies about the kind is not a token we issued
        await self._instances.delete(instance.org_id, instance.id)
        return Finding(kind, instance.org_id, instance.id, "instance ended")

    async def _tell(self, finding: Finding, report: Report) -> None:
        where = f"{report.source or 'unknown source'} {report.url}".strip()
        if finding.org_id is None:
            log.warning(
                "a %s of this deployment (%s) was reported leaked by %s at %s: remove its line"
                " from the host-tokens file and give the host a new token",
                finding.kind.value,
                finding.subject,
                self._reporter,
                where,
            )
            return
        await self._store.add_audit_event(
            org_id=finding.org_id,
            kind=AUDIT_KIND,
            subject=finding.subject,
            detail={
                "tokenKind": finding.kind.value,
                "action": finding.action,
                "reporter": self._reporter,
                "source": report.source,
                "url": report.url,
            },
        )
        log.warning(
            "a %s of organization %s (%s) was reported leaked by %s at %s; %s. No mail is"
            " configured: the organization is told through its audit log only",
            finding.kind.value,
            finding.org_id,
            finding.subject,
            self._reporter,
            where,
            finding.action,
        )
