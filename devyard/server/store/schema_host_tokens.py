"""The statements of the shared host-token migration (issue 23, docs/scale-out.md "Host
tokens"): the hashes of the host tokens of a cluster of replicas, which one data directory can
no longer hold for all of them.

Data only, like `schema`. The table exists on both dialects (one schema text), but only a
clustered server (PostgreSQL with ``[cluster] enabled``) reads or writes it: a single server
keeps ``DATA_DIR/host-tokens`` (edge/tokens.py). A revoked token keeps its row with
``revoked_at`` set (a tombstone), so importing an old copy of a data-dir file never brings it
back.
"""

from __future__ import annotations

from typing import Final

__all__ = ["HOST_TOKEN_STATEMENTS"]

HOST_TOKEN_STATEMENTS: Final[tuple[str, ...]] = (
    """
    CREATE TABLE host_tokens (
        key_id     TEXT PRIMARY KEY,
        token_hash TEXT NOT NULL,
        created_at {timestamp} NOT NULL,
        rotated_at {timestamp},
        revoked_at {timestamp}
    )
    """,
)
