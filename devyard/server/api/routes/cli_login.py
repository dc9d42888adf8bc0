"""Browser login for command-line tools: ``lim login`` (the commercial service's CLI) and
``devyard login`` get a new API key after a signed-in person approves (docs/compatibility.md).

    POST /authn/cli/sessions                 {hostname?, cliVersion?}  (no key)
        -> {sessionId, secret, phrase, verificationUrl, pollIntervalSeconds, expiresAt}
    GET  /authn/cli?session=<sessionId>      the approval page (plain HTML)
    POST /authn/cli/sessions/{id}/approve    by a browser session (cookie + X-CSRF-Token) or
                                             an API key pasted once into the page (Bearer)
    GET  /authn/cli/sessions/{id}/token?secret=...
        -> 202 while pending, 200 {apiKey} exactly once, 410 once expired or collected

The tool prints the phrase and opens the page; the person checks the phrase and approves;
the tool's next poll receives a NEW key of the approver's user in the approver's organization
(read-only keys and scoped tokens cannot approve). The key is minted at that poll and is
never in a URL.
Requests live in memory for `TTL` seconds, at most `MAX_PENDING` at once, and are kept by the
hash of their id and secret, not the values; each is approved once and collected once.
"""

from __future__ import annotations

import hashlib
import html
import secrets
from datetime import UTC, datetime, timedelta
from typing import Final

import attrs
import trio
from quart import Blueprint, Response, current_app, jsonify

from ...store import tokens
from .._errors import APIError, Conflict, Forbidden, NotFound, Unavailable
from ..context import principal, request_input, state, str_param
from ..views import base_url, timestamp

__all__ = ["MAX_PENDING", "TTL", "blueprint"]

blueprint = Blueprint("cli_login", __name__)

TTL: Final = 600.0  # seconds a request may wait for approval and collection (lim waits 300)
MAX_PENDING: Final = 1024
POLL_SECONDS: Final = 1
_EXTENSION: Final = "devyard_cli_login"
_WORDS: Final = (
    "amber", "basil", "cedar", "delta", "ember", "fjord", "grove", "harbor", "iris", "juniper",
    "kestrel", "lagoon", "maple", "nectar", "orchid", "pebble", "quartz", "raven", "sierra",
    "tundra", "umber", "violet", "willow", "yarrow", "zephyr", "birch", "coral", "dune",
)  # fmt: skip


class Gone(APIError):
    """The login request expired or its key was already collected."""

    status = 410
    default_reason = "login_request_gone"


@attrs.define
class _Request:
    secret_hash: str
    phrase: str
    hostname: str
    expires: float  # trio clock
    expires_at: str  # RFC 3339, for people
    approver: tuple[str, str, bool] | None = None  # (organization, user, read-only)


@attrs.define
class _Requests:
    by_hash: dict[str, _Request] = attrs.field(factory=dict)

    def purge(self, now: float) -> None:
        for key in [k for k, r in self.by_hash.items() if r.expires <= now]:
            del self.by_hash[key]


def _requests() -> _Requests:
    found = current_app.extensions.get(_EXTENSION)
    if not isinstance(found, _Requests):
        found = current_app.extensions[_EXTENSION] = _Requests()
    return found


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def _lookup(session_id: str) -> _Request:
    """The live request *session_id* names; 410 once it expired or was collected."""
    now = trio.current_time()
    pending = _requests()
    pending.purge(now)
    found = pending.by_hash.get(_digest(session_id))
    if found is None:
        raise Gone("this login request expired or was already used: start the login again")
    return found


@blueprint.post("/authn/cli/sessions")
async def create_login_request() -> Response:
    given = request_input().body
    data = given if isinstance(given, dict) else {}
    pending = _requests()
    now = trio.current_time()
    pending.purge(now)
    if len(pending.by_hash) >= MAX_PENDING:
        raise Unavailable("too many login requests are waiting: retry shortly", retry_after=10)
    session_id = "clr_" + secrets.token_urlsafe(18)
    secret = secrets.token_urlsafe(32)
    phrase = "-".join(secrets.choice(_WORDS) for _ in range(3))
    expires_at = timestamp(datetime.now(UTC) + timedelta(seconds=TTL))
    pending.by_hash[_digest(session_id)] = _Request(
        secret_hash=_digest(secret),
        phrase=phrase,
        hostname=str(data.get("hostname") or "an unnamed computer")[:100],
        expires=now + TTL,
        expires_at=expires_at,
    )
    return jsonify(
        {
            "sessionId": session_id,
            "secret": secret,
            "phrase": phrase,
            "verificationUrl": f"{base_url()}/authn/cli?session={session_id}",
            "pollIntervalSeconds": POLL_SECONDS,
            "expiresAt": expires_at,
        }
    )


@blueprint.get("/authn/cli/sessions/<sessionId>/token")
async def collect_key(sessionId: str) -> Response:
    found = _lookup(sessionId)
    secret = str_param("secret") or ""
    if not secrets.compare_digest(_digest(secret), found.secret_hash):
        raise NotFound("no login request with this id and secret")
    if found.approver is None:
        response = jsonify({"message": "waiting for approval in the browser"})
        response.status_code = 202
        return response
    del _requests().by_hash[_digest(sessionId)]  # collected once
    org_id, user_id, read_only = found.approver
    secret_key = tokens.new_api_key()
    await state().store.create_api_key(
        org_id=org_id,
        user_id=user_id,
        name=f"cli login on {found.hostname}"[:100],
        lookup_id=secret_key.lookup_id,
        secret_hash=secret_key.secret_hash,
        read_only=read_only,
    )
    return jsonify({"apiKey": secret_key.plaintext})


@blueprint.post("/authn/cli/sessions/<sessionId>/approve")
async def approve(sessionId: str) -> Response:
    caller = principal()
    if caller.scopes is not None:
        raise Forbidden("a scoped token cannot approve a login: use an API key or a session")
    found = _lookup(sessionId)
    if found.approver is not None:
        raise Conflict("this login request was already approved")
    found.approver = (caller.org_id, caller.user_id, caller.api_key.read_only)
    return jsonify({"message": f"approved: {found.hostname} gets a new API key"})


@blueprint.get("/authn/cli")
async def approval_page() -> Response:
    session_id = str_param("session") or ""
    try:
        found: _Request | None = _lookup(session_id)
    except Gone:
        found = None
    nonce = secrets.token_urlsafe(16)
    page = _PAGE if found is not None else _GONE_PAGE
    text = page.format(
        nonce=nonce,
        session=html.escape(session_id),
        session_js=session_id,  # a live request's id: letters, digits, "_" and "-" only
        phrase=html.escape(found.phrase if found else ""),
        hostname=html.escape(found.hostname if found else ""),
    )
    response = Response(text, content_type="text/html; charset=utf-8")
    response.headers["Content-Security-Policy"] = (
        f"default-src 'none'; script-src 'nonce-{nonce}'; style-src 'nonce-{nonce}';"
        " connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
    )
    response.headers["X-Frame-Options"] = "DENY"
    response.headers["Referrer-Policy"] = "no-referrer"
    response.headers["Cache-Control"] = "no-store"
    return response


_GONE_PAGE: Final = """<!doctype html><html><head><meta charset="utf-8">
<title>devyard: login request</title></head><body>
<h1>This login request expired or was already used</h1>
<p>Start the login again in your terminal.</p></body></html>
"""

_PAGE: Final = """<!doctype html><html><head><meta charset="utf-8">
<title>devyard: approve a command-line login</title>
<style nonce="{nonce}">body {{ font-family: sans-serif; max-width: 40em; margin: 3em auto; }}
code {{ font-size: 1.3em; }}</style></head><body>
<h1>Approve a command-line login</h1>
<p>A command-line tool on <b>{hostname}</b> asks for a new API key of your account.</p>
<p>Approve only if your terminal shows this phrase: <code>{phrase}</code></p>
<p><label>API key (only if this browser is not signed in to devyard; it is sent once and not
stored here): <input id="key" type="password" autocomplete="off"></label></p>
<p><button id="approve">Approve</button></p>
<p id="result" role="status"></p>
<script nonce="{nonce}">
document.getElementById("approve").addEventListener("click", async () => {{
  const headers = {{"Content-Type": "application/json"}};
  const key = document.getElementById("key").value.trim();
  if (key) {{
    headers["Authorization"] = "Bearer " + key;
  }} else {{
    const csrf = document.cookie.split("; ").find((c) => c.startsWith("devyard_csrf="));
    if (csrf) headers["X-CSRF-Token"] = decodeURIComponent(csrf.split("=")[1]);
  }}
  const answer = await fetch("/authn/cli/sessions/" + encodeURIComponent("{session_js}")
    + "/approve", {{method: "POST", headers, body: "{{}}", credentials: "same-origin"}});
  const data = await answer.json().catch(() => ({{}}));
  document.getElementById("result").textContent = answer.ok
    ? "Approved. You can close this page and return to your terminal."
    : "Not approved: " + (data.message || answer.status);
}});
</script></body></html>
"""
