"""The request pipeline: every request passes here, in this order, before its handler.

1. operation   the OpenAPI operation of the matched route (none: the route is undocumented,
               which ``create_app`` refuses at start-up, so this is a 500 by construction);
2. identity    the API key, when the operation takes one (401 when required and missing);
               without an Authorization header, a browser session's cookie, which must
               bring its CSRF token to anything but a read (403 ``csrf``);
3. rate limit  per key; anonymous requests only when they write (429 with Retry-After);
4. scope       an ``organizationId`` in the path must be the key's organization (404);
5. permission  a scoped token only what its scopes open (``x-devyard-scope``); read-only
               keys read; the role is at least ``x-devyard-role`` (403);
6. input       path and query parameters and the JSON body against the document (400);
               a path or query that is not UTF-8 once percent-decoded, or holds a NUL, is
               400 before anything.

Scope comes before permission so that a viewer probing another organization's ids learns
nothing (404, never 403), and identity comes before input so that an anonymous caller cannot
probe the validation rules of protected operations.
"""

from __future__ import annotations

from urllib.parse import unquote_to_bytes

from quart import g, request

from .. import metrics
from ..accounts import sessions
from ._errors import BadRequest, InternalError, NotFound, RateLimited
from .auth import Principal, authorize, require_csrf
from .context import RequestInput, state
from .requestlog import mark_route

__all__ = ["before_request"]


async def before_request() -> None:
    api = state()
    _check_target()
    rule = request.url_rule
    if rule is None:
        # Routing failed; the framework raises its 404/405 after this hook.
        return
    operation = api.contract.operation(request.method, rule.rule)
    if operation is None:
        raise InternalError(f"{request.method} {rule.rule} is not in the OpenAPI document")
    mark_route(request.scope, operation.template)  # the access log's and metrics' route label

    caller: Principal | None = None
    authorization = request.headers.get("Authorization")
    # A browser session's cookie counts only without an Authorization header, and only for
    # operations that require a caller (docs/accounts.md).
    cookie = None if authorization else request.cookies.get(sessions.SESSION_COOKIE)
    if cookie and operation.auth == "required":
        caller = await api.authenticator.authenticate_session(cookie)
        if not operation.safe:
            require_csrf(caller, request.headers.get(sessions.CSRF_HEADER))
    elif operation.auth == "required" or (operation.auth == "optional" and authorization):
        caller = await api.authenticator.authenticate(authorization)

    if caller is not None and api.key_limiter is not None:
        _spend(api.key_limiter.acquire(caller.api_key.id), "this API key")
    elif caller is None and not operation.safe and api.client_limiter is not None:
        _spend(api.client_limiter.acquire(request.remote_addr or "unknown"), "this client")

    path_args = {k: str(v) for k, v in (request.view_args or {}).items()}
    if caller is not None:
        organization_id = path_args.get("organizationId")
        if organization_id is not None and organization_id != caller.org_id:
            raise NotFound(f"organization {organization_id!r} not found")
        if operation.role is not None or caller.scopes is not None:
            authorize(
                caller,
                least=operation.role,
                safe=operation.safe,
                scope=operation.scope,
                path_args=path_args,
                any_token=operation.any_token,
            )

    values = api.contract.parameters(operation, path_args, request.args)
    payload = None
    if operation.body is not None:
        raw = await request.get_data(as_text=False)
        payload = api.contract.body(operation, raw if isinstance(raw, bytes) else raw.encode())
    g.devyard_input = RequestInput(
        operation=operation, principal=caller, params=values, body=payload
    )


def _check_target() -> None:
    """400 for a path or query that is not UTF-8 once percent-decoded (``%ED%A0%80``, a lone
    surrogate): the framework would silently turn it into U+FFFD and look up something else;
    and for one holding a NUL (``%00``), which PostgreSQL refuses in text where SQLite takes it:
    the same 400 on both backends rather than a driver error."""
    scope = request.scope
    for part, what in ((scope.get("raw_path"), "path"), (scope.get("query_string"), "query")):
        if not part:
            continue
        try:
            decoded = unquote_to_bytes(bytes(part)).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise BadRequest(
                f"the {what} is not UTF-8 once percent-decoded", reason="invalid_parameter"
            ) from exc
        if "\x00" in decoded:  # no name or value of ours holds one; PostgreSQL text cannot
            raise BadRequest(f"the {what} holds a NUL character (%00)", reason="invalid_parameter")


def _spend(wait: float, whose: str) -> None:
    if wait > 0:
        metrics.RATE_LIMITED.labels("key" if "key" in whose else "client").inc()
        raise RateLimited(f"rate limit of {whose} exceeded; retry later", retry_after=wait)
