"""The Python client of the devyard API and the user-facing CLI commands.

async with AsyncClient("http://127.0.0.1:8080", api_key) as client:   # under trio
    me = await client.whoami()

The client itself (httpx) loads on first use of ``AsyncClient`` and its kin, so the CLI's
argparse declarations under this package import in an install without the [client] extra.
"""

from typing import TYPE_CHECKING

from ._errors import (
    APIError,
    AuthenticationError,
    BadRequestError,
    ConflictError,
    DevyardError,
    NotFoundError,
    PermissionDeniedError,
    RateLimitError,
    ResponseError,
    ServerError,
    TransportError,
    UnprocessableError,
)
from .models import (
    ApiKey,
    CreatedApiKey,
    Member,
    Organization,
    OrganizationSettings,
    Plan,
    Region,
    Role,
    User,
    WhoAmI,
)

if TYPE_CHECKING:
    from .client import DEFAULT_TIMEOUT, UNSET, AsyncClient, RetryPolicy

_FROM_CLIENT = frozenset({"DEFAULT_TIMEOUT", "UNSET", "AsyncClient", "RetryPolicy"})


def __getattr__(name: str) -> object:
    if name in _FROM_CLIENT:
        from . import client  # noqa: PLC0415 - httpx, only for who uses the client

        return getattr(client, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "DEFAULT_TIMEOUT",
    "UNSET",
    "APIError",
    "ApiKey",
    "AsyncClient",
    "AuthenticationError",
    "BadRequestError",
    "ConflictError",
    "CreatedApiKey",
    "DevyardError",
    "Member",
    "NotFoundError",
    "Organization",
    "OrganizationSettings",
    "PermissionDeniedError",
    "Plan",
    "RateLimitError",
    "Region",
    "ResponseError",
    "RetryPolicy",
    "Role",
    "ServerError",
    "TransportError",
    "UnprocessableError",
    "User",
    "WhoAmI",
]
