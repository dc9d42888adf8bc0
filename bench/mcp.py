"""`python -m bench mcp`: an MCP `observe` round trip (issue 15), against the same device-API
requests made directly, on a real `devyard up` (server + host daemon with virtual devices).

Rows, each the latency of one call, one at a time, interleaved round by round:

- ``api_screenshot``: ``GET {apiUrl}/screenshot?format=jpeg&maxEdge=1280&quality=70`` with
  httpx on loopback (the picture `observe` returns, asked for directly: the baseline);
- ``api_screenshot_ui``: that plus ``GET {apiUrl}/`` and ``GET {apiUrl}/ui`` (every request
  `observe` makes, made directly);
- ``mcp_observe``: ``tools/call observe`` through ``mcpUrl`` with the official `mcp` SDK's
  Streamable HTTP client (one session, kept open);
- ``mcp_observe_tree``: the same with ``format: none`` (the tree only).

The last line is one JSON object: ``{"bench": "mcp", "results": {row: {"p50", "p95"}} (ms),
"ratios": {...}}``; ``ratios.observe_over_screenshot`` is ``mcp_observe`` / ``api_screenshot``
(p50) and ``observe_over_direct`` is ``mcp_observe`` / ``api_screenshot_ui``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Final

import httpx
import httpx2
import trio
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from bench._devyard import start_devyard

ROWS: Final = ("api_screenshot", "api_screenshot_ui", "mcp_observe", "mcp_observe_tree")
_SHOT: Final = "/screenshot?format=jpeg&maxEdge=1280&quality=70"


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DEVYARD_")}
    env.update(DEVYARD_RATE_LIMIT_ENABLED="false")
    return env


def _ms(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return {"p50": round(statistics.median(ordered) * 1000, 2), "p95": round(p95 * 1000, 2)}


async def _timed(call: Callable[[], Awaitable[None]]) -> float:
    start = trio.current_time()
    await call()
    return trio.current_time() - start


async def _ready_android(http: httpx.AsyncClient) -> dict[str, Any]:
    with trio.fail_after(120):
        while True:
            created = await http.post("/v1/android_instances", params={"wait": "true"}, json={})
            if created.status_code != 409:  # 409: the host daemon has not linked yet
                break
            await trio.sleep(0.1)
    created.raise_for_status()
    instance: dict[str, Any] = created.json()
    return instance


async def _measure(data_dir: str, reps: int) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {row: [] for row in ROWS}
    async with trio.open_nursery() as nursery:
        process, url = await start_devyard(
            nursery,
            ["up", "--data-dir", data_dir, "--port", "0", "--log-level", "warning"],
            _env(),
        )
        try:
            key = (Path(data_dir) / "admin-api-key").read_text().strip()
            bearer = {"Authorization": f"Bearer {key}"}
            async with httpx.AsyncClient(base_url=url, headers=bearer, timeout=60) as http:
                status = (await _ready_android(http))["status"]
                api = status["apiUrl"]
                device = {"Authorization": f"Bearer {status['token']}"}
                mcp_http = httpx2.AsyncClient(headers=bearer, timeout=60)
                transport = streamable_http_client(status["mcpUrl"], http_client=mcp_http)
                async with mcp_http, Client(transport, mode="legacy") as client:

                    async def shot() -> None:
                        (await http.get(api + _SHOT, headers=device)).raise_for_status()

                    async def direct() -> None:
                        for path in ("/", _SHOT, "/ui"):
                            (await http.get(api + path, headers=device)).raise_for_status()

                    async def observe() -> None:
                        result = await client.call_tool("observe", {})
                        assert not result.is_error, result

                    async def tree() -> None:
                        result = await client.call_tool("observe", {"format": "none"})
                        assert not result.is_error, result

                    calls = dict(zip(ROWS, (shot, direct, observe, tree), strict=True))
                    for call in calls.values():  # warm-up: connections, caches
                        await call()
                    for _ in range(reps):
                        for row, call in calls.items():
                            samples[row].append(await _timed(call))
        finally:
            process.send_signal(signal.SIGTERM)
            with trio.move_on_after(15):
                await process.wait()
            if process.returncode is None:
                process.kill()
            nursery.cancel_scope.cancel()
    return samples


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench mcp", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="20 calls per row (default 100)")
    parser.add_argument("--reps", type=int, help="calls per row")
    args = parser.parse_args(argv)
    reps = args.reps or (20 if args.quick else 100)
    if reps < 1:
        parser.error("--reps must be at least 1")
    with tempfile.TemporaryDirectory(prefix="bench-mcp-") as data_dir:
        samples = trio.run(_measure, data_dir, reps)
    results = {row: _ms(values) for row, values in samples.items()}
    for row, figures in results.items():
        print(f"{row:<18} p50 {figures['p50']:8.2f} ms   p95 {figures['p95']:8.2f} ms")
    observe = results["mcp_observe"]["p50"]
    ratios = {
        "observe_over_screenshot": round(observe / results["api_screenshot"]["p50"], 2),
        "observe_over_direct": round(observe / results["api_screenshot_ui"]["p50"], 2),
    }
    print(f"ratios {ratios}")
    summary = {
        "bench": "mcp",
        "results": results,
        "ratios": ratios,
        "config": {
            "reps": reps,
            "cpus": os.cpu_count(),
            "load": os.getloadavg()[0],
            "python": platform.python_version(),
        },
    }
    print(json.dumps(summary))
    return 0
