"""The virtual screen's element tree: what UI Automator (Android) or the accessibility API
(iOS) would report about a `Screen`, from the same `Layout` that renders and hit-tests it.

Pure and deterministic: the same screen value gives the same tree, so element ids (computed
from paths in `uitree.tree_json`) are stable per screen. Every element the renderer draws and
a touch can reach is in the tree, with the bounds a tap must land in: launcher icons (their
whole cell, as `Layout.hit` tests it), the text field, the app bar's back button, the visible
rows of the scrolling content (clipped to it) and the navigation buttons. A screen that is off
has only its root.
"""

from __future__ import annotations

from typing import Final
from urllib.parse import urlsplit

from ..base import Platform
from ..uitree import UiNode
from .layout import Layout, Rect
from .ui import CONTENT_ROWS, Screen, UiApp

__all__ = ["tree_of"]

_SPRINGBOARD: Final = "com.apple.springboard"
_LAUNCHER: Final = {Platform.ANDROID: "com.android.launcher3", Platform.IOS: _SPRINGBOARD}
_SYSTEM_UI: Final = {Platform.ANDROID: "com.android.systemui", Platform.IOS: _SPRINGBOARD}
_RECYCLER: Final = "androidx.recyclerview.widget.RecyclerView"
_NAV_NAMES: Final = (("back", "Back"), ("home", "Home"), ("recent_apps", "Overview"))


class _Classes:
    """Class names of one platform."""

    def __init__(self, ios: bool) -> None:
        self.root = "XCUIElementTypeApplication" if ios else "android.widget.FrameLayout"
        self.group = "XCUIElementTypeOther" if ios else "android.view.View"
        self.bar = "XCUIElementTypeStatusBar" if ios else "android.view.View"
        self.text = "XCUIElementTypeStaticText" if ios else "android.widget.TextView"
        self.field = "XCUIElementTypeTextField" if ios else "android.widget.EditText"
        self.search = "XCUIElementTypeSearchField" if ios else "android.widget.EditText"
        self.icon = "XCUIElementTypeIcon" if ios else "android.widget.TextView"
        self.grid = "XCUIElementTypeCollectionView" if ios else _RECYCLER
        self.list = "XCUIElementTypeTable" if ios else _RECYCLER
        self.row = "XCUIElementTypeCell" if ios else "android.widget.TextView"
        self.button = "XCUIElementTypeButton" if ios else "android.widget.ImageButton"
        self.nav_button = "XCUIElementTypeButton" if ios else "android.widget.ImageView"
        self.nav_bar = "XCUIElementTypeNavigationBar" if ios else "android.view.ViewGroup"


def _box(rect: Rect) -> tuple[int, int, int, int]:
    return (rect.left, rect.top, max(0, rect.width), max(0, rect.height))


def _rid(package: str, name: str, ios: bool) -> str:
    """Android's ``package:id/name``; iOS's accessibility identifier is the bare name."""
    return name if ios else f"{package}:id/{name}"


def tree_of(screen: Screen) -> UiNode:
    """The element tree of *screen* (pixels of the screen as rotated)."""
    width, height = screen.size
    platform = screen.model.platform
    ios = platform is Platform.IOS
    k = _Classes(ios)
    package = screen.foreground or _LAUNCHER.get(platform, "")
    whole = (0, 0, width, height)
    if not screen.awake:
        return UiNode(cls=k.root, bounds=whole, package=package)
    layout = screen.layout
    children: list[UiNode] = [_status_bar(screen, layout, k, ios)]
    if screen.foreground is None:
        children += _launcher(screen, layout, k, ios)
    else:
        app = screen.app(screen.foreground) or UiApp(screen.foreground, screen.foreground)
        children += _app_window(screen, layout, k, ios, app)
    if layout.nav_bar.height > 0:
        children.append(_nav_bar(screen, layout, k, ios))
    shown = screen.app(package)
    label = "" if not ios else (shown.label if shown is not None else "Home")
    return UiNode(
        cls=k.root, bounds=whole, package=package, content_desc=label, children=tuple(children)
    )


def _status_bar(screen: Screen, layout: Layout, k: _Classes, ios: bool) -> UiNode:
    system = _SYSTEM_UI.get(screen.model.platform, "")
    clock = "9:41" if screen.model.platform is not Platform.ANDROID else "12:00"
    bar = layout.status_bar
    return UiNode(
        cls=k.bar,
        bounds=_box(bar),
        resource_id=_rid(system, "status_bar", ios),
        package=system,
        children=(
            UiNode(
                cls=k.text,
                bounds=(bar.left, bar.top, bar.width // 4, bar.height),
                text=clock,
                resource_id=_rid(system, "clock", ios),
                package=system,
            ),
        ),
    )


def _field(rect: Rect, text: str, *, hint: str, rid: str, package: str, cls: str) -> UiNode:
    return UiNode(
        cls=cls,
        bounds=_box(rect),
        text=text,
        content_desc="" if text else hint,  # the hint, as TalkBack reads an empty field
        resource_id=rid,
        package=package,
        clickable=True,
        long_clickable=True,
        focusable=True,
        focused=True,  # typed text goes to the visible field
    )


def _launcher(screen: Screen, layout: Layout, k: _Classes, ios: bool) -> list[UiNode]:
    package = _LAUNCHER.get(screen.model.platform, "")
    search = _field(
        layout.search_field,
        screen.field_text(),
        hint="Search",
        rid=_rid(package, "search", ios),
        package=package,
        cls=k.search,
    )
    icons = []
    for index, app in enumerate(screen.apps[: layout.page_size()]):
        cell = layout.icon_cell(index)
        assert cell is not None
        icons.append(
            UiNode(
                cls=k.icon,
                bounds=_box(cell),
                text=app.label,
                content_desc=app.label,
                resource_id=_rid(package, "icon", ios) if not ios else app.app_id,
                package=package,
                clickable=True,
                long_clickable=True,
                focusable=True,
            )
        )
    grid = UiNode(
        cls=k.grid,
        bounds=_box(layout.grid),
        resource_id=_rid(package, "apps_grid", ios),
        package=package,
        children=tuple(icons),
    )
    return [search, grid]


def _app_window(screen: Screen, layout: Layout, k: _Classes, ios: bool, app: UiApp) -> list[UiNode]:
    package = app.app_id
    browser = app.app_id == screen.model.browser
    back = UiNode(
        cls=k.button,
        bounds=_box(layout.app_back),
        content_desc="Back" if ios else "Navigate up",
        resource_id=_rid(package, "back", ios),
        package=package,
        clickable=True,
        focusable=True,
    )
    bar_rect = layout.app_bar
    title_rect = Rect(layout.app_back.right, bar_rect.top, layout.width, bar_rect.bottom)
    title = UiNode(
        cls=k.text,
        bounds=_box(title_rect),
        text=(screen.url or "about:blank") if browser else app.label,
        resource_id=_rid(package, "url_bar" if browser else "title", ios),
        package=package,
    )
    bar = UiNode(
        cls=k.nav_bar,
        bounds=_box(layout.app_bar),
        resource_id=_rid(package, "toolbar", ios),
        package=package,
        children=(back, title),
    )
    field = _field(
        layout.app_field,
        screen.field_text(),
        hint="Type here",
        rid=_rid(package, "input", ios),
        package=package,
        cls=k.field,
    )
    return [bar, field, _content(screen, layout, k, ios, app)]


def _content(screen: Screen, layout: Layout, k: _Classes, ios: bool, app: UiApp) -> UiNode:
    """The scrolling list, with the rows `render._content` draws that are on screen."""
    browser = app.app_id == screen.model.browser
    area = layout.content
    rows = layout.row_height
    offset = screen.scroll_of(app.app_id)
    margin = layout.scaled(16)
    items: list[UiNode] = []
    first = 0
    host = ""
    if browser:
        host = urlsplit(screen.url).hostname or "about:blank"
        heading_top = area.top + margin - offset
        heading_rect = Rect(
            margin, heading_top, area.right - margin, heading_top + 2 * rows - margin
        )
        heading = _clip(heading_rect, area)
        if heading is not None:
            items.append(UiNode(cls=k.text, bounds=_box(heading), text=host, package=app.app_id))
        first = 2
    for row in range(first, CONTENT_ROWS):
        top = area.top + row * rows - offset
        visible = _clip(Rect(0, top, area.width, top + rows), area)
        if visible is None:
            continue
        label = f"{host} paragraph {row - first + 1}" if browser else f"{app.label} item {row + 1}"
        items.append(
            UiNode(
                cls=k.row,
                bounds=_box(visible),
                text=label,
                resource_id=_rid(app.app_id, "item", ios),
                package=app.app_id,
            )
        )
    return UiNode(
        cls="XCUIElementTypeWebView" if ios and browser else k.list,
        bounds=_box(area),
        resource_id=_rid(app.app_id, "content" if browser else "list", ios),
        package=app.app_id,
        scrollable=screen.max_scroll() > 0,
        focusable=True,
        children=tuple(items),
    )


def _clip(rect: Rect, area: Rect) -> Rect | None:
    clipped = Rect(
        max(rect.left, area.left),
        max(rect.top, area.top),
        min(rect.right, area.right),
        min(rect.bottom, area.bottom),
    )
    return clipped if clipped.width > 0 and clipped.height > 0 else None


def _nav_bar(screen: Screen, layout: Layout, k: _Classes, ios: bool) -> UiNode:
    system = _SYSTEM_UI.get(screen.model.platform, "")
    if ios:
        buttons = tuple(
            UiNode(
                cls=k.nav_button,
                bounds=_box(rect),
                content_desc="Home indicator",
                resource_id="home_indicator",
                package=system,
                clickable=True,
            )
            for rect in layout.nav_buttons
        )
    else:
        buttons = tuple(
            UiNode(
                cls=k.nav_button,
                bounds=_box(rect),
                content_desc=label,
                resource_id=_rid(system, name, ios),
                package=system,
                clickable=True,
                focusable=True,
            )
            for (name, label), rect in zip(_NAV_NAMES, layout.nav_buttons, strict=False)
        )
    return UiNode(
        cls=k.group,
        bounds=_box(layout.nav_bar),
        resource_id=_rid(system, "navigation_bar_frame", ios),
        package=system,
        children=buttons,
    )
