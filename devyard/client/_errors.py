"""Errors of the devyard client: one class per kind of failure a caller acts on.

DevyardError
├── TransportError          the server could not be reached (after retries)
├── ResponseError           the server answered something that is not the API's
└── APIError                the server answered an APIError; .status .message .reason
    ├── BadRequestError          400
    ├── AuthenticationError      401
    ├── PermissionDeniedError    403
    ├── NotFoundError            404
    ├── ConflictError            409
    ├── UnprocessableError       422
    ├── RateLimitError           429  .retry_after (seconds, when the server said)
    └── ServerError              5xx
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "APIError",
    "AuthenticationError",
    "BadRequestError",
    "ConflictError",
    "DevyardError",
    "NotFoundError",
    "PermissionDeniedError",
    "RateLimitError",
    "ResponseError",
    "ServerError",
    "TransportError",
    "UnprocessableError",
    "error_for_status",
]


class DevyardError(Exception):
    """Base of every error the client raises."""


class TransportError(DevyardError):
    """The request did not get an HTTP answer: connection refused, reset, DNS..."""


class ResponseError(DevyardError):
    """The answer was not what the API promises (not JSON, wrong shape)."""


class APIError(DevyardError):
    """The server refused the request with an APIError body."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        reason: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.reason = reason
        self.retry_after = retry_after

    def __str__(self) -> str:
        return f"{self.message} (HTTP {self.status})"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.status}, {self.message!r}, reason={self.reason!r})"


class BadRequestError(APIError):
    pass


class AuthenticationError(APIError):
    pass


class PermissionDeniedError(APIError):
    pass


class NotFoundError(APIError):
    pass


class ConflictError(APIError):
    pass


class UnprocessableError(APIError):
    pass


class RateLimitError(APIError):
    pass


class ServerError(APIError):
    pass


_BY_STATUS: Final[dict[int, type[APIError]]] = {
    400: BadRequestError,
    401: AuthenticationError,
    403: PermissionDeniedError,
    404: NotFoundError,
    409: ConflictError,
    422: UnprocessableError,
    429: RateLimitError,
}


def error_for_status(
    status: int, message: str, *, reason: str | None = None, retry_after: float | None = None
) -> APIError:
    cls = _BY_STATUS.get(status) or (ServerError if status >= 500 else APIError)
    return cls(status, message, reason=reason, retry_after=retry_after)
