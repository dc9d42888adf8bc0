"""End to end through the instance service (both backends): an instance created and deleted
over the API is billed by the deletion itself, and a device-scoped token follows it."""

from __future__ import annotations

import pytest
from quart.typing import TestClientProtocol as Client
from quart_trio import QuartTrio

from devyard.server.api.app import api_state, create_app
from devyard.server.config import ServerConfig
from devyard.server.hosts import InstanceEvent, InstancePhase
from devyard.server.instances import InstanceService
from devyard.server.store import Store
from tests.server.api.conftest import Callers, ManualClock
from tests.server.instances.conftest import RecordingRegistry
from tests.server.tokens.conftest import SetClock


@pytest.fixture
def service(store: Store) -> InstanceService:
    return InstanceService(store, RecordingRegistry())


@pytest.fixture
def app(
    store: Store, config: ServerConfig, manual_clock: ManualClock, service: InstanceService
) -> QuartTrio:
    return create_app(api_state(store, config, clock=manual_clock, instances=service))


@pytest.fixture
def client(app: QuartTrio) -> Client:
    return app.test_client()


async def test_delete_over_the_api_bills_the_instance(
    client: Client, callers: Callers, service: InstanceService, store_clock: SetClock
) -> None:
    store_clock.set("2030-04-01T09:00:00Z")
    response = await client.post(
        "/v1/ios_instances",
        json={"metadata": {"labels": {"pr": "9"}}},
        headers=callers.member.headers,
    )
    iid = (await response.get_json())["metadata"]["id"]
    window = {"startedAt[gte]": "2030-04-01T00:00:00Z"}
    scoped = await client.post(
        "/v1/scoped_tokens",
        json={"scopes": [f"device:{iid}:install"]},
        headers=callers.member.headers,
    )
    browser = {"Authorization": f"Bearer {(await scoped.get_json())['token']}"}

    store_clock.set("2030-04-01T09:00:20Z")
    await service.on_instance_event("h1", InstanceEvent(iid, InstancePhase.READY))
    seen = await (await client.get(f"/v1/ios_instances/{iid}", headers=browser)).get_json()
    assert seen["status"]["state"] == "ready" and "token" not in seen["status"]
    listed = await client.get(
        "/v1/analytics/instances", query_string=window, headers=callers.viewer.headers
    )
    assert (await listed.get_json())["items"] == []  # running: not billed yet

    store_clock.set("2030-04-01T09:15:21Z")  # 15 min 1 s after ready: 16 minutes
    deleted = await client.delete(f"/v1/ios_instances/{iid}", headers=callers.member.headers)
    assert deleted.status_code == 200
    listed = await client.get(
        "/v1/analytics/instances", query_string=window, headers=callers.viewer.headers
    )
    [item] = (await listed.get_json())["items"]
    assert item["instanceTid"] == iid and item["labels"] == {"pr": "9"}
    assert (item["startedAt"], item["readyAt"], item["stoppedAt"]) == (
        "2030-04-01T09:00:00Z", "2030-04-01T09:00:20Z", "2030-04-01T09:15:21Z",
    )  # fmt: skip
    assert (item["billedMinutes"], item["terminationReason"]) == (16, "UserRequested")
    totals = await client.get(
        "/v1/analytics", query_string={**window, "labels": "pr=9"}, headers=callers.viewer.headers
    )
    assert (await totals.get_json())["billedMinutes"] == 16
