"""The schema, as the ordered list of migrations that builds it. Data only; `migrate.py`
applies it.

Rules (docs/store.md says why):

- Append only. A released migration is never edited: the runner stores a checksum of each
  applied migration and refuses to start on a mismatch.
- One SQL text for both dialects. Where they differ, a migration uses a ``{placeholder}``
  from `_TYPES`, or gives a per-dialect statement explicitly with `Dialect`.
- Each migration is a tuple of single statements (no ``;`` splitting, no ``executescript``,
  which would commit behind the runner's transaction).
- Ids are TEXT (``org_01J...``), timestamps are ``{timestamp}`` (TIMESTAMPTZ on PostgreSQL,
  ISO-8601 UTC text on SQLite, which sorts correctly as text), booleans are BOOLEAN.
- SQLite cannot ALTER a constraint: a later migration that must, rebuilds the table (create
  new, copy, drop, rename) with foreign keys checked by ``PRAGMA foreign_key_check``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Final

import attrs

from .database import Dialect
from .instance_runs import RUN_STATEMENTS
from .order_delivery import DELIVERY_STATEMENTS
from .schema_cluster import CLUSTER_STATEMENTS
from .schema_host_tokens import HOST_TOKEN_STATEMENTS
from .schema_quick import QUICK_DEADLINE_STATEMENTS
from .schema_replicas import REPLICA_SET_STATEMENTS

__all__ = ["MIGRATIONS", "Migration"]

_TYPES: Final[Mapping[Dialect, Mapping[str, str]]] = {
    Dialect.SQLITE: {"timestamp": "TEXT"},
    Dialect.POSTGRESQL: {"timestamp": "TIMESTAMPTZ"},
}

Statement = str | Mapping[Dialect, str]


@attrs.frozen
class Migration:
    version: int
    name: str
    statements: tuple[Statement, ...]

    def render(self, dialect: Dialect) -> list[str]:
        """The statements to run on ``dialect``, placeholders filled."""
        out = []
        for statement in self.statements:
            text = statement if isinstance(statement, str) else statement[dialect]
            out.append(text.format_map(_TYPES[dialect]).strip())
        return out

    def checksum(self, dialect: Dialect) -> str:
        return hashlib.sha256("\n;\n".join(self.render(dialect)).encode()).hexdigest()


MIGRATIONS: Final[tuple[Migration, ...]] = (
    Migration(
        1,
        "identity: organizations, users, memberships, API keys, feedback",
        (
            """
            CREATE TABLE organizations (
                id                   TEXT PRIMARY KEY,
                name                 TEXT NOT NULL UNIQUE,
                created_at           {timestamp} NOT NULL,
                inactivity_timeout_s INTEGER NOT NULL DEFAULT 600
                                     CHECK (inactivity_timeout_s > 0),
                iphone_duo_enabled   BOOLEAN NOT NULL DEFAULT FALSE
            )
            """,
            """
            CREATE TABLE users (
                id         TEXT PRIMARY KEY,
                name       TEXT NOT NULL UNIQUE,
                email      TEXT UNIQUE,
                created_at {timestamp} NOT NULL
            )
            """,
            """
            CREATE TABLE memberships (
                org_id     TEXT NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
                user_id    TEXT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
                role       TEXT NOT NULL CHECK (role IN ('admin', 'member', 'viewer')),
                created_at {timestamp} NOT NULL,
                PRIMARY KEY (org_id, user_id)
            )
            """,
            "CREATE INDEX memberships_by_user ON memberships (user_id)",
            """
            CREATE TABLE api_keys (
                id           TEXT PRIMARY KEY,
                org_id       TEXT NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
                user_id      TEXT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
                lookup_id    TEXT NOT NULL UNIQUE,
                secret_hash  TEXT NOT NULL,
                name         TEXT NOT NULL,
                read_only    BOOLEAN NOT NULL DEFAULT FALSE,
                created_at   {timestamp} NOT NULL,
                last_used_at {timestamp},
                revoked_at   {timestamp}
            )
            """,
            "CREATE INDEX api_keys_by_org ON api_keys (org_id, id)",
            "CREATE INDEX api_keys_by_user ON api_keys (user_id)",
            """
            CREATE TABLE feedback (
                id         TEXT PRIMARY KEY,
                kind       TEXT NOT NULL CHECK (kind IN ('feedback', 'support')),
                message    TEXT NOT NULL,
                email      TEXT,
                org_id     TEXT REFERENCES organizations (id) ON DELETE SET NULL,
                user_id    TEXT REFERENCES users (id) ON DELETE SET NULL,
                created_at {timestamp} NOT NULL
            )
            """,
            "CREATE INDEX feedback_by_org ON feedback (org_id)",
        ),
    ),
    Migration(
        2,
        "instances: one table for the four collections, labels beside it for selectors",
        (
            """
            CREATE TABLE instances (
                id                 TEXT PRIMARY KEY,
                org_id             TEXT NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
                platform           TEXT NOT NULL
                                   CHECK (platform IN ('ios', 'android', 'xcode', 'gradle')),
                region             TEXT NOT NULL,
                host_id            TEXT,
                display_name       TEXT,
                labels             TEXT NOT NULL,
                labels_key         TEXT NOT NULL,
                spec               TEXT NOT NULL,
                state              TEXT NOT NULL
                                   CHECK (state IN ('creating', 'assigned', 'ready', 'terminated')),
                error_message      TEXT,
                termination_reason TEXT,
                token              TEXT UNIQUE,
                stream_token       TEXT UNIQUE,
                created_at         {timestamp} NOT NULL,
                assigned_at        {timestamp},
                ready_at           {timestamp},
                terminated_at      {timestamp}
            )
            """,
            "CREATE INDEX instances_by_org ON instances (org_id, platform, id)",
            "CREATE INDEX instances_by_labels ON instances (org_id, platform, region, labels_key)",
            "CREATE INDEX instances_by_state ON instances (state, host_id)",
            """
            CREATE TABLE instance_labels (
                instance_id TEXT NOT NULL REFERENCES instances (id) ON DELETE CASCADE,
                key         TEXT NOT NULL,
                value       TEXT NOT NULL,
                PRIMARY KEY (instance_id, key)
            )
            """,
            "CREATE INDEX instance_labels_by_pair ON instance_labels (key, value, instance_id)",
        ),
    ),
    Migration(
        3,
        "assets: named uploads per organization, bytes in the blob store",
        (
            """
            CREATE TABLE assets (
                id          TEXT PRIMARY KEY,
                org_id      TEXT NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
                name        TEXT NOT NULL,
                os          TEXT CHECK (os IN ('ios', 'android')),
                created_at  {timestamp} NOT NULL,
                ttl_s       INTEGER CHECK (ttl_s > 0),
                expires_at  {timestamp},
                md5         TEXT,
                size        BIGINT CHECK (size >= 0),
                blob_key    TEXT,
                uploaded_at {timestamp},
                UNIQUE (org_id, name)
            )
            """,
            "CREATE INDEX assets_by_org ON assets (org_id, id)",
            "CREATE INDEX assets_by_expiry ON assets (expires_at)",
        ),
    ),
    Migration(
        4,
        "scoped tokens (hashed, expiring, revocable) and usage records of ended instances",
        (
            """
            CREATE TABLE scoped_tokens (
                id          TEXT PRIMARY KEY,
                org_id      TEXT NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
                api_key_id  TEXT NOT NULL REFERENCES api_keys (id) ON DELETE CASCADE,
                user_id     TEXT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
                lookup_id   TEXT NOT NULL UNIQUE,
                secret_hash TEXT NOT NULL,
                scopes      TEXT NOT NULL,
                created_at  {timestamp} NOT NULL,
                expires_at  {timestamp} NOT NULL,
                revoked_at  {timestamp}
            )
            """,
            "CREATE INDEX scoped_tokens_by_org ON scoped_tokens (org_id, id)",
            "CREATE INDEX scoped_tokens_by_key ON scoped_tokens (api_key_id)",
            """
            CREATE TABLE usage_records (
                instance_id        TEXT PRIMARY KEY,
                org_id             TEXT NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
                platform           TEXT NOT NULL,
                region             TEXT NOT NULL,
                labels             TEXT NOT NULL,
                termination_reason TEXT,
                started_at         {timestamp} NOT NULL,
                ready_at           {timestamp},
                stopped_at         {timestamp} NOT NULL,
                billed_minutes     INTEGER NOT NULL CHECK (billed_minutes >= 0)
            )
            """,
            "CREATE INDEX usage_records_by_start"
            " ON usage_records (org_id, started_at, instance_id)",
            """
            CREATE TABLE usage_labels (
                instance_id TEXT NOT NULL REFERENCES usage_records (instance_id) ON DELETE CASCADE,
                key         TEXT NOT NULL,
                value       TEXT NOT NULL,
                PRIMARY KEY (instance_id, key)
            )
            """,
            "CREATE INDEX usage_labels_by_pair ON usage_labels (key, value, instance_id)",
        ),
    ),
    Migration(
        5,
        "tunnels: persistent tunnels, their selectors and hashed tokens",
        (
            """
            CREATE TABLE tunnels (
                id               TEXT PRIMARY KEY,
                org_id           TEXT NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
                name             TEXT NOT NULL,
                selectors        TEXT NOT NULL,
                selector_version INTEGER NOT NULL CHECK (selector_version > 0),
                ephemeral        BOOLEAN NOT NULL DEFAULT FALSE,
                token_lookup     TEXT NOT NULL UNIQUE,
                token_hash       TEXT NOT NULL,
                token_expires_at {timestamp} NOT NULL,
                token_issued_at  {timestamp} NOT NULL,
                created_at       {timestamp} NOT NULL,
                UNIQUE (org_id, name)
            )
            """,
            "CREATE INDEX tunnels_by_org ON tunnels (org_id, id)",
        ),
    ),
    Migration(
        6,
        "audit events: what an organization is told about its credentials (leaked tokens)",
        (
            """
            CREATE TABLE audit_events (
                id         TEXT PRIMARY KEY,
                org_id     TEXT NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
                kind       TEXT NOT NULL,
                subject    TEXT,
                detail     TEXT NOT NULL,
                created_at {timestamp} NOT NULL
            )
            """,
            "CREATE INDEX audit_events_by_org ON audit_events (org_id, id)",
        ),
    ),
    Migration(
        7,
        "organizations: deleting_at marks a deletion under way (resumed after a crash)",
        ("ALTER TABLE organizations ADD COLUMN deleting_at {timestamp}",),
    ),
    Migration(
        8,
        "build logs: each exec of a build instance, kept after the instance (store/build_logs.py)",
        (
            """
            CREATE TABLE build_logs (
                instance_id TEXT NOT NULL,
                exec_id     TEXT NOT NULL,
                org_id      TEXT NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
                command     TEXT NOT NULL,
                status      TEXT NOT NULL,
                exit_code   INTEGER,
                started_at  {timestamp},
                finished_at {timestamp},
                duration_ms BIGINT,
                error       TEXT,
                blob_key    TEXT,
                log_size    BIGINT NOT NULL,
                artifacts   TEXT NOT NULL,
                created_at  {timestamp} NOT NULL,
                PRIMARY KEY (instance_id, exec_id)
            )
            """,
            "CREATE INDEX build_logs_by_org ON build_logs (org_id, instance_id)",
        ),
    ),
    Migration(
        9,
        "accounts: operators, invitations (hashed tokens), verified email domains",
        (
            """
            CREATE TABLE operators (
                user_id    TEXT PRIMARY KEY REFERENCES users (id) ON DELETE CASCADE,
                created_at {timestamp} NOT NULL
            )
            """,
            """
            CREATE TABLE invitations (
                id          TEXT PRIMARY KEY,
                org_id      TEXT NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
                email       TEXT NOT NULL,
                role        TEXT NOT NULL CHECK (role IN ('admin', 'member', 'viewer')),
                token_hash  TEXT NOT NULL UNIQUE,
                invited_by  TEXT REFERENCES users (id) ON DELETE SET NULL,
                created_at  {timestamp} NOT NULL,
                expires_at  {timestamp} NOT NULL,
                accepted_at {timestamp},
                accepted_by TEXT REFERENCES users (id) ON DELETE SET NULL,
                revoked_at  {timestamp}
            )
            """,
            "CREATE INDEX invitations_by_org ON invitations (org_id, email)",
            """
            CREATE TABLE organization_domains (
                org_id      TEXT NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
                domain      TEXT NOT NULL,
                txt_token   TEXT NOT NULL,
                created_at  {timestamp} NOT NULL,
                verified_at {timestamp},
                PRIMARY KEY (org_id, domain)
            )
            """,
            "CREATE INDEX organization_domains_by_domain ON organization_domains (domain)",
        ),
    ),
    Migration(
        10,
        "accounts: browser sessions (hashed cookie secret, CSRF token); audit actor, address",
        (
            """
            CREATE TABLE browser_sessions (
                id          TEXT PRIMARY KEY,
                org_id      TEXT NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
                user_id     TEXT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
                api_key_id  TEXT NOT NULL REFERENCES api_keys (id) ON DELETE CASCADE,
                lookup_id   TEXT NOT NULL UNIQUE,
                secret_hash TEXT NOT NULL,
                csrf_hash   TEXT NOT NULL,
                created_at  {timestamp} NOT NULL,
                expires_at  {timestamp} NOT NULL,
                user_agent  TEXT,
                revoked_at  {timestamp}
            )
            """,
            "CREATE INDEX browser_sessions_by_org ON browser_sessions (org_id, user_id, id)",
            "CREATE INDEX browser_sessions_by_key ON browser_sessions (api_key_id)",
            "ALTER TABLE audit_events ADD COLUMN actor TEXT",
            "ALTER TABLE audit_events ADD COLUMN address TEXT",
            "CREATE INDEX audit_events_by_actor ON audit_events (org_id, actor, id)",
        ),
    ),
    Migration(
        11,
        "accounts: OIDC connections (client secret sealed with the data dir's key)",
        (
            """
            CREATE TABLE oidc_connections (
                org_id          TEXT PRIMARY KEY
                                REFERENCES organizations (id) ON DELETE CASCADE,
                issuer          TEXT NOT NULL,
                client_id       TEXT NOT NULL,
                allowed_domains TEXT NOT NULL,
                default_role    TEXT NOT NULL
                                CHECK (default_role IN ('admin', 'member', 'viewer')),
                secret_sealed   TEXT,
                created_at      {timestamp} NOT NULL,
                updated_at      {timestamp} NOT NULL
            )
            """,
        ),
    ),
    Migration(
        12,
        "billing: accounts (provider customer, unpaid), subscriptions, processed webhook events",
        (
            """
            CREATE TABLE billing_accounts (
                org_id          TEXT PRIMARY KEY
                                REFERENCES organizations (id) ON DELETE CASCADE,
                provider        TEXT NOT NULL,
                customer_id     TEXT UNIQUE,
                email           TEXT,
                enabled_at      {timestamp} NOT NULL,
                unpaid          BOOLEAN NOT NULL,
                unpaid_since    {timestamp},
                payment_version BIGINT NOT NULL
            )
            """,
            """
            CREATE TABLE subscriptions (
                id                 TEXT PRIMARY KEY,
                org_id             TEXT NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
                provider           TEXT NOT NULL,
                plan_tid           TEXT,
                price_id           TEXT,
                status             TEXT NOT NULL,
                current_period_end {timestamp},
                scheduled_plan_tid TEXT,
                scheduled_at       {timestamp},
                schedule_id        TEXT,
                version            BIGINT NOT NULL,
                created_at         {timestamp} NOT NULL,
                updated_at         {timestamp} NOT NULL
            )
            """,
            "CREATE INDEX subscriptions_by_org ON subscriptions (org_id, created_at)",
            """
            CREATE TABLE billing_events (
                provider    TEXT NOT NULL,
                event_id    TEXT NOT NULL,
                kind        TEXT NOT NULL,
                outcome     TEXT,
                received_at {timestamp} NOT NULL,
                PRIMARY KEY (provider, event_id)
            )
            """,
        ),
    ),
    Migration(
        13,
        "accounts: single sign-on logins in flight (hashed state), support answers",
        (
            """
            CREATE TABLE oidc_logins (
                id              TEXT PRIMARY KEY,
                org_id          TEXT NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
                state_hash      TEXT NOT NULL UNIQUE,
                browser_hash    TEXT NOT NULL,
                nonce_hash      TEXT NOT NULL UNIQUE,
                verifier_sealed TEXT NOT NULL,
                return_to       TEXT NOT NULL,
                created_at      {timestamp} NOT NULL,
                expires_at      {timestamp} NOT NULL,
                used_at         {timestamp}
            )
            """,
            "CREATE INDEX oidc_logins_by_expiry ON oidc_logins (expires_at)",
            """
            CREATE TABLE support_answers (
                id          TEXT PRIMARY KEY,
                feedback_id TEXT NOT NULL REFERENCES feedback (id) ON DELETE CASCADE,
                message     TEXT NOT NULL,
                answered_by TEXT REFERENCES users (id) ON DELETE SET NULL,
                emailed     BOOLEAN NOT NULL,
                created_at  {timestamp} NOT NULL
            )
            """,
            "CREATE INDEX support_answers_by_feedback ON support_answers (feedback_id, id)",
        ),
    ),
    Migration(
        14,
        "cluster: replica and host leases, link holders, capacity reservations",
        CLUSTER_STATEMENTS,
    ),
    Migration(
        15,
        "build cache: the organization build cache's entries, size and last use (h17cache)",
        (
            """
            CREATE TABLE build_cache (
                org_id    TEXT NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
                cache_key TEXT NOT NULL,
                size      BIGINT NOT NULL,
                used_at   {timestamp} NOT NULL,
                PRIMARY KEY (org_id, cache_key)
            )
            """,
            "CREATE INDEX build_cache_by_use ON build_cache (org_id, used_at)",
            "CREATE INDEX build_cache_by_idle ON build_cache (used_at)",
        ),
    ),
    Migration(
        16,
        "instances: who created each (metadata.createdBy; the console's instance tables)",
        ("ALTER TABLE instances ADD COLUMN created_by TEXT",),
    ),
    Migration(
        17,
        "cluster: each replica's advertised link address, for hosts' second links (c23links)",
        REPLICA_SET_STATEMENTS,
    ),
    Migration(
        18,
        "host tokens: hashes shared by the replicas of a cluster (c23tokens)",
        HOST_TOKEN_STATEMENTS,
    ),
    Migration(
        19,
        "cluster: quick tunnels' shared deletion deadlines (any replica deletes them; c23elect)",
        QUICK_DEADLINE_STATEMENTS,
    ),
    Migration(
        20,
        "instances: timers, owner and order as rows (any replica ends or adopts them; c23timers)",
        RUN_STATEMENTS,
    ),
    Migration(
        21,
        "instances: a start order's delivery between replicas in its row (no lost order)",
        DELIVERY_STATEMENTS,
    ),
)
