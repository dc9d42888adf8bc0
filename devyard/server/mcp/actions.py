"""What the MCP tools do to one device, in device-API requests (`device.DeviceApiClient`).

`Device` resolves targets (an element id of the current screen, or x/y in the tools' space,
space.py) to device pixels, runs gestures with the device API's input verbs, observes (the
screenshot, scaled by hostd, plus the compact tree), and settles: after an `act` batch it
samples the element tree and a tiny screenshot every `SETTLE_POLL_S` until two samples in a
row are the same, within the caller's bound, so the observation it returns is never of a
screen still changing. Failures are `ToolError`s whose text says what to do next.
"""

from __future__ import annotations

import base64
import json
from typing import Any, Final

import trio

from .device import DeviceApiClient, DeviceApiError
from .space import MAX_EDGE, Space, compact_tree, find_element, image_size

__all__ = ["SETTLE_POLL_S", "Device", "Observation", "ToolError"]

SETTLE_POLL_S: Final = 0.1
DOUBLE_TAP_GAP_S: Final = 0.08
_KEYS: Final = (
    "home", "back", "app_switch", "enter", "delete", "tab", "escape", "paste", "power",
    "volume_up", "volume_down", "menu",
)  # fmt: skip
_ROTATIONS: Final = {
    "portrait": 0, "landscape": 90, "portrait_upside_down": 180, "landscape_right": 270
}  # fmt: skip
_DIRECTIONS: Final = {"up": (0, -1), "down": (0, 1), "left": (-1, 0), "right": (1, 0)}


class ToolError(Exception):
    """A tool call that failed; the message is what the agent reads (no stack trace)."""


def explain(exc: DeviceApiError) -> ToolError:
    hints = {
        "app_not_found": " Call list_apps for the installed app ids.",
        "file_not_found": " Check the path (absolute, as the device sees it).",
        "host_unavailable": " The device's host is reconnecting; try again in a few seconds.",
        "gone": " The instance has ended; create a new one.",
        "unsupported": "",
        "install_failed": " Check that the file is an app for this platform.",
        "bad_request": "",
    }
    return ToolError(f"{exc.message} ({exc.reason}).{hints.get(exc.reason, '')}")


class Observation:
    def __init__(self, meta: dict[str, Any], image: bytes | None, mime: str) -> None:
        self.meta = meta
        self.image = image
        self.mime = mime

    def content(self) -> list[dict[str, Any]]:
        """MCP content items: the image (if any), then the JSON text."""
        items: list[dict[str, Any]] = []
        if self.image is not None:
            data = base64.b64encode(self.image).decode()
            items.append({"type": "image", "data": data, "mimeType": self.mime})
        items.append({"type": "text", "text": json.dumps(self.meta, ensure_ascii=False)})
        return items


class Device:
    def __init__(self, client: DeviceApiClient) -> None:
        self.api = client

    async def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            reply = await self.api.request(method, path, **kwargs)
        except DeviceApiError as exc:
            raise explain(exc) from None
        return reply

    async def input(self, event: dict[str, Any]) -> None:
        await self._call("POST", "/input", json_body=event)

    async def info(self) -> dict[str, Any]:
        described: dict[str, Any] = (await self._call("GET", "/")).json()
        if not described.get("hasScreen"):
            raise ToolError("this instance has no screen")
        return described

    async def space(self) -> Space:
        info = await self.info()
        return Space.of(int(info["width"]), int(info["height"]))

    async def tree(self) -> dict[str, Any]:
        tree: dict[str, Any] = (await self._call("GET", "/ui")).json()
        return tree

    # ---- targets --------------------------------------------------------------------------

    async def point(self, args: dict[str, Any], prefix: str = "") -> tuple[float, float]:
        """Device pixels of ``element`` (its centre) or of ``x``/``y`` in the tools' space."""
        space = await self.space()
        element = args.get(prefix + "element")
        if element is not None:
            node = find_element(await self.tree(), str(element))
            if node is None:
                raise ToolError(
                    f"element {element!r} is not on the screen now; call observe for the "
                    "current elements and their ids"
                )
            b = node["bounds"]
            return b["x"] + b["width"] / 2, b["y"] + b["height"] / 2
        raw_x, raw_y = args.get(prefix + "x"), args.get(prefix + "y")
        if not isinstance(raw_x, int | float) or not isinstance(raw_y, int | float):
            raise ToolError(f"give {prefix}element (an id from observe) or {prefix}x and {prefix}y")
        x, y = float(raw_x), float(raw_y)
        if not space.contains(x, y):
            raise ToolError(
                f"({x}, {y}) is outside the {space.width}x{space.height} coordinate space of "
                "observe's screenshot"
            )
        return space.to_device(x, y)

    # ---- gestures -------------------------------------------------------------------------

    async def tap(self, args: dict[str, Any]) -> str:
        x, y = await self.point(args)
        await self.input({"type": "tap", "x": x, "y": y})
        return "tapped"

    async def double_tap(self, args: dict[str, Any]) -> str:
        x, y = await self.point(args)
        await self.input({"type": "tap", "x": x, "y": y})
        await trio.sleep(DOUBLE_TAP_GAP_S)
        await self.input({"type": "tap", "x": x, "y": y})
        return "double-tapped"

    async def long_press(self, args: dict[str, Any]) -> str:
        x, y = await self.point(args)
        held = _bounded(args.get("durationMs", 800), 100, 10_000, "durationMs")
        await self.input({"type": "touch", "action": "down", "x": x, "y": y})
        await trio.sleep(held / 1000)
        await self.input({"type": "touch", "action": "up", "x": x, "y": y})
        return f"pressed for {held:g} ms"

    async def swipe(self, args: dict[str, Any]) -> str:
        info = await self.info()
        width, height = float(info["width"]), float(info["height"])
        duration = _bounded(args.get("durationMs", 300), 50, 5000, "durationMs")
        if args.get("direction") is not None:
            dx, dy = _direction(args["direction"])
            has_start = args.get("element") is not None or args.get("x") is not None
            x1, y1 = await self.point(args) if has_start else (width / 2, height / 2)
            distance = _bounded(args.get("distance", 0.5), 0.05, 1.0, "distance")
            x2 = min(max(x1 + dx * distance * width, 0), width - 1)
            y2 = min(max(y1 + dy * distance * height, 0), height - 1)
        else:
            x1, y1 = await self.point(args)
            x2, y2 = await self.point(args, prefix="to_")
        event = {"type": "swipe", "x1": x1, "y1": y1, "x2": x2, "y2": y2, "durationMs": duration}
        await self.input(event)
        return "swiped"

    async def scroll(self, args: dict[str, Any]) -> str:
        dx, dy = _direction(args.get("direction"))
        amount = _bounded(args.get("amount", 0.5), 0.05, 5.0, "amount")
        has_start = args.get("element") is not None or args.get("x") is not None
        if has_start:
            x, y = await self.point(args)
        else:
            info = await self.info()
            x, y = info["width"] / 2, info["height"] / 2
        await self.input({"type": "scroll", "x": x, "y": y, "dx": dx * amount, "dy": dy * amount})
        return f"scrolled {args.get('direction')}"

    async def type_text(self, args: dict[str, Any]) -> str:
        text = args.get("text")
        if not isinstance(text, str):
            raise ToolError("give text (a string; any script)")
        if args.get("element") is not None:
            await self.tap(args)
        await self.input({"type": "text", "text": text})
        if args.get("submit"):
            await self.input({"type": "key", "key": "enter"})
        return f"typed {len(text)} characters"

    async def press_key(self, args: dict[str, Any]) -> str:
        key = args.get("key")
        if key not in _KEYS:
            raise ToolError(f"key must be one of {', '.join(_KEYS)}")
        await self.input({"type": "key", "key": key})
        return f"pressed {key}"

    async def set_orientation(self, args: dict[str, Any]) -> str:
        orientation = args.get("orientation")
        if orientation not in _ROTATIONS:
            raise ToolError(f"orientation must be one of {', '.join(_ROTATIONS)}")
        await self.input({"type": "rotate", "rotation": _ROTATIONS[orientation]})
        return f"orientation {orientation}"

    async def open_url(self, args: dict[str, Any]) -> str:
        url = args.get("url")
        if not isinstance(url, str) or not url:
            raise ToolError("give url (an absolute URL or a deep link)")
        await self._call("POST", "/open-url", json_body={"url": url})
        return f"opened {url}"

    # ---- observing ------------------------------------------------------------------------

    async def observe(self, args: dict[str, Any]) -> Observation:
        fmt = args.get("format", "jpeg")
        tree_mode = args.get("tree", "interactive")
        if fmt not in ("jpeg", "png", "none"):
            raise ToolError("format must be jpeg, png or none (tree only)")
        if tree_mode not in ("interactive", "full", "none"):
            raise ToolError("tree must be interactive, full or none")
        quality = int(_bounded(args.get("quality", 70), 10, 95, "quality"))
        info = await self.info()
        space = Space.of(int(info["width"]), int(info["height"]))
        image = None
        if fmt != "none":
            query = f"format={fmt}&maxEdge={MAX_EDGE}&quality={quality}"
            image = (await self._call("GET", "/screenshot", query=query)).body
            if image_size(image) != (space.width, space.height):  # it rotated in between
                info = await self.info()
                space = Space.of(int(info["width"]), int(info["height"]))
        meta: dict[str, Any] = {
            "coordinates": space.describe(),
            "screen": {
                "width": info["width"],
                "height": info["height"],
                "rotation": info.get("rotation", 0),
            },
        }
        if tree_mode != "none":
            tree = await self.tree()
            meta["foreground"] = tree.get("package", "")
            meta["elements"] = compact_tree(tree, space, full=tree_mode == "full")
        return Observation(meta, image, f"image/{fmt}")

    async def settle(self, timeout_ms: float) -> tuple[bool, float]:
        """Wait until two samples in a row match (bounded); (settled, milliseconds)."""
        started = trio.current_time()
        previous = None
        with trio.move_on_after(timeout_ms / 1000):
            while True:
                tree = await self._call("GET", "/ui")
                picture = await self._call(
                    "GET", "/screenshot", query="format=jpeg&maxEdge=64&quality=40"
                )
                sample = (tree.body, picture.body)
                if sample == previous:
                    return True, (trio.current_time() - started) * 1000
                previous = sample
                await trio.sleep(SETTLE_POLL_S)
        return False, (trio.current_time() - started) * 1000


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _bounded(value: object, low: float, high: float, name: str) -> float:
    if not _number(value) or not low <= float(value) <= high:  # type: ignore[arg-type]
        raise ToolError(f"{name} must be a number within {low:g}-{high:g}")
    return float(value)  # type: ignore[arg-type]


def _direction(value: object) -> tuple[int, int]:
    if value not in _DIRECTIONS:
        raise ToolError("direction must be up, down, left or right")
    return _DIRECTIONS[str(value)]
