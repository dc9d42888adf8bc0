"""What a handler may read: the app's shared state and the request's checked inputs.

The request pipeline (``pipeline.py``) fills a :class:`RequestInput` before any handler runs;
handlers read it through the accessors below and never touch ``request.args`` or the raw body,
so they only see input the OpenAPI document allows.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
from quart import current_app, g

from ..config import ServerConfig
from ..instances import InstanceService
from ..store.base import Store
from ._errors import InternalError, NotFound
from .auth import Authenticator, Principal
from .contract import Contract, Operation
from .ratelimit import KeyedRateLimiter

__all__ = [
    "ApiState",
    "Plan",
    "RequestInput",
    "body",
    "params",
    "principal",
    "request_input",
    "same_organization",
    "state",
]

_STATE_KEY = "devyard"


@attrs.frozen
class Plan:
    tid: str
    name: str
    description: str


@attrs.frozen
class ApiState:
    """Everything the handlers share, built once by ``create_app``."""

    store: Store
    config: ServerConfig
    contract: Contract
    authenticator: Authenticator
    key_limiter: KeyedRateLimiter | None  # per API key; None when rate limiting is off
    client_limiter: KeyedRateLimiter | None  # per client address, anonymous writes only
    plans: Mapping[str, Plan]
    instances: InstanceService


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


def params() -> Mapping[str, object]:
    return request_input().params


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
