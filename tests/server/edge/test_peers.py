"""Replica link credentials and settings (docs/replicas.md), and when the pool redials; the
links themselves are exercised end to end in test_forward.py."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import pytest
import trio

from devyard.server.config import ConfigError, ListenAddress, ServerConfig, load_server_config
from devyard.server.edge.forward import MemoryHolders
from devyard.server.edge.peers import (
    PeerConfig,
    PeerUnavailable,
    open_peer_pool,
    peer_token,
    verify_peer_token,
)
from devyard.server.serve import _serve, open_configured_store
from tests.polling import eventually
from tests.ports import free_port
from tests.server.edge.test_forward import forward_samples, moved

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


async def test_a_lost_link_nobody_waits_for_is_not_redialled_and_the_next_need_dials(
    tmp_path: Path,
) -> None:
    """A drained or killed replica is not dialled forever: the pool forgets a link lost while
    no need waits for it, and dials again at the next need."""
    port = free_port()
    config = ServerConfig(
        data_dir=tmp_path / "r1",
        listen=ListenAddress("127.0.0.1", port),
        peers=PeerConfig(replica_id="r1", cluster_secret=SECRET),
    )
    url = f"http://127.0.0.1:{port}"
    dialler = PeerConfig(replica_id="r2", cluster_secret=SECRET, backoff_base=0.01)
    async with (
        open_configured_store(config) as store,
        open_peer_pool(dialler) as pool,
        trio.open_nursery() as nursery,
    ):

        async def serve_r1(task_status: trio.TaskStatus[trio.CancelScope]) -> None:
            async with trio.open_nursery() as inner:
                serve = partial(_serve, store, config, None, holders=MemoryHolders())
                await inner.start(serve)  # a replica with a peer route: [peers] and holders
                task_status.started(inner.cancel_scope)

        r1 = await nursery.start(serve_r1)
        samples = forward_samples()
        stream = await pool.open_stream(url)
        await trio.aclose_forcefully(stream)
        assert pool.linked() == [url]
        r1.cancel()  # r1 goes away; nothing waits for its link
        await eventually(lambda: pool.held() == [], 10)
        assert pool.linked() == []
        # one dial, one loss, and no link up on either side any more (r1 is this process too)
        assert moved(samples) == {
            "devyard_peer_link_dials_total{outcome=ok}": 1,
            "devyard_peer_link_losses_total{}": 1,
        }
        await nursery.start(serve_r1)  # back at the same address: the next need dials
        with trio.fail_after(30):
            while True:  # the first dial may meet the server still starting
                try:
                    stream = await pool.open_stream(url)
                    break
                except PeerUnavailable:
                    assert pool.held() in ([], [url])
        await trio.aclose_forcefully(stream)
        assert pool.linked() == [url]
        assert moved(samples)["devyard_peer_link_dials_total{outcome=ok}"] == 2
        assert moved(samples)["devyard_peer_links{side=out}"] == 1
        nursery.cancel_scope.cancel()


async def test_a_need_for_a_peer_whose_last_dial_failed_is_answered_at_once() -> None:
    """A killed replica's holder rows outlive it until its lease runs out: a forward to it
    meanwhile answers unavailable at once instead of waiting out the pool's backoff (a tunnel's
    egress tried again after the new holder's claim finds the new holder)."""
    url = f"tcp://127.0.0.1:{free_port()}"  # nothing listens: every dial is refused
    dialler = PeerConfig(replica_id="r2", cluster_secret=SECRET, backoff_base=60, dial_timeout=5)
    samples = forward_samples()
    async with open_peer_pool(dialler) as pool:
        with pytest.raises(PeerUnavailable):  # the first need waits for its dial, which fails
            await pool.open_stream(url)
        assert pool.held() == [url]  # backing off (the need waited when the dial failed)
        with trio.fail_after(1), pytest.raises(PeerUnavailable, match="link lost"):
            await pool.open_stream(url)  # the next need: at once, no second dial
        assert pool.held() == [url]
        assert moved(samples) == {"devyard_peer_link_dials_total{outcome=failed}": 1}
