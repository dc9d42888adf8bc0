"""Health, catalog and feedback (spec 4.2), and the OpenAPI document itself."""

from __future__ import annotations

import logging

import trio
from quart import Blueprint, Response, jsonify

from ...store import errors as store_errors
from .._errors import InternalError
from ..context import body, request_input, state
from ..views import base_url

log = logging.getLogger(__name__)

__all__ = ["blueprint"]

blueprint = Blueprint("health", __name__)


@blueprint.get("/livez")
async def livez() -> dict[str, str]:
    return {"message": "alive"}


@blueprint.get("/readyz")
async def readyz() -> dict[str, str]:
    try:
        await state().store.ping()
    except (store_errors.StoreError, trio.ClosedResourceError) as exc:
        # Unreachable, or closed because the server is shutting down. The spec's answer is
        # 500 (not 503): load balancers take any 5xx as "send traffic elsewhere".
        raise InternalError("not ready: the database is unavailable", reason="not_ready") from exc
    return {"message": "ready"}


@blueprint.get("/openapi.json")
async def openapi_json() -> Response:
    return jsonify(state().contract.document)


@blueprint.get("/regions")
async def list_regions() -> Response:
    return jsonify([{"name": state().config.region, "url": base_url()}])


@blueprint.post("/feedback")
async def send_feedback() -> tuple[str, int]:
    data = body()
    caller = request_input().principal
    await state().store.add_feedback(
        data["message"],
        email=data.get("email"),
        org_id=caller.org_id if caller is not None else None,
        user_id=caller.user_id if caller is not None else None,
    )
    return "", 200
