"""The real-edge rows of `bench links`: idle host links and idle viewers (bench/_links_edge.py).

``host_ws`` / ``host_tcp``: a real server process (`serve_server`) and one process of N host
links to its edge's host route (a WebSocket on the API port, or the raw link port), each with
its own host token and hostd's hello. ``viewer``: the real server, a real hostd process
(bench/_adb_rig.py, virtual devices) with one instance (a static screen), and one process of N
WebSocket clients on the instance's stream endpoint. Memory is the server process's VmRSS
after minus before, per link or viewer; CPU is over `idle` seconds once all are up.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any, Final

import httpx
import trio

from bench._paths import REPO, START_TIMEOUT
from bench._procs import Child, ChildError, spawn
from bench._results import cpu_seconds

_SETTLE: Final = 2.0  # seconds after the last link or viewer was up, before RSS is read


def _rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise ChildError(f"no VmRSS for {pid}")


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in [str(REPO), env.get("PYTHONPATH", "")] if p)
    return env


def _argv(module: str, *args: str) -> list[str]:
    return [sys.executable, "-m", module, *args]


async def _ready_json(child: Child) -> dict[str, Any]:
    with trio.fail_after(START_TIMEOUT):
        line = await child.readline()
    if not line.startswith("READY "):
        raise ChildError(f"{child.name}: expected READY, got {line!r}{child.tail_note()}")
    info: dict[str, Any] = json.loads(line.removeprefix("READY "))
    return info


async def _wait_for(child: Child, prefix: str, budget: float) -> None:
    with trio.fail_after(budget):
        while not (await child.readline()).startswith(prefix):
            pass


async def _start_server(
    stack: AsyncExitStack, name: str, workdir: Path, logdir: Path, hosts: int, *, streams: int = 16
) -> tuple[Child, dict[str, Any]]:
    await trio.Path(workdir).mkdir(parents=True, exist_ok=True)
    server = await stack.enter_async_context(
        spawn(
            f"{name}-server",
            _argv(
                *("bench._links_edge", "server", str(workdir), "--hosts", str(hosts)),
                *("--max-streams", str(streams)),
            ),
            logdir=logdir,
            cwd=REPO,
            env=_env(),
        )
    )
    return server, await _ready_json(server)


def _row(
    *,
    count: int,
    setup_s: float,
    base: dict[str, int],
    held: dict[str, int],
    cpu: dict[str, float],
    idle: float,
) -> dict[str, Any]:
    per = {side: (held[side] - base[side]) / count for side in base}
    per_1000 = {side: 1000 * cpu[side] / idle / (count / 1000) for side in cpu}
    return {
        "links": count,
        "setup_s": round(setup_s, 2),
        "server_bytes_per_link": round(per["server"]),
        "client_bytes_per_link": round(per["client"]),
        "server_cpu_ms_per_s_per_1000": round(per_1000["server"], 2),
        "client_cpu_ms_per_s_per_1000": round(per_1000["client"], 2),
        "server_rss_mib": round(held["server"] / 2**20, 1),
    }


async def _hold(
    procs: dict[str, Child], idle: float, settled: Callable[[], None] = lambda: None
) -> tuple[dict[str, int], dict[str, float]]:
    """RSS once settled (*settled* is called then), and the CPU seconds each uses over
    *idle* seconds."""
    await trio.sleep(_SETTLE)
    settled()
    held = {side: _rss(child.pid) for side, child in procs.items()}
    cpu0 = {side: cpu_seconds(child.pid) for side, child in procs.items()}
    await trio.sleep(idle)
    cpu = {side: cpu_seconds(child.pid) - cpu0[side] for side, child in procs.items()}
    for child in procs.values():
        if child.process.returncode is not None:
            raise ChildError(f"{child.name} died{child.tail_note()}")
    return held, cpu


async def measure_hosts(carrier: str, hosts: int, idle: float, logdir: Path) -> dict[str, Any]:
    """N idle host links to a real edge: `host_ws` (the API port) or `host_tcp` (link port)."""
    async with AsyncExitStack() as stack:
        server, info = await _start_server(stack, carrier, logdir / carrier, logdir, hosts)
        link = ["--link", info["link"]] if carrier == "host_tcp" else []
        client = await stack.enter_async_context(
            spawn(
                f"{carrier}-client",
                _argv(
                    *("bench._links_edge", "hosts", "--url", info["url"]),
                    *("--tokens", info["tokens_file"], *link, "--freeze-every", "1000"),
                ),
                logdir=logdir,
                cwd=REPO,
                env=_env(),
            )
        )
        await _wait_for(client, "BASE", START_TIMEOUT)  # its imports: the baseline after
        procs = {"server": server, "client": client}
        base = {side: _rss(child.pid) for side, child in procs.items()}
        started = trio.current_time()
        budget = 60 + hosts / 10
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_wait_for, server, "LINKS", budget)
            nursery.start_soon(_wait_for, client, "READY", budget)
        setup_s = trio.current_time() - started
        held, cpu = await _hold(procs, idle)
        redials = client.log_path.read_text(errors="replace").count("dialling again")
    return {
        **_row(count=hosts, setup_s=setup_s, base=base, held=held, cpu=cpu, idle=idle),
        "redials": redials,
    }


async def _create_instance(url: str, key: str) -> dict[str, Any]:
    bearer = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(base_url=url, headers=bearer, timeout=120) as http:
        with trio.fail_after(120):
            while True:
                created = await http.post(
                    "/v1/android_instances",
                    params={"wait": "true"},
                    json={"spec": {"model": "pixel-tablet"}},
                )
                if created.status_code != 409:  # the host has not linked yet
                    break
                await trio.sleep(0.1)
        created.raise_for_status()
        status: dict[str, Any] = created.json()["status"]
        return status


async def measure_viewers(viewers: int, idle: float, logdir: Path) -> dict[str, Any]:
    """N idle viewers of one instance's screen (static) through a real server's edge."""
    async with AsyncExitStack() as stack:
        workdir = logdir / "viewer"
        # one instance's viewers: the server's limit (16 by default, more is 429) is raised
        server, info = await _start_server(
            stack, "viewer", workdir, logdir, 0, streams=viewers + 16
        )
        host = await stack.enter_async_context(
            spawn(
                "viewer-hostd",
                _argv("bench._adb_rig", "host", str(workdir), info["url"], info["tokens_file"]),
                logdir=logdir,
                cwd=REPO,
                env=_env(),
            )
        )
        with trio.fail_after(START_TIMEOUT):
            while not (await host.readline()).startswith("READY "):
                pass
        key = (await trio.Path(info["api_key_file"]).read_text()).strip()
        status = await _create_instance(info["url"], key)
        stream_url = f"{status['endpointWebSocketUrl']}?token={status['streamToken']}"
        client = await stack.enter_async_context(
            spawn(
                "viewer-client",
                _argv(
                    *("bench._links_edge", "viewers", "--url", stream_url),
                    *("--count", str(viewers), "--freeze-every", "1000"),
                ),
                logdir=logdir,
                cwd=REPO,
                env=_env(),
            )
        )
        await _wait_for(client, "BASE", START_TIMEOUT)
        procs = {"server": server, "client": client, "host": host}
        base = {side: _rss(child.pid) for side, child in procs.items()}
        started = trio.current_time()
        await _wait_for(client, "READY", 60 + viewers / 5)
        setup_s = trio.current_time() - started
        log = client.log_path
        joining: list[int] = []

        def settled() -> None:
            joining.append(log.read_text(errors="replace").count("idle frame"))

        held, cpu = await _hold(procs, idle, settled)
        frames = client.log_path.read_text(errors="replace").count("idle frame")
    row = _row(count=viewers, setup_s=setup_s, base=base, held=held, cpu=cpu, idle=idle)
    row["host_bytes_per_link"] = round((held["host"] - base["host"]) / viewers)
    row["host_cpu_ms_per_s_per_1000"] = round(1000 * cpu["host"] / idle / (viewers / 1000), 2)
    row["frames_while_idle"] = frames - joining[0]  # over idle, to all viewers
    row["frames_while_joining"] = joining[0]  # to viewers already up, as others joined
    return row
