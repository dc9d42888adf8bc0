"""The edge's connector links: the WebSocket route ``/v1/connector_connections``.

Theory of operation
-------------------
A connector dials this route with its tunnel token in ``Authorization: Bearer`` (an API key is
refused: the token must be a ``dyt_`` tunnel token). The token is checked before the upgrade:
unknown, rotated or revoked is HTTP 401 with reason ``token-invalid``, expired is 401 with
reason ``token-expired`` (the API's ``{message, reason}``, `_route`), so the connector can exit
with the right code without a session.

After the upgrade the link is a mux session whose first stream (opened by the connector) is
the control stream (docs/protocol.md 7): ``hello {replace}`` -> ``registered {role, tunnel,
ephemeral, selectors, token_expires_at}``. Per tunnel there is at most one **active**
connector; the others are **standbys**, oldest first. When the active goes (GO_AWAY, EOF, dead
peer), the oldest standby gets ``promote`` at once. A ``hello`` with ``replace`` takes over: the
old active gets ``error {code: replaced, permanent}`` and GO_AWAY(replaced) and is closed.

The tunnels service tells the hub (`TunnelHub`) about selector changes (``config`` to every
connector) and about the end of a token or tunnel (rotation, revocation, deletion): every
connector of that tunnel, standbys included, gets ``error {permanent: true}`` and the matching
GO_AWAY code, and its session is closed. A token that expires while connected is ended the same
way; from `EXPIRY_WARNING` before expiry each connector gets ``token_expiry_warning`` daily.

Data streams are opened by the edge on the active connector's session: `open_tunnel_stream`
(``tunnel-dial``, after checking the destination against the selectors here too) and `probe`.

Quick (ephemeral) tunnels: a connector that stops cleanly (``shutdown`` then GO_AWAY(connector
clean stop)) and leaves none behind deletes the tunnel at once; a connection that is lost
otherwise starts a timer (`quick_grace`, 10 min) in the hub's nursery, cancelled by a
reconnect, that deletes it. Timers use trio's clock, so tests fast-forward them with a
MockClock or a short grace.

Replicas (docs/scale-out.md): with an ``election`` a connector becomes active only while this
replica holds the tunnel's lock (`Election.acquire`, `take_over`; a lost lock: `demote_all`);
with ``quick_deadlines`` a quick tunnel's deletion is a shared deadline, not a timer here.

The per-link and per-tunnel state and the bounded sends are `hub_state`'s; the errors and
hooks shared with callers are `hub_types`'s (re-exported here).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, MutableMapping
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any, Final

import trio

from ...core import (
    ControlChannel,
    GoAwayCode,
    OpenError,
    RemoteProtocolError,
    Session,
    SessionGoneAwayError,
    UpgradeRequest,
    request_open,
)
from ...core.link import PROTO
from ...core.selectors import SelectorError, parse_dest
from ...core.versions import SERVER_VERSION
from ..store.base import Tunnel
from ..store.rows import utc_now
from ..tunnels import (
    EXPIRY_WARNING,
    ConnectorInfo,
    EndReason,
    TokenExpired,
    TokenInvalid,
    TunnelStatus,
)
from ._route import LinkRequest, Refusal, refuse_hello, serve_asgi_link, serve_upgraded_link
from .asgi_stream import Receive, Send
from .hub_state import Connector, TunnelEntry, send_quietly, send_within
from .hub_types import (
    Election,
    QuickDeadlines,
    TunnelDialError,
    TunnelDirectory,
    TunnelUnavailable,
)
from .replica_set import ReplicaSetView, send_replica_updates  # two links (c23links)

log = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_MAX_CONNECTORS",
    "DEFAULT_QUICK_GRACE",
    "ConnectorHub",
    "Election",
    "QuickDeadlines",
    "TunnelDialError",
    "TunnelDirectory",
    "TunnelUnavailable",
    "open_connector_hub",
]

DEFAULT_QUICK_GRACE: Final = 600.0
DEFAULT_MAX_CONNECTORS: Final = 8
_CLOSE_GRACE: Final = 2.0
_DAY: Final = 86400.0
_GO_AWAY: Final = {
    EndReason.ROTATED: GoAwayCode.TOKEN_ROTATED,
    EndReason.REVOKED: GoAwayCode.TOKEN_REVOKED,
    EndReason.EXPIRED: GoAwayCode.TOKEN_EXPIRED,
    EndReason.DELETED: GoAwayCode.TUNNEL_DELETED,
}


class ConnectorHub:
    """Implements `TunnelHub` over the live connector links; the ASGI app of the route."""

    def __init__(
        self,
        directory: TunnelDirectory,
        nursery: trio.Nursery,
        *,
        quick_grace: float = DEFAULT_QUICK_GRACE,
        max_connectors: int = DEFAULT_MAX_CONNECTORS,
        now: Callable[[], datetime] = utc_now,
    ) -> None:
        """*max_connectors*: connector links one tunnel may hold (active and standbys); one
        more is refused before the upgrade (429, ``too-many-connectors``; it retries)."""
        self._directory = directory
        self._nursery = nursery
        self.quick_grace = quick_grace
        self._max_connectors = max_connectors
        self._now = now
        self._tunnels: dict[str, TunnelEntry] = {}  # by tunnel id
        self._by_name: dict[tuple[str, str], str] = {}  # (org id, name) -> tunnel id
        # called when the set of tunnels with an active connector here changes (the
        # cluster's registry of who holds what, docs/scale-out.md)
        self.on_active_changed: Callable[[], None] | None = None
        # ---- two links (c23links, docs/scale-out.md): the replica set sent to connectors
        self.replica_set: ReplicaSetView | None = None  # set by the cluster
        self.election: Election | None = None  # replicas: who may have the active connector
        self.quick_deadlines: QuickDeadlines | None = None  # replicas: shared quick deletion

    def __repr__(self) -> str:
        return f"ConnectorHub(tunnels={len(self._tunnels)})"

    # ---- what the service and the instances use ----------------------------------------------

    def active_tunnels(self) -> dict[str, tuple[Tunnel, ConnectorInfo]]:
        """The tunnels whose active connector is linked here, by id, with that connector."""
        return {
            tid: (entry.tunnel, entry.active.info)
            for tid, entry in self._tunnels.items()
            if entry.active is not None
        }

    def _active_changed(self) -> None:
        if self.on_active_changed is not None:
            self.on_active_changed()
        if self.election is not None:
            self.election.changed()

    # ---- the cluster's election (`Election`, docs/scale-out.md) ---------------------------

    def waiting_tunnels(self) -> set[str]:
        """Tunnels with a standby and no active connector here."""
        return {
            tid
            for tid, entry in self._tunnels.items()
            if entry.active is None
            and not self._handing_over(entry)
            and any(not c.kicked.is_set() for c in entry.standbys)
        }

    def take_over(self, tunnel_id: str) -> bool:
        """This replica holds the tunnel's lock: promote the oldest standby (False: none)."""
        entry = self._tunnels.get(tunnel_id)
        if entry is None:
            return False
        if entry.active is not None:
            return True
        waiting = [c for c in entry.standbys if not c.kicked.is_set()]
        if not waiting:
            return False
        self._promote(entry, min(waiting, key=lambda c: not c.replacing))  # then the oldest
        self._active_changed()
        return True

    async def hand_over(self, tunnel_id: str, within: float) -> bool:
        """Another replica has a connector started with ``--replace``: the active one here
        gets ``replaced`` and, for *within* seconds, no standby here takes over (the lock
        goes to that replica). False: no active connector here."""
        entry = self._tunnels.get(tunnel_id)
        if entry is None or entry.active is None:
            await trio.lowlevel.checkpoint()
            return False
        entry.handing_over_until = trio.current_time() + within
        message = "another connector replaced this one"
        await self._kick(entry.active, "replaced", GoAwayCode.REPLACED, message)
        return True

    def demote_all(self) -> list[str]:
        """The lock is lost: each active here becomes its tunnel's oldest standby at once (it
        is not told: nothing is routed to it); the tunnels' ids."""
        demoted = []
        for tid, entry in self._tunnels.items():
            if entry.active is not None:
                entry.standbys.insert(0, entry.active)
                entry.active = None
                demoted.append(tid)
        if demoted:
            self._active_changed()
        return demoted

    def linked_tunnels(self) -> list[Tunnel]:
        """The tunnels with a connector (active or standby) linked here, as last learned."""
        return [e.tunnel for e in self._tunnels.values() if e.connectors()]

    def quick_tunnels(self) -> list[Tunnel]:
        return [t for t in self.linked_tunnels() if t.ephemeral]

    def status(self, org_id: str, name: str) -> TunnelStatus:
        entry = self._entry(org_id, name)
        if entry is None:
            return TunnelStatus()
        return TunnelStatus(
            active=None if entry.active is None else entry.active.info,
            standbys=tuple(c.info for c in entry.standbys),
        )

    async def on_tunnel_changed(self, tunnel: Tunnel) -> None:
        entry = self._tunnels.get(tunnel.id)
        if entry is None:
            await trio.lowlevel.checkpoint()
            return
        entry.learn(tunnel)
        message = {"type": "config", "selectors": _selectors(tunnel)}
        for connector in entry.connectors():
            await send_within(connector, message)

    async def on_tunnel_ended(self, tunnel: Tunnel, reason: EndReason) -> None:
        entry = self._tunnels.get(tunnel.id)
        if entry is None:
            await trio.lowlevel.checkpoint()
            return
        if reason is EndReason.DELETED and not entry.connectors():  # a quick tunnel's timer
            if entry.cleanup is not None:
                entry.cleanup.cancel()
            self._forget(entry)
        log.info(
            "tunnel %s: %s, closing %d connector(s)", tunnel.name, reason, len(entry.connectors())
        )
        for connector in entry.connectors():
            await self._kick(connector, str(reason), _GO_AWAY[reason], str(reason))

    async def end_organization(self, org_id: str) -> int:
        """Kicks every connector of *org_id*'s tunnels as if each tunnel were deleted (the
        organization's deletion); returns how many tunnels had connectors."""
        entries = [e for e in self._tunnels.values() if e.tunnel.org_id == org_id]
        for entry in entries:
            await self.on_tunnel_ended(entry.tunnel, EndReason.DELETED)
        await trio.lowlevel.checkpoint()
        return len(entries)

    async def open_tunnel_stream(
        self,
        org_id: str,
        tunnel_name: str,
        dest: str,
        instance_id: str,
        *,
        selector_version: int | None = None,
    ) -> trio.abc.Stream:
        """A stream to *dest* ("host:port") through the tunnel's active connector.

        Raises TunnelUnavailable (no such tunnel here, or no active connector) and
        TunnelDialError (the destination is outside the selectors, or the connector's dial
        failed; ``code`` says how). The caller owns the returned stream.
        """
        entry = self._entry(org_id, tunnel_name)
        if entry is None or entry.active is None:
            raise TunnelUnavailable(f"tunnel {tunnel_name!r} is offline")
        try:
            host, port = parse_dest(dest)
        except SelectorError as exc:
            raise TunnelDialError("bad-request", str(exc)) from None
        version = entry.tunnel.selector_version if selector_version is None else selector_version
        if not entry.selectors.admits(version, host, port):
            raise TunnelDialError("forbidden", f"{dest} is outside the tunnel's selectors")
        stream = await self._open(entry)
        try:
            await request_open(
                stream,
                "tunnel-dial",
                dest=dest,
                selector_version=version,
                instance_id=instance_id,
            )
        except OpenError as exc:
            await trio.aclose_forcefully(stream)
            raise TunnelDialError(exc.code, exc.message) from None
        except (trio.BrokenResourceError, RemoteProtocolError) as exc:
            await trio.aclose_forcefully(stream)
            raise TunnelUnavailable(f"tunnel {tunnel_name!r}: the connector link broke") from exc
        except BaseException:
            await trio.aclose_forcefully(stream)
            raise
        return stream

    async def probe(self, org_id: str, tunnel_name: str) -> bool:
        """Whether the tunnel's active connector answers a ``probe`` stream (bound it with
        the caller's cancel scope)."""
        entry = self._entry(org_id, tunnel_name)
        if entry is None or entry.active is None:
            await trio.lowlevel.checkpoint()
            return False
        try:
            stream = await self._open(entry)
        except TunnelUnavailable:
            return False
        try:
            await request_open(stream, "probe")
        except (OpenError, trio.BrokenResourceError, trio.ClosedResourceError):
            return False
        except Exception:
            log.warning("tunnel %s: malformed probe answer", tunnel_name, exc_info=True)
            return False
        finally:
            await trio.aclose_forcefully(stream)
        return True

    async def _open(self, entry: TunnelEntry) -> trio.abc.Stream:
        connector = entry.active
        if connector is None:
            raise TunnelUnavailable(f"tunnel {entry.tunnel.name!r} is offline")
        try:
            return await connector.session.open_stream()
        except (SessionGoneAwayError, trio.BrokenResourceError, trio.ClosedResourceError):
            raise TunnelUnavailable(
                f"tunnel {entry.tunnel.name!r}'s connector is going away"
            ) from None

    def _forget(self, entry: TunnelEntry) -> None:
        tunnel = entry.tunnel
        if self._tunnels.get(tunnel.id) is entry:
            del self._tunnels[tunnel.id]
        key = (tunnel.org_id, tunnel.name)
        if self._by_name.get(key) == tunnel.id:  # not a newer tunnel of the same name
            del self._by_name[key]

    def _entry(self, org_id: str, name: str) -> TunnelEntry | None:
        tunnel_id = self._by_name.get((org_id, name))
        return None if tunnel_id is None else self._tunnels.get(tunnel_id)

    # ---- the link route (`_route.LinkRoute`) ----------------------------------------------

    async def __call__(self, scope: MutableMapping[str, Any], receive: Receive, send: Send) -> None:
        await serve_asgi_link(self, scope, receive, send)

    async def serve_upgrade(self, upgrade: UpgradeRequest) -> None:
        """The route on the raw link port."""
        await serve_upgraded_link(self, upgrade)

    async def authenticate(self, request: LinkRequest) -> Tunnel:
        """The tunnel a tunnel token opens (`Refusal` 401, reason ``token-invalid`` or
        ``token-expired``, so a connector exits with the right code without a session)."""
        try:
            tunnel = await self._directory.authenticate(request.token or "")
        except TokenExpired:
            raise Refusal(401, "token-expired", "the tunnel token expired") from None
        except TokenInvalid:
            raise Refusal(401, "token-invalid", "invalid tunnel token") from None
        entry = self._tunnels.get(tunnel.id)
        if entry is not None and len(entry.connectors()) >= self._max_connectors:
            raise Refusal(
                429,
                "too-many-connectors",
                f"tunnel {tunnel.name!r} already has {self._max_connectors} connectors",
            )
        return tunnel

    async def serve(
        self, tunnel: Tunnel, session: Session, control: ControlChannel, hello: dict[str, Any]
    ) -> None:
        """Attach the connector (active or standby) and serve it until it ends or is kicked."""
        if hello.get("type") != "hello" or hello.get("proto") != PROTO:
            message = f"expected a hello with proto {PROTO}"
            await refuse_hello(session, control, "protocol-unsupported", message)
            return
        connector = Connector(
            info=ConnectorInfo(
                id=str(hello.get("id", ""))[:100],
                hostname=str(hello.get("hostname", ""))[:255],
                version=str(hello.get("version", ""))[:50],
                os=str(hello.get("os", ""))[:50],
                connected_since=self._now(),
            ),
            session=session,
            control=control,
        )
        entry = self._register(tunnel)
        if self.quick_deadlines is not None and tunnel.ephemeral:
            await self.quick_deadlines.attached(tunnel)
        role = await self._attach(entry, connector, replace=bool(hello.get("replace")))
        try:
            await control.send(
                {
                    "type": "registered",
                    **SERVER_VERSION,
                    "role": role,
                    "tunnel": tunnel.name,
                    "ephemeral": tunnel.ephemeral,
                    "selectors": _selectors(entry.tunnel),
                    "token_expires_at": entry.tunnel.token_expires_at.isoformat(),
                    # two links (c23links): the replica set, when the cluster advertises one
                    **({} if self.replica_set is None else self.replica_set.message()),
                }
            )
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._receive_loop, entry, connector, nursery.cancel_scope)
                nursery.start_soon(self._expiry_watch, entry, connector)
                nursery.start_soon(send_replica_updates, self.replica_set, control)  # two links

                async def _ended() -> None:
                    await session.wait_ended()
                    nursery.cancel_scope.cancel()

                async def _kicked() -> None:
                    await connector.kicked.wait()
                    nursery.cancel_scope.cancel()

                nursery.start_soon(_ended)
                nursery.start_soon(_kicked)
        finally:
            self._detach(entry, connector)
        if connector.kicked.is_set():
            with trio.move_on_after(_CLOSE_GRACE, shield=True):
                await session.aclose(session.local_go_away or GoAwayCode.NORMAL)

    def _register(self, tunnel: Tunnel) -> TunnelEntry:
        entry = self._tunnels.get(tunnel.id)
        if entry is None:
            entry = TunnelEntry(tunnel)
            self._tunnels[tunnel.id] = entry
            self._by_name[(tunnel.org_id, tunnel.name)] = tunnel.id
        else:  # the record read at authentication is the newest
            entry.learn(tunnel)
        if entry.cleanup is not None:  # a quick tunnel's connector is back in time
            entry.cleanup.cancel()
            entry.cleanup = None
        return entry

    async def _attach(self, entry: TunnelEntry, connector: Connector, *, replace: bool) -> str:
        old = entry.active
        if old is None:
            # with replicas, only the holder of the tunnel's lock has an active connector;
            # while it is asked, another connector may have become active here
            elected = self.election is None or await self.election.acquire(entry.tunnel.id)
            if elected and entry.active is None:
                entry.active = connector
            else:
                entry.standbys.append(connector)
            if not elected and replace and self.election is not None:  # held elsewhere
                connector.replacing = True
                self._nursery.start_soon(self.election.replace, entry.tunnel.id)
        elif replace:
            entry.active = connector
            log.info("tunnel %s: %r replaces %r", entry.tunnel.name, connector, old)
            await self._kick(
                old, "replaced", GoAwayCode.REPLACED, "another connector replaced this one"
            )
        else:
            entry.standbys.append(connector)
        role = "active" if entry.active is connector else "standby"
        log.info("tunnel %s: %r registered as %s", entry.tunnel.name, connector, role)
        self._active_changed()
        return role

    def _detach(self, entry: TunnelEntry, connector: Connector) -> None:
        if connector in entry.standbys:
            entry.standbys.remove(connector)
        self._step_down(entry, connector)
        how = " (clean stop)" if connector.clean_stop else ""
        log.info("tunnel %s: %r left%s", entry.tunnel.name, connector, how)
        if entry.connectors():
            return
        if not entry.tunnel.ephemeral or connector.kick_code == GoAwayCode.TUNNEL_DELETED:
            self._forget(entry)
        elif self.quick_deadlines is not None:  # replicas: the shared deadline decides
            self._forget(entry)
            if connector.clean_stop:
                self._nursery.start_soon(self.quick_deadlines.stopped, entry.tunnel)
        elif connector.clean_stop:
            self._forget(entry)
            self._nursery.start_soon(self.delete_quick, entry.tunnel)
        else:  # a quick tunnel whose last connector was lost: keep it for quick_grace
            entry.cleanup = trio.CancelScope()
            self._nursery.start_soon(self._quick_timer, entry, entry.cleanup)

    def _step_down(self, entry: TunnelEntry, connector: Connector) -> None:
        """*connector* stops being the active one; the oldest waiting standby takes over."""
        if entry.active is not connector:
            return
        entry.active = None
        waiting = [c for c in entry.standbys if not c.kicked.is_set()]
        if waiting and not self._handing_over(entry):  # replicas: the lock is still held
            self._promote(entry, waiting[0])
        self._active_changed()

    def _handing_over(self, entry: TunnelEntry) -> bool:
        return entry.handing_over_until > trio.current_time()

    def _promote(self, entry: TunnelEntry, promoted: Connector) -> None:
        entry.standbys.remove(promoted)
        entry.active = promoted
        log.info("tunnel %s: %r promoted to active", entry.tunnel.name, promoted)
        self._nursery.start_soon(send_within, promoted, {"type": "promote"})

    async def drain(self) -> None:
        """This server drains: every connector is told to link again (``drain``,
        docs/protocol.md 7); each send bounded, a dead link skipped."""
        async with trio.open_nursery() as nursery:
            for entry in list(self._tunnels.values()):
                for connector in entry.connectors():
                    nursery.start_soon(send_within, connector, {"type": "drain"})

    async def _kick(self, connector: Connector, code: str, go_away: int, message: str) -> None:
        """A permanent end: ``error``, GO_AWAY, then the link's task closes the session.
        ``kicked`` is set last: the caller may be a task of that link (the expiry watch),
        which the event cancels."""
        connector.kick_code = go_away
        with trio.move_on_after(_CLOSE_GRACE):
            await send_quietly(
                connector,
                {"type": "error", "code": code, "message": message, "permanent": True},
            )
        connector.session.go_away_nowait(go_away)
        connector.kicked.set()

    async def _receive_loop(
        self, entry: TunnelEntry, connector: Connector, done: trio.CancelScope
    ) -> None:
        try:
            while True:
                message = await connector.control.receive()
                kind = message.get("type")
                if kind == "shutdown":  # a drain: route nothing new here, promote a standby now
                    connector.clean_stop = True
                    log.info("%r: draining (%s)", connector, message.get("reason"))
                    self._step_down(entry, connector)
                    if connector in entry.standbys:
                        entry.standbys.remove(connector)
                else:
                    log.warning("%r: unknown control message %r", connector, kind)
        except (trio.EndOfChannel, trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        if connector.session.remote_go_away == GoAwayCode.CONNECTOR_CLEAN_STOP:
            connector.clean_stop = True
        done.cancel()

    async def _expiry_watch(self, entry: TunnelEntry, connector: Connector) -> None:
        """Daily warnings from EXPIRY_WARNING before expiry; at expiry, the end."""
        while True:
            expires = entry.tunnel.token_expires_at
            left = (expires - self._now()).total_seconds()
            if left <= 0:
                await self._kick(
                    connector,
                    str(EndReason.EXPIRED),
                    GoAwayCode.TOKEN_EXPIRED,
                    "the tunnel token expired",
                )
                return
            if left <= EXPIRY_WARNING.total_seconds():
                await send_quietly(
                    connector, {"type": "token_expiry_warning", "expires_at": expires.isoformat()}
                )
                await trio.sleep(min(_DAY, left))
            else:
                await trio.sleep(min(_DAY, left - EXPIRY_WARNING.total_seconds()))

    async def _quick_timer(self, entry: TunnelEntry, scope: trio.CancelScope) -> None:
        with scope:
            await trio.sleep(self.quick_grace)
            if entry.connectors() or self._tunnels.get(entry.tunnel.id) is not entry:
                return
            self._forget(entry)
            log.info(
                "quick tunnel %s: no connector for %.0f s, deleting it",
                entry.tunnel.name,
                self.quick_grace,
            )
            await self.delete_quick(entry.tunnel)

    async def delete_quick(self, tunnel: Tunnel) -> bool:
        """Delete the quick *tunnel* (if it still is that one); whether it was deleted."""
        try:
            if await self._directory.delete_ephemeral(tunnel):
                log.info("quick tunnel %s deleted", tunnel.name)
                return True
        except Exception:
            log.exception("quick tunnel %s: deleting it failed", tunnel.name)
        return False


def _selectors(tunnel: Tunnel) -> dict[str, Any]:
    return {"version": tunnel.selector_version, "items": list(tunnel.selectors)}


@asynccontextmanager
async def open_connector_hub(
    directory: TunnelDirectory,
    *,
    quick_grace: float = DEFAULT_QUICK_GRACE,
    max_connectors: int = DEFAULT_MAX_CONNECTORS,
) -> AsyncIterator[ConnectorHub]:
    """The hub for the duration of the block (its quick-tunnel timers end with it)."""
    async with trio.open_nursery() as nursery:
        yield ConnectorHub(
            directory, nursery, quick_grace=quick_grace, max_connectors=max_connectors
        )
        nursery.cancel_scope.cancel()
