"""The control API's error vocabulary, and the one place that turns errors into responses.

Every error response of the API is the ``APIError`` JSON shape ``{"message": str, "reason"?: str}``
(docs/api.md lists the reasons). Handlers and hooks *raise* one of the classes below; they never
build an error response themselves. :func:`install_error_handlers` maps them, the framework's own
HTTP exceptions (unknown route, wrong method, body too large) and any unexpected exception onto
that shape:

    APIError                    status  reason (default)
    ├── BadRequest                 400  invalid_request     schema-level: JSON, types, enums, ranges
    ├── Unauthorized               401  unauthenticated     missing, malformed or unknown API key
    ├── Forbidden                  403  forbidden           the key's role or read-only flag
    ├── NotFound                   404  not_found           absent, or in another organization
    ├── MethodNotAllowed           405  method_not_allowed
    ├── Conflict                   409  conflict
    ├── PayloadTooLarge            413  payload_too_large
    ├── Unprocessable              422  unprocessable       well-formed but semantically rejected
    ├── PaymentRequired            402  payment_required    unpaid: no new instances (billing)
    ├── OverPlanLimit              429  plan_limit_reached  more at once than the plan allows
    ├── RateLimited                429  rate_limited        carries Retry-After
    ├── InternalError              500  internal_error
    ├── Unavailable                503  unavailable         carries Retry-After when known
    └── InsufficientStorage        507  insufficient_storage  the blob store is full
"""

from __future__ import annotations

import logging
import math
from typing import ClassVar, Final

from quart import Quart, Response, jsonify, request
from werkzeug.exceptions import HTTPException

from ..blobs import BlobStoreError, BlobStoreFull
from ..hosts import TunnelRejected, TunnelRejection
from ..store import errors as store_errors

log = logging.getLogger(__name__)

__all__ = [
    "APIError",
    "BadRequest",
    "Conflict",
    "Forbidden",
    "InsufficientStorage",
    "InternalError",
    "MethodNotAllowed",
    "NotFound",
    "OverPlanLimit",
    "PayloadTooLarge",
    "PaymentRequired",
    "RateLimited",
    "RetryableConflict",
    "Unauthorized",
    "Unavailable",
    "Unprocessable",
    "from_blob_error",
    "from_store_error",
    "from_tunnel_rejected",
    "install_error_handlers",
]


class APIError(Exception):
    """An error that the API answers with its status and the APIError JSON body."""

    status: ClassVar[int] = 500
    default_reason: ClassVar[str] = "internal_error"

    def __init__(self, message: str, *, reason: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.reason = reason if reason is not None else self.default_reason

    def headers(self) -> dict[str, str]:
        """Extra response headers this error carries."""
        return {}

    def body(self) -> dict[str, str]:
        return {"message": self.message, "reason": self.reason}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r}, reason={self.reason!r})"


class BadRequest(APIError):
    status = 400
    default_reason = "invalid_request"


class Unauthorized(APIError):
    status = 401
    default_reason = "unauthenticated"

    def headers(self) -> dict[str, str]:
        return {"WWW-Authenticate": 'Bearer realm="devyard"'}


class Forbidden(APIError):
    status = 403
    default_reason = "forbidden"


class NotFound(APIError):
    status = 404
    default_reason = "not_found"


class MethodNotAllowed(APIError):
    status = 405
    default_reason = "method_not_allowed"

    def __init__(self, message: str, *, allowed: frozenset[str] = frozenset()) -> None:
        super().__init__(message)
        self.allowed = allowed

    def headers(self) -> dict[str, str]:
        return {"Allow": ", ".join(sorted(self.allowed))} if self.allowed else {}


class Conflict(APIError):
    status = 409
    default_reason = "conflict"


class PayloadTooLarge(APIError):
    status = 413
    default_reason = "payload_too_large"


class Unprocessable(APIError):
    status = 422
    default_reason = "unprocessable"


class PaymentRequired(APIError):
    status = 402
    default_reason = "payment_required"


class OverPlanLimit(APIError):
    """More instances at once than the organization's plan allows (docs/billing.md): 429, as
    for any other limit, with no Retry-After (the slot frees when an instance ends)."""

    status = 429
    default_reason = "plan_limit_reached"


class RateLimited(APIError):
    status = 429
    default_reason = "rate_limited"

    def __init__(self, message: str, *, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = retry_after

    def headers(self) -> dict[str, str]:
        # Retry-After is whole seconds; round up so a client that obeys it is never early.
        return {"Retry-After": str(max(1, math.ceil(self.retry_after)))}


class InternalError(APIError):
    status = 500
    default_reason = "internal_error"


class Unavailable(APIError):
    status = 503
    default_reason = "unavailable"

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after

    def headers(self) -> dict[str, str]:
        if self.retry_after is None:
            return {}
        return {"Retry-After": str(max(1, math.ceil(self.retry_after)))}


class InsufficientStorage(APIError):
    status = 507
    default_reason = "insufficient_storage"


# The framework raises werkzeug HTTPExceptions for what happens before a handler runs.
_FROM_HTTP: Final[dict[int, type[APIError]]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    413: PayloadTooLarge,
    422: Unprocessable,
    429: RateLimited,
    503: Unavailable,
}


def _from_http_exception(exc: HTTPException) -> APIError:
    code = exc.code or 500
    if code == 404:
        return NotFound(f"no such path: {request.path}", reason="no_route")
    if code == 405:
        allowed = frozenset(getattr(exc, "valid_methods", None) or ())
        return MethodNotAllowed(f"method {request.method} is not allowed here", allowed=allowed)
    if code == 413:
        return PayloadTooLarge("request body is too large")
    if code == 429:
        return RateLimited("too many requests", retry_after=1.0)
    cls = _FROM_HTTP.get(code)
    if cls is None:
        return InternalError("internal error") if code >= 500 else BadRequest("bad request")
    return cls(exc.description or exc.name)


def from_store_error(exc: store_errors.StoreError) -> APIError:
    """The API's answer to a store error that no handler translated more precisely."""
    if isinstance(exc, store_errors.NotFound):
        return NotFound(str(exc))
    if isinstance(exc, store_errors.Conflict):
        return Conflict(str(exc))
    if isinstance(exc, store_errors.OrganizationDeleting):
        return Conflict(str(exc), reason="organization_deleting")
    if isinstance(exc, store_errors.InvalidValue):
        return Unprocessable(str(exc))
    if isinstance(exc, store_errors.StoreUnavailable):
        return Unavailable("the database is unavailable; retry later", retry_after=1.0)
    return InternalError("internal error")


class RetryableConflict(Conflict):
    """409 with ``Retry-After``: the server is fine, what the client asked for is not there
    yet (a full fleet, an offline tunnel)."""

    def headers(self) -> dict[str, str]:
        return {"Retry-After": "2"}


# Spec 4.1 rule 3: a missing tunnel names it (404); an offline one is a retryable 409, like a
# full fleet (with Retry-After); a tunnel the platform cannot use is 422.
_TUNNEL_REJECTED: Final[dict[TunnelRejection, tuple[type[APIError], str]]] = {
    TunnelRejection.UNSUPPORTED: (Unprocessable, "tunnel_unsupported"),
    TunnelRejection.INVALID_NAME: (Unprocessable, "invalid_body"),
    TunnelRejection.NOT_FOUND: (NotFound, "tunnel_not_found"),
    TunnelRejection.SELECTORS: (Unprocessable, "tunnel_selectors"),
    TunnelRejection.OFFLINE: (RetryableConflict, "tunnel_offline"),
}


def from_tunnel_rejected(exc: TunnelRejected) -> APIError:
    cls, reason = _TUNNEL_REJECTED[exc.reason]
    return cls(exc.message, reason=reason)


def from_blob_error(exc: BlobStoreError) -> APIError:
    """The API's answer to a blob-store failure: full is 507, anything else 503."""
    if isinstance(exc, BlobStoreFull):
        return InsufficientStorage("no room left in the blob store")
    return Unavailable("the blob store is unavailable; retry later", retry_after=5.0)


def _respond(error: APIError) -> Response:
    response = jsonify(error.body())
    response.status_code = error.status
    for name, value in error.headers().items():
        response.headers[name] = value
    return response


def install_error_handlers(app: Quart) -> None:
    """Make every error of *app* an APIError JSON response: the one place they are built."""

    @app.errorhandler(APIError)
    async def _api_error(error: APIError) -> Response:
        return _respond(error)

    @app.errorhandler(HTTPException)
    async def _http_exception(error: HTTPException) -> Response:
        return _respond(_from_http_exception(error))

    @app.errorhandler(store_errors.StoreError)
    async def _store_error(error: store_errors.StoreError) -> Response:
        api_error = from_store_error(error)
        if isinstance(api_error, (InternalError, Unavailable)):
            log.error("store error in %s %s: %r", request.method, request.path, error)
        return _respond(api_error)

    @app.errorhandler(BlobStoreError)
    async def _blob_error(error: BlobStoreError) -> Response:
        log.warning("blob store error in %s %s: %s", request.method, request.path, error)
        return _respond(from_blob_error(error))

    @app.errorhandler(Exception)
    async def _unexpected(error: Exception) -> Response:
        # Logged once, here, where it is handled; the client gets no internals.
        log.error("unhandled error in %s %s", request.method, request.path, exc_info=error)
        return _respond(InternalError("internal error"))
