"""Build logs: ``GET /v1/{xcode,gradle}_instances/{id}/build_logs`` (each exec of the instance
with status, exit code, times, artifacts and a signed ``downloadUrl``; readable after the
instance ended) and the signed download ``GET /v1/build_logs/{id}/{execId}/log`` (plain
text, no credential but the signature). docs/builds.md; the service is `server.builds`.
"""

from __future__ import annotations

from typing import Any

from quart import Blueprint, Response, jsonify, request

from ...artifact_urls import artifact_url
from ...blobs.base import BlobNotFound
from ...blobs.settings import sibling_store
from ...blobs.signing import BadSignature, ExpiredSignature
from ...builds import BUILD_LOGS_DIR, BuildLogs
from ...store import errors as store_errors
from ...store.base import Platform, Role
from ...store.build_logs import SqlBuildLogs
from .._errors import APIError, Forbidden, NotFound
from ..auth import role_at_least
from ..context import principal, state
from ..views import base_url

__all__ = ["blueprint"]

blueprint = Blueprint("build_logs", __name__)


class _NoBuildLogs(APIError):
    status = 501
    default_reason = "not_implemented"


def _service() -> BuildLogs:
    api = state()
    if not isinstance(api.store, SqlBuildLogs):
        raise _NoBuildLogs("this server's store keeps no build logs")
    blobs = sibling_store(api.assets.blobs, BUILD_LOGS_DIR)  # the configured backend
    return BuildLogs(
        api.store, api.store, blobs, api.assets.signer, wall_clock=api.assets.wall_clock
    )


async def list_build_logs(id: str) -> Response:
    caller = principal()
    rule = request.url_rule
    assert rule is not None
    platform = Platform(rule.rule.removeprefix("/v1/").partition("_")[0])
    try:
        instance = await state().instances.get(caller.org_id, platform, id)
    except store_errors.NotFound:
        raise NotFound(f"instance {id!r} not found") from None
    service = _service()
    records = await service.logs.list_build_logs(caller.org_id, instance.id)
    base = base_url()
    items: list[dict[str, Any]] = [service.view(base, r) for r in records]
    controls = not caller.read_only and role_at_least(caller.role, Role.MEMBER)
    if controls and instance.live and instance.token is not None:
        api_url = f"{base}/v1/instances/{instance.id}/api"  # as the instance's apiUrl
        for item in items:  # what was not uploaded as an asset: a signed URL while it lives
            for artifact in item.get("artifacts", []):
                if "assetId" not in artifact and isinstance(artifact.get("path"), str):
                    artifact["downloadUrl"] = artifact_url(
                        api_url, instance.token, instance.id, item["id"], artifact["path"]
                    )
    return jsonify(items)


async def download_build_log(instance_id: str, exec_id: str) -> Response:
    service = _service()
    query = {k: v for k, v in request.args.items()}
    try:
        service.verify(instance_id, exec_id, query)
    except (BadSignature, ExpiredSignature) as exc:
        raise Forbidden(str(exc), reason="bad_signature") from None
    try:
        chunks = await service.read(instance_id, exec_id)
        first = await anext(chunks, b"")
    except (store_errors.NotFound, BlobNotFound):
        raise NotFound(f"no build log {instance_id}/{exec_id}") from None

    async def body() -> Any:
        yield first
        async for chunk in chunks:
            yield chunk

    return Response(body(), mimetype="text/plain", headers={"Cache-Control": "no-store"})


for _platform in (Platform.XCODE, Platform.GRADLE):
    blueprint.add_url_rule(
        f"/v1/{_platform.value}_instances/<id>/build_logs",
        f"list_{_platform.value}_build_logs",
        list_build_logs,
        methods=["GET"],
    )
blueprint.add_url_rule(
    "/v1/build_logs/<instance_id>/<exec_id>/log",
    "download_build_log",
    download_build_log,
    methods=["GET"],
)
