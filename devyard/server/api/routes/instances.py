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

from ....core.build_network import BuildNetworkError
from ... import viewing
from ...billing.provider import BillingError
from ...blobs import InitialAssetError, InitialAssetProblem
from ...hosts import TunnelRejected
from ...instances import (
    DurationTooLong,
    InvalidDuration,
    NewInstance,
    NoCapacity,
    UnknownPlacement,
)
from ...instances.placement import ModelNotAllowed, check_model
from ...instances.requests import FieldNotAllowed
from ...instances.sandbox_spec import (
    SandboxSpecError,
    check_build_network,
    check_sandbox_spec,
    playwright_android_enabled,
    xcode_sandbox_enabled,
)
from ...store import errors as store_errors
from ...store.base import Instance, InstanceState, Platform, Role
from .._errors import (
    APIError,
    BadRequest,
    NotFound,
    OverPlanLimit,
    PaymentRequired,
    RetryableConflict,
    Unprocessable,
    from_tunnel_rejected,
)
from ..auth import Principal, role_at_least
from ..context import body, bool_param, int_param, principal, state, str_param
from ..views import base_url, timestamp
from .compat import bare_list_client

__all__ = ["blueprint", "instance_view"]

blueprint = Blueprint("instances", __name__)

MAX_PAGE: Final = 500
MAX_WAIT: Final = 270.0  # under the 5-minute default timeout of the spec's clients
WAIT_MARGIN: Final = 5.0  # answer this long before the client's announced timeout
# Seconds the client will wait, as the generated SDKs announce it: the Python SDK sends its
# read timeout (``x-stainless-read-timeout: 300.0``), the TypeScript SDK ``X-Stainless-Timeout``.
_UNKNOWN_STATE: Final = "unknown"
_TIMEOUT_HEADERS: Final = ("X-Stainless-Read-Timeout", "X-Stainless-Timeout")
# Platforms whose instances have a screen stream (spec 2.1: streamToken, signedStreamUrl).
_STREAMED: Final = frozenset({Platform.IOS, Platform.ANDROID})


def _can_control(caller: Principal) -> bool:
    return not caller.read_only and role_at_least(caller.role, Role.MEMBER)


def _viewer_lookup(caller: Principal) -> str:
    """The lookup id of the credential the caller presented (its scoped token, else its API
    key): what a view token is made for, and dies with."""
    if caller.scoped_token is not None:
        return caller.scoped_token.lookup_id
    return caller.api_key.lookup_id


def _stream_credential(instance: Instance, *, control: bool, viewer: str | None) -> str | None:
    """What ``signedStreamUrl`` embeds: the stream token for a caller that can control the
    instance, else a view token made for its credential *viewer*, else nothing."""
    if not instance.stream_token:
        return None
    if control:
        return instance.stream_token
    return None if viewer is None else viewing.view_token(instance.stream_token, viewer)


def _urls(instance: Instance, base: str, credential: str | None) -> dict[str, str]:
    http = f"{base}/v1/instances/{instance.id}"
    ws = "ws" + http.removeprefix("http")
    urls = {"apiUrl": f"{http}/api"}
    if instance.platform in _STREAMED:
        urls["endpointWebSocketUrl"] = f"{ws}/endpoint"
        if credential is not None:
            urls["signedStreamUrl"] = f"{http}/watch?token={credential}"
        urls["mcpUrl"] = f"{http}/mcp"  # server.mcp: the organization API key (spec 5)
        # {prefix}{port}/{path}: HTTP and WebSocket to a device port (docs/ports.md)
        urls["targetHttpPortUrlPrefix"] = f"{http}/ports/"
    if instance.platform is Platform.ANDROID:
        urls["adbWebSocketUrl"] = f"{ws}/adb"
    return urls


def _sandbox_urls(instance: Instance, base: str) -> dict[str, Any]:
    """``status.sandbox``: the CDP endpoint of the instance's browser (docs/sandbox.md), the
    Xcode build sandbox of an iOS instance (docs/xcode.md)."""
    if instance.platform is Platform.ANDROID and playwright_android_enabled(instance.spec):
        ws = "ws" + base.removeprefix("http")
        return {"playwrightAndroid": {"url": f"{ws}/v1/instances/{instance.id}/cdp"}}
    if instance.platform is Platform.IOS and xcode_sandbox_enabled(instance.spec):
        # the instance's apiUrl + /xcode: the build API of its sandbox (docs/xcode.md)
        return {"xcode": {"url": f"{base}/v1/instances/{instance.id}/api/xcode"}}
    return {}


def instance_view(
    instance: Instance, *, base_url: str, show_tokens: bool, viewer: str | None = None
) -> dict[str, Any]:
    """The instance as the API shows it. *show_tokens*: the caller can control the instance
    (spec 2.1 ``token``), so it sees ``token``, ``streamToken`` and a ``signedStreamUrl`` that
    drives the device; otherwise *viewer*, the lookup id of the caller's credential, makes
    ``signedStreamUrl`` carry a view token (docs/security.md, "The stream-token model")."""
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
    if instance.created_by is not None:
        metadata["createdBy"] = instance.created_by
    status: dict[str, Any] = {"state": instance.state.value}
    if instance.error_message is not None:
        status["errorMessage"] = instance.error_message
    if instance.termination_reason is not None:
        status["terminationReason"] = instance.termination_reason.value
    if show_tokens and instance.live and instance.token is not None:
        status["token"] = instance.token
        if instance.platform in _STREAMED:
            status["streamToken"] = instance.stream_token
    if instance.state is InstanceState.READY:
        credential = _stream_credential(instance, control=show_tokens, viewer=viewer)
        status.update(_urls(instance, base_url, credential))
        if sandbox := _sandbox_urls(instance, base_url):
            status["sandbox"] = sandbox
    # The spec as stored, plus the region that handles it (the SDKs' models require
    # ``spec.region``: the pinned region, or where placement put the instance).
    spec = {**instance.spec, "region": instance.region}
    # ``id`` also at the top: the SDKs' list pages take the next cursor from ``item.id``.
    return {"id": instance.id, "metadata": metadata, "spec": spec, "status": status}


def _view(caller: Principal, instance: Instance, base: str) -> dict[str, Any]:
    return instance_view(
        instance,
        base_url=base,
        show_tokens=_can_control(caller),
        viewer=_viewer_lookup(caller),
    )


def _respond(caller: Principal, instance: Instance) -> Response:
    return jsonify(_view(caller, instance, base_url()))


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
        return await state().instances.get(caller.org_id, platform, instance_id)
    except store_errors.NotFound:
        raise NotFound(f"instance {instance_id!r} not found") from None


async def _initial_assets(org_id: str, platform: Platform, spec: dict[str, Any]) -> tuple[Any, ...]:
    try:
        return await state().assets.resolve_initial_assets(
            org_id, platform.value, spec, base_url=base_url()
        )
    except InitialAssetError as exc:
        raise _INITIAL_ASSET_ERRORS[exc.problem](exc.message) from exc


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
        created_by=caller.user_id,
        initial_assets=await _initial_assets(caller.org_id, _platform(), data.get("spec", {})),
    )
    service = state().instances
    try:
        check_build_network(new.spec)
    except BuildNetworkError as exc:
        raise BadRequest(f"spec.buildNetwork: {exc}", reason="invalid_body") from exc
    try:
        check_sandbox_spec(new.platform.value, new.spec)
        check_model(
            new.platform.value,
            new.spec.get("model"),
            iphone_duo_enabled=caller.organization.settings.iphone_duo_enabled,
        )
        plan = await state().billing.plan_for_create(caller.org_id)  # docs/billing.md
        instance = await service.create(
            caller.organization,
            new,
            reuse=bool_param("reuseIfExists"),
            max_live=plan.limit(new.platform.value),
        )
    except BillingError as exc:
        raise PaymentRequired(exc.message, reason=exc.reason.value) from exc
    except store_errors.LimitReached as exc:
        raise OverPlanLimit(
            f"the {plan.name} plan ({plan.tid}) allows {exc.limit} {exc.platform} instances at"
            " once: delete one, or move to a plan with more (GET /organizations/{id}/plans)"
        ) from exc
    except DurationTooLong as exc:
        raise Unprocessable(str(exc), reason="duration_too_long") from exc
    except InvalidDuration as exc:
        raise BadRequest(str(exc), reason="invalid_body") from exc
    except UnknownPlacement as exc:
        raise Unprocessable(str(exc), reason="unknown_region") from exc
    except ModelNotAllowed as exc:
        raise Unprocessable(str(exc), reason="model_not_allowed") from exc
    except SandboxSpecError as exc:
        raise Unprocessable(str(exc), reason="sandbox_not_supported") from exc
    except FieldNotAllowed as exc:
        raise Unprocessable(str(exc), reason="field_not_allowed") from exc
    except TunnelRejected as exc:
        raise from_tunnel_rejected(exc) from exc
    except NoCapacity as exc:
        # 409, not 503: the server is fine, the fleet is full (clients retry 409 with backoff,
        # at least Retry-After).
        raise RetryableConflict(str(exc), reason="no_capacity") from exc
    if bool_param("wait") and instance.live and instance.state is not InstanceState.READY:
        with trio.move_on_after(_wait_budget()):
            await service.wait_ready(instance.id)
        instance = await service.get(caller.org_id, instance.platform, instance.id)
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
    limit = min(MAX_PAGE, int_param("limit"))
    states_text = str_param("state")
    # ``unknown`` is a state the SDKs may filter on; no stored instance is ever in it.
    states = (
        frozenset(InstanceState(s) for s in states_text.split(",") if s != _UNKNOWN_STATE)
        if states_text
        else None
    )
    after, before = str_param("startingAfter"), str_param("endingBefore")
    found = (
        []
        if states is not None and not states
        else await state().instances.list(
            caller.org_id,
            _platform(),
            labels=_selector(str_param("labelSelector")),
            states=states,
            region=str_param("region"),
            limit=limit + 1,
            starting_after=after,
            ending_before=before,
        )
    )
    has_more = len(found) > limit
    if has_more:
        found = found[1:] if before is not None and after is None else found[:limit]
    base = base_url()
    items = [_view(caller, i, base) for i in found]
    if bare_list_client():
        return jsonify(items)  # the TypeScript SDK and ``lim`` read a bare array
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


_INITIAL_ASSET_ERRORS: Final[dict[InitialAssetProblem, type[APIError]]] = {
    InitialAssetProblem.MISSING_FIELD: BadRequest,
    InitialAssetProblem.NOT_FOUND: NotFound,
    InitialAssetProblem.NO_BYTES: Unprocessable,
    InitialAssetProblem.WRONG_PLATFORM: Unprocessable,
    InitialAssetProblem.NOT_INSTALLABLE: Unprocessable,
}
