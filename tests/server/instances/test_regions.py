"""Regions from the config to placement: ``[[regions]]`` (coordinates, client networks,
jurisdiction) parsed and validated, then `InstanceService` over a real store placing by
region pin, jurisdiction, ClientLocation / ClientIP clues (ClientLocation wins), the caller's
own address, and capacity."""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Mapping
from pathlib import Path

import pytest

from devyard.server.config import ConfigError, RegionConfig, load_server_config
from devyard.server.instances import InstanceService, NewInstance, NoCapacity, UnknownPlacement
from devyard.server.store import Store
from devyard.server.store.base import Organization, Platform
from tests.polling import eventually

from .conftest import RecordingRegistry, make_host, running

CONFIG = """
region = "eu-west"

[[regions]]
name = "eu-west"
jurisdiction = "EU"
latitude = 50.11
longitude = 8.68
networks = ["10.1.0.0/16", "2001:db8:1::/48"]

[[regions]]
name = "us-east"
jurisdiction = "US"
latitude = 40.71
longitude = -74.0
networks = ["10.2.0.0/16"]

[[regions]]
name = "ap-south"
"""


def _load(tmp_path: Path, text: str, **env: str) -> tuple[RegionConfig, ...]:
    path = tmp_path / "devyard.toml"
    path.write_text(text)
    return load_server_config(file=path, env=env, defaults={"data_dir": str(tmp_path)}).regions


def test_regions_load_from_a_file_and_from_the_environment(tmp_path: Path) -> None:
    regions = _load(tmp_path, CONFIG)
    assert [r.name for r in regions] == ["eu-west", "us-east", "ap-south"]
    eu = regions[0]
    assert (eu.jurisdiction, eu.latitude, eu.longitude) == ("EU", 50.11, 8.68)
    assert eu.networks == (
        ipaddress.ip_network("10.1.0.0/16"),
        ipaddress.ip_network("2001:db8:1::/48"),
    )
    assert regions[2] == RegionConfig("ap-south")
    from_env = _load(
        tmp_path,
        "",
        DEVYARD_REGIONS=json.dumps([{"name": "lab", "networks": ["192.168.0.0/24"]}]),
    )
    assert from_env == (RegionConfig("lab", networks=(ipaddress.ip_network("192.168.0.0/24"),)),)
    assert _load(tmp_path, "") == ()


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ('name = "eu"\ncolour = "red"', "unknown key(s) colour"),
        ('jurisdiction = "EU"', "every region needs a name"),
        ('name = "EU West"', "lowercase letters"),
        ('name = "eu"\nlatitude = 50.0', "latitude and longitude go together"),
        ('name = "eu"\nlatitude = 91.0\nlongitude = 0.0', "latitude must be within -90..90"),
        ('name = "eu"\nnetworks = ["10.1.0.1/16"]', "region 'eu': 10.1.0.1/16 has host bits set"),
        ('name = "eu"\nnetworks = "10.1.0.0/16"', "expected a list of CIDRs"),
        ('name = "eu"\njurisdiction = "E U"', "jurisdiction: letters"),
    ],
)
def test_bad_regions_are_refused_naming_what(tmp_path: Path, entry: str, message: str) -> None:
    with pytest.raises(ConfigError, match="regions") as exc:
        _load(tmp_path, f"[[regions]]\n{entry}\n")
    assert message in str(exc.value)


def test_a_region_listed_twice_and_bad_json_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="listed twice: eu"):
        _load(tmp_path, '[[regions]]\nname = "eu"\n[[regions]]\nname = "eu"\n')
    with pytest.raises(ConfigError, match="DEVYARD_REGIONS: expected a JSON list"):
        _load(tmp_path, "", DEVYARD_REGIONS="eu-west")


def _new(*clues: Mapping[str, object], client_ip: str | None = None, **spec: object) -> NewInstance:
    return NewInstance(
        platform=Platform.IOS,
        labels={"user": "ada"},
        display_name=None,
        spec={**spec, "clues": list(clues)} if clues else dict(spec),
        client_ip=client_ip,
    )


PARIS = {"kind": "ClientLocation", "latitude": 48.86, "longitude": 2.35}
BOSTON = {"kind": "ClientLocation", "latitude": 42.36, "longitude": -71.06}
US_IP = {"kind": "ClientIP", "clientIp": "10.2.7.7"}


async def test_the_service_places_by_the_configured_regions(store: Store, tmp_path: Path) -> None:
    org = await store.create_organization("acme")
    registry = RecordingRegistry(
        [make_host("h-eu", "eu-west"), make_host("h-us", "us-east"), make_host("h-ap", "ap-south")]
    )
    service = InstanceService(
        store, registry, regions=_load(tmp_path, CONFIG), home_region="eu-west"
    )

    async with running(service):
        await _places_by_region(service, org, registry)
        await eventually(lambda: len(registry.started) == 10)
    orders = [order for _, order in registry.started]
    assert all(o.instance_id.startswith("ios_") for o in orders)


async def _places_by_region(
    service: InstanceService, org: Organization, registry: RecordingRegistry
) -> None:
    async def region(new: NewInstance) -> str:
        return (await service.create(org, new, reuse=False)).region

    assert await region(_new()) == "eu-west"  # nothing known: the server's own region
    assert await region(_new(US_IP)) == "us-east"
    assert await region(_new(client_ip="10.2.1.1")) == "us-east", "the caller's own address"
    assert await region(_new(US_IP, client_ip="10.1.1.1")) == "us-east", "a clue beats it"
    assert await region(_new(client_ip="2001:db8:1::5")) == "eu-west"
    assert await region(_new(BOSTON)) == "us-east"
    assert await region(_new(US_IP, PARIS)) == "eu-west", "ClientLocation wins over ClientIP"
    assert await region(_new(PARIS, US_IP)) == "eu-west", "whatever the order"
    assert await region(_new(US_IP, region="ap-south")) == "ap-south", "a pin beats clues"
    assert await region(_new(PARIS, jurisdiction="US")) == "us-east"
    with pytest.raises(UnknownPlacement, match=r"spec\.jurisdiction"):
        await region(_new(jurisdiction="CH"))
    with pytest.raises(UnknownPlacement, match=r"spec\.region"):
        await region(_new(region="mars"))


async def test_capacity_spills_to_the_next_region_unless_pinned(
    store: Store, tmp_path: Path
) -> None:
    org = await store.create_organization("acme")
    full_eu = make_host("h-eu", "eu-west", capacity=0)
    registry = RecordingRegistry([full_eu, make_host("h-us", "us-east")])
    service = InstanceService(
        store, registry, regions=_load(tmp_path, CONFIG), home_region="eu-west"
    )
    async with running(service):
        spilled = await service.create(org, _new(PARIS), reuse=False)
        assert spilled.region == "us-east"
        with pytest.raises(NoCapacity, match="region 'eu-west'"):
            await service.create(org, _new(region="eu-west"), reuse=False)
        # reuseIfExists looks in the region that handles the create: from the EU that is now
        # us-east (full eu-west), so the instance just made is found, not a second one.
        again = await service.create(org, _new(PARIS), reuse=True)
        assert again.id == spilled.id
        await eventually(lambda: len(registry.started) == 1)
