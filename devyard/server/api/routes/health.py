"""Health, catalog and feedback (spec 4.2), and the OpenAPI document itself."""

from __future__ import annotations

import logging
from typing import Final

import trio
from quart import Blueprint, Response, jsonify, request

from .... import __version__
from ...accounts.notify import notify_operators
from ...drain import CURRENT, RETRY_AFTER
from ...store import errors as store_errors
from .._errors import Unavailable
from ..context import body, request_input, state
from ..views import base_url

log = logging.getLogger(__name__)

__all__ = ["blueprint"]

blueprint = Blueprint("health", __name__)

_CHECK_TIMEOUT_S: Final = 5.0
#: The checks whose failure makes the server not ready.
_GATES: Final = ("store", "blobs")
#: Paths a draining replica still answers (the probes).
_PROBES: Final = frozenset({"/livez", "/readyz"})


@blueprint.before_app_request
async def refuse_while_draining() -> None:
    """A draining replica takes no new API request (503 ``draining``, ``Retry-After``): a
    load balancer retries it on another replica (docs/operations.md, Several replicas)."""
    drain = CURRENT.get()
    if drain is not None and drain.draining and request.path not in _PROBES:
        refusal = Unavailable(
            "this server is draining: retry, another replica will answer",
            retry_after=RETRY_AFTER,
        )
        refusal.reason = "draining"
        raise refusal


@blueprint.get("/livez")
async def livez() -> dict[str, str]:
    return {"message": "alive"}


async def _store_check() -> str:
    try:
        with trio.fail_after(_CHECK_TIMEOUT_S):
            await state().store.ping()
    except trio.TooSlowError:
        return "timeout"
    except (store_errors.StoreError, trio.ClosedResourceError):
        # unreachable, or closed because the server is shutting down
        return "unavailable"
    return "ok"


async def _blobs_check() -> str:
    """The blob store's probe (the local directory writable, the S3 bucket or PostgreSQL
    reachable), bounded and cached for a few seconds by `AssetBlobs.readiness`."""
    return await state().assets.readiness()


@blueprint.get("/readyz")
async def readyz() -> tuple[Response, int]:
    """What is and is not ready, with the version. The store and the blob store gate
    readiness (500: load balancers take any 5xx as "send traffic elsewhere", spec 4.2); the
    linked hosts are reported, not gated on: a server without hosts still serves the API
    (docs/operations.md). A report, so it is built here rather than raised as an APIError."""
    hosts = state().hosts
    linked = len(hosts.hosts()) if hosts is not None else 0
    checks = {
        "store": await _store_check(),
        "blobs": await _blobs_check(),
        "hosts": f"{linked} linked" if linked else "none linked",
    }
    failed = [f"{name} {checks[name]}" for name in _GATES if checks[name] != "ok"]
    body: dict[str, object] = {"version": __version__, "checks": checks}
    drain = CURRENT.get()
    if drain is not None:  # a served replica: who it is, its links by kind
        counts = drain.link_counts()
        links = {kind: counts.get(kind, 0) for kind in ("host", "connector")}
        body |= {"replica": drain.replica_id, "links": links | counts}
        if drain.draining:
            message = "draining: this replica takes no new links or requests"
            return jsonify({"message": message, "reason": "draining", **body}), 503
    if failed:
        message = "not ready: " + ", ".join(failed)
        if checks["store"] != "ok":
            message += " (the database is unavailable)"
        body = {"message": message, "reason": "not_ready", **body}
        return jsonify(body), 500
    return jsonify({"message": "ready", **body}), 200


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
    api = state()
    feedback = await api.store.add_feedback(
        data["message"],
        email=data.get("email"),
        org_id=caller.org_id if caller is not None else None,
        user_id=caller.user_id if caller is not None else None,
    )
    org_name = caller.organization.name if caller is not None else None
    await notify_operators(api.store, api.config.accounts, feedback, org_name=org_name)
    return "", 200
