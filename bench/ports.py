"""`python -m bench ports`: a request through ``targetHttpPortUrlPrefix`` next to the same
request made directly on loopback (issue 15).

A helper process (this module with ``--rig WORKDIR``) runs the server (API + edge), a host
daemon linked over the raw link port, one ready Android instance, and an HTTP server
(Hypercorn, a tiny ASGI app) mapped to the virtual device's port 8080: the app "on the device".
This process is the client (httpx, one keep-alive connection), and measures the same two
requests both ways:

    direct   client ──TCP──▶ the app
    proxied  client ──TCP──▶ edge (HTTP/1.1 client on an ``http`` stream) ══host link══▶
             hostd ──TCP──▶ the app

- ``latency_ms``: the median of ``--requests`` sequential ``GET /small`` (100 bytes), after a
  warm-up; ``p95_ms`` too.
- ``mb_per_s``: the median of ``--reps`` ``GET /bytes?n=SIZE`` (a streamed chunked body of
  ``--size-mib``), read as it comes.

The last line printed is one JSON object: {"bench": "ports", "results": {"direct": {...},
"proxied": {...}}, "latency_ratio": proxied/direct, "throughput_ratio": proxied/direct}.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any, Final
from urllib.parse import parse_qs

import httpx
import trio
from hypercorn.config import Config
from hypercorn.trio import serve

from bench._adb_rig import READY, START_TIMEOUT, bench_hostd_config, open_server, wait_host_linked
from bench._child import run_with_lifeline
from bench._procs import Child, ChildError, spawn
from devyard.hostd.daemon import serve_hostd
from devyard.hostd.drivers.virtual import VirtualDevice

DEVICE_PORT: Final = 8080
_BLOCK: Final = b"\xa5" * (1024 * 1024)
_SMALL: Final = b"x" * 100


# ---- the helper process ----------------------------------------------------------------------


async def _app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while (message := await receive())["type"] != "lifespan.shutdown":
            await send({"type": message["type"] + ".complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    if scope["type"] != "http":
        return
    if scope["path"] == "/bytes":
        left = int(parse_qs(scope["query_string"].decode()).get("n", ["0"])[0])
        await send({"type": "http.response.start", "status": 200, "headers": []})
        while left > 0:
            piece = _BLOCK[: min(left, len(_BLOCK))]
            await send({"type": "http.response.body", "body": piece, "more_body": True})
            left -= len(piece)
        await send({"type": "http.response.body", "body": b""})
        return
    headers = [(b"content-length", b"100"), (b"content-type", b"text/plain")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": _SMALL})


async def _serve_rig(workdir: Path) -> None:
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = None
    config.errorlog = None
    async with open_server(workdir) as (server, bound), trio.open_nursery() as nursery:
        hostd = await bench_hostd_config(
            workdir, server.url, server.host_token_file, capacity=2, link=server.link
        )
        shutdown = trio.Event()
        supervisor = await nursery.start(partial(serve_hostd, hostd, shutdown=shutdown))
        await wait_host_linked(bound)
        key = (await trio.Path(server.api_key_file).read_text()).strip()
        async with httpx.AsyncClient(base_url=server.url, timeout=60) as http:
            created = await http.post(
                "/v1/android_instances",
                params={"wait": "true"},
                json={},
                headers={"Authorization": f"Bearer {key}"},
            )
        instance = created.json()
        device = supervisor.device(instance["metadata"]["id"])
        assert isinstance(device, VirtualDevice)
        binds: list[str] = await nursery.start(partial(serve, _app, config, mode="asgi"))  # type: ignore[arg-type]
        app_port = int(binds[0].rsplit(":", 1)[1])
        device.map_port(DEVICE_PORT, app_port)
        info = {
            "prefix": instance["status"]["targetHttpPortUrlPrefix"],
            "token": instance["status"]["token"],
            "direct": f"http://127.0.0.1:{app_port}/",
        }
        print(READY + json.dumps(info), flush=True)
        await trio.sleep_forever()


# ---- the client ------------------------------------------------------------------------------


async def _measure(base: str, headers: dict[str, str], args: argparse.Namespace) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=base, headers=headers, timeout=120) as http:
        for _ in range(args.warmup):
            assert (await http.get("small")).status_code == 200
        times = []
        for _ in range(args.requests):
            start = time.perf_counter()
            response = await http.get("small")
            times.append(time.perf_counter() - start)
            if response.status_code != 200 or len(response.content) != 100:
                raise ChildError(f"GET {base}small answered {response.status_code}")
        size = args.size_mib * 1024 * 1024
        rates = []
        for _ in range(args.reps):
            start = time.perf_counter()
            got = 0
            async with http.stream("GET", "bytes", params={"n": size}) as streamed:
                async for chunk in streamed.aiter_raw():
                    got += len(chunk)
            if got != size:
                raise ChildError(f"GET {base}bytes gave {got} bytes, not {size}")
            rates.append(size / (time.perf_counter() - start) / 1e6)
    times.sort()
    return {
        "latency_ms": round(statistics.median(times) * 1000, 3),
        "p95_ms": round(times[int(len(times) * 0.95) - 1] * 1000, 3),
        "mb_per_s": round(statistics.median(rates), 1),
    }


async def _bench(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-ports-") as tmp:
        workdir = Path(tmp)
        argv = [sys.executable, "-m", "bench", "ports", "--rig", str(workdir)]
        async with spawn("rig", argv, logdir=workdir) as child:
            info = await _ready(child)
            direct = await _measure(info["direct"], {}, args)
            bearer = {"Authorization": f"Bearer {info['token']}"}
            proxied = await _measure(f"{info['prefix']}{DEVICE_PORT}/", bearer, args)
    return {
        "bench": "ports",
        "results": {"direct": direct, "proxied": proxied},
        "latency_ratio": round(proxied["latency_ms"] / direct["latency_ms"], 2),
        "throughput_ratio": round(proxied["mb_per_s"] / direct["mb_per_s"], 3),
        "requests": args.requests,
        "size_mib": args.size_mib,
    }


async def _ready(child: Child) -> dict[str, Any]:
    with trio.fail_after(START_TIMEOUT):
        line = await child.readline()
    if not line.startswith(READY):
        raise ChildError(f"{child.name}: expected READY, got {line!r}{child.tail_note()}")
    info: dict[str, Any] = json.loads(line.removeprefix(READY))
    return info


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench ports", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="100 requests, 2 x 32 MiB")
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--size-mib", type=int, default=128)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--rig", metavar="WORKDIR", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.rig:
        logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
        trio.run(run_with_lifeline, partial(_serve_rig, Path(args.rig)))
        return 0
    if args.quick:
        args.requests, args.size_mib, args.reps = 100, 32, 2
    summary = trio.run(_bench, args)
    for name, row in summary["results"].items():
        print(f"{name:8} {row['latency_ms']:8.2f} ms p50 {row['p95_ms']:8.2f} ms p95 "
              f"{row['mb_per_s']:8.1f} MB/s")  # fmt: skip
    print(json.dumps(summary))
    return 0
