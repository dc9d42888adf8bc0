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
    print_path_table,
    run_until_signal,
    window_settings,
)

COMMAND_SLACK: Final = 30.0  # beyond warmup + duration: connects, teardown, a slow path

TARGETS: Final = (
    # (numerator, denominator, minimum ratio), each "path.metric"; from issue 2
    ("mux_tcp.gbps_1", "trio_proxy.gbps_1", 0.5),
    ("mux_tcp.gbps_1", "go_yamux.gbps_1", 1.5),
    ("mux_tcp.opens_per_s", "go_yamux.opens_per_s", 1.0),
    ("mux_ws.gbps_1", "mux_tcp.gbps_1", 0.6),
    ("mux_ws.gbps_4", "mux_tcp.gbps_4", 0.6),
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


async def measure(client: Child, path: RunningPath, s: Settings, result: PathResult) -> None:
    """One round on one path: bulk x1, bulk x4, opens."""
    target = addr(path.address)
    budget = s.warmup + s.duration
    for streams in (1, 4):
        reply = await _client_command(
            client, f"bulk {target} {streams} {s.warmup} {s.duration}", budget
        )
        if "error" in reply:
            result.note(f"bulk x{streams}: {reply['error']}")
        else:
            result.samples[f"gbps_{streams}"].append(float(reply["gbps"]))
            if reply.get("errors"):
                result.note(f"bulk x{streams}: {reply['errors']} connections broke early")
        await trio.sleep(0.2)  # let the last run's connections finish tearing down
    reply = await _client_command(
        client, f"opens {target} {s.open_workers} {s.warmup} {s.duration}", budget
    )
    if "error" in reply:
        result.note(f"opens: {reply['error']} ({reply.get('last_error', '')})")
    else:
        result.samples["opens_per_s"].append(float(reply["opens_per_s"]))
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


def print_targets(results: list[PathResult]) -> None:
    by_name = {r.name: r for r in results}

    def get(ref: str) -> float | None:
        name, metric = ref.split(".")
        return by_name[name].value(metric) if name in by_name else None

    print("\ntargets of issue 2 (informational; medians):")
    for num_ref, den_ref, minimum in TARGETS:
        label = f"{num_ref} / {den_ref}"
        num, den = get(num_ref), get(den_ref)
        if num is None or den is None or den == 0:
            print(f"  {label:<44} >= {minimum:<4}   n/a (not measured)")
            continue
        ratio = num / den
        verdict = "met" if ratio >= minimum else "NOT met"
        print(f"  {label:<44} >= {minimum:<4} {ratio:6.3f}  {verdict}")


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
    print_targets(results)
    print(
        json.dumps(
            {"bench": "mux", "results": {r.name: r.as_json() for r in results}},
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
