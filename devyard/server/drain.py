"""Several replicas: this replica's id, its link counts, and the drain a SIGTERM starts.

Theory of operation
-------------------
Every server process is a *replica* with an id (``replica_id``: the ``--replica-id`` flag or
``DEVYARD_REPLICA_ID``, else one made once and kept in ``DATA_DIR/replica-id``, so a restart
keeps it). Logs, ``/metrics`` and ``/readyz`` carry it.

`Drain` is one replica's state. serve.py wraps every link route (host, connector, and later
peer links), on both transports, and the instance gateway in it (`Drain.guard_asgi`,
`Drain.guard_raw`): while serving, a wrapped route only counts its connections by kind (what
``/readyz`` and the ``devyard_links`` gauge report); once draining, it refuses new ones with
503 ``draining`` and ``Retry-After``. The API's own requests are refused the same way by the
health blueprint's hook (api/routes/health.py), and ``/readyz`` answers 503 ``draining`` so a
load balancer stops sending requests here.

The first SIGINT/SIGTERM does not stop the API at once any more: `Drain.after` is the API's
shutdown trigger. It waits for the signal, then (1) refuses everything new, (2) sends
``{"type": "drain"}`` on every host and connector link (`Edge.drain`, `ConnectorHub.drain`):
they dial again through the same URL at once, which behind a load balancer lands on another
replica (this one refuses), keep their old link here until the streams on it end, then close
it, (3) waits until every link here is closed, at most ``drain_timeout`` seconds, and returns:
then the API's graceful shutdown (``shutdown_grace``) ends the requests still in flight. A
second signal cancels everything at once (`devyard._process.run_until_signalled`).
"""

from __future__ import annotations

import json
import logging
import math
import secrets
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator, MutableMapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Final

import trio

from ..core import UpgradeRequest
from . import metrics
from .config import ServerConfig
from .edge.asgi import error_headers, reject_websocket, send_http

log = logging.getLogger(__name__)

__all__ = [
    "CURRENT",
    "MOVING_KINDS",
    "REPLICA_ID_FILE",
    "Drain",
    "ensure_replica_id",
    "with_replica_id",
]

#: Where a replica keeps the id it made for itself (when none is configured).
REPLICA_ID_FILE: Final = "replica-id"
#: The links a drain waits for: hosts and connectors move elsewhere and close their old link
#: here once its streams end. Other replicas' peer links are not waited for: a peer keeps its
#: link open while idle (edge/peers.py), and the streams a peer forwards here ride on a host's
#: or connector's link here, which the drain waits for; peer links end with the process.
MOVING_KINDS: Final = ("host", "connector")
#: The ``Retry-After`` of a refusal while draining: go elsewhere, now.
RETRY_AFTER: Final = 1.0
#: The drain of the server this task serves (set by serve.py for the API's tasks).
CURRENT: ContextVar[Drain | None] = ContextVar("devyard_drain", default=None)

_Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
_Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
#: An ASGI callable, typed loosely (as api.serve.RawASGI).
RawASGI = Callable[[Any, Any, Any], Awaitable[None]]
#: A route of the raw link port (as edge.rawlinks.RawRoute).
RawRoute = Callable[[UpgradeRequest], Awaitable[None]]


def ensure_replica_id(config: ServerConfig) -> str:
    """*config*'s replica id, else the one kept in its data dir, made there on first use
    (blocking: run it in a thread). ``r-`` and 12 hex digits."""
    if config.replica_id is not None:
        return config.replica_id
    path: Path = config.data_dir / REPLICA_ID_FILE
    try:
        kept = path.read_text(encoding="ascii").strip()
    except FileNotFoundError:
        kept = ""
    if kept:
        return kept
    made = f"r-{secrets.token_hex(6)}"
    config.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.write_text(made + "\n", encoding="ascii")
    return made


async def with_replica_id(config: ServerConfig) -> ServerConfig:
    """*config* with ``replica_id`` set (`ensure_replica_id`), in ``[peers]`` too: what
    serve.py passes on."""
    import attrs  # noqa: PLC0415 - attrs is loaded anyway; keeps this module's imports short

    peers = config.peers
    if config.replica_id is None and peers is not None and peers.replica_id:
        config = attrs.evolve(config, replica_id=peers.replica_id)  # the older spelling
    replica_id = await trio.to_thread.run_sync(ensure_replica_id, config)
    if peers is not None:  # peer links name the replica as the cluster's rows do
        peers = attrs.evolve(peers, replica_id=replica_id)
    return attrs.evolve(config, replica_id=replica_id, peers=peers)


def _refusal() -> tuple[bytes, list[tuple[bytes, bytes]]]:
    body = json.dumps(
        {
            "message": "this server is draining: retry, another replica will answer",
            "reason": "draining",
        }
    ).encode()
    headers = error_headers(503, body)
    headers.append((b"retry-after", str(math.ceil(RETRY_AFTER)).encode()))
    return body, headers


class Drain:
    """One replica's drain state and its link counts (by kind: host, connector, peer)."""

    def __init__(self, replica_id: str, timeout: float) -> None:
        self.replica_id = replica_id
        self.timeout = timeout
        self.draining = False
        self.started_at: float | None = None
        self._links: Counter[str] = Counter()
        self._changed = trio.Event()
        metrics.REPLICA_INFO.labels(replica_id).set(1)

    def __repr__(self) -> str:
        return f"Drain({self.replica_id!r}, draining={self.draining}, links={dict(self._links)})"

    def link_counts(self) -> dict[str, int]:
        """Open connections on each guarded link route, by kind."""
        return {kind: count for kind, count in sorted(self._links.items()) if count}

    @property
    def links(self) -> int:
        return sum(self._links.values())

    @property
    def moving(self) -> int:
        """Open links that must move before the drain ends (`MOVING_KINDS`)."""
        return sum(self._links[kind] for kind in MOVING_KINDS)

    @contextmanager
    def _counted(self, kind: str) -> Iterator[None]:
        self._links[kind] += 1
        try:
            yield
        finally:
            self._links[kind] -= 1
            self._changed.set()
            self._changed = trio.Event()

    # ---- the guards -----------------------------------------------------------------------

    def guard_asgi(self, kind: str | None, app: RawASGI) -> RawASGI:
        """*app* (an ASGI route on the API port) refused with 503 ``draining`` while draining;
        its connections counted as links of *kind* (None: not a link route)."""

        async def guarded(scope: MutableMapping[str, Any], receive: _Receive, send: _Send) -> None:
            if self.draining:
                await _refuse_asgi(scope, receive, send)
                return
            if kind is None:
                await app(scope, receive, send)
                return
            with self._counted(kind):
                await app(scope, receive, send)

        return guarded

    def guard_raw(self, kind: str | None, route: RawRoute) -> RawRoute:
        """`guard_asgi` for a route of the raw link port."""

        async def guarded(upgrade: UpgradeRequest) -> None:
            if self.draining:
                body, headers = _refusal()
                await upgrade.reject(
                    503, body, [(k, v) for k, v in headers if k != b"content-length"]
                )
                return
            if kind is None:
                await route(upgrade)
                return
            with self._counted(kind):
                await route(upgrade)

        return guarded

    # ---- the drain ------------------------------------------------------------------------

    def begin(self) -> None:
        """Refuse everything new from now on (readiness answers 503 ``draining``)."""
        if not self.draining:
            self.draining = True
            self.started_at = trio.current_time()
            metrics.DRAINING.set(1)

    async def wait_unlinked(self) -> None:
        """Until no host or connector link is open (bound it with a cancel scope)."""
        while self.moving:
            await self._changed.wait()

    async def run(self, movers: Sequence[Callable[[], Awaitable[None]]]) -> None:
        """`begin`, tell every link to move (*movers*: `Edge.drain`, `ConnectorHub.drain`),
        then wait for the links to close, at most ``timeout`` seconds."""
        self.begin()
        log.info(
            "replica %s draining: %s link(s) told to move, %.0f s for them to go",
            self.replica_id,
            self.link_counts() or "no",
            self.timeout,
        )
        with trio.move_on_after(self.timeout) as bounded:
            async with trio.open_nursery() as nursery:
                for mover in movers:
                    nursery.start_soon(mover)
            await self.wait_unlinked()
        took = trio.current_time() - (self.started_at or trio.current_time())
        if bounded.cancelled_caught:
            log.warning(
                "replica %s: drain timeout (%.0f s) with links still open: %s; closing them",
                self.replica_id,
                self.timeout,
                self.link_counts(),
            )
        else:
            log.info("replica %s drained in %.2f s", self.replica_id, took)

    async def after(
        self,
        trigger: Callable[[], Awaitable[None]],
        movers: Sequence[Callable[[], Awaitable[None]]],
    ) -> None:
        """The API's shutdown trigger: *trigger* (the first signal), then `run`."""
        await trigger()
        await self.run(movers)


async def _refuse_asgi(scope: MutableMapping[str, Any], receive: _Receive, send: _Send) -> None:
    body, headers = _refusal()
    if scope.get("type") == "websocket":
        if (await receive()).get("type") != "websocket.connect":
            return
        # reject_websocket builds its own headers: send ours (Retry-After) when it can
        if "websocket.http.response" in scope.get("extensions", {}):
            await send({"type": "websocket.http.response.start", "status": 503, "headers": headers})
            await send({"type": "websocket.http.response.body", "body": body})
        else:
            await reject_websocket(scope, send, 503, "draining", "draining")
        return
    if scope.get("type") == "http":
        await send_http(send, 503, body, headers)
