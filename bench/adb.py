"""`python -m bench adb`: `adb push` of a random file, direct and through the ADB bridge.

Debian's real `adb` (its own server on a private port, a throwaway HOME) pushes the same random
file to two virtual Android devices in one run:

    direct      adb -> the device's own TCP ADB port (`serve_adb_tcp`)
    bridged     adb -> `devyard adb forward` (the real CLI, a subprocess) -> the server's edge
                -> host link -> hostd -> the device; the forwarder finds the raw link port
                in the 101 of `adbWebSocketUrl` and carries the bytes there (docs/adb.md)
    bridged_ws  the same with `devyard adb forward --websocket`: every byte over
                `adbWebSocketUrl`, as any WebSocket client of the spec would carry it

By default (`--placement split`) the server runs in one helper process and hostd, with both
devices, in another (bench/_adb_rig.py), so each role's CPU time per MiB can be told apart.
Pushes alternate between the paths, so load from elsewhere on the machine lands on both; each
figure is the median of `--reps` pushes. MB/s is 10**6 bytes per second of the push as adb
itself times it. The last line printed is one JSON object; see bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import socket
import statistics
import sys
import tempfile
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Final

import httpx
import trio

from bench._adb_rig import READY, START_TIMEOUT, RigInfo, open_rig
from bench._procs import Child, ChildError, spawn
from bench._results import BenchError, cpu_seconds, fmt_median, only_child, run_until_signal

PATHS: Final = ("direct", "bridged", "bridged_ws")
TARGET: Final = 0.7  # bridged / direct, issue 6
PLACEMENTS: Final = {
    "split": "the server in one helper process, hostd and both devices in another",
    "child": "server, hostd and both devices in one helper process",
    "inproc": "server, hostd and both devices in this process",
}
DEVICE_PATH: Final = "/sdcard/Download/bench-adb.bin"
ADB_DEADLINE: Final = 300.0
_FORWARDING: Final = re.compile(r"forwarding 127\.0\.0\.1:(\d+) ")
# adb push's own summary: "...: 1 file pushed, 0 skipped. 61.2 MB/s (67108864 bytes in 1.046s)"
_ADB_SUMMARY: Final = re.compile(r"\((\d+) bytes in ([0-9.]+)s\)")


@dataclass(frozen=True)
class Settings:
    size: int  # bytes
    reps: int
    placement: str
    link: str = "raw"  # how hostd links to the server: "raw" (the link port) or "ws"


@dataclass
class PathResult:
    name: str
    mb_per_s: list[float] = field(default_factory=list)
    wall_mb_per_s: list[float] = field(default_factory=list)
    cpu_ms_per_mib: dict[str, list[float]] = field(default_factory=dict)  # by process

    def cpu(self) -> dict[str, float]:
        """Median CPU time per MiB pushed of each watched process (ms; 0 if it idled)."""
        return {p: round(statistics.median(v), 2) for p, v in self.cpu_ms_per_mib.items()}

    def median(self) -> float | None:
        return statistics.median(self.mb_per_s) if self.mb_per_s else None

    def as_json(self) -> dict[str, Any]:
        median = self.median()
        wall = statistics.median(self.wall_mb_per_s) if self.wall_mb_per_s else None
        return {
            "mb_per_s": None if median is None else round(median, 2),
            "wall_mb_per_s": None if wall is None else round(wall, 2),
            "samples": [round(v, 2) for v in self.mb_per_s],
            "cpu_ms_per_mib": self.cpu(),
        }


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Adb:
    """The real adb client with its own server port and HOME (as tests/hostd/adb do)."""

    def __init__(self, exe: str, home: Path) -> None:
        self.exe = exe
        self.home = home
        self.server_port = _free_port()

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ADB_", "ANDROID_"))}
        env["HOME"] = str(self.home)
        env.pop("TERM", None)
        return env

    async def run(self, *args: str, serial: str = "") -> str:
        argv = [self.exe, "-P", str(self.server_port), *(["-s", serial] if serial else []), *args]
        with trio.fail_after(ADB_DEADLINE):
            proc = await trio.run_process(
                argv, capture_stdout=True, capture_stderr=True, env=self.env(), check=False
            )
        out = (proc.stdout + proc.stderr).decode(errors="replace")
        if proc.returncode != 0:
            raise BenchError(f"adb {' '.join(args)} exited {proc.returncode}: {out.strip()}")
        return out

    async def connect(self, port: int) -> str:
        serial = f"127.0.0.1:{port}"
        out = await self.run("connect", serial)
        if f"connected to {serial}" not in out:
            raise BenchError(f"adb connect {serial}: {out.strip()}")
        return serial

    async def kill_server(self) -> None:
        with trio.move_on_after(10, shield=True):
            await trio.run_process(
                [self.exe, "-P", str(self.server_port), "kill-server"],
                capture_stdout=True,
                capture_stderr=True,
                env=self.env(),
                check=False,
            )


async def push(adb: Adb, serial: str, source: Path, size: int) -> tuple[float, float]:
    """One `adb push`: (MB/s as adb times it, MB/s of the whole command)."""
    start = trio.current_time()
    out = await adb.run("push", str(source), DEVICE_PATH, serial=serial)
    wall = trio.current_time() - start
    match = _ADB_SUMMARY.search(out)
    if match is None:
        raise BenchError(f"adb push printed no summary: {out.strip()}")
    if int(match.group(1)) != size:
        raise BenchError(f"adb push moved {match.group(1)} bytes, not {size}")
    seconds = max(float(match.group(2)), 1e-3)
    return size / seconds / 1e6, size / wall / 1e6


async def _ready(child: Child) -> dict[str, Any]:
    with trio.fail_after(START_TIMEOUT):
        line = await child.readline()
    if not line.startswith(READY):
        raise ChildError(f"{child.name}: expected READY, got {line!r}{child.tail_note()}")
    info: dict[str, Any] = json.loads(line.removeprefix(READY))
    return info


@asynccontextmanager
async def _rig(
    placement: str, workdir: Path, logdir: Path, *, raw: bool = True
) -> AsyncIterator[tuple[RigInfo, dict[str, int]]]:
    """Server, hostd and the direct device, placed as asked (see PLACEMENTS); yields where
    they are and the pids of the processes they run in, by name."""
    if placement == "inproc":
        async with open_rig(workdir, raw=raw) as info:
            yield info, {"bench": os.getpid()}
        return
    rig = [sys.executable, "-m", "bench._adb_rig"]
    if placement == "child":
        argv = [*rig, "all", str(workdir), *([] if raw else ["ws"])]
        async with spawn("rig", argv, logdir=logdir) as child:
            yield RigInfo(**await _ready(child)), {"rig": child.pid}
        return
    async with spawn("server", [*rig, "server", str(workdir)], logdir=logdir) as server_child:
        server = await _ready(server_child)
        host_argv = [*rig, "host", str(workdir), server["url"], server["host_token_file"]]
        host_argv += [server["link"]] if raw else []
        async with spawn("host", host_argv, logdir=logdir) as host_child:
            host = await _ready(host_child)
            info = RigInfo(server["url"], server["api_key_file"], host["direct_port"])
            yield info, {"server": server_child.pid, "host": host_child.pid}


async def _android_instance(info: RigInfo) -> str:
    """A ready Android instance (retried until the host has linked, in the split placement)."""
    key = (await trio.Path(info.api_key_file).read_text()).strip()
    headers = {"Authorization": f"Bearer {key}"}
    last = ""
    async with httpx.AsyncClient(base_url=info.url, headers=headers, timeout=60) as http:
        with trio.move_on_after(START_TIMEOUT):
            while True:
                response = await http.post(
                    "/v1/android_instances", params={"wait": "true"}, json={"spec": {}}
                )
                body: dict[str, Any] = response.json()
                if body.get("status", {}).get("state") == "ready":
                    return str(body["metadata"]["id"])
                last = f"HTTP {response.status_code} {body}"
                await trio.sleep(0.2)
    raise BenchError(f"no ready Android instance: {last}")


@asynccontextmanager
async def _forwarder(
    info: RigInfo, instance_id: str, logdir: Path, *extra: str
) -> AsyncIterator[tuple[int, int]]:
    """`devyard adb forward` under bench/_lifeline.py; yields its local port and pid."""
    argv = [sys.executable, "-m", "bench._lifeline", sys.executable, "-m", "devyard",
            "adb", "forward", instance_id,
            "--server", info.url, "--api-key-file", info.api_key_file, *extra]  # fmt: skip
    name = "forwarder" + "".join(extra).replace("--", "-")
    async with spawn(name, argv, logdir=logdir) as child:
        with trio.fail_after(START_TIMEOUT):
            while (match := _FORWARDING.search(await child.readline())) is None:
                pass
        yield int(match.group(1)), only_child(child.pid)


async def run(settings: Settings, adb_exe: str) -> dict[str, PathResult]:
    results = {name: PathResult(name) for name in PATHS}
    with tempfile.TemporaryDirectory(prefix="devyard-bench-adb-") as tmp:
        root = Path(tmp)
        logdir, workdir, home = root / "logs", root / "rig", root / "home"
        for d in (logdir, workdir, home):
            d.mkdir()
        payload = root / "payload.bin"
        with payload.open("wb") as f:
            for _ in range(0, settings.size, 1 << 20):
                f.write(os.urandom(min(1 << 20, settings.size - f.tell())))
        warm = root / "warm.bin"
        warm.write_bytes(os.urandom(1 << 20))

        adb = Adb(adb_exe, home)
        async with AsyncExitStack() as stack:
            stack.push_async_callback(adb.kill_server)
            info, pids = await stack.enter_async_context(
                _rig(settings.placement, workdir, logdir, raw=settings.link == "raw")
            )
            instance_id = await _android_instance(info)
            port, pids["forwarder"] = await stack.enter_async_context(
                _forwarder(info, instance_id, logdir)
            )
            port_ws, pids["forwarder_ws"] = await stack.enter_async_context(
                _forwarder(info, instance_id, logdir, "--websocket")
            )
            serials = {
                "direct": await adb.connect(info.direct_port),
                "bridged": await adb.connect(port),
                "bridged_ws": await adb.connect(port_ws),
            }
            for serial in serials.values():  # the first push of each: connect, warm up
                await push(adb, serial, warm, 1 << 20)
            for rep in range(settings.reps):
                order = PATHS if rep % 2 == 0 else PATHS[::-1]
                for name in order:
                    print(f"# push {rep + 1}/{settings.reps}: {name}", file=sys.stderr)
                    before = {p: cpu_seconds(pid) for p, pid in pids.items()}
                    mb_s, wall = await push(adb, serials[name], payload, settings.size)
                    for p, pid in pids.items():
                        ms = (cpu_seconds(pid) - before[p]) * 1000 / (settings.size / (1 << 20))
                        results[name].cpu_ms_per_mib.setdefault(p, []).append(ms)
                    results[name].mb_per_s.append(mb_s)
                    results[name].wall_mb_per_s.append(wall)
    return results


def print_table(results: dict[str, PathResult]) -> None:
    rows = [("path", "MB/s (adb)", "MB/s (wall)", "CPU ms per MiB pushed, by process")]
    for r in results.values():
        cpu = "  ".join(f"{p} {v:.1f}" for p, v in r.cpu().items())
        rows.append((r.name, fmt_median(r.mb_per_s, 1), fmt_median(r.wall_mb_per_s, 1), cpu))
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    for row in rows:
        print(row[0].ljust(widths[0]), row[1].rjust(widths[1]), row[2].rjust(widths[2]), row[3],
              sep="  ")  # fmt: skip


def ratio(results: dict[str, PathResult], path: str = "bridged") -> float | None:
    direct, bridged = results["direct"].median(), results[path].median()
    if direct is None or bridged is None or direct == 0:
        return None
    return bridged / direct


async def _main(settings: Settings, adb_exe: str) -> int:
    """Run the bench; SIGTERM or SIGHUP end it like Ctrl-C: every child is ended on the way."""
    load_before = os.getloadavg()[0]
    done = await run_until_signal(
        "adb",
        partial(run, settings, adb_exe),
        (BenchError, ChildError, trio.TooSlowError, httpx.HTTPError),
    )
    if isinstance(done, int):
        return done
    results = done
    load_after = os.getloadavg()[0]
    print(
        f"\nbench adb: adb push of {settings.size / (1 << 20):g} MiB (random), {settings.reps} "
        f"push(es) per path, alternating; server+hostd+devices {settings.placement}, "
        f"{settings.link} host link; "
        f"{os.cpu_count()} CPUs (load average {load_before:.1f} before, {load_after:.1f} after), "
        f"Python {platform.python_version()}; MB/s = 10^6 bytes/s, median (min-max)\n"
    )
    print_table(results)
    r = ratio(results)
    verdict = "n/a" if r is None else ("met" if r >= TARGET else "NOT met")
    shown = "n/a" if r is None else f"{r:.3f}"
    print(f"\ntarget of issue 6 (informational): bridged / direct >= {TARGET}   {shown}  {verdict}")
    r_ws = ratio(results, "bridged_ws")
    print(f"bridged_ws / direct (adbWebSocketUrl all the way): {r_ws or 0:.3f}")
    summary = {
        "bench": "adb",
        "size_bytes": settings.size,
        "reps": settings.reps,
        "placement": settings.placement,
        "link": settings.link,
        "results": {name: res.as_json() for name, res in results.items()},
        "ratio": None if r is None else round(r, 3),
        "ratio_ws": None if r_ws is None else round(r_ws, 3),
        "target": TARGET,
        "met": None if r is None else r >= TARGET,
    }
    print(json.dumps(summary, separators=(",", ":")), flush=True)
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench adb",
        description="adb push throughput: direct to a virtual device vs through the ADB bridge.",
    )
    parser.add_argument("--quick", action="store_true", help="16 MiB, 2 pushes per path")
    parser.add_argument("--size-mib", type=float, help="file size (default 64, quick 16)")
    parser.add_argument("--reps", type=int, help="pushes per path (default 5, quick 2)")
    parser.add_argument(
        "--placement",
        choices=list(PLACEMENTS),
        default="split",
        help="; ".join(f"{k}: {v}" for k, v in PLACEMENTS.items()) + " (default split)",
    )
    parser.add_argument(
        "--link",
        choices=("raw", "ws"),
        default="raw",
        help="how hostd links to the server: the raw link port (default) or a WebSocket",
    )
    parser.add_argument("--adb", default=shutil.which("adb"), help="the adb client")
    args = parser.parse_args(argv)
    if not args.adb:
        print("bench adb: the adb client is not installed (apt install adb)", file=sys.stderr)
        return 1
    size_mib = args.size_mib if args.size_mib is not None else (16 if args.quick else 64)
    reps = args.reps if args.reps is not None else (2 if args.quick else 5)
    if size_mib <= 0 or reps < 1:
        parser.error("--size-mib and --reps must be positive")
    settings = Settings(
        size=int(size_mib * (1 << 20)), reps=reps, placement=args.placement, link=args.link
    )
    try:
        return trio.run(_main, settings, args.adb)
    except* KeyboardInterrupt:  # trio may deliver it inside a group
        pass
    print("bench adb: interrupted; helper processes ended", file=sys.stderr)
    return 130
