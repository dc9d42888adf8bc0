"""What a handler may read: the app's shared state and the request's checked inputs.

The request pipeline (``pipeline.py``) fills a :class:`RequestInput` before any handler runs;
handlers read it through the typed accessors below (``str_param``, ``int_param``,
``bool_param``, ``body``) and never touch ``request.args`` or the raw body, so they only see
input the OpenAPI document allows. A parameter whose type the document does not guarantee is
an internal error, found by the first test that calls the operation.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
from quart import current_app, g

from ..billing.service import BillingService
from ..blobs import AssetBlobs
from ..config import ServerConfig
from ..hosts import HostRegistry
from ..instances import InstanceService
from ..secret_scanning import KeyRing
from ..store.base import Store
from ..tunnels import TunnelConnections, TunnelService
from ._errors import InternalError, NotFound
from .auth import Authenticator, Principal
from .contract import Contract, Operation
from .ratelimit import KeyedRateLimiter

__all__ = [
    "ApiState",
    "RequestInput",
    "body",
    "bool_param",
    "int_param",
    "principal",
    "request_input",
    "same_organization",
    "state",
    "str_param",
]

_STATE_KEY = "devyard"


@attrs.frozen
class ApiState:
    """Everything the handlers share, built once (``app.api_state``) and handed to
    ``create_app``: the one way a handler reaches a service, the store or the config."""

    store: Store
    config: ServerConfig
    contract: Contract
    authenticator: Authenticator
    key_limiter: KeyedRateLimiter | None  # per API key; None when rate limiting is off
    client_limiter: KeyedRateLimiter | None  # per client address, anonymous writes only
    instances: InstanceService
    tunnels: TunnelService
    assets: AssetBlobs
    key_ring: KeyRing  # the code host's secret-scanning keys, cached across requests
    billing: BillingService  # plans, subscriptions, the payment provider (docs/billing.md)
    hosts: HostRegistry | None = None  # the edge's host links, when the server runs an edge
    connectors: TunnelConnections | None = None  # the edge's connector links, if any


@attrs.frozen
class RequestInput:
    """One request's operation, caller and validated inputs."""

    operation: Operation
    principal: Principal | None
    params: Mapping[str, object]
    body: object


def install_state(app_extensions: dict[str, Any], api_state: ApiState) -> None:
    app_extensions[_STATE_KEY] = api_state


def state() -> ApiState:
    api_state = current_app.extensions[_STATE_KEY]
    assert isinstance(api_state, ApiState)
    return api_state


def request_input() -> RequestInput:
    value = g.get("devyard_input")
    if not isinstance(value, RequestInput):
        raise InternalError("request reached a handler without passing the pipeline")
    return value


def principal() -> Principal:
    """The caller; only for operations that require a key."""
    caller = request_input().principal
    if caller is None:
        raise InternalError("operation has no authenticated caller")
    return caller


def _param(name: str) -> object:
    return request_input().params.get(name)


def str_param(name: str) -> str | None:
    """A string path or query parameter; None when absent without a default."""
    value = _param(name)
    if value is None or isinstance(value, str):
        return value
    raise InternalError(f"parameter {name} is not a string in the document")


def int_param(name: str) -> int:
    """An integer parameter the document requires or gives a default."""
    value = _param(name)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise InternalError(f"parameter {name} is not an integer with a default in the document")


def bool_param(name: str) -> bool:
    """A boolean parameter the document requires or gives a default."""
    value = _param(name)
    if isinstance(value, bool):
        return value
    raise InternalError(f"parameter {name} is not a boolean with a default in the document")


def body() -> dict[str, Any]:
    """The validated JSON object body of the request."""
    value = request_input().body
    if not isinstance(value, dict):
        raise InternalError("operation has no object body")
    return value


def same_organization(organization_id: str) -> Principal:
    """The caller, if *organization_id* is its key's organization; 404 otherwise."""
    caller = principal()
    if organization_id != caller.org_id:
        raise NotFound(f"organization {organization_id!r} not found")
    return caller
