"""Replica link credentials and settings (docs/replicas.md); the links themselves are exercised
end to end in test_forward.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from devyard.server.config import ConfigError, load_server_config
from devyard.server.edge.peers import PeerConfig, peer_token, verify_peer_token

SECRET = "a-cluster-secret-of-some-length"


def test_a_token_names_its_replica_and_proves_the_secret() -> None:
    token = peer_token(SECRET, "replica.eu-1")
    assert SECRET not in token
    assert verify_peer_token(SECRET, token) == "replica.eu-1"
    assert verify_peer_token("another-secret-of-some-length", token) is None
    # the id is bound to the mac: naming another replica with the same mac fails
    prefix, _, mac = token.rpartition(".")
    assert verify_peer_token(SECRET, f"dyr.replica.eu-2.{mac}") is None
    flipped = mac[:-1] + ("1" if mac[-1] == "0" else "0")
    assert verify_peer_token(SECRET, f"{prefix}.{flipped}") is None
    assert verify_peer_token(SECRET, f"{prefix}.{'0' * 64}") is None
    for garbage in ("", "dyr", "dyr..", f"dyx.replica.eu-1.{mac}", "Bearer x", f"dyr.{mac}"):
        assert verify_peer_token(SECRET, garbage) is None


def test_the_secret_is_never_shown_and_must_be_long_enough(tmp_path: Path) -> None:
    config = PeerConfig(replica_id="r1", cluster_secret=SECRET)
    assert SECRET not in repr(config)
    with pytest.raises(ValueError):
        PeerConfig(replica_id="r1", cluster_secret="short")
    env = {
        "DEVYARD_DATA_DIR": str(tmp_path),
        "DEVYARD_PEERS_REPLICA_ID": "r1",
        "DEVYARD_PEERS_CLUSTER_SECRET": SECRET,
    }
    loaded = load_server_config(env=env)
    assert loaded.peers == config
    assert SECRET not in repr(loaded)
    assert load_server_config(env={"DEVYARD_DATA_DIR": str(tmp_path)}).peers is None
    with pytest.raises(ConfigError, match=r"\[peers\]"):
        load_server_config(
            env={"DEVYARD_DATA_DIR": str(tmp_path), "DEVYARD_PEERS_REPLICA_ID": "r1"}
        )
