"""`python -m bench ports` runs end to end (a few requests, a small body) and ends with its JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_bench_ports_compares_the_prefix_with_loopback() -> None:
    argv = [sys.executable, "-m", "bench", "ports", "--requests", "10", "--warmup", "2",
            "--size-mib", "2", "--reps", "1"]  # fmt: skip
    result = subprocess.run(
        argv, cwd=ROOT, capture_output=True, text=True, timeout=180, check=False
    )
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["bench"] == "ports"
    for path in ("direct", "proxied"):
        row = summary["results"][path]
        assert row["latency_ms"] > 0 and row["mb_per_s"] > 0, row
    assert summary["latency_ratio"] > 0 and summary["throughput_ratio"] > 0
