"""The Android instance client's dialect of the SDK socket (``{apiUrl}/ws``, sdk_ws.py).

Requests carry their fields flat and again under ``payload``; answers are
``{type: "<type>Result", id, payload}`` or ``{..., error: {code, message}}`` (the client reads
``error.message``). ``asset`` (install from a URL) has no id: its answer is ``assetResult``
``{url, result: "success"|"failure", message?}``. ``keepAlive`` has no answer.

Coordinates are screen pixels, as the device API takes them. Selectors (``resourceId``,
``text``, ``contentDesc``, ``className``, ``packageName``, ``index``, ``clickable``,
``enabled``, ``focused``, ``boundsContains``) match every given field exactly against the
element tree (drivers/uitree.py) in document order; a tap on a selector taps the first match's
centre. What the device cannot do (recording, microphone, Wi-Fi shaping, key modifiers) is
answered with the ``unsupported`` code.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator, Mapping
from typing import Any, Final

from ..drivers import Key
from ..drivers.uitree import UiNode, UiTreeDevice, to_uiautomator_xml
from .sdk_calls import DeviceCalls, Handler, SdkError, field, optional

__all__ = ["ANDROID", "KEY_NAMES", "key_of"]

#: A screenshot whose PNG would pass this goes as JPEG (the relay's messages are bounded).
_MAX_PNG: Final = 2 * 1024 * 1024
_SCROLL_DIRECTIONS: Final = ("up", "down", "left", "right")

#: Android key names and KEYCODE_ numbers to the device's keys (case-insensitive names,
#: ``KEYCODE_`` optional).
KEY_NAMES: Final[Mapping[str, Key]] = {
    "home": Key.HOME, "3": Key.HOME,
    "back": Key.BACK, "4": Key.BACK,
    "enter": Key.ENTER, "return": Key.ENTER, "66": Key.ENTER,
    "del": Key.DELETE, "delete": Key.DELETE, "backspace": Key.DELETE, "67": Key.DELETE,
    "tab": Key.TAB, "61": Key.TAB,
    "escape": Key.ESCAPE, "111": Key.ESCAPE,
    "menu": Key.MENU, "82": Key.MENU,
    "power": Key.POWER, "26": Key.POWER,
    "volume_up": Key.VOLUME_UP, "24": Key.VOLUME_UP,
    "volume_down": Key.VOLUME_DOWN, "25": Key.VOLUME_DOWN,
    "app_switch": Key.APP_SWITCH, "187": Key.APP_SWITCH,
    "paste": Key.PASTE, "279": Key.PASTE,
}  # fmt: skip
_KEY_TEXT: Final = {"space": " ", "62": " "}


def key_of(name: str) -> Key | str:
    """The device key for *name*, or the text it types (a single character, space)."""
    bare = name.strip().lower().removeprefix("keycode_")
    if bare in _KEY_TEXT:
        return _KEY_TEXT[bare]
    if bare in KEY_NAMES:
        return KEY_NAMES[bare]
    if len(name.strip()) == 1:
        return name.strip()
    raise SdkError("bad_request", f"unknown key {name!r}")


async def press(calls: DeviceCalls, name: str) -> None:
    key = key_of(name)
    if isinstance(key, Key):
        await calls.input(type="key", key=key.value)
    else:
        await calls.input(type="text", text=key)


def _params(message: Mapping[str, Any]) -> Mapping[str, Any]:
    payload = message.get("payload")
    return payload if isinstance(payload, dict) else message


# ---- the element tree -----------------------------------------------------------------------


async def ui_root(calls: DeviceCalls) -> UiNode:
    device = calls.device
    if not isinstance(device, UiTreeDevice):
        raise SdkError("unsupported", "this device lists no elements")
    return await device.ui_tree()


def _indexed(node: UiNode, index: int = 0) -> Iterator[tuple[UiNode, int]]:
    yield node, index
    for i, child in enumerate(node.children):
        yield from _indexed(child, i)


def _node(node: UiNode, index: int) -> dict[str, Any]:
    x, y, w, h = node.bounds
    return {
        "index": str(index),
        "text": node.text,
        "resourceId": node.resource_id,
        "className": node.cls,
        "packageName": node.package,
        "contentDesc": node.content_desc,
        "clickable": node.clickable,
        "enabled": node.enabled,
        "focusable": node.focusable,
        "focused": node.focused,
        "scrollable": node.scrollable,
        "selected": node.selected,
        "bounds": f"[{x},{y}][{x + w},{y + h}]",
        "parsedBounds": {
            "left": x, "top": y, "right": x + w, "bottom": y + h,
            "centerX": x + w // 2, "centerY": y + h // 2,
        },
    }  # fmt: skip


_STRINGS: Final = {
    "resourceId": "resource_id",
    "text": "text",
    "contentDesc": "content_desc",
    "className": "cls",
    "packageName": "package",
}
_FLAGS: Final = {"clickable": "clickable", "enabled": "enabled", "focused": "focused"}


def _matches(node: UiNode, index: int, selector: Mapping[str, Any]) -> bool:
    for name, attribute in _STRINGS.items():
        if selector.get(name) is not None and getattr(node, attribute) != selector[name]:
            return False
    for name, attribute in _FLAGS.items():
        if selector.get(name) is not None and getattr(node, attribute) != selector[name]:
            return False
    if selector.get("index") is not None and index != selector["index"]:
        return False
    point = selector.get("boundsContains")
    if isinstance(point, dict):
        x, y, w, h = node.bounds
        px, py = point.get("x"), point.get("y")
        if not (isinstance(px, int | float) and isinstance(py, int | float)):
            raise SdkError("bad_request", "'boundsContains' needs numbers x and y")
        if not (x <= px < x + w and y <= py < y + h):
            return False
    return True


def find(root: UiNode, selector: Mapping[str, Any]) -> list[tuple[UiNode, int]]:
    known = set(_STRINGS) | set(_FLAGS) | {"index", "boundsContains"}
    unknown = sorted(set(selector) - known)
    if unknown:
        raise SdkError("bad_request", f"unknown selector fields {unknown}")
    return [(n, i) for n, i in _indexed(root) if _matches(n, i, selector)]


async def _point(calls: DeviceCalls, params: Mapping[str, Any]) -> tuple[float, float]:
    """Where a target is: its selector's first match's centre, or its x and y."""
    selector = optional(params, "selector", dict)
    if selector is not None:
        found = find(await ui_root(calls), selector)
        if not found:
            raise SdkError("element_not_found", f"no element matches {selector}")
        x, y, w, h = found[0][0].bounds
        return x + w / 2, y + h / 2
    return float(field(params, "x", (int, float))), float(field(params, "y", (int, float)))


# ---- the requests ---------------------------------------------------------------------------


async def _screenshot(calls: DeviceCalls, message: Mapping[str, Any]) -> dict[str, Any]:
    kind, data = await calls.call("GET", "/screenshot")
    if len(data) > _MAX_PNG:
        kind, data = await calls.call("GET", "/screenshot", query="format=jpeg&quality=80")
    uri = f"data:{kind};base64,{base64.b64encode(data).decode()}"
    return {"payload": {"dataUri": uri}}


async def _element_tree(calls: DeviceCalls, message: Mapping[str, Any]) -> dict[str, Any]:
    root = await ui_root(calls)
    rotation = int(calls.device.describe().rotation) // 90
    nodes = [_node(n, i) for n, i in _indexed(root)]
    return {"payload": {"xml": to_uiautomator_xml(root, rotation), "nodes": nodes}}


async def _find_element(calls: DeviceCalls, message: Mapping[str, Any]) -> dict[str, Any]:
    params = _params(message)
    selector = field(params, "selector", dict)
    limit = optional(params, "limit", int) or 20
    found = find(await ui_root(calls), selector)
    elements = [_node(n, i) for n, i in found[: max(limit, 0)]]
    return {"payload": {"elements": elements, "count": len(found)}}


async def _tap(calls: DeviceCalls, message: Mapping[str, Any]) -> dict[str, Any]:
    x, y = await _point(calls, _params(message))
    await calls.input(type="tap", x=x, y=y)
    return {"payload": {"x": round(x), "y": round(y)}}


async def _set_text(calls: DeviceCalls, message: Mapping[str, Any]) -> dict[str, Any]:
    params = _params(message)
    text = field(params, "text", str)
    if params.get("selector") is not None or params.get("x") is not None:
        x, y = await _point(calls, params)
        await calls.input(type="tap", x=x, y=y)  # focus the field first
    if text:
        await calls.input(type="text", text=text)
    return {"payload": {"textLength": len(text)}}


async def _press_key(calls: DeviceCalls, message: Mapping[str, Any]) -> dict[str, Any]:
    params = _params(message)
    name = optional(params, "keyName", str) or field(params, "key", str)
    if optional(params, "modifiers", list):
        raise SdkError("unsupported", "key modifiers are not supported on this device")
    await press(calls, name)
    return {"payload": {"key": name}}


def _swipe_line(
    box: tuple[float, float, float, float], direction: str, amount: float
) -> tuple[float, float, float, float]:
    """The finger's path that scrolls *box*'s content *direction*: content moves the other
    way from the finger. *amount* is tenths of the box (1 to 8)."""
    x, y, w, h = box
    cx, cy = x + w / 2, y + h / 2
    share = min(max(amount, 1.0), 8.0) / 10
    dx, dy = {"up": (0, 1), "down": (0, -1), "left": (1, 0), "right": (-1, 0)}[direction]
    half_x, half_y = dx * w * share / 2, dy * h * share / 2
    return cx - half_x, cy - half_y, cx + half_x, cy + half_y


async def _scroll(
    calls: DeviceCalls, params: Mapping[str, Any], box: tuple[float, float, float, float]
) -> dict[str, Any]:
    direction = field(params, "direction", str)
    if direction not in _SCROLL_DIRECTIONS:
        raise SdkError("bad_request", f"'direction' must be one of {_SCROLL_DIRECTIONS}")
    amount = float(optional(params, "amount", (int, float)) or 6)
    x1, y1, x2, y2 = _swipe_line(box, direction, amount)
    info = calls.device.describe()
    x1, x2 = (min(max(v, 0), info.width - 1) for v in (x1, x2))
    y1, y2 = (min(max(v, 0), info.height - 1) for v in (y1, y2))
    await calls.input(type="swipe", x1=x1, y1=y1, x2=x2, y2=y2, durationMs=300)
    return {
        "payload": {
            "direction": direction,
            "startX": round(x1), "startY": round(y1), "endX": round(x2), "endY": round(y2),
        }
    }  # fmt: skip


async def _scroll_screen(calls: DeviceCalls, message: Mapping[str, Any]) -> dict[str, Any]:
    info = calls.device.describe()
    return await _scroll(calls, _params(message), (0, 0, info.width, info.height))


async def _scroll_element(calls: DeviceCalls, message: Mapping[str, Any]) -> dict[str, Any]:
    params = _params(message)
    selector = field(params, "selector", dict)
    found = find(await ui_root(calls), selector)
    if not found:
        raise SdkError("element_not_found", f"no element matches {selector}")
    x, y, w, h = found[0][0].bounds
    return await _scroll(calls, params, (x, y, w, h))


async def _open_url(calls: DeviceCalls, message: Mapping[str, Any]) -> dict[str, Any]:
    url = field(_params(message), "url", str)
    await calls.call("POST", "/open-url", {"url": url})
    return {"payload": {"url": url}}


async def _asset(calls: DeviceCalls, message: Mapping[str, Any]) -> dict[str, Any] | None:
    """Install from a URL (the client's ``sendAsset``): answered by url, not by id."""
    url = message.get("url")
    if not isinstance(url, str) or not url:
        return {"url": url, "result": "failure", "message": "'url' is required"}
    try:
        await calls.call("POST", "/apps", {"url": url})
    except SdkError as exc:
        return {"url": url, "result": "failure", "message": exc.message}
    return {"url": url, "result": "success"}


async def _keep_alive(calls: DeviceCalls, message: Mapping[str, Any]) -> None:
    return None  # activity: the edge counts the open socket; there is no answer


def _unsupported(what: str) -> Handler:
    async def handler(calls: DeviceCalls, message: Mapping[str, Any]) -> dict[str, Any]:
        raise SdkError("unsupported", f"{what} is not supported on this device")

    return handler


class _Android:
    name = "Android"

    def __init__(self) -> None:
        self._handlers: dict[str, Handler] = {
            "screenshot": _screenshot,
            "getElementTree": _element_tree,
            "findElement": _find_element,
            "tap": _tap,
            "setText": _set_text,
            "pressKey": _press_key,
            "scrollScreen": _scroll_screen,
            "scrollElement": _scroll_element,
            "openUrl": _open_url,
            "asset": _asset,
            "keepAlive": _keep_alive,
            "playOnMicrophone": _unsupported("microphone input"),
            "setWifiBandwidth": _unsupported("Wi-Fi bandwidth shaping"),
            "startRecording": _unsupported("video recording"),
            "stopRecording": _unsupported("video recording"),
        }

    def handler(self, kind: str) -> Handler | None:
        return self._handlers.get(kind)

    def failure(self, kind: str, request_id: str, error: SdkError) -> dict[str, Any]:
        if kind == "asset":  # pragma: no cover - _asset answers its own failures
            return {"type": "assetResult", "result": "failure", "message": error.message}
        return {
            "type": f"{kind}Result",
            "id": request_id,
            "error": {"code": error.code, "message": error.message, "retriable": False},
        }


ANDROID: Final = _Android()
