"""The virtual device's user interface as a pure state machine: input in, new screen out.

What it models: a launcher with one icon per app and a search field, one app in the
foreground (or none: the launcher), a list of running apps, a text field per screen, a scroll
offset per app, the browser's URL, touch markers, rotation and screen power. A `Screen` is a
frozen value; every transition returns a new one plus log lines, so the device can tell "the
picture changed" with one ``!=`` and the renderer can work on a snapshot in a worker thread.

Gestures: DOWN leaves a filled marker, MOVE drags it, UP leaves a hollow one. A gesture that
moved less than `TAP_SLOP` of the screen's shorter side is a tap on what was under its DOWN
(icon -> launch, back arrow or nav button -> navigate, field -> focus); a longer vertical drag
over app content scrolls it. Markers of finished gestures stay until the next gesture starts
or the content changes (launch, home, back, rotation).

Invariants: ``foreground`` is None or in ``running``; ``running`` holds app ids of ``apps``;
pixel coordinates are of the screen as rotated.
"""

from __future__ import annotations

from typing import Final, TypeVar

import attrs

from ..base import Key, Rotation, TouchAction
from .layout import Layout, TargetKind, layout_for
from .models import ModelProfile

__all__ = ["LAUNCHER", "LogLines", "Screen", "TouchMark", "UiApp"]

LAUNCHER: Final = ""  # the key of the launcher's own text field
TAP_SLOP: Final = 0.04
MAX_FIELD: Final = 2000  # characters kept per text field
CONTENT_ROWS: Final = 60  # rows of the placeholder list inside an app

LogLines = list[tuple[str, str]]  # (tag, message)


@attrs.frozen
class UiApp:
    app_id: str
    label: str


@attrs.frozen
class TouchMark:
    pointer_id: int
    x: int
    y: int
    start_x: int
    start_y: int
    pressed: bool


V = TypeVar("V")


def _set(pairs: tuple[tuple[str, V], ...], key: str, value: V) -> tuple[tuple[str, V], ...]:
    return (*((k, v) for k, v in pairs if k != key), (key, value))


@attrs.frozen
class Screen:
    model: ModelProfile
    rotation: Rotation = Rotation.PORTRAIT
    apps: tuple[UiApp, ...] = ()
    foreground: str | None = None
    running: tuple[str, ...] = ()  # least recently used first
    fields: tuple[tuple[str, str], ...] = ()  # text per screen: LAUNCHER or an app id
    scrolls: tuple[tuple[str, int], ...] = ()  # app id -> offset in pixels
    url: str = ""
    # the browser sandbox's page (PNG), shown as the browser's content (hostd/browser)
    page: bytes | None = attrs.field(default=None, repr=False)
    marks: tuple[TouchMark, ...] = ()
    awake: bool = True

    # -- derived --------------------------------------------------------------------------
    @property
    def size(self) -> tuple[int, int]:
        w, h = self.model.width, self.model.height
        return (h, w) if self.rotation.is_landscape else (w, h)

    @property
    def layout(self) -> Layout:
        return layout_for(self.model, *self.size)

    def app(self, app_id: str) -> UiApp | None:
        return next((a for a in self.apps if a.app_id == app_id), None)

    def field_text(self, key: str | None = None) -> str:
        key = self.field_key if key is None else key
        return dict(self.fields).get(key, "")

    @property
    def field_key(self) -> str:
        return LAUNCHER if self.foreground is None else self.foreground

    def scroll_of(self, app_id: str) -> int:
        return dict(self.scrolls).get(app_id, 0)

    def max_scroll(self) -> int:
        layout = self.layout
        return max(0, CONTENT_ROWS * layout.row_height - layout.content.height)

    # -- app lifecycle --------------------------------------------------------------------
    def with_apps(self, apps: tuple[UiApp, ...]) -> Screen:
        ids = {a.app_id for a in apps}
        running = tuple(a for a in self.running if a in ids)
        foreground = self.foreground if self.foreground in ids else None
        return attrs.evolve(self, apps=apps, running=running, foreground=foreground)

    def launch(self, app_id: str) -> Screen:
        running = (*(a for a in self.running if a != app_id), app_id)
        return attrs.evolve(self, foreground=app_id, running=running, marks=self._live_marks())

    def terminate(self, app_id: str) -> Screen:
        running = tuple(a for a in self.running if a != app_id)
        foreground = None if self.foreground == app_id else self.foreground
        fields = tuple((k, v) for k, v in self.fields if k != app_id)
        scrolls = tuple((k, v) for k, v in self.scrolls if k != app_id)
        return attrs.evolve(
            self, running=running, foreground=foreground, fields=fields, scrolls=scrolls
        )

    def home(self) -> Screen:
        return attrs.evolve(self, foreground=None, marks=self._live_marks())

    def open_url(self, url: str) -> Screen:
        return attrs.evolve(self.launch(self.model.browser), url=url)

    def rotate(self, rotation: Rotation) -> Screen:
        # Markers are in the old orientation's pixels: drop them all. The content area changes
        # height, so offsets scrolled in the other orientation are clamped to the new limit.
        rotated = attrs.evolve(self, rotation=rotation, marks=())
        limit = rotated.max_scroll()
        return attrs.evolve(rotated, scrolls=tuple((k, min(v, limit)) for k, v in self.scrolls))

    # -- input ----------------------------------------------------------------------------
    def type_text(self, text: str) -> Screen:
        kept = (self.field_text() + text)[-MAX_FIELD:]
        return attrs.evolve(self, fields=_set(self.fields, self.field_key, kept))

    def key(self, key: Key, log: LogLines) -> Screen:
        if key is Key.POWER:
            return attrs.evolve(self, awake=not self.awake, marks=())
        if not self.awake:
            return self
        if key is Key.HOME:
            return self.home()
        if key in (Key.BACK, Key.ESCAPE):
            return self.home() if self.foreground is not None else self
        if key is Key.APP_SWITCH:
            others = [a for a in self.running if a != self.foreground]
            return self.launch(others[-1]) if others else self
        if key is Key.DELETE:
            text = self.field_text()
            return attrs.evolve(self, fields=_set(self.fields, self.field_key, text[:-1]))
        if key is Key.ENTER and self.foreground == self.model.browser and self.field_text():
            url = self.field_text()
            log.append(("Browser", f"navigate {url}"))
            return attrs.evolve(self, url=url, fields=_set(self.fields, self.field_key, ""))
        return self

    def scroll(self, dy: int) -> Screen:
        if self.foreground is None:
            return self
        offset = min(self.max_scroll(), max(0, self.scroll_of(self.foreground) + dy))
        return attrs.evolve(self, scrolls=_set(self.scrolls, self.foreground, offset))

    def touch(self, pointer_id: int, action: TouchAction, x: int, y: int, log: LogLines) -> Screen:
        if not self.awake:
            # A touch wakes a sleeping screen and does nothing else.
            return attrs.evolve(self, awake=True) if action is TouchAction.DOWN else self
        previous = next((m for m in self.marks if m.pointer_id == pointer_id), None)
        others = tuple(m for m in self.marks if m.pointer_id != pointer_id)
        if action is TouchAction.DOWN:
            if not any(m.pressed for m in others):
                others = ()  # a new gesture: the markers of the last one go
            mark = TouchMark(pointer_id, x, y, x, y, pressed=True)
            return attrs.evolve(self, marks=(*others, mark))
        if previous is None or not previous.pressed:
            return self  # MOVE/UP/CANCEL without a DOWN: ignored, as a real screen would
        moved = attrs.evolve(previous, x=x, y=y, pressed=action is TouchAction.MOVE)
        screen = attrs.evolve(self, marks=(*others, moved))
        if action is TouchAction.UP:
            return screen._finish_gesture(moved, log)
        return screen

    def _finish_gesture(self, mark: TouchMark, log: LogLines) -> Screen:
        layout = self.layout
        slop = TAP_SLOP * min(layout.width, layout.height)
        dx, dy = mark.x - mark.start_x, mark.y - mark.start_y
        if abs(dx) > slop or abs(dy) > slop:
            if self.foreground is not None and abs(dy) >= abs(dx):
                log.append(("Input", f"swipe dy={dy}"))
                return self.scroll(-dy)
            return self
        launcher = self.foreground is None
        visible = self.apps[: layout.page_size()]
        down = layout.hit(mark.start_x, mark.start_y, launcher=launcher, app_count=len(visible))
        up = layout.hit(mark.x, mark.y, launcher=launcher, app_count=len(visible))
        if down != up:
            return self
        if down.kind is TargetKind.ICON:
            app = visible[down.index]
            log.append(("ActivityManager", f"Start proc {app.app_id} (tap on launcher icon)"))
            return self.launch(app.app_id)
        if down.kind in (TargetKind.APP_BACK, TargetKind.NAV_BACK):
            return self.key(Key.BACK, log)
        if down.kind is TargetKind.NAV_HOME:
            return self.home()
        if down.kind is TargetKind.NAV_RECENTS:
            return self.key(Key.APP_SWITCH, log)
        return self

    def _live_marks(self) -> tuple[TouchMark, ...]:
        return tuple(m for m in self.marks if m.pressed)
