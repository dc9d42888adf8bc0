"""An organization's single sign-on (spec 4.4, docs/accounts.md): the connection
(``GET/PUT/DELETE .../oidcConnection``, admins only) and the sign-in flow
(``GET /auth/oidc/{organizationId}/start`` then ``GET /auth/oidc/callback``, anonymous: the
browser has no credential yet).

The client secret is write-only: ``PUT`` seals it (`accounts.secretbox`, AES-GCM with the
data directory's key and the organization id as associated data) and no answer shows it,
only ``clientSecretSet``. A ``PUT`` without ``clientSecret`` keeps the stored one; ``null``
removes it (a public client, PKCE only). ``allowedDomains`` names the email domains whose
users may sign in through this provider; one takes effect only while the organization has it
verified (``verifiedDomains`` in the answer). The relying party itself (discovery, keys,
id-token validation) is `accounts.oidc`.
"""

from __future__ import annotations

import re
import secrets
from urllib.parse import urlencode, urlsplit

from quart import Blueprint, Response, current_app, jsonify, request

from ....core.pinning import AddressPolicy
from ...accounts import sessions
from ...accounts.oidc import IdToken, OidcClient, OidcError, OidcFailure, s256_challenge
from ...accounts.secretbox import SecretBoxError, load_secret_box
from ...store import errors as store_errors
from ...store.accounts import DomainStatus, OidcConnection
from ...store.base import Role
from ...store.sso import SsoJoin
from ...store.tokens import hash_secret, new_api_key, verify_secret
from .._errors import APIError, BadRequest, Conflict, Forbidden, NotFound, Unavailable
from ..context import body, same_organization, state, str_param
from ..views import base_url, timestamp
from .audit import record
from .domains import normalize_domain
from .sessions import secure_request, set_session_cookies

__all__ = ["blueprint"]

blueprint = Blueprint("oidc", __name__)

_LOOPBACK = frozenset({"localhost", "127.0.0.1", "::1"})


def _issuer(text: str) -> str:
    """An https URL (http only on loopback, for development), without query or fragment."""
    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018 - raises for a port out of range
    except ValueError:
        raise BadRequest("issuer: not a URL", reason="invalid_issuer") from None
    plain_ok = parts.scheme == "http" and (parts.hostname or "") in _LOOPBACK
    if not (parts.scheme == "https" or plain_ok) or not parts.hostname:
        raise BadRequest("issuer: an https:// URL", reason="invalid_issuer")
    if parts.query or parts.fragment or parts.username or parts.password:
        raise BadRequest("issuer: no query, fragment or credentials", reason="invalid_issuer")
    return text.rstrip("/")


async def _view(connection: OidcConnection) -> dict[str, object]:
    domains = await state().store.list_domains(connection.org_id)
    verified = {d.domain for d in domains if d.status is DomainStatus.VERIFIED}
    return {
        "issuer": connection.issuer,
        "clientId": connection.client_id,
        "clientSecretSet": connection.secret_sealed is not None,
        "allowedDomains": list(connection.allowed_domains),
        "verifiedDomains": [d for d in connection.allowed_domains if d in verified],
        "defaultRole": str(connection.default_role),
        "createdAt": timestamp(connection.created_at),
        "updatedAt": timestamp(connection.updated_at),
    }


async def _connection(org_id: str) -> OidcConnection:
    try:
        return await state().store.get_oidc_connection(org_id)
    except store_errors.NotFound:
        raise NotFound("this organization has no OIDC connection") from None


@blueprint.get("/organizations/<organizationId>/oidcConnection")
async def get_oidc_connection(organizationId: str) -> Response:
    caller = same_organization(organizationId)
    return jsonify(await _view(await _connection(caller.org_id)))


@blueprint.put("/organizations/<organizationId>/oidcConnection")
async def put_oidc_connection(organizationId: str) -> Response:
    caller = same_organization(organizationId)
    api = state()
    data = body()
    issuer = _issuer(str(data["issuer"]))
    keep = "clientSecret" not in data
    sealed = None
    if not keep and data["clientSecret"] is not None:
        box = await load_secret_box(api.config.data_dir)
        sealed = box.seal(str(data["clientSecret"]), context=caller.org_id)
    domains = tuple(sorted({normalize_domain(d) for d in data.get("allowedDomains", [])}))
    connection = await api.store.put_oidc_connection(
        caller.org_id,
        issuer=issuer,
        client_id=str(data["clientId"]),
        allowed_domains=domains,
        default_role=Role(data.get("defaultRole", Role.MEMBER)),
        secret_sealed=sealed,
        keep_secret=keep,
    )
    await record(
        caller,
        "oidc_connection_set",
        subject=issuer,
        detail={"clientId": connection.client_id, "secretChanged": not keep},
    )
    return jsonify(await _view(connection))


@blueprint.delete("/organizations/<organizationId>/oidcConnection")
async def delete_oidc_connection(organizationId: str) -> Response:
    caller = same_organization(organizationId)
    try:
        await state().store.delete_oidc_connection(caller.org_id)
    except store_errors.NotFound:
        raise NotFound("this organization has no OIDC connection") from None
    await record(caller, "oidc_connection_deleted")
    return jsonify({"success": True})


# -- the sign-in flow (docs/accounts.md) ------------------------------------------------------

BROWSER_COOKIE = "devyard_oidc"
_BROWSER_PATH = "/auth/oidc"
_CLIENT_KEY = "devyard_oidc_client"


def _client() -> OidcClient:
    """The server's relying party (its discovery and key caches), made on first use."""
    extensions = current_app.extensions
    client = extensions.get(_CLIENT_KEY)
    if not isinstance(client, OidcClient):
        accounts = state().config.accounts
        client = OidcClient(
            timeout_s=accounts.oidc_timeout_s,
            addresses=AddressPolicy.parse(accounts.oidc_allowed_networks),
        )
        extensions[_CLIENT_KEY] = client
    return client


def _return_to(text: str | None) -> str:
    """A path of this server (never another site: an open redirect would hand the session's
    landing page to anyone)."""
    if text is None:
        return "/"
    if not text.startswith("/") or text.startswith("//") or "\\" in text:
        raise BadRequest("returnTo: a path of this server, such as /", reason="invalid_return_to")
    return text


def _provider_error(exc: OidcError) -> APIError:
    if exc.reason is OidcFailure.PROVIDER_UNAVAILABLE:
        return Unavailable(f"the identity provider: {exc}")
    return Forbidden(f"single sign-on refused: {exc}", reason=str(exc.reason))


def _redirect(location: str, status: int) -> Response:
    return Response("", status=status, headers={"Location": location, "Cache-Control": "no-store"})


def _redirect_uri() -> str:
    return f"{base_url()}/auth/oidc/callback"


@blueprint.get("/auth/oidc/<organizationId>/start")
async def start_sign_in(organizationId: str) -> Response:
    """Sends the browser to the organization's identity provider (authorization code with
    PKCE S256 and a nonce); the state is bound to this browser by a cookie."""
    api = state()
    return_to = _return_to(str_param("returnTo"))
    connection = await _connection(organizationId)
    try:
        metadata = await _client().metadata(connection.issuer)
    except OidcError as exc:
        raise _provider_error(exc) from None
    state_value, nonce, verifier, browser = (secrets.token_urlsafe(32) for _ in range(4))
    box = await load_secret_box(api.config.data_dir)
    ttl = api.config.accounts.oidc_login_ttl_s
    await api.store.create_oidc_login(
        org_id=connection.org_id,
        state_hash=hash_secret(state_value),
        browser_hash=hash_secret(browser),
        nonce_hash=hash_secret(nonce),
        verifier_sealed=box.seal(verifier, context=connection.org_id),
        return_to=return_to,
        ttl_s=ttl,
    )
    query = urlencode(
        {
            "response_type": "code",
            "client_id": connection.client_id,
            "redirect_uri": _redirect_uri(),
            "scope": "openid email profile",
            "state": state_value,
            "nonce": nonce,
            "code_challenge": s256_challenge(verifier),
            "code_challenge_method": "S256",
        }
    )
    endpoint = metadata.authorization_endpoint
    response = _redirect(endpoint + ("&" if "?" in endpoint else "?") + query, 302)
    # SameSite=Lax: the provider's redirect back is a cross-site top-level GET, which a
    # Strict cookie would not accompany.
    response.set_cookie(
        BROWSER_COOKIE,
        browser,
        max_age=ttl,
        path=_BROWSER_PATH,
        secure=secure_request(),
        httponly=True,
        samesite="Lax",
    )
    return response


def _user_names(claims: IdToken, email: str) -> tuple[str, ...]:
    """Names to try for a new user: the provider's username, the email's local part, then
    numbered variants, each reduced to the user-name alphabet."""
    bases = [claims.preferred_username or "", email.partition("@")[0]]
    names: list[str] = []
    for base in bases:
        name = re.sub(r"[^A-Za-z0-9._-]", "-", base).strip("-._")[:40]
        if name and name not in names:
            names.append(name)
    if not names:
        names.append("user")
    first = names[0]
    return (*names, *(f"{first}-{n}" for n in range(2, 12)), f"{first}-{secrets.token_hex(4)}")


async def _allowed_email(connection: OidcConnection, claims: IdToken) -> str:
    """The email of a sign-in the organization admits: verified by the provider, in one of
    the connection's allowed domains that the organization has verified. 403 otherwise."""
    if claims.email is None or not claims.email_verified:
        raise Forbidden("the identity provider gave no verified email", reason="email_not_verified")
    email = claims.email.strip().lower()
    domain = email.rpartition("@")[2]
    verified = {
        d.domain
        for d in await state().store.list_domains(connection.org_id)
        if d.status is DomainStatus.VERIFIED
    }
    if domain not in set(connection.allowed_domains) & verified:
        raise Forbidden(
            f"{domain!r} is not a verified domain this organization admits by single sign-on",
            reason="domain_not_allowed",
        )
    return email


@blueprint.get("/auth/oidc/callback")
async def finish_sign_in() -> Response:
    """The provider sends the browser back here: the state (once, from the same browser),
    the code exchanged with the verifier, the id token validated, the nonce compared; then
    the user joins just in time and the browser gets its session cookie."""
    api = state()
    state_value = str_param("state")
    try:
        login = await api.store.consume_oidc_login(hash_secret(state_value or ""))
    except store_errors.NotFound:
        raise NotFound("an unknown, used or expired sign-in", reason="invalid_state") from None
    browser = request.cookies.get(BROWSER_COOKIE)
    if not browser or not verify_secret(browser, login.browser_hash):
        raise Forbidden("this sign-in began in another browser", reason="state_not_bound")
    error, code = str_param("error"), str_param("code")
    if error is not None or code is None:
        shown = error if error is not None and error.isascii() else "no code"
        raise Forbidden(f"the identity provider refused: {shown[:60]}", reason="provider_refused")
    connection = await _connection(login.org_id)
    box = await load_secret_box(api.config.data_dir)
    try:
        secret = (
            None
            if connection.secret_sealed is None
            else box.open(connection.secret_sealed, context=connection.org_id)
        )
        verifier = box.open(login.verifier_sealed, context=login.org_id)
    except SecretBoxError:
        raise Unavailable("the client secret does not open with this server's key") from None
    client = _client()
    try:
        metadata = await client.metadata(connection.issuer)
        id_token = await client.exchange_code(
            metadata,
            code=code,
            redirect_uri=_redirect_uri(),
            verifier=verifier,
            client_id=connection.client_id,
            client_secret=secret,
        )
        claims = await client.validate(metadata, id_token, client_id=connection.client_id)
    except OidcError as exc:
        raise _provider_error(exc) from None
    if not verify_secret(claims.nonce, login.nonce_hash):
        raise Forbidden("single sign-on refused: the nonce is not this sign-in's", reason="nonce")
    email = await _allowed_email(connection, claims)
    key = new_api_key()
    try:
        joined = await api.store.sso_join(
            connection.org_id,
            email=email,
            user_names=_user_names(claims, email),
            role=connection.default_role,
            key_lookup_id=key.lookup_id,
            key_secret_hash=key.secret_hash,
        )
    except store_errors.Conflict:
        raise Conflict("no free user name for this email", reason="taken") from None
    return await _signed_in(login.org_id, login.return_to, joined, claims)


async def _signed_in(org_id: str, return_to: str, joined: SsoJoin, claims: IdToken) -> Response:
    api = state()
    ttl = api.config.accounts.session_ttl_s
    new = sessions.new_session()
    agent = (request.headers.get("User-Agent") or "")[:200] or None
    session = await api.store.create_session(
        org_id=org_id,
        api_key_id=joined.api_key.id,
        lookup_id=new.lookup_id,
        secret_hash=new.secret_hash,
        csrf_hash=new.csrf_hash,
        ttl_s=ttl,
        user_agent=agent,
    )
    user = joined.user
    if joined.joined:
        await record(
            None,
            "member_joined_by_sso",
            org_id=org_id,
            subject=user.id,
            detail={"role": str(joined.role), "userCreated": joined.user_created},
            actor=user.id,
        )
    await record(
        None,
        "sso_sign_in",
        org_id=org_id,
        subject=session.id,
        detail={"subject": claims.subject[:200]},
        actor=user.id,
    )
    response = _redirect(return_to, 303)
    set_session_cookies(response, new, ttl)
    response.delete_cookie(
        BROWSER_COOKIE, path=_BROWSER_PATH, secure=secure_request(), samesite="Lax"
    )
    return response
