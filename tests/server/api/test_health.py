"""Spec 4.2: /livez, /readyz, /regions, /plans/{planTid}, /feedback; and /openapi.json."""

from __future__ import annotations

import shutil
from typing import Any

from quart.typing import TestClientProtocol as Client

from devyard import __version__
from devyard.server.api.contract import load_document
from devyard.server.config import ServerConfig
from devyard.server.store import FeedbackKind, Store

from .conftest import Callers, assert_api_error


async def test_livez_and_readyz_answer_a_message(client: Client) -> None:
    live = await client.get("/livez")
    ready = await client.get("/readyz")
    assert (live.status_code, ready.status_code) == (200, 200)
    assert await live.get_json() == {"message": "alive"}
    body = await ready.get_json()
    assert body["message"] == "ready" and body["version"] == __version__
    assert body["checks"] == {"store": "ok", "blobs": "ok", "hosts": "none linked"}


async def _not_ready(client: Client) -> dict[str, Any]:
    """The APIError shape (message, reason), plus what each check found and the version."""
    answer = await client.get("/readyz")
    assert answer.status_code == 500
    body: dict[str, Any] = await answer.get_json()
    assert body["message"].startswith("not ready") and body["reason"] == "not_ready"
    assert set(body) == {"message", "reason", "version", "checks"}
    return body


async def test_readyz_is_500_when_the_store_is_gone(client: Client, store: Store) -> None:
    await store.aclose()
    body = await _not_ready(client)
    assert body["reason"] == "not_ready"
    assert body["checks"]["store"] == "unavailable" and body["version"] == __version__
    # Liveness does not depend on the database: restarting the process would not help.
    assert (await client.get("/livez")).status_code == 200


async def test_readyz_names_a_blob_store_that_cannot_be_written(
    client: Client, config: ServerConfig
) -> None:
    blobs = config.data_dir / "blobs"
    shutil.rmtree(blobs, ignore_errors=True)
    blobs.write_text("not a directory")
    body = await _not_ready(client)
    assert "blobs not writable" in body["message"]
    assert body["checks"] == {"store": "ok", "blobs": "not writable", "hosts": "none linked"}


async def test_regions_need_a_key_and_list_this_server(client: Client, callers: Callers) -> None:
    await assert_api_error(await client.get("/regions"), 401)
    response = await client.get("/regions", headers=callers.viewer.headers)
    assert response.status_code == 200
    assert await response.get_json() == [{"name": "local", "url": "http://127.0.0.1:8080"}]


async def test_plans_are_public_and_unknown_plans_404(client: Client) -> None:
    response = await client.get("/plans/self-hosted")
    assert response.status_code == 200
    assert (await response.get_json())["tid"] == "self-hosted"
    await assert_api_error(await client.get("/plans/enterprise"), 404, "enterprise")


async def test_feedback_is_stored_and_answers_an_empty_200(client: Client, store: Store) -> None:
    response = await client.post("/feedback", json={"message": "lovely", "email": "x@example.com"})
    assert response.status_code == 200
    assert await response.get_data() == b""
    [saved] = await store.list_feedback()
    assert (saved.message, saved.email, saved.kind) == (
        "lovely",
        "x@example.com",
        FeedbackKind.FEEDBACK,
    )
    assert saved.org_id is None and saved.user_id is None


async def test_feedback_with_a_key_is_attributed_and_a_bad_key_is_401(
    client: Client, store: Store, callers: Callers
) -> None:
    ok = await client.post("/feedback", json={"message": "hi"}, headers=callers.member.headers)
    assert ok.status_code == 200
    [saved] = await store.list_feedback()
    assert (saved.org_id, saved.user_id) == (callers.member.org_id, callers.member.user_id)
    bad = await client.post(
        "/feedback", json={"message": "hi"}, headers={"Authorization": "Bearer dy_nope"}
    )
    await assert_api_error(bad, 401)


async def test_feedback_rejects_bad_bodies_naming_the_field(client: Client) -> None:
    await assert_api_error(await client.post("/feedback", json={}), 400, "message", "required")
    await assert_api_error(await client.post("/feedback", json={"message": ""}), 400, "message")
    await assert_api_error(
        await client.post("/feedback", json={"message": "m", "email": "not-an-email"}),
        400,
        "email",
    )
    await assert_api_error(await client.post("/feedback", json={"message": 5}), 400, "message")


async def test_openapi_json_is_the_packaged_document(client: Client) -> None:
    response = await client.get("/openapi.json")
    assert response.status_code == 200
    document = await response.get_json()
    assert document == load_document()
    assert document["info"]["version"] == "0.1.0"
