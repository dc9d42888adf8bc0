"""Who may use an instance's MCP endpoint, and with which tools.

Credentials, as ``Authorization: Bearer`` only (never a query parameter):

| credential | grant |
|---|---|
| the organization's API key (spec 5), member or admin, not read-only | every tool |
| the instance token (``status.token``) | every tool |
| a read-only API key, a viewer's key, a scoped token of the organization | read-only tools |
| the stream token, a view token | read-only tools |

An API key or scoped token must belong to the instance's organization (another's is told the
instance does not exist, as the API would). Everything else is a 401; an instance that is not
ready is 409, a terminated one 410. The grant is decided per HTTP request, so a key revoked or
demoted mid-session loses its tools at the next request.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs

from ..api._errors import APIError
from ..api.auth import Authenticator, role_at_least
from ..hosts import AccessDenied, AccessReason, InstanceAccess, InstanceDirectory
from ..store import errors as store_errors
from ..store.base import InstanceState, Role, Store

__all__ = ["Grant", "McpAuthority", "McpRefused"]


class McpRefused(Exception):
    """The MCP endpoint's refusal (the HTTP boundary maps *status* once, in service.py)."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.message = message


@attrs.frozen
class Grant:
    """A request's access: the instance, whether it may change anything, and who it is (an
    MCP session is bound to the identity that opened it)."""

    access: InstanceAccess
    read_only: bool
    identity: str  # "instance-token", "stream-token", "key:<lookup>", "scoped:<lookup>"


_REFUSALS = {
    AccessReason.UNKNOWN: (404, "not_found"),
    AccessReason.GONE: (410, "gone"),
    AccessReason.WRONG_TOKEN: (401, "unauthorized"),
    AccessReason.NOT_READY: (409, "not_ready"),
}


class McpAuthority:
    def __init__(
        self, store: Store, directory: InstanceDirectory, *, clock: Callable[[], float]
    ) -> None:
        self._store = store
        self._directory = directory
        self._keys = Authenticator(store, clock=clock)

    async def authenticate(self, instance_id: str, token: str | None) -> Grant:
        if not token:
            raise McpRefused(
                401, "unauthorized", "send the organization API key as Authorization: Bearer"
            )
        try:
            access = await self._directory.authorize(instance_id, token)
        except AccessDenied as exc:
            if exc.reason is not AccessReason.WRONG_TOKEN:
                status, reason = _REFUSALS.get(exc.reason, (401, "unauthorized"))
                raise McpRefused(status, reason, exc.message) from None
        else:
            identity = "stream-token" if access.stream_only else "instance-token"
            return Grant(access, read_only=access.stream_only, identity=identity)
        return await self._by_key(instance_id, token)

    async def _by_key(self, instance_id: str, token: str) -> Grant:
        try:
            principal = await self._keys.authenticate(f"Bearer {token}")
        except APIError:
            raise McpRefused(
                401, "unauthorized", "the credential opens neither this instance nor its MCP"
            ) from None
        try:
            instance = await self._store.get_instance(instance_id)
        except store_errors.NotFound:
            instance = None
        if instance is None or instance.org_id != principal.org_id:
            raise McpRefused(404, "not_found", f"no instance {instance_id}")
        if instance.state is InstanceState.TERMINATED:
            raise McpRefused(410, "gone", f"instance {instance_id} was terminated")
        if instance.state is not InstanceState.READY or instance.host_id is None:
            raise McpRefused(
                409, "not_ready", f"instance {instance_id} is {instance.state.value}, not ready yet"
            )
        read_only = principal.read_only or not role_at_least(principal.role, Role.MEMBER)
        lookup = (
            f"scoped:{principal.scoped_token.lookup_id}"
            if principal.scoped_token is not None
            else f"key:{principal.api_key.lookup_id}"
        )
        access = InstanceAccess(
            instance_id=instance.id,
            host_id=instance.host_id,
            platform=instance.platform.value,
            stream_only=read_only,
        )
        return Grant(access, read_only=read_only, identity=lookup)
