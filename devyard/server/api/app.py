"""The control API as a Quart-Trio app: blueprints, the request pipeline, the error shape.

``create_app`` wires what the handlers share (``context.ApiState``) and checks at start-up
that the routes and ``openapi.yaml`` describe the same operations, so an undocumented route or
an unimplemented operation is a start-up error rather than a surprise for a client.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import trio
from quart_trio import QuartTrio

from ..blobs import AssetBlobs
from ..config import ServerConfig
from ..instances import EmptyRegistry, InstanceService
from ..store.base import Store
from ..tunnels import TunnelService
from ._errors import install_error_handlers
from .auth import Authenticator
from .context import ApiState, Plan, install_state
from .contract import Contract, load_document, rule_to_template
from .pipeline import before_request
from .ratelimit import KeyedRateLimiter
from .routes import (
    analytics,
    api_keys,
    health,
    identity,
    instances,
    organizations,
    scoped_tokens,
    secret_scanning,
    tunnels,
)
from .routes.assets import install_assets, local_asset_blobs

__all__ = ["DEFAULT_PLANS", "create_app"]

DEFAULT_PLANS: Mapping[str, Plan] = {
    "self-hosted": Plan(
        tid="self-hosted",
        name="Self-hosted",
        description="Your own deployment: no metering, limits set by your hardware.",
    ),
}

# Methods the framework answers by itself; not API operations.
_FRAMEWORK_METHODS = frozenset({"HEAD", "OPTIONS"})


def _limiter(config: ServerConfig, clock: Callable[[], float]) -> KeyedRateLimiter | None:
    limit = config.rate_limit
    if not limit.enabled:
        return None
    return KeyedRateLimiter(rate=limit.rate, burst=limit.burst, clock=clock)


def create_app(
    store: Store,
    config: ServerConfig,
    *,
    contract: Contract | None = None,
    clock: Callable[[], float] = trio.current_time,
    plans: Mapping[str, Plan] = DEFAULT_PLANS,
    asset_blobs: AssetBlobs | None = None,
    instance_service: InstanceService | None = None,
    tunnel_service: TunnelService | None = None,
) -> QuartTrio:
    """The control API over *store*. The caller owns the store and closes it, and runs
    ``instance_service.run`` (its timeouts); without a service the API gets one with no
    hosts, where every create answers "no capacity"."""
    app = QuartTrio(__name__, static_folder=None)
    app.config.update(
        MAX_CONTENT_LENGTH=config.max_body_bytes,
        PROVIDE_AUTOMATIC_OPTIONS=False,
        # Errors are ours to render (_errors); never the framework's HTML debug pages.
        PROPAGATE_EXCEPTIONS=False,
        JSON_SORT_KEYS=False,
    )
    app.json.sort_keys = False  # type: ignore[attr-defined]
    contract = contract if contract is not None else Contract(load_document())
    install_state(
        app.extensions,
        ApiState(
            store=store,
            config=config,
            contract=contract,
            authenticator=Authenticator(store, clock=clock),
            key_limiter=_limiter(config, clock),
            client_limiter=_limiter(config, clock),
            plans=plans,
            instances=instance_service
            if instance_service is not None
            else InstanceService(
                store, EmptyRegistry(), regions=config.regions, home_region=config.region
            ),
        ),
    )
    app.extensions[tunnels.TUNNELS_KEY] = (
        tunnel_service if tunnel_service is not None else TunnelService(store)
    )
    install_error_handlers(app)
    app.before_request(before_request)
    for module in (health, identity, organizations, api_keys, instances, tunnels):
        app.register_blueprint(module.blueprint)
    for module in (scoped_tokens, analytics, secret_scanning):
        app.register_blueprint(module.blueprint)
    if asset_blobs is None:
        asset_blobs = local_asset_blobs(store, config)
    install_assets(app, asset_blobs)
    _check_routes_match(app, contract)
    return app


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
