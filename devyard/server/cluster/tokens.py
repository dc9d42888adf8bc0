"""Host tokens shared by the replicas of a cluster (docs/scale-out.md "Host tokens").

On one server the hashes of the host tokens live in ``DATA_DIR/host-tokens``. Replicas each
have their own data dir, so a host could link only to the replica whose file held its token.
Clustered (`clustered`), they live in the database every replica shares (``host_tokens``,
`store.sql_host_tokens`), and `SharedHostTokens` reads them there:

- a link attempt looks its key id up (one indexed read); a revocation or rotation on any
  replica, or by ``devyard admin host-token``, refuses the next link attempt everywhere;
- every replica's `edge.tokens.drop_revoked_hosts` reads the live key ids every few seconds,
  so the live link of a revoked host is closed within that, whichever replica holds it (the
  same rule as on one server); a rotated host's link stays up;
- the data-dir file is imported at start (`open_host_tokens`): every ``key id -> hash`` whose
  key id the table has never seen, so a server moving to PostgreSQL keeps its hosts. A key id
  missing from the table is also looked up in this replica's file at its link attempt (a
  token made with the file while the replica ran). A revoked token keeps a tombstone row, so
  no copy of an old file brings it back; the table is the truth, the file only a source.

The edge calls `verify` in a worker thread (links.py); here it is a bridge back into trio
(`trio.from_thread.run`) to the async lookup. A database that does not answer is
`HostTokensUnavailable`: 503 to the host daemon, which retries (never the permanent 401).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Final

import trio

from ..config import ServerConfig
from ..edge.tokens import (
    HOST_TOKENS_FILE,
    HostTokens,
    HostTokensUnavailable,
    host_id_of,
    key_id_of,
    new_host_token,
    parse_host_token,
    rotated_token,
    same_digest,
    token_digest,
)
from ..store.errors import StoreUnavailable
from ..store.postgres import open_postgres_database
from ..store.sql_host_tokens import SqlHostTokens
from .serve import clustered

__all__ = ["SharedHostTokens", "open_host_tokens"]

log = logging.getLogger(__name__)

_POOL: Final = 2  # link attempts and the revocation checks: short reads


class SharedHostTokens(HostTokens):
    """The host tokens of a cluster, in the ``host_tokens`` table; *path* is this replica's
    data-dir file, an import source only."""

    def __init__(self, path: Path, rows: SqlHostTokens) -> None:
        super().__init__(path)
        self.rows = rows

    def __repr__(self) -> str:
        return f"SharedHostTokens({self.rows!r})"

    async def import_file(self) -> int:
        """Imports the entries of the data-dir file the table has never seen; how many."""
        try:
            entries = await trio.to_thread.run_sync(self.file_entries)
        except OSError as exc:
            log.warning("cannot read %s to import its host tokens: %s", self.path, exc.strerror)
            return 0
        try:
            return await self.rows.import_entries(entries)
        except StoreUnavailable as exc:
            raise HostTokensUnavailable(f"cannot import the host tokens: {exc}") from exc

    # ---- the async face ----------------------------------------------------------------------

    async def check(self, token: str) -> str | None:
        key_id = parse_host_token(token)
        if key_id is None:
            await trio.lowlevel.checkpoint()
            return None
        try:
            row = await self.rows.get(key_id)
            if row is None and key_id in await trio.to_thread.run_sync(self._file_or_empty):
                await self.import_file()  # made with the file while this replica ran
                row = await self.rows.get(key_id)
        except StoreUnavailable as exc:
            raise HostTokensUnavailable(f"cannot read the host tokens: {exc}") from exc
        if row is None or row.revoked or not same_digest(row.token_hash, token):
            return None
        return host_id_of(key_id)

    def _file_or_empty(self) -> dict[str, str]:
        try:
            return self.file_entries()
        except OSError:
            return {}

    async def live_host_ids(self) -> list[str]:
        try:
            return [host_id_of(k) for k in await self.rows.live_key_ids()]
        except StoreUnavailable as exc:
            raise HostTokensUnavailable(f"cannot read the host tokens: {exc}") from exc

    async def create(self) -> tuple[str, str]:
        key_id, token = new_host_token()
        await self.rows.add(key_id, token_digest(token))
        return host_id_of(key_id), token

    async def revoke_host(self, host_id: str) -> bool:
        return await self.rows.revoke(key_id_of(host_id))

    async def rotate_host(self, host_id: str) -> str | None:
        key_id = key_id_of(host_id)
        token = rotated_token(key_id)
        return token if await self.rows.rotate(key_id, token_digest(token)) else None

    # ---- the blocking face: from a worker thread of this trio run ----------------------------

    def verify(self, token: str) -> str | None:
        return trio.from_thread.run(self.check, token)

    def host_ids(self) -> list[str]:
        return trio.from_thread.run(self.live_host_ids)

    def revoke(self, host_id: str) -> bool:
        return trio.from_thread.run(self.revoke_host, host_id)

    def rotate(self, host_id: str) -> str | None:
        return trio.from_thread.run(self.rotate_host, host_id)


@asynccontextmanager
async def open_host_tokens(
    config: ServerConfig, *, import_file: bool = True
) -> AsyncIterator[HostTokens]:
    """The host tokens of *config*: the data-dir file on a single server; clustered, the
    shared table over a small pool of its own (migrated already by the store's opening),
    with the data-dir file imported first unless *import_file* is false."""
    path = config.data_dir / HOST_TOKENS_FILE
    if not clustered(config) or config.database_url is None:
        await trio.lowlevel.checkpoint()
        yield HostTokens(path)
        return
    async with open_postgres_database(config.database_url, max_connections=_POOL) as db:
        tokens = SharedHostTokens(path, SqlHostTokens(db))
        if import_file and (imported := await tokens.import_file()):
            log.info("imported %d host token(s) from %s into the database", imported, path)
        yield tokens
