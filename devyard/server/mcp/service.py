"""`McpService`: the MCP endpoint of every instance, ``/v1/instances/{id}/mcp`` (``mcpUrl``).

Where it runs: in the server process, beside the edge's gateway, calling each instance's
device API over the host link (docs/mcp.md says why). One official-SDK low-level `Server` and
one `StreamableHTTPSessionManager` (stateful Streamable HTTP: ``Mcp-Session-Id``, SSE or JSON
answers) serve all instances; an ASGI front does, per HTTP request, in this order:

1. refuse a request with a browser ``Origin`` (403, unless that origin is configured), so a
   web page cannot drive a device through a user's browser;
2. authenticate the bearer credential for the path's instance (access.py): 401 / 404 / 409 /
   410 as the gateway answers, in the APIError shape;
3. hand the request to the SDK with the grant in the ASGI scope, and with the SDK's
   ``user`` set to "this instance, this credential": the SDK binds a session to the identity
   that opened it, so a session id of another instance or credential is a 404.

Sessions outlive connections (a client that reconnects with its session id carries on) and
hold no device state: the device is the instance's, so a dropped session loses nothing. Tool
handlers read the grant from the request that carried the call: the tool list, and which
tools may run, follow the credential of each request.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Iterable, MutableMapping
from typing import Any, Final

import mcp_types as types
import trio
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

from ..edge.asgi import bearer_from, send_http_error
from ..edge.asgi_stream import Receive, Send
from ..hosts import InstanceDirectory
from ..store import errors as store_errors
from ..store.base import Store
from .access import Grant, McpAuthority, McpRefused
from .actions import Device, ToolError
from .device import DeviceApiClient, InstanceStreams
from .tools import Assets, ToolContext, call, tools_for

log = logging.getLogger(__name__)

__all__ = ["MCP_ENDPOINT", "McpService", "StoreAssets", "is_mcp_path"]

MCP_ENDPOINT: Final = "mcp"
_PREFIX: Final = "/v1/instances/"
_GRANT: Final = "devyard.mcp.grant"
_SESSION_IDLE_S: Final = 30 * 60.0
_MAX_SESSIONS: Final = 1000
_INSTRUCTIONS: Final = (
    "Drives one devyard device. Call observe first: it returns a screenshot and the element "
    "tree in one coordinate space (the screenshot's pixels). Act by element id (preferred) or "
    "by x/y in that space; `act` runs a batch and returns the settled screen."
)


def is_mcp_path(path: str) -> bool:
    """``/v1/instances/{id}/mcp`` (with or without a trailing slash)."""
    if not path.startswith(_PREFIX):
        return False
    parts = path[len(_PREFIX) :].strip("/").split("/")
    return len(parts) == 2 and parts[1] == MCP_ENDPOINT and bool(parts[0])


class StoreAssets:
    """`tools.Assets` over the store and the server's asset blobs (`AssetBlobs`)."""

    def __init__(self, store: Store, blobs: Any) -> None:
        self._store = store
        self._blobs = blobs

    async def open_app(self, instance_id: str, name: str) -> tuple[str, AsyncIterator[bytes]]:
        instance = await self._store.get_instance(instance_id)
        found = await self._store.list_assets(instance.org_id, name=name, limit=1)
        if not found or found[0].blob_key is None:
            raise ToolError(
                f"no uploaded asset named {name!r} in this organization; GET /v1/assets lists them"
            )
        try:
            _, chunks = await self._blobs.download(found[0].id)
        except store_errors.NotFound:
            raise ToolError(f"asset {name!r} has no bytes yet; upload them first") from None
        return found[0].name, chunks


class McpService:
    """The raw ASGI app of ``mcpUrl``; run it with ``await nursery.start(service.run)``."""

    def __init__(
        self,
        edge: InstanceStreams,
        directory: InstanceDirectory,
        store: Store,
        assets: Assets,
        *,
        allowed_origins: Iterable[str] = (),
        clock: Callable[[], float] = trio.current_time,
    ) -> None:
        self._edge = edge
        self._directory = directory
        self._authority = McpAuthority(store, directory, clock=clock)
        self._assets = assets
        self._origins = frozenset(allowed_origins)
        self._server: Server[Any] = Server(
            "devyard",
            version="1",
            instructions=_INSTRUCTIONS,
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
        )
        self._server.middleware.clear()  # no per-message OpenTelemetry spans (docs/mcp.md)
        self._sessions = StreamableHTTPSessionManager(
            self._server, session_idle_timeout=_SESSION_IDLE_S, max_sessions=_MAX_SESSIONS
        )

    def __repr__(self) -> str:
        return "<McpService>"

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The SDK's session manager, until cancelled (its sessions end with it)."""
        async with self._sessions.run():
            task_status.started()
            await trio.sleep_forever()

    # ---- HTTP -----------------------------------------------------------------------------

    async def __call__(self, scope: MutableMapping[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        headers = scope.get("headers", [])
        origin = _header(headers, b"origin")
        if origin is not None and origin not in self._origins:
            await send_http_error(
                send,
                403,
                f"requests from a browser page (Origin {origin[:100]}) may not use the MCP "
                "endpoint; MCP clients send no Origin",
                "forbidden",
            )
            return
        instance_id = str(scope["path"])[len(_PREFIX) :].split("/", 1)[0]
        try:
            grant = await self._authority.authenticate(instance_id, bearer_from(headers))
        except McpRefused as refused:
            await send_http_error(send, refused.status, refused.message, refused.reason)
            return
        self._directory.touch(grant.access.instance_id)
        scope[_GRANT] = grant
        owner = AccessToken(
            token="-",  # noqa: S106 - not the credential: the SDK only compares client_id
            client_id=f"{grant.access.instance_id}|{grant.identity}",
            scopes=[],
        )
        scope["user"] = AuthenticatedUser(owner)
        await self._sessions.handle_request(scope, receive, send)

    # ---- MCP ------------------------------------------------------------------------------

    async def _list_tools(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        grant = _grant_of(ctx)
        tools = [
            types.Tool.model_validate(
                {
                    "name": tool.name,
                    "description": tool.description,
                    "inputSchema": tool.schema,
                    "annotations": tool.annotations(),
                }
            )
            for tool in tools_for(grant.access.platform, read_only=grant.read_only)
        ]
        return types.ListToolsResult(tools=tools)

    async def _call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        grant = _grant_of(ctx)
        offered = {t.name: t for t in tools_for(grant.access.platform, read_only=grant.read_only)}
        tool = offered.get(params.name)
        try:
            if tool is None:
                raise ToolError(
                    f"no tool {params.name!r} for this credential: "
                    f"{', '.join(offered)}" + (" (read-only)" if grant.read_only else "")
                )
            device = Device(DeviceApiClient(self._edge, grant.access))
            context = ToolContext(device, grant.access.platform, self._assets)
            content = await call(tool, context, dict(params.arguments or {}))
            return types.CallToolResult.model_validate({"content": content, "isError": False})
        except ToolError as exc:
            failure = str(exc)
        except Exception:  # the agent gets a sentence, the log gets the trace
            log.exception("MCP tool %s on %s failed", params.name, grant.access.instance_id)
            failure = "the tool failed inside devyard; try again, or observe to see the state"
        return types.CallToolResult.model_validate(
            {"content": [{"type": "text", "text": failure}], "isError": True}
        )


def _grant_of(ctx: ServerRequestContext[Any]) -> Grant:
    request = ctx.request
    grant = None if request is None else request.scope.get(_GRANT)
    if not isinstance(grant, Grant):
        raise RuntimeError("an MCP request that did not come through McpService")
    return grant


def _header(headers: Iterable[tuple[bytes, bytes]], name: bytes) -> str | None:
    for key, value in headers:
        if bytes(key).lower() == name:
            return bytes(value).decode("latin-1")
    return None
