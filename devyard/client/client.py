"""The typed client of the devyard API, for trio or asyncio (anyio; ``sync.Client`` blocks).

    async with AsyncClient("http://127.0.0.1:8080", api_key) as client:
        me = await client.whoami()

Requests carry the key as ``Authorization: Bearer`` (never in a URL). Each request has the
spec's default timeout of 5 minutes and is retried, twice by default, with exponential
backoff and jitter, on connection errors and on 408, 409, 429 and 5xx answers (spec 7),
waiting at least the ``Retry-After`` the server sent. An error answer becomes a typed
exception carrying the server's ``APIError`` message (``_errors.py``).
"""

from __future__ import annotations

import enum
import json
import random
from collections.abc import AsyncIterable, Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final
from urllib.parse import quote

import anyio
import attrs
import httpx

from .. import __version__
from ..core.tls import client_context
from ._errors import ResponseError, TransportError, error_for_status
from ._resource_methods import ResourceMethods
from .models import (
    ApiKey,
    Asset,
    CreatedApiKey,
    Member,
    Organization,
    Plan,
    Region,
    Role,
    User,
    WhoAmI,
    parse_list,
)

__all__ = ["DEFAULT_TIMEOUT", "UNSET", "AsyncClient", "RetryPolicy"]

DEFAULT_TIMEOUT: Final = 300.0  # spec 8: client default request timeout, 5 minutes
RETRY_STATUSES: Final = frozenset({408, 409, 429})
MAX_RETRY_AFTER: Final = 60.0


class _Unset(enum.Enum):
    UNSET = "UNSET"


UNSET: Final = _Unset.UNSET


@attrs.frozen
class RetryPolicy:
    """Retry ``max_retries`` times; attempt n waits up to ``base * 2**n`` (capped), jittered."""

    max_retries: int = 2
    base: float = 0.5
    cap: float = 8.0

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        backoff: float = min(self.cap, self.base * 2.0**attempt)
        backoff *= random.uniform(0.5, 1.0)  # noqa: S311 - jitter, not a secret
        if retry_after is not None:
            backoff = max(backoff, min(retry_after, MAX_RETRY_AFTER))
        return backoff


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("Retry-After")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None  # an HTTP-date: the backoff alone will do


def _segment(value: str) -> str:
    return quote(value, safe="")


class AsyncClient(ResourceMethods):
    """One connection pool to one devyard server, authenticated with one API key."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        retry: RetryPolicy = RetryPolicy(),
        transport: httpx.AsyncBaseTransport | None = None,
        ca_file: Path | None = None,
        http2: bool = True,
    ) -> None:
        """*ca_file*: a CA trusted for an https server besides the system's (``devyard up
        --tls``'s, docs/tls.md); *http2*: HTTP/2 where the server offers it by ALPN."""
        headers = {"User-Agent": f"devyard-python/{__version__}", "Accept": "application/json"}
        if api_key is not None:
            headers["Authorization"] = f"Bearer {api_key}"
        self.base_url: Final = base_url.rstrip("/")
        self._retry = retry
        #: what verifies the server's certificate; InstanceApi uses it for the instance's API
        self.tls_context: Final = client_context(ca_file)
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            headers=headers,
            timeout=timeout,
            transport=transport,
            verify=self.tls_context,
            http2=http2,
        )

    def __repr__(self) -> str:
        return f"<AsyncClient {self.base_url}>"

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: object = None,
        params: Mapping[str, str] | None = None,
    ) -> object:
        """Send one API request with retries; the decoded JSON answer (None when empty)."""
        content = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"} if content is not None else None
        attempt = 0
        while True:
            try:
                response = await self._http.request(
                    method, path, content=content, params=params, headers=headers
                )
            except (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError) as exc:
                if attempt >= self._retry.max_retries or isinstance(exc, httpx.ReadTimeout):
                    raise TransportError(f"{method} {self.base_url}{path}: {exc!r}") from exc
                await anyio.sleep(self._retry.delay(attempt))
                attempt += 1
                continue
            status = response.status_code
            retryable = status in RETRY_STATUSES or status >= 500
            if retryable and attempt < self._retry.max_retries:
                await anyio.sleep(self._retry.delay(attempt, _retry_after(response)))
                attempt += 1
                continue
            return _decode(response)

    # -- health and catalog -------------------------------------------------------------------

    async def livez(self) -> str:
        return _message(await self.request("GET", "/livez"))

    async def readyz(self) -> str:
        return _message(await self.request("GET", "/readyz"))

    async def list_regions(self) -> list[Region]:
        return parse_list(await self.request("GET", "/regions"), Region)

    async def get_plan(self, plan_tid: str) -> Plan:
        return Plan.from_json(await self.request("GET", f"/plans/{_segment(plan_tid)}"))

    async def send_feedback(self, message: str, *, email: str | None = None) -> None:
        body: dict[str, Any] = {"message": message}
        if email is not None:
            body["email"] = email
        await self.request("POST", "/feedback", body=body)

    # -- identity -------------------------------------------------------------------------------

    async def whoami(self) -> WhoAmI:
        return WhoAmI.from_json(await self.request("GET", "/whoami"))

    async def get_user(self, user_name: str) -> User:
        return User.from_json(await self.request("GET", f"/users/{_segment(user_name)}"))

    async def update_user(
        self, user_name: str, *, name: str | None = None, email: str | _Unset | None = UNSET
    ) -> User:
        body: dict[str, Any] = {}
        if name is not None:
            body["name"] = name
        if email is not UNSET:
            body["email"] = email
        path = f"/users/{_segment(user_name)}"
        return User.from_json(await self.request("PATCH", path, body=body))

    async def list_user_memberships(self, user_name: str) -> list[Organization]:
        path = f"/users/{_segment(user_name)}/memberships"
        return parse_list(await self.request("GET", path), Organization)

    # -- organizations and members ---------------------------------------------------------------

    async def get_organization(self, org_id: str) -> Organization:
        path = f"/organizations/{_segment(org_id)}"
        return Organization.from_json(await self.request("GET", path))

    async def update_organization(
        self, org_id: str, *, name: str | None = None, inactivity_timeout_seconds: int | None = None
    ) -> Organization:
        body: dict[str, Any] = {}
        if name is not None:
            body["name"] = name
        if inactivity_timeout_seconds is not None:
            body["settings"] = {"inactivityTimeoutSeconds": inactivity_timeout_seconds}
        path = f"/organizations/{_segment(org_id)}"
        return Organization.from_json(await self.request("PATCH", path, body=body))

    async def delete_organization(self, org_id: str) -> Organization:
        path = f"/organizations/{_segment(org_id)}"
        return Organization.from_json(await self.request("DELETE", path))

    async def list_members(self, org_id: str) -> list[Member]:
        path = f"/organizations/{_segment(org_id)}/members"
        return parse_list(await self.request("GET", path), Member)

    async def add_member(
        self, org_id: str, user_name: str, role: Role, *, email: str | None = None
    ) -> Member:
        body: dict[str, Any] = {"userName": user_name, "role": str(role)}
        if email is not None:
            body["email"] = email
        path = f"/organizations/{_segment(org_id)}/members"
        return Member.from_json(await self.request("POST", path, body=body))

    async def get_member(self, org_id: str, user_name: str) -> Member:
        path = f"/organizations/{_segment(org_id)}/members/{_segment(user_name)}"
        return Member.from_json(await self.request("GET", path))

    async def update_member(self, org_id: str, user_name: str, role: Role) -> Member:
        path = f"/organizations/{_segment(org_id)}/members/{_segment(user_name)}"
        return Member.from_json(await self.request("PATCH", path, body={"role": str(role)}))

    async def remove_member(self, org_id: str, user_name: str) -> None:
        path = f"/organizations/{_segment(org_id)}/members/{_segment(user_name)}"
        await self.request("DELETE", path)

    async def send_support_message(self, org_id: str, message: str) -> None:
        path = f"/organizations/{_segment(org_id)}/support"
        await self.request("POST", path, body={"message": message})

    # -- API keys ----------------------------------------------------------------------------------

    async def list_api_keys(self, org_id: str, *, include_revoked: bool = False) -> list[ApiKey]:
        path = f"/organizations/{_segment(org_id)}/apiKeys"
        params = {"includeRevoked": "true" if include_revoked else "false"}
        return parse_list(await self.request("GET", path, params=params), ApiKey)

    async def create_api_key(
        self, org_id: str, name: str, *, read_only: bool = False, user_name: str | None = None
    ) -> CreatedApiKey:
        body: dict[str, Any] = {"name": name, "readOnly": read_only}
        if user_name is not None:
            body["userName"] = user_name
        path = f"/organizations/{_segment(org_id)}/apiKeys"
        return CreatedApiKey.from_json(await self.request("POST", path, body=body))

    async def get_api_key(self, org_id: str, key_id: str) -> ApiKey:
        path = f"/organizations/{_segment(org_id)}/apiKeys/{_segment(key_id)}"
        return ApiKey.from_json(await self.request("GET", path))

    async def revoke_api_key(self, org_id: str, key_id: str) -> ApiKey:
        path = f"/organizations/{_segment(org_id)}/apiKeys/{_segment(key_id)}"
        return ApiKey.from_json(await self.request("DELETE", path))

    # -- assets (spec 2.4; docs/assets.md) ---------------------------------------------------------

    async def upsert_asset(
        self, name: str, *, os: str | None = None, ttl: int | None = None
    ) -> Asset:
        body: dict[str, Any] = {"name": name}
        if os is not None:
            body["os"] = os
        if ttl is not None:
            body["ttl"] = ttl
        return Asset.from_json(await self.request("PUT", "/v1/assets", body=body))

    async def list_assets(
        self,
        *,
        name: str | None = None,
        name_prefix: str | None = None,
        include_download_url: bool = False,
        include_upload_url: bool = False,
        limit: int = 50,
    ) -> list[Asset]:
        params = {
            "includeDownloadUrl": "true" if include_download_url else "false",
            "includeUploadUrl": "true" if include_upload_url else "false",
            "limit": str(limit),
        }
        if name is not None:
            params["nameFilter"] = name
        if name_prefix is not None:
            params["namePrefixFilter"] = name_prefix
        return parse_list(await self.request("GET", "/v1/assets", params=params), Asset)

    async def get_asset(self, asset_id: str, *, include_download_url: bool = False) -> Asset:
        params = {"includeDownloadUrl": "true" if include_download_url else "false"}
        path = f"/v1/assets/{_segment(asset_id)}"
        return Asset.from_json(await self.request("GET", path, params=params))

    async def delete_asset(self, asset_id: str) -> Asset:
        return Asset.from_json(await self.request("DELETE", f"/v1/assets/{_segment(asset_id)}"))

    async def upload_signed(self, url: str, chunks: AsyncIterable[bytes], size: int) -> object:
        """PUT *chunks* (*size* bytes in all) to a signed upload URL, without the API key and
        without retries (a stream cannot be replayed); the decoded JSON answer."""
        headers = {"Content-Type": "application/octet-stream", "Content-Length": str(size)}
        async with httpx.AsyncClient(timeout=self._http.timeout) as http:
            try:
                response = await http.put(url, content=chunks, headers=headers)
            except httpx.TransportError as exc:
                raise TransportError(f"PUT {url.partition('?')[0]}: {exc!r}") from exc
            return _decode(response)

    async def download_signed(self, url: str, sink: Callable[[bytes], Awaitable[None]]) -> None:
        """GET a signed download URL, without the API key, handing each chunk to *sink*."""
        async with httpx.AsyncClient(timeout=self._http.timeout) as http:
            try:
                async with http.stream("GET", url) as response:
                    if not response.is_success:
                        await response.aread()
                        _decode(response)
                    async for chunk in response.aiter_bytes():
                        await sink(chunk)
            except httpx.TransportError as exc:
                raise TransportError(f"GET {url.partition('?')[0]}: {exc!r}") from exc

    # -- scoped tokens and analytics (docs/scoped-tokens.md, docs/analytics.md) -----------------

    async def create_scoped_token(
        self, scopes: Sequence[str], *, ttl_seconds: int | None = None
    ) -> dict[str, Any]:
        """The created token as the API's JSON; its ``token`` is shown only here."""
        body: dict[str, Any] = {"scopes": list(scopes)}
        if ttl_seconds is not None:
            body["ttlSeconds"] = ttl_seconds
        return _json_object(await self.request("POST", "/v1/scoped_tokens", body=body))

    async def revoke_scoped_token(self, token_id: str) -> dict[str, Any]:
        path = f"/v1/scoped_tokens/{_segment(token_id)}"
        return _json_object(await self.request("DELETE", path))

    async def analytics(self, bounds: Mapping[str, str], *, bucket: str = "day") -> dict[str, Any]:
        """Usage totals; *bounds* are the query's own names (``startedAt[gte]``, ``from``,
        ``labels``...), at least one time bound among them."""
        params = {**bounds, "bucket": bucket}
        return _json_object(await self.request("GET", "/v1/analytics", params=params))

    async def instance_analytics(
        self, bounds: Mapping[str, str], *, limit: int = 100, starting_after: str | None = None
    ) -> dict[str, Any]:
        """One page of per-instance billing details (``items``, ``hasMore``)."""
        params = {**bounds, "limit": str(limit)}
        if starting_after is not None:
            params["startingAfter"] = starting_after
        return _json_object(await self.request("GET", "/v1/analytics/instances", params=params))

    # -- billing (docs/billing.md) ---------------------------------------------------------

    async def list_plan_options(self, org_id: str) -> list[dict[str, Any]]:
        data = await self.request("GET", f"/organizations/{_segment(org_id)}/plans")
        return [_json_object(item) for item in data] if isinstance(data, list) else []

    async def list_invoices(self, org_id: str, query: Mapping[str, str]) -> dict[str, Any]:
        """Invoices; *query* holds any of ``from``, ``to``, ``timezone``."""
        path = f"/organizations/{_segment(org_id)}/invoices"
        return _json_object(await self.request("GET", path, params=query))

    async def list_subscriptions(self, org_id: str) -> list[dict[str, Any]]:
        data = await self.request("GET", f"/organizations/{_segment(org_id)}/subscriptions")
        return [_json_object(item) for item in data] if isinstance(data, list) else []

    async def billing_details(self, org_id: str) -> dict[str, Any]:
        path = f"/organizations/{_segment(org_id)}/billing-details"
        return _json_object(await self.request("GET", path))

    async def plan_schedule(self, org_id: str, *, release: bool = False) -> dict[str, Any]:
        path = f"/organizations/{_segment(org_id)}/plan/schedule"
        return _json_object(await self.request("DELETE" if release else "GET", path))

    async def change_plan(self, org_id: str, price_id: str) -> dict[str, Any]:
        path = f"/organizations/{_segment(org_id)}/plan"
        return _json_object(await self.request("POST", path, body={"priceId": price_id}))

    # -- accounts: organizations, invitations, domains, single sign-on, support (docs/accounts.md)
    # The API's JSON as dicts; `account_commands` prints them.

    async def create_organization(self, name: str) -> dict[str, Any]:
        """The new organization plus ``apiKey``: the caller's first key there, shown once."""
        return _json_object(await self.request("POST", "/organizations", body={"name": name}))

    async def invite(self, org_id: str, email: str, *, role: str = "member") -> dict[str, Any]:
        path = f"/organizations/{_segment(org_id)}/invitations"
        body = {"email": email, "role": role}
        return _json_object(await self.request("POST", path, body=body))

    async def list_invitations(self, org_id: str) -> list[dict[str, Any]]:
        path = f"/organizations/{_segment(org_id)}/invitations"
        return _json_objects(await self.request("GET", path))

    async def revoke_invitation(self, org_id: str, invitation_id: str) -> None:
        path = f"/organizations/{_segment(org_id)}/invitations/{_segment(invitation_id)}"
        await self.request("DELETE", path)

    async def list_domains(self, org_id: str) -> list[dict[str, Any]]:
        path = f"/organizations/{_segment(org_id)}/domains"
        return _json_objects(await self.request("GET", path))

    async def replace_domains(self, org_id: str, domains: Sequence[str]) -> list[dict[str, Any]]:
        path = f"/organizations/{_segment(org_id)}/domains"
        return _json_objects(await self.request("PUT", path, body={"domains": list(domains)}))

    async def verify_domain(self, org_id: str, domain: str) -> dict[str, Any]:
        path = f"/organizations/{_segment(org_id)}/domains/{_segment(domain)}/verify"
        return _json_object(await self.request("POST", path))

    async def get_oidc_connection(self, org_id: str) -> dict[str, Any]:
        path = f"/organizations/{_segment(org_id)}/oidcConnection"
        return _json_object(await self.request("GET", path))

    async def put_oidc_connection(self, org_id: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """*body*: ``issuer``, ``clientId``, and optionally ``clientSecret`` (absent: kept,
        None: removed), ``allowedDomains``, ``defaultRole``."""
        path = f"/organizations/{_segment(org_id)}/oidcConnection"
        return _json_object(await self.request("PUT", path, body=dict(body)))

    async def delete_oidc_connection(self, org_id: str) -> None:
        await self.request("DELETE", f"/organizations/{_segment(org_id)}/oidcConnection")

    async def list_support_messages(self, *, limit: int = 100) -> list[dict[str, Any]]:
        """Operators only."""
        params = {"limit": str(limit)}
        return _json_objects(await self.request("GET", "/operator/supportMessages", params=params))

    async def answer_support_message(self, message_id: str, message: str) -> dict[str, Any]:
        """Operators only; mailed to the sender when the server has SMTP and an address."""
        path = f"/operator/supportMessages/{_segment(message_id)}/answer"
        return _json_object(await self.request("POST", path, body={"message": message}))


def _decode(response: httpx.Response) -> object:
    """The JSON of a 2xx answer, or the typed error of any other."""
    data: object = None
    if response.content:
        try:
            data = response.json()
        except ValueError:
            if response.is_success:
                raise ResponseError(
                    f"HTTP {response.status_code}: the answer is not JSON"
                ) from None
    if response.is_success:
        return data
    message = f"HTTP {response.status_code} {response.reason_phrase}".strip()
    reason = None
    if isinstance(data, dict) and isinstance(data.get("message"), str):
        message = data["message"]
        reason = data.get("reason") if isinstance(data.get("reason"), str) else None
    raise error_for_status(
        response.status_code, message, reason=reason, retry_after=_retry_after(response)
    )


def _json_object(data: object) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise ResponseError(f"expected a JSON object, got {type(data).__name__}")
    return data


def _json_objects(data: object) -> list[dict[str, Any]]:
    if not isinstance(data, list) or not all(isinstance(item, dict) for item in data):
        raise ResponseError("expected a JSON array of objects")
    return data


def _message(data: object) -> str:
    message = data.get("message") if isinstance(data, dict) else None
    if isinstance(message, str):
        return message
    raise ResponseError("expected a {message} object")
