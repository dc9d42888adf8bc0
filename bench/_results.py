"""What several benches share: a path's samples and their medians, /proc CPU time, errors."""

from __future__ import annotations

import os
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

__all__ = ["METRICS", "BenchError", "PathResult", "cpu_seconds", "only_child"]

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
