"""The element tree of a device's screen: one value, three spellings.

A `UiNode` is what Android's UI Automator and iOS's accessibility API report about one element:
its class, text, content description (the accessibility label), resource id, package, bounds
in screen pixels as currently rotated, and its state flags. A device that can list its
elements implements `UiTreeDevice`. Three spellings of the same tree, all pure:

- `to_uiautomator_xml`: what ``uiautomator dump`` writes on Android (``<hierarchy
  rotation="R"><node index=.. text=.. resource-id=.. class=.. package=.. content-desc=..
  checkable=.. ... bounds="[l,t][r,b]">``), attribute for attribute, so tools that parse a
  real dump (Appium, Maestro, mobile-mcp) parse ours;
- `parse_uiautomator_xml`: its inverse, for a real Android's dump read through adb;
- `tree_json`: the device API's ``GET {apiUrl}/ui`` shape (docs/endpoints.md): ``{id, role,
  class, text, label, resourceId, bounds: {x, y, width, height}, <flags>, children}``.

Ids are stable per screen: an element's id is a short hash of its path from the root, each
step the element's class and its resource id or label or (for anonymous elements) its index
among its siblings. The same screen gives the same ids, an element keeps its id while other
elements come and go beside it, and text typed into a field does not change the field's id.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from typing import Any, Final, Protocol, runtime_checkable
from xml.etree import ElementTree
from xml.sax.saxutils import quoteattr

import attrs

__all__ = [
    "FLAGS",
    "MAX_DUMP_BYTES",
    "UiNode",
    "UiTreeDevice",
    "UiTreeError",
    "parse_uiautomator_xml",
    "role_of",
    "to_uiautomator_xml",
    "tree_json",
    "walk",
]

#: A dump bigger than this is refused rather than parsed (a real screen's is 10-200 KB).
MAX_DUMP_BYTES: Final = 8 * 1024 * 1024
#: The boolean attributes of a uiautomator node, in the order the real dump writes them.
FLAGS: Final = (
    "checkable",
    "checked",
    "clickable",
    "enabled",
    "focusable",
    "focused",
    "scrollable",
    "long-clickable",
    "password",
    "selected",
)
_BOUNDS: Final = re.compile(r"\[(-?\d+),(-?\d+)\]\[(-?\d+),(-?\d+)\]")
_MAX_DEPTH: Final = 200


class UiTreeError(ValueError):
    """A dump that is not a uiautomator hierarchy."""


@attrs.frozen
class UiNode:
    """One element. ``bounds`` is (x, y, width, height) in screen pixels as rotated."""

    cls: str
    bounds: tuple[int, int, int, int]
    text: str = ""
    content_desc: str = ""
    resource_id: str = ""
    package: str = ""
    clickable: bool = False
    long_clickable: bool = False
    scrollable: bool = False
    focusable: bool = False
    focused: bool = False
    enabled: bool = True
    checkable: bool = False
    checked: bool = False
    selected: bool = False
    password: bool = False
    children: tuple[UiNode, ...] = ()

    def flag(self, name: str) -> bool:
        return bool(getattr(self, name.replace("-", "_")))


@runtime_checkable
class UiTreeDevice(Protocol):
    """A device that lists the elements on its screen."""

    async def ui_tree(self) -> UiNode:
        """The current screen's element tree; the root spans the screen."""
        ...


def walk(node: UiNode) -> Iterator[UiNode]:
    """Pre-order."""
    yield node
    for child in node.children:
        yield from walk(child)


# ---- uiautomator XML ---------------------------------------------------------------------


def _xml_node(node: UiNode, index: int, out: list[str]) -> None:
    x, y, w, h = node.bounds
    attributes = [
        f"index={quoteattr(str(index))}",
        f"text={quoteattr(node.text)}",
        f"resource-id={quoteattr(node.resource_id)}",
        f"class={quoteattr(node.cls)}",
        f"package={quoteattr(node.package)}",
        f"content-desc={quoteattr(node.content_desc)}",
        *(f'{flag}="{str(node.flag(flag)).lower()}"' for flag in FLAGS),
        f'bounds="[{x},{y}][{x + w},{y + h}]"',
    ]
    if not node.children:
        out.append(f"<node {' '.join(attributes)} />")
        return
    out.append(f"<node {' '.join(attributes)}>")
    for i, child in enumerate(node.children):
        _xml_node(child, i, out)
    out.append("</node>")


def to_uiautomator_xml(root: UiNode, rotation: int = 0) -> str:
    """``uiautomator dump``'s file: one line, as the real tool writes it. *rotation* is
    Android's ROTATION_* (0-3), not degrees."""
    out = [
        "<?xml version='1.0' encoding='UTF-8' standalone='yes' ?>",
        f'<hierarchy rotation="{rotation}">',
    ]
    _xml_node(root, 0, out)
    out.append("</hierarchy>")
    return "".join(out)


def _parse_node(element: ElementTree.Element, depth: int) -> UiNode:
    if depth > _MAX_DEPTH:
        raise UiTreeError(f"the hierarchy is deeper than {_MAX_DEPTH}")
    match = _BOUNDS.fullmatch(element.get("bounds", ""))
    if match is None:
        raise UiTreeError(f"a node without bounds: {element.attrib!r:.200}")
    left, top, right, bottom = (int(v) for v in match.groups())
    defaults = {"enabled": "true"}
    flags = {
        flag.replace("-", "_"): element.get(flag, defaults.get(flag, "false")) == "true"
        for flag in FLAGS
    }
    return UiNode(
        cls=element.get("class", ""),
        bounds=(left, top, max(0, right - left), max(0, bottom - top)),
        text=element.get("text", ""),
        content_desc=element.get("content-desc", ""),
        resource_id=element.get("resource-id", ""),
        package=element.get("package", ""),
        children=tuple(_parse_node(child, depth + 1) for child in element if child.tag == "node"),
        **flags,
    )


def parse_uiautomator_xml(data: str | bytes) -> UiNode:
    """The tree of a ``uiautomator dump`` (a real device's or ours). Several top-level nodes
    (one per window with ``--windows``) come back under a synthetic root spanning them."""
    if len(data) > MAX_DUMP_BYTES:
        raise UiTreeError(f"the dump is larger than {MAX_DUMP_BYTES} bytes")
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    start = text.find("<?xml")
    end = text.rfind("</hierarchy>")
    if start < 0 or end < 0:
        raise UiTreeError(f"not a uiautomator dump: {text[:200]!r}")
    try:
        # The device's own output; expat expands no external entities and bounds the
        # amplification of internal ones, and the size is bounded above.
        hierarchy = ElementTree.fromstring(text[start : end + len("</hierarchy>")])  # noqa: S314
    except ElementTree.ParseError as exc:
        raise UiTreeError(f"the dump is not well-formed XML: {exc}") from None
    nodes = [_parse_node(child, 0) for child in hierarchy if child.tag == "node"]
    if not nodes:
        raise UiTreeError("the dump has no nodes")
    if len(nodes) == 1:
        return nodes[0]
    right = max(n.bounds[0] + n.bounds[2] for n in nodes)
    bottom = max(n.bounds[1] + n.bounds[3] for n in nodes)
    return UiNode(cls="hierarchy", bounds=(0, 0, right, bottom), children=tuple(nodes))


# ---- the device API's JSON -----------------------------------------------------------------

_ROLES: Final = (
    ("edittext", "textfield"),
    ("textfield", "textfield"),
    ("searchfield", "textfield"),
    ("securetextfield", "textfield"),
    ("imagebutton", "button"),
    ("button", "button"),
    ("checkbox", "checkbox"),
    ("switch", "switch"),
    ("toggle", "switch"),
    ("radiobutton", "radio"),
    ("recyclerview", "list"),
    ("listview", "list"),
    ("scrollview", "list"),
    ("table", "list"),
    ("collectionview", "list"),
    ("cell", "cell"),
    ("image", "image"),
    ("textview", "text"),
    ("statictext", "text"),
    ("webview", "web"),
    ("application", "application"),
    ("window", "window"),
)


def role_of(node: UiNode) -> str:
    """A platform-neutral role from the class name (``android.widget.EditText`` and
    ``XCUIElementTypeTextField`` are both ``textfield``)."""
    name = node.cls.rsplit(".", 1)[-1].lower().removeprefix("xcuielementtype")
    for needle, role in _ROLES:
        if needle in name:
            return role
    if node.clickable:
        return "button"
    return "group"


def _step(node: UiNode, index: int) -> str:
    name = node.resource_id or node.content_desc
    return f"{node.cls}#{name}" if name else f"{node.cls}[{index}]"


def _node_json(node: UiNode, path: str, seen: dict[str, int]) -> dict[str, Any]:
    digest = hashlib.sha1(path.encode(), usedforsecurity=False).hexdigest()[:6]
    ident = f"e{digest}"
    count = seen.get(ident, 0)
    seen[ident] = count + 1
    if count:  # two elements with the same path (same class and name): keep both apart
        ident = f"{ident}-{count}"
    x, y, w, h = node.bounds
    out: dict[str, Any] = {
        "id": ident,
        "role": role_of(node),
        "class": node.cls,
        "text": node.text,
        "label": node.content_desc,
        "resourceId": node.resource_id,
        "package": node.package,
        "bounds": {"x": x, "y": y, "width": w, "height": h},
    }
    for flag in FLAGS:
        out[_camel(flag)] = node.flag(flag)
    out["children"] = [
        _node_json(child, f"{path}/{_step(child, i)}", seen)
        for i, child in enumerate(node.children)
    ]
    return out


def _camel(flag: str) -> str:
    head, *rest = flag.split("-")
    return head + "".join(part.title() for part in rest)


def tree_json(root: UiNode) -> dict[str, Any]:
    """The tree as ``GET {apiUrl}/ui`` returns it (JSON values only)."""
    return _node_json(root, _step(root, 0), {})
