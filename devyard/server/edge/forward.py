"""Forwarding over replica links: reach a host or a connector that is linked to another replica.

Theory of operation (docs/replicas.md). Hosts and connectors each link to one replica. When a
replica must open a stream to a host it has no link for (`Edge.open_instance_stream`: device
streams, ADB, ports, API, MCP) or to a tunnel whose active connector is not linked here (a
device's ``egress``, `ForwardingTunnels`), it asks the `HolderLookup` which replica holds that
link, opens a ``forward`` stream on its link to that replica (`PeerPool`) carrying the inner
open request, and returns the forward stream as if it were the real one:

    origin replica                         holder replica                  host / connector
    Forwarder ---- forward {target, key, open} ---> ForwardServer
                                                     local open (no forwarding) ---> open
              <--- ok | error {linked: false} ----- <--- reply
              <========== bytes, spliced both ways (forward_splice) ==========>

No loops: the holder serves a forward with its *local* links only (`Edge.open_linked_stream`,
the connector hub itself), so a forward that finds no link there answers ``unavailable`` with
``linked: false``, which the origin raises as the ordinary "not connected" error
(`HostUnavailableError`, `TunnelUnavailable`); a holder that names this replica is no holder.
Boundary: only a replica link (`PeerLinks`, cluster secret) accepts ``forward``; host links
refuse every kind but their own (``egress``, ``build_log``), so a host cannot send one.

The splice is the core's (no copy on the direct path, bounded by mux windows), plus resets: a
stream reset on one side resets the other, so an abort travels end to end. One bad stream ends
that stream only.

Metrics (`forward_metrics`, docs/scale-out.md): the origin counts and times its forwarded
opens by kind and outcome, the holder counts the forwards it serves and the bytes it splices.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any, Final, Protocol

import attrs
import trio

from ...core import (
    MuxStream,
    OpenError,
    StreamState,
    UpgradeRequest,
    accept_open,
    receive_message,
    reject_open,
    send_message,
)
from ...core.messages import error_reply
from ...core.splice import SpliceResult, _pump
from ..hosts import HostUnavailableError
from ..store.base import Store, Tunnel
from ..store.errors import NotFound
from ..tunnels import EndReason, TunnelConnections, TunnelStatus
from .connectors import TunnelDialError, TunnelUnavailable
from .forward_metrics import FORWARD_BYTES, FORWARD_OPEN_SECONDS, FORWARD_OPENS, FORWARD_SERVED
from .links import Edge
from .peers import (
    PEER_PATH,
    PeerConfig,
    PeerLinks,
    PeerPool,
    PeerUnavailable,
    open_peer_pool,
)

log = logging.getLogger(__name__)

__all__ = [
    "ForwardServer",
    "Forwarder",
    "Forwarding",
    "ForwardingTunnels",
    "Holder",
    "HolderLookup",
    "MemoryHolders",
    "forward_splice",
    "open_forwarding",
    "store_tunnel_ids",
]

_OPEN_TIMEOUT: Final = 10.0
_LINGER: Final = 10.0


@attrs.frozen
class Holder:
    """The replica holding a host's or connector's link, and where its peers reach it."""

    replica_id: str
    peer_url: str


class HolderLookup(Protocol):
    """Who holds a link; *kind* is ``"host"`` (key: host id) or ``"connector"`` (key: tunnel
    id). Implemented over PostgreSQL by the cluster registry (devyard.server.cluster)."""

    async def holder(self, kind: str, key: str) -> Holder | None: ...


@attrs.define
class MemoryHolders:
    """A `HolderLookup` over a dict (tests, and fixed deployments)."""

    holders: dict[tuple[str, str], Holder] = attrs.field(factory=dict)

    async def holder(self, kind: str, key: str) -> Holder | None:
        await trio.lowlevel.checkpoint()
        return self.holders.get((kind, key))


class _NotLinked(Exception):
    """The holder replica has no such link (any more); *outcome* says how we know (metrics:
    ``no_holder``, ``lookup_failed``, ``not_linked``)."""

    def __init__(self, message: str, outcome: str = "not_linked") -> None:
        super().__init__(message)
        self.outcome = outcome


class _PeerTimeout(PeerUnavailable):
    """The holder replica did not answer the forward request in time."""


def _outcome(exc: BaseException) -> str:
    """The ``outcome`` label of a forwarded open that raised *exc*."""
    if isinstance(exc, _NotLinked):
        return exc.outcome
    if isinstance(exc, _PeerTimeout):
        return "timeout"
    if isinstance(exc, PeerUnavailable):
        return "peer_unreachable"
    if isinstance(exc, OpenError):
        return "refused"
    return "cancelled" if isinstance(exc, trio.Cancelled) else "error"


# ---- the splice -------------------------------------------------------------------------


def _reset(stream: trio.abc.Stream) -> None:
    """Abort *stream* with RST where it is a mux stream still open (the core's splice closes
    with FIN; a forward must pass an abort on as one)."""
    if isinstance(stream, MuxStream) and stream.state in (
        StreamState.OPEN,
        StreamState.LOCAL_CLOSED,
        StreamState.REMOTE_CLOSED,
    ):
        stream._send_rst()


async def forward_splice(
    a: trio.abc.Stream, b: trio.abc.Stream, *, kind: str, linger: float = _LINGER
) -> SpliceResult:
    """`devyard.core.splice`, but a reset (or any break) of one side resets the other. The
    bytes count toward ``devyard_forward_bytes_total{kind}`` as they cross (a is the peer's
    side: a to b is toward the host or connector)."""
    with FORWARD_BYTES.counting(kind) as counts:
        return await _splice(a, b, counts, linger)


async def _splice(
    a: trio.abc.Stream, b: trio.abc.Stream, counts: tuple[list[int], list[int]], linger: float
) -> SpliceResult:
    try:
        async with trio.open_nursery() as nursery:
            done = [0]

            async def direction(src: trio.abc.Stream, dst: trio.abc.Stream, n: list[int]) -> None:
                try:
                    await _pump(src, dst, n)
                except trio.BrokenResourceError:
                    _reset(src)
                    _reset(dst)
                    raise
                done[0] += 1
                if done[0] == 1:
                    nursery.cancel_scope.deadline = min(
                        nursery.cancel_scope.deadline, trio.current_time() + linger
                    )

            nursery.start_soon(direction, b, a, counts[1])
            await direction(a, b, counts[0])
    except* (trio.BrokenResourceError, trio.ClosedResourceError):
        pass
    finally:
        with trio.CancelScope(shield=True):
            await trio.aclose_forcefully(a)
            await trio.aclose_forcefully(b)
    return SpliceResult(counts[0][0], counts[1][0])


# ---- the origin's side ------------------------------------------------------------------


class Forwarder:
    """Opens streams to hosts and connectors held by other replicas (`Edge.forwarder`)."""

    def __init__(self, lookup: HolderLookup, pool: PeerPool) -> None:
        self._lookup = lookup
        self._pool = pool
        self.forwarded = 0  # streams opened through a peer (metrics)

    def __repr__(self) -> str:
        return f"Forwarder({self._pool!r})"

    async def open_instance_stream(
        self, host_id: str, kind: str, instance_id: str, fields: Mapping[str, Any]
    ) -> MuxStream:
        """`Edge.open_instance_stream` through the replica holding *host_id*'s link."""
        inner = {**fields, "kind": kind, "instance_id": instance_id}
        try:
            return await self._forward("instance", "host", host_id, inner)
        except (_NotLinked, PeerUnavailable) as exc:
            raise HostUnavailableError(f"host {host_id} is not connected ({exc})") from None

    async def open_tunnel_stream(
        self,
        tunnel_id: str,
        org_id: str,
        tunnel_name: str,
        dest: str,
        instance_id: str,
        *,
        selector_version: int | None,
    ) -> MuxStream:
        """A ``tunnel-dial`` through the replica holding the tunnel's active connector."""
        inner = {
            "kind": "tunnel-dial",
            "org_id": org_id,
            "tunnel": tunnel_name,
            "dest": dest,
            "instance_id": instance_id,
            "selector_version": selector_version,
        }
        try:
            return await self._forward("tunnel", "connector", tunnel_id, inner)
        except (_NotLinked, PeerUnavailable) as exc:
            raise TunnelUnavailable(f"tunnel {tunnel_name!r} is offline ({exc})") from None
        except OpenError as exc:
            raise TunnelDialError(exc.code, exc.message) from None

    async def probe(self, tunnel_id: str, org_id: str, tunnel_name: str) -> bool:
        inner = {"kind": "probe", "org_id": org_id, "tunnel": tunnel_name}
        try:
            stream = await self._forward("probe", "connector", tunnel_id, inner)
        except (_NotLinked, PeerUnavailable, OpenError):
            return False
        await trio.aclose_forcefully(stream)
        return True

    async def _forward(self, kind: str, target: str, key: str, inner: dict[str, Any]) -> MuxStream:
        """`_open`, counted and timed by *kind* (forward_metrics)."""
        start = time.perf_counter()
        try:
            stream = await self._open(target, key, inner)
        except BaseException as exc:
            FORWARD_OPENS.labels(kind, _outcome(exc)).inc()
            raise
        FORWARD_OPEN_SECONDS.labels(kind).observe(time.perf_counter() - start)
        FORWARD_OPENS.labels(kind, "ok").inc()
        self.forwarded += 1
        return stream

    async def _open(self, target: str, key: str, inner: dict[str, Any]) -> MuxStream:
        try:
            holder = await self._lookup.holder(target, key)
        except Exception as exc:  # the registry is down: as if nobody held the link
            log.warning("who holds %s %s: the lookup failed", target, key, exc_info=True)
            message = f"the holder lookup failed: {type(exc).__name__}"
            raise _NotLinked(message, "lookup_failed") from exc
        if holder is None or holder.replica_id == self._pool.replica_id:
            raise _NotLinked(f"no replica holds {target} {key}", "no_holder")
        stream = await self._pool.open_stream(holder.peer_url)
        try:
            with trio.fail_after(_OPEN_TIMEOUT):
                request = {"kind": "forward", "target": target, "key": key, "open": inner}
                await send_message(stream, request)
                reply = await receive_message(stream)
        except BaseException as exc:
            await trio.aclose_forcefully(stream)
            if isinstance(exc, trio.TooSlowError):
                raise _PeerTimeout(f"replica {holder.replica_id}: {exc!r}") from exc
            if isinstance(exc, trio.BrokenResourceError):
                raise PeerUnavailable(f"replica {holder.replica_id}: {exc!r}") from exc
            raise
        if reply.get("ok") is True:
            return stream
        await trio.aclose_forcefully(stream)
        message = str(reply.get("message", ""))
        if reply.get("linked") is False:
            raise _NotLinked(f"replica {holder.replica_id}: {message}")
        retry = reply.get("retry_after_s")
        raise OpenError(
            str(reply.get("code", "error")),
            message,
            retry_after_s=float(retry) if isinstance(retry, int | float) else None,
        )


# ---- the holder's side ------------------------------------------------------------------


class ForwardServer:
    """Serves ``forward`` streams from peers (`PeerLinks`' handler) with this replica's own
    links only: never forwards again."""

    def __init__(self, edge: Edge, tunnels: TunnelConnections) -> None:
        self._edge = edge
        self._tunnels = tunnels  # the connector hub itself, never `ForwardingTunnels`
        self.served = 0

    async def __call__(self, peer_id: str, stream: MuxStream, request: dict[str, Any]) -> None:
        inner = request.get("open")
        target, key = request.get("target"), request.get("key")
        if not isinstance(inner, dict) or not isinstance(key, str):
            FORWARD_SERVED.labels("other", "bad_request").inc()
            await reject_open(stream, "bad-request", "forward needs a key and an open request")
            return
        kind = inner.pop("kind", None)
        if target == "host" and isinstance(kind, str) and kind != "forward":
            label, opened = "instance", await self._open_host(stream, key, kind, inner)
        elif target == "connector" and kind in ("tunnel-dial", "probe"):
            label = "tunnel" if kind == "tunnel-dial" else "probe"
            opened = await self._open_connector(stream, str(kind), inner)
        else:
            FORWARD_SERVED.labels("other", "bad_request").inc()
            await reject_open(stream, "bad-request", f"cannot forward {kind!r} to {target!r}")
            return
        if isinstance(opened, str):  # answered already: a refusal, or a probe's ok
            FORWARD_SERVED.labels(label, opened).inc()
            return
        FORWARD_SERVED.labels(label, "ok").inc()
        self.served += 1
        await accept_open(stream)
        await forward_splice(stream, opened, kind=label)

    # Each returns the stream opened upstream, or (the peer answered already) the outcome.

    async def _open_host(
        self, stream: MuxStream, host_id: str, kind: str, inner: dict[str, Any]
    ) -> trio.abc.Stream | str:
        instance_id = str(inner.pop("instance_id", ""))
        try:
            return await self._edge.open_linked_stream(host_id, kind, instance_id, **inner)
        except HostUnavailableError as exc:
            await _not_linked(stream, str(exc))
            return "not_linked"
        except OpenError as exc:
            await reject_open(stream, exc.code, exc.message, retry_after_s=exc.retry_after_s)
            return "refused"

    async def _open_connector(
        self, stream: MuxStream, kind: str, inner: dict[str, Any]
    ) -> trio.abc.Stream | str:
        org_id, name = str(inner.get("org_id", "")), str(inner.get("tunnel", ""))
        if kind == "probe":
            with trio.move_on_after(_OPEN_TIMEOUT):
                if await self._tunnels.probe(org_id, name):
                    await accept_open(stream)
                    return "ok"
            await _not_linked(stream, f"tunnel {name!r} has no connector answering here")
            return "not_linked"
        version = inner.get("selector_version")
        try:
            with trio.fail_after(_OPEN_TIMEOUT * 3):
                return await self._tunnels.open_tunnel_stream(
                    org_id,
                    name,
                    str(inner.get("dest", "")),
                    str(inner.get("instance_id", "")),
                    selector_version=version if isinstance(version, int) else None,
                )
        except TunnelUnavailable as exc:
            await _not_linked(stream, str(exc))
            return "not_linked"
        except TunnelDialError as exc:
            await reject_open(stream, exc.code, str(exc))
            return "refused"
        except trio.TooSlowError:
            await reject_open(stream, "timeout", f"tunnel {name!r} did not answer in time")
            return "timeout"


async def _not_linked(stream: MuxStream, message: str) -> None:
    await send_message(stream, {**error_reply("unavailable", message), "linked": False})


# ---- egress into a tunnel held elsewhere ---------------------------------------------------

#: The id of an organization's tunnel by name, None when there is none.
TunnelIds = Callable[[str, str], Awaitable[str | None]]


def store_tunnel_ids(store: Store) -> TunnelIds:
    async def tunnel_id(org_id: str, name: str) -> str | None:
        try:
            return (await store.get_tunnel(org_id, name)).id
        except NotFound:
            return None

    return tunnel_id


class ForwardingTunnels:
    """The connector hub for the edge's egress streams, with a fallback: a tunnel whose active
    connector is not linked here is dialled through the replica that holds it."""

    def __init__(self, hub: TunnelConnections, forwarder: Forwarder, tunnel_ids: TunnelIds):
        self._hub = hub
        self._forwarder = forwarder
        self._tunnel_ids = tunnel_ids

    async def open_tunnel_stream(
        self,
        org_id: str,
        tunnel_name: str,
        dest: str,
        instance_id: str,
        *,
        selector_version: int | None = None,
    ) -> trio.abc.Stream:
        try:
            return await self._hub.open_tunnel_stream(
                org_id, tunnel_name, dest, instance_id, selector_version=selector_version
            )
        except TunnelUnavailable:
            tunnel_id = await self._tunnel_ids(org_id, tunnel_name)
            if tunnel_id is None:
                raise
        return await self._forwarder.open_tunnel_stream(
            tunnel_id, org_id, tunnel_name, dest, instance_id, selector_version=selector_version
        )

    async def probe(self, org_id: str, tunnel_name: str) -> bool:
        if await self._hub.probe(org_id, tunnel_name):
            return True
        tunnel_id = await self._tunnel_ids(org_id, tunnel_name)
        return tunnel_id is not None and await self._forwarder.probe(tunnel_id, org_id, tunnel_name)

    # The rest of `TunnelHub` is the hub's own (what the service tells this replica's links).
    def status(self, org_id: str, name: str) -> TunnelStatus:
        return self._hub.status(org_id, name)

    async def on_tunnel_changed(self, tunnel: Tunnel) -> None:
        await self._hub.on_tunnel_changed(tunnel)

    async def on_tunnel_ended(self, tunnel: Tunnel, reason: EndReason) -> None:
        await self._hub.on_tunnel_ended(tunnel, reason)

    async def end_organization(self, org_id: str) -> int:
        return await self._hub.end_organization(org_id)


# ---- wiring (serve.py) ----------------------------------------------------------------------


@attrs.define
class Forwarding:
    """What one replica needs to forward and to be forwarded to (`open_forwarding`); with no
    `forwarder` (single-server mode) it changes nothing."""

    config: PeerConfig | None = None
    forwarder: Forwarder | None = None
    tunnel_ids: TunnelIds | None = None
    peers: PeerLinks | None = None  # the route, once `routes` made it

    def tunnels(self, hub: TunnelConnections) -> TunnelConnections:
        """The hub as the edge's egress uses it: falling back to the tunnel's holder."""
        if self.forwarder is None or self.tunnel_ids is None:
            return hub
        return ForwardingTunnels(hub, self.forwarder, self.tunnel_ids)

    def routes(self, edge: Edge, hub: TunnelConnections) -> dict[str, PeerLinks]:
        """Make *edge* forward; the ``/v1/replica-link`` route (none in single-server mode),
        serving peers' forwards with *edge*'s and *hub*'s own links."""
        if self.config is None or self.forwarder is None:
            return {}
        edge.forwarder = self.forwarder
        self.peers = PeerLinks(self.config, ForwardServer(edge, hub))
        return {PEER_PATH: self.peers}

    def raw_routes(self) -> dict[str, Callable[[UpgradeRequest], Awaitable[None]]]:
        """The same route on the raw link port (after `routes`)."""
        return {} if self.peers is None else {PEER_PATH: self.peers.serve_upgrade}


@asynccontextmanager
async def open_forwarding(
    config: PeerConfig | None, lookup: HolderLookup | None, store: Store
) -> AsyncIterator[Forwarding]:
    """Forwarding over peer links for the block; it does nothing (single-server mode) unless
    both the peer settings and a holder lookup are given."""
    if config is None or lookup is None:
        await trio.lowlevel.checkpoint()
        yield Forwarding()
        return
    async with open_peer_pool(config) as pool:
        yield Forwarding(config, Forwarder(lookup, pool), store_tunnel_ids(store))
