"""Draw a `Screen` with Pillow, and encode it as PNG or JPEG.

Pure functions of the screen value: the same `Screen` gives the same pixels and the same PNG
bytes (Pillow's PNG writer adds no timestamps). Text uses Pillow's bundled default font
(``ImageFont.load_default``), never a system font that a host may lack. The status bar shows a
fixed time for the same reason: a clock would make two screenshots of one state differ.

Runs in worker threads (`trio.to_thread.run_sync`): nothing here changes shared state (the
font and wallpaper caches hand out pictures that are only read or copied).
"""

from __future__ import annotations

import functools
import hashlib
import io
from typing import Final
from urllib.parse import urlsplit

from PIL import Image, ImageDraw, ImageFont, ImageOps

from ..base import Platform
from .layout import Layout, Rect
from .ui import CONTENT_ROWS, Screen, UiApp

__all__ = ["app_color", "draw_marks", "encode_jpeg", "encode_png", "mark_boxes", "render"]

RGB = tuple[int, int, int]

WHITE: Final[RGB] = (255, 255, 255)
INK: Final[RGB] = (32, 33, 36)
MUTED: Final[RGB] = (128, 134, 139)
LINE: Final[RGB] = (218, 220, 224)
PAPER: Final[RGB] = (248, 249, 250)
MARK: Final[RGB] = (255, 64, 129)
WALLPAPER: Final[dict[Platform, tuple[RGB, RGB]]] = {
    Platform.ANDROID: ((18, 52, 86), (120, 60, 140)),
    Platform.IOS: ((40, 90, 200), (230, 120, 160)),
}
CLOCK: Final = {Platform.ANDROID: "12:00", Platform.IOS: "9:41"}
JPEG_QUALITY: Final = 80

Font = ImageFont.FreeTypeFont | ImageFont.ImageFont


@functools.lru_cache(maxsize=64)
def _font(size: int) -> Font:
    return ImageFont.load_default(size=size)


def app_color(app_id: str) -> RGB:
    """A stable, saturated colour per app id (not ``hash()``: that changes per process)."""
    digest = hashlib.sha256(app_id.encode()).digest()
    hue = digest[0] / 255
    image = Image.new("HSV", (1, 1), (round(hue * 255), 170, 200)).convert("RGB")
    r, g, b = image.getpixel((0, 0))  # type: ignore[misc]
    return (int(r), int(g), int(b))


def _darker(color: RGB, factor: float = 0.75) -> RGB:
    r, g, b = color
    return (round(r * factor), round(g * factor), round(b * factor))


def _fit(text: str, font: Font, width: int, *, tail: bool = False) -> str:
    """``text`` cut to ``width`` pixels with an ellipsis (keeping the end if ``tail``)."""
    if font.getlength(text) <= width:
        return text
    while text and font.getlength("…" + text if tail else text + "…") > width:
        text = text[1:] if tail else text[:-1]
    return "…" + text if tail else text + "…"


def _center_text(draw: ImageDraw.ImageDraw, rect: Rect, text: str, font: Font, fill: RGB) -> None:
    draw.text(rect.center, text, font=font, fill=fill, anchor="mm")


def render(screen: Screen) -> Image.Image:
    """The screen's pixels."""
    width, height = screen.size
    if not screen.awake:
        return Image.new("RGB", (width, height), (0, 0, 0))
    layout = screen.layout
    if screen.foreground is None:
        image = _wallpaper(screen, width, height)
        draw = ImageDraw.Draw(image)
        _launcher(draw, screen, layout)
        chrome_ink = WHITE
    else:
        image = Image.new("RGB", (width, height), WHITE)
        draw = ImageDraw.Draw(image)
        app = screen.app(screen.foreground) or UiApp(screen.foreground, screen.foreground)
        _app_window(image, draw, screen, layout, app)
        chrome_ink = INK
    _status_bar(draw, screen, layout, WHITE if screen.foreground is not None else chrome_ink)
    _nav_bar(draw, screen, layout, chrome_ink)
    _marks(draw, screen, layout)
    return image


def _wallpaper(screen: Screen, width: int, height: int) -> Image.Image:
    """A copy of the platform's gradient at this size (the launcher draws on it)."""
    return _gradient(screen.model.platform, width, height).copy()


@functools.lru_cache(maxsize=8)
def _gradient(platform: Platform, width: int, height: int) -> Image.Image:
    """Made once per platform and size: three quarters of a launcher's render otherwise
    (bench/README.md, "python -m bench stream")."""
    top, bottom = WALLPAPER.get(platform, WALLPAPER[Platform.IOS])
    gradient = Image.linear_gradient("L").resize((width, height))
    return ImageOps.colorize(gradient, black=top, white=bottom)


def _field(
    draw: ImageDraw.ImageDraw, layout: Layout, rect: Rect, text: str, placeholder: str
) -> None:
    radius = rect.height // 2
    draw.rounded_rectangle(rect.box, radius, fill=WHITE, outline=LINE, width=layout.scaled(1.5))
    font = _font(layout.scaled(16))
    inner = rect.width - 2 * radius
    shown = _fit(text, font, inner, tail=True) if text else placeholder
    x, y = rect.left + radius, rect.center[1]
    draw.text((x, y), shown, font=font, fill=INK if text else MUTED, anchor="lm")
    if text:  # the caret: this field has focus
        caret = x + round(font.getlength(shown)) + layout.scaled(2)
        half = rect.height // 4
        draw.line((caret, y - half, caret, y + half), fill=INK, width=layout.scaled(1.5))


def _launcher(draw: ImageDraw.ImageDraw, screen: Screen, layout: Layout) -> None:
    _field(draw, layout, layout.search_field, screen.field_text(), "Search")
    letter_font = _font(round(layout.icon_size * 0.5))
    label_font = _font(layout.scaled(13))
    ios = screen.model.platform is Platform.IOS
    for index, app in enumerate(screen.apps[: layout.page_size()]):
        icon, cell = layout.icon_rect(index), layout.icon_cell(index)
        assert icon is not None and cell is not None
        color = app_color(app.app_id)
        if ios:
            draw.rounded_rectangle(icon.box, round(icon.width * 0.22), fill=color)
        else:
            draw.ellipse(icon.box, fill=color)
        _center_text(draw, icon, app.label[:1].upper(), letter_font, WHITE)
        label = _fit(app.label, label_font, cell.width - layout.scaled(4))
        label_y = icon.bottom + layout.scaled(14)
        draw.text((cell.center[0], label_y), label, font=label_font, fill=WHITE, anchor="mm")


def _app_window(
    image: Image.Image, draw: ImageDraw.ImageDraw, screen: Screen, layout: Layout, app: UiApp
) -> None:
    color = app_color(app.app_id)
    draw.rectangle(layout.status_bar.box, fill=_darker(color))
    draw.rectangle(layout.app_bar.box, fill=color)
    # The back arrow: a chevron in the app bar's left square.
    cx, cy = layout.app_back.center
    arm = layout.app_back.height // 5
    draw.line(
        ((cx + arm // 2, cy - arm), (cx - arm // 2, cy), (cx + arm // 2, cy + arm)),
        fill=WHITE,
        width=layout.scaled(3),
        joint="curve",
    )
    title_left = layout.app_back.right
    browser = app.app_id == screen.model.browser
    if browser:
        pill = Rect(
            title_left,
            layout.app_bar.top + layout.scaled(10),
            layout.width - layout.scaled(12),
            layout.app_bar.bottom - layout.scaled(10),
        )
        draw.rounded_rectangle(pill.box, pill.height // 2, fill=_darker(color, 0.6))
        font = _font(layout.scaled(15))
        url = _fit(screen.url or "about:blank", font, pill.width - pill.height)
        draw.text(
            (pill.left + pill.height // 2, pill.center[1]), url, font=font, fill=WHITE, anchor="lm"
        )
    else:
        font = _font(layout.scaled(20))
        title = _fit(app.label, font, layout.width - title_left - layout.scaled(12))
        draw.text((title_left, layout.app_bar.center[1]), title, font=font, fill=WHITE, anchor="lm")
    _field(draw, layout, layout.app_field, screen.field_text(), "Type here")
    image.paste(_content(screen, layout, app, browser), (0, layout.content.top))


def _content(screen: Screen, layout: Layout, app: UiApp, browser: bool) -> Image.Image:
    """The scrolling body, drawn on its own canvas so rows clip at its edges."""
    area = layout.content
    if browser and screen.page is not None:
        return _page(screen.page, area.width, max(1, area.height))
    canvas = Image.new("RGB", (area.width, max(1, area.height)), PAPER)
    draw = ImageDraw.Draw(canvas)
    font = _font(layout.scaled(15))
    margin = layout.scaled(16)
    offset = screen.scroll_of(app.app_id)
    rows = layout.row_height
    first = 0
    if browser:  # a page: the host as its heading, then paragraphs, all scrolling together
        host = urlsplit(screen.url).hostname or "about:blank"
        heading = _font(layout.scaled(24))
        title = _fit(host, heading, area.width - 2 * margin)
        draw.text((margin, margin - offset), title, font=heading, fill=INK)
        first = 2
    for row in range(first, CONTENT_ROWS):
        top = row * rows - offset
        if top + rows < 0 or top > area.height:
            continue
        draw.line((margin, top + rows - 1, area.width - margin, top + rows - 1), fill=LINE)
        label = f"{host} paragraph {row - first + 1}" if browser else f"{app.label} item {row + 1}"
        draw.text((margin, top + rows // 2), label, font=font, fill=INK, anchor="lm")
    return canvas


def _page(png: bytes, width: int, height: int) -> Image.Image:
    """The browser sandbox's page, scaled to the content's width, top-aligned."""
    canvas = Image.new("RGB", (width, height), PAPER)
    try:
        with Image.open(io.BytesIO(png)) as page:
            page.load()
            scale = width / max(1, page.width)
            size = (width, max(1, round(page.height * scale)))
            canvas.paste(page.convert("RGB").resize(size, Image.Resampling.BILINEAR), (0, 0))
    except (OSError, ValueError):
        pass  # not a picture: an empty page
    return canvas


def _status_bar(draw: ImageDraw.ImageDraw, screen: Screen, layout: Layout, ink: RGB) -> None:
    bar = layout.status_bar
    font = _font(max(8, round(bar.height * 0.5)))
    clock = CLOCK.get(screen.model.platform, "9:41")
    pad = layout.scaled(12)
    if screen.model.is_watch:
        draw.text((bar.right - pad, bar.center[1]), clock, font=font, fill=ink, anchor="rm")
        return
    draw.text((bar.left + pad, bar.center[1]), clock, font=font, fill=ink, anchor="lm")
    # Battery: an outline with a charge level, then signal bars to its left.
    h = round(bar.height * 0.4)
    right, mid = bar.right - pad, bar.center[1]
    battery = Rect(right - 2 * h, mid - h // 2, right, mid + h // 2 + 1)
    draw.rectangle(battery.box, outline=ink, width=1)
    draw.rectangle((battery.left + 2, battery.top + 2, battery.right - 5, battery.bottom - 3), ink)
    step = max(2, h // 3)
    for i in range(4):
        x = battery.left - pad - (4 - i) * step
        draw.rectangle((x, mid + h // 2 - (i + 1) * h // 4, x + step - 2, mid + h // 2), fill=ink)


def _nav_bar(draw: ImageDraw.ImageDraw, screen: Screen, layout: Layout, ink: RGB) -> None:
    bar = layout.nav_bar
    if bar.height == 0:
        return
    if screen.foreground is not None:
        draw.rectangle(bar.box, fill=PAPER)
    if len(layout.nav_buttons) == 1:  # iOS home indicator
        cx, cy = bar.center
        half = layout.width // 6
        draw.rounded_rectangle(
            (cx - half, cy - layout.scaled(2), cx + half, cy + layout.scaled(2)), 3, fill=ink
        )
        return
    size = round(bar.height * 0.2)
    stroke = layout.scaled(2)
    back, home, recents = (rect.center for rect in layout.nav_buttons)
    (bx, by), (hx, hy) = back, home
    triangle = ((bx - size, by), (bx + size, by - size), (bx + size, by + size))
    draw.polygon(triangle, outline=ink, width=stroke)
    draw.ellipse((hx - size, hy - size, hx + size, hy + size), outline=ink, width=stroke)
    draw.rectangle(
        (recents[0] - size, recents[1] - size, recents[0] + size, recents[1] + size),
        outline=ink,
        width=stroke,
    )


def _marks(
    draw: ImageDraw.ImageDraw, screen: Screen, layout: Layout, origin: tuple[int, int] = (0, 0)
) -> None:
    radius = layout.scaled(18)
    for mark in screen.marks:
        x, y = mark.x - origin[0], mark.y - origin[1]
        box = (x - radius, y - radius, x + radius, y + radius)
        draw.ellipse(box, outline=MARK, width=layout.scaled(3))
        if mark.pressed:
            dot = radius // 2
            draw.ellipse((x - dot, y - dot, x + dot, y + dot), fill=MARK)


def mark_boxes(screen: Screen) -> list[tuple[int, int, int, int]]:
    """Per touch mark, the (left, top, right, bottom) box its pixels are in, on even
    coordinates (a patch of a yuv420p picture, `_shared.video.Yuv420.patched`) and clipped
    to the screen's even size. Empty boxes are left out."""
    width, height = screen.size
    width, height = width - width % 2, height - height % 2
    reach = screen.layout.scaled(18) + 1  # the ellipse's box is inclusive: one pixel more
    boxes = []
    for mark in screen.marks:
        left, top = max(0, mark.x - reach), max(0, mark.y - reach)
        right, bottom = min(width, mark.x + reach + 1), min(height, mark.y + reach + 1)
        left, top = left - left % 2, top - top % 2
        right, bottom = min(width, right + right % 2), min(height, bottom + bottom % 2)
        if left < right and top < bottom:
            boxes.append((left, top, right, bottom))
    return boxes


def draw_marks(image: Image.Image, screen: Screen, origin: tuple[int, int] = (0, 0)) -> Image.Image:
    """*image* (the screen rendered without its touch marks, or the part of it whose top left
    corner is at *origin*) with the marks drawn on it."""
    _marks(ImageDraw.Draw(image), screen, screen.layout, origin)
    return image


def encode_png(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def encode_jpeg(image: Image.Image, max_size: int | None = None) -> tuple[bytes, int, int]:
    """JPEG bytes, scaled so the longer side is at most ``max_size``; returns (data, w, h)."""
    if max_size is not None and max(image.size) > max_size:
        scale = max_size / max(image.size)
        size = (max(1, round(image.width * scale)), max(1, round(image.height * scale)))
        image = image.resize(size, Image.Resampling.BILINEAR)
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=JPEG_QUALITY)
    return buffer.getvalue(), image.width, image.height
