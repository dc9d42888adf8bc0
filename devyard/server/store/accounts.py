"""Accounts: operators, organization creation, invitations, verified email domains
(migrations 9-11, docs/accounts.md).

- An *operator* is a user of this deployment's operators (a row of ``operators``): they may
  create organizations when only operators may, and they read the support messages.
- An *invitation* is kept with the SHA-256 of its token only (`tokens.hash_secret`), never the
  token; it is open until accepted, revoked or expired, and accepting it is one transaction
  that closes it and adds the membership, so it is single-use even under concurrent accepts.
- An organization's *domains* are rows (org, domain) with the TXT token to publish and the
  time of verification, if any. Replacing the list keeps the rows of domains still listed
  (a verified domain stays verified), drops the others and adds new ones pending.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

import attrs

from .sso import SsoStore

if TYPE_CHECKING:  # base imports this module (Store includes AccountStore)
    from .base import Membership, Organization, Role, User

__all__ = [
    "AccountStore",
    "AuditEntry",
    "AuditQuery",
    "BrowserSession",
    "DomainStatus",
    "Invitation",
    "OidcConnection",
    "OrganizationDomain",
    "SessionCredential",
]


class DomainStatus(enum.StrEnum):
    PENDING = "pending"
    VERIFIED = "verified"


@attrs.frozen
class Invitation:
    """An invitation to join an organization. Never holds the token nor its hash."""

    id: str  # "inv_..."
    org_id: str
    email: str  # lower case
    role: Role
    invited_by: str | None  # user id; None once that user is deleted
    created_at: datetime
    expires_at: datetime
    accepted_at: datetime | None = None
    accepted_by: str | None = None
    revoked_at: datetime | None = None

    def open_at(self, now: datetime) -> bool:
        return self.accepted_at is None and self.revoked_at is None and now < self.expires_at


@attrs.frozen
class OrganizationDomain:
    org_id: str
    domain: str  # lower case, without a trailing dot
    txt_token: str  # published as a TXT record; not a secret
    created_at: datetime
    verified_at: datetime | None = None

    @property
    def status(self) -> DomainStatus:
        return DomainStatus.PENDING if self.verified_at is None else DomainStatus.VERIFIED


@attrs.frozen
class OidcConnection:
    """An organization's single sign-on provider. The client secret is kept encrypted
    (`accounts.secretbox`): only ``secret_sealed``, never shown by the API."""

    org_id: str
    issuer: str
    client_id: str
    allowed_domains: tuple[str, ...]
    default_role: Role
    created_at: datetime
    updated_at: datetime
    secret_sealed: str | None = attrs.field(default=None, repr=False)  # None: public client


@attrs.frozen
class AuditEntry:
    """An audit event with who did it and from where (``None``: the server itself, or an
    event recorded before migration 10). Never holds a secret."""

    id: str
    org_id: str
    kind: str
    subject: str | None
    detail: Mapping[str, Any]
    actor: str | None  # user id
    address: str | None  # the client address the request came from
    created_at: datetime


@attrs.frozen
class AuditQuery:
    """Which audit entries to list, newest first: every bound given applies."""

    since: datetime | None = None  # inclusive
    until: datetime | None = None  # exclusive
    actor: str | None = None
    before: str | None = None  # an entry id: only older entries (the next page)
    limit: int = 100


@attrs.frozen
class BrowserSession:
    """A browser's session (docs/accounts.md): made from an API key, acting as that key (its
    organization, user, read-only flag) until it expires or is revoked; dies with the key.
    Never holds the cookie's secret, the CSRF token, nor their hashes."""

    id: str  # "ses_..."; used to list and revoke
    org_id: str
    user_id: str
    api_key_id: str
    lookup_id: str
    created_at: datetime
    expires_at: datetime
    user_agent: str | None = None
    revoked_at: datetime | None = None


@attrs.frozen
class SessionCredential:
    """What cookie authentication needs; returned only by `get_session_by_lookup`."""

    session: BrowserSession
    secret_hash: str = attrs.field(repr=False)
    csrf_hash: str = attrs.field(repr=False)


class AccountStore(SsoStore, Protocol):
    """The account methods of `base.Store` (this module implements them in SQL)."""

    async def create_organization_for(self, name: str, admin_user_id: str) -> Organization:
        """A new organization with *admin_user_id* as its admin, in one transaction.
        Conflict (field ``name``) if the name is taken; NotFound for an unknown user."""

    async def is_operator(self, user_id: str) -> bool: ...

    async def set_operator(self, user_id: str, operator: bool) -> None:
        """Grants or withdraws the operator role; idempotent. NotFound for an unknown user."""

    async def list_operator_emails(self) -> list[str]:
        """The emails of the operators that have one, oldest grant first."""

    async def create_invitation(
        self,
        *,
        org_id: str,
        email: str,
        role: Role,
        token_hash: str,
        invited_by: str,
        ttl_s: int,
    ) -> Invitation:
        """Open for *ttl_s* seconds from now. Revokes any open invitation of the same email
        in the organization (the newest link wins). NotFound for an unknown organization."""

    async def list_open_invitations(self, org_id: str) -> list[Invitation]:
        """Neither accepted, revoked nor expired by the store's clock; oldest first."""

    async def revoke_invitation(self, org_id: str, invitation_id: str) -> Invitation:
        """NotFound unless the invitation is open and of this organization."""

    async def get_invitation_by_token(self, org_id: str, token_hash: str) -> Invitation:
        """NotFound unless an *open* invitation of this organization has this token."""

    async def accept_invitation(self, org_id: str, invitation_id: str, user_id: str) -> Membership:
        """Closes the open invitation and makes the user a member with its role, atomically.
        NotFound unless it is open; Conflict if the user is already a member (the invitation
        stays open)."""

    async def accept_invitation_as_new_user(
        self, org_id: str, invitation_id: str, user_name: str
    ) -> tuple[User, Membership]:
        """`accept_invitation` for someone without a user: creates one named *user_name* with
        the invited email in the same transaction. Conflict if the name or email is taken."""

    async def list_domains(self, org_id: str) -> list[OrganizationDomain]:
        """Alphabetical. NotFound for an unknown organization."""

    async def replace_domains(
        self, org_id: str, domains: Mapping[str, str]
    ) -> list[OrganizationDomain]:
        """The organization's domains become the keys of *domains*: listed ones already there
        are kept as they are, new ones are added pending with the given TXT token."""

    async def mark_domain_verified(self, org_id: str, domain: str) -> OrganizationDomain:
        """Idempotent. NotFound unless the organization lists the domain."""

    async def create_session(
        self,
        *,
        org_id: str,
        api_key_id: str,
        lookup_id: str,
        secret_hash: str,
        csrf_hash: str,
        ttl_s: int,
        user_agent: str | None,
    ) -> BrowserSession:
        """For the user of the key; NotFound unless the key is active in the organization."""

    async def get_session_by_lookup(self, lookup_id: str) -> SessionCredential:
        """For authentication: NotFound for unknown, revoked or expired sessions, and for
        sessions whose key was revoked."""

    async def list_sessions(
        self, org_id: str, *, user_id: str | None = None
    ) -> list[BrowserSession]:
        """The live sessions (not revoked nor expired) of the organization (or of one of its
        users), oldest first."""

    async def revoke_session(self, org_id: str, session_id: str) -> BrowserSession:
        """Idempotent; NotFound unless the session is of this organization."""

    async def record_audit(
        self,
        *,
        org_id: str,
        kind: str,
        subject: str | None,
        detail: Mapping[str, Any],
        actor: str | None,
        address: str | None,
    ) -> AuditEntry:
        """An audit event with its actor and address (no secrets in *detail*)."""

    async def list_audit(self, org_id: str, query: AuditQuery) -> list[AuditEntry]:
        """Newest first, at most ``query.limit`` (capped at 500)."""

    async def get_oidc_connection(self, org_id: str) -> OidcConnection:
        """NotFound when the organization has none."""

    async def put_oidc_connection(
        self,
        org_id: str,
        *,
        issuer: str,
        client_id: str,
        allowed_domains: tuple[str, ...],
        default_role: Role,
        secret_sealed: str | None,
        keep_secret: bool,
    ) -> OidcConnection:
        """Creates or replaces it; *keep_secret* keeps the stored secret (an update that
        does not repeat it). NotFound for an unknown organization."""

    async def delete_oidc_connection(self, org_id: str) -> None:
        """NotFound when the organization has none."""
