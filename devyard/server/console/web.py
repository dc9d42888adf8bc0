"""The console app: a second Quart-Trio app in the server's process, in front of the API.

``mount(app, state)`` puts :class:`ConsoleRoutes` in front of the API app's ASGI callable:
``/`` and ``/console`` and everything under ``/console/`` go to the console app, every other
request to the API as before (so the API's contract check, pipeline and error shape are
untouched). The console reads and writes only through the API app itself, in-process
(`inprocess`), as the browser's session.

Every console response carries the security headers (`_security_headers`): a strict
Content-Security-Policy with a per-response nonce (no inline script, no eval; scripts are
our files or carry the nonce), frame-ancestors 'none' and X-Frame-Options DENY, no referrer
beyond the origin, nosniff, and ``Cache-Control: no-store`` on pages (they hold the CSRF
token and the user's data).
"""

from __future__ import annotations

import logging
import secrets
from typing import Any, Final
from urllib.parse import quote, urlsplit

from quart import Response, g, request
from quart_trio import QuartTrio
from werkzeug.exceptions import HTTPException

from ..api.context import ApiState, install_state, state
from . import context, pages
from .assets import StaticFiles
from .context import ConsoleState, CsrfRefused, SignInRequired, redirect_to, render
from .inprocess import ApiFailure, InProcessApi

__all__ = ["ConsoleRoutes", "create_console_app", "mount"]

log = logging.getLogger(__name__)

_YEAR: Final = 365 * 24 * 3600


def _is_console(path: str) -> bool:
    return path in ("/", "/console") or path.startswith("/console/")


class ConsoleRoutes:
    """ASGI: console paths to the console app, everything else to the API app."""

    def __init__(self, api: Any, console: Any) -> None:
        self._api = api
        self._console = console

    def __repr__(self) -> str:
        return "<ConsoleRoutes>"

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and _is_console(scope.get("path", "")):
            await self._console(scope, receive, send)
        else:
            await self._api(scope, receive, send)


def mount(app: QuartTrio, state: ApiState) -> None:
    """Serve the console from *app* (the API app), which it calls in-process."""
    inner = app.asgi_app
    console = create_console_app(state, inner)
    app.asgi_app = ConsoleRoutes(inner, console.asgi_app)  # type: ignore[method-assign,assignment]


def create_console_app(state: ApiState, api_asgi: Any) -> QuartTrio:
    app = QuartTrio(__name__, static_folder=None, template_folder="templates")
    app.config.update(
        MAX_CONTENT_LENGTH=1024 * 1024,  # forms only; uploads go straight to signed URLs
        PROVIDE_AUTOMATIC_OPTIONS=False,
        PROPAGATE_EXCEPTIONS=False,
    )
    install_state(app.extensions, state)
    static = StaticFiles()
    context.install(
        app.extensions,
        ConsoleState(api=InProcessApi(api_asgi), static=static, nav=pages.nav_entries()),
    )
    app.jinja_env.globals.update(static_url=static.url)
    app.before_request(_before)
    app.after_request(_security_headers)
    app.context_processor(_layout_values)
    _install_errors(app)

    @app.get("/")
    async def root() -> Response:
        return redirect_to("/console/", 302)

    @app.get("/console")
    async def bare() -> Response:
        return redirect_to("/console/", 302)

    @app.get("/console/static/<path:name>")
    async def static_file(name: str) -> Response:
        found = static.get(name)
        if found is None:
            return Response("not found", 404, content_type="text/plain")
        gz = "gzip" in request.headers.get("Accept-Encoding", "")
        response = Response(found.gzipped if gz else found.body, content_type=found.content_type)
        if gz:
            response.headers["Content-Encoding"] = "gzip"
        response.headers["Vary"] = "Accept-Encoding"
        fresh = request.args.get("v") == found.version
        response.headers["Cache-Control"] = (
            f"public, max-age={_YEAR}, immutable" if fresh else "no-cache"
        )
        return response

    for module in pages.PAGES:
        app.register_blueprint(module.blueprint)
    return app


async def _before() -> None:
    g.csp_nonce = secrets.token_urlsafe(18)


def _frame_sources() -> str:
    """Where the instance page's live view comes from: this origin, and the public URL's
    origin when one is configured (``signedStreamUrl`` is built from it)."""
    public = state().config.public_url
    if public:
        parts = urlsplit(public)
        return f"'self' {parts.scheme}://{parts.netloc}"
    return "'self'"


async def _security_headers(response: Response) -> Response:
    nonce = g.get("csp_nonce", "")
    headers = response.headers
    headers["Content-Security-Policy"] = (
        "default-src 'none'; "
        f"script-src 'self' 'nonce-{nonce}'; "
        "style-src 'self'; "
        "img-src 'self' data:; "
        "connect-src 'self'; "
        f"frame-src {_frame_sources()}; "
        "form-action 'self'; "
        "base-uri 'none'; "
        "frame-ancestors 'none'"
    )
    headers["X-Frame-Options"] = "DENY"
    headers["Referrer-Policy"] = "same-origin"
    headers["X-Content-Type-Options"] = "nosniff"
    headers["Cross-Origin-Opener-Policy"] = "same-origin"
    if "Cache-Control" not in headers:
        headers["Cache-Control"] = "no-store"
    return response


def _layout_values() -> dict[str, Any]:
    return {
        "nav": context.console().nav,
        "csp_nonce": g.get("csp_nonce", ""),
        "current_path": request.path,
    }


def _sign_in_redirect() -> Response:
    target = request.full_path if request.method == "GET" else "/console/"
    target = target.rstrip("?")
    return redirect_to(f"/console/sign-in?next={quote(target, safe='/')}", 303)


def _install_errors(app: QuartTrio) -> None:
    @app.errorhandler(SignInRequired)
    async def sign_in(_: SignInRequired) -> Response:
        if request.headers.get("HX-Request"):
            response = Response("", 200)
            response.headers["HX-Redirect"] = "/console/sign-in"
            return response
        return _sign_in_redirect()

    @app.errorhandler(CsrfRefused)
    async def csrf(_: CsrfRefused) -> tuple[str, int]:
        message = (
            "This form was refused: it did not carry this session's CSRF token. "
            "Reload the page and try again."
        )
        return await render("console/error.html", status=403, message=message), 403

    @app.errorhandler(ApiFailure)
    async def api_failure(exc: ApiFailure) -> Response | tuple[str, int]:
        if exc.status == 401:
            return _sign_in_redirect()
        status = exc.status if 400 <= exc.status < 600 else 502
        return await render("console/error.html", status=status, message=exc.message), status

    @app.errorhandler(HTTPException)
    async def http_error(exc: HTTPException) -> tuple[str, int]:
        status = exc.code or 500
        message = {404: "There is no such page.", 405: "This page does not take that method."}
        text = message.get(status, exc.description or "The request was refused.")
        return await render("console/error.html", status=status, message=text), status

    @app.errorhandler(Exception)
    async def unexpected(exc: Exception) -> tuple[str, int]:
        log.exception("console page failed", exc_info=exc)
        message = "Something went wrong on the server; the error was logged."
        return await render("console/error.html", status=500, message=message), 500
