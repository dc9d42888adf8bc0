"""Screenshots scaled and re-encoded for the device API's ``GET /screenshot`` options.

``format=jpeg|png``, ``maxEdge=N`` (the longer side at most N pixels, never enlarged) and
``quality`` (JPEG, 1-95). Done here, beside the device, so the host link carries the small
picture rather than the full PNG; Pillow, in a worker thread.
"""

from __future__ import annotations

import io
from typing import Final

from PIL import Image

__all__ = ["MIN_EDGE", "scaled_size", "transcode"]

MIN_EDGE: Final = 16


def scaled_size(width: int, height: int, max_edge: int | None) -> tuple[int, int]:
    """The size a ``width`` x ``height`` picture gets with ``max_edge`` (the one formula the
    MCP server states its coordinate space with)."""
    if max_edge is None or max(width, height) <= max_edge:
        return width, height
    scale = max_edge / max(width, height)
    return max(1, round(width * scale)), max(1, round(height * scale))


def transcode(png: bytes, *, fmt: str, max_edge: int | None, quality: int) -> bytes:
    """*png* as ``fmt`` ("png" or "jpeg"), scaled down to ``max_edge``."""
    with Image.open(io.BytesIO(png)) as opened:
        image = opened.convert("RGB")
    size = scaled_size(image.width, image.height, max_edge)
    if size != image.size:
        image = image.resize(size, Image.Resampling.LANCZOS)
    out = io.BytesIO()
    if fmt == "jpeg":
        image.save(out, format="JPEG", quality=quality)
    else:
        image.save(out, format="PNG", optimize=False)
    return out.getvalue()
