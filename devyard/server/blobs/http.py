"""The signed-URL endpoint of asset bytes, ``/blobs/<asset id>``, as a framework-free ASGI app.

Why not a Quart route: Quart buffers a request body without backpressure (its ASGI side
appends to a bytearray however slowly the handler reads) and caps it at the API's 1 MiB body
limit. Here each ``receive()`` is awaited only when the blob store is ready for more, so the
server holds at most a few of Hypercorn's chunks plus one write buffer per upload, whatever
the upload's size. These URLs are not API operations (no key, not in ``openapi.yaml``): like
an object store's presigned URLs, they are opaque to clients and the signature is the
permission. Errors are still the API's ``{"message", "reason"}`` JSON.

- ``PUT`` (``op=upload``), ``Content-Type: application/octet-stream``: 200 with
  ``{id, name, md5, size}`` once the bytes are durable; 413 past the size limit.
- ``GET`` / ``HEAD`` (``op=download``): the bytes, ``Content-Length``, ``ETag`` (the md5).
- 403 ``bad_signature`` / ``expired_signature``; 404 for an unknown asset or one with no bytes.
- 507 ``insufficient_storage`` when the blob store is full (disk, quota), 503 ``unavailable``
  (with Retry-After) when it or the database cannot be used: never an empty 500.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncGenerator, Awaitable, Callable, MutableMapping
from contextlib import aclosing
from typing import Any, Final
from urllib.parse import parse_qsl

from ..store import errors as store_errors
from .base import BlobNotFound, BlobStoreFull, BlobStoreUnavailable, BlobTooLarge
from .service import AssetBlobs
from .signing import BLOB_PATH_PREFIX, BadSignature, ExpiredSignature, Operation

__all__ = ["BlobEndpoint", "BlobRoutes", "ClientDisconnected"]

log = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Any, Any, Any], Awaitable[None]]  # loosely typed, as frameworks type theirs

_OCTET_STREAM: Final = "application/octet-stream"
_RETRY_AFTER: Final = [(b"retry-after", b"5")]


class ClientDisconnected(Exception):
    """The client went away before the upload's last byte."""


class _HttpError(Exception):
    def __init__(
        self,
        status: int,
        reason: str,
        message: str,
        headers: list[tuple[bytes, bytes]] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.message = message
        self.headers = headers or []


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return bytes(value).decode("latin-1")
    return None


async def _send_json(
    send: Send, status: int, body: object, extra: list[tuple[bytes, bytes]] | None = None
) -> None:
    data = json.dumps(body).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(data)).encode()),
        *(extra or []),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})


async def _body(receive: Receive) -> AsyncGenerator[bytes, None]:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnected
        yield bytes(message.get("body", b""))
        if not message.get("more_body", False):
            return


class BlobEndpoint:
    """ASGI app of ``/blobs/<asset id>`` (HTTP only)."""

    def __init__(self, assets: AssetBlobs) -> None:
        self.assets = assets

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await self._handle(scope, receive, send)
        except _HttpError as exc:
            await _send_json(
                send, exc.status, {"message": exc.message, "reason": exc.reason}, exc.headers
            )
        except ClientDisconnected:
            log.info("upload to %s interrupted by the client; previous bytes kept", scope["path"])

    async def _handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        asset_id = str(scope["path"]).removeprefix(BLOB_PATH_PREFIX)
        method = scope["method"]
        if method == "PUT":
            op = Operation.UPLOAD
        elif method in ("GET", "HEAD"):
            op = Operation.DOWNLOAD
        else:
            raise _HttpError(
                405,
                "method_not_allowed",
                f"method {method} is not allowed here",
                [(b"allow", b"GET, HEAD, PUT")],
            )
        query = dict(parse_qsl(bytes(scope.get("query_string", b"")).decode("latin-1")))
        try:
            self.assets.verify(op, asset_id, query)
        except ExpiredSignature as exc:
            raise _HttpError(403, "expired_signature", str(exc)) from exc
        except BadSignature as exc:
            raise _HttpError(403, "bad_signature", str(exc)) from exc
        if op is Operation.UPLOAD:
            await self._upload(asset_id, scope, receive, send)
        else:
            await self._download(asset_id, send, head=method == "HEAD")

    async def _upload(self, asset_id: str, scope: Scope, receive: Receive, send: Send) -> None:
        content_type = (_header(scope, b"content-type") or "").partition(";")[0].strip().lower()
        if content_type != _OCTET_STREAM:
            raise _HttpError(415, "unsupported_media_type", f"Content-Type must be {_OCTET_STREAM}")
        length = _header(scope, b"content-length")
        if length is not None and length.isdigit() and int(length) > self.assets.max_size:
            raise _HttpError(
                413, "payload_too_large", f"an asset is at most {self.assets.max_size} bytes"
            )
        try:
            async with aclosing(_body(receive)) as chunks:
                asset = await self.assets.upload(asset_id, chunks)
        except BlobTooLarge as exc:
            raise _HttpError(
                413, "payload_too_large", f"an asset is at most {exc.limit} bytes"
            ) from exc
        except store_errors.NotFound as exc:
            raise _HttpError(404, "not_found", f"asset {asset_id!r} not found") from exc
        except store_errors.StoreUnavailable as exc:
            raise _HttpError(
                503, "unavailable", "the database is unavailable; retry later", _RETRY_AFTER
            ) from exc
        except BlobStoreFull as exc:
            raise _HttpError(
                507, "insufficient_storage", "no room left for the asset's bytes"
            ) from exc
        except BlobStoreUnavailable as exc:
            raise _HttpError(
                503, "unavailable", "the blob store is unavailable; retry later", _RETRY_AFTER
            ) from exc
        await _send_json(
            send,
            200,
            {"id": asset.id, "name": asset.name, "md5": asset.md5, "size": asset.size},
            [(b"etag", f'"{asset.md5}"'.encode())],
        )

    async def _download(self, asset_id: str, send: Send, *, head: bool) -> None:
        try:
            asset, chunks = await self.assets.download(asset_id)
        except store_errors.NotFound as exc:
            raise _HttpError(404, "not_found", f"asset {asset_id!r} has no bytes") from exc
        except store_errors.StoreUnavailable as exc:
            raise _HttpError(
                503, "unavailable", "the database is unavailable; retry later", _RETRY_AFTER
            ) from exc
        async with aclosing(chunks):
            # The first chunk before the headers: a blob deleted under the row (a delete under
            # way) or a failing store is still an answer, not a cut response.
            try:
                first = await anext(chunks, b"")
            except BlobNotFound as exc:
                raise _HttpError(404, "not_found", f"asset {asset_id!r} has no bytes") from exc
            except BlobStoreUnavailable as exc:
                raise _HttpError(
                    503, "unavailable", "the blob store is unavailable; retry later", _RETRY_AFTER
                ) from exc
            headers = [
                (b"content-type", _OCTET_STREAM.encode()),
                (b"content-length", str(asset.size).encode()),
                (b"etag", f'"{asset.md5}"'.encode()),
            ]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            if not head:
                if first:
                    await send({"type": "http.response.body", "body": first, "more_body": True})
                async for chunk in chunks:
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b""})


class BlobRoutes:
    """ASGI dispatcher: HTTP requests under ``/blobs/`` go to the `BlobEndpoint`, everything
    else (the API, its lifespan) to *app*."""

    def __init__(self, app: ASGIApp, endpoint: BlobEndpoint) -> None:
        self.app = app
        self.endpoint = endpoint

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and str(scope["path"]).startswith(BLOB_PATH_PREFIX):
            await self.endpoint(scope, receive, send)
            return
        await self.app(scope, receive, send)
