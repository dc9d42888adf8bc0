"""An instance's own API (``status.apiUrl`` with the instance token): device verbs for
Android and iOS (docs/devices.md) and sync/exec for build instances (docs/builds.md).

    async with InstanceApi.of(instance) as device:
        png = await device.screenshot()
        await device.tap(100, 200)

Runs under trio or asyncio (httpx on anyio). Errors are the client's typed errors.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, Final

import attrs
import httpx

from ._errors import ResponseError, TransportError, error_for_status
from .resources import Instance, InstanceState

__all__ = ["ExecEvent", "InstanceApi", "NotReadyError"]

DEFAULT_TIMEOUT: Final = 300.0


class NotReadyError(Exception):
    """The instance is not ready (or has no API): no device verb can reach it."""


@attrs.frozen
class ExecEvent:
    """One event of a build's stream: ``stdout``, ``stderr``, ``progress``, ``artifact``,
    ``command`` or ``exitCode`` (the last)."""

    id: int | None
    type: str
    data: str


def _raise_for(answer: httpx.Response) -> None:
    if answer.status_code < 400:
        return
    reason = None
    try:
        detail = answer.json()
        message = str(detail.get("message") or detail.get("error") or answer.text)
        reason = detail.get("reason") if isinstance(detail.get("reason"), str) else None
    except (ValueError, AttributeError):
        message = answer.text.strip() or answer.reason_phrase
    raise error_for_status(answer.status_code, message, reason=reason)


class InstanceApi:
    """One HTTP connection pool to one instance's API."""

    def __init__(
        self,
        api_url: str,
        token: str,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        verify: Any = True,
    ) -> None:
        self.api_url: Final = api_url.rstrip("/")
        self._http = httpx.AsyncClient(
            base_url=self.api_url + "/",
            headers={"Authorization": f"Bearer {token}"},
            timeout=timeout,
            verify=verify,
        )

    @classmethod
    def of(cls, instance: Instance, *, verify: Any = True) -> InstanceApi:
        status = instance.status
        if status.state is not InstanceState.READY or not status.api_url or not status.token:
            raise NotReadyError(f"{instance.id} is {status.state.value}, not ready")
        return cls(status.api_url, status.token, verify=verify)

    async def __aenter__(self) -> InstanceApi:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self._http.aclose()

    async def _send(
        self,
        method: str,
        path: str,
        *,
        body: object = None,
        content: Any = None,
        params: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> httpx.Response:
        try:
            answer = await self._http.request(
                method,
                path.lstrip("/"),
                content=json.dumps(body).encode() if body is not None else content,
                params=params,
                headers={
                    **({"Content-Type": "application/json"} if body is not None else {}),
                    **(headers or {}),
                },
            )
        except httpx.HTTPError as exc:
            raise TransportError(f"{method} {self.api_url}/{path.lstrip('/')}: {exc!r}") from exc
        _raise_for(answer)
        return answer

    async def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        answer = await self._send(method, path, **kwargs)
        try:
            return answer.json() if answer.content else None
        except ValueError:
            raise ResponseError(f"{path}: the answer is not JSON") from None

    # -- device verbs ---------------------------------------------------------------------------

    async def describe(self) -> dict[str, Any]:
        result: dict[str, Any] = await self._json("GET", "")
        return result

    async def screenshot(self, *, fmt: str = "png", max_edge: int | None = None) -> bytes:
        params = {"format": fmt}
        if max_edge is not None:
            params["maxEdge"] = str(max_edge)
        return (await self._send("GET", "screenshot", params=params)).content

    async def input(self, event: Mapping[str, Any]) -> None:
        await self._json("POST", "input", body=dict(event))

    async def tap(self, x: float, y: float) -> None:
        await self.input({"type": "tap", "x": x, "y": y})

    async def swipe(
        self, x1: float, y1: float, x2: float, y2: float, *, duration_ms: float = 300
    ) -> None:
        event = {"type": "swipe", "x1": x1, "y1": y1, "x2": x2, "y2": y2}
        await self.input({**event, "durationMs": duration_ms})

    async def type_text(self, text: str) -> None:
        await self.input({"type": "text", "text": text})

    async def key(self, key: str) -> None:
        await self.input({"type": "key", "key": key})

    async def open_url(self, url: str) -> None:
        await self._json("POST", "open-url", body={"url": url})

    async def apps(self) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = (await self._json("GET", "apps"))["items"]
        return items

    async def install(
        self, chunks: AsyncIterable[bytes], *, suffix: str = ".apk", size: int | None = None
    ) -> dict[str, Any]:
        headers = {"Content-Type": "application/octet-stream"}
        if size is not None:
            headers["Content-Length"] = str(size)
        app: dict[str, Any] = await self._json(
            "POST", "apps", content=chunks, params={"suffix": suffix}, headers=headers
        )
        return app

    async def install_url(self, url: str) -> dict[str, Any]:
        """Install from a URL (an asset's signed download URL): the host downloads it."""
        app: dict[str, Any] = await self._json("POST", "apps", body={"url": url})
        return app

    async def launch(self, app_id: str) -> None:
        await self._json("POST", f"apps/{app_id}/launch")

    async def terminate(self, app_id: str) -> None:
        await self._json("POST", f"apps/{app_id}/terminate")

    async def shell(self, command: str) -> dict[str, Any]:
        """``{stdout, stderr, exitCode}`` of one Android shell command."""
        result: dict[str, Any] = await self._json("POST", "shell", body={"command": command})
        return result

    async def push(self, path: str, chunks: AsyncIterable[bytes]) -> dict[str, Any]:
        result: dict[str, Any] = await self._json(
            "PUT",
            "files",
            content=chunks,
            params={"path": path},
            headers={"Content-Type": "application/octet-stream"},
        )
        return result

    async def pull(self, path: str, sink: Callable[[bytes], Awaitable[None]]) -> None:
        """A file's bytes to *sink*; a directory is refused with ``IsADirectoryError``."""
        try:
            async with self._http.stream("GET", "files", params={"path": path}) as answer:
                if answer.status_code >= 400:
                    await answer.aread()
                    _raise_for(answer)
                if answer.headers.get("content-type", "").startswith("application/json"):
                    raise IsADirectoryError(path)
                async for chunk in answer.aiter_bytes():
                    await sink(chunk)
        except httpx.HTTPError as exc:
            raise TransportError(f"GET {self.api_url}/files: {exc!r}") from exc

    async def logs(self, *, after: int = 0) -> list[dict[str, Any]]:
        """Log entries after sequence number *after* (``seq``, ``time``, ``level``...)."""
        data = await self._json("GET", "logs", params={"after": str(after)})
        items: list[dict[str, Any]] = data["items"]
        return items

    # -- build instances ------------------------------------------------------------------------

    async def sync(self, body: bytes, *, encoding: str = "identity") -> dict[str, Any]:
        headers = {"Content-Type": "application/octet-stream"}
        if encoding != "identity":
            headers["Content-Encoding"] = encoding
        result: dict[str, Any] = await self._json("POST", "sync", content=body, headers=headers)
        return result

    async def exec(self, request: Mapping[str, Any]) -> str:
        """Start a build (``{command: gradlebuild|run, ...}``); its exec id."""
        started = await self._json("POST", "exec", body=dict(request))
        return str(started["execId"])

    async def exec_status(self, exec_id: str) -> dict[str, Any]:
        result: dict[str, Any] = await self._json("GET", f"exec/{exec_id}")
        return result

    async def cancel(self, exec_id: str) -> dict[str, Any]:
        result: dict[str, Any] = await self._json("POST", f"exec/{exec_id}/cancel")
        return result

    async def exec_events(
        self, exec_id: str, *, after: int | None = None
    ) -> AsyncIterator[ExecEvent]:
        """The build's events in order, from the first (or after event *after*) to
        ``exitCode``; a 204 (expired, or nothing after *after*) ends at once."""
        headers = {} if after is None else {"Last-Event-ID": str(after)}
        try:
            async with self._http.stream(
                "GET", f"exec/{exec_id}/events", headers=headers, timeout=None
            ) as answer:
                if answer.status_code == 204:
                    return
                if answer.status_code >= 400:
                    await answer.aread()
                    _raise_for(answer)
                fields: dict[str, list[str]] = {}
                async for line in answer.aiter_lines():
                    if line.startswith(":"):
                        continue
                    if line:
                        name, _, value = line.partition(":")
                        fields.setdefault(name, []).append(value.removeprefix(" "))
                        continue
                    if "event" in fields:
                        event_id = int(fields["id"][0]) if "id" in fields else None
                        data = "\n".join(fields.get("data", []))
                        yield ExecEvent(event_id, fields["event"][0], data)
                        if fields["event"][0] == "exitCode":
                            return
                    fields = {}
        except httpx.HTTPError as exc:
            raise TransportError(f"events of {exec_id}: {exc!r}") from exc
