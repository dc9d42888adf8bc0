"""Orders of any size reach a host linked to another replica: one that does not fit in a
NOTIFY (spec and initial assets past 8 KB) names only its instance, and the holder reads the
order its create stored in the same transaction (docs/scale-out.md)."""

from __future__ import annotations

import json

import pytest

from devyard.server.cluster.bus import MAX_PAYLOAD
from devyard.server.instances import NewInstance
from devyard.server.store import open_store
from devyard.server.store.base import InstanceState, Platform
from tests.polling import eventually, until
from tests.server.cluster.conftest import link_host, open_replica

pytestmark = pytest.mark.postgres


async def test_an_order_larger_than_a_notify_reaches_a_host_on_another_replica(
    cluster_url: str,
) -> None:
    assets = tuple(
        {"name": f"app-{n}.apk", "url": f"https://assets.test/{n}/" + "x" * 400, "md5": "0" * 32}
        for n in range(40)
    )
    async with (
        open_store(cluster_url) as store,
        open_replica(cluster_url, "ra", store=store) as ra,
        open_replica(cluster_url, "rc", store=store) as rc,
        link_host(ra.edge, "host_big", capacity=1) as host,
    ):
        assert rc.service is not None
        org = await store.create_organization("acme")
        await eventually(lambda: [h.id for h in rc.hosts.hosts()] == ["host_big"])
        new = NewInstance(
            platform=Platform.ANDROID,
            labels={"big": "yes"},
            display_name=None,
            spec={},
            initial_assets=assets,
        )
        created = await rc.service.create(org, new, reuse=False)  # rc holds no host
        await eventually(lambda: any(m["type"] == "instance_start" for m in host.received))
        start = next(m for m in host.received if m["type"] == "instance_start")
        assert len(json.dumps(start["order"])) > MAX_PAYLOAD  # it could not travel inline
        assert start["order"]["instance_id"] == created.id
        assert start["order"]["organization_id"] == org.id
        assert list(start["order"]["initial_assets"]) == [dict(a) for a in assets]

        async def assigned() -> bool:
            instance = await store.get_instance(created.id)
            return instance.state is InstanceState.ASSIGNED and instance.host_id == "host_big"

        await until(assigned)  # the holder answered the order: rc wrote where it went
