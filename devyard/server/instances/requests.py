"""What a create asks for, before the service acts on it: `NewInstance`, the stored form of its
spec (`normalise_spec`), and what placement and the host's order read from it. Pure: no trio,
no store.
"""

from __future__ import annotations

from typing import Any, Final

import attrs

from ..store.base import Organization, Platform
from .durations import format_duration, parse_duration
from .placement import ClientLocation, PlacementRequest

__all__ = [
    "FieldNotAllowed",
    "NewInstance",
    "check_platform_fields",
    "normalise_spec",
    "os_version",
    "placement_request",
]

# Spec fields that only some platforms have (spec 2.1); the document checks their shapes.
_PLATFORM_FIELDS: Final[dict[str, frozenset[Platform]]] = {
    "forceBundleId": frozenset({Platform.IOS}),
}


class FieldNotAllowed(ValueError):
    """A spec field the instance's platform does not have (422)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def check_platform_fields(platform: Platform, spec: dict[str, Any]) -> None:
    """Raises FieldNotAllowed for a spec field of another platform (``forceBundleId`` on
    Android, say), instead of storing a field that nothing would act on."""
    for field, platforms in _PLATFORM_FIELDS.items():
        if field in spec and platform not in platforms:
            names = " and ".join(sorted(p.value for p in platforms))
            raise FieldNotAllowed(
                f"spec.{field}", f"spec.{field} is for {names} instances, not {platform.value}"
            )


@attrs.frozen
class NewInstance:
    """A create request, already checked against the document."""

    platform: Platform
    labels: dict[str, str]
    display_name: str | None
    spec: dict[str, Any]
    client_ip: str | None = None
    created_by: str | None = None  # the user whose credential asked (metadata.createdBy)
    # spec.initialAssets resolved by the API: one entry per file with a download URL
    initial_assets: tuple[dict[str, Any], ...] = ()


def placement_request(new: NewInstance) -> PlacementRequest:
    spec = new.spec
    client_ip, location = new.client_ip, None
    for clue in spec.get("clues", []):
        if clue.get("kind") == "ClientIP" and clue.get("clientIp"):
            client_ip = clue["clientIp"]
        elif clue.get("kind") == "ClientLocation":
            location = ClientLocation(float(clue["latitude"]), float(clue["longitude"]))
    return PlacementRequest(
        platform=new.platform.value,
        region=spec.get("region"),
        jurisdiction=spec.get("jurisdiction"),
        client_ip=client_ip,
        client_location=location,
    )


def normalise_spec(spec: dict[str, Any], organization: Organization) -> dict[str, Any]:
    """The spec as stored and echoed: timeouts parsed (InvalidDuration names the field) and
    written back normalised, the inactivity default filled from the organization (also for
    ``0``, as the SDKs document it: an instance always has an inactivity timeout)."""
    out = dict(spec)
    inactivity = out.get("inactivityTimeout")
    seconds = 0 if inactivity is None else parse_duration("spec.inactivityTimeout", inactivity)
    seconds = seconds or organization.settings.inactivity_timeout_s
    out["inactivityTimeout"] = format_duration(seconds)
    out["hardTimeout"] = format_duration(
        parse_duration("spec.hardTimeout", out.get("hardTimeout", "0"))
    )
    return out


def os_version(spec: dict[str, Any]) -> str | None:
    for clue in spec.get("clues", []):
        if clue.get("kind") == "OSVersion":
            value = clue.get("osVersion")
            return None if value is None else str(value)
    return None
