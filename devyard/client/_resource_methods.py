"""``AsyncClient``'s methods for instances of every platform, tunnels, usage and build logs.

A mixin so the client module stays small; every method goes through ``request`` (retries,
typed errors). Lists come as one ``Page`` (``list_*``) or every page lazily (``iter_*``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, Final
from urllib.parse import quote

from ._errors import ResponseError
from .models import parse_list
from .resources import (
    CreatedTunnel,
    Instance,
    InstancePage,
    InstanceUsage,
    InstanceUsagePage,
    Page,
    Platform,
    Tunnel,
    UsageTotals,
)

__all__ = ["ResourceMethods"]

PAGE_SIZE: Final = 100


def _seg(value: str) -> str:
    return quote(value, safe="")


def _instance_path(instance_id: str, platform: Platform | str | None = None) -> str:
    kind = Platform(platform) if platform is not None else Platform.of_instance_id(instance_id)
    return f"/v1/{kind.value}_instances/{_seg(instance_id)}"


class ResourceMethods:
    async def request(
        self,
        method: str,
        path: str,
        *,
        body: object = None,
        params: Mapping[str, str] | None = None,
    ) -> object:
        raise NotImplementedError

    # -- instances (spec 2.1) -----------------------------------------------------------------

    async def create_instance(
        self,
        platform: Platform | str,
        *,
        labels: Mapping[str, str] | None = None,
        display_name: str | None = None,
        region: str | None = None,
        spec: Mapping[str, Any] | None = None,
        wait: bool = False,
    ) -> Instance:
        """Create an instance; with *wait*, the answer comes once it is ready."""
        metadata: dict[str, Any] = {"labels": dict(labels or {})}
        if display_name is not None:
            metadata["displayName"] = display_name
        body: dict[str, Any] = {"metadata": metadata}
        spec_body = dict(spec or {})
        if region is not None:
            spec_body["region"] = region
        if spec_body:
            body["spec"] = spec_body
        path = f"/v1/{Platform(platform).value}_instances"
        params = {"wait": "true"} if wait else None
        return Instance.from_json(await self.request("POST", path, body=body, params=params))

    async def get_instance(
        self, instance_id: str, *, platform: Platform | str | None = None
    ) -> Instance:
        """One instance; its platform is read from the id unless given."""
        return Instance.from_json(await self.request("GET", _instance_path(instance_id, platform)))

    async def delete_instance(
        self, instance_id: str, *, platform: Platform | str | None = None
    ) -> Instance:
        path = _instance_path(instance_id, platform)
        return Instance.from_json(await self.request("DELETE", path))

    async def list_instances(
        self,
        platform: Platform | str,
        *,
        label_selector: str | None = None,
        state: str | None = None,
        limit: int = PAGE_SIZE,
        starting_after: str | None = None,
    ) -> Page[Instance]:
        """One page, newest first; *state* is a comma list (``ready,assigned``)."""
        params = {"limit": str(limit)}
        if label_selector:
            params["labelSelector"] = label_selector
        if state:
            params["state"] = state
        if starting_after:
            params["startingAfter"] = starting_after
        path = f"/v1/{Platform(platform).value}_instances"
        page = InstancePage.from_json(await self.request("GET", path, params=params))
        items = page.items
        more = page.has_more and bool(items)
        return Page(items, more, items[-1].id if items else None)

    async def iter_instances(
        self,
        platform: Platform | str,
        *,
        label_selector: str | None = None,
        state: str | None = None,
        page_size: int = PAGE_SIZE,
    ) -> AsyncIterator[Instance]:
        """Every instance, fetching the next page when this one is used up."""
        after: str | None = None
        while True:
            page = await self.list_instances(
                platform,
                label_selector=label_selector,
                state=state,
                limit=page_size,
                starting_after=after,
            )
            for item in page.items:
                yield item
            if not page.has_more:
                return
            after = page.next_cursor

    async def build_logs(self, instance_id: str) -> list[dict[str, Any]]:
        """A build instance's logs, oldest first (docs/builds.md), also after it ended."""
        data = await self.request("GET", _instance_path(instance_id) + "/build_logs")
        if not isinstance(data, list) or not all(isinstance(item, dict) for item in data):
            raise ResponseError("expected a JSON array of build log objects")
        return [dict(item) for item in data]

    # -- tunnels (docs/tunnels.md) --------------------------------------------------------------

    async def create_tunnel(
        self,
        name: str,
        selectors: Sequence[str],
        *,
        token_expiry_months: int | None = None,
        ephemeral: bool = False,
    ) -> CreatedTunnel:
        body: dict[str, Any] = {"name": name, "selectors": list(selectors)}
        if token_expiry_months is not None:
            body["tokenExpiryMonths"] = token_expiry_months
        if ephemeral:
            body["ephemeral"] = True
        return CreatedTunnel.from_json(await self.request("POST", "/v1/tunnels", body=body))

    async def list_tunnels(self) -> list[Tunnel]:
        return parse_list(await self.request("GET", "/v1/tunnels"), Tunnel)

    async def get_tunnel(self, name: str) -> Tunnel:
        return Tunnel.from_json(await self.request("GET", f"/v1/tunnels/{_seg(name)}"))

    async def update_tunnel(self, name: str, selectors: Sequence[str]) -> Tunnel:
        body = {"selectors": list(selectors)}
        path = f"/v1/tunnels/{_seg(name)}"
        return Tunnel.from_json(await self.request("PATCH", path, body=body))

    async def rotate_tunnel_token(
        self, name: str, *, token_expiry_months: int | None = None
    ) -> CreatedTunnel:
        params = (
            None if token_expiry_months is None else {"tokenExpiryMonths": str(token_expiry_months)}
        )
        path = f"/v1/tunnels/{_seg(name)}/rotate"
        return CreatedTunnel.from_json(await self.request("POST", path, params=params))

    async def delete_tunnel(self, name: str) -> None:
        await self.request("DELETE", f"/v1/tunnels/{_seg(name)}")

    # -- usage (docs/analytics.md) --------------------------------------------------------------

    async def usage(
        self,
        *,
        start: str | None = None,
        end: str | None = None,
        labels: str | None = None,
        bucket: str = "day",
    ) -> UsageTotals:
        """Totals of the instances that ran between *start* and *end* (RFC 3339)."""
        params = {"bucket": bucket}
        for key, value in (("from", start), ("to", end), ("labels", labels)):
            if value is not None:
                params[key] = value
        return UsageTotals.from_json(await self.request("GET", "/v1/analytics", params=params))

    async def iter_instance_usage(
        self,
        *,
        start: str | None = None,
        end: str | None = None,
        labels: str | None = None,
        page_size: int = PAGE_SIZE,
    ) -> AsyncIterator[InstanceUsage]:
        """Every ended instance of the period, page after page."""
        params = {"limit": str(page_size)}
        for key, value in (("from", start), ("to", end), ("labels", labels)):
            if value is not None:
                params[key] = value
        while True:
            data = await self.request("GET", "/v1/analytics/instances", params=params)
            page = InstanceUsagePage.from_json(data)
            items = page.items
            for item in items:
                yield item
            if not page.has_more or not items:
                return
            params = {**params, "startingAfter": items[-1].instance_tid}
