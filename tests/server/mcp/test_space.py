"""The MCP tools' coordinate space and compact tree (devyard/server/mcp/space.py): pure."""

from __future__ import annotations

import io
from typing import Any

import pytest
from PIL import Image

from devyard.hostd.endpoints.imaging import scaled_size as hostd_scaled_size
from devyard.server.mcp.space import (
    MAX_EDGE,
    Space,
    compact_tree,
    find_element,
    image_size,
    scaled_size,
)


def _node(ident: str, x: int, y: int, w: int, h: int, **fields: Any) -> dict[str, Any]:
    return {
        "id": ident, "role": fields.pop("role", "group"), "class": "c", "text": "", "label": "",
        "resourceId": "", "bounds": {"x": x, "y": y, "width": w, "height": h},
        "clickable": False, "enabled": True, "children": [], **fields,
    }  # fmt: skip


@pytest.mark.parametrize("size", [(540, 1200), (1080, 2400), (2400, 1080), (393, 852), (1, 5000)])
def test_the_space_is_the_screenshot_and_matches_hostd(size: tuple[int, int]) -> None:
    space = Space.of(*size)
    assert (space.width, space.height) == scaled_size(*size, MAX_EDGE)
    assert (space.width, space.height) == hostd_scaled_size(*size, MAX_EDGE)  # one formula
    assert max(space.width, space.height) <= MAX_EDGE
    # a point read off the image maps inside the device's screen, corners included
    for x, y in ((0, 0), (space.width - 0.01, space.height - 0.01), (space.width / 2, 0)):
        dx, dy = space.to_device(x, y)
        assert 0 <= dx < size[0] and 0 <= dy < size[1]


def test_bounds_scale_into_the_space() -> None:
    space = Space.of(1080, 2400)
    assert (space.width, space.height) == (576, 1280)
    assert space.box({"x": 108, "y": 240, "width": 540, "height": 1200}) == [58, 128, 288, 640]
    assert space.to_device(288, 640) == (540.0, 1200.0)


def test_the_compact_tree_keeps_what_matters_and_hoists_the_rest() -> None:
    checkbox = _node("e2", 10, 10, 20, 20, role="checkbox", checkable=True, checked=True)
    blank = _node("e3", 0, 40, 100, 10)
    empty = _node("e4", 0, 0, 0, 0, text="zero size")
    disabled = _node("e5", 0, 60, 100, 20, text="Off", enabled=False)
    layout = _node("e1", 0, 0, 100, 100, children=[checkbox, blank, empty, disabled])
    root = _node("e0", 0, 0, 100, 100, children=[layout])
    space = Space.of(100, 100)
    assert compact_tree(root, space) == [
        {"id": "e2", "role": "checkbox", "bounds": [10, 10, 20, 20], "checked": True},
        {"id": "e5", "role": "group", "text": "Off", "bounds": [0, 60, 100, 20], "disabled": True},
    ]
    full = compact_tree(root, space, full=True)
    assert [n["id"] for n in full] == ["e0"] and full[0]["children"][0]["id"] == "e1"
    assert find_element(root, "e5") is disabled and find_element(root, "nope") is None


def test_image_sizes_are_read_from_the_bytes() -> None:
    for fmt in ("PNG", "JPEG"):
        out = io.BytesIO()
        Image.new("RGB", (37, 91)).save(out, format=fmt)
        assert image_size(out.getvalue()) == (37, 91)
    assert image_size(b"GIF89a") is None and image_size(b"\xff\xd8\x00") is None
