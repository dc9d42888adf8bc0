"""The four instance collections, ``/v1/{ios,android,xcode,gradle}_instances``: create (with
``wait`` and ``reuseIfExists``), list, get, delete. One set of handlers serves all four; the
platform comes from the path. The lifecycle itself is `devyard.server.instances`; this module
only translates HTTP to the `InstanceService` and its errors to APIErrors.
"""

from __future__ import annotations

import math
from typing import Any, Final

import trio
from quart import Blueprint, Response, jsonify, request

from ...hosts import TunnelRejected
from ...instances import (
    DurationTooLong,
    InvalidDuration,
    NewInstance,
    NoCapacity,
    UnknownPlacement,
)
from ...instances.placement import ModelNotAllowed, check_model
from ...store import errors as store_errors
from ...store.base import Instance, InstanceState, Platform, Role
from .._errors import (
    BadRequest,
    Conflict,
    NotFound,
    Unprocessable,
    from_tunnel_rejected,
)
from ..auth import Principal, role_at_least
from ..context import body, params, principal, state
from ..views import timestamp
from .assets import resolve_initial_assets

__all__ = ["blueprint", "instance_view"]

blueprint = Blueprint("instances", __name__)

MAX_PAGE: Final = 500
MAX_WAIT: Final = 270.0  # under the 5-minute default timeout of the spec's clients
WAIT_MARGIN: Final = 5.0  # answer this long before the client's announced timeout
# Seconds the client will wait, as the generated SDKs announce it: the Python SDK sends its
# read timeout (``x-stainless-read-timeout: 300.0``), the TypeScript SDK ``X-Stainless-Timeout``.
_UNKNOWN_STATE: Final = "unknown"
_TIMEOUT_HEADERS: Final = ("X-Stainless-Read-Timeout", "X-Stainless-Timeout")


def _can_control(caller: Principal) -> bool:
    return not caller.read_only and role_at_least(caller.role, Role.MEMBER)


def _urls(instance: Instance, base: str) -> dict[str, str]:
    http = f"{base}/v1/instances/{instance.id}"
    ws = "ws" + http.removeprefix("http")
    urls = {"apiUrl": f"{http}/api"}
    if instance.platform in (Platform.IOS, Platform.ANDROID):
        urls["endpointWebSocketUrl"] = f"{ws}/endpoint"
        urls["signedStreamUrl"] = f"{http}/watch?token={instance.stream_token}"
        urls["mcpUrl"] = f"{http}/mcp"
        urls["targetHttpPortUrlPrefix"] = f"{http}/ports/"
    if instance.platform is Platform.ANDROID:
        urls["adbWebSocketUrl"] = f"{ws}/adb"
    return urls


def instance_view(instance: Instance, *, base_url: str, show_tokens: bool) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "id": instance.id,
        "organizationId": instance.org_id,
        "createdAt": timestamp(instance.created_at),
        "labels": instance.labels,
    }
    if instance.terminated_at is not None:
        metadata["terminatedAt"] = timestamp(instance.terminated_at)
    if instance.display_name is not None:
        metadata["displayName"] = instance.display_name
    status: dict[str, Any] = {"state": instance.state.value}
    if instance.error_message is not None:
        status["errorMessage"] = instance.error_message
    if instance.termination_reason is not None:
        status["terminationReason"] = instance.termination_reason.value
    if show_tokens and instance.live and instance.token is not None:
        status["token"] = instance.token
        status["streamToken"] = instance.stream_token
    if instance.state is InstanceState.READY:
        status.update(_urls(instance, base_url))
    # The spec as stored, plus the region that handles it (the SDKs' models require
    # ``spec.region``: the pinned region, or where placement put the instance).
    spec = {**instance.spec, "region": instance.region}
    # ``id`` also at the top: the SDKs' list pages take the next cursor from ``item.id``.
    return {"id": instance.id, "metadata": metadata, "spec": spec, "status": status}


def _base_url() -> str:
    public = state().config.public_url
    return public.rstrip("/") if public is not None else request.host_url.rstrip("/")


def _respond(caller: Principal, instance: Instance) -> Response:
    return jsonify(instance_view(instance, base_url=_base_url(), show_tokens=_can_control(caller)))


def _platform() -> Platform:
    rule = request.url_rule
    assert rule is not None
    return Platform(rule.rule.removeprefix("/v1/").partition("_")[0])


def _wait_budget() -> float:
    """Seconds a ``wait=true`` create may wait: under the shortest announced client timeout."""
    seconds = math.inf
    for name in _TIMEOUT_HEADERS:
        announced = request.headers.get(name)
        try:
            value = float(announced) if announced is not None else math.inf
        except ValueError:
            value = math.inf
        if math.isfinite(value):
            seconds = min(seconds, value)
    return max(0.0, min(MAX_WAIT, seconds - WAIT_MARGIN))


async def _visible(caller: Principal, platform: Platform, instance_id: str) -> Instance:
    try:
        instance = await state().instances.store.get_instance(instance_id, org_id=caller.org_id)
    except store_errors.NotFound:
        instance = None
    if instance is None or instance.platform is not platform:
        raise NotFound(f"instance {instance_id!r} not found")
    return instance


async def create_instance() -> Response:
    caller = principal()
    data = body()
    metadata = data.get("metadata", {})
    new = NewInstance(
        platform=_platform(),
        labels=dict(metadata.get("labels", {})),
        display_name=metadata.get("displayName"),
        spec=dict(data.get("spec", {})),
        client_ip=request.remote_addr,
        initial_assets=await resolve_initial_assets(
            caller.org_id, _platform().value, data.get("spec", {})
        ),
    )
    service = state().instances
    try:
        check_model(
            new.platform.value,
            new.spec.get("model"),
            iphone_duo_enabled=caller.organization.settings.iphone_duo_enabled,
        )
        instance = await service.create(
            caller.organization, new, reuse=bool(params()["reuseIfExists"])
        )
    except DurationTooLong as exc:
        raise Unprocessable(str(exc), reason="duration_too_long") from exc
    except InvalidDuration as exc:
        raise BadRequest(str(exc), reason="invalid_body") from exc
    except UnknownPlacement as exc:
        raise Unprocessable(str(exc), reason="unknown_region") from exc
    except ModelNotAllowed as exc:
        raise Unprocessable(str(exc), reason="model_not_allowed") from exc
    except TunnelRejected as exc:
        raise from_tunnel_rejected(exc) from exc
    except NoCapacity as exc:
        # 409, not 503: the server is fine, the fleet is full (clients retry 409 with backoff).
        raise Conflict(str(exc), reason="no_capacity") from exc
    if params()["wait"] and instance.live and instance.state is not InstanceState.READY:
        with trio.move_on_after(_wait_budget()):
            await service.wait_ready(instance.id)
        instance = await service.store.get_instance(instance.id)
    return _respond(caller, instance)


def _selector(text: str | None) -> dict[str, str]:
    if not text:
        return {}
    labels: dict[str, str] = {}
    for pair in text.split(","):
        key, _, value = pair.partition("=")  # the document's pattern guarantees k=v pairs
        labels[key] = value
    return labels


async def list_instances() -> Response:
    caller = principal()
    query = params()
    limit = min(MAX_PAGE, int(query["limit"]))  # type: ignore[call-overload]
    states_text = query.get("state")
    # ``unknown`` is a state the SDKs may filter on; no stored instance is ever in it.
    states = (
        frozenset(InstanceState(s) for s in str(states_text).split(",") if s != _UNKNOWN_STATE)
        if states_text
        else None
    )
    after, before = query.get("startingAfter"), query.get("endingBefore")
    region = query.get("region")
    found = (
        []
        if states is not None and not states
        else await state().instances.store.list_instances(
            caller.org_id,
            _platform(),
            labels=_selector(query.get("labelSelector")),  # type: ignore[arg-type]
            states=states,
            region=None if region is None else str(region),
            limit=limit + 1,
            starting_after=None if after is None else str(after),
            ending_before=None if before is None else str(before),
        )
    )
    has_more = len(found) > limit
    if has_more:
        found = found[1:] if before is not None and after is None else found[:limit]
    base, show = _base_url(), _can_control(caller)
    items = [instance_view(i, base_url=base, show_tokens=show) for i in found]
    return jsonify({"items": items, "hasMore": has_more})


async def get_instance(id: str) -> Response:
    caller = principal()
    return _respond(caller, await _visible(caller, _platform(), id))


async def delete_instance(id: str) -> Response:
    caller = principal()
    instance = await _visible(caller, _platform(), id)
    ended = await state().instances.delete(caller.org_id, instance.id)
    return _respond(caller, ended)


for _platform_value in Platform:
    _path = f"/v1/{_platform_value.value}_instances"
    _name = _platform_value.value
    blueprint.add_url_rule(_path, f"create_{_name}", create_instance, methods=["POST"])
    blueprint.add_url_rule(_path, f"list_{_name}", list_instances, methods=["GET"])
    blueprint.add_url_rule(f"{_path}/<id>", f"get_{_name}", get_instance, methods=["GET"])
    blueprint.add_url_rule(f"{_path}/<id>", f"delete_{_name}", delete_instance, methods=["DELETE"])
