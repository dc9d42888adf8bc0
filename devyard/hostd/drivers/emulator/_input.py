"""The emulator's input: gestures as ``input tap``/``swipe``, keys, text, clipboard, rotation."""

from __future__ import annotations

import math
from typing import Final

import trio

from .._errors import (
    InvalidInputError,
    UnsupportedOperationError,
)
from ..base import (
    Key,
    Rotation,
    TouchAction,
)
from ._base import DeviceBase, Pointer

__all__ = ["MAX_SCROLL", "InputMixin"]

MAX_SCROLL: Final = 10.0  # screen heights per scroll call, as the virtual device
_TAP_SLOP: Final = 0.04  # of the shorter side: less movement than this is a tap
_LONG_PRESS_S: Final = 0.5
_SWIPE_MS: Final = (100, 5000)
_SCROLL_STEP: Final = 0.5  # screen fractions per swipe of a scroll
_MAX_SCROLL_SWIPES: Final = 20
_KEYCODES: Final = {
    Key.HOME: "KEYCODE_HOME", Key.BACK: "KEYCODE_BACK", Key.APP_SWITCH: "KEYCODE_APP_SWITCH",
    Key.ENTER: "KEYCODE_ENTER", Key.DELETE: "KEYCODE_DEL", Key.TAB: "KEYCODE_TAB",
    Key.ESCAPE: "KEYCODE_ESCAPE", Key.PASTE: "KEYCODE_PASTE", Key.POWER: "KEYCODE_POWER",
    Key.VOLUME_UP: "KEYCODE_VOLUME_UP", Key.VOLUME_DOWN: "KEYCODE_VOLUME_DOWN",
    Key.MENU: "KEYCODE_MENU",
}  # fmt: skip


class InputMixin(DeviceBase):
    async def touch(self, pointer_id: int, action: TouchAction, x: float, y: float) -> None:
        """adb cannot hold a finger down: DOWN and MOVE are recorded, and UP replays the
        gesture as one ``input tap`` (little movement, short), or ``input swipe`` (a drag, or
        a long press: a swipe that does not move). CANCEL forgets the pointer."""
        self._check_open()
        point = self._pixels(x, y)
        action = TouchAction(action)
        now = trio.current_time()
        if action is TouchAction.DOWN:
            self._pointers[pointer_id] = Pointer(point, point, now)
        elif action is TouchAction.MOVE:
            if pointer_id in self._pointers:
                self._pointers[pointer_id].last = point
        elif action is TouchAction.CANCEL:
            self._pointers.pop(pointer_id, None)
        else:
            pointer = self._pointers.pop(pointer_id, None)
            if pointer is not None:
                await self._gesture(pointer.start, point, now - pointer.down_at)
                return
        await trio.lowlevel.checkpoint()

    async def _gesture(self, start: tuple[int, int], end: tuple[int, int], held: float) -> None:
        slop = _TAP_SLOP * min(self._size)
        moved = math.dist(start, end) >= slop
        if not moved and held < _LONG_PRESS_S:
            await self._input("tap", *start)
        else:
            ms = max(_SWIPE_MS[0], min(_SWIPE_MS[1], round(held * 1000)))
            await self._input("swipe", *start, *end, ms)

    async def tap(self, x: float, y: float) -> None:
        self._check_open()
        await self._input("tap", *self._pixels(x, y))

    async def key(self, key: Key) -> None:
        self._check_open()
        key = Key(key)
        if key is Key.PASTE:
            await self.text(self._clipboard)  # the device's clipboard is not ours to set
            return
        await self._input("keyevent", _KEYCODES[key])

    async def text(self, text: str) -> None:
        """``input text``, one line at a time with ENTER between. ASCII only: the device's
        ``input text`` cannot type other characters."""
        self._check_open()
        bad = next((c for c in text if (ord(c) < 32 and c != "\n") or ord(c) == 127), None)
        if bad is not None:
            raise InvalidInputError(f"text may not contain control character {bad!r}")
        if not text.isascii():
            raise UnsupportedOperationError("adb's `input text` types ASCII characters only")
        for i, line in enumerate(text.split("\n")):
            if i:
                await self._input("keyevent", _KEYCODES[Key.ENTER])
            if line:
                await self._input("text", line.replace(" ", "%s"))

    async def scroll(self, x: float, y: float, dx: float, dy: float) -> None:
        """Swipes the other way (content follows the finger), in steps of half a screen."""
        self._check_open()
        self._pixels(x, y)
        if not all(math.isfinite(d) and abs(d) <= MAX_SCROLL for d in (dx, dy)):
            raise InvalidInputError(f"scroll amounts must be within ±{MAX_SCROLL:g}: {dx}, {dy}")
        steps = min(_MAX_SCROLL_SWIPES, max(1, math.ceil(max(abs(dx), abs(dy)) / _SCROLL_STEP)))
        ex = min(1.0, max(0.0, x - dx / steps))
        ey = min(1.0, max(0.0, y - dy / steps))
        if (ex, ey) == (x, y):
            await trio.lowlevel.checkpoint()
            return
        for _ in range(steps):
            await self._input("swipe", *self._pixels(x, y), *self._pixels(ex, ey), 300)

    async def get_clipboard(self) -> str:
        self._check_open()
        await trio.lowlevel.checkpoint()
        return self._clipboard

    async def set_clipboard(self, text: str) -> None:
        """Kept in hostd: ``Key.PASTE`` types it. (Android 10+ lets only the focused app or
        the IME write the clipboard; adb has no verb for it.)"""
        self._check_open()
        self._clipboard = text
        await trio.lowlevel.checkpoint()

    async def rotate(self, rotation: Rotation) -> None:
        self._check_open()
        rotation = Rotation(rotation)
        await self._shell("settings put system accelerometer_rotation 0")
        await self._shell(f"settings put system user_rotation {rotation.value // 90}")
        if rotation.is_landscape != self._rotation.is_landscape:
            self._size = (self._size[1], self._size[0])
        self._rotation = rotation
