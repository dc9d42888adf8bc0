"""`python -m bench tunnel`: an instance's way out through a tunnel, against direct TCP and
`ssh -L`, plus connector failover time; on loopback, the deployed shape, one run.

    client ──TCP──▶ hostd's egress proxy (CONNECT) ══ host link ══▶ edge (server)
           ══ connector link ══▶ `devyard connector run` ──TCP──▶ sink

The server (bench/_adb_rig.py `server`), the host daemon (bench/_tunnel_rig.py), two
connectors (`devyard connector run`: active + standby) and the sink (the Go sink of
`bench mux`) are separate processes; this process only creates the tunnel and the Android
instance through the API and drives the load client (bench/_tunnel_client.py, threads).

Rows: `direct` (client -> sink), `ssh_L` (`ssh -L` through a throwaway loopback sshd,
bench/_ssh.py) and `tunnel` (the path above, HTTP CONNECT to the instance's proxy port, read
from the device's `settings get global http_proxy`). Figures: Gbit/s with 1 and 4 streams,
opens/s (connect, CONNECT where the path has it, 1-byte echo, the sink's close, close), and
failover: kill -9 of the active connector until a new connection through the proxy is served
by the promoted standby (median of several). The last line printed is one JSON object; see
bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import signal
import statistics
import sys
import tempfile
import time
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

import httpx
import trio

from bench._gopeer import go_peer
from bench._procs import Child, ChildError, spawn
from bench._results import (
    METRICS,
    BenchError,
    PathResult,
    add_window_options,
    cpu_seconds,
    only_child,
    print_path_table,
    run_until_signal,
    window_settings,
)
from bench._ssh import SshUnavailable, open_ssh_forward
from bench._tunnel_client import Outcome, bulk, echo_once, opens

PATHS: Final = ("direct", "ssh_L", "tunnel")
TARGET_RATIO: Final = 1.0  # tunnel.gbps_1 / ssh_L.gbps_1, issue 5
TARGET_FAILOVER_S: Final = 2.0
TUNNEL: Final = "bench"
START_TIMEOUT: Final = 60.0
FAILOVER_LIMIT: Final = 20.0
REPO: Final = Path(__file__).resolve().parent.parent
READY: Final = "READY "
_METRICS_LINE: Final = re.compile(r"metrics on http://127\.0\.0\.1:(\d+)/metrics")


@dataclass(frozen=True)
class Settings:
    warmup: float
    duration: float
    rounds: int
    open_workers: int
    failovers: int
    # how hostd and the connectors link: "raw" (the link port), "ws" (the API port's WebSocket
    # routes, Hypercorn's wsproto) or "ws-port" (a WebSocket to the link port: the core's framing)
    link: str = "raw"


@dataclass
class Connector:
    child: Child  # bench/_lifeline.py wrapping the connector
    pid: int  # the connector itself
    metrics_port: int


@dataclass
class Run:
    results: dict[str, PathResult]
    skipped: dict[str, str]
    failover_s: list[float] = field(default_factory=list)
    failover_notes: list[str] = field(default_factory=list)
    cpu_ms_per_gb: dict[str, float] = field(default_factory=dict)  # tunnel bulk x1, by process
    connector_streams: int | None = None


async def _ready(child: Child) -> dict[str, Any]:
    with trio.fail_after(START_TIMEOUT):
        line = await child.readline()
    if not line.startswith(READY):
        raise ChildError(f"{child.name}: expected READY, got {line!r}{child.tail_note()}")
    info: dict[str, Any] = json.loads(line.removeprefix(READY))
    return info


class Rig:
    """The processes of the tunnel path and the API calls that wire them."""

    def __init__(
        self, stack: AsyncExitStack, logdir: Path, workdir: Path, *, link: str = "raw"
    ) -> None:
        self.stack = stack
        self.link = link
        self.link_args: list[str] = []
        self.logdir = logdir
        self.workdir = workdir
        self.connectors: list[Connector] = []
        self._started = 0
        self.url = ""
        self.token_file = workdir / "tunnel-token"
        self.pids: dict[str, int] = {}
        self.proxy_credentials = ""  # USER:PASSWORD of the instance's proxy (percent-encoded)

    async def start(self, sink: tuple[str, int]) -> tuple[str, int]:
        """Server, hostd, the tunnel, two connectors, the instance; returns the proxy address."""
        py = sys.executable
        server_child = await self.stack.enter_async_context(
            spawn(
                "server",
                [py, "-m", "bench._adb_rig", "server", str(self.workdir)],
                logdir=self.logdir,
                cwd=REPO,
            )
        )
        server = await _ready(server_child)
        self.url = server["url"]
        if self.link == "raw":
            self.link_args = [server["link"]]
        elif self.link == "ws-port":
            self.link_args = [str(server["link"]).replace("tcp://", "ws://", 1)]
        host_child = await self.stack.enter_async_context(
            spawn(
                "host",
                [
                    py,
                    "-m",
                    "bench._tunnel_rig",
                    "host",
                    str(self.workdir),
                    self.url,
                    server["host_token_file"],
                    *self.link_args,
                ],
                logdir=self.logdir,
                cwd=REPO,
            )
        )
        await _ready(host_child)
        self.pids = {"server": server_child.pid, "hostd": host_child.pid}
        key = (await trio.Path(server["api_key_file"]).read_text()).strip()
        self.http = await self.stack.enter_async_context(
            httpx.AsyncClient(
                base_url=self.url, headers={"Authorization": f"Bearer {key}"}, timeout=60
            )
        )
        created = await self.http.post(
            "/v1/tunnels", json={"name": TUNNEL, "selectors": [f"{sink[0]}:{sink[1]}"]}
        )
        if created.status_code != 200:
            raise BenchError(f"POST /v1/tunnels: HTTP {created.status_code} {created.text}")
        self.token_file.write_text(created.json()["token"])
        await self.add_connector()
        with trio.fail_after(START_TIMEOUT):
            await self.wait_record(lambda r: r["status"] == "online")
        await self.add_connector()
        with trio.fail_after(START_TIMEOUT):
            await self.wait_record(lambda r: len(r["standbys"]) == 1)
        return await self._instance()

    async def add_connector(self) -> Connector:
        self._started += 1
        env = {k: v for k, v in os.environ.items() if not k.startswith("DEVYARD_")}
        argv = [
            sys.executable,
            "-m",
            "bench._lifeline",
            sys.executable,
            "-m",
            "devyard",
            "connector",
            "run",
            "--server",
            self.url,
            "--token-file",
            str(self.token_file),
            "--metrics",
            "127.0.0.1:0",
            *(["--link", *self.link_args] if self.link_args else []),
        ]
        child = await self.stack.enter_async_context(
            spawn(f"connector-{self._started}", argv, logdir=self.logdir, cwd=REPO, env=env)
        )
        with trio.fail_after(START_TIMEOUT):
            while (match := _METRICS_LINE.search(child.log_path.read_text())) is None:
                if child.process.returncode is not None:
                    raise ChildError(f"{child.name} exited{child.tail_note()}")
                await trio.sleep(0.05)
        connector = Connector(child, only_child(child.pid), int(match.group(1)))
        self.connectors.append(connector)
        return connector

    async def role(self, connector: Connector) -> str | None:
        url = f"http://127.0.0.1:{connector.metrics_port}/ready"
        try:
            async with httpx.AsyncClient(timeout=5) as client:
                role = (await client.get(url)).json().get("role")
        except (httpx.HTTPError, ValueError):
            return None
        return None if role is None else str(role)

    async def opened_streams(self, connector: Connector) -> int | None:
        url = f"http://127.0.0.1:{connector.metrics_port}/metrics"
        async with httpx.AsyncClient(timeout=5) as client:
            text = (await client.get(url)).text
        for line in text.splitlines():
            if line.startswith("devyard_connector_opened_streams_total"):
                return int(float(line.split()[-1]))
        return None

    async def wait_record(self, check: Any) -> dict[str, Any]:
        while True:
            record: dict[str, Any] = (await self.http.get(f"/v1/tunnels/{TUNNEL}")).json()
            if check(record):
                return record
            await trio.sleep(0.05)

    async def roles(self) -> tuple[Connector, Connector]:
        """(active, standby) among the live connectors, waiting until there is one of each."""
        with trio.fail_after(START_TIMEOUT):
            while True:
                found: dict[str, Connector] = {}
                for c in self.connectors:
                    if c.child.process.returncode is None and (role := await self.role(c)):
                        found[role] = c
                if "active" in found and "standby" in found:
                    return found["active"], found["standby"]
                await trio.sleep(0.05)

    async def _instance(self) -> tuple[str, int]:
        """A ready Android instance on the tunnel; the address of its egress proxy."""
        last = ""
        instance: dict[str, Any] | None = None
        with trio.move_on_after(START_TIMEOUT):
            while instance is None:
                response = await self.http.post(
                    "/v1/android_instances",
                    params={"wait": "true"},
                    json={"spec": {"tunnel": TUNNEL}},
                )
                body: dict[str, Any] = response.json()
                if body.get("status", {}).get("state") == "ready":
                    instance = body
                else:
                    last = f"HTTP {response.status_code} {body}"
                    await trio.sleep(0.2)
        if instance is None:
            raise BenchError(f"no ready Android instance on the tunnel: {last}")
        status = instance["status"]
        async with httpx.AsyncClient(
            headers={"Authorization": f"Bearer {status['token']}"}, timeout=60
        ) as client:
            response = await client.post(
                status["apiUrl"] + "/shell", json={"command": "getprop devyard.proxy"}
            )
        # http://USER:PASSWORD@HOST:PORT: the instance's own proxy and its credentials
        proxy = urlsplit(str(response.json().get("stdout", "")).strip())
        if response.status_code != 200 or proxy.hostname is None or proxy.port is None:
            raise BenchError(f"no egress proxy in the device's devyard.proxy: {response.text}")
        self.proxy_credentials = proxy.netloc.rpartition("@")[0]
        return proxy.hostname, proxy.port


async def _measure(
    entry: tuple[str, int],
    via: str | None,
    s: Settings,
    result: PathResult,
    *,
    cpu_pids: dict[str, int] | None = None,
    cpu: dict[str, list[float]] | None = None,
) -> None:
    """One round on one path: bulk x1, bulk x4, opens."""
    for streams in (1, 4):
        before = {p: cpu_seconds(pid) for p, pid in (cpu_pids or {}).items()}
        out: Outcome = await trio.to_thread.run_sync(
            bulk, entry, via, streams, s.warmup, s.duration
        )
        if cpu is not None and cpu_pids and streams == 1 and out.total:
            for p, pid in cpu_pids.items():
                ms = (cpu_seconds(pid) - before[p]) * 1000 / (out.total / 1e9)
                cpu.setdefault(p, []).append(ms)
        if out.errors:
            result.note(f"bulk x{streams}: {out.errors} broke ({out.last_error})")
        if out.rate > 0:
            result.samples[f"gbps_{streams}"].append(out.rate)
        await trio.sleep(0.2)  # let the last run's connections tear down
    out = await trio.to_thread.run_sync(opens, entry, via, s.open_workers, s.warmup, s.duration)
    if out.errors:
        result.note(f"opens: {out.errors} failed ({out.last_error})")
    if out.rate > 0:
        result.samples["opens_per_s"].append(out.rate)
    await trio.sleep(0.2)


async def _failover(rig: Rig, proxy: tuple[str, int], via: str, run: Run) -> None:
    """kill -9 the active connector; time until a connection through the proxy is served."""
    active, standby = await rig.roles()
    await trio.to_thread.run_sync(echo_once, proxy, via)  # the path works before the kill
    os.kill(active.pid, signal.SIGKILL)
    start = time.perf_counter()
    attempts = 0
    last = ""
    while True:
        attempts += 1
        try:
            await trio.to_thread.run_sync(echo_once, proxy, via, 2.0)
            break
        except OSError as exc:
            last = str(exc)
        if time.perf_counter() - start > FAILOVER_LIMIT:
            raise BenchError(
                f"no connection through the tunnel {FAILOVER_LIMIT:g} s after "
                f"the kill ({attempts} attempts, last: {last})"
            )
        await trio.sleep(0.005)
    elapsed = time.perf_counter() - start
    run.failover_s.append(elapsed)
    if await rig.role(standby) != "active":
        run.failover_notes.append("the standby did not report active after the failover")
    if attempts > 1:
        note = f"refused while failing over: {last.splitlines()[0][:200]}"
        if note not in run.failover_notes:
            run.failover_notes.append(note)
    print(
        f"# failover {len(run.failover_s)}: {elapsed * 1000:.0f} ms, {attempts} attempt(s)",
        file=sys.stderr,
    )
    with trio.CancelScope(shield=True):
        await active.child.process.wait()  # the lifeline wrapper follows its connector
    rig.connectors.remove(active)
    await rig.add_connector()  # the next standby


async def run(settings: Settings) -> Run:
    peer = go_peer()
    if peer.path is None:
        raise BenchError(f"the Go sink cannot be built: {peer.reason}")
    out = Run({}, {})
    with tempfile.TemporaryDirectory(prefix="devyard-bench-tunnel-") as tmp:
        root = Path(tmp)
        logdir, workdir = root / "logs", root / "rig"
        logdir.mkdir()
        workdir.mkdir()
        async with AsyncExitStack() as stack:
            sink_child = await stack.enter_async_context(
                spawn(
                    "sink",
                    [str(peer.path), "sink", "-lifeline", "-listen", "127.0.0.1:0"],
                    logdir=logdir,
                )
            )
            with trio.fail_after(START_TIMEOUT):
                sink = await sink_child.wait_listen()
            via = f"{sink[0]}:{sink[1]}"
            entries: dict[str, tuple[tuple[str, int], str | None]] = {"direct": (sink, None)}
            try:
                ssh = await stack.enter_async_context(open_ssh_forward(sink, logdir))
                entries["ssh_L"] = (ssh, None)
            except SshUnavailable as exc:
                out.skipped["ssh_L"] = str(exc)
            rig = Rig(stack, logdir, workdir, link=settings.link)
            print("# starting server, hostd, two connectors, the instance", file=sys.stderr)
            proxy = await rig.start(sink)
            via = f"{rig.proxy_credentials}@{via}"  # the tunnel's proxy wants its credentials
            entries["tunnel"] = (proxy, via)
            out.results = {name: PathResult(name) for name in PATHS if name in entries}
            active, _ = await rig.roles()
            cpu_pids = {**rig.pids, "connector": active.pid}
            cpu: dict[str, list[float]] = {}
            for round_ in range(settings.rounds):
                for name, (entry, path_via) in entries.items():
                    print(f"# round {round_ + 1}/{settings.rounds}: {name}", file=sys.stderr)
                    tunnel = name == "tunnel"
                    await _measure(
                        entry,
                        path_via,
                        settings,
                        out.results[name],
                        cpu_pids=cpu_pids if tunnel else None,
                        cpu=cpu if tunnel else None,
                    )
                    if sink_child.process.returncode is not None:
                        raise ChildError(f"the sink died{sink_child.tail_note()}")
            out.cpu_ms_per_gb = {p: round(statistics.median(v), 1) for p, v in cpu.items()}
            out.connector_streams = await rig.opened_streams(active)
            for _ in range(settings.failovers):
                await _failover(rig, proxy, via, out)
    return out


def _print_table(out: Run) -> None:
    print_path_table(out.results.values(), out.skipped)
    if out.failover_s:
        ms = [v * 1000 for v in out.failover_s]
        print(
            f"\nfailover (kill -9 active -> served by the promoted standby): median "
            f"{statistics.median(ms):.0f} ms, samples {', '.join(f'{v:.0f}' for v in ms)} ms"
            + (f"; {'; '.join(out.failover_notes)}" if out.failover_notes else "")
        )
    if out.cpu_ms_per_gb:
        print(
            "tunnel bulk x1, CPU ms per GB received, by process: "
            + "  ".join(f"{p} {v:.0f}" for p, v in out.cpu_ms_per_gb.items())
        )


def _ratio(num: float | None, den: float | None) -> float | None:
    return None if num is None or not den else num / den


def summary(out: Run, settings: Settings) -> dict[str, Any]:
    def get(path: str, metric: str) -> float | None:
        r = out.results.get(path)
        return None if r is None else r.value(metric)

    ratios = {
        f"tunnel_over_{den}_{m}": None
        if (v := _ratio(get("tunnel", m), get(den, m))) is None
        else round(v, 3)
        for den in ("ssh_L", "direct")
        for m in METRICS
    }
    throughput = ratios["tunnel_over_ssh_L_gbps_1"]
    failover = statistics.median(out.failover_s) if out.failover_s else None
    return {
        "bench": "tunnel",
        "rounds": settings.rounds,
        "link": settings.link,
        "results": {name: r.as_json() for name, r in out.results.items()},
        "ratios": ratios,
        "failover_s": {
            "median": None if failover is None else round(failover, 3),
            "samples": [round(v, 3) for v in out.failover_s],
        },
        "tunnel_cpu_ms_per_gb": out.cpu_ms_per_gb,
        "connector_streams": out.connector_streams,
        "targets": {
            "tunnel_over_ssh_L_gbps_1": {
                "min": TARGET_RATIO,
                "value": throughput,
                "met": None if throughput is None else throughput >= TARGET_RATIO,
            },
            "failover_s": {
                "max": TARGET_FAILOVER_S,
                "value": None if failover is None else round(failover, 3),
                "met": None if failover is None else failover < TARGET_FAILOVER_S,
            },
        },
    }


async def _main(settings: Settings) -> int:
    """Run the bench; SIGTERM or SIGHUP end it like Ctrl-C: every child is ended on the way."""
    load_before = os.getloadavg()[0]
    done = await run_until_signal(
        "tunnel",
        partial(run, settings),
        (BenchError, ChildError, trio.TooSlowError, httpx.HTTPError, OSError),
    )
    if isinstance(done, int):
        return done
    out = done
    print(
        f"\nbench tunnel: loopback, {os.cpu_count()} CPUs (load average {load_before:.1f} "
        f"before, {os.getloadavg()[0]:.1f} after), Python {platform.python_version()}, "
        f"{settings.rounds} round(s) of {settings.duration:g} s windows after "
        f"{settings.warmup:g} s warmup, {settings.open_workers} open workers, "
        f"{settings.failovers} failover(s), {settings.link} links; median (min-max)\n"
    )
    _print_table(out)
    result = summary(out, settings)
    print("\ntargets of issue 5 (informational):")
    t = result["targets"]["tunnel_over_ssh_L_gbps_1"]
    shown = "n/a" if t["value"] is None else f"{t['value']:.3f}"
    verdict = "n/a" if t["met"] is None else ("met" if t["met"] else "NOT met")
    print(f"  tunnel.gbps_1 / ssh_L.gbps_1  >= {TARGET_RATIO}   {shown}  {verdict}")
    f = result["targets"]["failover_s"]
    shown = "n/a" if f["value"] is None else f"{f['value']:.3f} s"
    verdict = "n/a" if f["met"] is None else ("met" if f["met"] else "NOT met")
    print(f"  failover (median)             <  {TARGET_FAILOVER_S:g} s  {shown}  {verdict}")
    print(json.dumps(result, separators=(",", ":")), flush=True)
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench tunnel",
        description="An instance's egress through a tunnel vs direct TCP and ssh -L; failover.",
    )
    add_window_options(parser)
    parser.add_argument("--failovers", type=int, help="kill -9 samples (default 5, quick 3)")
    parser.add_argument(
        "--link",
        choices=("raw", "ws", "ws-port"),
        default="raw",
        help="how hostd and the connectors link: the raw link port (default), WebSockets on"
        " the API port (ws) or WebSockets on the link port (ws-port)",
    )
    args = parser.parse_args(argv)
    settings = Settings(
        link=args.link,
        **window_settings(args),
        failovers=args.failovers if args.failovers is not None else (3 if args.quick else 5),
    )
    if settings.rounds < 1 or settings.duration <= 0 or settings.failovers < 0:
        parser.error("--rounds and --duration must be positive, --failovers >= 0")
    try:
        return trio.run(_main, settings)
    except* KeyboardInterrupt:  # trio may deliver it inside a group
        pass
    print("bench tunnel: interrupted; helper processes ended", file=sys.stderr)
    return 130
