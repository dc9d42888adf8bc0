"""Two links (issue 23, docs/scale-out.md): real in-process server replicas on one PostgreSQL,
each advertising its own loopback URL, and a real host daemon and a real connector process
that each hold two links, one to each replica. Closing a replica costs them no reconnect of
the link that matters: the host stays linked (its lease never lapses, its instance stays
ready, a device request through the other replica works at once), the connector keeps
serving through the other replica; the replica that comes back gets a link again."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
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
from devyard.server.edge.peers import PeerConfig
from devyard.server.serve import open_configured_store, serve_server
from devyard.server.store.postgres import open_postgres_database
from devyard.server.store.sql_cluster import SqlCluster
from tests.connector.rig import DEVYARD, Connector
from tests.polling import until
from tests.ports import free_port

pytestmark = pytest.mark.postgres

PRIVATE = "127.0.0.2"  # the connector's private network: a second loopback address
PRIVATE_BODY = b"the private service answers\n"
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
        shutdown_grace=1,
        cluster=ClusterConfig(
            enabled=True,
            heartbeat_s=0.5,
            replica_ttl_s=5,
            refresh_s=1,
            advertise_url=f"http://127.0.0.1:{port}",
            peer_url=f"http://127.0.0.1:{port}",
        ),
        # one active connector in the cluster (the election): a device's egress on the other
        # replica reaches it over a peer link
        peers=PeerConfig(cluster_secret="two-links-cluster-secret"),
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


async def _private_http(stream: trio.SocketStream) -> None:
    async with stream:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = await stream.receive_some()
            if not chunk:
                return
            data += chunk
        await stream.send_all(
            b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s"
            % (len(PRIVATE_BODY), PRIVATE_BODY)
        )


async def _start_connector(nursery: trio.Nursery, server: str, token_file: Path) -> Connector:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DEVYARD_")}
    process = await trio.lowlevel.open_process(
        [*DEVYARD, "connector", "run", "--server", server, "--token-file", str(token_file)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
    )
    connector = Connector(process)
    nursery.start_soon(connector.pump)
    return connector


async def test_hosts_and_connectors_hold_two_links_and_losing_a_replica_costs_them_nothing(
    postgres_url: str, tmp_path: Path
) -> None:
    async with (
        open_cluster(postgres_url, tmp_path) as cluster,
        httpx.AsyncClient(timeout=60) as http,
        trio.open_nursery() as nursery,
    ):
        a, b = cluster.a, cluster.b
        try:
            listeners = await nursery.start(partial(trio.serve_tcp, _private_http, 0, host=PRIVATE))
        except OSError as exc:  # pragma: no cover - every Linux routes 127.0.0.0/8 to lo
            pytest.skip(f"cannot listen on {PRIVATE}: {exc}")
        private = f"{PRIVATE}:{listeners[0].socket.getsockname()[1]}"
        auth = {"Authorization": f"Bearer {cluster.api_key}"}
        made = await http.post(
            f"{b.url}/v1/tunnels", json={"name": "corp", "selectors": [private]}, headers=auth
        )
        assert made.status_code == 200, made.text
        (tmp_path / "tunnel-token").write_text(made.json()["token"])
        # both dial the entry (a load balancer in production) for their first link
        connector = await _start_connector(nursery, a.url, tmp_path / "tunnel-token")
        try:
            shutdown = trio.Event()
            hostd = HostdConfig(
                server_url=a.url,
                token=cluster.host_token,
                region=a.config.region,
                data_dir=tmp_path / "host",
                capacity=2,
                backoff_base=0.05,
            )
            async with trio.open_nursery() as host_nursery:
                await host_nursery.start(partial(serve_hostd, hostd, shutdown=shutdown))

                async def both_linked() -> bool:
                    want = {"host": 1, "connector": 1}
                    links_a, links_b = await a.links(http), await b.links(http)
                    return all(links_a.get(k) == v and links_b.get(k) == v for k, v in want.items())

                await until(both_linked, seconds=30)
                # neither replica takes the host's other link for a stale one: no flap, no drop
                await _renewed(6)
                assert await both_linked()
                created = await http.post(
                    f"{b.url}/v1/android_instances",
                    params={"wait": "true"},
                    json={"spec": {"tunnel": "corp"}},
                    headers=auth,
                )
                assert created.status_code in (200, 201), created.text
                instance = created.json()
                iid, token = instance["metadata"]["id"], instance["status"]["token"]
                assert instance["status"]["state"] == "ready", instance
                device = f"{b.url}/v1/instances/{iid}/api"
                device_auth = {"Authorization": f"Bearer {token}"}
                fetch = {"command": f"curl -sS -m 5 http://{private}/"}

                async def fetched() -> dict[str, Any]:
                    answer = await http.post(f"{device}/shell", json=fetch, headers=device_auth)
                    assert answer.status_code == 200, answer.text
                    result: dict[str, Any] = answer.json()
                    return result

                assert (await fetched())["stdout"] == PRIVATE_BODY.decode()
                registrations = len([line for line in connector.lines if "registered as" in line])

                a.stop()  # the replica of the first links goes away
                with trio.fail_after(10):  # at once: the links to b never dropped
                    shot = await http.get(f"{device}/screenshot", headers=device_auth)
                    assert shot.status_code == 200, shot.text

                # the tunnel serves again once b's standby link of the same connector is promoted
                # (b wins the tunnel's lock when a's session ends: docs/scale-out.md, election)
                async def serves() -> bool:
                    return bool((await fetched())["stdout"] == PRIVATE_BODY.decode())

                await until(serves, seconds=10)
                again = [line for line in connector.lines if "registered as" in line]
                assert len(again) == registrations, "the connector served without a new link"
                # b takes the host's lease over from the replica that left ...
                host_id = instance["status"].get("hostId") or _host_of(b)
                await until(_check_async(lambda: _holder(cluster.url, host_id), "rb"))
                # ... and keeps it well past the host grace: the host is never lost
                await _renewed(int(2 * HOST_GRACE / 0.5))
                got = await http.get(f"{b.url}/v1/android_instances/{iid}", headers=auth)
                assert got.json()["status"]["state"] == "ready", got.text

                await a.start()  # it comes back: the host and the connector link to it again
                await until(both_linked, seconds=30)

                shutdown.set()
                host_nursery.cancel_scope.deadline = trio.current_time() + 15
            connector.process.send_signal(signal.SIGTERM)
            with trio.fail_after(40):
                assert await connector.exit_code() == 0, connector.text()
            nursery.cancel_scope.cancel()
        finally:  # a failing test must not leave the connector running (a ResourceWarning later)
            if connector.process.returncode is None:
                connector.process.kill()
                with trio.CancelScope(shield=True), trio.move_on_after(10):
                    await connector.process.wait()


def _host_of(replica: Replica) -> str:
    assert replica.bound is not None and replica.bound.hosts is not None
    (host,) = replica.bound.hosts.hosts()
    return host.id


def _check_async(value: Any, expected: object) -> Any:
    async def check() -> bool:
        return bool(await value() == expected)

    return check
