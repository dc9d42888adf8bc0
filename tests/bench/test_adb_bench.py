"""`python -m bench adb` runs end to end (tiny file, one push per path) and ends with its JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.hostd.adb.conftest import needs_adb

pytestmark = [needs_adb, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]


def test_bench_adb_runs_and_reports_json() -> None:
    argv = [sys.executable, "-m", "bench", "adb", "--size-mib", "1", "--reps", "1"]
    result = subprocess.run(
        argv, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["bench"] == "adb"
    for path in ("direct", "bridged", "bridged_ws"):
        assert summary["results"][path]["mb_per_s"] > 0
    assert summary["ratio"] > 0 and summary["ratio_ws"] > 0
    assert summary["link"] == "raw"
