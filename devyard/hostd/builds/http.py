"""A build instance's ``/sync`` and ``/exec`` routes on its ``apiUrl`` (the HTTP boundary).

Served on the ``api`` stream like the device API (docs/protocol.md 6.4: the open request, an
ok, the request body until EOF; then one ``{"status", "content_type"}`` message and the
response body until EOF), but the body of an event stream is written as events happen.

    POST /sync                       the SDK's folder sync (sync.py)
    POST /sync/missing               {files} -> {missing: [sha256], complete} (cas.py)
    PUT  /blobs/{sha256}             one blob of the organization's store
    POST /sync/commit                {files} -> the tree from the blobs, or {ok: false, missing}
    GET|PUT /cache/{key}             Gradle's HTTP build cache (the organization's)
    POST /exec                       {command, ...} -> {execId}
    GET  /exec                       the instance's execs
    GET  /exec/{id}                  status, exit code, times, artifacts
    POST /exec/{id}/cancel           kill the exec's process tree
    GET  /exec/{id}/events           text/event-stream (below)
    GET  /exec/{id}/log              the output as plain text
    GET  /exec/{id}/artifacts/{path} a collected artifact's bytes

The event stream: first a ``retry:`` hint, then every event after ``Last-Event-ID`` (the
header, or ``?lastEventId=``) as ``id:``/``event:``/``data:``, a ``: keep-alive`` comment
after each `BuildConfig.keepalive_s` without an event, and the end after ``exitCode``. A
stream asked for after the last event of a finished exec, or for an expired exec, is 204:
closed for good (the SDK stops reconnecting).
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Mapping
from typing import Any, Final
from urllib.parse import parse_qs

import trio

from ...core import send_message
from .errors import BuildError, BuildReason
from .execs import Event, Exec
from .host import BuildHost
from .sync import MAX_META, DecodedBody

log = logging.getLogger(__name__)

__all__ = ["STATUS", "is_build_path", "serve_build_api"]

_CHUNK: Final = 256 * 1024
_MAX_JSON: Final = 1024 * 1024
_DRAIN_TIMEOUT_S: Final = 30.0
_CACHE_TYPE: Final = "application/vnd.gradle.build-cache-artifact.v1"

#: The one translation of a build error's reason to an HTTP status.
STATUS: Final[Mapping[BuildReason, int]] = {
    BuildReason.BAD_REQUEST: 400,
    BuildReason.UNSUPPORTED: 400,
    BuildReason.NOT_FOUND: 404,
    BuildReason.CONFLICT: 409,
    BuildReason.TOO_LARGE: 413,
    BuildReason.GONE: 410,
}


def is_build_path(path: object) -> bool:
    first = str(path or "").strip("/").split("/", 1)[0]
    return first in ("sync", "exec", "blobs", "cache")


class _Answer(Exception):
    """A whole answer, raised by a route (the common case)."""

    def __init__(self, status: int, value: object, content_type: str = "application/json") -> None:
        super().__init__(status)
        self.status = status
        self.content_type = content_type
        self.body = value if isinstance(value, bytes) else json.dumps(value).encode()


async def _chunks(stream: trio.abc.ReceiveStream) -> AsyncIterator[bytes]:
    while data := await stream.receive_some(_CHUNK):
        yield bytes(data)


async def _json(
    stream: trio.abc.ReceiveStream, encoding: str = "", limit: int = _MAX_JSON
) -> dict[str, Any]:
    """The JSON object of the body (``Content-Encoding`` zstd, gzip or identity; at most
    *limit* bytes decoded)."""
    raw = bytearray()
    async for chunk in DecodedBody(_chunks(stream), encoding, limit).rest():
        raw += chunk
    try:
        value = json.loads(raw or b"{}")
    except (ValueError, RecursionError) as exc:
        raise BuildError(BuildReason.BAD_REQUEST, f"the body is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise BuildError(BuildReason.BAD_REQUEST, "the body must be a JSON object")
    return value


def _header(request: Mapping[str, Any], name: str) -> str:
    headers = request.get("headers")
    if isinstance(headers, dict):
        value = headers.get(name)
        if isinstance(value, str):
            return value
    return ""


def _frame(event: Event) -> bytes:
    lines = [f"id: {event.id}", f"event: {event.type}"]
    lines += [f"data: {part}" for part in event.data.split("\n")]
    return ("\n".join(lines) + "\n\n").encode()


async def serve_build_api(
    stream: trio.abc.HalfCloseableStream, host: BuildHost, request: Mapping[str, Any]
) -> None:
    """Answer one request on the ``api`` stream (already accepted); close the stream."""
    method = str(request.get("method", "GET")).upper()
    parts = [p for p in str(request.get("path", "")).split("/") if p]
    try:
        try:
            await _route(stream, host, request, method, parts)
        except BuildError as exc:
            error = {"message": exc.message, "reason": exc.reason.value}
            raise _Answer(STATUS[exc.reason], error) from None
    except _Answer as answer:
        await _send(stream, answer)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        log.info("build API %s /%s: the edge went away", method, "/".join(parts))
    finally:
        await trio.aclose_forcefully(stream)


async def _send(stream: trio.abc.HalfCloseableStream, answer: _Answer) -> None:
    try:
        await send_message(stream, {"status": answer.status, "content_type": answer.content_type})
        for start in range(0, len(answer.body), _CHUNK):
            await stream.send_all(answer.body[start : start + _CHUNK])
        await stream.send_eof()
        with trio.move_on_after(_DRAIN_TIMEOUT_S):  # the unread body, until the edge closes
            while await stream.receive_some(_CHUNK):
                pass
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass


async def _route(
    stream: trio.abc.HalfCloseableStream,
    host: BuildHost,
    request: Mapping[str, Any],
    method: str,
    parts: list[str],
) -> None:
    match parts:
        case ["sync" | "blobs" | "cache", *_]:
            await _route_data(stream, host, request, method, parts)
        case ["exec"] if method == "POST":
            run = host.start(await _json(stream))
            answer = {"execId": run.id, "status": run.status.value}
            if run.plan.webhook is not None and run.plan.webhook.generated:
                answer["webhookSecret"] = run.plan.webhook.secret  # once, to the caller
            raise _Answer(200, answer)
        case ["exec"] if method == "GET":
            raise _Answer(200, {"items": [r.describe() for r in host.list()]})
        case ["exec", exec_id] if method == "GET":
            raise _Answer(200, _found(host, exec_id).describe())
        case ["exec", exec_id, "cancel"] if method == "POST":
            run = host.cancel(exec_id)
            with trio.move_on_after(5):
                await run.done.wait()
            raise _Answer(200, {"ok": True, **run.describe()})
        case ["exec", exec_id, "log"] if method == "GET":
            run = _found(host, exec_id)
            data = await trio.Path(run.log_path).read_bytes()
            raise _Answer(200, data, "text/plain; charset=utf-8")
        case ["exec", exec_id, "artifacts", *rest] if method == "GET" and rest:
            run = _found(host, exec_id)
            wanted = "/".join(rest)
            if not any(a["path"] == wanted for a in run.artifacts):
                raise BuildError(BuildReason.NOT_FOUND, f"exec {exec_id} has no artifact {wanted}")
            data = await trio.Path(run.directory / "artifacts" / wanted).read_bytes()
            raise _Answer(200, data, "application/octet-stream")
        case ["exec", exec_id, "events"] if method == "GET":
            await _events(stream, host, exec_id, request)
            return
    raise BuildError(BuildReason.NOT_FOUND, f"no build API route {method} /{'/'.join(parts)}")


async def _route_data(
    stream: trio.abc.HalfCloseableStream,
    host: BuildHost,
    request: Mapping[str, Any],
    method: str,
    parts: list[str],
) -> None:
    """The source tree's routes: both sync modes, blobs, the build cache."""
    match parts:
        case ["sync"] if method == "POST":
            encoding = _header(request, "content-encoding")
            raise _Answer(200, await host.sync(_chunks(stream), encoding))
        case ["sync", "missing"] if method == "POST":
            encoding = _header(request, "content-encoding")
            raise _Answer(200, await host.missing(await _json(stream, encoding, MAX_META)))
        case ["sync", "commit"] if method == "POST":
            encoding = _header(request, "content-encoding")
            raise _Answer(200, await host.commit(await _json(stream, encoding, MAX_META)))
        case ["blobs", sha256] if method == "PUT":
            encoding = _header(request, "content-encoding")
            host.check_open()
            raise _Answer(200, await host.blobs.put(sha256, _chunks(stream), encoding))
        case ["cache", key] if method in ("GET", "HEAD"):
            entry = await host.cache.get(key)
            if entry is None:
                raise BuildError(BuildReason.NOT_FOUND, f"no build cache entry {key}")
            raise _Answer(200, b"" if method == "HEAD" else entry, _CACHE_TYPE)
        case ["cache", key] if method == "PUT":
            size = await host.cache.put(key, _chunks(stream))
            raise _Answer(200, {"key": key, "size": size})
    raise BuildError(BuildReason.NOT_FOUND, f"no build API route {method} /{'/'.join(parts)}")


def _found(host: BuildHost, exec_id: str) -> Exec:
    run = host.lookup(exec_id)
    if run is None:
        gone = host.expired(exec_id)
        raise BuildError(
            BuildReason.GONE if gone else BuildReason.NOT_FOUND,
            f"exec {exec_id} {'has expired' if gone else 'does not exist on this instance'}",
        )
    return run


async def _events(
    stream: trio.abc.HalfCloseableStream,
    host: BuildHost,
    exec_id: str,
    request: Mapping[str, Any],
) -> None:
    query = parse_qs(str(request.get("query", "")))
    raw_last = _header(request, "last-event-id") or (query.get("lastEventId") or [""])[0]
    try:
        last = int(raw_last) if raw_last.strip() else 0
    except ValueError:
        raise BuildError(BuildReason.BAD_REQUEST, "Last-Event-ID must be an integer") from None
    run = host.lookup(exec_id)
    if run is None and not host.expired(exec_id):
        raise BuildError(BuildReason.NOT_FOUND, f"exec {exec_id} does not exist on this instance")
    if run is None or (run.done.is_set() and last >= run.last_id):
        raise _Answer(204, b"", "text/event-stream")
    await send_message(stream, {"status": 200, "content_type": "text/event-stream"})
    await stream.send_all(f"retry: {host.config.retry_ms}\n\n".encode())
    while True:
        pending = run.after(last)
        if pending:
            await stream.send_all(b"".join(_frame(e) for e in pending))
            last = pending[-1].id
            if pending[-1].type == "exitCode":
                break
            continue
        with trio.move_on_after(host.config.keepalive_s) as idle:
            await run.wait_beyond(last)
        if idle.cancelled_caught:
            await stream.send_all(b": keep-alive\n\n")
    await stream.send_eof()
