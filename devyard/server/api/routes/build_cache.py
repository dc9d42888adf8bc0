"""The organization build cache as Gradle's HTTP build cache speaks it (docs/builds.md):
``GET``/``HEAD``/``PUT /v1/build_cache/{key}``. ``GET`` is 200 and the entry
(``application/vnd.gradle.build-cache-artifact.v1``) or 404; ``PUT`` stores the body (413
past the entry limit). Any API key of the organization reads; a member's writes. Gradle sends
the key as the password of HTTP Basic (`auth.bearer_token` takes it). The service is
`server.build_cache`.

The body of a ``PUT`` is streamed to the blob store, bounded by the cache's entry limit, not
by the API's ``max_body_bytes`` (a Gradle entry is often larger): the app's request class is
widened for this path only (`_widen`).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator
from typing import Any, Final

from quart import Blueprint, Response, request
from quart.blueprints import BlueprintSetupState

from ...blobs.settings import sibling_store
from ...build_cache import (
    CONTENT_TYPE,
    NAMESPACE,
    BadKey,
    BuildCacheService,
    EntryTooLarge,
    check_key,
)
from ...store.build_cache import SqlBuildCache
from .._errors import APIError, BadRequest, NotFound, PayloadTooLarge
from ..context import principal, state

__all__ = ["PREFIX", "blueprint"]

PREFIX: Final = "/v1/build_cache/"
_CEILING: Final = 4 * 1024**3  # the framework's bound on this path; the cache's own is lower

blueprint = Blueprint("build_cache", __name__)


class _NoBuildCache(APIError):
    status = 501
    default_reason = "not_implemented"


def _service() -> BuildCacheService:
    api = state()
    if not isinstance(api.store, SqlBuildCache):
        raise _NoBuildCache("this server's store keeps no build cache")
    blobs = sibling_store(api.assets.blobs, NAMESPACE)  # the configured backend
    return BuildCacheService(
        api.store, api.store, blobs, api.config.build_cache, wall_clock=api.assets.wall_clock
    )


def _key(key: str) -> str:
    try:
        return check_key(key)
    except BadKey as exc:
        raise BadRequest(str(exc), reason="invalid_parameter") from None


async def get_build_cache_entry(key: str) -> Response:
    service = _service()
    org_id = principal().org_id
    if request.method == "HEAD":
        if not await service.has(org_id, _key(key)):
            raise NotFound(f"no build cache entry {key}")
        return Response(b"", content_type=CONTENT_TYPE)
    body = await service.get(org_id, _key(key))
    if body is None:
        raise NotFound(f"no build cache entry {key}")
    return Response(body, content_type=CONTENT_TYPE, headers={"Cache-Control": "no-store"})


async def put_build_cache_entry(key: str) -> Response:
    service = _service()
    org_id = principal().org_id
    _key(key)
    length = request.content_length
    limit = min(service.settings.max_entry, service.settings.max_bytes)
    if length is not None and length > limit:
        raise PayloadTooLarge(f"a build cache entry is at most {limit} bytes")

    async def chunks() -> AsyncGenerator[bytes, None]:
        async for chunk in request.body:
            yield chunk

    try:
        async with contextlib.aclosing(chunks()) as body:  # a refused body's ends here
            size = await service.put(org_id, key, body)
    except EntryTooLarge as exc:
        raise PayloadTooLarge(str(exc)) from None
    return Response(
        f'{{"key": "{key}", "size": {size}}}', status=200, content_type="application/json"
    )


def _widen(setup: BlueprintSetupState) -> None:
    """The app's request class, with this path's bodies bounded by `_CEILING` (the service
    checks the configured entry limit while streaming)."""
    app: Any = setup.app
    base: Any = app.request_class

    def __init__(self: Any, method: str, scheme: str, path: str, *args: Any, **kwargs: Any) -> None:
        if path.startswith(PREFIX):
            kwargs["max_content_length"] = _CEILING
        base.__init__(self, method, scheme, path, *args, **kwargs)

    app.request_class = type("BuildCacheRequest", (base,), {"__init__": __init__})


blueprint.record_once(_widen)
blueprint.add_url_rule(
    "/v1/build_cache/<key>", "get_build_cache_entry", get_build_cache_entry, methods=["GET"]
)
blueprint.add_url_rule(
    "/v1/build_cache/<key>", "put_build_cache_entry", put_build_cache_entry, methods=["PUT"]
)
