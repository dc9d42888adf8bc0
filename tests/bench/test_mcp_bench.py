"""`python -m bench mcp` runs against a real `devyard up` and reports its JSON line: a small run,
so that a change of what `mcpUrl` or the device API answers breaks this test, not the next
person's benchmark."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_bench_mcp_measures_observe_against_the_device_api() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "bench", "mcp", "--reps", "2"],
        cwd=ROOT, capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["bench"] == "mcp"
    assert set(summary["results"]) == {
        "api_screenshot", "api_screenshot_ui", "mcp_observe", "mcp_observe_tree"
    }  # fmt: skip
    assert all(r["p50"] > 0 for r in summary["results"].values()), summary
    assert summary["ratios"]["observe_over_direct"] > 0
