"""Two links (issue 23, docs/scale-out.md): real in-process server replicas on one PostgreSQL,
each advertising its own loopback URL, and a real host daemon and a real connector process
that each hold two links, one to each replica. Closing a replica costs them no reconnect of
the link that matters: the host stays linked (its lease never lapses, its instance stays
ready, a device request through the other replica works at once), the connector keeps
serving through the other replica; the replica that comes back gets a link again."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import attrs
import httpx
import pytest
import trio

from devyard.hostd.daemon import HostdConfig, serve_hostd
from devyard.server.api.serve import BoundServer
from devyard.server.bootstrap import bootstrap_organization
from devyard.server.cluster import metrics
from devyard.server.cluster.settings import ClusterConfig
from devyard.server.config import ListenAddress, ServerConfig
from devyard.server.edge import HOST_TOKENS_FILE, create_host_token
from devyard.server.serve import open_configured_store, serve_server
from devyard.server.store.postgres import open_postgres_database
from devyard.server.store.sql_cluster import SqlCluster
from tests.polling import until
from tests.ports import free_port

pytestmark = pytest.mark.postgres

HOST_GRACE = 3.0  # a host lease not renewed for this long is lost (kept short on purpose)


@attrs.define
class Replica:
    """One in-process replica; `stop` and `start` it again on the same port and id."""

    replica_id: str
    config: ServerConfig
    nursery: trio.Nursery
    scope: trio.CancelScope | None = None
    bound: BoundServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.config.listen.port}"

    async def start(self) -> None:
        async def run(task_status: trio.TaskStatus[None]) -> None:
            with trio.CancelScope() as self.scope:
                serve = partial(serve_server, self.config, host_grace=HOST_GRACE)
                async with trio.open_nursery() as inner:
                    self.bound = await inner.start(serve)
                    task_status.started()

        await self.nursery.start(run)

    def stop(self) -> None:
        assert self.scope is not None
        self.scope.cancel()

    async def links(self, http: httpx.AsyncClient) -> dict[str, int]:
        try:
            body = (await http.get(f"{self.url}/readyz")).json()
        except httpx.HTTPError:
            return {}
        links: dict[str, int] = body.get("links", {})
        return links


def _config(url: str, data_dir: Path, replica_id: str) -> ServerConfig:
    port = free_port()
    return ServerConfig(
        data_dir=data_dir,
        listen=ListenAddress("127.0.0.1", port),
        database_url=url,
        replica_id=replica_id,
        cluster=ClusterConfig(
            enabled=True,
            heartbeat_s=0.5,
            replica_ttl_s=5,
            refresh_s=1,
            advertise_url=f"http://127.0.0.1:{port}",
        ),
    )


@attrs.frozen
class Cluster:
    a: Replica
    b: Replica
    api_key: str
    host_token: str
    url: str


@asynccontextmanager
async def open_cluster(url: str, tmp_path: Path) -> AsyncIterator[Cluster]:
    first = _config(url, tmp_path / "a", "ra")
    second = _config(url, tmp_path / "b", "rb")
    async with open_configured_store(first) as store:
        made = await bootstrap_organization(store, org_name="acme")
    _, host_token = create_host_token(first.data_dir / HOST_TOKENS_FILE)
    second.data_dir.mkdir(parents=True)
    shutil.copy(first.data_dir / HOST_TOKENS_FILE, second.data_dir / HOST_TOKENS_FILE)
    async with trio.open_nursery() as nursery:
        a, b = Replica("ra", first, nursery), Replica("rb", second, nursery)
        await a.start()
        await b.start()
        yield Cluster(a, b, made.plaintext_key, host_token, url)
        nursery.cancel_scope.cancel()


def _renewals() -> float:
    """Host lease renewals by every replica in this process."""
    return sum(
        sample.value
        for family in metrics.LEASE_RENEWALS.collect()
        for sample in family.samples
        if sample.name.endswith("_total") and sample.labels.get("kind") == "host"
    )


async def _renewed(times: int) -> None:
    """Until host leases were renewed *times* more times (a measure of heartbeats passed)."""
    start = _renewals()
    await until(_check(lambda: _renewals() >= start + times), seconds=30)


def _check(condition: Any) -> Any:
    async def check() -> bool:
        await trio.lowlevel.checkpoint()
        return bool(condition())

    return check


async def _holder(url: str, host_id: str) -> str | None:
    async with open_postgres_database(url, max_connections=1) as db:
        row = await SqlCluster(db).holder("host", host_id)
    return None if row is None else row.replica_id


async def test_a_host_holds_two_links_and_losing_a_replica_costs_it_nothing(
    postgres_url: str, tmp_path: Path
) -> None:
    async with open_cluster(postgres_url, tmp_path) as cluster, httpx.AsyncClient() as http:
        a, b = cluster.a, cluster.b
        shutdown = trio.Event()
        hostd = HostdConfig(
            server_url=a.url,  # the entry (a load balancer in production): the first link
            token=cluster.host_token,
            region=a.config.region,
            data_dir=tmp_path / "host",
            capacity=2,
            backoff_base=0.05,
        )
        async with trio.open_nursery() as host_nursery:
            await host_nursery.start(partial(serve_hostd, hostd, shutdown=shutdown))

            async def both_linked() -> bool:
                return (await a.links(http)).get("host") == 1 and (await b.links(http)).get(
                    "host"
                ) == 1

            await until(both_linked)
            # neither replica takes the other's link for a stale one: no flap, no drop
            await _renewed(6)
            assert await both_linked()
            auth = {"Authorization": f"Bearer {cluster.api_key}"}
            created = await http.post(
                f"{b.url}/v1/android_instances",
                params={"wait": "true"},
                json={"spec": {}},
                headers=auth,
            )
            assert created.status_code in (200, 201), created.text
            instance = created.json()
            iid, token = instance["metadata"]["id"], instance["status"]["token"]
            assert instance["status"]["state"] == "ready", instance
            device = f"{b.url}/v1/instances/{iid}/api/screenshot"
            device_auth = {"Authorization": f"Bearer {token}"}
            assert (await http.get(device, headers=device_auth)).status_code == 200

            a.stop()  # the replica of the host's first link goes away
            with trio.fail_after(5):  # at once: the link to b never dropped
                shot = await http.get(device, headers=device_auth)
            assert shot.status_code == 200, shot.text
            # b takes the lease over from the replica that left (no wait for its expiry) ...
            leases = b.bound.hosts.hosts() if b.bound and b.bound.hosts else []
            assert [h.id for h in leases], "b still schedules on the host"
            holder_of = leases[0].id
            await until(_check_async(lambda: _holder(cluster.url, holder_of), "rb"))
            # ... and keeps it well past the host grace: the host is never lost
            await _renewed(int(2 * HOST_GRACE / 0.5))
            got = await http.get(f"{b.url}/v1/android_instances/{iid}", headers=auth)
            assert got.json()["status"]["state"] == "ready", got.text
            assert (await b.links(http)).get("host") == 1

            await a.start()  # it comes back: the host links to it again (rebalance)
            await until(both_linked, seconds=20)
            assert (await http.get(device, headers=device_auth)).status_code == 200

            shutdown.set()
            host_nursery.cancel_scope.deadline = trio.current_time() + 15


def _check_async(value: Any, expected: object) -> Any:
    async def check() -> bool:
        return bool(await value() == expected)

    return check
