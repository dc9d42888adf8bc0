"""`python -m bench stream`: the live view (issue 21) in headless Chromium through the edge of a
real `devyard up` (server + host daemon with virtual devices, one process), H.264 (WebCodecs)
and JPEG side by side, each page the real viewer (``signedStreamUrl``, ``?codec=jpeg`` for
the fallback).

Rows ``CODEC_CONTENT_xN`` (N viewers, each a page of one Chromium):

- ``static``: nothing changes on the device while measured;
- ``animated``: a touch pointer moves along a circle at 60 Hz (a second WebSocket on
  ``endpointWebSocketUrl`` sends the moves), so the picture changes faster than 30 fps.

Per row, over one window: capture-to-drawn latency p50/p95 (the host's capture wall clock,
carried in every protocol-2 frame, to the page's clock after ``drawImage``: one machine, one
clock), the drawn fps and Mbit/s of the first page, and the CPU of the `devyard up` process
(server + hostd) in % of one core, and Chromium's (every process of its over the window), and
the load average at the row's end. ``touch_to_photon`` (1 viewer, static screen): the page sends
a touch down and times until it has drawn the frame showing it, 8 taps.
``h264_animated_socket``: the animated H.264 stream to a WebSocket client in this process, no
page: capture to received, the host's and the edge's share of the latency.

The last line is one JSON object ``{"bench": "stream", "results": {row: {...}}, "ratios":
{...}, "targets": {...}}``: ``ratios.jpeg_over_h264_bytes`` (animated, 1 viewer),
``ratios.cpu_20_over_1`` (H.264 animated; ``cpu_per_frame_20_over_1`` the same per frame the
first page drew), and ``targets`` each target of issue 21 with met
true/false (never an assertion).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import signal
import statistics
import struct
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import httpx
import trio
import trio_websocket

from bench._devyard import start_devyard
from bench._results import cpu_seconds
from tests.browser import CHROMIUM, BrowserThread

if TYPE_CHECKING:
    from playwright.async_api import Page

ROWS: Final = (
    ("h264", "static", 1),
    ("jpeg", "static", 1),
    ("h264", "animated", 1),
    ("jpeg", "animated", 1),
    ("h264", "animated", 20),
    ("jpeg", "animated", 20),
)
_MOVE_HZ: Final = 60.0
_TAPS: Final = 8
#: The page's part of a touch-to-photon probe: a touch down, then the first newly drawn frame.
_TAP_JS: Final = """async ([x, y]) => {
  const before = window.devyard.decoded;
  const t0 = performance.now();
  window.devyardSend({type: "touch", pointerId: 0, action: "down", x, y});
  while (window.devyard.decoded === before) await new Promise(r => setTimeout(r, 1));
  const took = performance.now() - t0;
  const after = window.devyard.decoded;
  window.devyardSend({type: "touch", pointerId: 0, action: "up", x, y});
  while (window.devyard.decoded === after) await new Promise(r => setTimeout(r, 1));
  return took;
}"""


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DEVYARD_")}
    # 20 viewers and the animating stream: more than the default 16 streams per instance
    env.update(DEVYARD_RATE_LIMIT_ENABLED="false", DEVYARD_MAX_STREAMS_PER_INSTANCE="32")
    return env


def _descendants(pid: int) -> list[int]:
    """*pid*'s child processes and theirs (Linux /proc)."""
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        for task in Path(f"/proc/{parent}/task").glob("*"):
            try:
                children = [int(c) for c in (task / "children").read_text().split()]
            except OSError:
                continue
            found.extend(children)
            todo.extend(children)
    return found


def _browser_cpu(devyard: int) -> dict[int, float]:
    """CPU seconds so far of each process of ours but `devyard up` (Chromium's)."""
    theirs = {devyard, *_descendants(devyard)}
    return {p: cpu_seconds(p) for p in _descendants(os.getpid()) if p not in theirs}


def _pct(ordered: list[float], q: float) -> float | None:
    """The q-quantile in ms, one decimal; None without samples (a static screen draws none)."""
    if not ordered:
        return None
    return round(ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))], 1)


class Rig:
    def __init__(self, chromium: BrowserThread, status: dict[str, Any], pid: int) -> None:
        self.chromium = chromium
        self.status = status
        self.pid = pid

    async def call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        return await self.chromium.call(fn, *args, **kwargs)

    @asynccontextmanager
    async def pages(self, codec: str, count: int) -> AsyncIterator[list[Page]]:
        browser = self.chromium.browser
        assert browser is not None
        context = await self.call(browser.new_context, viewport={"width": 900, "height": 1400})
        try:
            pages = []
            for _ in range(count):
                page = await self.call(context.new_page)
                url = self.status["signedStreamUrl"] + ("&codec=jpeg" if codec == "jpeg" else "")
                await self.call(page.goto, url)
                pages.append(page)
            for page in pages:
                await self.call(
                    page.wait_for_function, "() => window.devyard.decoded > 0", timeout=30_000
                )
                state = await self.call(page.evaluate, "() => window.devyard.codec")
                if state != codec:
                    raise RuntimeError(f"the page negotiated {state}, not {codec}")
            yield pages
        finally:
            with trio.CancelScope(shield=True):
                await self.call(context.close)

    async def animate(self, task_status: trio.TaskStatus[None]) -> None:
        """Move a touch pointer along a circle until cancelled."""
        url = f"{self.status['endpointWebSocketUrl']}?token={self.status['streamToken']}"
        async with trio_websocket.open_websocket_url(url) as ws:
            action, step = "down", 0
            task_status.started()
            while True:
                angle = step * 2 * math.pi / 90
                x, y = 0.5 + 0.3 * math.cos(angle), 0.5 + 0.2 * math.sin(angle)
                message = {"type": "touch", "pointerId": 0, "action": action, "x": x, "y": y}
                await ws.send_message(json.dumps(message))
                action, step = "move", step + 1
                await trio.sleep(1 / _MOVE_HZ)


async def _row(rig: Rig, codec: str, content: str, viewers: int, window: float) -> dict[str, Any]:
    async with rig.pages(codec, viewers) as pages, trio.open_nursery() as nursery:
        if content == "animated":
            await nursery.start(rig.animate)
            await trio.sleep(1.0)  # warm-up: the encoder, the pages' decoders
        first = pages[0]
        start_state = await rig.call(first.evaluate, "() => ({...window.devyard})")
        start_ms = await rig.call(first.evaluate, "() => performance.timeOrigin+performance.now()")
        browser0 = _browser_cpu(rig.pid)
        cpu0, t0 = cpu_seconds(rig.pid), trio.current_time()
        await trio.sleep(window)
        cpu1, t1 = cpu_seconds(rig.pid), trio.current_time()
        browser1 = _browser_cpu(rig.pid)
        end_state = await rig.call(first.evaluate, "() => ({...window.devyard})")
        samples = await rig.call(first.evaluate, "() => window.devyardSamples")
        nursery.cancel_scope.cancel()
    elapsed = t1 - t0
    latencies = sorted(latency for at, latency in samples if at >= start_ms)
    drawn = end_state["decoded"] - start_state["decoded"]
    return {
        "latency_p50_ms": _pct(latencies, 0.5),
        "latency_p95_ms": _pct(latencies, 0.95),
        "fps": round(drawn / elapsed, 1),
        "mbit_s": round((end_state["bytes"] - start_state["bytes"]) * 8 / elapsed / 1e6, 3),
        "cpu_pct": round((cpu1 - cpu0) / elapsed * 100, 1),
        # Chromium's processes alive over the whole window (its renderers, GPU, browser)
        "browser_cpu_pct": round(
            sum(browser1[p] - browser0[p] for p in browser1.keys() & browser0.keys())
            / elapsed
            * 100,
            1,
        ),
        "load": round(os.getloadavg()[0], 1),
        # per frame the first page drew: under a starved machine the 20-viewer row draws fewer
        # frames, which the bare CPU ratio would credit to the fan-out
        "cpu_ms_per_frame": round((cpu1 - cpu0) * 1000 / drawn, 1) if drawn else None,
        "skipped": end_state["skipped"] - start_state["skipped"],
    }


async def _socket_row(rig: Rig, window: float) -> dict[str, Any]:
    """H.264, animated, to a plain WebSocket client in this process instead of a page: capture
    to received (no decoding, no drawing), which is the host's and the edge's share of the
    page's latency. It acks on receipt as the page does (window 3)."""
    url = f"{rig.status['endpointWebSocketUrl']}?token={rig.status['streamToken']}"
    latencies: list[float] = []
    frames = 0
    with trio.fail_after(window + 60):
        async with trio.open_nursery() as nursery, trio_websocket.open_websocket_url(url) as ws:
            start = {"type": "start", "protocol": 2, "accept": "h264", "ackWindow": 3}
            await ws.send_message(json.dumps(start))
            await nursery.start(rig.animate)
            measuring_from = trio.current_time() + 1.0  # warm-up, as the page rows
            cpu0 = t0 = None
            while True:
                message = await ws.get_message()
                if isinstance(message, str):
                    continue
                now_us = time.time_ns() // 1000
                frames += 1
                await ws.send_message(json.dumps({"type": "ack", "count": frames}))
                (capture_us,) = struct.unpack_from(">Q", message, 14)
                if trio.current_time() < measuring_from:
                    continue
                if t0 is None:
                    cpu0, t0, first = cpu_seconds(rig.pid), trio.current_time(), frames
                    continue
                latencies.append((now_us - capture_us) / 1000)
                if trio.current_time() - t0 >= window:
                    break
            cpu1, t1 = cpu_seconds(rig.pid), trio.current_time()
            nursery.cancel_scope.cancel()
    assert cpu0 is not None
    elapsed = t1 - t0
    latencies.sort()
    return {
        "latency_p50_ms": _pct(latencies, 0.5),
        "latency_p95_ms": _pct(latencies, 0.95),
        "fps": round((frames - first) / elapsed, 1),
        "cpu_pct": round((cpu1 - cpu0) / elapsed * 100, 1),
        "cpu_ms_per_frame": round((cpu1 - cpu0) * 1000 / max(1, frames - first), 1),
        "load": round(os.getloadavg()[0], 1),
    }


async def _touch_to_photon(rig: Rig, codec: str) -> dict[str, Any]:
    async with rig.pages(codec, 1) as (page,):
        taps = []
        for i in range(_TAPS):
            point = [0.2 + 0.07 * i, 0.3 + 0.05 * i]
            taps.append(await rig.call(page.evaluate, _TAP_JS, point))
            await trio.sleep(0.15)
    ordered = sorted(taps)
    return {"p50_ms": round(statistics.median(ordered), 1), "taps_ms": [round(t) for t in taps]}


async def _measure(data_dir: str, model: str, window: float) -> dict[str, Any]:
    results: dict[str, Any] = {}
    chromium = BrowserThread(
        "--disable-features=LocalNetworkAccessChecks,BlockInsecurePrivateNetworkRequests"
    )
    try:
        async with trio.open_nursery() as nursery:
            process, url = await start_devyard(
                nursery,
                ["up", "--data-dir", data_dir, "--port", "0", "--log-level", "warning"],
                _env(),
            )
            try:
                key = (Path(data_dir) / "admin-api-key").read_text().strip()
                bearer = {"Authorization": f"Bearer {key}"}
                async with httpx.AsyncClient(base_url=url, headers=bearer, timeout=120) as http:
                    with trio.fail_after(120):
                        while True:
                            created = await http.post(
                                "/v1/android_instances",
                                params={"wait": "true"},
                                json={"spec": {"model": model}},
                            )
                            if created.status_code != 409:  # the host has not linked yet
                                break
                            await trio.sleep(0.1)
                    created.raise_for_status()
                    status = created.json()["status"]
                rig = Rig(chromium, status, process.pid)
                for codec in ("h264", "jpeg"):
                    results[f"{codec}_touch_to_photon"] = await _touch_to_photon(rig, codec)
                results["h264_animated_socket"] = await _socket_row(rig, window)
                print("h264_animated_socket", results["h264_animated_socket"], flush=True)
                for codec, content, viewers in ROWS:
                    name = f"{codec}_{content}_x{viewers}"
                    results[name] = await _row(rig, codec, content, viewers, window)
                    print(name, results[name], flush=True)
            finally:
                process.send_signal(signal.SIGTERM)
                with trio.move_on_after(15):
                    await process.wait()
                if process.returncode is None:
                    process.kill()
                nursery.cancel_scope.cancel()
    finally:
        chromium.close()
    return results


def _targets(r: dict[str, Any]) -> tuple[dict[str, float], dict[str, dict[str, Any]]]:
    h264, jpeg = r["h264_animated_x1"], r["jpeg_animated_x1"]
    ratios = {
        "jpeg_over_h264_bytes": round(jpeg["mbit_s"] / max(h264["mbit_s"], 1e-9), 1),
        "cpu_20_over_1": round(r["h264_animated_x20"]["cpu_pct"] / max(h264["cpu_pct"], 1e-9), 2),
        "cpu_per_frame_20_over_1": round(
            (r["h264_animated_x20"]["cpu_ms_per_frame"] or math.nan)
            / (h264["cpu_ms_per_frame"] or math.nan),
            2,
        ),
        "jpeg_cpu_20_over_1": round(
            r["jpeg_animated_x20"]["cpu_pct"] / max(jpeg["cpu_pct"], 1e-9), 2
        ),
    }

    def target(value: float, limit: float, *, at_least: bool = False) -> dict[str, Any]:
        met = value >= limit if at_least else value <= limit
        return {"value": value, "target": limit, "met": met}

    targets = {
        "capture_to_drawn_p50_ms": target(h264["latency_p50_ms"] or math.inf, 30),
        "touch_to_photon_p50_ms": target(r["h264_touch_to_photon"]["p50_ms"], 60),
        "animated_fps": target(h264["fps"], 29, at_least=True),
        "static_mbit_s": target(r["h264_static_x1"]["mbit_s"], 0.2),
        "cpu_20_over_1": target(ratios["cpu_20_over_1"], 2),
        "jpeg_over_h264_bytes": target(ratios["jpeg_over_h264_bytes"], 20, at_least=True),
    }
    return ratios, targets


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench stream", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="3 s windows (default 8 s)")
    parser.add_argument("--window", type=float, help="seconds measured per row")
    parser.add_argument(
        "--model", default="pixel-tablet", help="virtual Android model (pixel-tablet: 800x1280)"
    )
    parser.add_argument(
        "--stages",
        action="store_true",
        help="only the host's CPU per frame, stage by stage, in this process (no browser)",
    )
    parser.add_argument("--rounds", type=int, default=5, help="--stages: rounds (median)")
    args = parser.parse_args(argv)
    if args.stages:
        from bench._stream_stages import main_stages  # noqa: PLC0415 (needs the hostd extra)

        return main_stages(args.model, args.rounds)
    window = args.window or (3.0 if args.quick else 8.0)
    if not CHROMIUM.exists():
        print(f"bench stream: {CHROMIUM} is missing (apt-get install chromium)")
        return 1
    with tempfile.TemporaryDirectory(prefix="bench-stream-") as data_dir:
        results = trio.run(_measure, data_dir, args.model, window)
    ratios, targets = _targets(results)
    for name, target in targets.items():
        print(
            f"{name:<26} {target['value']:>8} (target {target['target']}) "
            f"{'met' if target['met'] else 'NOT met'}"
        )
    summary = {
        "bench": "stream",
        "results": results,
        "ratios": ratios,
        "targets": targets,
        "config": {
            "model": args.model,
            "window_s": window,
            "cpus": os.cpu_count(),
            "load": os.getloadavg()[0],
            "python": platform.python_version(),
        },
    }
    print(json.dumps(summary))
    return 0
