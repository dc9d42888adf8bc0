"""Fixtures shared by the whole suite.

PostgreSQL: ``postgres_cluster`` starts one throwaway cluster per test session (sync and
session-scoped, so it lives outside any test's trio run) and ``postgres_url`` gives each test
a fresh empty schema in it, which the URL selects (``search_path``), so to the code under test
it is a fresh database; ``postgres_cluster.create_database()`` makes a real one when a test
needs it (slower, ~0.3 s). Tests that need PostgreSQL skip, with the reason, where the
server binaries are missing; CI installs them (scripts/deps).

``database_target`` is parametrized over both backends: a test (or fixture) that takes it
runs once on a fresh SQLite file and once on a fresh PostgreSQL database, with the
``postgres`` marker on the second. Pass it to ``open_store``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from devyard.server.store.pgcluster import ClusterUnavailable, TemporaryCluster


@pytest.fixture(scope="session")
def postgres_cluster() -> Iterator[TemporaryCluster]:
    try:
        cluster = TemporaryCluster.start()
    except ClusterUnavailable as exc:
        pytest.skip(f"no PostgreSQL: {exc}")
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def postgres_url(postgres_cluster: TemporaryCluster) -> str:
    """A URL of a fresh, empty schema in the session's cluster."""
    return postgres_cluster.create_schema()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_target(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh database for `open_store`: a SQLite file, then a PostgreSQL database."""
    if request.param == "sqlite":
        return str(tmp_path / "devyard.db")
    url: str = request.getfixturevalue("postgres_url")
    return url
