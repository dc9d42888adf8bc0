"""`python -m bench mux`: the multiplexer against its peers, side by side, on loopback.

Paths (bench/_paths.py): direct, trio_proxy, mux_tcp, mux_ws, go_yamux, ssh_L. The load client
and the sink are the same two Go processes for every path (bench/goyamux, modes `client` and
`sink`), so only the middle changes between rows.

Figures: bulk throughput received by the client (Gbit/s; 1 stream, and 4 streams at once) and
the stream-open rate (opens/s: connect, 1-byte echo, the far end closes, close; several workers
at once). All paths are started first and then measured in interleaved rounds, so a burst of
load from elsewhere on the machine lands on every path rather than on one; each figure is the
median of its rounds. The last line printed is one JSON object; see bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
from contextlib import AsyncExitStack
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Final

import trio

from bench._gopeer import go_peer
from bench._paths import (
    PATHS,
    START_TIMEOUT,
    Context,
    PathUnavailable,
    RunningPath,
    addr,
    open_path,
)
from bench._procs import Child, ChildError, spawn
from bench._results import (
    PathResult,
    add_window_options,
    cpu_seconds,
    print_path_table,
    run_until_signal,
    window_settings,
)

COMMAND_SLACK: Final = 30.0  # beyond warmup + duration: connects, teardown, a slow path

TARGETS: Final = (
    # (numerator, denominator, minimum ratio), each "path.metric"; from issues 2 and 21
    ("mux_tcp.gbps_1", "trio_proxy.gbps_1", 0.5),
    ("mux_tcp.gbps_1", "go_yamux.gbps_1", 1.5),
    ("mux_tcp.opens_per_s", "go_yamux.opens_per_s", 1.0),
    ("mux_ws.gbps_1", "mux_tcp.gbps_1", 0.9),  # issue 21 (issue 2: 0.6)
    ("mux_ws.gbps_4", "mux_tcp.gbps_4", 0.9),
    ("mux_ws.opens_per_s", "mux_tcp.opens_per_s", 0.6),
)


@dataclass(frozen=True)
class Settings:
    warmup: float
    duration: float
    rounds: int
    open_workers: int
    paths: tuple[str, ...]


async def _client_command(client: Child, line: str, budget: float) -> dict[str, Any]:
    with trio.fail_after(budget + COMMAND_SLACK):
        await client.send_line(line)
        reply: dict[str, Any] = json.loads(await client.readline())
    return reply


def _cpu(path: RunningPath) -> float:
    """CPU seconds the path's own processes (entry and exit) have used so far."""
    return sum(cpu_seconds(child.pid) for child in path.children)


async def _measured_command(
    client: Child, path: RunningPath, line: str, s: Settings
) -> tuple[dict[str, Any], float]:
    """Run one client command; also the path's CPU seconds over its measured window."""
    cpu: list[float] = []

    async def window_start() -> None:
        await trio.sleep(s.warmup)
        cpu.append(_cpu(path))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(window_start)
        reply = await _client_command(client, line, s.warmup + s.duration)
        nursery.cancel_scope.cancel()
    used = _cpu(path) - cpu[0] if cpu else 0.0
    return reply, used


async def measure(client: Child, path: RunningPath, s: Settings, result: PathResult) -> None:
    """One round on one path: bulk x1, bulk x4, opens (and the CPU of x1 and of the opens)."""
    target = addr(path.address)
    for streams in (1, 4):
        reply, used = await _measured_command(
            client, path, f"bulk {target} {streams} {s.warmup} {s.duration}", s
        )
        if "error" in reply:
            result.note(f"bulk x{streams}: {reply['error']}")
        else:
            gbps = float(reply["gbps"])
            result.samples[f"gbps_{streams}"].append(gbps)
            if streams == 1 and path.children and gbps > 0:
                # CPU seconds per GB received (Gbit/s x s / 8 = GB)
                result.extra["cpu_s_per_gb_1"].append(used / (gbps * s.duration / 8))
            if reply.get("errors"):
                result.note(f"bulk x{streams}: {reply['errors']} connections broke early")
        await trio.sleep(0.2)  # let the last run's connections finish tearing down
    reply, used = await _measured_command(
        client, path, f"opens {target} {s.open_workers} {s.warmup} {s.duration}", s
    )
    if "error" in reply:
        result.note(f"opens: {reply['error']} ({reply.get('last_error', '')})")
    else:
        rate = float(reply["opens_per_s"])
        result.samples["opens_per_s"].append(rate)
        if path.children and rate > 0:
            result.extra["cpu_ms_per_open"].append(1000 * used / (rate * s.duration))
        if reply.get("errors"):
            result.note(f"opens: {reply['errors']} failed, last: {reply.get('last_error', '?')}")
    await trio.sleep(0.2)


async def run(settings: Settings) -> tuple[list[PathResult], dict[str, str]]:
    peer = go_peer()
    if peer.path is None:
        raise PathUnavailable(f"the Go load client and sink cannot be built: {peer.reason}")
    go = str(peer.path)
    results: dict[str, PathResult] = {}
    skipped: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="devyard-bench-") as tmp:
        logdir = Path(tmp)
        async with AsyncExitStack() as stack:
            sink = await stack.enter_async_context(
                spawn("sink", [go, "sink", "-lifeline", "-listen", "127.0.0.1:0"], logdir=logdir)
            )
            client = await stack.enter_async_context(spawn("client", [go, "client"], logdir=logdir))
            with trio.fail_after(START_TIMEOUT):
                sink_addr = await sink.wait_listen()
            ctx = Context(peer.path, sink_addr, logdir)

            running: list[RunningPath] = []
            for name in settings.paths:
                try:
                    running.append(await stack.enter_async_context(open_path(name, ctx)))
                except PathUnavailable as exc:
                    skipped[name] = str(exc)
                except (ChildError, trio.TooSlowError) as exc:
                    skipped[name] = f"did not start: {exc or 'timed out'}"
                else:
                    results[name] = PathResult(name)

            for round_ in range(settings.rounds):
                for path in list(running):
                    print(f"# round {round_ + 1}/{settings.rounds}: {path.name}", file=sys.stderr)
                    result = results[path.name]
                    try:
                        await measure(client, path, settings, result)
                    except trio.TooSlowError:
                        result.note("a measurement timed out; path dropped")
                        running.remove(path)
                    if (dead := path.dead()) is not None:
                        result.note(f"{dead.name} died: {dead.tail_note(3).strip()}")
                        running.remove(path)
                    if sink.process.returncode is not None:
                        raise ChildError(f"the sink died{sink.tail_note()}")
    return list(results.values()), skipped


def print_targets(results: list[PathResult]) -> dict[str, dict[str, Any]]:
    """Print the targets as ratios of medians; return them for the JSON line."""
    by_name = {r.name: r for r in results}

    def get(ref: str) -> float | None:
        name, metric = ref.split(".")
        return by_name[name].value(metric) if name in by_name else None

    out: dict[str, dict[str, Any]] = {}
    print("\ntargets of issues 2 and 21 (informational; medians):")
    for num_ref, den_ref, minimum in TARGETS:
        label = f"{num_ref} / {den_ref}"
        num, den = get(num_ref), get(den_ref)
        if num is None or den is None or den == 0:
            print(f"  {label:<44} >= {minimum:<4}   n/a (not measured)")
            continue
        ratio = num / den
        verdict = "met" if ratio >= minimum else "NOT met"
        print(f"  {label:<44} >= {minimum:<4} {ratio:6.3f}  {verdict}")
        out[label] = {"value": round(ratio, 3), "target": minimum, "met": ratio >= minimum}
    print("\nCPU of the path's entry and exit processes (medians; lower is better):")
    for r in results:
        per_open, per_gb = r.value("cpu_ms_per_open"), r.value("cpu_s_per_gb_1")
        if per_open is not None or per_gb is not None:
            a = "-" if per_open is None else f"{per_open:.2f}"
            b = "-" if per_gb is None else f"{per_gb:.2f}"
            print(f"  {r.name:<12} {a:>7} CPU-ms per open   {b:>6} CPU-s per GB (x1)")
    for metric in ("cpu_ms_per_open", "cpu_s_per_gb_1"):
        num, den = get(f"go_yamux.{metric}"), get(f"mux_tcp.{metric}")
        if num is not None and den:
            label = f"go_yamux.{metric} / mux_tcp.{metric}"
            print(f"  {label:<58} {num / den:6.3f}  (1.0: as cheap as Go)")
            out[label] = {"value": round(num / den, 3)}
    return out


async def _main(settings: Settings) -> int:
    """Run the bench; SIGTERM or SIGHUP end it like Ctrl-C: every child is ended on the way."""
    load_before = os.getloadavg()[0]
    done = await run_until_signal(
        "mux", partial(run, settings), (PathUnavailable, ChildError, trio.TooSlowError)
    )
    if isinstance(done, int):
        return done
    results, skipped = done
    load_after = os.getloadavg()[0]
    print(
        f"\nbench mux: loopback, {os.cpu_count()} CPUs (load average {load_before:.1f} before, "
        f"{load_after:.1f} after), "
        f"Python {platform.python_version()}, {settings.rounds} round(s) of "
        f"{settings.duration:g} s windows after {settings.warmup:g} s warmup, "
        f"{settings.open_workers} open workers; median (min-max)\n"
    )
    print_path_table(results, skipped)
    ratios = print_targets(results)
    print(
        json.dumps(
            {
                "bench": "mux",
                "results": {r.name: r.as_json() for r in results},
                "ratios": ratios,
                "load_average": [round(load_before, 2), round(load_after, 2)],
            },
            separators=(",", ":"),
        ),
        flush=True,
    )
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench mux",
        description="Throughput and stream-open rate of devyard's mux and its peers on loopback.",
    )
    add_window_options(parser)
    parser.add_argument(
        "--paths", default=",".join(PATHS), help=f"comma-separated subset of {','.join(PATHS)}"
    )
    args = parser.parse_args(argv)
    paths = tuple(p for p in args.paths.split(",") if p)
    unknown = [p for p in paths if p not in PATHS]
    if unknown:
        parser.error(f"unknown paths: {', '.join(unknown)}")
    settings = Settings(
        **window_settings(args),
        paths=paths,
    )
    try:
        return trio.run(_main, settings)
    except* KeyboardInterrupt:  # trio may deliver it inside a group
        pass
    print("bench mux: interrupted; helper processes ended", file=sys.stderr)
    return 130
