"""Where a new instance runs: pure functions of the request, the configured regions and the
hosts connected now.

Order of decisions:

1. ``region`` pins the region; ``jurisdiction`` keeps the regions of that jurisdiction.
2. Among what is left, the *preferred* region: nearest to a ``ClientLocation`` clue (great
   circle, regions with coordinates), else the region whose client networks hold the
   ``ClientIP`` clue, else the server's home region. ClientLocation wins over ClientIP.
3. The handling region is the preferred one if a host there has room for the platform, else
   (unless pinned) the nearest / freest region that has room. No room anywhere is
   `NoCapacity`: the caller answers at once, nothing is left in ``creating``.

Hosts of a region that the config does not list are still used (a region is known by its
hosts too); only coordinates and networks come from the config.

Before any of this, `check_model` admits the device model: the iOS models are the spec's four,
and ``iphone-duo`` only for an organization that has it enabled (``iphone_duo_enabled``).
"""

from __future__ import annotations

import ipaddress
import math
from collections.abc import Iterable, Sequence
from typing import Final

import attrs

from ..config import RegionConfig
from ..hosts import HostInfo

__all__ = [
    "IOS_MODELS",
    "ClientLocation",
    "ModelNotAllowed",
    "NoCapacity",
    "Placement",
    "PlacementRequest",
    "RegionInfo",
    "UnknownPlacement",
    "check_model",
    "place",
    "preferred_region",
]

_EARTH_KM: Final = 6371.0
IOS_MODELS: Final = ("iphone", "iphone-duo", "ipad", "watch")
IPHONE_DUO: Final = "iphone-duo"


# What the config says of a region (``[[regions]]``: name, jurisdiction, coordinates, client
# networks) is all placement needs to know of it: one type, so the config's value goes straight
# to `InstanceService(regions=config.regions)`.
RegionInfo = RegionConfig


@attrs.frozen
class ClientLocation:
    latitude: float
    longitude: float


@attrs.frozen
class PlacementRequest:
    platform: str
    region: str | None = None
    jurisdiction: str | None = None
    client_ip: str | None = None
    client_location: ClientLocation | None = None


@attrs.frozen
class Placement:
    region: str
    hosts: tuple[HostInfo, ...]  # with room for the platform, most free first


class UnknownPlacement(ValueError):
    """A pin names a region or jurisdiction that does not exist (a client mistake)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


class NoCapacity(Exception):
    """No connected host can take the instance now."""


class ModelNotAllowed(ValueError):
    """``spec.model`` names a model this platform lacks, or one the organization may not use."""

    field = "spec.model"


def check_model(platform: str, model: str | None, *, iphone_duo_enabled: bool) -> None:
    """Admits ``spec.model`` (None = the platform's default). Raises ModelNotAllowed."""
    if platform != "ios" or model is None:
        return  # the Android models are the drivers' to judge; xcode/gradle have none
    if model not in IOS_MODELS:
        raise ModelNotAllowed(
            f"spec.model: {model!r} is not an iOS model (one of {', '.join(IOS_MODELS)})"
        )
    if model == IPHONE_DUO and not iphone_duo_enabled:
        raise ModelNotAllowed(
            "spec.model: iphone-duo is not enabled for this organization"
            " (an admin sets iphoneDuoEnabled in the organization's settings)"
        )


def _distance_km(a: ClientLocation, region: RegionInfo) -> float:
    assert region.latitude is not None and region.longitude is not None
    lat1, lon1 = math.radians(a.latitude), math.radians(a.longitude)
    lat2, lon2 = math.radians(region.latitude), math.radians(region.longitude)
    h = (
        math.sin((lat2 - lat1) / 2) ** 2
        + math.cos(lat1) * math.cos(lat2) * math.sin((lon2 - lon1) / 2) ** 2
    )
    return 2 * _EARTH_KM * math.asin(min(1.0, math.sqrt(h)))


def _candidates(
    regions: Sequence[RegionInfo], hosts: Iterable[HostInfo], request: PlacementRequest
) -> list[RegionInfo]:
    known = {r.name: r for r in regions}
    for host in hosts:
        known.setdefault(host.region, RegionInfo(host.region))
    found = list(known.values())
    if request.region is not None:
        if request.region not in known:
            raise UnknownPlacement("spec.region", f"spec.region: unknown region {request.region!r}")
        found = [known[request.region]]
    if request.jurisdiction is not None:
        found = [r for r in found if r.jurisdiction == request.jurisdiction]
        if not found:
            raise UnknownPlacement(
                "spec.jurisdiction",
                f"spec.jurisdiction: no region in jurisdiction {request.jurisdiction!r}"
                + ("" if request.region is None else f" named {request.region!r}"),
            )
    return found


def _ranked(candidates: list[RegionInfo], request: PlacementRequest, home: str) -> list[str]:
    """Candidate region names, preferred first."""
    names = [r.name for r in candidates]
    if request.client_location is not None:
        located = [r for r in candidates if r.latitude is not None and r.longitude is not None]
        if located:
            where = request.client_location
            nearest = sorted(located, key=lambda r: (_distance_km(where, r), r.name))
            rest = [n for n in names if n not in {r.name for r in nearest}]
            return [r.name for r in nearest] + rest
    if request.client_ip is not None:
        try:
            address = ipaddress.ip_address(request.client_ip)
        except ValueError:
            address = None
        if address is not None:
            holding = [r.name for r in candidates if any(address in n for n in r.networks)]
            if holding:
                return holding + [n for n in names if n not in holding]
    if home in names:
        return [home] + [n for n in names if n != home]
    return names


def preferred_region(
    regions: Sequence[RegionInfo],
    hosts: Sequence[HostInfo],
    request: PlacementRequest,
    *,
    home: str,
) -> str:
    """The region the request would prefer, capacity aside (``home`` when nothing is known)."""
    ranked = _ranked(_candidates(regions, hosts, request), request, home)
    return ranked[0] if ranked else home


def place(
    regions: Sequence[RegionInfo],
    hosts: Sequence[HostInfo],
    request: PlacementRequest,
    *,
    home: str,
) -> Placement:
    """The handling region and its hosts with room. Raises UnknownPlacement, NoCapacity."""
    ranked = _ranked(_candidates(regions, hosts, request), request, home)
    for region in ranked:
        room = sorted(
            (
                h
                for h in hosts
                if h.region == region and h.free > 0 and request.platform in h.platforms
            ),
            key=lambda h: (-h.free, h.id),
        )
        if room:
            return Placement(region=region, hosts=tuple(room))
    where = f"region {ranked[0]!r}" if request.region is not None else "any region"
    raise NoCapacity(
        f"no host with room for a {request.platform} instance in {where}"
        f" ({len(hosts)} host(s) connected); retry later or add hosts"
    )
