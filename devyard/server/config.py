"""The server's configuration: one frozen, validated value, loaded only at the edge.

``load_server_config`` merges, from weakest to strongest: the defaults below, an optional
TOML or YAML file, ``DEVYARD_*`` environment variables, command-line flags. The CLI calls it
with ``os.environ``; nothing under ``devyard.server`` reads the environment itself.

Keys (file key / environment variable):

    data_dir            DEVYARD_DATA_DIR            directory of the SQLite file and admin key
    listen              DEVYARD_LISTEN              HOST:PORT of the HTTP listener
    database_url        DEVYARD_DATABASE_URL        postgresql://...; unset = SQLite in data_dir
    public_url          DEVYARD_PUBLIC_URL          base URL clients use; unset = from listen
    region              DEVYARD_REGION              the region this server serves
    regions             DEVYARD_REGIONS             regions placement knows (below; env: JSON)
    max_body_bytes      DEVYARD_MAX_BODY_BYTES      largest accepted request body
    shutdown_grace      DEVYARD_SHUTDOWN_GRACE      seconds in-flight requests get on shutdown
    replica_id          DEVYARD_REPLICA_ID          this replica's name in logs, metrics, /readyz;
                                                    unset = one made once and kept in data_dir
    drain_timeout       DEVYARD_DRAIN_TIMEOUT       seconds a SIGTERM drain waits for links to
                                                    move and streams to end; default 30
    link_listen         DEVYARD_LINK_LISTEN         HOST:PORT for raw host/connector links; unset
                                                    = off (links use the API port's WebSockets)
    link_tls_cert       DEVYARD_LINK_TLS_CERT       PEM certificate chain: raw links are TLS
    link_tls_key        DEVYARD_LINK_TLS_KEY        its PEM private key (required with the cert)
    tls_cert            DEVYARD_TLS_CERT            PEM certificate chain: the API port is HTTPS
                                                    (HTTP/2 by ALPN; SIGHUP reloads the files)
    tls_key             DEVYARD_TLS_KEY             its PEM private key (required with the cert)
    tls_self_signed     DEVYARD_TLS_SELF_SIGNED     true: HTTPS with a CA of our own made in
                                                    DATA_DIR/tls (``devyard up --tls``)
    allow_plain_http    DEVYARD_ALLOW_PLAIN_HTTP    true: serve plain HTTP on a non-loopback
                                                    address (a TLS-terminating proxy in front)
    metrics_listen      DEVYARD_METRICS_LISTEN      HOST:PORT of the operator port (/metrics);
                                                    unset = off (docs/operations.md)
    max_connectors_per_tunnel                       connector links one tunnel may hold
                        DEVYARD_MAX_CONNECTORS_PER_TUNNEL  (active and standbys; more: 429
                                                    ``too-many-connectors``); default 8
    max_streams_per_instance                        open WebSocket streams per instance
                        DEVYARD_MAX_STREAMS_PER_INSTANCE  (more: 429 ``too_many_streams``);
                                                    default 16
    mcp_allowed_origins DEVYARD_MCP_ALLOWED_ORIGINS browser origins (``https://host[:port]``)
                                                    whose pages may call ``mcpUrl``; default
                                                    none (env: comma-separated; docs/mcp.md)
    secret_scanning_keys_url                        public keys of leaked-token reports
                        DEVYARD_SECRET_SCANNING_KEYS_URL  (POST /github_revoke, docs/security.md)
    blob_sweep_interval DEVYARD_BLOB_SWEEP_INTERVAL seconds between sweeps of expired assets,
                                                    orphaned blobs and interrupted uploads' files
                                                    (also one at start); default 60
    blob_orphan_grace   DEVYARD_BLOB_ORPHAN_GRACE   seconds an unnamed blob or an unmodified
                                                    upload file is left alone; default 3600
    [billing]           DEVYARD_BILLING_PLANS (JSON)  docs/billing.md
    plans               the plan catalog: a list of tables (tid, name, rank, monthly_fee,
                        included_minutes, tiers, credits, concurrency, weights, price_id)
    default_plan        the plan of an organization without a subscription (first plan)
    provider, stripe_*, return_url, unpaid_policy, provider_*: the payment provider
                        (devyard/server/billing/settings.py), DEVYARD_BILLING_<KEY>
    [blobs]             DEVYARD_BLOBS_<KEY>         where asset bytes and build logs live: backend
                                                    local | s3 | postgres (keys:
                                                    devyard/server/blobs/settings.py, docs/blobs.md)
    [rate_limit]
    enabled             DEVYARD_RATE_LIMIT_ENABLED  per-API-key token bucket on or off
    rate                DEVYARD_RATE_LIMIT_RATE     tokens per second
    burst               DEVYARD_RATE_LIMIT_BURST    bucket size
    [accounts]          DEVYARD_ACCOUNTS_<KEY>      organizations, invitations, SMTP, DNS
                                                    (keys: devyard/server/accounts/settings.py)
    [peers]             DEVYARD_PEERS_<KEY>         replica links (docs/replicas.md): replica_id,
                                                    cluster_secret (never shown); both or none
    [build_cache]       DEVYARD_BUILD_CACHE_<KEY>   the organizations' Gradle build cache
                                                    (docs/builds.md): max_bytes, max_entry,
                                                    max_idle_days, sweep_interval

``regions`` is a list of tables, one per region, for placement (docs/instances.md)::

    [[regions]]
    name = "eu-west"            # required; hosts of this region advertise the same name
    jurisdiction = "EU"         # optional; spec.jurisdiction keeps its regions
    latitude = 50.11            # optional, with longitude: ClientLocation clues pick the nearest
    longitude = 8.68
    networks = ["10.1.0.0/16"]  # optional: ClientIP clues (or the caller's address) in these

Unknown keys in a file are an error. Of the environment only the names above are read
(``DEVYARD_BASE_URL`` and ``DEVYARD_API_KEY`` belong to the client).
"""

from __future__ import annotations

import ipaddress
import json
import re
import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import urlsplit

import attrs

from .accounts import settings as accounts_settings
from .accounts.settings import AccountsConfig
from .billing import settings as billing_settings
from .billing.plans import DEFAULT_CATALOG, Catalog, CatalogError, parse_catalog
from .billing.settings import ProviderConfig
from .blobs import settings as blob_settings
from .blobs.settings import BlobSettings
from .cluster import settings as cluster_settings
from .cluster.settings import ClusterConfig

if TYPE_CHECKING:
    from .edge.peers import PeerConfig
from .build_cache.settings import BuildCacheSettings

__all__ = [
    "ENV_CONFIG_FILE",
    "ConfigError",
    "ListenAddress",
    "RateLimitConfig",
    "RegionConfig",
    "ServerConfig",
    "load_server_config",
    "redact_url",
]

ENV_PREFIX: Final = "DEVYARD_"
ENV_CONFIG_FILE: Final = "DEVYARD_CONFIG"
DEFAULT_PORT: Final = 8080


class ConfigError(ValueError):
    """The configuration is invalid; the message names the key and where it came from."""


@attrs.frozen
class ListenAddress:
    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


@attrs.frozen
class RateLimitConfig:
    enabled: bool = True
    rate: float = 20.0
    burst: int = 100


@attrs.frozen
class RegionConfig:
    """A region as placement sees it (``devyard.server.instances.placement.RegionInfo``)."""

    name: str
    jurisdiction: str | None = None
    latitude: float | None = None
    longitude: float | None = None
    networks: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = ()


def redact_url(url: str) -> str:
    """*url* without its password, for logs and reprs."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)[1]
    user = parts.username or ""
    return parts._replace(netloc=f"{user}:***@{netloc}").geturl()


def _redacted_optional(url: str | None) -> str:
    return "None" if url is None else repr(redact_url(url))


@attrs.frozen
class ServerConfig:
    """Everything the server needs to start, already validated."""

    data_dir: Path
    listen: ListenAddress = ListenAddress("127.0.0.1", DEFAULT_PORT)
    database_url: str | None = attrs.field(default=None, repr=_redacted_optional)
    public_url: str | None = None
    region: str = "local"
    regions: tuple[RegionConfig, ...] = ()
    max_body_bytes: int = 1024 * 1024
    shutdown_grace: float = 10.0
    # several replicas (docs/operations.md, "Several replicas"; devyard/server/drain.py)
    replica_id: str | None = None  # None: drain.ensure_replica_id keeps one in data_dir
    drain_timeout: float = attrs.field(default=30.0, validator=attrs.validators.ge(0))
    rate_limit: RateLimitConfig = RateLimitConfig()
    billing: Catalog = DEFAULT_CATALOG  # the plan catalog (billing/plans.py)
    payments: ProviderConfig = attrs.field(factory=ProviderConfig)  # billing/settings.py
    link_listen: ListenAddress | None = None
    link_tls_cert: Path | None = None
    link_tls_key: Path | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None
    tls_self_signed: bool = False
    allow_plain_http: bool = False
    metrics_listen: ListenAddress | None = None  # the operator port: /metrics
    # the edge's caps (issue 14 finding 9); the edge's own defaults are the same numbers
    max_connectors_per_tunnel: int = attrs.field(default=8, validator=attrs.validators.ge(1))
    max_streams_per_instance: int = attrs.field(default=16, validator=attrs.validators.ge(1))
    mcp_allowed_origins: tuple[str, ...] = ()
    # where POST /github_revoke gets the public keys its reports are signed with
    secret_scanning_keys_url: str = "https://api.github.com/meta/public_keys/secret_scanning"  # noqa: S105
    # the asset sweep (blobs/service.py): how often, and how long what no row names is kept
    blob_sweep_interval: float = attrs.field(default=60.0, validator=attrs.validators.gt(0))
    blob_orphan_grace: float = attrs.field(default=3600.0, validator=attrs.validators.ge(0))
    blobs: BlobSettings = attrs.field(factory=BlobSettings)  # [blobs]: blobs/settings.py
    # [peers]: links between server replicas (edge/peers.py, docs/replicas.md); None: one server
    peers: PeerConfig | None = None

    @property
    def tls_enabled(self) -> bool:
        """Whether the API port speaks HTTPS (given files, or ``up``'s own CA)."""
        return self.tls_cert is not None or self.tls_self_signed

    @property
    def tls_dir(self) -> Path:
        """Where ``tls_self_signed`` keeps its CA and certificate."""
        return self.data_dir / "tls"

    # [accounts]: organization creation, invitations, SMTP, DNS (accounts/settings.py)
    accounts: AccountsConfig = attrs.field(factory=AccountsConfig)
    # [cluster]: replicas sharing PostgreSQL (cluster/settings.py, docs/scale-out.md)
    cluster: ClusterConfig = attrs.field(factory=ClusterConfig)
    # the organization build cache's bounds (build_cache/settings.py, docs/builds.md)
    build_cache: BuildCacheSettings = attrs.field(factory=BuildCacheSettings)

    @property
    def base_url(self) -> str:
        """The URL clients reach the API at: ``public_url``, else one derived from ``listen``."""
        if self.public_url is not None:
            return self.public_url.rstrip("/")
        host = self.listen.host
        if host in ("0.0.0.0", ""):  # noqa: S104 - comparing, not binding
            host = "127.0.0.1"
        elif host == "::":
            host = "::1"
        scheme = "https" if self.tls_enabled else "http"
        return f"{scheme}://{ListenAddress(host, self.listen.port)}"

    @property
    def sqlite_path(self) -> Path:
        return self.data_dir / "devyard.sqlite3"

    @property
    def admin_key_path(self) -> Path:
        return self.data_dir / "admin-api-key"


# --- parsing: every value arrives as a string (env, flags) or a TOML/YAML scalar (file) ---------


def _parse_listen(value: object) -> ListenAddress:
    text = _str(value)
    host, sep, port_text = text.rpartition(":")
    if not sep or not port_text.isdigit():
        raise ValueError(f"expected HOST:PORT, got {text!r}")
    host = host.removeprefix("[").removesuffix("]")
    if not host:
        raise ValueError(f"expected HOST:PORT, got {text!r}")
    port = int(port_text)
    if not 0 <= port <= 65535:
        raise ValueError(f"port must be 0-65535, got {port}")
    if ":" in host:
        ipaddress.IPv6Address(host)
    return ListenAddress(host, port)


def _parse_database_url(value: object) -> str:
    text = _str(value)
    if urlsplit(text).scheme not in ("postgresql", "postgres"):
        raise ValueError("expected a postgresql:// URL (leave unset for SQLite in data_dir)")
    return text


def _parse_public_url(value: object) -> str:
    text = _str(value)
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"expected an http:// or https:// URL, got {text!r}")
    if parts.query or parts.fragment or parts.password:
        raise ValueError("must not carry a query, fragment or password")
    return text.rstrip("/")


_REGION: Final = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")


def _parse_region(value: object) -> str:
    text = _str(value)
    if not _REGION.match(text):
        raise ValueError("expected lowercase letters, digits and dashes, at most 63")
    return text


_REGION_KEYS: Final = frozenset({"name", "jurisdiction", "latitude", "longitude", "networks"})
_JURISDICTION: Final = re.compile(r"^[A-Za-z0-9_-]{1,63}$")


def _coordinate(entry: Mapping[str, object], key: str, limit: float) -> float | None:
    if key not in entry:
        return None
    number = float(_number(entry[key], float))
    if not -limit <= number <= limit:
        raise ValueError(f"{key} must be within -{limit:g}..{limit:g}, got {entry[key]!r}")
    return number


def _parse_region_entry(entry: object) -> RegionConfig:
    if not isinstance(entry, Mapping):
        raise ValueError(f"expected a table per region, got {entry!r}")
    unknown = sorted(set(entry) - _REGION_KEYS)
    if unknown:
        raise ValueError(
            f"unknown key(s) {', '.join(unknown)} (have: {', '.join(sorted(_REGION_KEYS))})"
        )
    if "name" not in entry:
        raise ValueError("every region needs a name")
    name = _parse_region(entry["name"])
    try:
        jurisdiction = None
        if "jurisdiction" in entry:
            jurisdiction = _str(entry["jurisdiction"])
            if not _JURISDICTION.match(jurisdiction):
                raise ValueError("jurisdiction: letters, digits, _ and -, at most 63")
        latitude = _coordinate(entry, "latitude", 90)
        longitude = _coordinate(entry, "longitude", 180)
        if (latitude is None) != (longitude is None):
            raise ValueError("latitude and longitude go together")
        raw_networks = entry.get("networks", [])
        if not isinstance(raw_networks, list):
            raise ValueError(f"networks: expected a list of CIDRs, got {raw_networks!r}")
        networks = tuple(ipaddress.ip_network(_str(n)) for n in raw_networks)
    except ValueError as exc:
        raise ValueError(f"region {name!r}: {exc}") from exc
    return RegionConfig(name, jurisdiction, latitude, longitude, networks)


def _parse_regions(value: object) -> tuple[RegionConfig, ...]:
    """A list of region tables (file), or the same as JSON (environment, flags)."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ValueError(f"expected a JSON list of region objects: {exc}") from exc
    if not isinstance(value, list):
        raise ValueError(f"expected a list of regions, got {value!r}")
    regions = tuple(_parse_region_entry(entry) for entry in value)
    names = [r.name for r in regions]
    duplicated = sorted({n for n in names if names.count(n) > 1})
    if duplicated:
        raise ValueError(f"region(s) listed twice: {', '.join(duplicated)}")
    return regions


_REPLICA_ID: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")


def _parse_replica_id(value: object) -> str:
    text = _str(value)
    if not _REPLICA_ID.match(text):
        raise ValueError("expected 1-63 letters, digits, '.', '_' or '-' (a pod or host name)")
    return text


def _str(value: object) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"expected a non-empty string, got {value!r}")
    return value


def _path(value: object) -> Path:
    return Path(_str(value)).expanduser().absolute()


def _list(value: object, what: str) -> list[object]:
    if isinstance(value, str):  # the environment: JSON
        try:
            value = json.loads(value)
        except ValueError:
            raise ValueError(f"expected {what} (JSON in the environment)") from None
    if not isinstance(value, list):
        raise ValueError(f"expected {what}")
    return value


def _bool(value: object) -> bool:
    if isinstance(value, bool):
        return value
    text = _str(value).lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"expected true or false, got {value!r}")


def _number(value: object, kind: Callable[[str], float]) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"expected a number, got {value!r}")
    return kind(str(value)) if isinstance(value, str) else value


def _positive_int(value: object) -> int:
    number = _number(value, int)
    if not isinstance(number, int) or number < 1:
        raise ValueError(f"expected a positive integer, got {value!r}")
    return number


def _parse_origins(value: object) -> tuple[str, ...]:
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list | tuple):
        raise ValueError(f"expected a list of origins, got {value!r}")
    origins = []
    for item in items:
        origin = str(item).strip().rstrip("/")
        parts = urlsplit(origin)
        if parts.scheme not in ("http", "https") or not parts.netloc or parts.path:
            raise ValueError(f"expected an origin like https://example.com, got {item!r}")
        origins.append(origin)
    return tuple(o for o in origins if o)


def _positive_float(value: object) -> float:
    number = float(_number(value, float))
    if not 0 < number < float("inf"):
        raise ValueError(f"expected a positive number, got {value!r}")
    return number


def _non_negative_float(value: object) -> float:
    number = float(_number(value, float))
    if not 0 <= number < float("inf"):
        raise ValueError(f"expected a number >= 0, got {value!r}")
    return number


_PARSERS: Final[dict[str, Callable[[object], Any]]] = {
    "data_dir": _path,
    "listen": _parse_listen,
    "database_url": _parse_database_url,
    "public_url": _parse_public_url,
    "region": _parse_region,
    "regions": _parse_regions,
    "max_body_bytes": _positive_int,
    "shutdown_grace": _non_negative_float,
    "replica_id": _parse_replica_id,
    "drain_timeout": _non_negative_float,
    "link_listen": _parse_listen,
    "link_tls_cert": _path,
    "link_tls_key": _path,
    "tls_cert": _path,
    "tls_key": _path,
    "tls_self_signed": _bool,
    "allow_plain_http": _bool,
    "metrics_listen": _parse_listen,
    "max_connectors_per_tunnel": _positive_int,
    "max_streams_per_instance": _positive_int,
    "secret_scanning_keys_url": _parse_public_url,
    "blob_sweep_interval": _positive_float,
    "blob_orphan_grace": _non_negative_float,
    "billing.plans": lambda value: _list(value, "a list of plan tables"),
    "billing.default_plan": _str,
    **{f"billing.{key}": parse for key, parse in billing_settings.PARSERS.items()},
    "mcp_allowed_origins": _parse_origins,
    "rate_limit.enabled": _bool,
    "rate_limit.rate": _positive_float,
    "rate_limit.burst": _positive_int,
    **{f"accounts.{key}": parse for key, parse in accounts_settings.PARSERS.items()},
    **{f"blobs.{key}": parse for key, parse in blob_settings.PARSERS.items()},
    "peers.replica_id": _str,
    "peers.cluster_secret": _str,
    **{f"cluster.{key}": parse for key, parse in cluster_settings.PARSERS.items()},
    "build_cache.max_bytes": _positive_int,
    "build_cache.max_entry": _positive_int,
    "build_cache.max_idle_days": _positive_float,
    "build_cache.sweep_interval": _positive_float,
}


def _env_name(key: str) -> str:
    return ENV_PREFIX + key.replace(".", "_").upper()


def _flatten(table: Mapping[str, object], source: str, prefix: str = "") -> dict[str, object]:
    flat: dict[str, object] = {}
    for name, value in table.items():
        key = f"{prefix}{name}"
        if isinstance(value, Mapping):
            flat.update(_flatten(value, source, prefix=f"{key}."))
        elif key in _PARSERS:
            flat[key] = value
        else:
            raise ConfigError(f"{source}: unknown key {key!r}")
    return flat


def read_config_file(path: Path) -> dict[str, object]:
    """The keys of a TOML (``.toml``) or YAML (``.yaml``/``.yml``) file, flattened."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from exc
    try:
        if path.suffix == ".toml":
            data: object = tomllib.loads(text)
        elif path.suffix in (".yaml", ".yml"):
            import yaml  # noqa: PLC0415 - only files that need it pay for it

            data = yaml.safe_load(text) or {}
        else:
            raise ConfigError(f"{path}: config files are .toml, .yaml or .yml")
    except (tomllib.TOMLDecodeError, ValueError) as exc:
        if isinstance(exc, ConfigError):
            raise
        raise ConfigError(f"{path}: {exc}") from exc
    if not isinstance(data, Mapping):
        raise ConfigError(f"{path}: expected a table of keys at the top level")
    return _flatten(data, str(path))


def load_server_config(
    *,
    flags: Mapping[str, object] | None = None,
    env: Mapping[str, str] | None = None,
    file: Path | None = None,
    defaults: Mapping[str, object] | None = None,
) -> ServerConfig:
    """Merge *defaults* < *file* < *env* < *flags* (flags keyed like file keys; None = unset)."""
    env = env or {}
    if file is None and env.get(ENV_CONFIG_FILE):
        file = Path(env[ENV_CONFIG_FILE])
    layers: list[tuple[str, Mapping[str, object]]] = [("default", defaults or {})]
    if file is not None:
        layers.append((str(file), read_config_file(file)))
    layers.append(("environment", {k: env[_env_name(k)] for k in _PARSERS if _env_name(k) in env}))
    layers.append(("flag", {k: v for k, v in (flags or {}).items() if v is not None}))

    values: dict[str, object] = {}
    for source, layer in layers:
        for key, raw in layer.items():
            parser = _PARSERS.get(key)
            if parser is None:
                raise ConfigError(f"{source}: unknown key {key!r}")
            where = _env_name(key) if source == "environment" else key
            try:
                values[key] = parser(raw)
            except ValueError as exc:
                raise ConfigError(f"{source} {where}: {exc}") from exc
    if "data_dir" not in values:
        raise ConfigError(f"data_dir is required (--data-dir or {_env_name('data_dir')})")
    limits: dict[str, Any] = {
        k.split(".", 1)[1]: v for k, v in values.items() if k.startswith("rate_limit.")
    }
    rate_limit = RateLimitConfig(**limits)
    try:
        plans: Any = values.get("billing.plans", ())
        default: Any = values.get("billing.default_plan")
        catalog = parse_catalog(plans, default)
    except CatalogError as exc:
        raise ConfigError(str(exc)) from None
    payment_keys = {k.split(".", 1)[1]: v for k, v in values.items() if k.startswith("billing.")}
    try:
        payments = billing_settings.build(
            {k: v for k, v in payment_keys.items() if k not in ("plans", "default_plan")}
        )
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    top: dict[str, Any] = {k: v for k, v in values.items() if "." not in k}
    try:
        top["accounts"] = accounts_settings.build(
            {k.split(".", 1)[1]: v for k, v in values.items() if k.startswith("accounts.")}
        )
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    top.update(_sections(values, top.get("database_url")))
    if ("link_tls_cert" in top) != ("link_tls_key" in top):
        raise ConfigError("link_tls_cert and link_tls_key go together (set both or neither)")
    if "link_tls_cert" in top and "link_listen" not in top:
        raise ConfigError("link_tls_cert needs link_listen (the raw link port it secures)")
    if ("tls_cert" in top) != ("tls_key" in top):
        raise ConfigError("tls_cert and tls_key go together (set both or neither)")
    if "tls_cert" in top and top.get("tls_self_signed"):
        raise ConfigError("tls_self_signed makes its own certificate: drop tls_cert/tls_key")
    config = ServerConfig(rate_limit=rate_limit, billing=catalog, payments=payments, **top)
    if not (config.tls_enabled or config.allow_plain_http or _is_loopback(config.listen.host)):
        raise ConfigError(
            f"refusing plain HTTP on the non-loopback address {config.listen.host}: give "
            "tls_cert and tls_key (or --tls with devyard up), or set allow_plain_http = true "
            "when a TLS-terminating proxy is in front (docs/tls.md)"
        )
    return config


def _sections(values: Mapping[str, object], database_url: str | None) -> dict[str, object]:
    """The sections parsed by their own modules: ``[blobs]``, ``[cluster]``, ``[peers]`` and
    ``[build_cache]``."""
    cache = {k.split(".", 1)[1]: v for k, v in values.items() if k.startswith("build_cache.")}
    return {
        "blobs": _blobs(values, database_url),
        "cluster": _cluster(values),
        "build_cache": BuildCacheSettings(**cache),  # type: ignore[arg-type]  # _PARSERS checked
        **_peer_config(values),
    }


def _blobs(values: Mapping[str, object], database_url: str | None) -> BlobSettings:
    try:
        return blob_settings.build(
            {k.split(".", 1)[1]: v for k, v in values.items() if k.startswith("blobs.")},
            database_url=database_url,
        )
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def _peer_config(values: Mapping[str, object]) -> dict[str, PeerConfig]:
    """``{"peers": PeerConfig}`` from the ``peers.*`` keys; empty without any."""
    keys = {k.split(".", 1)[1]: v for k, v in values.items() if k.startswith("peers.")}
    if not keys:
        return {}
    from .edge.peers import PeerConfig  # noqa: PLC0415 - the edge loads only for replicas

    top_id = values.get("replica_id")
    if keys.get("replica_id") and top_id and keys["replica_id"] != top_id:
        raise ConfigError(
            f"[peers] replica_id {keys['replica_id']!r} differs from replica_id {top_id!r}: "
            "one replica has one name (set replica_id alone)"
        )
    try:
        return {"peers": PeerConfig(**keys)}  # type: ignore[arg-type]
    except (TypeError, ValueError) as exc:
        message = "[peers] needs cluster_secret (16+ characters)"
        raise ConfigError(f"{message}: {exc}") from None


def _cluster(values: Mapping[str, object]) -> ClusterConfig:
    try:
        cluster = cluster_settings.build(
            {k.split(".", 1)[1]: v for k, v in values.items() if k.startswith("cluster.")}
        )
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    if cluster.enabled and not str(values.get("database_url", "")).startswith("postgres"):
        raise ConfigError("cluster.enabled needs a PostgreSQL database_url (docs/scale-out.md)")
    return cluster


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
