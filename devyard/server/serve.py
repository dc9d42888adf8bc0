"""The server's processes: ``devyard server``, ``devyard up`` and ``devyard admin bootstrap``.

``serve_server`` is the server as a trio task: it opens the store the config names, serves the
control API until cancelled or until ``shutdown_trigger`` returns, and closes the store.
``run_server`` and ``run_admin_bootstrap`` are the CLI's trio mains: they add signals (the
first SIGINT or SIGTERM starts a graceful shutdown of ``config.shutdown_grace`` seconds, a
second one stops at once), the first-start bootstrap of ``up``, and what a person reads.

The admin key is printed to the terminal (stdout) exactly once, by the start that created it;
it is never logged.
"""

from __future__ import annotations

import logging
import signal
import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from functools import partial
from typing import TYPE_CHECKING, TextIO
from urllib.parse import urlsplit

import attrs
import trio

from .._process import EXIT_INTERRUPTED, LOG_FIELDS, Stopped, run_until_signalled
from ..core.link import CONNECTOR_PATH, HOST_PATH
from ..core.transports import is_loopback_host
from .blobs.service import AssetBlobs
from .blobs.settings import open_asset_blobs, sibling_store
from .bootstrap import FirstStart, bootstrap_organization, first_start
from .build_cache import NAMESPACE as BUILD_CACHE_NAMESPACE
from .build_cache import BuildCacheService
from .builds import BUILD_LOGS_DIR, BuildLogs
from .cluster.serve import cluster_holders, clustered, run_cluster, wire_service
from .cluster.tokens import open_host_tokens
from .config import ServerConfig
from .drain import CURRENT, Drain, with_replica_id
from .edge import DEFAULT_HOST_GRACE, open_edge
from .edge.connectors import DEFAULT_QUICK_GRACE, ConnectorHub, open_connector_hub
from .edge.forward import Forwarding, HolderLookup, open_forwarding
from .edge.gateway import INSTANCES_PREFIX, InstanceGateway
from .edge.links import Edge
from .edge.rawlinks import RawRoute, open_raw_listeners, serve_raw_links
from .edge.tokens import RECHECK_INTERVAL, drop_revoked_hosts
from .hosts import EVENT_BUFFER, Activity, HostEvent
from .metrics import serve_metrics
from .store import Store, open_store
from .store.build_cache import SqlBuildCache
from .store.build_logs import SqlBuildLogs
from .tls import LocalCertificates, ServerTLS, ensure_local_ca

if TYPE_CHECKING:
    from .api.serve import BoundServer, RawASGI

log = logging.getLogger(__name__)

__all__ = [
    "open_configured_store",
    "run_admin_bootstrap",
    "run_server",
    "serve_server",
    "store_target",
]


def local_tls_names(config: ServerConfig) -> tuple[str, ...]:
    """The names ``tls_self_signed``'s certificate is for: localhost, the loopback addresses,
    the listen address (or, on a wildcard, this machine's name) and the public URL's host."""
    names = ["localhost", "127.0.0.1", "::1"]
    host = config.listen.host
    extra = [socket.gethostname()] if host in ("", "0.0.0.0", "::") else [host]  # noqa: S104
    if config.public_url is not None:
        extra.append(urlsplit(config.public_url).hostname or "")
    names += [n for n in extra if n and n not in names]
    return tuple(names)


def load_server_tls(config: ServerConfig) -> tuple[ServerTLS | None, LocalCertificates | None]:
    """The API port's TLS of *config* (blocking: files are read, and made for
    ``tls_self_signed``): the context, and the local CA's files when devyard made them."""
    if config.tls_self_signed:
        local = ensure_local_ca(config.tls_dir, local_tls_names(config))
        return ServerTLS.load(local.cert, local.key), local
    if config.tls_cert is not None and config.tls_key is not None:
        return ServerTLS.load(config.tls_cert, config.tls_key), None
    return None, None


async def reload_tls_on_sighup(tls: ServerTLS) -> None:
    """Reload *tls*'s files at every SIGHUP, until cancelled (main thread only)."""
    with trio.open_signal_receiver(signal.SIGHUP) as signals:
        async for _ in signals:
            await trio.to_thread.run_sync(tls.reload)


def store_target(config: ServerConfig) -> str:
    """What ``open_store`` opens: the PostgreSQL URL, else the SQLite file in ``data_dir``."""
    return config.database_url or str(config.sqlite_path)


def _make_data_dir(config: ServerConfig) -> None:
    """The data dir, 0700 even when it existed with looser bits: it holds the SQLite file, the
    blobs, the asset signing key, host token hashes and the admin key, none of them for other
    local users (what is inside then needs no bits of its own)."""
    config.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    config.data_dir.chmod(0o700)


@asynccontextmanager
async def open_configured_store(config: ServerConfig) -> AsyncIterator[Store]:
    """The store of *config*, migrated; the data directory is created, and made 0700."""
    await trio.to_thread.run_sync(_make_data_dir, config)
    async with open_store(store_target(config)) as store:
        yield store


async def serve_server(
    config: ServerConfig,
    *,
    shutdown_trigger: Callable[[], Awaitable[None]] | None = None,
    host_events: trio.MemorySendChannel[HostEvent] | None = None,
    host_grace: float = DEFAULT_HOST_GRACE,
    quick_grace: float = DEFAULT_QUICK_GRACE,
    host_token_recheck: float = RECHECK_INTERVAL,
    holders: HolderLookup | None = None,
    task_status: trio.TaskStatus[BoundServer] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Open the store and serve the control API and the edge's host and connector links.

    ``task_status`` gets the ``BoundServer`` (its ``hosts`` is the edge's `HostRegistry`).
    *host_events*, for tests of the edge alone: what hosts report goes there instead of to
    the instances service.
    """
    tls, _ = await trio.to_thread.run_sync(load_server_tls, config)
    async with open_configured_store(config) as store:
        await _serve(
            store,
            config,
            shutdown_trigger,
            tls=tls,
            host_events=host_events,
            host_grace=host_grace,
            quick_grace=quick_grace,
            host_token_recheck=host_token_recheck,
            holders=holders,
            task_status=task_status,
        )


async def _serve(
    store: Store,
    config: ServerConfig,
    shutdown_trigger: Callable[[], Awaitable[None]] | None,
    *,
    host_events: trio.MemorySendChannel[HostEvent] | None = None,
    host_grace: float = DEFAULT_HOST_GRACE,
    quick_grace: float = DEFAULT_QUICK_GRACE,
    host_token_recheck: float = RECHECK_INTERVAL,
    tls: ServerTLS | None = None,
    holders: HolderLookup | None = None,  # who holds which link (replicas, docs/replicas.md)
    drains: bool = True,
    task_status: trio.TaskStatus[BoundServer] = trio.TASK_STATUS_IGNORED,
) -> None:
    """The API and the edge over an open store, on one port, built top-down: the connector
    hub, the edge (publishing host events), the services (consuming them), the API. With
    *drains*, the shutdown trigger starts a drain first (drain.py; not ``devyard up``, whose
    host daemon stops with it)."""
    from .api.app import api_state  # noqa: PLC0415 - the web stack loads only to serve
    from .api.serve import serve_api  # noqa: PLC0415 - the web stack loads only to serve
    from .deletion import OrganizationDeletion  # noqa: PLC0415
    from .instances import InstanceService, StoreInstanceDirectory  # noqa: PLC0415
    from .mcp import McpService, StoreAssets  # noqa: PLC0415 - the mcp SDK loads only to serve
    from .tunnels import StoreTunnelDirectory, TunnelService  # noqa: PLC0415

    config, drain = await _replica(config)
    activity = Activity()
    directory = StoreInstanceDirectory(store, activity)
    send_events, receive_events = _host_events(host_events)
    # Hosts the store has live instances on: each gets the host-lost grace until it links.
    expected = {i.host_id for i in await store.list_live_instances() if i.host_id is not None}
    timers = () if clustered(config) else expected  # a cluster keeps host leases instead
    holders = holders or cluster_holders(config)  # who holds which link, for forwarding
    async with (
        open_asset_blobs(  # the [blobs] backend (docs/blobs.md)
            store,
            config.blobs,
            data_dir=config.data_dir,
            database_url=config.database_url,
            orphan_grace=config.blob_orphan_grace,
            sweep_interval=config.blob_sweep_interval,
        ) as assets,
        open_forwarding(config.peers, holders, store) as forwarding,
        open_host_tokens(config) as tokens,  # clustered: shared in the database
        open_connector_hub(
            StoreTunnelDirectory(store),
            quick_grace=quick_grace,
            max_connectors=config.max_connectors_per_tunnel,
        ) as connectors,
        open_edge(
            tokens,
            send_events,
            directory,
            forwarding.tunnels(connectors),  # replicas: egress into tunnels held elsewhere
            grace=host_grace,
            expected=timers,
        ) as edge,
        trio.open_nursery() as nursery,
    ):
        parts = await nursery.start(  # the edge and hub themselves unless [cluster]
            partial(
                run_cluster,
                *(config, store, edge, connectors, send_events, expected, host_grace),
                holders=holders,
            )
        )
        tunnel_service = TunnelService(store, parts.tunnels)
        service = InstanceService(
            store,
            parts.registry,
            events=receive_events,
            tunnels=parts.tunnels,
            activity=activity,
            regions=config.regions,
            home_region=config.region,
        )
        wire_service(parts.registry, service)
        await nursery.start(service.run)
        nursery.start_soon(
            partial(
                drop_revoked_hosts,
                tokens,
                lambda: [h.id for h in edge.hosts()],
                edge.drop,
                interval=host_token_recheck,
            )
        )
        links = _link_routes(drain, edge, connectors, forwarding)
        link_port = None
        raw_link = None
        listeners = None
        if config.link_listen is not None:
            listeners, link_port = await open_raw_listeners(
                config.link_listen.host, config.link_listen.port, ssl_context=_link_tls(config)
            )
            raw_link = advertised_raw_link(config, link_port)
        state = api_state(
            store,
            config,
            instances=service,
            tunnels=tunnel_service,
            hosts=edge,
            connectors=connectors,
            assets=assets,
        )
        edge.build_logs = _build_logs(store, config, state.assets)  # docs/builds.md
        if edge.build_logs is not None:  # organizations' deleted build logs leave the disk
            nursery.start_soon(edge.build_logs.run_sweeper)
        edge.build_cache = _build_cache(store, config, state.assets)  # docs/builds.md
        if edge.build_cache is not None:
            nursery.start_soon(edge.build_cache.run_sweeper)
        mcp = McpService(
            edge,
            directory,
            store,
            StoreAssets(store, state.assets),
            allowed_origins=config.mcp_allowed_origins,
        )
        await nursery.start(mcp.run)
        gateway = InstanceGateway(
            edge,
            directory,
            raw_link=raw_link,
            max_streams=config.max_streams_per_instance,
            mcp=mcp,
        )
        if listeners is not None:
            raw_routes = _raw_routes(drain, edge, connectors, gateway, forwarding)
            await nursery.start(serve_raw_links, listeners, raw_routes)
        # deletions a crash interrupted finish now (they end instances on linked hosts)
        deletion = OrganizationDeletion(store, service, tunnel_service, state.assets)
        nursery.start_soon(deletion.resume_deletions)
        if config.metrics_listen is not None:  # the operator port (docs/operations.md)
            await nursery.start(serve_metrics, state, *attrs.astuple(config.metrics_listen))
        if shutdown_trigger is not None and drains:  # the first signal drains first
            shutdown_trigger = partial(
                drain.after, shutdown_trigger, (edge.drain, connectors.drain)
            )
        await serve_api(
            state,
            shutdown_trigger=shutdown_trigger,
            websockets=dict(links),
            link_port=link_port,
            prefixes={INSTANCES_PREFIX: drain.guard_asgi(None, gateway)},
            tls=tls,
            task_status=task_status,
        )
        nursery.cancel_scope.cancel()


async def _replica(config: ServerConfig) -> tuple[ServerConfig, Drain]:
    """*config* with its replica id, everywhere below, and the replica's drain state (set
    for the API's tasks: readiness, refusals while draining; devyard/server/drain.py)."""
    config = await with_replica_id(config)
    assert config.replica_id is not None
    drain = Drain(config.replica_id, config.drain_timeout)
    CURRENT.set(drain)
    return config, drain


def _host_events(
    given: trio.MemorySendChannel[HostEvent] | None,
) -> tuple[trio.MemorySendChannel[HostEvent], trio.MemoryReceiveChannel[HostEvent] | None]:
    """Where the edge publishes host events: *given* (a test listens), else a channel to the
    instances service."""
    if given is not None:
        return given, None
    return trio.open_memory_channel[HostEvent](EVENT_BUFFER)


def _link_routes(
    drain: Drain, edge: Edge, connectors: ConnectorHub, forwarding: Forwarding
) -> dict[str, RawASGI]:
    """The link routes on the API port (WebSocket), counted and refused while draining."""
    links: dict[str, RawASGI] = {
        HOST_PATH: drain.guard_asgi("host", edge),
        CONNECTOR_PATH: drain.guard_asgi("connector", connectors),
    }
    for path, peers in forwarding.routes(edge, connectors).items():  # docs/replicas.md
        links[path] = drain.guard_asgi("peer", peers)
    return links


def _raw_routes(
    drain: Drain,
    edge: Edge,
    connectors: ConnectorHub,
    gateway: InstanceGateway,
    forwarding: Forwarding,
) -> dict[str, RawRoute]:
    """The routes of the raw link port, as `_link_routes` (and adb, which is no link)."""
    routes: dict[str, RawRoute] = {
        HOST_PATH: drain.guard_raw("host", edge.serve_upgrade),
        CONNECTOR_PATH: drain.guard_raw("connector", connectors.serve_upgrade),
        INSTANCES_PREFIX: drain.guard_raw(None, gateway.serve_upgrade),  # adb only
    }
    for path, route in forwarding.raw_routes().items():
        routes[path] = drain.guard_raw("peer", route)
    return routes


def _build_logs(store: Store, config: ServerConfig, assets: AssetBlobs) -> BuildLogs | None:
    """What keeps the build logs hosts report (None: a store without the build-log table)."""
    if not isinstance(store, SqlBuildLogs):
        return None
    logs = sibling_store(assets.blobs, BUILD_LOGS_DIR)  # beside the assets, on any backend
    return BuildLogs(store, store, logs, assets.signer, assets=assets)


def _build_cache(
    store: Store, config: ServerConfig, assets: AssetBlobs
) -> BuildCacheService | None:
    """The organization build cache (None: a store without its table)."""
    if not isinstance(store, SqlBuildCache):
        return None
    blobs = sibling_store(assets.blobs, BUILD_CACHE_NAMESPACE)
    return BuildCacheService(store, store, blobs, config.build_cache, wall_clock=assets.wall_clock)


def _link_tls(config: ServerConfig) -> ssl.SSLContext | None:
    if config.link_tls_cert is None or config.link_tls_key is None:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(config.link_tls_cert, config.link_tls_key)
    return context


def raw_link_url(config: ServerConfig, port: int) -> str:
    """The raw link port as clients reach it: its listen host, else (a wildcard) the host of
    the server's base URL."""
    assert config.link_listen is not None
    host = config.link_listen.host
    if host in ("", "0.0.0.0", "::"):  # noqa: S104 - comparing, not binding
        host = urlsplit(config.base_url).hostname or "127.0.0.1"
    scheme = "tls" if config.link_tls_cert is not None else "tcp"
    return f"{scheme}://{f'[{host}]' if ':' in host else host}:{port}"


def advertised_raw_link(config: ServerConfig, port: int) -> str | None:
    """The raw link URL the adb WebSocket names to clients: none when it is on loopback but
    clients come from elsewhere (``devyard up --host 0.0.0.0``: its raw port is its own
    host's), so no client is ever sent to a port on its own machine with a token."""
    url = raw_link_url(config, port)
    if is_loopback_host(urlsplit(url).hostname) and not is_loopback_host(
        urlsplit(config.base_url).hostname
    ):
        return None
    return url


def _say(out: TextIO, text: str) -> None:
    print(text, file=out, flush=True)


def _banner(
    out: TextIO,
    bound: BoundServer,
    config: ServerConfig,
    first: FirstStart | None,
    local_ca: LocalCertificates | None = None,
) -> None:
    _say(out, f"devyard is serving at {bound.base_url}")
    if local_ca is not None:
        _say(out, f"TLS: certificates from devyard's own CA; trust it with {local_ca.ca_cert}")
        _say(out, f"  curl --cacert {local_ca.ca_cert} {bound.base_url}/livez")
        _say(out, f"  export SSL_CERT_FILE={local_ca.ca_cert}  # Python, httpx, the devyard CLI")
        _say(out, "  or add it to the system store (docs/tls.md)")
    if first is None:
        return
    if first.new_key is not None:
        _say(out, f"admin API key (shown once; saved to {first.key_file}, mode 0600):")
        _say(out, f"  {first.new_key}")
        _say(
            out,
            f'try: curl -H "Authorization: Bearer $(cat {first.key_file})" {bound.base_url}/whoami',
        )
    elif first.key_file_exists:
        _say(out, f"admin API key: in {first.key_file}")
    else:
        _say(
            out,
            f"no admin API key file at {first.key_file}, and organizations exist already; "
            f"make a key with: devyard admin bootstrap --data-dir {config.data_dir} --org NAME",
        )


#: Runs beside the server once it listens (``devyard up``'s host daemon); it gets the bound
#: server and the shutdown event, and must return once that event is set.
Companion = Callable[["BoundServer", trio.Event], Awaitable[None]]


async def run_server(
    config: ServerConfig, *, out: TextIO, bootstrap: bool, companion: Companion | None = None
) -> int:
    """``devyard server`` (``bootstrap=False``) and ``devyard up`` (``bootstrap=True``): the
    first SIGINT/SIGTERM shuts down gracefully (in-flight requests get ``shutdown_grace``), a
    second stops at once (exit 130)."""

    async def serve(shutdown: trio.Event) -> None:
        tls, local_ca = await trio.to_thread.run_sync(load_server_tls, config)
        async with open_configured_store(config) as store:
            if not bootstrap:  # a server's log lines carry its replica id (drain.py)
                replica = await with_replica_id(config)
                LOG_FIELDS.set((*LOG_FIELDS.get(), ("replica", str(replica.replica_id))))
            first = await first_start(store, config.admin_key_path) if bootstrap else None
            async with trio.open_nursery() as serving:
                bound: BoundServer = await serving.start(
                    partial(_serve, store, config, shutdown.wait, tls=tls, drains=not bootstrap)
                )
                _banner(out, bound, config, first, local_ca)
                if tls is not None:
                    watcher = trio.CancelScope()

                    async def reload_until_shutdown() -> None:
                        with watcher:
                            await reload_tls_on_sighup(tls)

                    async def stop_watcher() -> None:
                        await shutdown.wait()
                        watcher.cancel()

                    serving.start_soon(reload_until_shutdown)
                    serving.start_soon(stop_watcher)
                if companion is not None:
                    serving.start_soon(companion, bound, shutdown)
        # The API returned: a graceful shutdown is complete.

    outcome = await run_until_signalled(
        serve,
        graceful="shutting down (in-flight requests get a grace period)"
        if bootstrap
        else "draining, then shutting down (links move, in-flight requests get a grace)",
    )
    return EXIT_INTERRUPTED if isinstance(outcome, Stopped) else 0


async def run_admin_bootstrap(
    config: ServerConfig, *, org_name: str, user_name: str, out: TextIO
) -> int:
    """``devyard admin bootstrap``: print a new admin key of *org_name* (created if missing)."""
    async with open_configured_store(config) as store:
        result = await bootstrap_organization(store, org_name=org_name, user_name=user_name)
    _say(
        out,
        f"organization {result.organization.name} ({result.organization.id}), "
        f"admin user {result.user.name}; new API key (shown once):",
    )
    _say(out, result.plaintext_key)
    return 0
