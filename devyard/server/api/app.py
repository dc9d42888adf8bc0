"""The control API as a Quart-Trio app: blueprints, the request pipeline, the error shape.

``api_state`` builds what the handlers share (``context.ApiState``: the store, the config and
every service, typed and frozen); ``create_app(state)`` serves it and checks at start-up that
the routes and ``openapi.yaml`` describe the same operations, so an undocumented route or an
unimplemented operation is a start-up error rather than a surprise for a client.
"""

from __future__ import annotations

from collections.abc import Callable

import trio
from quart_trio import QuartTrio

from ..billing.service import BillingService
from ..blobs import (
    AssetBlobs,
    BlobEndpoint,
    BlobRoutes,
    LocalBlobStore,
    UrlSigner,
    load_signing_key,
)
from ..config import ServerConfig
from ..console import mount as mount_console
from ..hosts import HostRegistry
from ..instances import EmptyRegistry, InstanceService
from ..secret_scanning import KeyRing
from ..store.base import Store
from ..tunnels import TunnelConnections, TunnelService
from ._errors import install_error_handlers
from .auth import Authenticator
from .context import ApiState, install_state
from .contract import Contract, load_document, rule_to_template
from .pipeline import before_request
from .ratelimit import KeyedRateLimiter
from .routes import (
    analytics,
    api_keys,
    assets,
    audit,
    billing,
    build_cache,
    build_logs,
    cli_login,
    domains,
    health,
    identity,
    instances,
    invitations,
    oidc,
    operator,
    organizations,
    scoped_tokens,
    secret_scanning,
    sessions,
    stripe_webhook,
    tunnels,
)

__all__ = ["api_state", "create_app", "local_asset_blobs"]


# Methods the framework answers by itself; not API operations.
_FRAMEWORK_METHODS = frozenset({"HEAD", "OPTIONS"})

_BLUEPRINTS = (
    health,
    identity,
    organizations,
    invitations,
    domains,
    oidc,
    operator,
    sessions,
    audit,
    api_keys,
    instances,
    tunnels,
    scoped_tokens,
    analytics,
    assets,
    secret_scanning,
    billing,
    stripe_webhook,
    build_logs,
    build_cache,
    cli_login,
)


def _limiter(config: ServerConfig, clock: Callable[[], float]) -> KeyedRateLimiter | None:
    limit = config.rate_limit
    if not limit.enabled:
        return None
    return KeyedRateLimiter(rate=limit.rate, burst=limit.burst, clock=clock)


def local_asset_blobs(store: Store, config: ServerConfig) -> AssetBlobs:
    """The default: blobs in ``<data_dir>/blobs``, the signing key in the data dir."""
    signer = UrlSigner(load_signing_key(config.data_dir))
    return AssetBlobs(
        store,
        LocalBlobStore(config.data_dir / "blobs"),
        signer,
        orphan_grace=config.blob_orphan_grace,
        sweep_interval=config.blob_sweep_interval,
    )


def api_state(
    store: Store,
    config: ServerConfig,
    *,
    contract: Contract | None = None,
    clock: Callable[[], float] = trio.current_time,
    instances: InstanceService | None = None,
    tunnels: TunnelService | None = None,
    assets: AssetBlobs | None = None,
    hosts: HostRegistry | None = None,
    connectors: TunnelConnections | None = None,
) -> ApiState:
    """The API's state over *store*, with defaults for what a caller does not give: the
    packaged document, an instance service with no hosts (every create answers "no
    capacity"), a tunnel service with no connector hub, blobs in the data dir. The caller
    owns the store and closes it, and runs ``instances.run`` (its timeouts)."""
    return ApiState(
        store=store,
        config=config,
        contract=contract if contract is not None else Contract(load_document()),
        authenticator=Authenticator(store, clock=clock),
        key_limiter=_limiter(config, clock),
        client_limiter=_limiter(config, clock),
        instances=instances
        if instances is not None
        else InstanceService(
            store, EmptyRegistry(), regions=config.regions, home_region=config.region
        ),
        tunnels=tunnels if tunnels is not None else TunnelService(store),
        assets=assets if assets is not None else local_asset_blobs(store, config),
        key_ring=KeyRing(config.secret_scanning_keys_url),
        billing=BillingService(store, config.billing, config.payments, base_url=config.base_url),
        hosts=hosts,
        connectors=connectors,
    )


def create_app(state: ApiState) -> QuartTrio:
    """The control API over *state*; the asset sweep runs while the app serves."""
    app = QuartTrio(__name__, static_folder=None)
    app.config.update(
        MAX_CONTENT_LENGTH=state.config.max_body_bytes,
        PROVIDE_AUTOMATIC_OPTIONS=False,
        # Errors are ours to render (_errors); never the framework's HTML debug pages.
        PROPAGATE_EXCEPTIONS=False,
        JSON_SORT_KEYS=False,
    )
    app.json.sort_keys = False  # type: ignore[attr-defined]
    install_state(app.extensions, state)
    install_error_handlers(app)
    app.before_request(before_request)
    for module in _BLUEPRINTS:
        app.register_blueprint(module.blueprint)
    _install_blobs(app, state.assets)
    _check_routes_match(app, state.contract)
    mount_console(app, state)  # /console and / (docs/console.md); not API operations
    return app


def _install_blobs(app: QuartTrio, blobs: AssetBlobs) -> None:
    """Mount the ``/blobs/`` endpoint in front of *app* and run the sweep while it serves."""
    app.asgi_app = BlobRoutes(app.asgi_app, BlobEndpoint(blobs))  # type: ignore[method-assign,assignment]

    @app.before_serving
    async def _start_sweeper() -> None:
        app.nursery.start_soon(blobs.run_sweeper)

    @app.after_serving
    async def _stop_sweeper() -> None:
        blobs.stop_sweeper()


def _check_routes_match(app: QuartTrio, contract: Contract) -> None:
    routed = {
        (method, rule_to_template(rule.rule))
        for rule in app.url_map.iter_rules()
        if rule.endpoint != "static"
        for method in (rule.methods or set()) - _FRAMEWORK_METHODS
    }
    documented = {(op.method, op.template) for op in contract.operations}
    if routed != documented:
        raise RuntimeError(
            "routes and openapi.yaml disagree: "
            f"undocumented {sorted(routed - documented)}, unrouted {sorted(documented - routed)}"
        )
