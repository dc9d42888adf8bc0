"""`StoreInstanceDirectory`: what the edge asks about instances, answered from the store.

The edge's per-instance gateway and its egress streams need three things: may this token
reach this instance (`authorize`: the instance token, the stream token, a view token, or a
scoped token holding ``device:<id>:install`` or ``device:*:install``, which opens only the
install operation, ``POST {apiUrl}/apps``: `InstanceAccess.install_only`), where does this
host's egress for an instance go (`route`), and "client traffic reached it" (`touch`). The
first two are store reads plus the token rules; the third is written to the `Activity` the
instances service reads its inactivity timeouts from. Nothing here holds the instances service.
"""

from __future__ import annotations

import hmac
from typing import Final

from .. import artifact_urls, viewing
from ..hosts import AccessDenied, AccessReason, Activity, InstanceAccess, InstanceRoute
from ..store import errors as store_errors
from ..store import tokens
from ..store.base import Instance, InstanceState, Role, Store

__all__ = ["StoreInstanceDirectory"]

_ANY_INSTALL: Final = "device:*:install"
_DEVICE_ROLES: Final = frozenset({Role.ADMIN, Role.MEMBER})  # scopes.MINT_ROLE of device scopes


class StoreInstanceDirectory:
    """Implements `devyard.server.hosts.InstanceDirectory` over the store."""

    def __init__(self, store: Store, activity: Activity) -> None:
        self._store = store
        self._activity = activity

    def __repr__(self) -> str:
        return "<StoreInstanceDirectory>"

    async def _get(self, instance_id: str) -> Instance:
        try:
            return await self._store.get_instance(instance_id)
        except store_errors.NotFound:
            raise AccessDenied(AccessReason.UNKNOWN, f"no instance {instance_id}") from None

    async def authorize(self, instance_id: str, token: str) -> InstanceAccess:
        """May *token* reach the per-instance endpoints of *instance_id*?"""
        instance = await self._get(instance_id)
        if instance.state is InstanceState.TERMINATED:
            # Its tokens were cleared when it ended, so none can be checked: say only that it
            # is gone, never why (the reason is for callers of the API, who are checked).
            raise AccessDenied(AccessReason.GONE, f"instance {instance_id} was terminated")
        full = _same(token, instance.token)
        stream = _same(token, instance.stream_token)
        view = not (full or stream) and await self._viewer(instance, token)
        install = not (full or stream or view) and await self._installer(instance, token)
        if not (full or stream or view or install):
            raise AccessDenied(
                AccessReason.WRONG_TOKEN, f"the token does not open instance {instance_id}"
            )
        return InstanceAccess(
            instance_id=instance.id,
            host_id=_ready_host(instance),
            platform=instance.platform.value,
            stream_only=not (full or install),
            view_only=view,
            install_only=install,
        )

    async def authorize_signed(
        self, instance_id: str, rest: str, query: dict[str, str]
    ) -> InstanceAccess:
        """May the signed URL in *query* GET *rest* of *instance_id*'s ``apiUrl``?"""
        instance = await self._get(instance_id)
        if instance.state is InstanceState.TERMINATED or instance.token is None:
            raise AccessDenied(AccessReason.GONE, f"instance {instance_id} was terminated")
        if not artifact_urls.verify(instance.token, instance.id, rest, query):
            raise AccessDenied(
                AccessReason.WRONG_TOKEN,
                f"the signature does not open {rest!r} of instance {instance_id} (or expired)",
            )
        return InstanceAccess(
            instance_id=instance.id,
            host_id=_ready_host(instance),
            platform=instance.platform.value,
            stream_only=False,
            artifact_path=rest,
        )

    async def _installer(self, instance: Instance, token: str) -> bool:
        """Is *token* a live scoped token of *instance*'s organization whose scopes open
        installing on it, minted by a non-read-only key whose user may still control devices
        (the minter's role is re-read, as the API does)?"""
        lookup = tokens.parse_scoped_token(token)
        if lookup is None:
            return False
        try:
            credential = await self._store.get_scoped_token_by_lookup(lookup)
            if not tokens.verify_secret(token, credential.secret_hash):
                return False
            scoped = credential.token
            if scoped.org_id != instance.org_id:
                return False
            key = await self._store.get_api_key(scoped.org_id, scoped.api_key_id)
            membership = await self._store.get_membership(key.org_id, key.user_id)
        except store_errors.NotFound:
            return False
        if key.read_only or membership.role not in _DEVICE_ROLES:
            return False
        # scopes were checked against the grammar when minted (api/scopes.py): text compares
        return bool({f"device:{instance.id}:install", _ANY_INSTALL} & set(scoped.scopes))

    async def _viewer(self, instance: Instance, token: str) -> bool:
        """Is *token* a view token of *instance* whose API key or scoped token is live?"""
        lookup = viewing.verify_view_token(token, instance.stream_token)
        return lookup is not None and await viewing.credential_live(
            self._store, instance.org_id, lookup
        )

    async def route(self, host_id: str, instance_id: str) -> InstanceRoute:
        """The tunnel behind a host's egress for *instance_id*."""
        instance = await self._get(instance_id)
        if instance.host_id != host_id:
            raise AccessDenied(AccessReason.NOT_ON_HOST, f"{instance_id} is not on this host")
        if instance.state is InstanceState.TERMINATED:
            raise AccessDenied(AccessReason.GONE, f"instance {instance_id} was terminated")
        tunnel = instance.spec.get("tunnel")
        if not isinstance(tunnel, str):
            raise AccessDenied(AccessReason.NOT_ON_TUNNEL, f"{instance_id} is not on a tunnel")
        return InstanceRoute(instance.id, instance.org_id, tunnel)

    def touch(self, instance_id: str) -> None:
        """Client traffic reached the instance: its inactivity period starts again."""
        self._activity.touch(instance_id)


def _same(token: str, secret: str | None) -> bool:
    return bool(secret) and hmac.compare_digest(token.encode(), str(secret).encode())


def _ready_host(instance: Instance) -> str:
    """The host of a ready *instance*; NOT_READY otherwise (a device is reached only then)."""
    if instance.state is not InstanceState.READY or instance.host_id is None:
        raise AccessDenied(
            AccessReason.NOT_READY,
            f"instance {instance.id} is {instance.state.value}, not ready yet",
        )
    return instance.host_id
