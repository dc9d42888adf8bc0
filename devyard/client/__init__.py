"""The Python client of the devyard API and the user-facing CLI commands.

async with AsyncClient("http://127.0.0.1:8080", api_key) as client:   # under trio
    me = await client.whoami()
"""

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
from .client import DEFAULT_TIMEOUT, UNSET, AsyncClient, RetryPolicy
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
