"""The edge's host links: the WebSocket route ``/v1/host_connections`` and `HostRegistry`.

One link per connected host daemon: an ASGI websocket (authenticated by a host token before the
upgrade; 401 otherwise), a mux session over it, and the host's control stream (stream 1,
docs/protocol.md section 7): ``hello`` -> ``registered``, then ``instance_start`` /
``instance_stop`` from the edge and ``instance_event`` from the host.

What hosts report goes one way: the edge publishes `HostEvent`s (`HostRegistered`,
`InstanceReported`, `HostLost`) on a bounded memory channel that the instances service
consumes; the edge holds no reference to it.

A link that drops starts a grace timer; a host that reconnects within it keeps its instances
(the host daemon keeps them running), one that does not produces `HostLost`. A host the
store still has live instances on when the server starts gets the same timer
(`open_edge(expected=...)`), so a host that never comes back after a server restart loses
them too. The timers run in the edge's own nursery (`open_edge`), never in a connection's
task.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterable, MutableMapping
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any, Final, Protocol

import attrs
import trio

from ...core import (
    ControlChannel,
    MuxStream,
    RemoteProtocolError,
    Session,
    SessionBrokenError,
    SessionGoneAwayError,
    UpgradeRequest,
    read_open,
    reject_open,
    request_open,
)
from ...core.link import PROTO
from ...core.versions import SERVER_VERSION
from ..hosts import (
    BuildLogSink,
    HostEvent,
    HostInfo,
    HostLost,
    HostRegistered,
    HostUnavailableError,
    InstanceDirectory,
    InstanceEvent,
    InstanceOrder,
    InstancePhase,
    InstanceReported,
)
from ..tunnels import TunnelConnections
from ._route import LinkRequest, Refusal, refuse_hello, serve_asgi_link, serve_upgraded_link
from .asgi_stream import Receive, Send
from .egress import serve_egress
from .replica_set import ReplicaSetView, send_replica_updates
from .tokens import HostTokens

log = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_HOST_GRACE",
    "Edge",
    "LinkLeases",
    "open_edge",
]

DEFAULT_HOST_GRACE: Final = 30.0
_OPEN_TIMEOUT: Final = 10.0
_MAX_ID: Final = 200  # characters of an instance id a host may report
_MAX_ERROR: Final = 2000  # characters of an error message a host may report


class _HelloError(Exception):
    pass


class StreamForwarder(Protocol):
    """Opens instance streams through the replica that holds the host's link
    (`devyard.server.edge.forward.Forwarder`, docs/replicas.md)."""

    async def open_instance_stream(
        self, host_id: str, kind: str, instance_id: str, fields: dict[str, Any]
    ) -> MuxStream: ...


class LinkLeases(Protocol):
    """Where a cluster of replicas keeps host liveness (``cluster.hosts.ClusterHosts``,
    docs/scale-out.md): with it set, a link takes the host's lease when it registers, and a
    link that drops only stops renewing it; no grace timer runs here."""

    async def host_linked(self, info: HostInfo) -> None:
        """Raises when the lease cannot be taken: the link is then closed."""
        ...

    async def host_unlinked(self, host_id: str) -> None:
        """Never raises."""
        ...


@attrs.define
class _Link:
    host_id: str
    session: Session
    control: ControlChannel
    info: HostInfo
    running: set[str]
    closed: trio.Event = attrs.field(factory=trio.Event)
    links: int = 1  # links the host holds to different replicas (hello ``links``)


class Edge:
    """Implements `HostRegistry` over the live host links; an ASGI app for the link route."""

    def __init__(
        self,
        tokens: HostTokens,
        events: trio.MemorySendChannel[HostEvent],
        directory: InstanceDirectory,
        tunnels: TunnelConnections,
        nursery: trio.Nursery,
        *,
        grace: float = DEFAULT_HOST_GRACE,
    ) -> None:
        """*events* gets what hosts report; *directory* and *tunnels* serve hosts' egress
        streams (tunnel-attached instances); grace timers run in *nursery*."""
        self._tokens = tokens
        self._events = events
        self._directory = directory
        self._tunnels = tunnels
        self._nursery = nursery
        self.grace = grace
        self._links: dict[str, _Link] = {}
        self._grace_scopes: dict[str, trio.CancelScope] = {}
        self.build_logs: BuildLogSink | None = None  # set by serve.py (docs/builds.md)
        self.forwarder: StreamForwarder | None = None  # set by serve.py (docs/replicas.md)
        self.leases: LinkLeases | None = None  # set by the cluster (docs/scale-out.md)
        self.build_cache: Any = None  # set by serve.py (build_cache/service.py)
        self.replica_set: ReplicaSetView | None = None  # set by the cluster (two links)

    def __repr__(self) -> str:
        return f"Edge(hosts={sorted(self._links)})"

    # ---- HostRegistry ---------------------------------------------------------------------

    def hosts(self) -> list[HostInfo]:
        return [attrs.evolve(link.info, running=len(link.running)) for link in self._links.values()]

    def links_held(self, host_id: str) -> int:
        """How many links to different replicas the host linked here says it holds (hello
        ``links``; 1 for an older host, 0 when it is not linked here)."""
        link = self._links.get(host_id)
        return 0 if link is None else link.links

    def drop(self, host_id: str) -> None:
        """Closes *host_id*'s link (its token was revoked); its instances get the grace."""
        link = self._links.get(host_id)
        if link is not None:
            link.closed.set()

    async def start_instance(self, host_id: str, order: InstanceOrder) -> None:
        link = self._links.get(host_id)
        if link is None:
            raise HostUnavailableError(f"host {host_id} is not connected")
        link.running.add(order.instance_id)
        message = {"type": "instance_start", "order": attrs.asdict(order)}
        try:
            await link.control.send(message)
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            link.running.discard(order.instance_id)
            raise HostUnavailableError(f"host {host_id}'s link broke") from exc

    async def stop_instance(self, host_id: str, instance_id: str) -> None:
        link = self._links.get(host_id)
        if link is None:
            await trio.lowlevel.checkpoint()
            return
        try:
            await link.control.send({"type": "instance_stop", "instance_id": instance_id})
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            log.info("host %s: link broke while stopping %s", host_id, instance_id)

    # ---- streams to a host's instances (the per-instance gateway) ------------------------

    async def open_instance_stream(
        self, host_id: str, kind: str, instance_id: str, **fields: Any
    ) -> MuxStream:
        """A stream of *kind* to an instance on *host_id*, its open preamble accepted.

        Raises HostUnavailableError when the host is not linked (or its link is going away),
        OpenError when the host refuses (``not-found``: the instance is not running there).
        A host linked to another replica is reached through it (`forwarder`, when set).
        """
        if host_id not in self._links and self.forwarder is not None:
            return await self.forwarder.open_instance_stream(host_id, kind, instance_id, fields)
        return await self.open_linked_stream(host_id, kind, instance_id, **fields)

    async def open_linked_stream(
        self, host_id: str, kind: str, instance_id: str, **fields: Any
    ) -> MuxStream:
        """`open_instance_stream` over this replica's own link only (never forwarded)."""
        link = self._links.get(host_id)
        if link is None:
            raise HostUnavailableError(f"host {host_id} is not connected")
        try:
            stream = await link.session.open_stream()
        except (SessionBrokenError, SessionGoneAwayError, trio.ClosedResourceError) as exc:
            raise HostUnavailableError(f"host {host_id}'s link is going away") from exc
        try:
            with trio.fail_after(_OPEN_TIMEOUT):
                await request_open(stream, kind, instance_id=instance_id, **fields)
        except BaseException as exc:
            await trio.aclose_forcefully(stream)
            if isinstance(exc, trio.TooSlowError):
                raise HostUnavailableError(f"host {host_id} did not answer in time") from exc
            if isinstance(exc, trio.BrokenResourceError | trio.ClosedResourceError):
                raise HostUnavailableError(f"host {host_id}'s link broke") from exc
            raise
        return stream

    # ---- the link route (`_route.LinkRoute`) ----------------------------------------------

    async def __call__(self, scope: MutableMapping[str, Any], receive: Receive, send: Send) -> None:
        await serve_asgi_link(self, scope, receive, send)

    async def serve_upgrade(self, upgrade: UpgradeRequest) -> None:
        """The route on the raw link port."""
        await serve_upgraded_link(self, upgrade)

    async def authenticate(self, request: LinkRequest) -> str:
        """The host id a host token opens (`Refusal` 401 otherwise)."""
        host_id = None
        if request.token:
            host_id = await trio.to_thread.run_sync(self._tokens.verify, request.token)
        else:
            await trio.lowlevel.checkpoint()
        if host_id is None:
            raise Refusal(401, "unauthorized", "invalid host token")
        return host_id

    async def serve(
        self, host_id: str, session: Session, control: ControlChannel, hello: dict[str, Any]
    ) -> None:
        """Register the host and serve its link until it ends or a new link replaces it."""
        try:
            info = _host_info(host_id, hello)
        except _HelloError as exc:
            await refuse_hello(session, control, "bad-hello", str(exc))
            return
        previous = self._links.get(host_id)
        if previous is not None:  # the same host again: the new link replaces the old
            previous.closed.set()
        instances = hello.get("instances")
        reported = frozenset(str(i) for i in instances) if isinstance(instances, list) else None
        link = _Link(
            host_id=host_id,
            session=session,
            control=control,
            info=info,
            running=set(reported or ()),
            links=_links_held(hello),
        )
        try:
            # `registered` goes out before the link is published: once it is in `_links` a
            # create may send `instance_start` on this control stream, and the host must read
            # `registered` first (a create racing the registration reached the host first).
            replicas = {} if self.replica_set is None else self.replica_set.message()
            await control.send(
                {"type": "registered", "host_id": host_id, **SERVER_VERSION, **replicas}
            )
            # from here a create may send an order on this link: one sent after this moment
            # is not in the hello's list and must not be taken for lost (on_host_registered)
            published_at = trio.current_time()
            self._links[host_id] = link
            # after publishing: the replaced link's cleanup may have started a grace meanwhile
            scope = self._grace_scopes.pop(host_id, None)
            if scope is not None:
                scope.cancel()
            if self.leases is not None:
                try:
                    await self.leases.host_linked(info)
                except Exception:
                    log.exception("host %s: could not take its lease; closing the link", host_id)
                    return
            log.info("host %s (%s, %s) registered", host_id, info.name, info.region)
            await self._events.send(HostRegistered(host_id, reported, published_at))
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._receive_loop, link, nursery.cancel_scope)
                nursery.start_soon(self._accept_streams, link)
                nursery.start_soon(send_replica_updates, self.replica_set, control)

                async def _replaced() -> None:
                    await link.closed.wait()
                    nursery.cancel_scope.cancel()

                nursery.start_soon(_replaced)
        finally:
            if self._links.get(host_id) is link:
                del self._links[host_id]
                if self.leases is not None:  # the lease stops being renewed; no timer here
                    self._nursery.start_soon(self.leases.host_unlinked, host_id)
                else:
                    self._start_grace(host_id)

    async def _accept_streams(self, link: _Link) -> None:
        """Streams the host opens: ``egress`` (docs/protocol.md 6), served in their own tasks."""
        async with trio.open_nursery() as nursery:
            while True:
                try:
                    stream = await link.session.accept_stream()
                except (trio.EndOfChannel, SessionBrokenError):
                    return
                nursery.start_soon(self._serve_host_stream, link.host_id, stream)

    async def _serve_host_stream(self, host_id: str, stream: MuxStream) -> None:
        try:
            with trio.fail_after(_OPEN_TIMEOUT):
                request = await read_open(stream)
            if request["kind"] == "build_log" and self.build_logs is not None:
                await self.build_logs.serve_build_log(host_id, request, stream)
            elif request["kind"] == "build_cache" and self.build_cache is not None:
                await self.build_cache.serve_host_stream(host_id, request, stream)
            elif request["kind"] != "egress":
                await reject_open(stream, "bad-request", f"hosts may not open {request['kind']!r}")
            else:
                await serve_egress(stream, request, host_id, self._directory, self._tunnels)
        except (trio.TooSlowError, RemoteProtocolError, trio.BrokenResourceError) as exc:
            log.info("host %s: a stream it opened failed: %s", host_id, exc)
        finally:
            await trio.aclose_forcefully(stream)

    async def _receive_loop(self, link: _Link, done: trio.CancelScope) -> None:
        try:
            while True:
                message = await link.control.receive()
                kind = message.get("type")
                if kind == "instance_event":
                    await self._on_event(link, message)
                elif kind == "shutdown":
                    log.info("host %s: shutting down (%s)", link.host_id, message.get("reason"))
                else:
                    log.warning("host %s: unknown control message %r", link.host_id, kind)
        except trio.EndOfChannel:
            log.info("host %s: control stream ended", link.host_id)
        done.cancel()

    async def _on_event(self, link: _Link, message: dict[str, Any]) -> None:
        error_message = message.get("error_message")
        try:
            event = InstanceEvent(
                instance_id=str(message["instance_id"])[:_MAX_ID],
                phase=InstancePhase(message["phase"]),
                error_message=None if error_message is None else str(error_message)[:_MAX_ERROR],
            )
        except (KeyError, TypeError, ValueError):
            log.warning("host %s: malformed instance_event", link.host_id)
            return
        if event.phase is InstancePhase.TERMINATED:
            link.running.discard(event.instance_id)
        else:
            link.running.add(event.instance_id)
        await self._events.send(InstanceReported(link.host_id, event))

    async def drain(self) -> None:
        """This server drains: every linked host is told to link again (``drain``,
        docs/protocol.md 7); each send bounded, a dead link skipped."""
        async with trio.open_nursery() as nursery:
            for link in list(self._links.values()):
                nursery.start_soon(self._say_drain, link)

    async def _say_drain(self, link: _Link) -> None:
        with trio.move_on_after(_OPEN_TIMEOUT):
            try:
                await link.control.send({"type": "drain"})
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                log.info("host %s: link broke while telling it to move", link.host_id)

    def expect(self, host_ids: Iterable[str]) -> None:
        """Hosts that should link (the store has live instances on them): each one that is
        not linked now gets the grace timer, as if its link had just dropped."""
        for host_id in host_ids:
            if host_id not in self._links and host_id not in self._grace_scopes:
                log.info("host %s: not linked yet, waiting %.0f s for it", host_id, self.grace)
                self._start_grace(host_id)

    def _start_grace(self, host_id: str) -> None:
        scope = self._grace_scopes[host_id] = trio.CancelScope()
        self._nursery.start_soon(self._grace_timer, host_id, scope)

    async def _grace_timer(self, host_id: str, scope: trio.CancelScope) -> None:
        # the scope is an argument: the host may be back (and the scope popped and cancelled)
        # before this task first runs
        with scope:
            await trio.sleep(self.grace)
            if self._grace_scopes.get(host_id) is scope:
                del self._grace_scopes[host_id]
            log.warning("host %s: gone for %.0f s, its instances are lost", host_id, self.grace)
            try:
                await self._events.send(HostLost(host_id))
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                log.warning("host %s lost, but nobody consumes host events any more", host_id)


def _links_held(hello: dict[str, Any]) -> int:
    links = hello.get("links", 1)
    return links if isinstance(links, int) and 1 <= links <= 4 else 1


def _host_info(host_id: str, hello: dict[str, Any]) -> HostInfo:
    if hello.get("type") != "hello" or hello.get("role") != "host":
        raise _HelloError("the first control message must be a host hello")
    if hello.get("proto") != PROTO:
        raise _HelloError(f"unsupported protocol version {hello.get('proto')!r}")
    try:
        capacity = int(hello["capacity"])
        return HostInfo(
            id=host_id,
            name=str(hello.get("hostname", "")),
            region=str(hello["region"]),
            capacity=capacity,
            running=0,
            platforms=frozenset(str(p) for p in hello.get("platforms", [])),
            drivers=frozenset(str(d) for d in hello.get("drivers", [])),
            version=str(hello.get("version", "")),
            connected_at=datetime.now(UTC),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise _HelloError(f"bad hello: {exc}") from exc


@asynccontextmanager
async def open_edge(
    tokens: HostTokens,
    events: trio.MemorySendChannel[HostEvent],
    directory: InstanceDirectory,
    tunnels: TunnelConnections,
    *,
    grace: float = DEFAULT_HOST_GRACE,
    expected: Iterable[str] = (),
) -> AsyncIterator[Edge]:
    """The edge for the duration of the block (its grace timers end with it); each host in
    *expected* that does not link within *grace* is lost (`Edge.expect`)."""
    async with trio.open_nursery() as nursery:
        edge = Edge(tokens, events, directory, tunnels, nursery, grace=grace)
        edge.expect(expected)
        yield edge
        nursery.cancel_scope.cancel()
