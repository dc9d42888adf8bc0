"""What several benches share: a path's samples and their medians, /proc CPU time, errors,
and running until done or a signal."""

from __future__ import annotations

import os
import signal
import statistics
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, TypeVar

import trio

__all__ = [
    "METRICS",
    "BenchError",
    "PathResult",
    "cpu_seconds",
    "only_child",
    "run_until_signal",
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

    def value(self, metric: str) -> float | None:
        samples = self.samples[metric]
        return statistics.median(samples) if samples else None

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def as_json(self) -> dict[str, float | None]:
        return {m: None if (v := self.value(m)) is None else round(v, 3) for m in METRICS}


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
