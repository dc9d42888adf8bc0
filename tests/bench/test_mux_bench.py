"""`python -m bench mux`'s plain trio proxy baseline runs, copying like devyard's splice."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench._trio_proxy import BUFFER
from devyard.core.splice import _CHUNK

ROOT = Path(__file__).resolve().parents[2]


def test_the_trio_proxy_copies_in_splices_read_size() -> None:
    # 1 MiB is written in bench/README.md and bench/goyamux/main.go: change them together.
    assert BUFFER == _CHUNK == 1024 * 1024


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("go") is None, reason="the bench's sink is Go (golang-go)")
def test_bench_mux_measures_the_trio_proxy_and_reports_json() -> None:
    argv = [sys.executable, "-m", "bench", "mux", "--paths", "trio_proxy", "--rounds", "1",
            "--duration", "0.5", "--warmup", "0.1", "--open-workers", "2"]  # fmt: skip
    result = subprocess.run(
        argv, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["bench"] == "mux"
    proxy = summary["results"]["trio_proxy"]
    assert proxy["gbps_1"] > 0
    assert proxy["gbps_4"] > 0
    assert proxy["opens_per_s"] > 0
