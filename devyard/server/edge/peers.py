"""Replica-to-replica links: server replicas link to each other as hosts link to them.

Theory of operation (docs/replicas.md, docs/protocol.md 11). A replica that must reach a host
or connector linked to another replica dials that replica's ``/v1/replica-link`` route (the
WebSocket on its API port, or the raw link port) and keeps that one link for every later need:
`PeerPool` dials lazily on first use, reuses the link, and redials with the links' backoff when
it breaks while a need waits for it; a link lost while nobody waits is not redialled (a drained
or killed replica would be dialled forever): it is forgotten, and the next need dials again.
The link is a mux session like a host's: the dialer opens the control stream with a
``hello {role: "replica", id}``, the acceptor answers ``registered {replica_id}``, and then the
dialer opens data streams whose open request is ``forward`` (served by `PeerLinks`, which hands
them to a `ForwardHandler`; devyard.server.edge.forward). Streams run one way only: the acceptor
never opens any, and the dialer refuses whatever it is offered.

Authentication: every replica holds the same cluster secret (`PeerConfig.cluster_secret`). The
dialer's bearer token is ``dyr.<replica id>.<HMAC-SHA256(secret, replica id) hex>``; the acceptor
recomputes the HMAC for the id the token names and compares in constant time, so the token both
proves the secret and names the dialer, and the secret itself never travels. Neither the secret
nor a token is ever logged (`PeerConfig`'s repr hides the secret).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from contextlib import asynccontextmanager
from typing import Any, Final

import attrs
import trio

from ... import __version__
from ...core import (
    Backoff,
    ControlChannel,
    MuxStream,
    RemoteProtocolError,
    Session,
    SessionBrokenError,
    SessionGoneAwayError,
    UpgradeRequest,
    read_open,
    reject_open,
)
from ...core.link import PROTO, LinkLost, LinkRefused, run_link
from ...core.transports import link_url
from ...core.versions import SERVER_VERSION
from ._route import LinkRequest, Refusal, refuse_hello, serve_asgi_link, serve_upgraded_link
from .asgi_stream import Receive, Send
from .forward_metrics import PEER_LINK_DIALS, PEER_LINK_LOSSES, PEER_LINKS

log = logging.getLogger(__name__)

__all__ = [
    "PEER_PATH",
    "ForwardHandler",
    "PeerConfig",
    "PeerLinks",
    "PeerPool",
    "PeerUnavailable",
    "open_peer_pool",
    "peer_token",
    "verify_peer_token",
]

#: The route replicas link to each other on (WebSocket on the API port, or the raw link port).
PEER_PATH: Final = "/v1/replica-link"
_TOKEN_PREFIX: Final = "dyr"  # noqa: S105 - a prefix, not a secret
_MAC_CONTEXT: Final = b"devyard replica link v1\0"
_OPEN_TIMEOUT: Final = 10.0  # reading a forward request
_MAX_REPLICA_ID: Final = 200


@attrs.frozen
class PeerConfig:
    """A replica's settings for links to its peers (`ServerConfig.peers`).

    *replica_id* (the server's ``replica_id``) names this replica in its hello (and the
    holder registry compares it with a holder's); *cluster_secret* is shared by every
    replica of the cluster and never shown.
    *dial_timeout* bounds how long a first need waits for a link to come up."""

    cluster_secret: str = attrs.field(repr=False, validator=attrs.validators.min_len(16))
    # "" until serve.py fills in the server's ``replica_id`` (drain.with_replica_id)
    replica_id: str = ""
    dial_timeout: float = attrs.field(default=10.0, validator=attrs.validators.gt(0))
    backoff_base: float = attrs.field(default=0.5, validator=attrs.validators.gt(0))


def _mac(secret: str, replica_id: str) -> str:
    return hmac.new(secret.encode(), _MAC_CONTEXT + replica_id.encode(), hashlib.sha256).hexdigest()


def peer_token(secret: str, replica_id: str) -> str:
    """The bearer token *replica_id* dials its peers with."""
    return f"{_TOKEN_PREFIX}.{replica_id}.{_mac(secret, replica_id)}"


def verify_peer_token(secret: str, token: str) -> str | None:
    """The replica id *token* names, if it was made with *secret* (constant-time), else None."""
    prefix, _, rest = token.partition(".")
    replica_id, _, mac = rest.rpartition(".")
    if prefix != _TOKEN_PREFIX or not replica_id or len(replica_id) > _MAX_REPLICA_ID:
        return None
    if not hmac.compare_digest(mac.encode(), _mac(secret, replica_id).encode()):
        return None
    return replica_id


class PeerUnavailable(Exception):
    """No link to that peer now: it refused us, it cannot be reached, or its link broke."""


#: What serves one ``forward`` stream a peer opened (its request read, not yet answered); it
#: answers the request and owns the stream until it returns (the caller closes it then).
ForwardHandler = Callable[[str, MuxStream, dict[str, Any]], Awaitable[None]]


class PeerLinks:
    """The acceptor's side: the ``/v1/replica-link`` route (a `_route.LinkRoute`)."""

    def __init__(self, config: PeerConfig, handler: ForwardHandler) -> None:
        self._config = config
        self._handler = handler
        self.linked: dict[str, int] = {}  # peer replica id -> links from it now (readiness)

    def __repr__(self) -> str:
        return f"PeerLinks(replica={self._config.replica_id!r}, peers={sorted(self.linked)})"

    async def __call__(self, scope: MutableMapping[str, Any], receive: Receive, send: Send) -> None:
        await serve_asgi_link(self, scope, receive, send)

    async def serve_upgrade(self, upgrade: UpgradeRequest) -> None:
        """The route on the raw link port."""
        await serve_upgraded_link(self, upgrade)

    async def authenticate(self, request: LinkRequest) -> str:
        await trio.lowlevel.checkpoint()
        replica_id = None
        if request.token:
            replica_id = verify_peer_token(self._config.cluster_secret, request.token)
        if replica_id is None:
            raise Refusal(401, "unauthorized", "invalid replica token")
        return replica_id

    async def serve(
        self, peer_id: str, session: Session, control: ControlChannel, hello: dict[str, Any]
    ) -> None:
        if hello.get("type") != "hello" or hello.get("role") != "replica":
            await refuse_hello(session, control, "bad-hello", "expected a replica hello")
            return
        if hello.get("proto") != PROTO:
            await refuse_hello(session, control, "protocol-unsupported", "unknown proto")
            return
        if hello.get("id") != peer_id:
            await refuse_hello(session, control, "bad-hello", "the hello names another replica")
            return
        await control.send(
            {"type": "registered", "replica_id": self._config.replica_id, **SERVER_VERSION}
        )
        self.linked[peer_id] = self.linked.get(peer_id, 0) + 1
        log.info("replica %s linked", peer_id)
        try:
            with PEER_LINKS.labels("in").track_inprogress():
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._accept, peer_id, session)
                    await _drain_control(control)
                    nursery.cancel_scope.cancel()
        finally:
            self.linked[peer_id] -= 1
            if not self.linked[peer_id]:
                del self.linked[peer_id]
            log.info("replica %s: link ended", peer_id)

    async def _accept(self, peer_id: str, session: Session) -> None:
        async with trio.open_nursery() as nursery:
            while True:
                try:
                    stream = await session.accept_stream()
                except (trio.EndOfChannel, SessionBrokenError):
                    return
                nursery.start_soon(self._serve_stream, peer_id, stream)

    async def _serve_stream(self, peer_id: str, stream: MuxStream) -> None:
        try:
            with trio.fail_after(_OPEN_TIMEOUT):
                request = await read_open(stream)
            if request["kind"] != "forward":
                kind = request["kind"]
                await reject_open(stream, "bad-request", f"peers open forward, not {kind!r}")
                return
            await self._handler(peer_id, stream, request)
        except (trio.TooSlowError, RemoteProtocolError, trio.BrokenResourceError) as exc:
            log.info("replica %s: a stream it opened failed: %r", peer_id, exc)
        except Exception:  # a bug: it ends this stream, never the link and its other streams
            log.exception("replica %s: a forwarded stream failed", peer_id)
        finally:
            await trio.aclose_forcefully(stream)


async def _drain_control(control: ControlChannel) -> None:
    """Until the control stream ends (replicas send nothing on it after the handshake but an
    eventual ``shutdown``)."""
    try:
        while True:
            message = await control.receive()
            if message.get("type") == "shutdown":
                log.info("peer replica shutting down (%s)", message.get("reason"))
    except trio.EndOfChannel:
        return


@attrs.define(eq=False)
class _Peer:
    url: str
    session: Session | None = None
    error: str | None = None  # why the last attempt failed, while no session is up
    refused: bool = False
    changed: trio.Event = attrs.field(factory=trio.Event)
    scope: trio.CancelScope = attrs.field(factory=trio.CancelScope)
    waiting: int = 0  # needs waiting for the link to come up
    stop: trio.Event = attrs.field(factory=trio.Event)  # no redial: nobody needs the link

    def pulse(self) -> None:
        self.changed.set()
        self.changed = trio.Event()


class PeerPool:
    """The dialer's side: one link per peer URL, dialled on first need, reused, redialled."""

    def __init__(
        self, config: PeerConfig, nursery: trio.Nursery, *, ssl_context: ssl.SSLContext | None
    ) -> None:
        self._config = config
        self._nursery = nursery
        self._ssl_context = ssl_context
        self._peers: dict[str, _Peer] = {}

    def __repr__(self) -> str:
        return f"PeerPool(replica={self._config.replica_id!r}, peers={sorted(self._peers)})"

    @property
    def replica_id(self) -> str:
        return self._config.replica_id

    def linked(self) -> list[str]:
        """The peer URLs with a link up now."""
        return sorted(url for url, peer in self._peers.items() if peer.session is not None)

    def held(self) -> list[str]:
        """The peer URLs with a link up or being dialled now."""
        return sorted(self._peers)

    async def open_stream(self, peer_url: str) -> MuxStream:
        """A new stream on the link to *peer_url* (its base URL: ``http(s)://`` of its API
        port, or ``tcp://``/``tls://`` of its raw link port). Raises `PeerUnavailable`."""
        peer = self._peers.get(peer_url)
        if peer is not None and peer.session is None and peer.error is not None:
            # its last attempt failed and it backs off: a need does not wait out the backoff
            # (a killed replica's holder rows outlive it until its lease runs out; the caller
            # answers "unavailable" at once and its next try looks the holder up again)
            await trio.lowlevel.checkpoint()
            raise PeerUnavailable(f"replica at {peer_url}: {peer.error}")
        if peer is None:
            peer = self._peers[peer_url] = _Peer(peer_url)
            self._nursery.start_soon(self._hold, peer)
        peer.waiting += 1
        try:
            with trio.move_on_after(self._config.dial_timeout):
                while peer.session is None and not peer.refused:
                    waiting = peer.changed
                    await waiting.wait()
                    if peer.session is None and peer.error is not None:
                        break  # an attempt made while we waited failed: no waiting out the backoff
        finally:
            peer.waiting -= 1
        session = peer.session
        if session is None:
            raise PeerUnavailable(f"replica at {peer_url}: {peer.error or 'no link in time'}")
        try:
            return await session.open_stream()
        except (SessionBrokenError, SessionGoneAwayError, trio.ClosedResourceError) as exc:
            raise PeerUnavailable(f"replica at {peer_url}: its link is going away") from exc

    async def _hold(self, peer: _Peer) -> None:
        url = link_url(peer.url, PEER_PATH)
        token = peer_token(self._config.cluster_secret, self._config.replica_id)

        def hello() -> dict[str, Any]:
            return {
                "type": "hello",
                "proto": PROTO,
                "role": "replica",
                "id": self._config.replica_id,
                "version": __version__,
            }

        was_up = False  # the current attempt registered (a loss, not a failed dial)

        async def registered(
            session: Session, control: ControlChannel, reply: dict[str, Any]
        ) -> None:
            nonlocal was_up
            peer.session, peer.error, was_up = session, None, True
            peer.pulse()
            PEER_LINK_DIALS.labels("ok").inc()
            log.info("linked to replica %s at %s", reply.get("replica_id"), peer.url)
            try:
                with PEER_LINKS.labels("out").track_inprogress():
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(_refuse_streams, session)
                        await _drain_control(control)
                        nursery.cancel_scope.cancel()
            finally:
                peer.session = None
            raise LinkLost("the peer closed the control stream")

        def lost(exc: BaseException) -> None:  # not at shutdown: run_link's own cancellation
            nonlocal was_up
            if was_up:
                PEER_LINK_LOSSES.inc()
            else:
                PEER_LINK_DIALS.labels("failed").inc()
            was_up = False
            peer.error = f"link lost: {type(exc).__name__}"
            if not peer.waiting:  # a drained or killed peer is not redialled forever: the
                peer.stop.set()  # next need dials again (`_hold` forgets this one)
            peer.pulse()

        try:
            with peer.scope:
                await run_link(
                    url,
                    token,
                    hello,
                    registered,
                    backoff=Backoff(base=self._config.backoff_base),
                    shutdown=peer.stop,
                    label=lambda: f"replica link to {peer.url}: ",
                    on_lost=lost,
                    ssl_context=self._ssl_context,
                )
        except LinkRefused as exc:
            PEER_LINK_DIALS.labels("refused").inc()
            log.error("replica at %s refused our link: %s", peer.url, exc.code)
            peer.error, peer.refused = f"refused ({exc.code})", True
        finally:
            peer.session = None
            if self._peers.get(peer.url) is peer:  # the next need dials again
                del self._peers[peer.url]
            peer.pulse()


async def _refuse_streams(session: Session) -> None:
    """The acceptor never opens streams on a replica link: close whatever it offers."""
    while True:
        try:
            stream = await session.accept_stream()
        except (trio.EndOfChannel, SessionBrokenError):
            return
        await trio.aclose_forcefully(stream)


@asynccontextmanager
async def open_peer_pool(
    config: PeerConfig, *, ssl_context: ssl.SSLContext | None = None
) -> AsyncIterator[PeerPool]:
    """A `PeerPool` whose links last as long as the block."""
    async with trio.open_nursery() as nursery:
        yield PeerPool(config, nursery, ssl_context=ssl_context)
        nursery.cancel_scope.cancel()
