"""What several benches share: a path's samples and their medians, /proc CPU time, errors,
and running until done or a signal."""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, TypeVar

import trio

__all__ = [
    "METRICS",
    "BenchError",
    "PathResult",
    "add_window_options",
    "cpu_seconds",
    "fmt_median",
    "only_child",
    "print_path_table",
    "run_until_signal",
    "window_settings",
]

T = TypeVar("T")

#: The figures of a stream-carrying path (bench mux, bench tunnel).
METRICS: Final = ("gbps_1", "gbps_4", "opens_per_s")
_TICK: Final = os.sysconf("SC_CLK_TCK")


class BenchError(Exception):
    """The bench cannot go on; the message says why."""


@dataclass
class PathResult:
    name: str
    samples: dict[str, list[float]] = field(default_factory=lambda: {m: [] for m in METRICS})
    notes: list[str] = field(default_factory=list)
    #: Further per-round figures of a bench (bench mux: CPU per open and per GB), by name.
    extra: defaultdict[str, list[float]] = field(default_factory=lambda: defaultdict(list))

    def value(self, metric: str) -> float | None:
        samples = self.samples[metric] if metric in self.samples else self.extra.get(metric, [])
        return statistics.median(samples) if samples else None

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def as_json(self) -> dict[str, float | None]:
        names = [*METRICS, *sorted(self.extra)]
        return {m: None if (v := self.value(m)) is None else round(v, 3) for m in names}


def add_window_options(parser: argparse.ArgumentParser) -> None:
    """The options of a bench that measures paths in rounds of timed windows (mux, tunnel)."""
    parser.add_argument("--quick", action="store_true", help="one short round: under 60 s")
    parser.add_argument("--rounds", type=int, help="rounds over all paths (default 3, quick 1)")
    parser.add_argument("--duration", type=float, help="seconds measured per figure")
    parser.add_argument("--warmup", type=float, help="seconds before each measured window")
    parser.add_argument("--open-workers", type=int, default=4, help="concurrent openers")


def window_settings(args: argparse.Namespace) -> dict[str, Any]:
    """warmup, duration, rounds and open_workers from add_window_options' options."""
    return {
        "warmup": args.warmup if args.warmup is not None else (0.3 if args.quick else 0.5),
        "duration": args.duration if args.duration is not None else (1.0 if args.quick else 2.5),
        "rounds": args.rounds if args.rounds is not None else (1 if args.quick else 3),
        "open_workers": args.open_workers,
    }


def fmt_median(samples: list[float], digits: int) -> str:
    """The median, with min-max beside it when there are several samples; "-" for none."""
    if not samples:
        return "-"
    text = f"{statistics.median(samples):.{digits}f}"
    if len(samples) > 1:
        text += f" ({min(samples):.{digits}f}-{max(samples):.{digits}f})"
    return text


def print_path_table(results: Iterable[PathResult], skipped: dict[str, str]) -> None:
    """The table of a stream-carrying path's figures (bench mux, bench tunnel)."""
    rows = [("path", "Gbit/s x1", "Gbit/s x4", "opens/s", "notes")]
    for r in results:
        rows.append(
            (
                r.name,
                fmt_median(r.samples["gbps_1"], 2),
                fmt_median(r.samples["gbps_4"], 2),
                fmt_median(r.samples["opens_per_s"], 0),
                "; ".join(r.notes),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    for row in rows:
        cells = [row[0].ljust(widths[0])] + [
            c.rjust(w) for c, w in zip(row[1:4], widths[1:], strict=True)
        ]
        print("  ".join(cells), " ", row[4])
    for name, why in skipped.items():
        print(f"{name.ljust(widths[0])}  left out: {why.strip().splitlines()[0]}")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc); 0 if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = stat.rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def only_child(pid: int) -> int:
    """The one child of `pid` (the real process under bench/_lifeline.py)."""
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    if len(children) != 1:
        raise BenchError(f"expected one child of {pid}, found {children}")
    return int(children[0])


async def run_until_signal(
    name: str, work: Callable[[], Awaitable[T]], errors: tuple[type[BaseException], ...]
) -> T | int:
    """Run a bench's *work*; SIGTERM or SIGHUP end it like Ctrl-C (every child is ended on the
    way). Returns its result, or the exit code after saying on stderr why there is none: 1 for
    one of *errors*, 143 for a signal."""
    outcome: list[T] = []
    failure: list[str] = []
    async with trio.open_nursery() as nursery:

        async def on_signal() -> None:
            with trio.open_signal_receiver(signal.SIGTERM, signal.SIGHUP) as signals:
                async for _ in signals:
                    nursery.cancel_scope.cancel()
                    return

        async def body() -> None:
            try:
                outcome.append(await work())
            except errors as exc:
                failure.append(str(exc) or type(exc).__name__)
            nursery.cancel_scope.cancel()

        nursery.start_soon(on_signal)
        nursery.start_soon(body)
    if failure:
        print(f"bench {name}: {failure[0]}", file=sys.stderr)
        return 1
    if not outcome:
        print(f"bench {name}: stopped by a signal; helper processes ended", file=sys.stderr)
        return 143
    return outcome[0]
