from __future__ import annotations

from pathlib import Path

import pytest

from devyard.server.store.factory import parse_target


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        ("/var/lib/devyard/devyard.db", ("sqlite", "/var/lib/devyard/devyard.db")),
        ("relative.db", ("sqlite", "relative.db")),
        (Path("/data/x.db"), ("sqlite", "/data/x.db")),
        ("sqlite:///abs/x.db", ("sqlite", "/abs/x.db")),
        ("sqlite://rel/x.db", ("sqlite", "rel/x.db")),
        ("postgresql://u@h:5432/db", ("postgresql", "postgresql://u@h:5432/db")),
        ("postgres://u@h/db", ("postgresql", "postgres://u@h/db")),
    ],
)
def test_parse_target(target: str | Path, expected: tuple[str, str]) -> None:
    assert parse_target(target) == expected


@pytest.mark.parametrize("target", ["mysql://h/db", "sqlite://", ""])
def test_parse_target_rejects(target: str) -> None:
    with pytest.raises(ValueError):
        parse_target(target)
