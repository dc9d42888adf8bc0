"""The instances service on two replicas: a create on one replica for a host linked to the
other is reserved in the store, ordered through the holder, and its READY (reported to the
holder) reaches the creating replica's ``wait_ready``; the end goes back the same way."""

from __future__ import annotations

import pytest
import trio

from devyard.server.instances import NewInstance
from devyard.server.instances.placement import NoCapacity
from devyard.server.store import open_store
from devyard.server.store.base import InstanceState, Platform
from tests.polling import eventually
from tests.server.cluster.conftest import link_host, open_replica

pytestmark = pytest.mark.postgres


def _new() -> NewInstance:
    return NewInstance(platform=Platform.ANDROID, labels={"pr": "7"}, display_name=None, spec={})


async def test_a_create_on_one_replica_runs_on_a_host_linked_to_another(
    cluster_url: str,
) -> None:
    async with (
        open_store(cluster_url) as store,
        open_replica(cluster_url, "r0", store=store) as r0,
        open_replica(cluster_url, "r1", store=store) as r1,
        link_host(r1.edge, "host_s", capacity=1) as host,
    ):
        assert r0.service is not None and r1.service is not None
        org = await store.create_organization("acme")
        await eventually(lambda: [h.id for h in r0.hosts.hosts()] == ["host_s"])

        created = await r0.service.create(org, _new(), reuse=False)
        assert created.state is InstanceState.CREATING
        await eventually(lambda: any(m["type"] == "instance_start" for m in host.received))
        assert host.received[-1]["order"]["instance_id"] == created.id
        # the host reports READY to its replica (r1) at once, perhaps before r0 has written
        # assigned: r1 knows from the reservation that the order went to this host
        await host.control.send(
            {"type": "instance_event", "instance_id": created.id, "phase": "ready"}
        )
        # the host is full: a create on either replica finds no room
        await r1.hosts.refresh()
        with pytest.raises(NoCapacity):
            await r1.service.create(org, _new(), reuse=False)
        with pytest.raises(NoCapacity):
            await r0.service.create(org, _new(), reuse=False)
        # the creator (r0) wakes
        with trio.fail_after(10):
            await r0.service.wait_ready(created.id)
        assert (await store.get_instance(created.id)).state is InstanceState.READY

        ended = await r0.service.delete(org.id, created.id)
        assert ended.state is InstanceState.TERMINATED
        await eventually(lambda: host.received[-1].get("type") == "instance_stop")
        assert host.received[-1]["instance_id"] == created.id
        assert await r0.cluster.reservations("host_s") == 0, "the slot is free again"
