"""``/v1/build_cache/{key}`` in process, on both backends: Gradle's HTTP build cache protocol,
API keys as Bearer and as the HTTP Basic password, roles, organizations apart, the entry
limit, the per-organization bound (least recently used first) and the idle sweep."""

from __future__ import annotations

import base64
import os
from pathlib import Path

from quart.typing import TestClientProtocol as Client

from devyard.server.blobs import LocalBlobStore
from devyard.server.build_cache import CONTENT_TYPE, BuildCacheService, BuildCacheSettings
from devyard.server.store import Store
from devyard.server.store.build_cache import SqlBuildCache
from tests.server.api.conftest import Callers, assert_api_error

from .conftest import KIB

KEY_A = "0123456789abcdef0123456789abcdef"
KEY_B = "a" * 40
KEY_C = "b" * 64
KEY_D = "c" * 16


def basic(key: str, user: str = "gradle") -> dict[str, str]:
    token = base64.b64encode(f"{user}:{key}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


def url(key: str) -> str:
    return f"/v1/build_cache/{key}"


async def test_put_then_get_with_basic_and_bearer(client: Client, callers: Callers) -> None:
    entry = os.urandom(100 * KIB)  # larger than the API's own body limit (64 KiB here)
    response = await client.put(url(KEY_A), data=entry, headers=basic(callers.member.key))
    assert response.status_code == 200, await response.get_data()
    assert await response.get_json() == {"key": KEY_A, "size": len(entry)}
    for headers in (callers.viewer.headers, basic(callers.viewer.key, user="")):
        got = await client.get(url(KEY_A), headers=headers)
        assert got.status_code == 200
        assert got.content_type == CONTENT_TYPE
        assert await got.get_data() == entry
    head = await client.head(url(KEY_A), headers=callers.viewer.headers)
    assert head.status_code == 200
    await assert_api_error(await client.get(url(KEY_B), headers=callers.viewer.headers), 404)
    await assert_api_error(await client.head(url(KEY_B), headers=callers.viewer.headers), 404)


async def test_viewers_read_members_write(client: Client, callers: Callers) -> None:
    for caller in (callers.viewer, callers.read_only):
        response = await client.put(url(KEY_A), data=b"x", headers=basic(caller.key))
        await assert_api_error(response, 403)
    await assert_api_error(await client.put(url(KEY_A), data=b"x"), 401)
    await assert_api_error(await client.get(url(KEY_A), headers=basic("not-a-key")), 401)
    await assert_api_error(await client.get(url(KEY_A), headers={"Authorization": "Basic !!"}), 401)
    await assert_api_error(await client.get(url(KEY_A), headers=callers.viewer.headers), 404)


async def test_organizations_are_apart(client: Client, callers: Callers) -> None:
    ours, theirs = b"acme's entry", b"globex's entry"
    await client.put(url(KEY_A), data=ours, headers=callers.member.headers)
    await assert_api_error(await client.get(url(KEY_A), headers=callers.other_admin.headers), 404)
    response = await client.put(url(KEY_A), data=theirs, headers=callers.other_admin.headers)
    assert response.status_code == 200
    assert await (await client.get(url(KEY_A), headers=callers.admin.headers)).get_data() == ours
    got = await client.get(url(KEY_A), headers=callers.other_admin.headers)
    assert await got.get_data() == theirs


async def test_a_key_that_is_not_hex_is_400(client: Client, callers: Callers) -> None:
    for bad in ("XYZ0123456789abcdef", "abc", "A" * 32, "g" * 32, "0" * 129):
        response = await client.get(url(bad), headers=callers.member.headers)
        await assert_api_error(response, 400)
        response = await client.put(url(bad), data=b"x", headers=callers.member.headers)
        await assert_api_error(response, 400)


async def test_an_entry_past_the_limit_is_413_and_not_kept(
    client: Client, callers: Callers
) -> None:
    response = await client.put(
        url(KEY_A), data=b"x" * (150 * KIB + 1), headers=callers.member.headers
    )
    await assert_api_error(response, 413)
    await assert_api_error(await client.get(url(KEY_A), headers=callers.member.headers), 404)


async def test_past_the_bound_the_least_recently_used_go(client: Client, callers: Callers) -> None:
    headers = callers.member.headers
    for key in (KEY_A, KEY_B, KEY_C):  # 300 KiB: exactly the bound
        response = await client.put(url(key), data=os.urandom(100 * KIB), headers=headers)
        assert response.status_code == 200
    assert (await client.get(url(KEY_A), headers=headers)).status_code == 200  # A used: B is LRU
    await client.put(url(KEY_D), data=os.urandom(100 * KIB), headers=headers)
    present = {
        k: (await client.get(url(k), headers=headers)).status_code
        for k in (KEY_A, KEY_B, KEY_C, KEY_D)
    }
    assert present == {KEY_A: 200, KEY_B: 404, KEY_C: 200, KEY_D: 200}
    # another organization's bound is its own
    response = await client.put(
        url(KEY_B), data=os.urandom(100 * KIB), headers=callers.other_admin.headers
    )
    assert response.status_code == 200
    assert (await client.get(url(KEY_A), headers=headers)).status_code == 200


async def test_the_sweep_drops_idle_entries(store: Store, callers: Callers, tmp_path: Path) -> None:
    assert isinstance(store, SqlBuildCache)
    now = [1_800_000_000.0]
    blobs = LocalBlobStore(tmp_path / "build-cache")
    settings = BuildCacheSettings(max_idle_days=7)
    service = BuildCacheService(store, store, blobs, settings, wall_clock=lambda: now[0])

    async def one(data: bytes):  # type: ignore[no-untyped-def]
        yield data

    org = callers.admin.org_id
    await service.put(org, KEY_A, one(b"old"))
    now[0] += 6 * 86400
    await service.put(org, KEY_B, one(b"newer"))
    now[0] += 2 * 86400  # A unused for 8 days, B for 2
    assert await service.sweep() == 1
    assert not await service.has(org, KEY_A)
    body = await service.get(org, KEY_B)
    assert body is not None and b"".join([c async for c in body]) == b"newer"
    assert [b.key for b in await blobs.list_blobs()] == [f"{org}.{KEY_B}"]


async def test_a_deleted_organizations_entries_leave_the_backend(
    store: Store, callers: Callers, tmp_path: Path
) -> None:
    assert isinstance(store, SqlBuildCache)
    now = [1_800_000_000.0]
    blobs = LocalBlobStore(tmp_path / "build-cache")
    service = BuildCacheService(
        store, store, blobs, BuildCacheSettings(), wall_clock=lambda: now[0]
    )

    async def one(data: bytes):  # type: ignore[no-untyped-def]
        yield data

    ours, theirs = callers.admin.org_id, callers.other_admin.org_id
    await service.put(ours, KEY_A, one(b"kept"))
    await service.put(theirs, KEY_A, one(b"goes"))
    await store.delete_organization(theirs)
    assert await service.sweep_deleted(grace=0) == 1  # the local store's mtimes are real
    assert [b.key for b in await blobs.list_blobs()] == [f"{ours}.{KEY_A}"]
