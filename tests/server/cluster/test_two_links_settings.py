"""``[cluster] advertise_url``: where hosts and connectors dial a replica for their second link
(docs/scale-out.md "Two links")."""

from __future__ import annotations

from pathlib import Path

from devyard.server.config import load_server_config


def test_a_replica_advertises_its_link_address_from_the_file_or_the_environment(
    tmp_path: Path,
) -> None:
    file = tmp_path / "server.toml"
    file.write_text(
        'data_dir = "/tmp/x"\ndatabase_url = "postgresql://db.test/devyard"\n'
        '[cluster]\nenabled = true\nadvertise_url = "tls://r1.example.org:7444"\n'
    )
    assert load_server_config(file=file).cluster.advertise_url == "tls://r1.example.org:7444"
    env = {
        "DEVYARD_DATA_DIR": str(tmp_path),
        "DEVYARD_DATABASE_URL": "postgresql://db.test/devyard",
        "DEVYARD_CLUSTER_ENABLED": "true",
        "DEVYARD_CLUSTER_ADVERTISE_URL": "https://r2.example.org",
    }
    assert load_server_config(env=env).cluster.advertise_url == "https://r2.example.org"
    assert load_server_config(flags={"data_dir": str(tmp_path)}).cluster.advertise_url == ""
