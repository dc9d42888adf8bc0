"""`python -m bench api`: requests/s of the control API on SQLite and on PostgreSQL.

For each backend a real `devyard server` process listens on 127.0.0.1 (port 0; SQLite in a
temporary data dir, or a database of a throwaway PostgreSQL cluster), bootstrapped by a real
`devyard admin bootstrap`. This process is the load: `--concurrency` trio tasks on one
keep-alive connection each, for `--duration` seconds per figure after a short warm-up.

Figures per backend: `livez_rps` (GET /livez: no key, no store: the framework and the
pipeline alone), `whoami_rps` (GET /whoami: key lookup, membership, user, organization),
`list_instances_rps` (GET /v1/android_instances, a page of this server's instances: none, it
has no hosts; the key and one list read) and `list_api_keys_rps` (GET
/organizations/{id}/apiKeys with `--keys` keys listed), counting 200 answers only; any other
answer is counted in `errors`. Ratios: `whoami_over_livez` and `list_instances_over_livez`
(issue 21's targets: >= 0.8 and >= 0.5). The ``asgi`` row is a bare ASGI hello-world on the
same Hypercorn trio worker (`--asgi`, on by default), so the framework's share is visible.
The rate limiter stays on, with a limit the load cannot reach, so its cost is in the figures.
The last line printed is one JSON object:
{"bench": "api", "results": {"sqlite": {...}, "postgres": {...}}, "tls": {...}, ...}.

`--tls` (on by default; `--no-tls` skips it) adds the ``tls`` row: a SQLite server with TLS on
(its own CA, `tls_self_signed`), GET /whoami from `--tls-concurrency` (50) concurrent clients
over HTTP/1.1 (a keep-alive connection each) and over HTTP/2 (one connection, multiplexed):
requests/s and median latency of each, and ``h2_over_h1`` (requests/s ratio).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import signal
import ssl
import statistics
import subprocess
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Final

import httpx
import trio

from bench._devyard import DEVYARD, postgres_url, start_devyard
from devyard.core.tls import client_context

WARMUP_S: Final = 1.0


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DEVYARD_")}
    env.update(DEVYARD_RATE_LIMIT_RATE="1000000", DEVYARD_RATE_LIMIT_BURST="1000000")
    return env


async def _bootstrap(store_flags: list[str]) -> str:
    result = await trio.run_process(
        [*DEVYARD, "admin", "bootstrap", *store_flags, "--org", "bench"],
        env=_env(),
        capture_stdout=True,
        capture_stderr=True,
    )
    key: str = result.stdout.decode().splitlines()[-1].strip()
    return key


async def _load(
    url: str,
    key: str,
    path: str,
    concurrency: int,
    duration: float,
    *,
    http2: bool = False,
    verify: ssl.SSLContext | bool = True,
) -> dict[str, Any]:
    """Requests/s and median latency (ms) of GET *path* with *concurrency* workers for
    *duration* seconds; *http2* multiplexes them on one connection."""
    counts = {"ok": 0, "errors": 0}
    latencies: list[float] = []
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(
        base_url=url, headers=headers, limits=limits, http2=http2, verify=verify
    ) as http:

        async def worker(counting: bool) -> None:
            while True:
                sent = trio.current_time()
                response = await http.get(path)
                if counting:
                    counts["ok" if response.status_code == 200 else "errors"] += 1
                    latencies.append(trio.current_time() - sent)

        for counting, seconds in ((False, WARMUP_S), (True, duration)):
            start = trio.current_time()
            with trio.move_on_after(seconds):
                async with trio.open_nursery() as nursery:
                    for _ in range(concurrency):
                        nursery.start_soon(worker, counting)
            elapsed = trio.current_time() - start
    p50 = statistics.median(latencies) * 1000 if latencies else None
    return {
        "rps": round(counts["ok"] / elapsed, 1),
        "p50_ms": None if p50 is None else round(p50, 2),
        "errors": counts["errors"],
    }


async def _measure_tls(data_dir: str, args: argparse.Namespace) -> dict[str, Any]:
    """GET /whoami over TLS, HTTP/1.1 against HTTP/2, on one SQLite server."""
    flags = ["--data-dir", data_dir]
    key = await _bootstrap(flags)
    env = {**_env(), "DEVYARD_TLS_SELF_SIGNED": "true"}
    async with trio.open_nursery() as nursery:
        process, url = await start_devyard(
            nursery, ["server", *flags, "--listen", "127.0.0.1:0", "--log-level", "warning"], env
        )
        try:
            verify = client_context(Path(data_dir) / "tls" / "ca.pem")
            n, seconds = args.tls_concurrency, args.duration
            h1 = await _load(url, key, "/whoami", n, seconds, verify=verify)
            h2 = await _load(url, key, "/whoami", n, seconds, http2=True, verify=verify)
        finally:
            await _stop(process)
            nursery.cancel_scope.cancel()
    return {
        "concurrency": args.tls_concurrency,
        "http1_rps": h1["rps"],
        "http1_p50_ms": h1["p50_ms"],
        "http2_rps": h2["rps"],
        "http2_p50_ms": h2["p50_ms"],
        "h2_over_h1": round(h2["rps"] / h1["rps"], 3) if h1["rps"] else None,
        "errors": h1["errors"] + h2["errors"],
    }


async def _stop(process: trio.Process) -> None:
    process.send_signal(signal.SIGTERM)
    with trio.move_on_after(15):
        await process.wait()
    if process.returncode is None:
        process.kill()
        await process.wait()


async def _measure(store_flags: list[str], args: argparse.Namespace) -> dict[str, Any]:
    key = await _bootstrap(store_flags)
    async with trio.open_nursery() as nursery:
        process, url = await start_devyard(
            nursery,
            ["server", *store_flags, "--listen", "127.0.0.1:0", "--log-level", "warning"],
            _env(),
        )
        try:
            headers = {"Authorization": f"Bearer {key}"}
            async with httpx.AsyncClient(base_url=url, headers=headers) as http:
                org_id = (await http.get("/whoami")).json()["organization"]["id"]
                for i in range(args.keys - 1):
                    made = await http.post(
                        f"/organizations/{org_id}/apiKeys", json={"name": f"k{i}"}
                    )
                    made.raise_for_status()
            n, seconds = args.concurrency, args.duration
            livez = await _load(url, key, "/livez", n, seconds)
            whoami = await _load(url, key, "/whoami", n, seconds)
            instances = await _load(url, key, "/v1/android_instances", n, seconds)
            listing = await _load(url, key, f"/organizations/{org_id}/apiKeys", n, seconds)
        finally:
            await _stop(process)
            nursery.cancel_scope.cancel()
    return {
        "livez_rps": livez["rps"],
        "whoami_rps": whoami["rps"],
        "list_instances_rps": instances["rps"],
        "list_api_keys_rps": listing["rps"],
        "whoami_over_livez": _ratio(whoami["rps"], livez["rps"]),
        "list_instances_over_livez": _ratio(instances["rps"], livez["rps"]),
        "errors": livez["errors"] + whoami["errors"] + instances["errors"] + listing["errors"],
    }


def _ratio(a: float, b: float) -> float | None:
    return round(a / b, 3) if b else None


# A bare ASGI app on the same Hypercorn trio worker the server uses: what the framework and
# devyard's pipeline cost on top of it is /livez's distance from this.
_HELLO = """
import sys, trio
from hypercorn.config import Config
from hypercorn.trio import serve

async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            await send({"type": message["type"] + ".complete"})
            if message["type"] == "lifespan.shutdown":
                return
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": b'{"status":"ok"}'})

async def main():
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = None
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(serve, app, config)
        print("serving at", binds[0], flush=True)

trio.run(main)
"""


async def _measure_asgi(args: argparse.Namespace) -> dict[str, Any]:
    async with trio.open_nursery() as nursery:
        process = await trio.lowlevel.open_process(
            [sys.executable, "-c", _HELLO], stdout=subprocess.PIPE
        )
        assert process.stdout is not None
        buffer = b""
        with trio.fail_after(30):
            while (match := re.search(rb"serving at (http://\S+)", buffer)) is None:
                chunk = await process.stdout.receive_some(4096)
                if not chunk:
                    raise RuntimeError("the ASGI hello-world exited before serving")
                buffer += chunk
        try:
            hello = await _load(match.group(1).decode(), "-", "/", args.concurrency, args.duration)
        finally:
            await _stop(process)
            nursery.cancel_scope.cancel()
    return {"hello_rps": hello["rps"], "errors": hello["errors"]}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench api", description=__doc__)
    parser.add_argument("--duration", type=float, default=5.0, help="seconds per figure")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--keys", type=int, default=20, help="API keys in the listed org")
    parser.add_argument(
        "--backends", default="sqlite,postgres", help="comma-separated: sqlite, postgres"
    )
    parser.add_argument(
        "--tls",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="the tls row: HTTP/1.1 against HTTP/2 over TLS (default on)",
    )
    parser.add_argument("--tls-concurrency", type=int, default=50)
    parser.add_argument(
        "--asgi",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="the asgi row: a bare ASGI hello-world on the same Hypercorn worker (default on)",
    )
    args = parser.parse_args(argv)
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    if not set(backends) <= {"sqlite", "postgres"} or args.duration <= 0 or args.keys < 1:
        parser.error("bad --backends, --duration or --keys")

    results: dict[str, Any] = {}
    with ExitStack() as stack:
        for backend in backends:
            data_dir = stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-api-"))
            flags = ["--data-dir", data_dir]
            if backend == "postgres":
                url = stack.enter_context(postgres_url("api"))
                if url is None:
                    results[backend] = None
                    continue
                flags += ["--database-url", url]
            results[backend] = trio.run(_measure, flags, args)
            row = results[backend]
            print(
                f"{backend:>8}: GET /livez {row['livez_rps']:>8.1f}   /whoami"
                f" {row['whoami_rps']:>8.1f} ({row['whoami_over_livez']}x)   instances page"
                f" {row['list_instances_rps']:>8.1f} ({row['list_instances_over_livez']}x)"
                f"   .../apiKeys ({args.keys} keys) {row['list_api_keys_rps']:>8.1f} req/s"
                f"   errors {row['errors']}",
                flush=True,
            )
        asgi = None
        if args.asgi:
            asgi = trio.run(_measure_asgi, args)
            print(f"    asgi: bare hello-world {asgi['hello_rps']:>8.1f} req/s", flush=True)
        tls = None
        if args.tls:
            data_dir = stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-api-tls-"))
            tls = trio.run(_measure_tls, data_dir, args)
            print(
                f"     tls: GET /whoami x{tls['concurrency']}  HTTP/1.1 {tls['http1_rps']:>8.1f}"
                f" req/s p50 {tls['http1_p50_ms']} ms   HTTP/2 {tls['http2_rps']:>8.1f} req/s"
                f" p50 {tls['http2_p50_ms']} ms   h2/h1 {tls['h2_over_h1']}",
                flush=True,
            )
    summary = {
        "bench": "api",
        "results": results,
        "tls": tls,
        "asgi": asgi,
        "config": {
            "duration_s": args.duration,
            "concurrency": args.concurrency,
            "keys": args.keys,
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
        },
    }
    print(json.dumps(summary))
    failed = any(r is not None and r["errors"] for r in [*results.values(), tls, asgi])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
