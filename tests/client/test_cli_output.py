"""The CLI's output helpers in-process: --field selection, the usage chart and --since, the
completion table and scripts (the real CLI runs them in tests/e2e/test_cli_device.py)."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
from datetime import UTC, datetime

import pytest

from devyard.cli import build_parser
from devyard.client.commands import UsageError
from devyard.client.completion import script, table
from devyard.client.resources import UsageTotals
from devyard.client.select import FieldSelector, SelectError
from devyard.client.usage_commands import _since, chart


def _selected(paths: list[str], *writes: str) -> str:
    target = io.StringIO()
    selector = FieldSelector(target, paths)
    for text in writes:
        selector.write(text)
    selector.flush()
    return target.getvalue()


def test_fields_of_a_document_a_list_and_a_stream() -> None:
    doc = {"metadata": {"id": "a"}, "status": {"state": "ready", "n": 2}, "items": [{"x": 1}]}
    assert _selected(["status.state"], json.dumps(doc, indent=2)) == "ready\n"
    assert _selected(["metadata.id", "status.n", "nope.deeper"], json.dumps(doc)) == "a\t2\t\n"
    assert _selected(["items.0.x", "items.5.x", "items"], json.dumps(doc)) == '1\t\t[{"x":1}]\n'
    listing = json.dumps([doc, {**doc, "metadata": {"id": "b"}}], indent=2)
    assert _selected(["metadata.id"], listing) == "a\nb\n"
    assert [json.loads(line)["metadata"]["id"] for line in _selected(["."], listing).split()] == [
        "a",
        "b",
    ]
    # a stream of JSON lines, each written in pieces, is selected document by document
    target = io.StringIO()
    selector = FieldSelector(target, ["type"])
    selector.write('{"type": "std')
    assert target.getvalue() == ""
    selector.write('out"}\n{"type": "exitCode"}\n')
    assert target.getvalue() == "stdout\nexitCode\n"
    assert _selected(["x"], "not json at all\n") == "not json at all\n"
    with pytest.raises(SelectError):
        FieldSelector(io.StringIO(), ["a..b"])


def test_the_usage_chart_scales_to_the_busiest_bucket() -> None:
    totals = UsageTotals.from_json(
        {
            "bucket": "day",
            "instances": 5,
            "billedMinutes": 101,
            "buckets": [
                {"start": "2026-11-01T00:00:00Z", "instances": 4, "billedMinutes": 100},
                {"start": "2026-11-02T00:00:00Z", "instances": 0, "billedMinutes": 0},
                {"start": "2026-11-03T00:00:00Z", "instances": 1, "billedMinutes": 1},
            ],
        }
    )
    lines = chart(totals, width=10)
    assert lines[0] == "2026-11-01  ██████████  100 min, 4 instances"
    assert lines[1].startswith("2026-11-02  " + " " * 10)
    assert lines[2].startswith("2026-11-03  █ ")  # any use shows
    assert lines[-1] == "total: 101 billed minutes, 5 instances"
    now = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)
    assert _since("48h", now) == "2026-11-24T12:00:00Z"
    assert _since("2w", now) == "2026-11-12T12:00:00Z"
    assert _since("2026-01-31", now) == "2026-01-31T00:00:00Z"
    with pytest.raises(UsageError):
        _since("yesterday", now)


def test_completion_covers_every_command_path() -> None:
    parser = build_parser()
    paths = table(parser)
    assert {"devyard", "devyard android", "devyard gradle exec", "devyard keys create"} <= set(
        paths
    )
    assert {"screenshot", "install", "connect", "logs"} <= set(paths["devyard android"])
    assert "connect" not in paths["devyard ios"] and "sync" in paths["devyard gradle"]
    assert "home" in paths["devyard android key"]  # fixed choices complete too
    assert "--field" in paths["devyard android list"]
    for shell in ("zsh", "fish"):
        text = script(parser, shell)
        assert "'devyard android'" in text and "screenshot" in text
        binary = shutil.which(shell)
        if binary is not None:  # the script at least parses in that shell
            checked = subprocess.run(
                [binary, "-n"], input=text.encode(), capture_output=True, check=False
            )
            assert checked.returncode == 0, checked.stderr
