"""`python -m bench instances` runs against a real `devyard up` and reports its JSON line: a
small run, so that a change of what the API answers (a create without ``wait`` answers
``creating`` at once, spec 3.1) breaks this test, not the next person's benchmark."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_bench_instances_measures_creates_and_lists_on_sqlite() -> None:
    argv = [sys.executable, "-m", "bench", "instances", "--rows", "10000", "--creates", "2",
            "--repeat", "3", "--backends", "sqlite"]  # fmt: skip
    result = subprocess.run(
        argv, cwd=ROOT, capture_output=True, text=True, timeout=240, check=False
    )
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["bench"] == "instances"
    sqlite = summary["results"]["sqlite"]
    assert sqlite, summary
    assert all(isinstance(v, dict | int | float) for v in sqlite.values()), sqlite
