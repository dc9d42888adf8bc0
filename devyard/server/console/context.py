"""What a console page handler uses: the API as the browser, the signed-in viewer, the
checked form, and ``render``.

- ``api()``: the in-process public API (`inprocess`), as the browser's session.
- ``await viewer()``: who is signed in (``GET /whoami`` through the API), or
  :class:`SignInRequired`, which the app turns into a redirect to the sign-in page.
- ``await checked_form()``: the posted form, after its ``csrf`` field matched the session's
  CSRF token (else :class:`CsrfRefused`: 403, nothing done). The same token then travels to
  the API in ``X-CSRF-Token`` (``form_csrf()``), which checks it against the session's hash:
  two independent checks, neither skippable by a page.
- ``await render(template, **values)``: the template with the base layout's values (viewer,
  navigation, the CSP nonce, static URLs).
"""

from __future__ import annotations

import hmac
from typing import Any

import attrs
from quart import Response, current_app, g, render_template, request
from werkzeug.datastructures import MultiDict

from ..accounts import sessions
from .assets import StaticFiles
from .inprocess import ApiFailure, InProcessApi

__all__ = [
    "ConsoleState",
    "CsrfRefused",
    "SignInRequired",
    "Viewer",
    "api",
    "checked_form",
    "console",
    "form_csrf",
    "redirect_to",
    "render",
    "viewer",
]

_KEY = "devyard_console"


@attrs.frozen
class ConsoleState:
    api: InProcessApi
    static: StaticFiles
    nav: tuple[Any, ...]  # pages.NavEntry, in menu order


class SignInRequired(Exception):
    """No valid session: the page redirects to sign in and back."""


class CsrfRefused(Exception):
    """A form post without the session's CSRF token: refused before anything is done."""


@attrs.frozen
class Viewer:
    """The signed-in user as ``GET /whoami`` tells it."""

    user_id: str
    user_name: str
    email: str | None
    org_id: str
    org_name: str
    role: str
    session_id: str | None
    key_prefix: str  # ``dy_<lookup>`` of the API key behind the session
    csrf: str = attrs.field(repr=False)  # the session's CSRF token, for the page's forms

    @property
    def admin(self) -> bool:
        return self.role == "admin"

    @property
    def can_control(self) -> bool:
        return self.role in ("admin", "member")


def install(extensions: dict[str, Any], value: ConsoleState) -> None:
    extensions[_KEY] = value


def console() -> ConsoleState:
    found: ConsoleState = current_app.extensions[_KEY]
    return found


def api() -> InProcessApi:
    return console().api


async def viewer() -> Viewer:
    cached = g.get("console_viewer")
    if isinstance(cached, Viewer):
        return cached
    if not request.cookies.get(sessions.SESSION_COOKIE):
        raise SignInRequired
    try:
        who = await api().json("GET", "/whoami")
    except ApiFailure as exc:
        if exc.status == 401:
            raise SignInRequired from None
        raise
    credential = who.get("credential") or {}
    found = Viewer(
        user_id=who["user"]["id"],
        user_name=who["user"]["name"],
        email=who["user"].get("email"),
        org_id=who["organization"]["id"],
        org_name=who["organization"]["name"],
        role=who["role"],
        session_id=credential.get("id") if credential.get("kind") == "session" else None,
        key_prefix=who.get("apiKey", {}).get("prefix", ""),
        csrf=request.cookies.get(sessions.CSRF_COOKIE, ""),
    )
    g.console_viewer = found
    return found


async def checked_form() -> MultiDict[str, str]:
    """The posted form, once its ``csrf`` field equals the session's CSRF cookie."""
    form = await request.form
    presented = form.get("csrf", "")
    expected = request.cookies.get(sessions.CSRF_COOKIE, "")
    if not presented or not expected or not hmac.compare_digest(presented, expected):
        raise CsrfRefused
    g.console_csrf = presented
    return form


def form_csrf() -> str:
    """The CSRF token of the form checked by :func:`checked_form`, for the API call."""
    token = g.get("console_csrf")
    if not isinstance(token, str):
        raise CsrfRefused
    return token


def redirect_to(location: str, status: int = 303) -> Response:
    """A redirect to a path of this server (never a URL taken from the request)."""
    return Response("", status=status, headers={"Location": location})


async def render(template: str, **values: Any) -> str:
    who = g.get("console_viewer")
    return await render_template(template, viewer=who, **values)
