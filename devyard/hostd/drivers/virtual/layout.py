"""Where things are on the virtual screen: one geometry shared by hit-testing and rendering.

Everything scales with the shorter side of the screen (``unit`` = 1/360 of it, capped for
tablets), so a phone, an iPad and a watch share one layout and a rotation only re-flows the
launcher grid. Pure: no Pillow, no trio.
"""

from __future__ import annotations

import enum
from typing import Final

import attrs

from ..base import Platform
from .models import ModelProfile

__all__ = ["Layout", "Rect", "Target", "TargetKind", "layout_for"]

MAX_UNIT: Final = 1.6


@attrs.frozen
class Rect:
    left: int
    top: int
    right: int
    bottom: int

    def contains(self, x: int, y: int) -> bool:
        return self.left <= x < self.right and self.top <= y < self.bottom

    @property
    def box(self) -> tuple[int, int, int, int]:
        """Pillow's inclusive (x0, y0, x1, y1)."""
        return (self.left, self.top, self.right - 1, self.bottom - 1)

    @property
    def width(self) -> int:
        return self.right - self.left

    @property
    def height(self) -> int:
        return self.bottom - self.top

    @property
    def center(self) -> tuple[int, int]:
        return ((self.left + self.right) // 2, (self.top + self.bottom) // 2)


class TargetKind(enum.Enum):
    NOTHING = "nothing"
    ICON = "icon"  # a launcher icon; Target.index says which
    FIELD = "field"
    APP_BACK = "app_back"
    NAV_BACK = "nav_back"
    NAV_HOME = "nav_home"
    NAV_RECENTS = "nav_recents"
    CONTENT = "content"


_NAV_KINDS: Final = {
    3: (TargetKind.NAV_BACK, TargetKind.NAV_HOME, TargetKind.NAV_RECENTS),  # Android
    1: (TargetKind.NAV_HOME,),  # iOS home indicator
}


@attrs.frozen
class Target:
    kind: TargetKind
    index: int = -1


@attrs.frozen
class Layout:
    """The geometry of one model at one size (already rotated)."""

    width: int
    height: int
    unit: float
    status_bar: Rect
    nav_bar: Rect  # empty (height 0) on the watch
    nav_buttons: tuple[Rect, ...]  # Android: back, home, recents; iOS: the home indicator
    search_field: Rect  # the launcher's text field
    grid: Rect
    columns: int
    cell_width: int
    cell_height: int
    icon_size: int
    app_bar: Rect
    app_back: Rect
    app_field: Rect
    content: Rect
    row_height: int

    def scaled(self, value: float) -> int:
        return max(1, round(value * self.unit))

    def icon_cell(self, index: int) -> Rect | None:
        """The launcher cell of the ``index``-th app, or None past the first page."""
        row, column = divmod(index, self.columns)
        top = self.grid.top + row * self.cell_height
        if top + self.cell_height > self.grid.bottom:
            return None
        left = self.grid.left + column * self.cell_width
        return Rect(left, top, left + self.cell_width, top + self.cell_height)

    def icon_rect(self, index: int) -> Rect | None:
        cell = self.icon_cell(index)
        if cell is None:
            return None
        left = cell.left + (cell.width - self.icon_size) // 2
        top = cell.top + self.scaled(6)
        return Rect(left, top, left + self.icon_size, top + self.icon_size)

    def page_size(self) -> int:
        rows = max(0, self.grid.height // self.cell_height)
        return rows * self.columns

    def hit(self, x: int, y: int, *, launcher: bool, app_count: int) -> Target:
        """What a touch at pixel (x, y) lands on."""
        kinds = _NAV_KINDS.get(len(self.nav_buttons), ())
        for kind, rect in zip(kinds, self.nav_buttons, strict=True):
            if rect.contains(x, y):
                return Target(kind)
        if launcher:
            if self.search_field.contains(x, y):
                return Target(TargetKind.FIELD)
            for index in range(min(app_count, self.page_size())):
                cell = self.icon_cell(index)
                if cell is not None and cell.contains(x, y):
                    return Target(TargetKind.ICON, index)
            return Target(TargetKind.NOTHING)
        if self.app_back.contains(x, y):
            return Target(TargetKind.APP_BACK)
        if self.app_field.contains(x, y):
            return Target(TargetKind.FIELD)
        if self.content.contains(x, y):
            return Target(TargetKind.CONTENT)
        return Target(TargetKind.NOTHING)


def layout_for(model: ModelProfile, width: int, height: int) -> Layout:
    """The layout of ``model`` on a ``width`` x ``height`` screen (as rotated)."""
    unit = min(MAX_UNIT, min(width, height) / 360)

    def px(value: float) -> int:
        return max(1, round(value * unit))

    margin = px(16)
    status = Rect(0, 0, width, px(28))
    if model.is_watch:
        nav = Rect(0, height, width, height)
        buttons: tuple[Rect, ...] = ()
    elif model.platform is Platform.ANDROID:
        nav = Rect(0, height - px(48), width, height)
        third = width // 3
        buttons = tuple(Rect(i * third, nav.top, (i + 1) * third, height) for i in range(3))
    else:
        nav = Rect(0, height - px(30), width, height)
        buttons = (Rect(width // 3, nav.top, width - width // 3, height),)

    field_height = px(44)
    search = Rect(
        margin, status.bottom + margin, width - margin, status.bottom + margin + field_height
    )
    grid = Rect(margin, search.bottom + margin, width - margin, nav.top - margin // 2)
    target_cell = px(72)
    columns = 3 if model.is_watch else max(3, min(8, grid.width // target_cell))
    cell_width = grid.width // columns
    icon_size = round(cell_width * 0.62)
    cell_height = icon_size + px(34)

    app_bar = Rect(0, status.bottom, width, status.bottom + px(56))
    app_back = Rect(0, app_bar.top, app_bar.height, app_bar.bottom)
    app_field = Rect(
        margin, app_bar.bottom + margin, width - margin, app_bar.bottom + margin + field_height
    )
    content = Rect(0, app_field.bottom + margin, width, nav.top)
    return Layout(
        width=width,
        height=height,
        unit=unit,
        status_bar=status,
        nav_bar=nav,
        nav_buttons=buttons,
        search_field=search,
        grid=grid,
        columns=columns,
        cell_width=cell_width,
        cell_height=cell_height,
        icon_size=icon_size,
        app_bar=app_bar,
        app_back=app_back,
        app_field=app_field,
        content=content,
        row_height=px(44),
    )
