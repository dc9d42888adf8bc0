"""The server's data dir is for the server alone (issue 14, finding 11)."""

from __future__ import annotations

import stat
from pathlib import Path

from devyard.server.config import ServerConfig
from devyard.server.serve import open_configured_store


async def test_a_data_dir_that_existed_with_looser_bits_becomes_0700(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir(mode=0o755)
    data.chmod(0o755)  # as an operator's `mkdir` under the usual umask leaves it
    async with open_configured_store(ServerConfig(data_dir=data)) as store:
        await store.list_live_instances()
    assert stat.S_IMODE(data.stat().st_mode) == 0o700
    assert (data / ServerConfig(data_dir=data).sqlite_path.name).exists()


async def test_a_new_data_dir_is_0700(tmp_path: Path) -> None:
    data = tmp_path / "fresh" / "data"
    async with open_configured_store(ServerConfig(data_dir=data)):
        pass
    assert stat.S_IMODE(data.stat().st_mode) == 0o700
