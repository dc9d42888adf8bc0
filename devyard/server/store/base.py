"""The store interface: record types and the `Store` protocol every backend implements.

Everything above the store (the API, `devyard up`, the admin commands) codes against this
module only; the backends (`sqlite`, `postgres`) and the SQL live beside it.

Conventions, the same for every method:

- Ids are strings ``<kind>_<26 chars>`` made by `devyard.server.store.ids.new_id`; they sort
  by creation time. Timestamps are timezone-aware UTC `datetime`s set by the store's clock.
- Lookups that find nothing raise `errors.NotFound`; a write that would break a uniqueness
  rule raises `errors.Conflict`; an unreachable database raises `errors.StoreUnavailable`.
  The store never returns ``None`` for "missing".
- Methods that take an ``org_id`` next to another id act only inside that organization: an
  id from another organization is `NotFound`, which is what the API answers (404, not 403).
- No method receives or returns a plaintext secret. API keys arrive as a lookup id and a hash
  made by `devyard.server.store.tokens`; only `get_api_key_by_lookup` returns the hash.
- Every method is a trio checkpoint and honours cancellation: a cancelled call stops its
  query on the database server (see `threads.py`).

Regions and plans are not stored: they are deployment configuration and a static catalog,
owned by the server config (see docs/store.md).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Final, Protocol

import attrs

from .accounts import AccountStore
from .audit import AuditEvent
from .billing import BillingStore
from .instance_runs import RunRows

__all__ = [
    "DEFAULT_SETTINGS",
    "LIVE_STATES",
    "UNSET",
    "Affiliation",
    "ApiKey",
    "ApiKeyCredential",
    "Asset",
    "AuditEvent",
    "BucketSize",
    "Feedback",
    "FeedbackKind",
    "Instance",
    "InstanceState",
    "Member",
    "Membership",
    "Organization",
    "OrganizationSettings",
    "Platform",
    "Role",
    "ScopedToken",
    "ScopedTokenCredential",
    "Store",
    "TerminationReason",
    "Tunnel",
    "TunnelCredential",
    "Unset",
    "UsageBucket",
    "UsageFilter",
    "UsageRecord",
    "User",
]


class Unset(enum.Enum):
    """Type of `UNSET`: "leave this field as it is" where ``None`` is a real value."""

    UNSET = "UNSET"


UNSET: Final = Unset.UNSET


class Role(enum.StrEnum):
    """A user's role in one organization."""

    ADMIN = "admin"  # manages the organization, its members, keys and tunnels
    MEMBER = "member"  # uses devices, names tunnels when creating instances
    VIEWER = "viewer"  # reads only


class FeedbackKind(enum.StrEnum):
    FEEDBACK = "feedback"  # POST /feedback, anonymous allowed
    SUPPORT = "support"  # POST /organizations/{id}/support


@attrs.frozen
class OrganizationSettings:
    """Per-organization settings. A new setting is a new field with a default plus a
    migration adding its column."""

    inactivity_timeout_s: int = 600
    iphone_duo_enabled: bool = False


DEFAULT_SETTINGS: Final = OrganizationSettings()


@attrs.frozen
class Organization:
    id: str
    name: str
    created_at: datetime
    settings: OrganizationSettings = DEFAULT_SETTINGS
    # set once a deletion started: its instances, tunnels and assets are being ended; the row
    # (and with it keys, tokens, memberships) goes last (`OrganizationDeletion`)
    deleting: bool = False


@attrs.frozen
class User:
    id: str
    name: str  # unique; the key of /users/{userName}
    email: str | None  # unique when set
    created_at: datetime


@attrs.frozen
class Membership:
    org_id: str
    user_id: str
    role: Role
    created_at: datetime


@attrs.frozen
class Member:
    """A user of an organization, as listed for that organization."""

    user: User
    role: Role


@attrs.frozen
class Affiliation:
    """An organization a user belongs to, as listed for that user."""

    organization: Organization
    role: Role


@attrs.frozen
class ApiKey:
    """An API key's metadata. Never holds the secret nor its hash."""

    id: str  # public id, "key_..."; used to list and revoke
    org_id: str
    user_id: str  # the key acts as this user, with the user's role in org_id
    lookup_id: str  # the non-secret part of the plaintext key; see tokens.py
    name: str
    read_only: bool
    created_at: datetime
    last_used_at: datetime | None = None
    revoked_at: datetime | None = None

    @property
    def active(self) -> bool:
        return self.revoked_at is None


@attrs.frozen
class ApiKeyCredential:
    """What authentication needs: the key and the hash to verify the presented secret
    against (`tokens.verify_api_key`). Returned only by `Store.get_api_key_by_lookup`."""

    api_key: ApiKey
    secret_hash: str = attrs.field(repr=False)


@attrs.frozen
class KeyContext:
    """An API key with what a request's principal needs besides it, read in one transaction
    (`Store.get_api_key_context`): its user's role now, the user, the organization. The hash
    is empty when the key was found by id (a session's or a scoped token's key)."""

    credential: ApiKeyCredential
    role: Role
    user: User
    organization: Organization


@attrs.frozen
class Feedback:
    id: str
    kind: FeedbackKind
    message: str
    email: str | None
    org_id: str | None
    user_id: str | None
    created_at: datetime


@attrs.frozen
class ScopedToken:
    """A short-lived token limited to its scopes (docs/scoped-tokens.md). It acts in the
    organization of the API key that minted it, for that key's user, and dies with the key.
    Never holds the secret nor its hash."""

    id: str  # "stk_..."; used to revoke
    org_id: str
    api_key_id: str  # the minting key
    user_id: str  # the minting key's user
    lookup_id: str
    scopes: tuple[str, ...]
    created_at: datetime
    expires_at: datetime
    revoked_at: datetime | None = None


@attrs.frozen
class ScopedTokenCredential:
    """What authentication needs; returned only by `Store.get_scoped_token_by_lookup`."""

    token: ScopedToken
    secret_hash: str = attrs.field(repr=False)


@attrs.frozen
class UsageRecord:
    """The billing row of one ended instance, written in the transaction that terminated it
    (docs/analytics.md): started = created, billed minutes = ready to stop, rounded up."""

    instance_id: str
    org_id: str
    platform: str
    region: str
    labels: dict[str, str]
    started_at: datetime
    stopped_at: datetime
    billed_minutes: int
    ready_at: datetime | None = None
    termination_reason: str | None = None


@attrs.frozen
class UsageFilter:
    """Which usage rows a query selects; every bound given applies (``None``: unbounded).
    ``started_before`` is exclusive (the older ``to``), the others inclusive."""

    started_from: datetime | None = None
    started_until: datetime | None = None
    started_before: datetime | None = None
    stopped_from: datetime | None = None
    stopped_until: datetime | None = None
    labels: dict[str, str] = attrs.field(factory=dict)


class BucketSize(enum.StrEnum):
    HOUR = "hour"
    DAY = "day"


@attrs.frozen
class UsageBucket:
    start: datetime  # the bucket's first instant, UTC
    instances: int
    billed_minutes: int


class Platform(enum.StrEnum):
    """The instance collections; the value is the id prefix and the path's first word."""

    IOS = "ios"
    ANDROID = "android"
    XCODE = "xcode"
    GRADLE = "gradle"


class InstanceState(enum.StrEnum):
    CREATING = "creating"
    ASSIGNED = "assigned"
    READY = "ready"
    TERMINATED = "terminated"


LIVE_STATES: Final = frozenset(
    {InstanceState.CREATING, InstanceState.ASSIGNED, InstanceState.READY}
)


class TerminationReason(enum.StrEnum):
    USER_REQUESTED = "UserRequested"
    INACTIVITY_TIMEOUT = "InactivityTimeout"
    HARD_TIMEOUT = "HardTimeout"
    HOST_LOST = "HostLost"
    ERROR = "Error"


@attrs.frozen
class Instance:
    """One device instance. ``token`` / ``stream_token`` are the per-instance secrets: unlike
    API keys they are stored as issued (every read by a controlling credential shows them) and
    cleared when the instance terminates (docs/instances.md)."""

    id: str
    org_id: str
    platform: Platform
    region: str
    labels: dict[str, str]
    spec: dict[str, Any]
    state: InstanceState
    created_at: datetime
    display_name: str | None = None
    host_id: str | None = None
    error_message: str | None = None
    termination_reason: TerminationReason | None = None
    assigned_at: datetime | None = None
    ready_at: datetime | None = None
    terminated_at: datetime | None = None
    token: str | None = attrs.field(default=None, repr=False)
    stream_token: str | None = attrs.field(default=None, repr=False)
    created_by: str | None = None  # the user whose credential created it (None: older rows)

    @property
    def live(self) -> bool:
        return self.state in LIVE_STATES


@attrs.frozen
class Asset:
    """An uploaded file (an app, usually) of one organization, unique by name there. The bytes
    live in the blob store under ``blob_key``; a new upload writes a new key and switches the
    row to it (docs/assets.md)."""

    id: str  # "asset_<ULID>"
    org_id: str
    name: str
    os: str | None  # "ios" / "android"; None: every platform
    created_at: datetime
    ttl_s: int | None = None  # the asset expires this long after its last upload
    expires_at: datetime | None = None
    md5: str | None = None  # lower-case hex, once bytes were uploaded
    size: int | None = None
    blob_key: str | None = None
    uploaded_at: datetime | None = None


@attrs.frozen
class Tunnel:
    """A persistent tunnel (spec 2.5). The token is never here: only its lookup id (the
    non-secret handle) and, in `TunnelCredential`, its hash. ``selector_version`` grows by one
    on every selector change."""

    id: str
    org_id: str
    name: str  # unique in its organization, immutable
    selectors: tuple[str, ...]
    selector_version: int
    ephemeral: bool
    token_lookup: str
    token_expires_at: datetime
    token_issued_at: datetime
    created_at: datetime


@attrs.frozen
class TunnelCredential:
    """What tunnel-token authentication needs; returned only by `get_tunnel_by_token`."""

    tunnel: Tunnel
    token_hash: str = attrs.field(repr=False)


class Store(AccountStore, BillingStore, Protocol):
    """The persistent state of the control plane. Implementations: `SqlStore` over
    SQLite or PostgreSQL, obtained with `open_store`."""

    # -- health and lifetime --------------------------------------------------------------
    async def ping(self) -> None:
        """Round-trip to the database; raises `StoreUnavailable` if it cannot (/readyz)."""

    async def aclose(self) -> None:
        """Close every connection. Idempotent."""

    # -- organizations ---------------------------------------------------------------------
    async def create_organization(
        self, name: str, *, settings: OrganizationSettings = DEFAULT_SETTINGS
    ) -> Organization:
        """Conflict if the name is taken."""

    async def get_organization(self, org_id: str) -> Organization: ...

    async def get_organization_by_name(self, name: str) -> Organization: ...

    async def list_organizations(self) -> list[Organization]:
        """All organizations, oldest first."""

    async def update_organization(
        self,
        org_id: str,
        *,
        name: str | None = None,
        settings: OrganizationSettings | None = None,
    ) -> Organization:
        """Changes what is given (settings as a whole; merge with `attrs.evolve`)."""

    async def delete_organization(self, org_id: str) -> Organization:
        """Deletes it with its memberships and API keys; returns what was deleted."""

    async def mark_organization_deleting(self, org_id: str) -> Organization:
        """Marks a deletion under way (idempotent); NotFound when it is gone."""

    # -- users -----------------------------------------------------------------------------
    async def create_user(self, name: str, *, email: str | None = None) -> User:
        """Conflict if the name or the email is taken."""

    async def get_user(self, user_id: str) -> User: ...

    async def get_user_by_name(self, name: str) -> User: ...

    async def update_user(
        self, user_id: str, *, name: str | None = None, email: str | Unset | None = UNSET
    ) -> User:
        """``email=None`` clears the email; `UNSET` leaves it."""

    # -- memberships -----------------------------------------------------------------------
    async def add_membership(self, org_id: str, user_id: str, role: Role) -> Membership:
        """NotFound if either does not exist; Conflict if already a member."""

    async def get_membership(self, org_id: str, user_id: str) -> Membership: ...

    async def set_membership_role(self, org_id: str, user_id: str, role: Role) -> Membership: ...

    async def remove_membership(self, org_id: str, user_id: str) -> None:
        """Also revokes the user's API keys in that organization."""

    async def list_members(self, org_id: str) -> list[Member]:
        """NotFound if the organization does not exist; oldest membership first."""

    async def list_affiliations(self, user_id: str) -> list[Affiliation]:
        """The organizations of a user with the user's role in each, oldest first."""

    # -- API keys --------------------------------------------------------------------------
    async def create_api_key(
        self,
        *,
        org_id: str,
        user_id: str,
        name: str,
        lookup_id: str,
        secret_hash: str,
        read_only: bool = False,
    ) -> ApiKey:
        """Stores a key made by `tokens.new_api_key()`. NotFound unless the user is a member
        of the organization; Conflict if the lookup id is taken."""

    async def get_api_key(self, org_id: str, key_id: str) -> ApiKey:
        """Revoked keys included."""

    async def get_api_key_by_lookup(self, lookup_id: str) -> ApiKeyCredential:
        """For authentication: NotFound for unknown *and revoked* keys."""

    async def get_api_key_context(
        self, *, lookup_id: str | None = None, org_id: str = "", key_id: str = ""
    ) -> KeyContext:
        """For authentication, in one read: the key by *lookup_id* (unknown *and revoked*
        keys are NotFound), or by *org_id* and *key_id* (revoked keys included, no hash),
        with its user's membership, the user and the organization (NotFound if any is gone:
        a removal revokes the key)."""

    async def list_api_keys(
        self, org_id: str, *, user_id: str | None = None, include_revoked: bool = False
    ) -> list[ApiKey]:
        """Oldest first."""

    async def revoke_api_key(self, org_id: str, key_id: str) -> ApiKey:
        """Idempotent: revoking a revoked key returns it unchanged."""

    async def touch_api_key(self, key_id: str, *, at: datetime | None = None) -> None:
        """Records a use (``at`` defaults to the store's clock). Never moves it backwards;
        an unknown key is not an error (it may have been deleted since authentication)."""

    # -- feedback and support messages -----------------------------------------------------
    async def add_feedback(
        self,
        message: str,
        *,
        email: str | None = None,
        kind: FeedbackKind = FeedbackKind.FEEDBACK,
        org_id: str | None = None,
        user_id: str | None = None,
    ) -> Feedback: ...

    async def list_feedback(self, *, org_id: str | None = None) -> list[Feedback]:
        """Oldest first; all of them, or one organization's."""

    # -- scoped tokens (scoped_tokens.py) --------------------------------------------------
    async def create_scoped_token(
        self,
        *,
        org_id: str,
        api_key_id: str,
        scopes: tuple[str, ...],
        ttl_seconds: int,
        lookup_id: str,
        secret_hash: str,
    ) -> ScopedToken:
        """Stores a token made by `tokens.new_scoped_token()` for the user of the minting key.
        NotFound unless that key is active in the organization."""

    async def get_scoped_token(self, org_id: str, token_id: str) -> ScopedToken:
        """Revoked and expired tokens included."""

    async def get_scoped_token_by_lookup(self, lookup_id: str) -> ScopedTokenCredential:
        """For authentication: NotFound for unknown, revoked or expired tokens, and for tokens
        whose minting key was revoked."""

    async def revoke_scoped_token(self, org_id: str, token_id: str) -> ScopedToken:
        """Idempotent: revoking a revoked token returns it unchanged."""

    # -- usage (usage.py) ------------------------------------------------------------------
    async def list_usage(
        self,
        org_id: str,
        usage_filter: UsageFilter,
        *,
        limit: int = 100,
        starting_after: str | None = None,
    ) -> list[UsageRecord]:
        """Rows in (start, instance id) order, after the row of ``starting_after``."""

    async def usage_buckets(
        self, org_id: str, usage_filter: UsageFilter, size: BucketSize
    ) -> list[UsageBucket]:
        """Totals of the selected rows grouped by start time, only buckets that have rows."""

    async def billed_minutes_by_platform(
        self, org_id: str, usage_filter: UsageFilter
    ) -> dict[str, int]:
        """Billed minutes of the selected rows per platform (platforms with rows only)."""

    # -- instances (instances.py) ----------------------------------------------------------
    async def create_instance(
        self,
        *,
        org_id: str,
        platform: Platform,
        region: str,
        labels: dict[str, str],
        spec: dict[str, Any],
        display_name: str | None,
        token: str,
        stream_token: str,
        max_live: int | None = None,
        created_by: str | None = None,
        with_rows: RunRows | None = None,
    ) -> Instance:
        """A new instance in state ``creating``, id ``<platform>_<region>_<ulid>``;
        `LimitReached` when *max_live* instances of the platform are live already;
        *with_rows* runs in the same transaction (`instance_runs.rows_for_create`)."""

    async def get_instance(self, instance_id: str, *, org_id: str | None = None) -> Instance:
        """``org_id`` limits the lookup to one organization (another's is NotFound)."""

    async def list_instances(
        self,
        org_id: str,
        platform: Platform,
        *,
        labels: dict[str, str] | None = None,
        states: frozenset[InstanceState] | None = None,
        region: str | None = None,
        limit: int = 50,
        starting_after: str | None = None,
        ending_before: str | None = None,
    ) -> list[Instance]:
        """One page in id order; every label in ``labels`` must match, and the region
        when given."""

    async def find_live_instance(
        self, org_id: str, platform: Platform, region: str, labels: dict[str, str]
    ) -> Instance:
        """The oldest live instance with exactly these labels in this region, or NotFound."""

    async def list_live_instances(self, *, host_id: str | None = None) -> list[Instance]:
        """Every instance not terminated (on one host), oldest first."""

    async def transition_instance(
        self,
        instance_id: str,
        to: InstanceState,
        *,
        expected: frozenset[InstanceState],
        host_id: str | None = None,
        error_message: str | None = None,
        termination_reason: TerminationReason | None = None,
    ) -> Instance:
        """Moves the instance to ``to`` if its state is in ``expected`` (Conflict otherwise),
        stamping the state's timestamp; terminating clears the tokens."""

    async def get_instance_by_token(self, token: str) -> tuple[Instance, bool]:
        """The live instance a token opens and whether it is only the stream token."""

    # -- assets (assets.py) ----------------------------------------------------------------
    async def upsert_asset(
        self, *, org_id: str, name: str, os: str | None = None, ttl_s: int | None = None
    ) -> Asset:
        """The organization's asset called *name*, created if missing. A given ``os`` or
        ``ttl_s`` replaces the stored one (``ttl_s`` also restarts the expiry from now);
        ``None`` keeps it."""

    async def get_asset(self, asset_id: str, *, org_id: str | None = None) -> Asset:
        """``org_id`` limits the lookup to one organization (another's is NotFound)."""

    async def list_assets(
        self,
        org_id: str,
        *,
        name: str | None = None,
        name_prefix: str | None = None,
        limit: int = 50,
        starting_after: str | None = None,
    ) -> list[Asset]:
        """At most *limit* assets in id order, filtered by exact name and/or name prefix;
        only those after the id *starting_after*, when given."""

    async def delete_asset(self, org_id: str, asset_id: str) -> Asset:
        """Deletes the row and returns it (its ``blob_key`` is the caller's to delete)."""

    async def set_asset_blob(
        self, asset_id: str, *, blob_key: str, md5: str, size: int
    ) -> tuple[Asset, str | None]:
        """Points the asset at newly written bytes, restarting its ttl; returns the asset and
        the blob key it had before (to delete). NotFound if the asset was deleted meanwhile."""

    async def list_expired_assets(self, *, limit: int = 100) -> list[Asset]:
        """Assets whose expiry is past by the store's clock, soonest expired first."""

    # -- tunnels (tunnels.py) --------------------------------------------------------------
    async def create_tunnel(
        self,
        *,
        org_id: str,
        name: str,
        selectors: tuple[str, ...],
        ephemeral: bool,
        token_lookup: str,
        token_hash: str,
        token_expires_at: datetime,
    ) -> Tunnel:
        """Conflict (field ``name``) if the organization has a tunnel of that name."""

    async def get_tunnel(self, org_id: str, name: str) -> Tunnel: ...

    async def list_tunnels(self, org_id: str) -> list[Tunnel]:
        """Oldest first."""

    async def set_tunnel_selectors(
        self, org_id: str, name: str, selectors: tuple[str, ...]
    ) -> Tunnel:
        """Replaces the list as a whole and bumps ``selector_version``."""

    async def rotate_tunnel_token(
        self,
        org_id: str,
        name: str,
        *,
        token_lookup: str,
        token_hash: str,
        token_expires_at: datetime,
    ) -> Tunnel:
        """The old token stops matching at once (its hash is replaced)."""

    async def delete_tunnel(self, org_id: str, name: str) -> Tunnel:
        """Returns what was deleted."""

    async def get_tunnel_by_token(self, token_lookup: str) -> TunnelCredential:
        """For connector authentication: NotFound for an unknown lookup id."""

    # -- audit events (audit.py) -----------------------------------------------------------
    async def add_audit_event(
        self, *, org_id: str, kind: str, subject: str | None, detail: Mapping[str, Any]
    ) -> AuditEvent:
        """Records what the organization is told (no secrets in *detail*)."""

    async def list_audit_events(self, org_id: str, *, limit: int = 100) -> list[AuditEvent]:
        """Newest first, at most *limit* (capped at 500)."""
