"""``POST /github_revoke`` end to end through the app: signed reports revoke live credentials
of every kind and tell their organization; unsigned, wrongly signed, malformed or oversized
requests are APIErrors and revoke nothing."""

from __future__ import annotations

import json
from typing import Any

import pytest
from quart.typing import TestClientProtocol as Client
from quart_trio import QuartTrio

from devyard.server.api.routes.tunnels import TUNNELS_KEY
from devyard.server.secret_scanning import AUDIT_KIND, KEY_ID_HEADER, SIGNATURE_HEADER
from devyard.server.store import Store, tokens
from devyard.server.store.base import InstanceState, Platform
from devyard.server.tunnels import TokenInvalid, TunnelService
from tests.server.api.conftest import assert_api_error

from .conftest import Callers, KeyServer, Signer
from .test_signatures import GITHUB_KEYS, VECTORS


def _body(*tokens_: str, kind: str = "devyard_api_key") -> bytes:
    reports = [
        {"token": t, "type": kind, "url": "https://github.com/o/r/blob/x/f", "source": "commit"}
        for t in tokens_
    ]
    return json.dumps(reports).encode()


async def _report(client: Client, signer: Signer, body: bytes) -> Any:
    response = await client.post("/github_revoke", data=body, headers=signer.headers(body))
    assert response.status_code == 200, await response.get_data()
    return await response.get_json()


async def test_a_reported_api_key_is_revoked_and_its_organization_told(
    client: Client, signer: Signer, callers: Callers, store: Store
) -> None:
    leaked = callers.member
    assert (await client.get("/whoami", headers=leaked.headers)).status_code == 200
    unknown = tokens.new_api_key().plaintext
    answer = await _report(client, signer, _body(leaked.key, unknown, "dy_nonsense"))
    assert answer == [
        {"token_raw": leaked.key, "token_type": "devyard_api_key", "label": "true_positive"},
        {"token_raw": unknown, "token_type": "devyard_api_key", "label": "false_positive"},
        {"token_raw": "dy_nonsense", "token_type": "devyard_api_key", "label": "false_positive"},
    ]
    await assert_api_error(await client.get("/whoami", headers=leaked.headers), 401)
    # the rest of the organization, and other organizations, keep working
    assert (await client.get("/whoami", headers=callers.admin.headers)).status_code == 200
    assert (await client.get("/whoami", headers=callers.other_admin.headers)).status_code == 200
    events = await store.list_audit_events(leaked.org_id)
    assert [(e.kind, e.detail["tokenKind"], e.detail["source"]) for e in events] == [
        (AUDIT_KIND, "api_key", "commit")
    ]
    assert leaked.key not in json.dumps(events[0].detail)
    assert await store.list_audit_events(callers.other_admin.org_id) == []
    # the organization's admins read it over the API; members and other organizations cannot
    url = f"/organizations/{leaked.org_id}/auditEvents"
    listed = await (await client.get(url, headers=callers.admin.headers)).get_json()
    assert [(e["kind"], e["subject"], e["detail"]["action"]) for e in listed] == [
        (AUDIT_KIND, events[0].subject, "revoked")
    ]
    await assert_api_error(await client.get(url, headers=callers.viewer.headers), 403)
    await assert_api_error(await client.get(url, headers=callers.other_admin.headers), 404)
    # reported again: nothing left to revoke
    again = await _report(client, signer, _body(leaked.key))
    assert again[0]["label"] == "false_positive"


async def test_reported_scoped_tunnel_instance_and_stream_tokens_are_revoked(
    app: QuartTrio, client: Client, signer: Signer, callers: Callers, store: Store
) -> None:
    admin = callers.admin
    minted = await client.post(
        "/v1/scoped_tokens", json={"scopes": ["device:*:install"]}, headers=admin.headers
    )
    scoped = (await minted.get_json())["token"]
    tunnels = app.extensions[TUNNELS_KEY]
    assert isinstance(tunnels, TunnelService)
    _, tunnel_token = await tunnels.create(admin.org_id, "corp", ["localhost:3000"])
    instance_token = tokens.new_secret("dyi").plaintext
    stream_token = tokens.new_secret("dys").plaintext
    instance = await store.create_instance(
        org_id=admin.org_id, platform=Platform.ANDROID, region="local", labels={}, spec={},
        display_name=None, token=instance_token, stream_token=stream_token,
    )  # fmt: skip
    other_stream = tokens.new_secret("dys").plaintext
    other = await store.create_instance(
        org_id=callers.other_admin.org_id, platform=Platform.IOS, region="local", labels={},
        spec={}, display_name=None, token=tokens.new_secret("dyi").plaintext,
        stream_token=other_stream,
    )  # fmt: skip
    # a stream token relabelled as an instance token is not one we issued
    forged = "dyi" + stream_token.removeprefix("dys")
    answer = await _report(
        client, signer, _body(scoped, tunnel_token, stream_token, forged, kind="devyard")
    )
    assert [a["label"] for a in answer] == [
        "true_positive", "true_positive", "true_positive", "false_positive"
    ]  # fmt: skip
    headers = {"Authorization": f"Bearer {scoped}"}
    await assert_api_error(await client.get("/whoami", headers=headers), 401)
    with pytest.raises(TokenInvalid):
        await tunnels.authenticate(tunnel_token)
    ended = await store.get_instance(instance.id)
    assert ended.state is InstanceState.TERMINATED and ended.token is None
    # the other organization's instance is untouched
    assert (await store.get_instance(other.id)).state is not InstanceState.TERMINATED
    kinds = sorted(e.detail["tokenKind"] for e in await store.list_audit_events(admin.org_id))
    assert kinds == ["scoped_token", "stream_token", "tunnel_token"]


async def test_githubs_published_vector_is_accepted_and_labelled(
    client: Client, key_server: KeyServer
) -> None:
    key_server.document = json.dumps(GITHUB_KEYS).encode()
    for key_id, signature, payload in VECTORS:
        headers = {KEY_ID_HEADER.upper(): key_id, SIGNATURE_HEADER.upper(): signature}
        response = await client.post("/github_revoke", data=payload, headers=headers)
        assert response.status_code == 200
        assert await response.get_json() == [
            {"token_raw": "some_token", "token_type": "some_type", "label": "false_positive"}
        ]


async def test_unsigned_or_wrongly_signed_reports_revoke_nothing(
    client: Client, signer: Signer, callers: Callers, key_server: KeyServer
) -> None:
    leaked = callers.member
    body = _body(leaked.key)
    impostor = Signer(key_id=signer.key_id)
    url = "/github_revoke"
    reply = await client.post(url, data=body)
    assert (await assert_api_error(reply, 403, "required"))["reason"] == "missing_signature"
    await assert_api_error(
        await client.post(url, data=body, headers=impostor.headers(body)), 403, "signature"
    )
    tampered = body.replace(b"commit", b"Commit")
    await assert_api_error(await client.post(url, data=tampered, headers=signer.headers(body)), 403)
    malformed = {KEY_ID_HEADER: signer.key_id, SIGNATURE_HEADER: "%%%"}
    await assert_api_error(await client.post(url, data=body, headers=malformed), 403, "base64")
    unknown = Signer(key_id="ee" * 32)
    reply = await client.post(url, data=body, headers=unknown.headers(body))
    assert (await assert_api_error(reply, 403))["reason"] == "unknown_signing_key"
    assert (await client.get("/whoami", headers=leaked.headers)).status_code == 200


async def test_bad_bodies_are_400_and_oversized_ones_413(
    client: Client, signer: Signer, callers: Callers
) -> None:
    bodies = [
        b"{}",
        b"[1]",
        b'[{"type": "x"}]',
        b'[{"token": "", "type": "x"}]',
        b'[{"token": "\\ud800", "type": "x"}]',
        b"[" * 100_00 + b"]" * 100_00,
        b"\xff\xfe",
        json.dumps([{"token": "t", "type": "x"}] * 1001).encode(),
    ]
    for body in bodies:
        response = await client.post("/github_revoke", data=body, headers=signer.headers(body))
        await assert_api_error(response, 400)
    huge = _body(callers.member.key) + b" " * (64 * 1024)
    response = await client.post("/github_revoke", data=huge, headers=signer.headers(huge))
    await assert_api_error(response, 413)
    assert (await client.get("/whoami", headers=callers.member.headers)).status_code == 200


async def test_an_unreachable_key_endpoint_is_a_retryable_503(
    client: Client, signer: Signer, key_server: KeyServer
) -> None:
    key_server.status = 502
    body = _body("dy_x")
    response = await client.post("/github_revoke", data=body, headers=signer.headers(body))
    await assert_api_error(response, 503, "signing keys")
    assert response.headers["Retry-After"]
