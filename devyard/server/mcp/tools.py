"""The MCP tools of an instance: names, schemas, annotations, and what each one runs.

docs/mcp.md is the user's reference (it lists the same table). Each `Tool` says whether it
is offered to a read-only grant (``viewer``): observing, listing apps and reading the device
log are; everything that changes the device, and reading its files or running a shell, are
not. A call returns MCP content items; a `ToolError` becomes an ``isError`` result whose text
says what to do (service.py), never a stack trace.
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Final, Protocol
from urllib.parse import quote

import attrs
import trio

from .actions import Device, ToolError, explain
from .device import DeviceApiError

__all__ = ["TOOLS", "Assets", "Tool", "ToolContext", "tools_for"]

MAX_PULL: Final = 1024 * 1024
MAX_PUSH: Final = 4 * 1024 * 1024  # what fits in one MCP request (the transport's body cap)
MAX_ACTIONS: Final = 50
MAX_LOGS: Final = 500

Content = list[dict[str, Any]]


class Assets(Protocol):
    """The organization's assets (the server's `AssetBlobs` through `service.StoreAssets`)."""

    async def open_app(self, instance_id: str, name: str) -> tuple[str, AsyncIterator[bytes]]:
        """(file name, bytes) of the asset *name* of the instance's organization; ToolError if
        there is none."""
        ...


@attrs.frozen
class ToolContext:
    device: Device
    platform: str
    assets: Assets


Run = Callable[[ToolContext, dict[str, Any]], Awaitable[Content]]


@attrs.frozen
class Tool:
    name: str
    description: str
    schema: dict[str, Any]
    run: Run
    read_only: bool = False  # readOnlyHint
    destructive: bool = False  # destructiveHint
    idempotent: bool = False
    open_world: bool = False
    viewer: bool = False  # offered to read-only grants
    android_only: bool = False

    def annotations(self) -> dict[str, Any]:
        return {
            "title": self.name.replace("_", " "),
            "readOnlyHint": self.read_only,
            "destructiveHint": self.destructive,
            "idempotentHint": self.idempotent,
            "openWorldHint": self.open_world,
        }


def _text(value: Any) -> Content:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return [{"type": "text", "text": text}]


def _obj(properties: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = list(required)
    schema["additionalProperties"] = False
    return schema


_NUM: Final = {"type": "number"}
_TARGET: Final = {
    "element": {"type": "string", "description": "an element id from observe"},
    "x": {**_NUM, "description": "x in observe's coordinate space"},
    "y": {**_NUM, "description": "y in observe's coordinate space"},
}
_DIRECTION: Final = {"type": "string", "enum": ["up", "down", "left", "right"]}
_OBSERVE: Final = {
    "format": {"type": "string", "enum": ["jpeg", "png", "none"], "default": "jpeg",
               "description": "the screenshot's encoding; none: the tree only"},
    "quality": {"type": "integer", "minimum": 10, "maximum": 95, "default": 70},
    "tree": {"type": "string", "enum": ["interactive", "full", "none"], "default": "interactive",
             "description": "interactive: elements with text, a label, an id or an action"},
}  # fmt: skip


# ---- observing and acting -------------------------------------------------------------------


async def _observe(ctx: ToolContext, args: dict[str, Any]) -> Content:
    return (await ctx.device.observe(args)).content()


def _gesture(name: str) -> Run:
    async def run(ctx: ToolContext, args: dict[str, Any]) -> Content:
        done: str = await getattr(ctx.device, name)(args)
        return _text(done + "; call observe to see the result")

    return run


_ACT_KINDS: Final = {
    "tap": "tap", "double_tap": "double_tap", "long_press": "long_press", "swipe": "swipe",
    "scroll": "scroll", "type": "type_text", "key": "press_key", "open_url": "open_url",
    "rotate": "set_orientation",
}  # fmt: skip


async def _act(ctx: ToolContext, args: dict[str, Any]) -> Content:
    actions = args.get("actions")
    if not isinstance(actions, list) or not 1 <= len(actions) <= MAX_ACTIONS:
        raise ToolError(f"actions must be a list of 1-{MAX_ACTIONS} action objects")
    results: list[dict[str, Any]] = []
    failed = None
    for index, action in enumerate(actions):
        kind = action.get("type") if isinstance(action, dict) else None
        try:
            if kind == "wait":
                ms = action.get("ms", 500)
                if not isinstance(ms, int | float) or not 0 <= ms <= 10_000:
                    raise ToolError("wait takes ms within 0-10000")
                await trio.sleep(ms / 1000)
                results.append({"index": index, "type": kind, "ok": True})
                continue
            if kind not in _ACT_KINDS:
                raise ToolError(f"type must be one of wait, {', '.join(_ACT_KINDS)}")
            done = await getattr(ctx.device, _ACT_KINDS[kind])(action)
            results.append({"index": index, "type": kind, "ok": True, "result": done})
        except ToolError as exc:
            failed = f"action {index} ({kind}) failed: {exc}"
            results.append({"index": index, "type": kind, "ok": False, "error": str(exc)})
            break
    settle_ms = args.get("settleTimeoutMs", 2000)
    if not isinstance(settle_ms, int | float) or not 0 <= settle_ms <= 10_000:
        raise ToolError("settleTimeoutMs must be within 0-10000")
    settled, waited = await ctx.device.settle(settle_ms)
    observation = await ctx.device.observe(args.get("observe") or {})
    observation.meta["actions"] = results
    observation.meta["settled"] = settled
    observation.meta["settleMs"] = round(waited)
    if failed is not None:
        observation.meta["error"] = failed + "; the actions before it ran, the rest did not"
    return observation.content()


# ---- apps, files, logs, shell -----------------------------------------------------------------


def _app_id(args: dict[str, Any]) -> str:
    app_id = args.get("appId")
    if not isinstance(app_id, str) or not app_id or "/" in app_id:
        raise ToolError("give appId (a package name or bundle id; list_apps shows them)")
    return app_id


async def _list_apps(ctx: ToolContext, args: dict[str, Any]) -> Content:
    reply = await ctx.device.api.get_json("/apps")
    return _text(reply)


async def _launch(ctx: ToolContext, args: dict[str, Any]) -> Content:
    await ctx.device.api.request("POST", f"/apps/{quote(_app_id(args), safe='')}/launch")
    return _text("launched; call observe to see it")


async def _terminate(ctx: ToolContext, args: dict[str, Any]) -> Content:
    await ctx.device.api.request("POST", f"/apps/{quote(_app_id(args), safe='')}/terminate")
    return _text("terminated")


async def _install(ctx: ToolContext, args: dict[str, Any]) -> Content:
    asset, url = args.get("asset"), args.get("url")
    if (asset is None) == (url is None):
        raise ToolError("give exactly one of asset (an asset name of your organization) or url")
    if url is not None:
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ToolError("url must be an http(s) URL of the .apk / .ipa")
        # hostd downloads it, through the device's network policy (not from the server)
        installed = await ctx.device.api.post_json("/apps", {"url": url})
        return _text({"installed": installed})
    if not isinstance(asset, str) or not asset:
        raise ToolError("asset must be an asset name")
    filename, chunks = await ctx.assets.open_app(ctx.device.api.instance_id, asset)
    default = ".apk" if ctx.platform == "android" else ".ipa"
    suffix = "." + filename.rsplit(".", 1)[-1] if "." in filename else default
    reply = await ctx.device.api.request(
        "POST", "/apps", query=f"suffix={quote(suffix)}", body=chunks,
        content_type="application/octet-stream",
    )  # fmt: skip
    return _text({"installed": reply.json()})


def _path(args: dict[str, Any]) -> str:
    path = args.get("path")
    if not isinstance(path, str) or not path.startswith("/"):
        raise ToolError("give path, absolute as the device sees it (/sdcard/Download/a.txt)")
    return path


async def _push(ctx: ToolContext, args: dict[str, Any]) -> Content:
    path = _path(args)
    text, encoded = args.get("text"), args.get("base64")
    if (text is None) == (encoded is None):
        raise ToolError("give exactly one of text or base64")
    try:
        if isinstance(text, str):
            data = text.encode()
        else:
            data = base64.b64decode(str(encoded), validate=True)
    except ValueError:
        raise ToolError("base64 is not valid base64") from None
    if len(data) > MAX_PUSH:
        raise ToolError(f"at most {MAX_PUSH} bytes per push; use the device API's PUT /files")
    reply = await ctx.device.api.request("PUT", "/files", query=f"path={quote(path)}", body=data)
    return _text(reply.json())


async def _pull(ctx: ToolContext, args: dict[str, Any]) -> Content:
    path = _path(args)
    reply = await ctx.device.api.request("GET", "/files", query=f"path={quote(path)}")
    if reply.content_type == "application/json":
        return _text(reply.json())  # a directory's listing
    data = reply.body
    out: dict[str, Any] = {"path": path, "size": len(data)}
    if len(data) > MAX_PULL:
        raise ToolError(f"{path} is {len(data)} bytes; pull at most {MAX_PULL} here")
    try:
        out["text"] = data.decode()
    except UnicodeDecodeError:
        out["base64"] = base64.b64encode(data).decode()
    return _text(out)


async def _logs(ctx: ToolContext, args: dict[str, Any]) -> Content:
    after, limit = args.get("cursor", 0), args.get("limit", 200)
    if not isinstance(after, int) or after < 0:
        raise ToolError("cursor must be a non-negative integer (the cursor of the last call)")
    if not isinstance(limit, int) or not 1 <= limit <= MAX_LOGS:
        raise ToolError(f"limit must be within 1-{MAX_LOGS}")
    items = (await ctx.device.api.get_json("/logs", query=f"after={after}"))["items"]
    shown = items[:limit]
    cursor = shown[-1]["seq"] if shown else after
    return _text({"items": shown, "cursor": cursor, "more": len(items) > limit})


async def _shell(ctx: ToolContext, args: dict[str, Any]) -> Content:
    command = args.get("command")
    if not isinstance(command, str) or not command.strip():
        raise ToolError("give command (one sh command line)")
    return _text(await ctx.device.api.post_json("/shell", {"command": command}))


_APP: Final = {"appId": {"type": "string", "description": "package name / bundle id"}}

TOOLS: Final[tuple[Tool, ...]] = (
    Tool("observe", "The screen now: a screenshot and the element tree, in ONE coordinate space "
         "(the screenshot's pixels; the text says its size). Call it before acting; pass "
         "element ids or x/y from it to the other tools.", _obj(_OBSERVE), _observe,
         read_only=True, idempotent=True, viewer=True),
    Tool("tap", "Tap an element (by id) or a point.", _obj(_TARGET), _gesture("tap")),
    Tool("double_tap", "Double-tap an element or a point.", _obj(_TARGET), _gesture("double_tap")),
    Tool("long_press", "Press and hold an element or a point.",
         _obj({**_TARGET, "durationMs": {**_NUM, "default": 800}}), _gesture("long_press")),
    Tool("swipe", "Swipe: a direction (the finger's) from an element / point / the centre, or "
         "from x,y to to_x,to_y.", _obj({**_TARGET, "direction": _DIRECTION,
         "distance": {**_NUM, "default": 0.5, "description": "fraction of the screen"},
         "to_element": {"type": "string"}, "to_x": _NUM, "to_y": _NUM,
         "durationMs": {**_NUM, "default": 300}}), _gesture("swipe")),
    Tool("scroll", "Scroll content (down: show what is further down) at an element, a point or "
         "the centre.", _obj({**_TARGET, "direction": _DIRECTION, "amount": {**_NUM,
         "default": 0.5, "description": "screen heights"}}, ("direction",)), _gesture("scroll")),
    Tool("type_text", "Type text (any script) into the focused field, or tap element first; "
         "submit presses enter after.", _obj({"text": {"type": "string"}, "element":
         _TARGET["element"], "submit": {"type": "boolean", "default": False}}, ("text",)),
         _gesture("type_text")),
    Tool("press_key", "Press a key or button.", _obj({"key": {"type": "string", "enum": [
         "home", "back", "app_switch", "enter", "delete", "tab", "escape", "paste", "power",
         "volume_up", "volume_down", "menu"]}}, ("key",)), _gesture("press_key")),
    Tool("act", "Run actions in order (stopping at the first failure), wait until the screen "
         "settles, and return the new observation. Action objects: {type: tap|double_tap|"
         "long_press|swipe|scroll|type|key|open_url|rotate|wait, ...the fields of the tool of "
         "that name (type: text; key: key; rotate: orientation; wait: ms)}.",
         _obj({"actions": {"type": "array", "items": {"type": "object"}, "minItems": 1,
               "maxItems": MAX_ACTIONS}, "settleTimeoutMs": {**_NUM, "default": 2000},
               "observe": _obj(_OBSERVE)}, ("actions",)), _act),
    Tool("open_url", "Open a URL or deep link.", _obj({"url": {"type": "string"}}, ("url",)),
         _gesture("open_url"), open_world=True),
    Tool("set_orientation", "Rotate the screen.", _obj({"orientation": {"type": "string",
         "enum": ["portrait", "landscape", "portrait_upside_down", "landscape_right"]}},
         ("orientation",)), _gesture("set_orientation"), idempotent=True),
    Tool("list_apps", "Installed apps: id, label, version, system, running.", _obj({}),
         _list_apps, read_only=True, idempotent=True, viewer=True),
    Tool("launch_app", "Bring an app to the foreground, starting it if needed.", _obj(_APP,
         ("appId",)), _launch, idempotent=True),
    Tool("terminate_app", "Stop an app.", _obj(_APP, ("appId",)), _terminate,
         destructive=True, idempotent=True),
    Tool("install_app", "Install an app: an asset of your organization (by name), or a URL "
         "the device's host downloads (public addresses only, unless the host allows more).",
         _obj({"asset": {"type": "string"}, "url": {"type": "string"}}), _install,
         destructive=True, open_world=True),
    Tool("push_file", "Write a file on the device (text, or base64 for bytes).",
         _obj({"path": {"type": "string"}, "text": {"type": "string"},
               "base64": {"type": "string"}}, ("path",)), _push, destructive=True),
    Tool("pull_file", "Read a file (text, else base64) or list a directory.",
         _obj({"path": {"type": "string"}}, ("path",)), _pull, read_only=True, idempotent=True),
    Tool("device_logs", "Device log entries after a cursor (0: from the oldest retained); "
         "pass the returned cursor next time.", _obj({"cursor": {"type": "integer",
         "default": 0}, "limit": {"type": "integer", "default": 200}}), _logs, read_only=True,
         viewer=True),
    Tool("shell", "Run one sh command line on the Android device (as `adb shell`).",
         _obj({"command": {"type": "string"}}, ("command",)), _shell, destructive=True,
         android_only=True),
)  # fmt: skip


def tools_for(platform: str, *, read_only: bool) -> list[Tool]:
    return [
        t
        for t in TOOLS
        if (t.viewer or not read_only) and (not t.android_only or platform == "android")
    ]


async def call(tool: Tool, ctx: ToolContext, args: dict[str, Any]) -> Content:
    """Run *tool*; a device API refusal becomes a ToolError that says what to do."""
    try:
        return await tool.run(ctx, args)
    except DeviceApiError as exc:
        raise explain(exc) from None
