"""A real devyard for a bench: its processes started by the CLI, and a throwaway PostgreSQL."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Final

import trio

from devyard.server.store.pgcluster import ClusterUnavailable, temporary_cluster

__all__ = ["DEVYARD", "START_TIMEOUT", "postgres_url", "start_devyard"]

START_TIMEOUT: Final = 60.0
DEVYARD: Final = [sys.executable, "-m", "devyard"]


@contextmanager
def postgres_url(bench: str) -> Iterator[str | None]:
    """A fresh database of a throwaway cluster, or None (with the reason on stderr)."""
    try:
        with temporary_cluster() as cluster:
            yield cluster.create_database(f"bench_{bench}")
    except ClusterUnavailable as exc:
        print(f"bench {bench}: skipping PostgreSQL: {exc}", file=sys.stderr)
        yield None


async def start_devyard(
    nursery: trio.Nursery, args: list[str], env: Mapping[str, str]
) -> tuple[trio.Process, str]:
    """``devyard ARGS`` (``server`` or ``up``) until it says where it serves; its base URL.
    The rest of its output is drained in *nursery*."""
    process = await trio.lowlevel.open_process(
        [*DEVYARD, *args], stdout=subprocess.PIPE, env=dict(env)
    )
    assert process.stdout is not None
    buffer = b""
    with trio.fail_after(START_TIMEOUT):
        while (match := re.search(rb"serving at (https?://\S+)", buffer)) is None:
            chunk = await process.stdout.receive_some(4096)
            if not chunk:
                raise RuntimeError(f"devyard {args[0]} exited before serving")
            buffer += chunk
    nursery.start_soon(_drain, process.stdout)
    return process, match.group(1).decode()


async def _drain(stream: trio.abc.ReceiveStream) -> None:
    while await stream.receive_some(4096):
        pass
