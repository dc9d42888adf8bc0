"""`python -m bench stream --stages`: host CPU per live-view frame, stage by stage, in this
process (no server, no browser), so other processes' load changes the figures little.

The picture is the one `bench stream` animates: the virtual device's launcher with a touch
pointer moving along a circle, one position per frame. Each stage runs over the same frames
and reports CPU milliseconds per frame (``time.process_time``: this process, every thread,
x264's included), the median of ``--rounds`` rounds.

``before`` is the pipeline as it was (bench/README.md): an RGB picture per frame (marks drawn
over a cached render), `VideoFrame.from_image`, swscale to yuv420p, x264 at its default thread
count. ``after`` is what `LiveScreen` and `H264Tier` do now: the cached planes patched around
the marks, copied into the frame, x264 at `X264_THREADS`. ``full_render`` and
``full_convert`` are what a change other than a touch mark costs once (a scroll, a key).
"""

from __future__ import annotations

import json
import math
import os
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any, Final

import attrs

from devyard.hostd.drivers._shared.video import (
    X264_THREADS,
    H264Encoder,
    Yuv420,
    to_yuv420,
)
from devyard.hostd.drivers.base import Platform
from devyard.hostd.drivers.virtual.frames import LiveScreen
from devyard.hostd.drivers.virtual.models import MODELS
from devyard.hostd.drivers.virtual.render import draw_marks, encode_jpeg, render
from devyard.hostd.drivers.virtual.ui import Screen, TouchMark, UiApp

__all__ = ["run_stages"]

_FRAMES: Final = 30
_FRAME_US: Final = 33_333


def _screens(model_name: str) -> tuple[Screen, list[Screen]]:
    model = MODELS[Platform.ANDROID][model_name]
    base = Screen(model, apps=tuple(UiApp(a.app_id, a.label) for a in model.system_apps))
    moved = []
    for step in range(_FRAMES):
        angle = step * 2 * math.pi / 90
        x = round(model.width * (0.5 + 0.3 * math.cos(angle)))
        y = round(model.height * (0.5 + 0.2 * math.sin(angle)))
        moved.append(attrs.evolve(base, marks=(TouchMark(0, x, y, x, y, pressed=True),)))
    return base, moved


def _cpu_ms(work: Callable[[int], object], count: int, rounds: int) -> float:
    """Median over *rounds* of the CPU ms per call of ``work(i)``, i in range(count)."""
    samples = []
    for _ in range(rounds):
        started = time.process_time()
        for index in range(count):
            work(index)
        samples.append((time.process_time() - started) * 1000 / count)
    return round(statistics.median(samples), 2)


def run_stages(model_name: str, rounds: int) -> dict[str, Any]:
    import av  # noqa: PLC0415 (the hostd extra)
    from av.video.reformatter import VideoReformatter  # noqa: PLC0415

    base, moved = _screens(model_name)
    base_rgb = render(base)
    pictures = [draw_marks(base_rgb.copy(), screen) for screen in moved]
    width, height = base_rgb.size
    n = len(moved)
    results: dict[str, float] = {}

    # -- before ------------------------------------------------------------------------------
    results["full_render"] = _cpu_ms(lambda i: render(moved[i]), n, rounds)
    results["before_marks_rgb"] = _cpu_ms(
        lambda i: draw_marks(base_rgb.copy(), moved[i]), n, rounds
    )
    results["before_from_image"] = _cpu_ms(
        lambda i: av.VideoFrame.from_image(pictures[i]),  # type: ignore[no-untyped-call]
        n,
        rounds,
    )
    rgb_frames = [av.VideoFrame.from_image(p) for p in pictures]  # type: ignore[no-untyped-call]
    reformatter = VideoReformatter()
    results["before_swscale"] = _cpu_ms(
        lambda i: reformatter.reformat(rgb_frames[i], format="yuv420p"), n, rounds
    )
    yuv_frames = [reformatter.reformat(f, format="yuv420p") for f in rgb_frames]

    def x264(threads: int) -> tuple[float, float]:
        context = H264Encoder(width, height, threads=threads)._context
        pts = iter(range(1, 1 << 30))
        context.encode(yuv_frames[-1])  # the key frame: not what a moving pointer costs
        sizes: list[int] = []

        def encode(i: int) -> None:
            frame = yuv_frames[i]
            frame.pts = next(pts) * _FRAME_US
            sizes.append(sum(p.size for p in context.encode(frame)))

        return _cpu_ms(encode, n, rounds), statistics.mean(sizes)

    results["before_x264"], before_bytes = x264(0)
    results["before_total"] = round(
        results["before_marks_rgb"]
        + results["before_from_image"]
        + results["before_swscale"]
        + results["before_x264"],
        2,
    )

    # -- after -------------------------------------------------------------------------------
    results["full_convert"] = _cpu_ms(lambda i: to_yuv420(pictures[i]), n, rounds)
    live = LiveScreen(base, started_at=0.0)
    makers: list[Callable[[], Yuv420]] = []
    for screen in moved:
        live.update(screen)
        makers.append(live.snapshot()[1])
    makers[0]()  # the base's planes: once per change of everything but the marks
    results["after_marks_yuv"] = _cpu_ms(lambda i: makers[i](), n, rounds)
    planes = [make() for make in makers]
    results["after_x264"], after_bytes = x264(X264_THREADS)
    encoder = H264Encoder(width, height)
    frame_index = iter(range(1 << 30))
    encoder.encode(planes[-1], 0, True)
    results["after_fill_and_x264"] = _cpu_ms(
        lambda i: encoder.encode(planes[i], (next(frame_index) + 1) * _FRAME_US, False),
        n,
        rounds,
    )
    results["after_total"] = round(results["after_marks_yuv"] + results["after_fill_and_x264"], 2)
    results["jpeg_encode"] = _cpu_ms(lambda i: encode_jpeg(pictures[i]), n, rounds)
    return {
        "cpu_ms_per_frame": results,
        "bytes_per_frame": {"before": round(before_bytes), "after": round(after_bytes)},
        "size": [width, height],
    }


def _rows(stages: dict[str, float]) -> Iterator[str]:
    for name, value in stages.items():
        yield f"{name:<22} {value:>8.2f} ms CPU/frame"


def main_stages(model_name: str, rounds: int) -> int:
    load = os.getloadavg()[0]
    result = run_stages(model_name, rounds)
    for row in _rows(result["cpu_ms_per_frame"]):
        print(row)
    summary = {
        "bench": "stream-stages",
        **result,
        "ratios": {
            "before_over_after": round(
                result["cpu_ms_per_frame"]["before_total"]
                / result["cpu_ms_per_frame"]["after_total"],
                1,
            )
        },
        "config": {
            "model": model_name,
            "frames": _FRAMES,
            "rounds": rounds,
            "load": round(max(load, os.getloadavg()[0]), 1),
            "cpus": os.cpu_count(),
        },
    }
    print(json.dumps(summary))
    return 0
