"""`tune_collector`: a daemon freezes what it loaded and collects young objects less often. The
connector's real command line is run in a child process (so this test's own collector is not
touched) that stops where the daemon's event loop would start and reports its collector."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from devyard._process import COLLECTOR_THRESHOLDS

_SCRIPT = textwrap.dedent(
    """
    import gc, sys, trio
    from devyard.cli import main
    def run(*args, **kwargs):  # where the daemon would start: report the collector instead
        print(tuple(gc.get_threshold()), gc.get_freeze_count() > 1000, flush=True)
        return 0
    trio.run = run
    print(tuple(gc.get_threshold()), flush=True)  # before: CPython's default
    sys.exit(main(["connector", "run", "--server", "http://127.0.0.1:9",
                   "--token-file", sys.argv[1]]))
    """
)


def test_the_connector_freezes_its_modules_and_raises_the_thresholds(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("dyt_" + "a" * 40)
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT, str(token)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    before, after = done.stdout.strip().splitlines()
    assert before != str(COLLECTOR_THRESHOLDS)
    assert after == f"{COLLECTOR_THRESHOLDS} True"
