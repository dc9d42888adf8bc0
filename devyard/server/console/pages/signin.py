"""Sign in (an API key pasted once, or single sign-on), sign out, switch organization.

- Pasting a key: the console posts it to ``POST /sessions`` in-process, hands the browser
  the two cookies the API set (``devyard_session``, HttpOnly; ``devyard_csrf``) and forgets
  the key: it is never rendered back, logged or stored by the console. The sign-in form is
  itself protected against login CSRF (an attacker signing a victim into the attacker's
  organization): a random ``devyard_console_login`` cookie (HttpOnly, SameSite=Strict,
  Path=/console) must equal the form's hidden field.
- Single sign-on: ``/console/sso/<organizationId>`` redirects to the API's
  ``/auth/oidc/<id>/start`` with ``returnTo=/console/signed-in``. The session cookie is
  SameSite=Strict, so on the provider's cross-site redirect chain the browser may not send
  it yet; ``/console/signed-in`` then answers a page that reloads itself once (a meta
  refresh: a same-site navigation, which carries the cookie).
- Switching organization: a key and its sessions belong to one organization. The page lists
  the user's organizations (``GET /users/{name}/memberships``); another one is entered by its
  single sign-on or by pasting one of its keys, which replaces the session (the previous one
  is revoked when the console can: a key sign-in with a live previous session).
- Sign out revokes the session (``DELETE /organizations/{id}/sessions/{id}``) and clears the
  cookies, even when the API no longer knows the session.
"""

from __future__ import annotations

import hmac
import re
import secrets
from typing import Final
from urllib.parse import quote

from quart import Blueprint, Response, request

from ...accounts import sessions
from ..context import SignInRequired, api, checked_form, form_csrf, redirect_to, render, viewer
from ..inprocess import ApiFailure, failure

__all__ = ["NAV", "blueprint", "revoke_previous_session", "safe_next"]

blueprint = Blueprint("signin", __name__)
NAV = None  # the header's account menu links here; not a menu entry of its own

LOGIN_COOKIE: Final = "devyard_console_login"
_HOME: Final = "/console/instances/"
# A local path of the console: no scheme, no //host, no backslash (no open redirect).
_LOCAL: Final = re.compile(r"/console/[^\\\s]*")
_ORG_ID: Final = re.compile(r"[A-Za-z0-9_-]{1,100}")


def safe_next(value: str | None) -> str:
    if value and _LOCAL.fullmatch(value) and not value.startswith("//"):
        return value
    return _HOME


def _clear_session_cookies(response: Response) -> None:
    for name in (sessions.SESSION_COOKIE, sessions.CSRF_COOKIE):
        response.delete_cookie(name, path="/", samesite="Strict")


@blueprint.get("/console/")
async def home() -> Response:
    await viewer()
    return redirect_to(_HOME, 302)


async def _sign_in_page(error: str | None = None, status: int = 200) -> Response:
    login = secrets.token_urlsafe(24)
    body = await render(
        "console/signin.html",
        login_token=login,
        next=safe_next(request.args.get("next")),
        error=error,
    )
    response = Response(body, status, content_type="text/html; charset=utf-8")
    response.set_cookie(
        LOGIN_COOKIE,
        login,
        max_age=3600,
        path="/console",
        httponly=True,
        samesite="Strict",
        secure=request.scheme == "https",
    )
    return response


@blueprint.get("/console/sign-in")
async def sign_in_form() -> Response:
    return await _sign_in_page()


@blueprint.post("/console/sign-in")
async def sign_in() -> Response:
    form = await request.form
    presented = form.get("login", "")
    expected = request.cookies.get(LOGIN_COOKIE, "")
    if not presented or not expected or not hmac.compare_digest(presented, expected):
        return await _sign_in_page(
            "The sign-in form expired or came from another site. Try again.", 403
        )
    key = form.get("apiKey", "").strip()
    if not key:
        return await _sign_in_page("Paste an API key to sign in.", 400)
    answer = await api().call("POST", "/sessions", authorization=f"Bearer {key}")
    del key  # never rendered, logged nor kept
    if answer.status >= 400:
        refused = failure(answer)
        message = refused.message
        if refused.status == 401:
            message = "This API key is not valid (revoked, mistyped, or of another server)."
        return await _sign_in_page(message, refused.status)
    await revoke_previous_session()
    response = redirect_to(safe_next(form.get("next")), 303)
    for header in answer.set_cookies():
        response.headers.add("Set-Cookie", header)
    response.delete_cookie(LOGIN_COOKIE, path="/console")
    return response


async def revoke_previous_session() -> None:
    """Switching with a key: end the browser's previous session, if it is still live."""
    try:
        previous = await viewer()
    except (SignInRequired, ApiFailure):
        return
    if previous.session_id is None or not previous.csrf:
        return
    await api().call(
        "DELETE",
        f"/organizations/{previous.org_id}/sessions/{previous.session_id}",
        csrf=previous.csrf,
    )


@blueprint.get("/console/sso")
async def sso_by_form() -> Response | str:
    org = request.args.get("organization", "").strip()
    if not _ORG_ID.fullmatch(org):
        return await _sign_in_page("Enter your organization's id (it starts with org_).", 400)
    # Not a redirect: the CSP's form-action 'self' would refuse the provider at the end of
    # a redirect chain started by this form; a meta refresh is a plain navigation.
    return await render("console/reload.html", target=f"/console/sso/{org}")


@blueprint.get("/console/sso/<organization_id>")
async def sso(organization_id: str) -> Response:
    if not _ORG_ID.fullmatch(organization_id):
        return await _sign_in_page("That is not an organization id.", 400)
    back = quote("/console/signed-in", safe="/")
    return redirect_to(f"/auth/oidc/{organization_id}/start?returnTo={back}", 303)


@blueprint.get("/console/signed-in")
async def signed_in() -> Response | str:
    """Where single sign-on lands. Without the cookie yet, reload once as a same-site
    navigation (which the SameSite=Strict cookie follows)."""
    try:
        await viewer()
    except SignInRequired:
        if request.args.get("again"):
            return await _sign_in_page("Single sign-on did not complete; try again.", 401)
        return await render("console/reload.html", target="/console/signed-in?again=1")
    return redirect_to(_HOME, 303)


@blueprint.post("/console/sign-out")
async def sign_out() -> Response:
    await checked_form()
    try:
        who = await viewer()
    except SignInRequired:
        who = None
    if who is not None and who.session_id is not None:
        await api().call(
            "DELETE", f"/organizations/{who.org_id}/sessions/{who.session_id}", csrf=form_csrf()
        )
    response = redirect_to("/console/sign-in", 303)
    _clear_session_cookies(response)
    return response


@blueprint.get("/console/organizations")
async def organizations() -> str:
    who = await viewer()
    found = await api().json("GET", f"/users/{quote(who.user_name, safe='')}/memberships")
    return await render("console/organizations.html", organizations=found)
