"""The instance tables on both backends: create, get, pages, selectors, transitions, tokens."""

from __future__ import annotations

import pytest

from devyard.server.store import Conflict, NotFound, Organization, Store
from devyard.server.store.base import InstanceState, Platform, TerminationReason

LIVE = frozenset({InstanceState.CREATING, InstanceState.ASSIGNED, InstanceState.READY})


async def _create(
    store: Store,
    org: Organization,
    *,
    labels: dict[str, str] | None = None,
    platform: Platform = Platform.ANDROID,
    region: str = "eu",
    n: int = 0,
) -> str:
    instance = await store.create_instance(
        org_id=org.id,
        platform=platform,
        region=region,
        labels=labels or {},
        spec={"model": "pixel", "n": n},
        display_name=None,
        token=f"tok-{platform}-{region}-{n}-{sorted((labels or {}).items())}",
        stream_token=f"str-{platform}-{region}-{n}-{sorted((labels or {}).items())}",
    )
    return instance.id


@pytest.fixture
async def org(store: Store) -> Organization:
    return await store.create_organization("acme")


async def test_create_and_get(store: Store, org: Organization) -> None:
    created = await store.create_instance(
        org_id=org.id,
        platform=Platform.IOS,
        region="us-east",
        labels={"a": "1"},
        spec={"model": "ipad"},
        display_name="mine",
        token="t1",
        stream_token="s1",
    )
    assert created.id.startswith("ios_us-east_")
    assert created.state is InstanceState.CREATING
    got = await store.get_instance(created.id, org_id=org.id)
    assert got == created
    other = await store.create_organization("other")
    with pytest.raises(NotFound):
        await store.get_instance(created.id, org_id=other.id)


async def test_create_in_missing_org(store: Store) -> None:
    with pytest.raises(NotFound):
        await store.create_instance(
            org_id="org_01J00000000000000000000000",
            platform=Platform.IOS,
            region="eu",
            labels={},
            spec={},
            display_name=None,
            token="t",
            stream_token="s",
        )


async def test_pages_and_filters(store: Store, org: Organization) -> None:
    ids = [await _create(store, org, labels={"k": str(i % 2), "all": "x"}, n=i) for i in range(7)]
    await _create(store, org, platform=Platform.IOS)
    page = await store.list_instances(org.id, Platform.ANDROID, limit=3)
    assert [i.id for i in page] == ids[:3]
    page = await store.list_instances(org.id, Platform.ANDROID, limit=3, starting_after=ids[2])
    assert [i.id for i in page] == ids[3:6]
    page = await store.list_instances(org.id, Platform.ANDROID, limit=3, ending_before=ids[6])
    assert [i.id for i in page] == ids[3:6]
    assert await store.list_instances(org.id, Platform.ANDROID, starting_after=ids[6]) == []
    odd = await store.list_instances(org.id, Platform.ANDROID, labels={"k": "1", "all": "x"})
    assert [i.id for i in odd] == ids[1::2]
    assert await store.list_instances(org.id, Platform.ANDROID, labels={"k": "1", "all": "y"}) == []
    await store.transition_instance(
        ids[0],
        InstanceState.TERMINATED,
        expected=LIVE,
        termination_reason=TerminationReason.USER_REQUESTED,
    )
    gone = await store.list_instances(
        org.id, Platform.ANDROID, states=frozenset({InstanceState.TERMINATED})
    )
    assert [i.id for i in gone] == ids[:1]
    live = await store.list_instances(org.id, Platform.ANDROID, states=LIVE)
    assert [i.id for i in live] == ids[1:]


async def test_find_live_by_exact_labels(store: Store, org: Organization) -> None:
    first = await _create(store, org, labels={"a": "1", "b": "2"})
    await _create(store, org, labels={"a": "1"}, n=1)
    found = await store.find_live_instance(org.id, Platform.ANDROID, "eu", {"b": "2", "a": "1"})
    assert found.id == first
    with pytest.raises(NotFound):
        await store.find_live_instance(org.id, Platform.ANDROID, "us", {"a": "1", "b": "2"})
    await store.transition_instance(
        first,
        InstanceState.TERMINATED,
        expected=LIVE,
        error_message="boom",
        termination_reason=TerminationReason.ERROR,
    )
    with pytest.raises(NotFound):
        await store.find_live_instance(org.id, Platform.ANDROID, "eu", {"a": "1", "b": "2"})


async def test_transitions_and_tokens(store: Store, org: Organization) -> None:
    iid = await _create(store, org)
    created = await store.get_instance(iid)
    assert created.token is not None
    found, stream_only = await store.get_instance_by_token(created.token)
    assert found.id == iid and not stream_only
    assert created.stream_token is not None
    assert (await store.get_instance_by_token(created.stream_token))[1] is True
    assigned = await store.transition_instance(
        iid, InstanceState.ASSIGNED, expected=frozenset({InstanceState.CREATING}), host_id="h1"
    )
    assert assigned.host_id == "h1" and assigned.assigned_at is not None
    assert [i.id for i in await store.list_live_instances(host_id="h1")] == [iid]
    with pytest.raises(Conflict):
        await store.transition_instance(
            iid, InstanceState.READY, expected=frozenset({InstanceState.CREATING})
        )
    ready = await store.transition_instance(
        iid, InstanceState.READY, expected=frozenset({InstanceState.ASSIGNED})
    )
    assert ready.ready_at is not None
    done = await store.transition_instance(
        iid,
        InstanceState.TERMINATED,
        expected=LIVE,
        termination_reason=TerminationReason.HOST_LOST,
    )
    assert done.token is None and done.stream_token is None and done.terminated_at is not None
    assert done.termination_reason is TerminationReason.HOST_LOST
    with pytest.raises(NotFound):
        await store.get_instance_by_token(created.token)
    assert await store.list_live_instances() == []
