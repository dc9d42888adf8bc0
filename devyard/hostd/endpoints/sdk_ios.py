"""The iOS instance client's dialect of the SDK socket (``{apiUrl}/signaling``, sdk_ws.py).

Requests carry their fields flat; answers are ``{type: "<type>Result", id, ...fields}`` or
``{..., error: "<message>"}`` (the client rejects on a string ``error``). The client asks for
``deviceInfo`` as soon as the socket opens and fails without it.

Coordinates: ``deviceInfo`` reports the screen in pixels as ``screenWidth``/``screenHeight``;
a ``tap`` with another ``screenWidth``/``screenHeight`` is scaled from that space. The element
tree is the flat, pre-order list idb's ``describe-all`` prints (``AXFrame``, ``AXLabel``,
``AXUniqueId``, ``AXValue``, ``frame``, ``type`` ...), from the same tree the device API
serves; with ``point``, only the elements under that point. Selectors match ``AXUniqueId``
(resource id), ``AXLabel`` (label, else text), ``AXValue`` (text), ``type`` (class without
``XCUIElementType``, case-insensitive), ``title``, and the ``...Contains`` forms
(case-insensitive).

What a virtual device cannot do (simctl, xcrun, xcodebuild, keychain, recording, log streams,
open files, increment/decrement, the keyboard toggle) is answered with the protocol's own
error; ``simctl`` with a ``simctlStream`` that exits 1 and says why on stderr.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator, Mapping
from typing import Any, Final

import trio

from ..drivers.uitree import UiNode
from .sdk_android import press, ui_root
from .sdk_calls import DeviceCalls, Handler, SdkError, field, optional

__all__ = ["IOS"]

_MAX_WAIT_MS: Final = 60_000
_SCROLL: Final = {"up": (0, 1), "down": (0, -1), "left": (1, 0), "right": (-1, 0)}
_BUTTONS: Final = {"home": "home", "lock": "power", "side": "power"}


def _type_name(node: UiNode) -> str:
    return node.cls.rsplit(".", 1)[-1].removeprefix("XCUIElementType")


def _label(node: UiNode) -> str:
    return node.content_desc or node.text


def _element(node: UiNode) -> dict[str, Any]:
    x, y, w, h = node.bounds
    kind = _type_name(node)
    return {
        "AXFrame": f"{{{{{x}, {y}}}, {{{w}, {h}}}}}",
        "AXLabel": _label(node) or None,
        "AXUniqueId": node.resource_id or None,
        "AXValue": node.text or None,
        "content_required": False,
        "custom_actions": [],
        "enabled": node.enabled,
        "frame": {"x": x, "y": y, "width": w, "height": h},
        "help": None,
        "pid": 0,
        "role": f"AX{kind}",
        "role_description": kind.lower(),
        "subrole": None,
        "title": None,
        "traits": [t for t in ("button",) if node.clickable],
        "type": kind,
    }


def _walk(node: UiNode) -> Iterator[UiNode]:
    yield node
    for child in node.children:
        yield from _walk(child)


def _contains(node: UiNode, x: float, y: float) -> bool:
    left, top, w, h = node.bounds
    return left <= x < left + w and top <= y < top + h


_SELECTOR: Final = frozenset(
    {"AXUniqueId", "AXLabel", "AXLabelContains", "type", "title", "titleContains", "AXValue"}
)


def _test(node: UiNode, name: str, value: object) -> bool:
    label, wanted = _label(node), str(value).lower()
    if name == "AXUniqueId":
        return node.resource_id == value
    if name in ("AXLabel", "title"):
        return label == value
    if name in ("AXLabelContains", "titleContains"):
        return wanted in label.lower()
    if name == "type":
        return _type_name(node).lower() == wanted
    return node.text == value  # AXValue


def _matches(node: UiNode, selector: Mapping[str, Any]) -> bool:
    return all(_test(node, k, v) for k, v in selector.items() if v is not None)


async def _find(calls: DeviceCalls, message: Mapping[str, Any]) -> UiNode:
    selector = field(message, "selector", dict)
    unknown = sorted(set(selector) - _SELECTOR)
    if unknown:
        raise SdkError("bad_request", f"unknown selector fields {unknown}")
    for node in _walk(await ui_root(calls)):
        if _matches(node, selector):
            return node
    raise SdkError("element_not_found", f"no element matches {selector}")


async def _tap_node(calls: DeviceCalls, node: UiNode) -> None:
    x, y, w, h = node.bounds
    await calls.input(type="tap", x=x + w / 2, y=y + h / 2)


def _scaled(calls: DeviceCalls, message: Mapping[str, Any]) -> tuple[float, float]:
    x = float(field(message, "x", (int, float)))
    y = float(field(message, "y", (int, float)))
    info = calls.device.describe()
    width = optional(message, "screenWidth", (int, float))
    height = optional(message, "screenHeight", (int, float))
    if width and height:
        x, y = x * info.width / width, y * info.height / height
    return x, y


# ---- the requests ---------------------------------------------------------------------------


async def _device_info(calls: DeviceCalls, message: Mapping[str, Any]) -> dict[str, Any]:
    info = calls.device.describe()
    return {
        "udid": info.instance_id,
        "screenWidth": info.width,
        "screenHeight": info.height,
        "model": info.model_name or info.model,
    }


async def _screenshot(calls: DeviceCalls, message: Mapping[str, Any]) -> dict[str, Any]:
    _, data = await calls.call("GET", "/screenshot", query="format=jpeg&quality=85")
    info = calls.device.describe()
    return {"base64": base64.b64encode(data).decode(), "width": info.width, "height": info.height}


async def _element_tree(calls: DeviceCalls, message: Mapping[str, Any]) -> dict[str, Any]:
    nodes = list(_walk(await ui_root(calls)))
    point = optional(message, "point", dict)
    if point is not None:
        px, py = field(point, "x", (int, float)), field(point, "y", (int, float))
        nodes = [n for n in nodes if _contains(n, px, py)]
    return {"json": json.dumps([_element(n) for n in nodes])}


async def _tap(calls: DeviceCalls, message: Mapping[str, Any]) -> dict[str, Any]:
    x, y = _scaled(calls, message)
    await calls.input(type="tap", x=x, y=y)
    return {}


async def _tap_element(calls: DeviceCalls, message: Mapping[str, Any]) -> dict[str, Any]:
    node = await _find(calls, message)
    await _tap_node(calls, node)
    return {"elementLabel": _label(node), "elementType": _type_name(node)}


async def _set_element_value(calls: DeviceCalls, message: Mapping[str, Any]) -> dict[str, Any]:
    text = field(message, "text", str)
    node = await _find(calls, message)
    await _tap_node(calls, node)
    if text:
        await calls.input(type="text", text=text)
    return {"elementLabel": _label(node)}


async def _type_text(calls: DeviceCalls, message: Mapping[str, Any]) -> dict[str, Any]:
    text = field(message, "text", str)
    if text:
        await calls.input(type="text", text=text)
    if optional(message, "pressEnter", bool):
        await calls.input(type="key", key="enter")
    return {}


async def _press_key(calls: DeviceCalls, message: Mapping[str, Any]) -> dict[str, Any]:
    if optional(message, "modifiers", list):
        raise SdkError("unsupported", "key modifiers are not supported on this device")
    await press(calls, field(message, "key", str))
    return {}


def _bundle(message: Mapping[str, Any]) -> str:
    bundle: str = field(message, "bundleId", str)
    if not bundle or "/" in bundle:
        raise SdkError("bad_request", "'bundleId' must be an app id")
    return bundle


async def _launch(calls: DeviceCalls, bundle: str, mode: object) -> None:
    if mode == "RelaunchIfRunning":
        await calls.call("POST", f"/apps/{bundle}/terminate")
    await calls.call("POST", f"/apps/{bundle}/launch")


async def _launch_app(calls: DeviceCalls, message: Mapping[str, Any]) -> dict[str, Any]:
    if message.get("runtime") is not None:
        raise SdkError("unsupported", "launch runtimes (Detox) are not supported")
    await _launch(calls, _bundle(message), message.get("mode"))
    return {}


async def _terminate_app(calls: DeviceCalls, message: Mapping[str, Any]) -> dict[str, Any]:
    await calls.call("POST", f"/apps/{_bundle(message)}/terminate")
    return {}


async def _list_apps(calls: DeviceCalls, message: Mapping[str, Any]) -> dict[str, Any]:
    listed = await calls.json("GET", "/apps")
    apps = [
        {
            "bundleId": a["id"],
            "name": a["label"],
            "installType": "System" if a["system"] else "User",
        }
        for a in listed["items"]
    ]
    return {"apps": json.dumps(apps)}


async def _open_url(calls: DeviceCalls, message: Mapping[str, Any]) -> dict[str, Any]:
    await calls.call("POST", "/open-url", {"url": field(message, "url", str)})
    return {}


async def _install(calls: DeviceCalls, message: Mapping[str, Any]) -> dict[str, Any]:
    url = field(message, "url", str)
    app = await calls.json("POST", "/apps", {"url": url})
    mode = message.get("launchMode")
    if mode in ("ForegroundIfRunning", "RelaunchIfRunning"):
        await _launch(calls, str(app["id"]), mode)
    return {"url": url, "bundleId": app["id"]}


async def _app_log_tail(calls: DeviceCalls, message: Mapping[str, Any]) -> dict[str, Any]:
    bundle = _bundle(message)
    lines = max(0, min(int(field(message, "lines", int)), 10_000))
    entries = (await calls.json("GET", "/logs"))["items"]
    mine = [f"{e['tag']}: {e['message']}" for e in entries if bundle in (e["tag"], e["message"])]
    return {"logs": "\n".join(mine[-lines:] if lines else [])}


async def _set_orientation(calls: DeviceCalls, message: Mapping[str, Any]) -> dict[str, Any]:
    orientation = field(message, "orientation", str)
    if orientation not in ("Portrait", "Landscape"):
        raise SdkError("bad_request", "'orientation' must be Portrait or Landscape")
    await calls.input(type="rotate", rotation=0 if orientation == "Portrait" else 90)
    return {}


async def _scroll(calls: DeviceCalls, message: Mapping[str, Any]) -> dict[str, Any]:
    direction = field(message, "direction", str)
    if direction not in _SCROLL:
        raise SdkError("bad_request", f"'direction' must be one of {sorted(_SCROLL)}")
    pixels = float(field(message, "pixels", (int, float)))
    info = calls.device.describe()
    at = optional(message, "coordinate", list)
    cx, cy = info.width / 2, info.height / 2
    if at and len(at) == 2:
        cx, cy = float(at[0]), float(at[1])
    dx, dy = _SCROLL[direction]
    x2 = min(max(cx + dx * pixels, 0), info.width - 1)
    y2 = min(max(cy + dy * pixels, 0), info.height - 1)
    await calls.input(type="swipe", x1=cx, y1=cy, x2=x2, y2=y2, durationMs=300)
    return {}


async def _touch(calls: DeviceCalls, action: Mapping[str, Any], phase: str) -> None:
    x, y = _scaled(calls, action)
    await calls.input(type="touch", action=phase, x=x, y=y, pointerId=0)


async def _button(calls: DeviceCalls, action: Mapping[str, Any]) -> None:
    button = field(action, "button", str)
    if button not in _BUTTONS:
        raise SdkError("unsupported", f"button {button!r} is not supported")
    await calls.input(type="key", key=_BUTTONS[button])


async def _perform(calls: DeviceCalls, action: Mapping[str, Any]) -> dict[str, Any]:
    kind = field(action, "type", str)
    result: dict[str, Any] = {"type": kind}
    if kind == "wait":
        wait = float(field(action, "durationMs", (int, float)))
        await trio.sleep(min(max(wait, 0.0), _MAX_WAIT_MS) / 1000)
    elif kind in ("touchDown", "touchMove", "touchUp"):
        await _touch(calls, action, kind.removeprefix("touch").lower())
    elif kind == "buttonUp":
        await _button(calls, action)
    elif kind == "buttonDown":
        field(action, "button", str)  # the press happens on buttonUp
    elif kind in _ACTIONS:
        out = await _ACTIONS[kind](calls, action)
        result.update({k: v for k, v in (out or {}).items() if k.startswith("element")})
    else:
        raise SdkError("unsupported", f"action {kind!r} is not supported")
    return result


async def _perform_actions(calls: DeviceCalls, message: Mapping[str, Any]) -> dict[str, Any]:
    actions = field(message, "actions", list)
    results = []
    for action in actions:
        if not isinstance(action, dict):
            raise SdkError("bad_request", "every action must be an object")
        results.append(await _perform(calls, action))
    return {"results": results}


async def _simctl(calls: DeviceCalls, message: Mapping[str, Any]) -> dict[str, Any]:
    stderr = base64.b64encode(b"simctl is not available on this virtual device\n").decode()
    return {"type": "simctlStream", "stderr": stderr, "exitCode": 1}


async def _keep_alive(calls: DeviceCalls, message: Mapping[str, Any]) -> None:
    return None


def _unsupported(what: str) -> Handler:
    async def handler(calls: DeviceCalls, message: Mapping[str, Any]) -> dict[str, Any]:
        raise SdkError("unsupported", f"{what} is not supported on this device")

    return handler


_ACTIONS: Final[dict[str, Handler]] = {
    "tap": _tap,
    "tapElement": _tap_element,
    "setElementValue": _set_element_value,
    "typeText": _type_text,
    "pressKey": _press_key,
    "scroll": _scroll,
    "openUrl": _open_url,
    "setOrientation": _set_orientation,
}


class _Ios:
    name = "iOS"

    def __init__(self) -> None:
        self._handlers: dict[str, Handler] = {
            **_ACTIONS,
            "deviceInfo": _device_info,
            "screenshot": _screenshot,
            "elementTree": _element_tree,
            "launchApp": _launch_app,
            "terminateApp": _terminate_app,
            "listApps": _list_apps,
            "appInstallation": _install,
            "appLogTail": _app_log_tail,
            "performActions": _perform_actions,
            "simctl": _simctl,
            "keepAlive": _keep_alive,
        }
        for kind, what in (
            ("incrementElement", "incrementing an element"),
            ("decrementElement", "decrementing an element"),
            ("toggleKeyboard", "the software keyboard toggle"),
            ("exportKeychain", "keychain export"),
            ("importKeychain", "keychain import"),
            ("startVideoRecording", "video recording"),
            ("stopVideoRecording", "video recording"),
            ("listOpenFiles", "listing open files"),
            ("xcrun", "xcrun"),
            ("xcodebuild", "xcodebuild"),
            ("streamAppLog", "log streaming"),
            ("streamSyslog", "log streaming"),
        ):
            self._handlers[kind] = _unsupported(what)

    def handler(self, kind: str) -> Handler | None:
        return self._handlers.get(kind)

    def failure(self, kind: str, request_id: str, error: SdkError) -> dict[str, Any]:
        return {"type": f"{kind}Result", "id": request_id, "error": error.message}


IOS: Final = _Ios()
