"""Forwarding between two server replicas (docs/replicas.md): the real server stacks in one
process, on one store, linked to each other.

Each replica is the real server stack (`serve._serve`: API port, edge, connector hub, peer
route) over the same store, as replicas share PostgreSQL; who holds which link comes from an
in-memory `MemoryHolders` the test fills in. `FakeHost` is a host made of the mux core alone,
so a test can reset or half-close its end of a stream at will.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import attrs
import httpx
import pytest
import trio

from devyard.connector.link import ConnectorConfig, serve_connector
from devyard.core import (
    ControlChannel,
    MuxStream,
    OpenError,
    Session,
    StreamResetError,
    UpgradeRejected,
    accept_open,
    open_session,
    read_open,
    reject_open,
    request_open,
)
from devyard.core.link import HOST_PATH, PROTO
from devyard.core.transports import link_url, open_transport
from devyard.hostd.daemon import HostdConfig, serve_hostd
from devyard.hostd.drivers.virtual.device import VirtualDevice
from devyard.hostd.supervisor import Supervisor
from devyard.server.api.serve import BoundServer
from devyard.server.bootstrap import bootstrap_organization
from devyard.server.config import ListenAddress, ServerConfig
from devyard.server.edge import HOST_TOKENS_FILE, Edge, create_host_token
from devyard.server.edge.forward import Forwarder, Holder, MemoryHolders
from devyard.server.edge.peers import (
    PEER_PATH,
    PeerConfig,
    PeerUnavailable,
    open_peer_pool,
    peer_token,
)
from devyard.server.hosts import HostUnavailableError, InstanceOrder, InstancePhase
from devyard.server.metrics import REGISTRY
from devyard.server.serve import _serve, open_configured_store
from devyard.server.store import Store
from devyard.server.store.base import InstanceState, Platform
from tests.polling import eventually
from tests.ports import free_port
from tests.server.edge.test_host_links import Recorder

SECRET = "cluster-secret-for-tests-0123456789"


@attrs.define
class Replica:
    bound: BoundServer
    recorder: Recorder
    config: ServerConfig

    @property
    def edge(self) -> Edge:
        assert isinstance(self.bound.hosts, Edge)
        return self.bound.hosts

    @property
    def url(self) -> str:
        return self.bound.local_url

    @property
    def raw_url(self) -> str:
        return f"tcp://127.0.0.1:{self.bound.link_port}"

    def holder(self) -> Holder:
        assert self.config.peers is not None
        return Holder(self.config.peers.replica_id, self.url)


@attrs.define
class Cluster:
    store: Store
    org_id: str
    api_key: str
    r1: Replica
    r2: Replica
    holders: MemoryHolders
    tmp: Path

    def host_token(self) -> tuple[str, str]:
        """A new host id and token (hosts link to r1 in these tests; any replica takes them)."""
        return create_host_token(self.r1.config.data_dir / HOST_TOKENS_FILE)


@asynccontextmanager
async def open_cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    configs = [
        ServerConfig(
            data_dir=tmp_path / name,
            listen=ListenAddress("127.0.0.1", 0),
            link_listen=ListenAddress("127.0.0.1", 0),
            peers=PeerConfig(replica_id=name, cluster_secret=SECRET, backoff_base=0.05),
        )
        for name in ("r1", "r2")
    ]
    configs[1].data_dir.mkdir(mode=0o700)
    holders = MemoryHolders()
    async with open_configured_store(configs[0]) as store, trio.open_nursery() as nursery:
        boot = await bootstrap_organization(store, org_name="acme", user_name="alice")
        replicas = []
        for config in configs:
            recorder = Recorder()
            serve = partial(
                _serve, store, config, None, host_events=recorder.start(nursery), holders=holders
            )
            replicas.append(Replica(await nursery.start(serve), recorder, config))
        yield Cluster(
            store,
            boot.organization.id,
            boot.plaintext_key,
            replicas[0],
            replicas[1],
            holders,
            tmp_path,
        )
        nursery.cancel_scope.cancel()


@attrs.define
class FakeHost:
    """A host linked over the mux core alone. Instance ids pick what its streams do: ``echo``
    echoes until EOF and then sends ``bye`` and its own EOF; ``reset`` resets the stream once
    it received something; ``hold`` waits for the stream to end and records how (`ended`)."""

    session: Session
    ended: list[BaseException | None] = attrs.field(factory=list)
    changed: trio.Event = attrs.field(factory=trio.Event)

    async def serve(self) -> None:
        async with trio.open_nursery() as nursery:
            while True:
                stream = await self.session.accept_stream()
                nursery.start_soon(self._one, stream)

    async def _one(self, stream: MuxStream) -> None:
        request = await read_open(stream)
        instance_id = request.get("instance_id")
        if instance_id not in ("echo", "reset", "hold"):
            await reject_open(stream, "not-found", f"no instance {instance_id}")
            return
        await accept_open(stream)
        if instance_id == "reset":  # once the opener has sent something
            await stream.receive_some()
            stream._send_rst()
            return
        try:
            while data := await stream.receive_some():
                if instance_id == "echo":
                    await stream.send_all(data)
            if instance_id == "echo":
                await stream.send_all(b"bye")
                await stream.send_eof()
            self.ended.append(None)
        except trio.BrokenResourceError as exc:
            self.ended.append(exc)
        self.changed.set()


@asynccontextmanager
async def fake_host(url: str, token: str) -> AsyncIterator[FakeHost]:
    headers = [(b"authorization", f"Bearer {token}".encode())]
    hello: dict[str, Any] = {
        "type": "hello",
        "proto": PROTO,
        "role": "host",
        "id": "fake",
        "version": "0.1.0",
        "hostname": "fake",
        "region": "local",
        "capacity": 1,
        "platforms": ["android"],
        "drivers": ["virtual"],
        "instances": [],
    }
    async with (
        open_transport(link_url(url, HOST_PATH), extra_headers=headers) as transport,
        open_session(transport, client=True) as session,
        trio.open_nursery() as nursery,
    ):
        control = ControlChannel(await session.open_stream())
        await control.send(hello)
        assert (await control.receive())["type"] == "registered"
        host = FakeHost(session)
        nursery.start_soon(host.serve)
        yield host
        nursery.cancel_scope.cancel()


# ---- the forwarding metrics (forward_metrics, one registry for both replicas here) ----------

Sample = tuple[str, frozenset[tuple[str, str]]]


def forward_samples() -> dict[Sample, float]:
    """The forwarding and peer link samples now, histogram buckets and sums left out."""
    samples: dict[Sample, float] = {}
    for family in REGISTRY.collect():
        if not family.name.startswith(("devyard_forward", "devyard_peer")):
            continue
        for sample in family.samples:
            if not sample.name.endswith(("_created", "_bucket", "_sum")):
                samples[sample.name, frozenset(sample.labels.items())] = sample.value
    return samples


def moved(before: dict[Sample, float]) -> dict[str, float]:
    """What changed since *before*, as ``name{label=value,...}`` -> change."""
    changes: dict[str, float] = {}
    for key, value in forward_samples().items():
        change = value - before.get(key, 0.0)
        if change:
            name, labels = key
            changes[f"{name}{{{','.join(f'{k}={v}' for k, v in sorted(labels))}}}"] = change
    return changes


# ---- the tests -----------------------------------------------------------------------------


def _order(instance_id: str) -> InstanceOrder:
    return InstanceOrder(
        instance_id=instance_id,
        organization_id="org_1",
        platform="android",
        model=None,
        os_version=None,
        spec={},
    )


async def _echo_then_bye(stream: trio.SocketStream) -> None:
    async with stream:
        while data := await stream.receive_some():
            await stream.send_all(data)
        await stream.send_all(b"bye")


async def _exchange(stream: trio.abc.Stream, size: int) -> tuple[str, str, bytes]:
    """Send *size* random bytes then EOF, while reading everything back: the digests of what
    went and of what came back before the trailer, and the trailer."""
    sent, received = hashlib.sha256(), bytearray()
    back = hashlib.sha256()

    async def send() -> None:
        left = size
        while left:
            chunk = os.urandom(min(left, 256 * 1024))
            sent.update(chunk)
            await stream.send_all(chunk)
            left -= len(chunk)
        assert isinstance(stream, trio.abc.HalfCloseableStream)
        await stream.send_eof()

    async def receive() -> None:
        total = 0
        while data := await stream.receive_some():
            if total + len(data) <= size:
                back.update(data)
            else:
                keep = size - total
                back.update(data[:keep])
                received.extend(data[keep:])
            total += len(data)

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(send)
            await receive()
    return sent.hexdigest(), back.hexdigest(), bytes(received)


async def test_a_stream_through_replica_2_reaches_a_real_host_on_replica_1(
    tmp_path: Path,
) -> None:
    async with open_cluster(tmp_path) as cluster, trio.open_nursery() as nursery:
        host_id, token = cluster.host_token()
        hostd = HostdConfig(
            server_url=cluster.r1.url,
            token=token,
            region="local",
            data_dir=tmp_path / "host",
            backoff_base=0.05,
        )
        supervisor: Supervisor = await nursery.start(partial(serve_hostd, hostd))
        await eventually(lambda: any(h.id == host_id for h in cluster.r1.edge.hosts()))
        await cluster.r1.edge.start_instance(host_id, _order("android_local_1"))
        await cluster.r1.recorder.wait_for("android_local_1", InstancePhase.READY)
        device = supervisor.device("android_local_1")
        assert isinstance(device, VirtualDevice)
        await nursery.start(device.serve_port, 8080, _echo_then_bye)
        cluster.holders.holders[("host", host_id)] = cluster.r1.holder()

        # replica 2 has no link to the host: it forwards through replica 1
        assert cluster.r2.edge.hosts() == []
        before = forward_samples()
        stream = await cluster.r2.edge.open_instance_stream(
            host_id, "http", "android_local_1", port=8080
        )
        size = 8 * 1024 * 1024 + 5
        sent, back, trailer = await _exchange(stream, size)
        assert back == sent
        assert trailer == b"bye"  # after our EOF the other direction still carried bytes
        # one dial, one link each side, one open; the holder counted the bytes as they crossed
        assert moved(before) == {
            "devyard_peer_link_dials_total{outcome=ok}": 1,
            "devyard_peer_links{side=in}": 1,
            "devyard_peer_links{side=out}": 1,
            "devyard_forward_opens_total{kind=instance,outcome=ok}": 1,
            "devyard_forward_open_seconds_count{kind=instance}": 1,
            "devyard_forward_served_total{kind=instance,outcome=ok}": 1,
            "devyard_forward_bytes_total{direction=to_target,kind=instance}": size,
            "devyard_forward_bytes_total{direction=from_target,kind=instance}": size + 3,
        }
        await stream.aclose()

        # a second stream reuses the one link, and the host's own refusals come through as such
        with pytest.raises(OpenError) as refused:
            await cluster.r2.edge.open_instance_stream(host_id, "http", "android_nope", port=1)
        assert refused.value.code == "not-found"
        assert cluster.r2.edge.forwarder is not None
        assert cluster.r2.edge.forwarder.forwarded == 1  # type: ignore[attr-defined]
        changes = moved(before)
        assert changes["devyard_forward_opens_total{kind=instance,outcome=refused}"] == 1
        assert changes["devyard_forward_served_total{kind=instance,outcome=refused}"] == 1
        assert changes["devyard_peer_link_dials_total{outcome=ok}"] == 1  # the link was reused
        nursery.cancel_scope.cancel()


async def _echo(stream: trio.SocketStream) -> None:
    async with stream:
        while data := await stream.receive_some():
            await stream.send_all(data)


async def test_resets_refusals_boundaries_and_egress_across_replicas(tmp_path: Path) -> None:
    async with open_cluster(tmp_path) as cluster, trio.open_nursery() as nursery:
        host_id, token = cluster.host_token()
        r1, r2 = cluster.r1, cluster.r2
        async with fake_host(r1.url, token) as host:
            # the raw link port carries the replica link as well as the WebSocket route does
            cluster.holders.holders[("host", host_id)] = Holder("r1", r1.raw_url)

            # a reset by the host reaches the device side on replica 2
            stream = await r2.edge.open_instance_stream(host_id, "http", "reset", port=1)
            await stream.send_all(b"x")
            with trio.fail_after(10), pytest.raises(StreamResetError):
                while await stream.receive_some():
                    pass
            # a reset on replica 2's side reaches the host; half-close leaves the other way open
            stream = await r2.edge.open_instance_stream(host_id, "http", "hold", port=1)
            await stream.send_all(b"x")
            stream._send_rst()
            with trio.fail_after(10):
                await host.changed.wait()
            assert isinstance(host.ended[-1], StreamResetError)
            stream = await r2.edge.open_instance_stream(host_id, "http", "echo", port=1)
            await stream.send_all(b"ping")
            await stream.send_eof()
            got = b""
            with trio.fail_after(10):
                while data := await stream.receive_some():
                    got += data
            assert got == b"pingbye"

            # a host cannot send `forward` (nor anything but its own kinds)
            sneaky = await host.session.open_stream()
            with pytest.raises(OpenError) as refused:
                await request_open(
                    sneaky, "forward", target="host", key=host_id, open={"kind": "adb"}
                )
            assert refused.value.code == "bad-request"

            # no holder, a holder that is this replica, a holder without the link: the usual
            # "not connected", and replica 1 never forwards again (no loop)
            forwarder = r1.edge.forwarder
            assert isinstance(forwarder, Forwarder)
            before, samples = forwarder.forwarded, forward_samples()
            nobody = Holder("r3", f"http://127.0.0.1:{free_port()}")  # nothing listens there
            for holder in (None, r2.holder(), r1.holder(), nobody):
                if holder is not None:
                    cluster.holders.holders[("host", "host_gone")] = holder
                with pytest.raises(HostUnavailableError):
                    await r2.edge.open_instance_stream("host_gone", "adb", "echo")
            assert forwarder.forwarded == before
            changes = moved(samples)
            # the pool may dial nobody once more before it sees no need waits
            assert changes.pop("devyard_peer_link_dials_total{outcome=failed}") >= 1
            assert changes == {
                "devyard_forward_opens_total{kind=instance,outcome=no_holder}": 2,
                "devyard_forward_opens_total{kind=instance,outcome=not_linked}": 1,
                "devyard_forward_served_total{kind=instance,outcome=not_linked}": 1,
                "devyard_forward_opens_total{kind=instance,outcome=peer_unreachable}": 1,
                # r2's first need of r1 on its WebSocket URL (the raw port's link is another)
                "devyard_peer_link_dials_total{outcome=ok}": 1,
                "devyard_peer_links{side=in}": 1,
                "devyard_peer_links{side=out}": 1,
            }

        # a wrong cluster secret is refused at the upgrade (401), and the pool says so at once
        stranger = PeerConfig(replica_id="r9", cluster_secret="not-the-cluster-secret-at-all")
        samples = forward_samples()
        async with open_peer_pool(stranger) as pool:
            with trio.fail_after(10), pytest.raises(PeerUnavailable, match="refused"):
                await pool.open_stream(r1.url)
        changes = moved(samples)
        changes.pop("devyard_peer_link_dials_total{outcome=failed}", None)  # nobody's, above
        assert changes == {"devyard_peer_link_dials_total{outcome=refused}": 1}
        with pytest.raises(UpgradeRejected) as rejected:
            bad = [(b"authorization", f"Bearer {peer_token('wrong' * 4, 'r1')}".encode())]
            async with open_transport(link_url(r1.url, PEER_PATH), extra_headers=bad):
                pass
        assert rejected.value.status_code == 401

        # egress: a host on replica 1 dials into a tunnel whose connector is on replica 2
        listeners = await nursery.start(partial(trio.serve_tcp, _echo, 0, host="127.0.0.1"))
        dest = f"127.0.0.1:{listeners[0].socket.getsockname()[1]}"
        headers = {"Authorization": f"Bearer {cluster.api_key}"}
        async with httpx.AsyncClient(base_url=r2.url, headers=headers) as http:
            created = await http.post("/v1/tunnels", json={"name": "corp", "selectors": [dest]})
        assert created.status_code == 200, created.text
        shutdown = trio.Event()
        connector = ConnectorConfig(r2.url, created.json()["token"], backoff_base=0.05)
        nursery.start_soon(partial(serve_connector, connector, shutdown=shutdown))
        hub = r2.bound.tunnels
        assert hub is not None
        await eventually(lambda: hub.status(cluster.org_id, "corp").online)
        tunnel = await cluster.store.get_tunnel(cluster.org_id, "corp")
        cluster.holders.holders[("connector", tunnel.id)] = r2.holder()
        instance = await cluster.store.create_instance(
            org_id=cluster.org_id,
            platform=Platform.ANDROID,
            region="local",
            labels={},
            spec={"tunnel": "corp"},
            display_name=None,
            token="instance-token",
            stream_token="stream-token",
        )
        await cluster.store.transition_instance(
            instance.id,
            InstanceState.ASSIGNED,
            expected=frozenset({InstanceState.CREATING}),
            host_id=host_id,
        )
        async with fake_host(r1.url, token) as host:
            samples = forward_samples()
            probe = await host.session.open_stream()
            await request_open(probe, "egress", instance_id=instance.id, probe=True)
            egress = await host.session.open_stream()
            await request_open(egress, "egress", instance_id=instance.id, dest=dest)
            size = 2 * 1024 * 1024 + 3
            sent, back, _ = await _exchange(egress, size)
            assert back == sent
            # outside the selectors: the connector's replica refuses, and says why
            outside = await host.session.open_stream()
            with pytest.raises(OpenError) as forbidden:
                await request_open(outside, "egress", instance_id=instance.id, dest="10.9.9.9:1")
            assert forbidden.value.code == "forbidden"
            changes = moved(samples)
            changes.pop("devyard_peer_link_dials_total{outcome=failed}", None)  # nobody's
            assert changes.pop("devyard_peer_link_dials_total{outcome=ok}") == 1  # r1 to r2
            assert changes.pop("devyard_peer_links{side=out}") == 1
            assert changes.pop("devyard_peer_links{side=in}") == 1
            assert changes == {
                "devyard_forward_opens_total{kind=probe,outcome=ok}": 1,
                "devyard_forward_open_seconds_count{kind=probe}": 1,
                "devyard_forward_served_total{kind=probe,outcome=ok}": 1,
                "devyard_forward_opens_total{kind=tunnel,outcome=ok}": 1,
                "devyard_forward_open_seconds_count{kind=tunnel}": 1,
                "devyard_forward_served_total{kind=tunnel,outcome=ok}": 1,
                "devyard_forward_bytes_total{direction=to_target,kind=tunnel}": size,
                "devyard_forward_bytes_total{direction=from_target,kind=tunnel}": size,
                "devyard_forward_opens_total{kind=tunnel,outcome=refused}": 1,
                "devyard_forward_served_total{kind=tunnel,outcome=refused}": 1,
            }
        shutdown.set()
        nursery.cancel_scope.cancel()
