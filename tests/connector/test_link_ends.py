"""How a connector's link ends (connector/link.py over core/link.py), against a raw-upgrade test
edge (tests/core/linkpeer.py): refusals map to exit codes, GO_AWAY(relay restarting) retries at
once, a GO_AWAY marked "do not retry" ends for good."""

from __future__ import annotations

import json

import pytest
import trio

from devyard.connector import (
    EXIT_TOKEN_INVALID,
    EXIT_TOKEN_REVOKED,
    EXIT_TUNNEL_DELETED,
    ConnectorConfig,
    Metrics,
    PermanentError,
    serve_connector,
)
from devyard.core import ControlChannel, GoAwayCode, Session, UpgradeRequest
from devyard.core.link import CONNECTOR_PATH
from tests.core.linkpeer import open_link_peer, register

_REGISTERED = {
    "type": "registered",
    "role": "active",
    "tunnel": "corp",
    "selectors": {"version": 1, "items": ["db.corp:5432"]},
}


def _config(port: int, *, backoff_base: float = 0.05) -> ConnectorConfig:
    return ConnectorConfig(
        server_url="http://unused.invalid",
        token="dyt_test",
        link=f"tcp://127.0.0.1:{port}",
        backoff_base=backoff_base,
    )


@pytest.mark.parametrize(
    ("status", "reason", "exit_code"),
    [
        (401, "token-invalid", EXIT_TOKEN_INVALID),
        (401, "unauthorized", EXIT_TOKEN_INVALID),  # a reason the connector does not know
        (403, "token_revoked", EXIT_TOKEN_REVOKED),  # the API's spelling of reasons
    ],
)
async def test_a_refused_upgrade_exits_with_the_code_of_its_reason(
    status: int, reason: str, exit_code: int
) -> None:
    async def handler(number: int, request: UpgradeRequest) -> None:
        body = {"message": "refused", "reason": reason}
        await request.reject(status, json.dumps(body).encode())

    async with open_link_peer(handler) as peer:
        assert _config(peer.port).link_url == peer.url(CONNECTOR_PATH)
        with trio.fail_after(30), pytest.raises(PermanentError) as ended:
            await serve_connector(_config(peer.port), shutdown=trio.Event())
    assert ended.value.exit_code == exit_code
    assert peer.connections == 1


async def test_go_away_relay_restarting_reconnects_at_once_and_do_not_retry_ends() -> None:
    metrics = Metrics()

    async def restart(session: Session, control: ControlChannel) -> None:
        await session.aclose(GoAwayCode.RELAY_RESTARTING)

    async def delete(session: Session, control: ControlChannel) -> None:
        await session.aclose(GoAwayCode.TUNNEL_DELETED)

    async def handler(number: int, request: UpgradeRequest) -> None:
        await register(peer, request, _REGISTERED, restart if number == 0 else delete)

    async with open_link_peer(handler) as peer:
        # a backoff of up to 1000 s: only the immediate retry reconnects within the bound
        config = _config(peer.port, backoff_base=1000.0)
        with trio.fail_after(30), pytest.raises(PermanentError) as ended:
            await serve_connector(config, shutdown=trio.Event(), metrics=metrics)
    assert ended.value.exit_code == EXIT_TUNNEL_DELETED
    assert [hello["role"] for hello in peer.hellos] == ["connector", "connector"]
    assert metrics.reconnects == 1
    assert metrics.go_away_received == {
        GoAwayCode.describe(GoAwayCode.RELAY_RESTARTING): 1,
        GoAwayCode.describe(GoAwayCode.TUNNEL_DELETED): 1,
    }
    assert metrics.role == "", "no role once the link is gone"
