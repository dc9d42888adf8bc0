"""Joining an organization by an invitation's link (``/console/team/join``).

The mailed link is the API's ``/organizations/{id}/invitations/accept?token=`` (the spec's
path of the accept POST); opened in a browser, its GET redirects here with the organization
and the token. This page's GET changes nothing (mail scanners fetch links): it asks the API
what the token would join (``GET .../invitations/preview``) and offers

- to a signed-in user: "Join <organization> as <you> with role <role>?", a form with the
  session's CSRF token (``checked_form``) whose post accepts through the API *as the
  session*: the API takes a session only with its CSRF token in ``X-CSRF-Token``, and applies
  the same binding as for a key (the user's email is the invited one, or in a verified domain
  of the organization; else 403). The answer's first key of the joined organization then
  signs the browser in there (the previous session is revoked, as a key sign-in does), and
  is shown once;
- to anyone: sign in first (and come back here), or join as a *new* user: the API's no-key
  path, with the form's own login-CSRF token (``devyard_console_join`` cookie, HttpOnly,
  SameSite=Strict, like the sign-in form); the new user's first key signs the browser in and
  is shown once.

An unknown, used, revoked or expired token is one message, 404, on the GET as on the posts.
"""

from __future__ import annotations

import hmac
import secrets
from typing import Any, Final
from urllib.parse import quote, urlencode

from quart import Blueprint, Response, request

from ..context import SignInRequired, Viewer, api, checked_form, form_csrf, render, viewer
from ..inprocess import ApiAnswer, ApiFailure, failure
from .signin import revoke_previous_session, safe_next

__all__ = ["NAV", "blueprint"]

blueprint = Blueprint("join", __name__, url_prefix="/console/team")
NAV = None  # reached by the invitation's link only

JOIN_COOKIE: Final = "devyard_console_join"
NOT_OPEN: Final = (
    "This invitation link is not valid: it is unknown, already used, revoked or expired. "
    "Ask for a new invitation."
)


def _invitation_path(organization: str, rest: str) -> str:
    return f"/organizations/{quote(organization, safe='')}/invitations/{rest}"


def _refusal(answer: ApiAnswer) -> ApiFailure:
    refused = failure(answer)
    if refused.status == 404:  # one message for every token that does not open
        return ApiFailure(404, NOT_OPEN, refused.reason)
    return refused


async def _signed_in() -> Viewer | None:
    try:
        return await viewer()
    except SignInRequired:
        return None


async def _member_of(who: Viewer, organization_id: str) -> bool:
    mine = await api().json("GET", f"/users/{quote(who.user_name, safe='')}/memberships")
    return any(org.get("id") == organization_id for org in mine)


async def _page(error: str | None = None, status: int = 200) -> Response:
    """The join page for the link's organization and token (from the query, or the form
    being answered), with *error* shown when a post was refused."""
    args = request.args if request.method == "GET" else await request.form
    organization, token = args.get("organization", ""), args.get("token", "")
    invitation: dict[str, Any] | None = None
    if organization and token:
        answer = await api().call(
            "GET", _invitation_path(organization, "preview"), params={"token": token}
        )
        if answer.status < 400:
            invitation = answer.json()
        elif error is None:
            refused = _refusal(answer)
            error, status = refused.message, refused.status
    elif error is None:
        error, status = NOT_OPEN, 404
    who = await _signed_in()
    member = False
    if invitation is not None and who is not None:
        member = await _member_of(who, str(invitation["organizationId"]))
    back = "/console/team/join?" + urlencode({"organization": organization, "token": token})
    login = secrets.token_urlsafe(24)
    body = await render(
        "console/team/join.html",
        who=who,
        invitation=invitation,
        already_member=member,
        sign_in_url="/console/sign-in?" + urlencode({"next": safe_next(back)}),
        join_token=login,
        organization=organization,
        token=token,
        user_name=args.get("userName", ""),
        error=error,
    )
    response = Response(body, status, content_type="text/html; charset=utf-8")
    response.set_cookie(
        JOIN_COOKIE, login, max_age=3600, path="/console/team/join", httponly=True,
        samesite="Strict", secure=request.scheme == "https",
    )  # fmt: skip
    return response


@blueprint.get("/join")
async def join_form() -> Response:
    return await _page()


async def _welcome(answer: ApiAnswer, organization_name: str | None) -> Response:
    """Sign the browser in with the accept's first key of the joined organization (ending
    its previous session, as a key sign-in does), and show the key this once."""
    key = answer.json()["apiKey"]
    await revoke_previous_session()
    session = await api().call("POST", "/sessions", authorization=f"Bearer {key['key']}")
    body = await render(
        "console/team/joined.html",
        key=key,
        organization_name=organization_name,
        signed_in=session.status < 400,
    )
    response = Response(body, 200, content_type="text/html; charset=utf-8")
    for header in session.set_cookies() if session.status < 400 else ():
        response.headers.add("Set-Cookie", header)
    response.delete_cookie(JOIN_COOKIE, path="/console/team/join")
    return response


async def _organization_name(organization: str, token: str) -> str | None:
    answer = await api().call(
        "GET", _invitation_path(organization, "preview"), params={"token": token}
    )
    return str(answer.json()["organizationName"]) if answer.status < 400 else None


@blueprint.post("/join")
async def join() -> Response:
    """Accept as a new user (the API makes the user and its first key), then sign in."""
    form = await request.form
    presented, expected = form.get("join", ""), request.cookies.get(JOIN_COOKIE, "")
    if not presented or not expected or not hmac.compare_digest(presented, expected):
        return await _page("This form expired or came from another site. Try again.", 403)
    organization, token = form.get("organization", ""), form.get("token", "")
    params = {"token": token}
    if form.get("userName", "").strip():
        params["userName"] = form.get("userName", "").strip()
    name = await _organization_name(organization, token)
    # No Authorization and no CSRF header: the API ignores the browser's session cookie.
    answer = await api().call("POST", _invitation_path(organization, "accept"), params=params)
    if answer.status >= 400:
        refused = _refusal(answer)
        return await _page(refused.message, refused.status)
    return await _welcome(answer, name)


@blueprint.post("/join/accept")
async def accept() -> Response:
    """Accept as the signed-in user: the API call carries the session and the form's CSRF
    token, and binds the invitation to the session's user exactly as it would a key's."""
    form = await checked_form()
    await viewer()
    organization, token = form.get("organization", ""), form.get("token", "")
    name = await _organization_name(organization, token)
    answer = await api().call(
        "POST", _invitation_path(organization, "accept"), params={"token": token},
        csrf=form_csrf(),
    )  # fmt: skip
    if answer.status >= 400:
        refused = _refusal(answer)
        if refused.status == 401:
            raise SignInRequired
        return await _page(refused.message, refused.status)
    return await _welcome(answer, name)
