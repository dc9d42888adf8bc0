"""`python -m bench tunnel` runs end to end (short windows, one failover) and ends with its JSON."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("go") is None, reason="the bench's sink is Go (golang-go)"),
]
ROOT = Path(__file__).resolve().parents[2]


def test_bench_tunnel_runs_and_reports_json() -> None:
    argv = [sys.executable, "-m", "bench", "tunnel", "--rounds", "1", "--warmup", "0.2",
            "--duration", "0.8", "--open-workers", "2", "--failovers", "1"]  # fmt: skip
    result = subprocess.run(
        argv, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["bench"] == "tunnel"
    assert summary["link"] == "raw"  # hostd and the connectors on the raw link port
    tunnel = summary["results"]["tunnel"]
    assert tunnel["gbps_1"] > 0
    assert tunnel["opens_per_s"] > 0
    assert summary["results"]["direct"]["gbps_1"] > 0
    assert summary["connector_streams"] > 0  # the bytes really went through the connector
    assert len(summary["failover_s"]["samples"]) == 1
    assert summary["targets"]["failover_s"]["met"] is not None
