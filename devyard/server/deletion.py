"""Deleting an organization (issue 14 finding 4): nothing of it keeps running or keeps working.

Theory of operation. The organization row is marked ``deleting`` first; from then on the
store refuses every create in it (instances, tunnels, assets, API keys, scoped tokens: 409
``organization_deleting``), checked inside the create's own transaction (`store.org_guard`),
so a create that read the organization before the mark either committed before it (and the
sweeps below see its row) or is refused. Then, each step idempotent, in this order:

1. every live instance of it ends (UserRequested, "the organization was deleted"): the row
   first, then its host is told, so the host stops the device and frees the capacity; the
   sweep repeats until a pass finds no live instance;
2. every tunnel of it is deleted (the tunnel tokens stop working) and every connector of the
   organization gets the permanent ``tunnel-deleted`` refusal and is closed;
3. every asset's bytes, then its row, go (`AssetBlobs.delete`: a blob-store failure keeps the
   row, so the next attempt deletes it);
4. the row goes last, and with it (``ON DELETE CASCADE``) API keys, scoped tokens,
   memberships, the remaining instance rows and audit events.

A crash or a failed step leaves the organization ``deleting`` with its keys still working:
``DELETE /organizations/{id}`` again resumes it, and so does every server start
(`resume_deletions`). Nothing of another organization is read or written.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Final

from .blobs.base import BlobStoreError
from .blobs.service import AssetBlobs
from .instances import InstanceService
from .store import errors as store_errors
from .store.base import Organization, Store
from .tunnels import TunnelService

__all__ = ["OrganizationDeletion"]

log = logging.getLogger(__name__)

_ASSET_PAGE: Final = 100


class OrganizationDeletion:
    def __init__(
        self,
        store: Store,
        instances: InstanceService,
        tunnels: TunnelService,
        assets: AssetBlobs,
    ) -> None:
        self._store = store
        self._instances = instances
        self._tunnels = tunnels
        self._assets = assets

    def __repr__(self) -> str:
        return "<OrganizationDeletion>"

    async def delete(self, org_id: str) -> Organization:
        """Runs (or resumes) the deletion of *org_id*; returns the organization as it was.
        NotFound when it is gone; a store or blob-store error leaves it ``deleting``."""
        organization = await self._store.mark_organization_deleting(org_id)
        ended = await self._instances.end_organization(org_id)
        tunnels = await self._tunnels.end_organization(org_id)
        assets = 0
        while True:
            page = await self._store.list_assets(org_id, limit=_ASSET_PAGE)
            if not page:
                break
            for asset in page:
                try:
                    await self._assets.delete(org_id, asset.id)
                except store_errors.NotFound:
                    continue  # deleted meanwhile
                assets += 1
        with contextlib.suppress(store_errors.NotFound):  # a concurrent attempt finished
            await self._store.delete_organization(org_id)
        log.info(
            "organization %s deleted: %d instance(s) ended, %d tunnel(s), %d asset(s)",
            org_id,
            ended,
            tunnels,
            assets,
        )
        return organization

    async def resume_deletions(self) -> None:
        """Finishes the deletions a crash or a failure interrupted (at server start); one
        that fails again is logged and left for the next start or a client's retry."""
        for organization in await self._store.list_organizations():
            if not organization.deleting:
                continue
            log.warning("resuming the interrupted deletion of %s", organization.id)
            try:
                await self.delete(organization.id)
            except store_errors.NotFound:
                continue
            except (store_errors.StoreError, BlobStoreError):
                log.exception("the deletion of %s failed again", organization.id)
