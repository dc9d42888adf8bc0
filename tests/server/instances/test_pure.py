"""The pure parts: lifecycle table, durations, placement (no trio, no store)."""

from __future__ import annotations

import ipaddress
from datetime import UTC, datetime

import pytest

from devyard.server.hosts import HostInfo
from devyard.server.instances import (
    IllegalTransition,
    InvalidDuration,
    LifecycleEvent,
    NoCapacity,
    UnknownPlacement,
    expected_for,
    format_duration,
    next_state,
    parse_duration,
)
from devyard.server.instances.placement import (
    ClientLocation,
    ModelNotAllowed,
    PlacementRequest,
    RegionInfo,
    check_model,
    place,
    preferred_region,
)
from devyard.server.store.base import InstanceState as S


def test_lifecycle_happy_path_and_illegal_steps() -> None:
    assert next_state(S.CREATING, LifecycleEvent.ASSIGNED) is S.ASSIGNED
    assert next_state(S.ASSIGNED, LifecycleEvent.READY) is S.READY
    for state in (S.CREATING, S.ASSIGNED, S.READY):
        assert next_state(state, LifecycleEvent.TERMINATE) is S.TERMINATED
    for state, event in [
        (S.CREATING, LifecycleEvent.READY),
        (S.READY, LifecycleEvent.ASSIGNED),
        (S.TERMINATED, LifecycleEvent.TERMINATE),
        (S.TERMINATED, LifecycleEvent.READY),
    ]:
        with pytest.raises(IllegalTransition):
            next_state(state, event)
    assert expected_for(LifecycleEvent.TERMINATE) == {S.CREATING, S.ASSIGNED, S.READY}
    assert expected_for(LifecycleEvent.READY) == {S.ASSIGNED}


@pytest.mark.parametrize(
    ("text", "seconds", "normal"),
    [
        ("0", 0, "0"),
        ("30s", 30, "30s"),
        ("10m", 600, "10m"),
        ("3h", 10800, "3h"),
        ("90s", 90, "1m30s"),
        ("600s", 600, "10m"),
        ("1h30m", 5400, "1h30m"),
    ],
)
def test_durations(text: str, seconds: int, normal: str) -> None:
    assert parse_duration("spec.hardTimeout", text) == seconds
    assert format_duration(seconds) == normal


@pytest.mark.parametrize("text", ["", "10", "5d", "m", "-1s", "1m1h", "10 m", "200h"])
def test_bad_durations_name_the_field(text: str) -> None:
    with pytest.raises(InvalidDuration, match=r"spec\.inactivityTimeout"):
        parse_duration("spec.inactivityTimeout", text)


def _host(host_id: str, region: str, *, free: int = 1, platforms: str = "android ios") -> HostInfo:
    return HostInfo(
        id=host_id,
        name=host_id,
        region=region,
        capacity=free,
        running=0,
        platforms=frozenset(platforms.split()),
        drivers=frozenset({"virtual"}),
        version="test",
        connected_at=datetime(2030, 1, 1, tzinfo=UTC),
    )


REGIONS = (
    RegionInfo(
        "eu",
        jurisdiction="EU",
        latitude=50.1,
        longitude=8.7,
        networks=(ipaddress.ip_network("10.1.0.0/16"),),
    ),
    RegionInfo(
        "us",
        jurisdiction="US",
        latitude=40.7,
        longitude=-74.0,
        networks=(ipaddress.ip_network("10.2.0.0/16"),),
    ),
)
HOSTS = (_host("h-eu", "eu"), _host("h-us", "us", free=3))


def _place(**kw: object) -> str:
    return place(REGIONS, HOSTS, PlacementRequest(platform="android", **kw), home="eu").region  # type: ignore[arg-type]


def test_placement_preferences() -> None:
    assert _place() == "eu"  # home
    assert _place(region="us") == "us"
    assert _place(jurisdiction="US") == "us"
    assert _place(client_ip="10.2.3.4") == "us"
    assert _place(client_ip="10.1.3.4", client_location=ClientLocation(40.0, -75.0)) == "us"
    assert _place(client_ip="10.2.3.4", client_location=ClientLocation(48.8, 2.3)) == "eu"
    assert _place(client_ip="not an ip") == "eu"


def test_placement_errors() -> None:
    with pytest.raises(UnknownPlacement) as exc:
        _place(region="mars")
    assert exc.value.field == "spec.region"
    with pytest.raises(UnknownPlacement):
        _place(jurisdiction="CH")
    with pytest.raises(NoCapacity):
        place(REGIONS, (), PlacementRequest(platform="android"), home="eu")
    with pytest.raises(NoCapacity):
        place(REGIONS, HOSTS, PlacementRequest(platform="xcode"), home="eu")


def test_full_region_falls_back_unless_pinned() -> None:
    full = (_host("h-eu", "eu", free=0), _host("h-us", "us"))
    assert place(REGIONS, full, PlacementRequest(platform="ios"), home="eu").region == "us"
    with pytest.raises(NoCapacity):
        place(REGIONS, full, PlacementRequest(platform="ios", region="eu"), home="eu")


def test_preferred_region_with_nothing_known_is_home() -> None:
    assert preferred_region((), (), PlacementRequest(platform="ios"), home="local") == "local"


def test_check_model_admits_the_ios_models_and_duo_only_when_enabled() -> None:
    for model in (None, "iphone", "ipad", "watch"):
        check_model("ios", model, iphone_duo_enabled=False)
    check_model("ios", "iphone-duo", iphone_duo_enabled=True)
    with pytest.raises(ModelNotAllowed, match="not enabled for this organization"):
        check_model("ios", "iphone-duo", iphone_duo_enabled=False)
    with pytest.raises(ModelNotAllowed, match="not an iOS model") as exc:
        check_model("ios", "pixel", iphone_duo_enabled=True)
    assert exc.value.field == "spec.model"
    check_model("android", "pixel", iphone_duo_enabled=False)  # the drivers judge Android's
    check_model("xcode", None, iphone_duo_enabled=False)
