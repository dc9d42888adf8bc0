"""Single sign-on logins in flight and the operators' answers to support messages
(migration 12, docs/accounts.md).

- An `OidcLogin` is one browser's sign-in between ``/auth/oidc/{org}/start`` and the
  callback: the store keeps the SHA-256 of its state, of the browser-binding cookie and of
  the nonce, and the PKCE verifier sealed (`accounts.secretbox`: it must be sent again).
  Consuming it marks it used in the same statement that finds it, so a state (and the nonce
  it carries) works once, even under concurrent callbacks.
- `sso_join` is the end of a good sign-in in one transaction: the user of the email (created
  when there is none), its membership (just in time), and the key its browser session
  stands on.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Final, Protocol

import attrs

if TYPE_CHECKING:
    from .base import ApiKey, Feedback, Role, User

__all__ = ["SSO_KEY_NAME", "OidcLogin", "SsoJoin", "SsoStore", "SupportAnswer"]

# The API key a user's single sign-on sessions stand on (docs/accounts.md): its plaintext is
# never shown; revoking it ends them.
SSO_KEY_NAME: Final = "single sign-on"


@attrs.frozen
class OidcLogin:
    id: str  # "oil_..."
    org_id: str
    return_to: str
    created_at: datetime
    expires_at: datetime
    browser_hash: str = attrs.field(repr=False)
    nonce_hash: str = attrs.field(repr=False)
    verifier_sealed: str = attrs.field(repr=False)


@attrs.frozen
class SsoJoin:
    """What a sign-in found or made."""

    user: User
    role: Role
    api_key: ApiKey
    user_created: bool
    joined: bool  # the membership was made by this sign-in (just in time)


@attrs.frozen
class SupportAnswer:
    id: str  # "ans_..."
    feedback_id: str
    message: str
    answered_by: str | None  # user id of the operator
    emailed: bool
    created_at: datetime


class SsoStore(Protocol):
    """Part of `accounts.AccountStore`; implemented by `sql_sso.SqlSso`."""

    async def create_oidc_login(
        self,
        *,
        org_id: str,
        state_hash: str,
        browser_hash: str,
        nonce_hash: str,
        verifier_sealed: str,
        return_to: str,
        ttl_s: int,
    ) -> OidcLogin:
        """Open for *ttl_s* seconds; deletes logins that expired a while ago. NotFound for an
        unknown organization."""

    async def consume_oidc_login(self, state_hash: str) -> OidcLogin:
        """Marks the login of this state used and returns it; NotFound if unknown, used or
        expired (alike)."""

    async def sso_join(
        self,
        org_id: str,
        *,
        email: str,
        user_names: tuple[str, ...],
        role: Role,
        key_lookup_id: str,
        key_secret_hash: str,
    ) -> SsoJoin:
        """The user whose email is *email* (case-insensitive), or a new one named the first
        free name of *user_names*; a member of *org_id* with *role* unless already one; and
        its active single sign-on key (`SSO_KEY_NAME`), made from the given lookup and hash
        when it has none. Conflict when no name is free; NotFound for an unknown or
        deleting organization."""

    async def get_feedback(self, feedback_id: str) -> Feedback:
        """NotFound when unknown."""

    async def add_support_answer(
        self, feedback_id: str, *, message: str, answered_by: str, emailed: bool
    ) -> SupportAnswer:
        """NotFound for an unknown message."""

    async def list_support_answers(self) -> list[SupportAnswer]:
        """Every answer, oldest first."""
