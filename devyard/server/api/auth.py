"""Who is calling, and may they: API-key authentication and the role check.

An API key acts as one user in one organization, with the role that user holds there *now*
(looked up on every request, so a demotion or removal takes effect at once; removing a
member also revokes its keys in the store). The key is organization-scoped: objects of any
other organization are invisible to it (404), even if its user belongs there too.

Authorization is two rules, both declared per operation in ``openapi.yaml``:

- ``x-devyard-role``: the least role (viewer < member < admin); below it is 403;
- a read-only key may call only ``GET`` operations; anything else is 403.

Rules that depend on the object (an own key versus someone else's, one's own user) are
checked by the handler with :func:`require_role` or by raising :class:`Forbidden`.

A scoped token (``dyst_...``, docs/scoped-tokens.md) authenticates as the key that minted it,
with its user's current role, plus the token's scopes: the same :class:`Principal` with
``scopes`` set. For such a principal a third rule replaces the read-only one: the operation
must declare ``x-devyard-scope`` and one of the token's scopes must open it for the path's id
(`scopes.allows`); an operation without the extension is 403 for every scoped token. The
token dies with its minting key, and revoking it or its expiry apply to the next request.

``last_used_at`` is recorded at most once per ``touch_interval`` per key, so a busy key costs
one write a minute rather than one per request; the table of last touches is bounded.
"""

from __future__ import annotations

import base64
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Final

import attrs

from ..accounts import sessions
from ..store import errors as store_errors
from ..store import tokens
from ..store.accounts import BrowserSession
from ..store.base import ApiKey, KeyContext, Organization, Role, ScopedToken, Store, User
from ._errors import Forbidden, Unauthorized
from .scopes import Scope, Template, allows, parse_scope

__all__ = [
    "Authenticator",
    "Principal",
    "authorize",
    "require_csrf",
    "require_role",
    "role_at_least",
]

_RANK: Final = {Role.VIEWER: 0, Role.MEMBER: 1, Role.ADMIN: 2}
_MAX_TOUCHED: Final = 100_000
_MAX_HEADER: Final = 512


def role_at_least(role: Role, least: Role) -> bool:
    return _RANK[role] >= _RANK[least]


@attrs.frozen
class Principal:
    """The authenticated caller of one request."""

    api_key: ApiKey  # for a scoped token, the key that minted it
    user: User
    organization: Organization
    role: Role
    scoped_token: ScopedToken | None = None
    scopes: frozenset[Scope] | None = None  # None: a full API key, limited by its role only
    session: BrowserSession | None = None  # a browser session made from api_key (accounts)
    csrf_hash: str | None = attrs.field(default=None, repr=False)  # the session's, to check

    @property
    def org_id(self) -> str:
        return self.organization.id

    @property
    def read_only(self) -> bool:
        """May not write except as its scopes allow, nor see per-instance secrets."""
        return self.api_key.read_only or self.scopes is not None

    @property
    def user_id(self) -> str:
        return self.user.id

    def __repr__(self) -> str:
        token = "" if self.scoped_token is None else f" token={self.scoped_token.id}"
        token += "" if self.session is None else f" session={self.session.id}"
        return f"<Principal key={self.api_key.id}{token} user={self.user.id} org={self.org_id}>"


def require_role(principal: Principal, least: Role, what: str) -> None:
    """Raise 403 unless *principal*'s role is at least *least*."""
    if not role_at_least(principal.role, least):
        raise Forbidden(
            f"{what} needs the {least} role; this key's user is {principal.role}",
            reason="insufficient_role",
        )


def require_csrf(principal: Principal, presented: str | None) -> None:
    """A browser session changes something only with its CSRF token (*presented*, from
    ``X-CSRF-Token``): a cross-site form post brings the cookie, never the token."""
    if not sessions.csrf_matches(presented, principal.csrf_hash or ""):
        raise Forbidden(
            f"a session needs its CSRF token in {sessions.CSRF_HEADER} to change anything",
            reason="csrf",
        )


def authorize(
    principal: Principal,
    *,
    least: Role | None,
    safe: bool,
    scope: Template | None = None,
    path_args: Mapping[str, str] | None = None,
    any_token: bool = False,
) -> None:
    """The per-operation rules: a scoped token only what its scopes open (*scope* is the
    operation's ``x-devyard-scope``, or any when *any_token*: ``x-devyard-any-token``, /whoami);
    read-only keys only read; the role is at least *least*."""
    if principal.scopes is not None and not any_token:
        if scope is None or not allows(principal.scopes, scope, path_args or {}):
            raise Forbidden(
                "this scoped token's scopes do not allow this operation",
                reason="insufficient_scope",
            )
    elif not safe and principal.api_key.read_only:
        raise Forbidden("this API key is read-only", reason="read_only_key")
    if least is not None:
        require_role(principal, least, "this operation")


def bearer_token(authorization: str | None) -> str:
    """The token of an ``Authorization: Bearer <token>`` header, or 401."""
    if not authorization:
        raise Unauthorized("missing API key: send Authorization: Bearer dy_...")
    if len(authorization) > _MAX_HEADER:
        raise Unauthorized("malformed Authorization header")
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() == "basic":  # Gradle's HTTP build cache sends only Basic (docs/builds.md)
        token = _basic_password(token) or ""
        scheme = "bearer"
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthorized("malformed Authorization header: expected Bearer dy_...")
    return token.strip()


def _basic_password(credential: str) -> str | None:
    """The password of an HTTP Basic credential (any user name), or None."""
    try:
        decoded = base64.b64decode(credential.strip(), validate=True).decode("utf-8")
    except (ValueError, UnicodeDecodeError):
        return None
    _, colon, password = decoded.partition(":")
    return password if colon and password else None


class Authenticator:
    """Turns an Authorization header into a :class:`Principal`, or raises 401."""

    def __init__(
        self,
        store: Store,
        *,
        clock: Callable[[], float],
        touch_interval: float = 60.0,
    ) -> None:
        self._store = store
        self._clock = clock
        self._touch_interval = touch_interval
        self._touched: OrderedDict[str, float] = OrderedDict()

    def __repr__(self) -> str:
        return f"<Authenticator touched={len(self._touched)}>"

    async def authenticate(self, authorization: str | None) -> Principal:
        plaintext = bearer_token(authorization)
        token_lookup = tokens.parse_scoped_token(plaintext)
        if token_lookup is not None:
            return await self._scoped(plaintext, token_lookup)
        lookup_id = tokens.parse_api_key(plaintext)
        if lookup_id is None:
            raise Unauthorized("invalid API key")
        try:
            # the key, its user's role now, the user and the organization: one store read
            context = await self._store.get_api_key_context(lookup_id=lookup_id)
        except store_errors.NotFound:
            raise Unauthorized("invalid API key") from None
        if not tokens.verify_api_key(plaintext, context.credential.secret_hash):
            raise Unauthorized("invalid API key")
        await self._maybe_touch(context.credential.api_key.id)
        return _principal(context)

    async def authenticate_session(self, cookie: str) -> Principal:
        """A browser session's cookie (`accounts.sessions`): it acts as the key it was made
        from; unknown, revoked, expired, or of a revoked key is 401."""
        lookup_id = sessions.parse_session(cookie)
        if lookup_id is None:
            raise Unauthorized("invalid session")
        try:
            credential = await self._store.get_session_by_lookup(lookup_id)
        except store_errors.NotFound:
            raise Unauthorized("invalid or expired session") from None
        if not sessions.verify_cookie(cookie, credential.secret_hash):
            raise Unauthorized("invalid or expired session")
        session = credential.session
        try:
            context = await self._store.get_api_key_context(
                org_id=session.org_id, key_id=session.api_key_id
            )
        except store_errors.NotFound:
            raise Unauthorized("invalid or expired session") from None
        principal = _principal(context)
        return attrs.evolve(principal, session=session, csrf_hash=credential.csrf_hash)

    async def _scoped(self, plaintext: str, lookup_id: str) -> Principal:
        """A scoped token: unknown, revoked, expired, or minted by a revoked key is 401."""
        try:
            credential = await self._store.get_scoped_token_by_lookup(lookup_id)
        except store_errors.NotFound:
            raise Unauthorized("invalid scoped token") from None
        if not tokens.verify_secret(plaintext, credential.secret_hash):
            raise Unauthorized("invalid scoped token")
        token = credential.token
        try:
            context = await self._store.get_api_key_context(
                org_id=token.org_id, key_id=token.api_key_id
            )
        except store_errors.NotFound:
            raise Unauthorized("invalid scoped token") from None
        principal = _principal(context)
        return attrs.evolve(
            principal,
            scoped_token=token,
            scopes=frozenset(parse_scope(scope) for scope in token.scopes),
        )

    async def _maybe_touch(self, key_id: str) -> None:
        now = self._clock()
        last = self._touched.get(key_id)
        if last is not None and now - last < self._touch_interval:
            return
        self._touched[key_id] = now
        self._touched.move_to_end(key_id)
        if len(self._touched) > _MAX_TOUCHED:
            self._touched.popitem(last=False)
        await self._store.touch_api_key(key_id)


def _principal(context: KeyContext) -> Principal:
    return Principal(
        api_key=context.credential.api_key,
        user=context.user,
        organization=context.organization,
        role=context.role,
    )
