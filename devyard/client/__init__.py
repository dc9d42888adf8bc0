"""The Python client of the devyard API and the user-facing CLI commands.

async with AsyncClient("http://127.0.0.1:8080", api_key) as client:   # trio or asyncio
    me = await client.whoami()
    async for instance in client.iter_instances("android"):   # every page, lazily
        ...

with Client("http://127.0.0.1:8080", api_key) as client:   # blocking, no event loop needed
    tunnels = client.list_tunnels()

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
from .resources import (
    CreatedTunnel,
    Instance,
    InstanceState,
    InstanceStatus,
    InstanceUsage,
    Page,
    Platform,
    Tunnel,
    TunnelConnector,
    UsageBucket,
    UsageTotals,
)

if TYPE_CHECKING:
    from .client import DEFAULT_TIMEOUT, UNSET, AsyncClient, RetryPolicy
    from .device import ExecEvent, InstanceApi, NotReadyError
    from .sync import Client

_FROM_CLIENT = frozenset({"DEFAULT_TIMEOUT", "UNSET", "AsyncClient", "RetryPolicy"})
_FROM_DEVICE = frozenset({"ExecEvent", "InstanceApi", "NotReadyError"})


def __getattr__(name: str) -> object:
    if name in _FROM_CLIENT:
        from . import client  # noqa: PLC0415 - httpx, only for who uses the client

        return getattr(client, name)
    if name in _FROM_DEVICE:
        from . import device  # noqa: PLC0415

        return getattr(device, name)
    if name == "Client":
        from .sync import Client  # noqa: PLC0415 - anyio's portal, only for who uses it

        return Client
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "DEFAULT_TIMEOUT",
    "UNSET",
    "APIError",
    "ApiKey",
    "AsyncClient",
    "AuthenticationError",
    "BadRequestError",
    "Client",
    "ConflictError",
    "CreatedApiKey",
    "CreatedTunnel",
    "DevyardError",
    "ExecEvent",
    "Instance",
    "InstanceApi",
    "InstanceState",
    "InstanceStatus",
    "InstanceUsage",
    "Member",
    "NotFoundError",
    "NotReadyError",
    "Organization",
    "OrganizationSettings",
    "Page",
    "PermissionDeniedError",
    "Plan",
    "Platform",
    "RateLimitError",
    "Region",
    "ResponseError",
    "RetryPolicy",
    "Role",
    "ServerError",
    "TransportError",
    "Tunnel",
    "TunnelConnector",
    "UnprocessableError",
    "UsageBucket",
    "UsageTotals",
    "User",
    "WhoAmI",
]
