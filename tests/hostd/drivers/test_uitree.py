"""The element tree (issue 15): the virtual screen's tree, `uiautomator dump` in its XML as a
real device writes it, and ``GET {apiUrl}/ui`` as JSON."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from typing import Any

import pytest
import trio
import trio.testing
from PIL import Image

from devyard.hostd.adb import services  # noqa: F401  (registers the shell's commands)
from devyard.hostd.adb.interpreter import CommandIO, Interpreter
from devyard.hostd.drivers import Platform
from devyard.hostd.drivers.uitree import (
    UiNode,
    UiTreeError,
    parse_uiautomator_xml,
    to_uiautomator_xml,
    tree_json,
    walk,
)
from devyard.hostd.drivers.virtual import VirtualDevice
from devyard.hostd.endpoints.device_api import ApiRequest, DeviceApi

from .conftest import OpenDevice

# A real Pixel's dump (Android 14 Settings, trimmed): the attributes and their order.
REAL_DUMP = (
    "<?xml version='1.0' encoding='UTF-8' standalone='yes' ?><hierarchy rotation=\"0\">"
    '<node index="0" text="" resource-id="" class="android.widget.FrameLayout" '
    'package="com.android.settings" content-desc="" checkable="false" checked="false" '
    'clickable="false" enabled="true" focusable="false" focused="false" scrollable="false" '
    'long-clickable="false" password="false" selected="false" bounds="[0,0][1080,2400]">'
    '<node index="0" text="Search settings" '
    'resource-id="com.android.settings:id/search_action_bar_title" '
    'class="android.widget.TextView" package="com.android.settings" content-desc="" '
    'checkable="false" checked="false" clickable="false" enabled="true" focusable="false" '
    'focused="false" scrollable="false" long-clickable="false" password="false" selected="false" '
    'bounds="[189,354][535,413]" />'
    '<node index="1" text="" resource-id="android:id/switch_widget" class="android.widget.Switch" '
    'package="com.android.settings" content-desc="Wi&#8208;Fi" checkable="true" checked="true" '
    'clickable="true" enabled="true" focusable="true" focused="false" scrollable="false" '
    'long-clickable="false" password="false" selected="false" bounds="[891,600][1038,700]" />'
    "</node></hierarchy>"
)


def _nodes(tree: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield tree
    for child in tree["children"]:
        yield from _nodes(child)


def test_a_real_dump_parses_and_writes_back_the_same_tree() -> None:
    tree = parse_uiautomator_xml(REAL_DUMP.encode())
    assert tree.cls == "android.widget.FrameLayout" and tree.bounds == (0, 0, 1080, 2400)
    title, switch = tree.children
    assert title.text == "Search settings" and title.bounds == (189, 354, 346, 59)
    assert switch.content_desc == "Wi\u2010Fi" and switch.checked and switch.clickable
    assert parse_uiautomator_xml(to_uiautomator_xml(tree)) == tree
    # attribute for attribute as the real tool writes them (scripts match on the text)
    assert to_uiautomator_xml(tree).replace("\u2010", "&#8208;") == REAL_DUMP


@pytest.mark.parametrize(
    "dump",
    ["", "UI hierchary dumped to: /dev/tty", "<?xml version='1.0'?><hierarchy></hierarchy>",
     "<?xml version='1.0'?><hierarchy><node bounds='x' /></hierarchy>",
     "<?xml version='1.0'?><hierarchy><node </hierarchy>"],
)  # fmt: skip
def test_what_is_not_a_dump_is_a_typed_error(dump: str) -> None:
    with pytest.raises(UiTreeError):
        parse_uiautomator_xml(dump)


def test_ids_are_stable_per_screen_and_follow_their_element() -> None:
    leaf = UiNode(cls="android.widget.EditText", bounds=(0, 0, 10, 10), resource_id="p:id/f")
    other = UiNode(cls="android.widget.TextView", bounds=(0, 10, 10, 10), text="x")
    root = UiNode(cls="android.widget.FrameLayout", bounds=(0, 0, 10, 20), children=(leaf, other))
    first = tree_json(root)
    assert tree_json(root) == first
    typed = UiNode(
        cls="android.widget.FrameLayout",
        bounds=(0, 0, 10, 20),
        children=(other, UiNode(cls=leaf.cls, bounds=leaf.bounds, resource_id=leaf.resource_id,
                                text="typed")),
    )  # fmt: skip
    field_id = first["children"][0]["id"]
    assert field_id in {n["id"] for n in tree_json(typed)["children"]}
    twins = UiNode(cls="a", bounds=(0, 0, 1, 1), children=(other, other))
    ids = [n["id"] for n in _nodes(tree_json(twins))]
    assert len(ids) == len(set(ids)), ids


def _center(node: dict[str, Any], dev: VirtualDevice) -> tuple[float, float]:
    b = node["bounds"]
    info = dev.describe()
    return (b["x"] + b["width"] / 2) / info.width, (b["y"] + b["height"] / 2) / info.height


async def _ui(dev: VirtualDevice) -> dict[str, Any]:
    request = ApiRequest.from_open(
        {"method": "GET", "path": "/ui"}, trio.testing.MemoryReceiveStream()
    )
    response = await DeviceApi(dev).route(request)
    assert response.status == 200 and response.content_type == "application/json"
    tree: dict[str, Any] = json.loads(response.body)
    return tree


@pytest.mark.parametrize("platform", [Platform.ANDROID, Platform.IOS])
async def test_tapping_a_tree_element_does_what_its_label_says(
    open_dev: OpenDevice, platform: Platform
) -> None:
    async with open_dev(platform) as dev:
        home = await _ui(dev)
        icons = [n for n in _nodes(home) if n["clickable"] and n["label"] == "Settings"]
        assert len(icons) == 1, icons
        assert await _ui(dev) == home  # the same screen, the same tree and ids
        await dev.tap(*_center(icons[0], dev))
        app = await _ui(dev)
        assert dev.foreground_app() in ("com.android.settings", "com.apple.Preferences")
        assert app["package"] == dev.foreground_app()
        rows = [n["text"] for n in _nodes(app) if n["text"].startswith("Settings item")]
        assert rows[0] == "Settings item 1", rows
        # every element the screen shows is inside it
        info = dev.describe()
        for node in _nodes(app):
            b = node["bounds"]
            assert b["x"] >= 0 and b["x"] + b["width"] <= info.width, node
            assert b["y"] >= 0 and b["y"] + b["height"] <= info.height, node
        lists = [n for n in _nodes(app) if n["scrollable"]]
        assert len(lists) == 1 and lists[0]["role"] == "list"
        await dev.scroll(0.5, 0.7, 0.0, 0.5)
        scrolled = [n["text"] for n in _nodes(await _ui(dev)) if n["text"].startswith("Settings")]
        assert scrolled[0] != "Settings item 1", scrolled
        back = next(n for n in _nodes(app) if n["label"] in ("Navigate up", "Back"))
        await dev.tap(*_center(back, dev))
        assert dev.foreground_app() is None


async def test_typed_text_shows_in_the_focused_field_unicode_included(
    android: VirtualDevice,
) -> None:
    await android.text("héllo שלום 你好")
    fields = [n for n in _nodes(await _ui(android)) if n["role"] == "textfield"]
    assert [f["text"] for f in fields] == ["héllo שלום 你好"] and fields[0]["focused"]


async def _sh(dev: VirtualDevice, line: str) -> tuple[int, str, str]:
    out, err = bytearray(), bytearray()

    async def to_out(data: bytes) -> None:
        out.extend(data)

    async def to_err(data: bytes) -> None:
        err.extend(data)

    status = await Interpreter(dev).run_line(line, CommandIO(to_out, to_err))
    return status, out.decode(), err.decode()


async def test_uiautomator_dump_writes_the_file_or_prints_it(android: VirtualDevice) -> None:
    status, out, _ = await _sh(android, "uiautomator dump")
    assert (status, out) == (0, "UI hierchary dumped to: /sdcard/window_dump.xml\n")
    written = await android.pull("/sdcard/window_dump.xml")
    assert parse_uiautomator_xml(written) == await android.ui_tree()
    status, out, _ = await _sh(android, "uiautomator dump --compressed /dev/tty")
    assert status == 0 and out.endswith("UI hierchary dumped to: /dev/tty\n")
    assert parse_uiautomator_xml(out) == await android.ui_tree()
    await android.rotate(90)  # type: ignore[arg-type]
    status, out, _ = await _sh(android, "uiautomator dump /dev/tty")
    assert '<hierarchy rotation="1">' in out
    assert parse_uiautomator_xml(out).bounds == (0, 0, 1200, 540)
    for bad in (
        "uiautomator",
        "uiautomator events",
        "uiautomator dump --nope",
        "uiautomator dump a b",
    ):
        status, _, err = await _sh(android, bad)
        assert status == 1 and err.startswith("Usage: uiautomator"), bad


async def test_ui_is_json_and_screenshot_scales_on_request(android: VirtualDevice) -> None:
    tree = await _ui(android)
    assert set(tree) >= {"id", "role", "class", "text", "label", "bounds", "children"}
    assert sum(1 for node in walk(await android.ui_tree())) == sum(1 for _ in _nodes(tree))

    async def shot(query: str) -> tuple[int, str, bytes]:
        req = ApiRequest.from_open(
            {"method": "GET", "path": "/screenshot", "query": query},
            trio.testing.MemoryReceiveStream(),
        )
        try:
            response = await DeviceApi(android).route(req)
        except Exception as exc:  # the route's typed refusal
            return 400, type(exc).__name__, b""
        return response.status, response.content_type, response.body

    status, kind, data = await shot("format=jpeg&maxEdge=600&quality=60")
    assert (status, kind) == (200, "image/jpeg")
    assert Image.open(io.BytesIO(data)).size == (270, 600)
    status, kind, data = await shot("")
    assert kind == "image/png" and Image.open(io.BytesIO(data)).size == (540, 1200)
    for bad in ("format=gif", "maxEdge=3", "quality=0", "maxEdge=x"):
        assert (await shot(bad))[:2] == (400, "RequestError"), bad
