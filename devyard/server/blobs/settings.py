"""The ``[blobs]`` config: where asset bytes and build logs live, and the opening of that store.
Parsed by `devyard.server.config` (``blobs.`` prefixed; environment ``DEVYARD_BLOBS_<KEY>``)::

    [blobs]
    backend = "local"            # "local" (default) | "s3" | "postgres"  (docs/blobs.md)
    directory = "/mnt/nfs/devyard"   # local: the root of the namespaces (default: data_dir);
                                 # a shared file system (NFS) makes it shared by replicas
    s3_endpoint = "https://s3.eu-west-1.amazonaws.com"  # unset: AWS's endpoint of the region
    s3_bucket = "devyard-blobs"  # required with backend = "s3"; must exist
    s3_region = "eu-west-1"
    s3_prefix = "prod/"          # keys are <prefix><namespace>/<key>
    s3_credentials_file = "/run/secrets/s3"   # AWS's INI format ([default] aws_access_key_id
    s3_profile = "default"       # = ..., aws_secret_access_key = ...), or the two keys below
    s3_access_key_id = "..."     # (environment: DEVYARD_BLOBS_S3_ACCESS_KEY_ID)
    s3_secret_access_key = "..." # (environment: DEVYARD_BLOBS_S3_SECRET_ACCESS_KEY), never logged
    s3_addressing = "path"       # "path" (MinIO, Garage, Ceph...) | "virtual" (AWS)
    s3_part_size_mib = 8         # multipart part size (5..512); memory per upload ~2 parts
    s3_max_connections = 10      # the client's connection pool = worker threads in flight
    presign_direct = false       # true: download URLs are the endpoint's own presigned URLs
    postgres_url = "postgresql://..."  # backend = "postgres": default the server's database_url
    postgres_max_connections = 4
    signing_key_file = "/etc/devyard/asset-signing-key"  # the signed URLs' key; replicas that
                                 # do not share a data dir share this file (default:
                                 # DATA_DIR/asset-signing-key), or a URL one signs fails on another

Credentials come from this table, its file, or the ``DEVYARD_BLOBS_*`` variables that the CLI
passes to `load_server_config`; nothing here reads the environment (boto3 is given them
explicitly, so its own credential chain is never consulted).

`open_asset_blobs` opens the configured backend for a serving process and yields the
`AssetBlobs` over its ``blobs`` namespace; `sibling_store` gives another namespace of the same
backend (build logs: ``build-logs``), so what one replica writes every replica reads.
"""

from __future__ import annotations

import configparser
import enum
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import urlsplit

import attrs
import trio

from ..keyfile import load_or_create_key
from .base import BlobStore
from .local import LocalBlobStore
from .service import AssetBlobs
from .signing import UrlSigner, load_signing_key

if TYPE_CHECKING:
    from ..store.base import Store

__all__ = [
    "ASSETS_NAMESPACE",
    "PARSERS",
    "BlobBackend",
    "BlobSettings",
    "build",
    "open_asset_blobs",
    "sibling_store",
]

ASSETS_NAMESPACE: Final = "blobs"  # the local layout's directory name, kept for every backend
SIGNING_KEY_BYTES: Final = 32  # as signing.load_signing_key makes it


class BlobBackend(enum.StrEnum):
    LOCAL = "local"
    S3 = "s3"
    POSTGRES = "postgres"


class S3Addressing(enum.StrEnum):
    PATH = "path"
    VIRTUAL = "virtual"


def _redacted(value: str | None) -> str:
    return "None" if value is None else "'***'"


@attrs.frozen
class BlobSettings:
    backend: BlobBackend = BlobBackend.LOCAL
    directory: Path | None = None
    s3_endpoint: str | None = None
    s3_bucket: str | None = None
    s3_region: str = "us-east-1"
    s3_prefix: str = ""
    s3_access_key_id: str | None = attrs.field(default=None, repr=_redacted)
    s3_secret_access_key: str | None = attrs.field(default=None, repr=_redacted)
    s3_addressing: S3Addressing = S3Addressing.PATH
    s3_part_size_mib: int = 8
    s3_max_connections: int = 10
    presign_direct: bool = False
    postgres_url: str | None = attrs.field(default=None, repr=_redacted)
    postgres_max_connections: int = 4
    signing_key_file: Path | None = None


def _text(value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"expected a non-empty string, got {value!r}")
    return value.strip()


def _choice(kind: type[enum.StrEnum]) -> Callable[[object], Any]:
    def parse(value: object) -> Any:
        text = _text(value).lower()
        try:
            return kind(text)
        except ValueError:
            have = " | ".join(repr(m.value) for m in kind)
            raise ValueError(f"expected {have}, got {value!r}") from None

    return parse


def _endpoint(value: object) -> str:
    text = _text(value).rstrip("/")
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"expected an http(s):// URL, got {text!r}")
    if parts.username or parts.password or parts.query or parts.fragment:
        raise ValueError("the endpoint carries no credentials, query or fragment")
    return text


def _bucket(value: object) -> str:
    text = _text(value)
    if not 3 <= len(text) <= 63 or not all(c.isalnum() or c in ".-_" for c in text):
        raise ValueError(f"expected a bucket name (3-63 letters, digits, . - _), got {text!r}")
    return text


def _prefix(value: object) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {value!r}")
    text = value.strip().lstrip("/")
    if text and not text.endswith("/"):
        text += "/"
    return text


def _postgres_url(value: object) -> str:
    text = _text(value)
    if urlsplit(text).scheme not in ("postgresql", "postgres"):
        raise ValueError("expected a postgresql:// URL")
    return text


def _bool(value: object) -> bool:
    if isinstance(value, bool):
        return value
    text = _text(value).lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"expected true or false, got {value!r}")


def _int_between(low: int, high: int) -> Callable[[object], int]:
    def parse(value: object) -> int:
        if isinstance(value, bool) or not isinstance(value, int | str):
            raise ValueError(f"expected an integer from {low} to {high}, got {value!r}")
        try:
            number = int(value)
        except ValueError:
            raise ValueError(f"expected an integer from {low} to {high}, got {value!r}") from None
        if not low <= number <= high:
            raise ValueError(f"expected an integer from {low} to {high}, got {value!r}")
        return number

    return parse


PARSERS: Final[Mapping[str, Callable[[object], Any]]] = {
    "backend": _choice(BlobBackend),
    "directory": lambda v: Path(_text(v)).expanduser().absolute(),
    "s3_endpoint": _endpoint,
    "s3_bucket": _bucket,
    "s3_region": _text,
    "s3_prefix": _prefix,
    "s3_access_key_id": _text,
    "s3_secret_access_key": _text,
    "s3_credentials_file": lambda v: Path(_text(v)).expanduser(),
    "s3_profile": _text,
    "s3_addressing": _choice(S3Addressing),
    "s3_part_size_mib": _int_between(5, 512),
    "s3_max_connections": _int_between(1, 256),
    "presign_direct": _bool,
    "postgres_url": _postgres_url,
    "postgres_max_connections": _int_between(1, 64),
    "signing_key_file": lambda v: Path(_text(v)).expanduser().absolute(),
}


def _read_credentials(path: Path, profile: str) -> tuple[str, str]:
    parser = configparser.ConfigParser(interpolation=None)
    try:
        with path.open(encoding="utf-8") as file:
            parser.read_file(file)
    except OSError as exc:
        raise ValueError(f"blobs.s3_credentials_file: cannot read {path}: {exc.strerror}") from None
    except configparser.Error as exc:
        raise ValueError(f"blobs.s3_credentials_file: {path} is not an INI file: {exc}") from None
    if not parser.has_section(profile):
        raise ValueError(f"blobs.s3_credentials_file: {path} has no [{profile}] section")
    section = parser[profile]
    key_id = section.get("aws_access_key_id", "").strip()
    secret = section.get("aws_secret_access_key", "").strip()
    if not key_id or not secret:
        raise ValueError(
            f"blobs.s3_credentials_file: [{profile}] of {path} needs aws_access_key_id and"
            " aws_secret_access_key"
        )
    return key_id, secret


def build(values: Mapping[str, Any], *, database_url: str | None = None) -> BlobSettings:
    """The settings from parsed values keyed without the ``blobs.`` prefix; a `ValueError`
    names what is missing or contradictory for the chosen backend."""
    fields = dict(values)
    credentials = fields.pop("s3_credentials_file", None)
    profile = fields.pop("s3_profile", "default")
    if credentials is not None:
        if "s3_access_key_id" in fields or "s3_secret_access_key" in fields:
            raise ValueError(
                "blobs: give s3_credentials_file or s3_access_key_id/s3_secret_access_key, not both"
            )
        fields["s3_access_key_id"], fields["s3_secret_access_key"] = _read_credentials(
            credentials, profile
        )
    settings = BlobSettings(**fields)
    backend = settings.backend
    if backend is BlobBackend.S3:
        if settings.s3_bucket is None:
            raise ValueError('blobs.backend = "s3" needs blobs.s3_bucket')
        if (settings.s3_access_key_id is None) != (settings.s3_secret_access_key is None):
            raise ValueError("blobs.s3_access_key_id and s3_secret_access_key go together")
        if settings.s3_access_key_id is None:
            raise ValueError(
                'blobs.backend = "s3" needs credentials: s3_credentials_file, or'
                " s3_access_key_id and s3_secret_access_key (DEVYARD_BLOBS_S3_*)"
            )
    elif any(k.startswith("s3_") or k == "presign_direct" for k in values):
        raise ValueError(f'blobs: s3_* keys and presign_direct need backend = "s3", not {backend}')
    if backend is BlobBackend.POSTGRES:
        if settings.postgres_url is None and database_url is None:
            raise ValueError(
                'blobs.backend = "postgres" needs database_url (or blobs.postgres_url)'
            )
    elif "postgres_url" in values or "postgres_max_connections" in values:
        raise ValueError(f'blobs: postgres_* keys need backend = "postgres", not {backend}')
    if backend is not BlobBackend.LOCAL and settings.directory is not None:
        raise ValueError(f'blobs.directory is for backend = "local", not {backend}')
    return settings


# ---- opening ---------------------------------------------------------------------------------


def sibling_store(store: BlobStore, namespace: str) -> BlobStore:
    """Another namespace of *store*'s backend (same directory parent, bucket or database)."""
    if isinstance(store, LocalBlobStore):
        return LocalBlobStore(store.root.parent / namespace)
    sibling: Callable[[str], BlobStore] | None = getattr(store, "sibling", None)
    if sibling is None:
        raise TypeError(f"{store!r} has no namespaces")
    return sibling(namespace)


@asynccontextmanager
async def open_blob_store(
    settings: BlobSettings, *, data_dir: Path, database_url: str | None
) -> AsyncIterator[BlobStore]:
    """The ``blobs`` namespace of the configured backend, open until the block ends."""
    if settings.backend is BlobBackend.S3:
        from .s3 import open_s3_store  # noqa: PLC0415 - boto3 is the optional extra "s3"

        async with open_s3_store(settings, ASSETS_NAMESPACE) as s3:
            yield s3
    elif settings.backend is BlobBackend.POSTGRES:
        from .pg_large_object import open_pg_store  # noqa: PLC0415

        url = settings.postgres_url or database_url
        assert url is not None  # build() checked
        async with open_pg_store(
            url, ASSETS_NAMESPACE, max_connections=settings.postgres_max_connections
        ) as pg:
            yield pg
    else:
        yield LocalBlobStore((settings.directory or data_dir) / ASSETS_NAMESPACE)


def _signing_key(settings: BlobSettings, data_dir: Path) -> bytes:
    if settings.signing_key_file is None:
        return load_signing_key(data_dir)
    return load_or_create_key(settings.signing_key_file, SIGNING_KEY_BYTES)


@asynccontextmanager
async def open_asset_blobs(
    store: Store,
    settings: BlobSettings,
    *,
    data_dir: Path,
    database_url: str | None,
    orphan_grace: float,
    sweep_interval: float,
) -> AsyncIterator[AssetBlobs]:
    """The server's `AssetBlobs` over the configured backend (the signing key in the data
    dir); with ``presign_direct`` its download URLs are the S3 endpoint's presigned URLs."""
    async with open_blob_store(settings, data_dir=data_dir, database_url=database_url) as blobs:
        presign: Callable[[str, int], str] | None = None
        if settings.presign_direct:
            presign = getattr(blobs, "presigned_download_url", None)
        yield AssetBlobs(
            store,
            blobs,
            UrlSigner(await trio.to_thread.run_sync(_signing_key, settings, data_dir)),
            orphan_grace=orphan_grace,
            sweep_interval=sweep_interval,
            presign=presign,
        )
