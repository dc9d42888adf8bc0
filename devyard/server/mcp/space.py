"""The MCP tools' one coordinate space, and the compact element tree. Pure.

The space is the screen as currently rotated, scaled so its longer side is at most `MAX_EDGE`
pixels (never enlarged): exactly the pixels of the screenshot `observe` returns. Every x/y a
tool takes and every bounds it returns are in it, so an agent reads a point off the image and
passes it back as it is; the server converts to device pixels. `scaled_size` is the formula
hostd's ``GET /screenshot?maxEdge=`` uses (devyard/hostd/endpoints/imaging.py); the two
processes do not import each other, and `image_size` checks the result.

The compact tree keeps every element that has a text, a label, a resource id or an action
(clickable, long-clickable, scrollable, focusable, checkable), and hoists the children of the
rest; elements of zero size go. Keys are short and flags appear only when set.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any, Final

import attrs

__all__ = [
    "MAX_EDGE",
    "Space",
    "compact_tree",
    "find_element",
    "image_size",
    "scaled_size",
    "walk_json",
]

#: The longer side of the coordinate space and of `observe`'s image: under the 1568 px
#: clients rescale at, small enough for their tool-result limits (docs/mcp.md).
MAX_EDGE: Final = 1280
_FLAGS: Final = ("clickable", "longClickable", "scrollable", "focused", "checked", "selected")
_ACTIONS: Final = ("clickable", "longClickable", "scrollable", "focusable", "checkable")


def scaled_size(width: int, height: int, max_edge: int | None) -> tuple[int, int]:
    if max_edge is None or max(width, height) <= max_edge:
        return width, height
    scale = max_edge / max(width, height)
    return max(1, round(width * scale)), max(1, round(height * scale))


@attrs.frozen
class Space:
    """Tool coordinates <-> device pixels, for one screen size."""

    device_width: int
    device_height: int
    width: int
    height: int

    @classmethod
    def of(cls, device_width: int, device_height: int) -> Space:
        return cls(device_width, device_height, *scaled_size(device_width, device_height, MAX_EDGE))

    def contains(self, x: float, y: float) -> bool:
        return 0 <= x < self.width and 0 <= y < self.height

    def to_device(self, x: float, y: float) -> tuple[float, float]:
        dx = x * self.device_width / self.width
        dy = y * self.device_height / self.height
        return min(dx, self.device_width - 0.5), min(dy, self.device_height - 0.5)

    def box(self, bounds: dict[str, Any]) -> list[int]:
        """A device API ``bounds`` object as ``[x, y, width, height]`` in this space."""
        sx, sy = self.width / self.device_width, self.height / self.device_height
        x, y = round(bounds["x"] * sx), round(bounds["y"] * sy)
        right = round((bounds["x"] + bounds["width"]) * sx)
        bottom = round((bounds["y"] + bounds["height"]) * sy)
        return [x, y, right - x, bottom - y]

    def describe(self) -> dict[str, Any]:
        return {
            "width": self.width,
            "height": self.height,
            "unit": "pixels of the observe screenshot; every x/y you pass and every bounds "
            "returned are in this space",
        }


def walk_json(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("children", ()):
        yield from walk_json(child)


def find_element(tree: dict[str, Any], element_id: str) -> dict[str, Any] | None:
    return next((n for n in walk_json(tree) if n.get("id") == element_id), None)


def _matters(node: dict[str, Any]) -> bool:
    return bool(
        node.get("text")
        or node.get("label")
        or node.get("resourceId")
        or any(node.get(flag) for flag in _ACTIONS)
    )


def _compact(node: dict[str, Any], space: Space, full: bool) -> list[dict[str, Any]]:
    children = [c for child in node.get("children", ()) for c in _compact(child, space, full)]
    bounds = node["bounds"]
    if bounds["width"] <= 0 or bounds["height"] <= 0:
        return children
    if not full and not _matters(node):
        return children
    out: dict[str, Any] = {"id": node["id"], "role": node["role"]}
    for key in ("text", "label", "resourceId"):
        if node.get(key):
            out[key] = node[key]
    out["bounds"] = space.box(bounds)
    for flag in _FLAGS:
        if node.get(flag):
            out[flag] = True
    if node.get("enabled") is False:
        out["disabled"] = True
    if full:
        out["class"] = node.get("class", "")
    if children:
        out["children"] = children
    return [out]


def compact_tree(tree: dict[str, Any], space: Space, *, full: bool = False) -> list[dict[str, Any]]:
    """The elements worth an agent's attention, nested, bounds in *space*."""
    return _compact(tree, space, full)


def image_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) of a PNG or baseline/progressive JPEG, else None."""
    if data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) >= 24:
        width, height = struct.unpack(">II", data[16:24])
        return int(width), int(height)
    if data[:2] != b"\xff\xd8":
        return None
    at = 2
    while at + 9 < len(data):
        if data[at] != 0xFF:
            return None
        marker = data[at + 1]
        length = int.from_bytes(data[at + 2 : at + 4], "big")
        if marker in (0xC0, 0xC1, 0xC2):
            height, width = struct.unpack(">HH", data[at + 5 : at + 9])
            return int(width), int(height)
        at += 2 + length
    return None
