"""The instance collections over HTTP (in-process ASGI client, both backends), with a
recording registry standing in for the edge at the documented seam (hosts.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import attrs
import pytest
import trio
from quart.typing import TestClientProtocol as Client
from quart_trio import QuartTrio

from devyard.server.api.app import api_state, create_app
from devyard.server.config import ServerConfig
from devyard.server.hosts import InstanceEvent, InstancePhase
from devyard.server.instances import InstanceService
from devyard.server.store import Store
from tests.server.api.conftest import (  # fixtures, used by name
    Callers,
    ManualClock,
    assert_api_error,
    callers,
    config,
    manual_clock,
)

from .conftest import RecordingRegistry

__all__ = ["callers", "config", "manual_clock"]


@pytest.fixture
def registry() -> RecordingRegistry:
    return RecordingRegistry()


@pytest.fixture
async def service(store: Store, registry: RecordingRegistry) -> AsyncIterator[InstanceService]:
    running = InstanceService(store, registry)
    async with trio.open_nursery() as nursery:
        await nursery.start(running.run)  # hands orders to the registry
        yield running
        nursery.cancel_scope.cancel()


@pytest.fixture
def app(
    store: Store, config: ServerConfig, manual_clock: ManualClock, service: InstanceService
) -> QuartTrio:
    return create_app(api_state(store, config, clock=manual_clock, instances=service))


@pytest.fixture
def client(app: QuartTrio) -> Client:
    return app.test_client()


async def _create(client: Client, callers: Callers, path: str = "android", **body: object) -> dict:  # type: ignore[type-arg]
    response = await client.post(f"/v1/{path}_instances", json=body, headers=callers.member.headers)
    assert response.status_code == 200, await response.get_data()
    created = await response.get_json()
    assert isinstance(created, dict)
    return created


async def test_no_hosts_is_a_clear_409_and_nothing_stuck(
    store: Store, config: ServerConfig, callers: Callers
) -> None:
    client = create_app(api_state(store, config)).test_client()  # the default: no hosts
    response = await client.post("/v1/ios_instances", json={}, headers=callers.member.headers)
    body = await assert_api_error(response, 409, "no host")
    assert body["reason"] == "no_capacity"
    listed = await client.get("/v1/ios_instances", headers=callers.member.headers)
    assert (await listed.get_json()) == {"items": [], "hasMore": False}


async def test_lifecycle_urls_tokens_and_delete(
    client: Client, callers: Callers, service: InstanceService, registry: RecordingRegistry
) -> None:
    created = await _create(
        client,
        callers,
        metadata={"labels": {"pr": "7"}, "displayName": "x"},
        spec={"inactivityTimeout": "600s"},
    )
    iid = created["metadata"]["id"]
    assert iid.startswith("android_local_")
    assert created["status"]["state"] == "creating"  # at once; assigned follows (spec 3.1)
    assert "apiUrl" not in created["status"]
    assert created["spec"]["inactivityTimeout"] == "10m"
    assert created["status"]["token"].startswith("dyi_")
    member = await (await client.get("/whoami", headers=callers.member.headers)).get_json()
    assert created["metadata"]["createdBy"] == member["user"]["id"]  # who made it, kept
    await service.on_instance_event("h1", InstanceEvent(iid, InstancePhase.READY))
    path = f"/v1/android_instances/{iid}"
    ready = await (await client.get(path, headers=callers.member.headers)).get_json()
    status = ready["status"]
    assert status["state"] == "ready"
    assert status["apiUrl"].endswith(f"/v1/instances/{iid}/api")
    assert status["adbWebSocketUrl"].startswith("ws")
    assert status["streamToken"] in status["signedStreamUrl"]
    for who in (callers.viewer, callers.read_only):
        seen = await (await client.get(path, headers=who.headers)).get_json()
        assert "token" not in seen["status"] and "streamToken" not in seen["status"]
    response = await client.delete(path, headers=callers.viewer.headers)
    await assert_api_error(response, 403)
    await assert_api_error(await client.get(path, headers=callers.other_admin.headers), 404)
    await assert_api_error(
        await client.get(f"/v1/ios_instances/{iid}", headers=callers.member.headers), 404
    )
    for _ in range(2):
        gone = await client.delete(path, headers=callers.member.headers)
        assert gone.status_code == 200
        body = await gone.get_json()
        assert body["status"]["state"] == "terminated"
        assert body["status"]["terminationReason"] == "UserRequested"
        assert "token" not in body["status"] and "terminatedAt" in body["metadata"]
    assert registry.stopped == [("h1", iid)]


async def test_wait_returns_at_ready_or_before_the_client_gives_up(
    client: Client, callers: Callers, service: InstanceService, registry: RecordingRegistry
) -> None:
    async def ready_soon() -> None:
        await registry.got_order.wait()
        await service.on_instance_event(
            "h1", InstanceEvent(registry.started[0][1].instance_id, InstancePhase.READY)
        )

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ready_soon)
        response = await client.post(
            "/v1/android_instances?wait=true", json={}, headers=callers.member.headers
        )
    assert (await response.get_json())["status"]["state"] == "ready"
    # Nobody reports ready: the answer comes before the client's announced timeout.
    # The TypeScript SDK announces X-Stainless-Timeout, the Python SDK its read timeout.
    for header in ("X-Stainless-Timeout", "x-stainless-read-timeout"):
        headers = {**callers.member.headers, header: "5.5"}
        with trio.fail_after(5):
            response = await client.post("/v1/ios_instances?wait=true", json={}, headers=headers)
        assert (await response.get_json())["status"]["state"] == "assigned"


async def test_reuse_if_exists(client: Client, callers: Callers) -> None:
    first = await _create(client, callers, metadata={"labels": {"a": "1"}})
    response = await client.post(
        "/v1/android_instances?reuseIfExists=true",
        json={"metadata": {"labels": {"a": "1"}}},
        headers=callers.member.headers,
    )
    assert (await response.get_json())["metadata"]["id"] == first["metadata"]["id"]
    other = await _create(client, callers, metadata={"labels": {"a": "2"}})
    assert other["metadata"]["id"] != first["metadata"]["id"]


async def test_list_pages_selectors_and_states(client: Client, callers: Callers) -> None:
    ids = [
        (await _create(client, callers, metadata={"labels": {"k": str(i % 2)}}))["metadata"]["id"]
        for i in range(5)
    ]
    await client.delete(f"/v1/android_instances/{ids[0]}", headers=callers.member.headers)
    h = callers.viewer.headers

    async def page(query: str) -> tuple[list[str], bool]:
        response = await client.get(f"/v1/android_instances?{query}", headers=h)
        assert response.status_code == 200, await response.get_data()
        body = await response.get_json()
        return [i["metadata"]["id"] for i in body["items"]], body["hasMore"]

    assert await page("limit=2") == (ids[:2], True)
    assert await page(f"limit=2&startingAfter={ids[1]}") == (ids[2:4], True)
    assert await page(f"limit=2&startingAfter={ids[3]}") == (ids[4:], False)
    assert await page(f"limit=2&endingBefore={ids[4]}") == (ids[2:4], True)
    assert await page("labelSelector=k=1") == (ids[1::2], False)
    assert await page("state=terminated") == (ids[:1], False)
    assert await page("state=creating,assigned&labelSelector=k=0") == (ids[2::2], False)
    assert await page("limit=100000") == (ids, False)
    assert await page("") == (ids, False)
    await assert_api_error(
        await client.get("/v1/android_instances?state=nope", headers=h), 400, "state"
    )
    await assert_api_error(
        await client.get("/v1/android_instances?limit=0", headers=h), 400, "limit"
    )
    await assert_api_error(
        await client.get("/v1/ios_instances?labelSelector=x", headers=h), 400, "labelSelector"
    )


async def test_bad_input_names_the_field(client: Client, callers: Callers) -> None:
    h = callers.member.headers
    for body, field in [
        ({"spec": {"hardTimeout": "5 days"}}, "hardTimeout"),
        ({"spec": {"colour": "red"}}, "colour"),
        ({"metadata": {"labels": {"a": 1}}}, "labels"),
        ({"spec": {"clues": [{"kind": "ClientIP", "clientIp": "nope"}]}}, "clues"),
    ]:
        response = await client.post("/v1/android_instances", json=body, headers=h)
        await assert_api_error(response, 400, field)
    response = await client.post(
        "/v1/android_instances", json={"spec": {"region": "mars"}}, headers=h
    )
    await assert_api_error(response, 422, "spec.region")


async def test_what_the_sdk_models_expect(client: Client, callers: Callers) -> None:
    """limrun-api's models require ``spec.region``; its pages take their cursor from ``id``;
    its docs say inactivityTimeout ``0`` is the organization's default."""
    created = await _create(client, callers, spec={"inactivityTimeout": "0", "hardTimeout": "0s"})
    assert created["id"] == created["metadata"]["id"]
    assert created["spec"]["region"] == "local"
    assert (created["spec"]["inactivityTimeout"], created["spec"]["hardTimeout"]) == ("10m", "0")
    pinned = await _create(client, callers, spec={"region": "local"})
    assert pinned["spec"]["region"] == "local"


async def test_list_filters_the_sdk_sends(
    store: Store, client: Client, callers: Callers, service: InstanceService
) -> None:
    """``region`` filters (the SDK has the parameter); ``unknown`` is a state that matches
    nothing rather than a 400."""
    ids = [(await _create(client, callers))["metadata"]["id"] for _ in range(2)]
    h = callers.viewer.headers

    async def ids_of(query: str) -> list[str]:
        response = await client.get(f"/v1/android_instances?{query}", headers=h)
        assert response.status_code == 200, await response.get_data()
        return [i["metadata"]["id"] for i in (await response.get_json())["items"]]

    assert await ids_of("region=local") == ids
    assert await ids_of("region=elsewhere") == []
    assert await ids_of("state=unknown") == []
    assert await ids_of("state=unknown,assigned") == ids
    assert await ids_of(f"region=local&limit=1&startingAfter={ids[0]}") == ids[1:]
    await assert_api_error(
        await client.get("/v1/android_instances?region=Not_A_Region", headers=h), 400, "region"
    )


async def test_ios_models_and_iphone_duo_only_where_enabled(
    store: Store, client: Client, callers: Callers, registry: RecordingRegistry
) -> None:
    h = callers.member.headers
    for model in ("iphone", "ipad", "watch"):
        created = await _create(client, callers, "ios", spec={"model": model})
        assert created["spec"]["model"] == model
    response = await client.post(
        "/v1/ios_instances", json={"spec": {"model": "iphone-duo"}}, headers=h
    )
    body = await assert_api_error(response, 422, "iphone-duo is not enabled")
    assert body["reason"] == "model_not_allowed"
    response = await client.post("/v1/ios_instances", json={"spec": {"model": "pager"}}, headers=h)
    await assert_api_error(response, 422, "spec.model")
    assert len(registry.started) == 3, "a refused model never reaches a host"

    org = await store.get_organization(callers.member.org_id)
    await store.update_organization(
        org.id, settings=attrs.evolve(org.settings, iphone_duo_enabled=True)
    )
    duo = await _create(client, callers, "ios", spec={"model": "iphone-duo"})
    assert registry.started[-1][1].model == "iphone-duo"
    assert duo["spec"]["model"] == "iphone-duo"
    android = await _create(client, callers, "android", spec={"model": "pixel"})
    assert android["spec"]["model"] == "pixel", "Android models are the drivers' to judge"


@pytest.mark.parametrize(
    ("platform", "streamed"),
    [("ios", True), ("android", True), ("xcode", False), ("gradle", False)],
)
async def test_a_stream_token_only_where_there_is_a_stream(
    client: Client, callers: Callers, service: InstanceService, platform: str, streamed: bool
) -> None:
    # Spec 2.1: streamToken and signedStreamUrl are iOS and Android fields.
    created = await _create(client, callers, path=platform)
    iid = created["metadata"]["id"]
    assert created["status"]["token"]
    assert ("streamToken" in created["status"]) is streamed
    await service.on_instance_event("h1", InstanceEvent(iid, InstancePhase.READY))
    path = f"/v1/{platform}_instances/{iid}"
    status = (await (await client.get(path, headers=callers.member.headers)).get_json())["status"]
    assert status["state"] == "ready" and status["token"] and status["apiUrl"]
    assert ("streamToken" in status) is streamed
    assert ("signedStreamUrl" in status) is streamed
    listed = await (
        await client.get(f"/v1/{platform}_instances", headers=callers.member.headers)
    ).get_json()
    assert [("streamToken" in item["status"]) for item in listed["items"]] == [streamed]
