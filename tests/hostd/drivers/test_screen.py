"""The virtual screen: deterministic pictures that visibly follow input.

Positions come from the same pure layout the device hit-tests with, so the tests tap where a
person would see the icon; assertions look at pixels, not only at the device's own state.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from devyard.hostd.drivers import (
    AppNotFoundError,
    InvalidInputError,
    Key,
    Platform,
    Rotation,
    TouchAction,
)
from devyard.hostd.drivers.virtual import VirtualDevice
from devyard.hostd.drivers.virtual.layout import Layout, Rect
from devyard.hostd.drivers.virtual.render import MARK, app_color

from .conftest import OpenDevice, package_apk


def image(png: bytes) -> Image.Image:
    return Image.open(io.BytesIO(png)).convert("RGB")


def layout(dev: VirtualDevice) -> Layout:
    return dev._live.screen.layout  # the geometry the device itself hit-tests with


def norm(dev: VirtualDevice, point: tuple[int, int]) -> tuple[float, float]:
    info = dev.describe()
    return ((point[0] + 0.5) / info.width, (point[1] + 0.5) / info.height)


def dark_pixels(img: Image.Image, rect: Rect) -> int:
    """Dark pixels inside a rounded field (its corners, where the wallpaper shows, left out)."""
    inset = rect.height // 2
    inner = Rect(rect.left + inset, rect.top + 4, rect.right - inset, rect.bottom - 4)
    return sum(img.crop(inner.box).convert("L").histogram()[:100])


async def icon_point(dev: VirtualDevice, app_id: str) -> tuple[float, float]:
    ids = [app.app_id for app in await dev.list_apps()]
    rect = layout(dev).icon_rect(ids.index(app_id))
    assert rect is not None
    return norm(dev, rect.center)


async def test_same_inputs_give_byte_identical_png(open_dev: OpenDevice, tmp_path: Path) -> None:
    apk = package_apk(tmp_path, "com.example.todo", "Todo List")
    pictures = []
    for _ in range(2):
        async with open_dev(Platform.ANDROID) as dev:
            await dev.install(apk)
            await dev.text("hello")
            await dev.tap(0.5, 0.6)
            await dev.launch("com.example.todo")
            await dev.text("buy milk")
            await dev.touch(1, TouchAction.DOWN, 0.3, 0.7)
            pictures.append(await dev.screenshot())
    assert pictures[0] == pictures[1]


RENDER_IN_FRESH_PROCESS = """
import sys
from devyard.hostd.drivers.base import Platform
from devyard.hostd.drivers.virtual.models import MODELS
from devyard.hostd.drivers.virtual.render import encode_png, render
from devyard.hostd.drivers.virtual.ui import Screen, UiApp
model = MODELS[Platform.IOS]["iphone"]
apps = tuple(UiApp(a.app_id, a.label) for a in model.system_apps)
screen = Screen(model, apps=(*apps, UiApp("com.example.notes", "Notes"))).type_text("hi")
sys.stdout.buffer.write(encode_png(render(screen)))
"""


def test_pictures_do_not_depend_on_the_process() -> None:
    """No hash(), clock or font lookup leaks in: two interpreters with different hash seeds
    draw the same bytes."""
    outputs = []
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        done = subprocess.run(
            [sys.executable, "-c", RENDER_IN_FRESH_PROCESS],
            env=env,
            capture_output=True,
            check=True,
        )
        outputs.append(done.stdout)
    assert outputs[0] == outputs[1] and outputs[0].startswith(b"\x89PNG")


async def test_tap_on_icon_launches_that_app_and_shows_its_window(
    android: VirtualDevice, tmp_path: Path
) -> None:
    await android.install(package_apk(tmp_path, "com.example.todo", "Todo List"))
    before = await android.screenshot()
    await android.tap(*await icon_point(android, "com.example.todo"))
    assert android.foreground_app() == "com.example.todo"
    after = image(await android.screenshot())
    assert after.tobytes() != image(before).tobytes()
    # The app bar is painted in the app's colour, full width.
    bar = layout(android).app_bar
    assert after.getpixel((bar.right - 2, bar.center[1])) == app_color("com.example.todo")
    apps = {app.app_id: app for app in await android.list_apps()}
    assert apps["com.example.todo"].running
    assert any("com.example.todo" in entry.message for entry in android.logs())


async def test_tap_elsewhere_leaves_a_marker_until_the_next_gesture(android: VirtualDevice) -> None:
    blank = image(await android.screenshot())
    x, y = 0.5, 0.75  # empty wallpaper below the icons
    px, py = round(x * 540), round(y * 1200)
    await android.touch(0, TouchAction.DOWN, x, y)
    pressed = image(await android.screenshot())
    assert pressed.getpixel((px, py)) == MARK  # a filled dot under the finger
    await android.touch(0, TouchAction.UP, x, y)
    released = image(await android.screenshot())
    assert released.getpixel((px, py)) == blank.getpixel((px, py))  # hollow ring now
    assert released.tobytes() != blank.tobytes()
    assert android.foreground_app() is None
    await android.touch(0, TouchAction.DOWN, 0.2, 0.9)
    await android.touch(0, TouchAction.UP, 0.2, 0.9)
    moved = image(await android.screenshot())
    radius = layout(android).scaled(18)
    assert moved.getpixel((px + radius - 2, py)) == blank.getpixel((px + radius - 2, py))


async def test_typed_text_appears_in_the_field(android: VirtualDevice) -> None:
    field = layout(android).search_field
    empty = image(await android.screenshot())
    await android.text("hello world")
    typed = image(await android.screenshot())
    # The placeholder is grey; typed text and its caret are dark ink.
    assert dark_pixels(empty, field) == 0
    assert dark_pixels(typed, field) > 50
    await android.key(Key.DELETE)
    assert android._live.screen.field_text() == "hello worl"


async def test_text_goes_to_the_foreground_app_and_stays_with_it(android: VirtualDevice) -> None:
    await android.launch("com.android.settings")
    await android.text("wifi")
    await android.key(Key.HOME)
    assert android._live.screen.field_text() == ""
    await android.launch("com.android.settings")
    assert android._live.screen.field_text() == "wifi"


async def test_home_back_and_nav_buttons(android: VirtualDevice) -> None:
    await android.launch("com.android.settings")
    await android.key(Key.HOME)
    assert android.foreground_app() is None
    await android.launch("com.android.settings")
    await android.key(Key.BACK)
    assert android.foreground_app() is None
    # The same by touch: the back chevron in the app bar and the home button in the nav bar.
    await android.launch("com.android.settings")
    await android.tap(*norm(android, layout(android).app_back.center))
    assert android.foreground_app() is None
    await android.launch("com.android.chrome")
    await android.tap(*norm(android, layout(android).nav_buttons[1].center))
    assert android.foreground_app() is None
    running = [app.app_id for app in await android.list_apps() if app.running]
    assert running == ["com.android.chrome", "com.android.settings"]


async def test_rotation_swaps_width_and_height(android: VirtualDevice) -> None:
    await android.rotate(Rotation.LANDSCAPE)
    info = android.describe()
    assert (info.width, info.height, info.rotation) == (1200, 540, Rotation.LANDSCAPE)
    assert image(await android.screenshot()).size == (1200, 540)
    assert await android.settings_get("system", "user_rotation") == "1"
    # Tapping an icon still works in the re-flowed landscape grid.
    await android.tap(*await icon_point(android, "com.android.settings"))
    assert android.foreground_app() == "com.android.settings"
    await android.settings_put("system", "user_rotation", "0")
    assert image(await android.screenshot()).size == (540, 1200)


async def test_open_url_shows_the_browser_with_the_url(iphone: VirtualDevice) -> None:
    await iphone.open_url("https://example.com/a?b=c")
    assert iphone.foreground_app() == "com.apple.mobilesafari"
    assert iphone._live.screen.url == "https://example.com/a?b=c"
    before = await iphone.screenshot()
    await iphone.text("example.org")
    await iphone.key(Key.ENTER)
    assert iphone._live.screen.url == "example.org"
    assert await iphone.screenshot() != before


async def test_swipe_and_scroll_move_app_content(android: VirtualDevice) -> None:
    await android.launch("com.android.settings")
    top = await android.screenshot()
    await android.touch(0, TouchAction.DOWN, 0.5, 0.8)
    await android.touch(0, TouchAction.MOVE, 0.5, 0.6)
    await android.touch(0, TouchAction.UP, 0.5, 0.5)
    assert android._live.screen.scroll_of("com.android.settings") == 360
    await android.scroll(0.5, 0.5, 0, -1)
    assert android._live.screen.scroll_of("com.android.settings") == 0
    await android.touch(0, TouchAction.DOWN, 0.5, 0.8)
    await android.touch(0, TouchAction.UP, 0.5, 0.8)
    await android.tap(0.5, 0.99)  # home button, clearing nothing in the app's scroll state
    assert android.foreground_app() is None
    await android.launch("com.android.settings")
    assert await android.screenshot() == top


async def test_clipboard_and_paste(iphone: VirtualDevice) -> None:
    assert await iphone.get_clipboard() == ""
    await iphone.set_clipboard("copied")
    assert await iphone.get_clipboard() == "copied"
    await iphone.key(Key.PASTE)
    assert iphone._live.screen.field_text() == "copied"


async def test_power_turns_the_screen_off_and_a_touch_wakes_it(android: VirtualDevice) -> None:
    await android.key(Key.POWER)
    dark = image(await android.screenshot())
    assert dark.getextrema() == ((0, 0), (0, 0), (0, 0))
    await android.tap(0.5, 0.5)
    assert image(await android.screenshot()).getextrema() != dark.getextrema()


@pytest.mark.parametrize(("x", "y"), [(-0.1, 0.5), (0.5, 1.01), (float("nan"), 0.5), (2, 2)])
async def test_coordinates_out_of_range_are_refused(
    android: VirtualDevice, x: float, y: float
) -> None:
    with pytest.raises(InvalidInputError, match=r"normalized to \[0, 1\]"):
        await android.tap(x, y)


async def test_bad_inputs_are_clear_errors(android: VirtualDevice) -> None:
    with pytest.raises(AppNotFoundError, match=r"com\.nope"):
        await android.launch("com.nope")
    with pytest.raises(AppNotFoundError):
        await android.terminate("com.nope")
    with pytest.raises(InvalidInputError, match="control character"):
        await android.text("a\x00b")
    with pytest.raises(InvalidInputError, match="absolute URL"):
        await android.open_url("example.com")
    with pytest.raises(InvalidInputError, match="scroll"):
        await android.scroll(0.5, 0.5, 0, 1e9)
    with pytest.raises(ValueError):
        await android.key("not-a-key")  # type: ignore[arg-type]


async def test_every_model_renders_a_launcher_and_an_app(open_dev: OpenDevice) -> None:
    for model in ("iphone", "iphone-duo", "ipad", "watch"):
        async with open_dev(Platform.IOS, model=model) as dev:
            home = await dev.screenshot()
            first = (await dev.list_apps())[0].app_id
            await dev.tap(*await icon_point(dev, first))
            assert dev.foreground_app() == first, model
            assert await dev.screenshot() != home
