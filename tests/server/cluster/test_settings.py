"""``[cluster]`` in the server's configuration."""

from __future__ import annotations

from pathlib import Path

import pytest

from devyard.server.cluster.settings import ClusterConfig
from devyard.server.config import ConfigError, load_server_config


def test_cluster_settings_are_read_and_need_postgresql(tmp_path: Path) -> None:
    file = tmp_path / "server.toml"
    file.write_text(
        'data_dir = "/tmp/x"\ndatabase_url = "postgresql://db.test/devyard"\n'
        '[cluster]\nenabled = true\npeer_url = "https://r1.internal:7443"\nheartbeat_s = 2\n'
    )
    config = load_server_config(file=file)
    assert config.cluster == ClusterConfig(
        enabled=True, peer_url="https://r1.internal:7443", heartbeat_s=2.0
    )
    assert load_server_config(flags={"data_dir": str(tmp_path)}).cluster == ClusterConfig()
    with pytest.raises(ConfigError, match="PostgreSQL"):
        load_server_config(flags={"data_dir": str(tmp_path), "cluster.enabled": True})
    with pytest.raises(ConfigError, match="replica_ttl_s"):
        load_server_config(
            env={"DEVYARD_DATA_DIR": str(tmp_path), "DEVYARD_CLUSTER_HEARTBEAT_S": "20"},
            defaults={"database_url": "postgresql://db.test/devyard"},
        )
