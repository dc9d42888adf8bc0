"""`python -m bench replicas` runs a tiny deployment of 1 and then 2 clustered replicas (real
`devyard server` and `devyard hostd` processes on a throwaway PostgreSQL) and bench forward's
hop, and reports its JSON line: a change that breaks the cluster's create path, the replicas'
configuration or bench forward fails this test, not the next person's benchmark."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench import replicas
from devyard.server.store.pgcluster import find_bindir

ROOT = Path(__file__).resolve().parents[2]


def _positive(value: Any) -> bool:
    return isinstance(value, int | float) and math.isfinite(value) and value > 0


@pytest.mark.slow
@pytest.mark.postgres
def test_bench_replicas_measures_one_and_two_replicas_and_the_hop() -> None:
    if find_bindir() is None:
        pytest.skip("no PostgreSQL: server binaries (initdb, pg_ctl) not found (scripts/deps)")
    argv = [sys.executable, "-m", "bench", "replicas", "--quick", "--replicas", "1,2",
            "--hosts", "1", "--creates", "2", "--concurrency", "4", "--duration", "0.5",
            "--warmup", "0.1", "--idle", "0.2", "--forward-mib", "4"]  # fmt: skip
    result = subprocess.run(
        argv, cwd=ROOT, capture_output=True, text=True, timeout=400, check=False
    )
    if result.returncode == 2 and "no PostgreSQL" in result.stderr:
        pytest.skip(result.stderr.strip().splitlines()[-1])
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["bench"] == "replicas"
    assert set(summary["results"]) == {"1", "2"}
    for n, row in summary["results"].items():
        assert row["creates"] == 2, (n, row)
        assert _positive(row["create_ready_ms"]["p50"]), (n, row)
        assert row["create_ready_ms"]["p95"] >= row["create_ready_ms"]["p50"], (n, row)
        assert _positive(row["cpu_ms_per_create"]), (n, row)
        idle = row["idle_cores"]["replicas"]
        assert math.isfinite(idle) and 0 <= idle <= 2 * int(n), (n, row)
        for name in ("whoami", "list"):
            figure = row[name]
            assert figure["errors"] == 0, (n, name, figure)
            assert _positive(figure["rps"]) and _positive(figure["p50_ms"]), (n, name, figure)
            assert _positive(figure["cpu_ms_per_request"]["replicas"]), (n, name, figure)
            assert _positive(figure["cpu_ms_per_request"]["client"]), (n, name, figure)
    ratios = summary["ratios"]
    assert set(ratios) == {"whoami_rps_2_over_1", "list_rps_2_over_1", "create_p50_2_over_1"}
    assert all(_positive(v) for v in ratios.values()), ratios
    hop = summary["forward"]["hop"]
    assert set(hop) == {"extra_cpu_s_per_gib", "extra_rtt_ms", "extra_open_ms"}
    assert all(math.isfinite(v) for v in hop.values()), hop  # a difference: may be < 0
    for path in ("direct", "forwarded"):
        assert all(_positive(v) for v in summary["forward"]["paths"][path].values()), summary
    assert summary["config"]["replicas"] == [1, 2] and summary["config"]["hosts"] == 1
    assert len(summary["load_average"]) == 3


@pytest.mark.parametrize(
    "argv", [["--replicas", "0"], ["--replicas", "one"], ["--creates", "0"], ["--idle", "0"]]
)
def test_bench_replicas_refuses_bad_options(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as refused:
        replicas.main(argv)
    assert refused.value.code == 2
