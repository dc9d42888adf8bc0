"""The callback on a real listener (Hypercorn on 127.0.0.1 port 0): the signature is checked
on the raw bytes that crossed the socket, and a reported key stops working for real clients."""

from __future__ import annotations

import json
from functools import partial

import attrs
import httpx
import pytest
import trio

from devyard.client import AsyncClient, AuthenticationError
from devyard.server.api.serve import BoundServer, serve_api
from devyard.server.config import ListenAddress, ServerConfig
from devyard.server.store import Store

from .conftest import Callers, Signer


async def test_a_signed_report_over_http_revokes_the_key(
    store: Store, config: ServerConfig, callers: Callers, signer: Signer
) -> None:
    config = attrs.evolve(config, listen=ListenAddress("127.0.0.1", 0))
    leaked = callers.member.key
    # bytes as GitHub sends them: key order and spacing of its own, not ours
    body = (
        b'[ {"type":"devyard_api_key", "token":"' + leaked.encode() + b'",'
        b' "url":"https://github.com/o/r", "source":"Content"} ]'
    )
    shutdown = trio.Event()
    async with trio.open_nursery() as nursery:
        bound: BoundServer = await nursery.start(
            partial(serve_api, store, config, shutdown_trigger=shutdown.wait)
        )
        async with httpx.AsyncClient(base_url=bound.base_url) as http:
            headers = {"Content-Type": "application/json", **signer.headers(body)}
            reparsed = json.dumps(json.loads(body)).encode()
            refused = await http.post("/github_revoke", content=reparsed, headers=headers)
            assert refused.status_code == 403
            assert refused.json()["reason"] == "invalid_signature"
            response = await http.post("/github_revoke", content=body, headers=headers)
        assert response.status_code == 200
        assert response.json() == [
            {"token_raw": leaked, "token_type": "devyard_api_key", "label": "true_positive"}
        ]
        async with AsyncClient(bound.base_url, leaked) as client:
            with pytest.raises(AuthenticationError):
                await client.whoami()
        shutdown.set()
