"""Browser sessions (docs/accounts.md, `accounts.sessions`): ``POST /sessions`` with an API
key in the Authorization header answers with the session cookie (HttpOnly, SameSite=Strict,
Secure over TLS) and its CSRF token; the cookie then acts as that key, with the same rules
(role, read-only, organization). A session cannot make another session: only a key signs in.

Members list and revoke their own sessions; admins every session of the organization; a
session of someone else is 404 to a non-admin, as for API keys. Revoking the session that
makes the request also clears its cookies (sign-out).
"""

from __future__ import annotations

from quart import Blueprint, Response, jsonify, request

from ...accounts import sessions
from ...store import errors as store_errors
from ...store.accounts import BrowserSession
from ...store.base import Role
from .._errors import Forbidden, NotFound
from ..auth import Principal, role_at_least
from ..context import principal, same_organization, state
from ..views import timestamp

__all__ = ["blueprint", "secure_request", "session_view", "set_session_cookies"]

blueprint = Blueprint("sessions", __name__)


def session_view(session: BrowserSession) -> dict[str, object]:
    return {
        "id": session.id,
        "userId": session.user_id,
        "apiKeyId": session.api_key_id,
        "userAgent": session.user_agent,
        "createdAt": timestamp(session.created_at),
        "expiresAt": timestamp(session.expires_at),
    }


def secure_request() -> bool:
    public = state().config.public_url
    return request.scheme == "https" or (public is not None and public.startswith("https:"))


def set_session_cookies(response: Response, new: sessions.NewSession, max_age: int) -> None:
    secure = secure_request()
    response.set_cookie(
        sessions.SESSION_COOKIE,
        new.cookie,
        max_age=max_age,
        path="/",
        secure=secure,
        httponly=True,
        samesite="Strict",
    )
    response.set_cookie(
        sessions.CSRF_COOKIE,
        new.csrf_token,
        max_age=max_age,
        path="/",
        secure=secure,
        httponly=False,  # the page reads it to send X-CSRF-Token
        samesite="Strict",
    )


@blueprint.post("/sessions")
async def create_session() -> Response:
    caller = principal()
    if caller.session is not None:
        raise Forbidden("sign in with an API key, not with a session", reason="session")
    api = state()
    ttl = api.config.accounts.session_ttl_s
    new = sessions.new_session()
    agent = (request.headers.get("User-Agent") or "")[:200] or None
    session = await api.store.create_session(
        org_id=caller.org_id,
        api_key_id=caller.api_key.id,
        lookup_id=new.lookup_id,
        secret_hash=new.secret_hash,
        csrf_hash=new.csrf_hash,
        ttl_s=ttl,
        user_agent=agent,
    )
    response = jsonify({**session_view(session), "csrfToken": new.csrf_token})
    set_session_cookies(response, new, ttl)
    return response


def _is_admin(caller: Principal) -> bool:
    return role_at_least(caller.role, Role.ADMIN)


@blueprint.get("/organizations/<organizationId>/sessions")
async def list_sessions(organizationId: str) -> Response:
    caller = same_organization(organizationId)
    user_id = None if _is_admin(caller) else caller.user_id
    found = await state().store.list_sessions(caller.org_id, user_id=user_id)
    return jsonify([session_view(s) for s in found])


@blueprint.delete("/organizations/<organizationId>/sessions/<sessionId>")
async def revoke_session(organizationId: str, sessionId: str) -> Response:
    caller = same_organization(organizationId)
    store = state().store
    visible = await store.list_sessions(
        caller.org_id, user_id=None if _is_admin(caller) else caller.user_id
    )
    if sessionId not in {s.id for s in visible}:
        raise NotFound(f"session {sessionId!r} not found")
    try:
        await store.revoke_session(caller.org_id, sessionId)
    except store_errors.NotFound:
        raise NotFound(f"session {sessionId!r} not found") from None
    response = jsonify({"success": True})
    if caller.session is not None and caller.session.id == sessionId:
        for name in (sessions.SESSION_COOKIE, sessions.CSRF_COOKIE):
            response.delete_cookie(name, path="/", secure=secure_request(), samesite="Strict")
    return response
