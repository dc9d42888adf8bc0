"""Usage analytics over a known history (both backends): every rule of spec 4.1 against answers
computed by hand below.

The history (all times UTC, organization "acme" unless said):

    id  platform  labels            created              ready                terminated            billed
    A   ios       team=a            03-01 10:00:00       03-01 10:01:00       03-01 10:31:00.5      31 (30m0.5s, up)
    B   android   team=b            03-01 23:59:59       03-02 00:00:10       03-02 00:10:10        10 (exactly)
    C   ios       team=a, pr=7      03-03 12:00:00       never                03-03 12:00:30         0 (never ready)
    D   xcode     team=a            03-05 08:00:00       03-05 08:02:00       03-06 09:02:00      1500 (25 h)
    E   ios       team=b            03-01 10:30:00       (still running: not billed, not shown)
    F   ios       (globex)          03-01 11:00:00       03-01 11:00:01       03-01 11:05:00         (other org)
"""  # noqa: E501

from __future__ import annotations

from typing import Any

import pytest
from quart.typing import TestClientProtocol as Client

from devyard.server.store import Store
from devyard.server.store.base import Platform
from tests.server.api.conftest import assert_api_error
from tests.server.tokens.conftest import Callers, SetClock, run_instance

DAY = "2030-03-0{}T00:00:00Z"


@pytest.fixture
async def history(store: Store, store_clock: SetClock, callers: Callers) -> dict[str, str]:
    org = callers.admin.org_id
    ids = {}
    ids["A"] = await run_instance(
        store, store_clock, org, labels={"team": "a"},
        created="2030-03-01T10:00:00Z", ready="2030-03-01T10:01:00Z",
        terminated="2030-03-01T10:31:00.500000Z",
    )  # fmt: skip
    ids["E"] = await run_instance(
        store, store_clock, org, labels={"team": "b"}, created="2030-03-01T10:30:00Z",
        ready="2030-03-01T10:31:00Z",
    )  # fmt: skip
    ids["B"] = await run_instance(
        store, store_clock, org, platform=Platform.ANDROID, labels={"team": "b"},
        created="2030-03-01T23:59:59Z", ready="2030-03-02T00:00:10Z",
        terminated="2030-03-02T00:10:10Z",
    )  # fmt: skip
    ids["C"] = await run_instance(
        store, store_clock, org, labels={"team": "a", "pr": "7"},
        created="2030-03-03T12:00:00Z", terminated="2030-03-03T12:00:30Z",
    )  # fmt: skip
    ids["D"] = await run_instance(
        store, store_clock, org, platform=Platform.XCODE, labels={"team": "a"},
        created="2030-03-05T08:00:00Z", ready="2030-03-05T08:02:00Z",
        terminated="2030-03-06T09:02:00Z",
    )  # fmt: skip
    ids["F"] = await run_instance(
        store, store_clock, callers.other_admin.org_id, created="2030-03-01T11:00:00Z",
        ready="2030-03-01T11:00:01Z", terminated="2030-03-01T11:05:00Z",
    )  # fmt: skip
    return {name: instance.id for name, instance in ids.items()}


async def _get(client: Client, callers: Callers, path: str, **query: str) -> Any:
    response = await client.get(path, query_string=query, headers=callers.admin.headers)
    assert response.status_code == 200, await response.get_data()
    return await response.get_json()


def _buckets(answer: Any) -> list[tuple[str, int, int]]:
    return [(b["start"], b["instances"], b["billedMinutes"]) for b in answer["buckets"]]


async def _tids(client: Client, callers: Callers, history: dict[str, str], **query: str) -> str:
    """The history names of the instances the per-instance endpoint returns, in order."""
    answer = await _get(client, callers, "/v1/analytics/instances", **query)
    names = {tid: name for name, tid in history.items()}
    return "".join(names[item["instanceTid"]] for item in answer["items"])


async def test_a_bound_is_required(client: Client, callers: Callers, history: object) -> None:
    for path in ("/v1/analytics", "/v1/analytics/instances"):
        response = await client.get(path, headers=callers.admin.headers)
        body = await assert_api_error(response, 400, "at least one time bound")
        assert body["reason"] == "missing_parameter"
        response = await client.get(
            path, query_string={"labels": "team=a"}, headers=callers.admin.headers
        )
        await assert_api_error(response, 400, "at least one time bound")


async def test_bounded_start_range_lists_empty_days(
    client: Client, callers: Callers, history: object
) -> None:
    answer = await _get(
        client, callers, "/v1/analytics",
        **{"startedAt[gte]": DAY.format(1), "startedAt[lte]": "2030-03-03T23:59:59Z"},
    )  # fmt: skip
    assert answer["bucket"] == "day"
    assert _buckets(answer) == [
        ("2030-03-01T00:00:00Z", 2, 41),  # A and B (B starts one second before midnight)
        ("2030-03-02T00:00:00Z", 0, 0),
        ("2030-03-03T00:00:00Z", 1, 0),  # C, never ready
    ]
    assert (answer["instances"], answer["billedMinutes"]) == (3, 41)
    assert answer["startedAt[gte]"] == "2030-03-01T00:00:00Z"
    assert "from" not in answer


async def test_one_sided_bounds_list_only_populated_buckets(
    client: Client, callers: Callers, history: object
) -> None:
    answer = await _get(client, callers, "/v1/analytics", **{"startedAt[gte]": DAY.format(2)})
    assert _buckets(answer) == [("2030-03-03T00:00:00Z", 1, 0), ("2030-03-05T00:00:00Z", 1, 1500)]
    answer = await _get(
        client, callers, "/v1/analytics", **{"startedAt[lte]": "2030-03-01T23:59:59Z"}
    )
    assert _buckets(answer) == [("2030-03-01T00:00:00Z", 2, 41)]
    answer = await _get(client, callers, "/v1/analytics", **{"stoppedAt[gte]": DAY.format(2)})
    assert _buckets(answer) == [
        ("2030-03-01T00:00:00Z", 1, 10),  # B: started 03-01, stopped 03-02
        ("2030-03-03T00:00:00Z", 1, 0),
        ("2030-03-05T00:00:00Z", 1, 1500),
    ]


async def test_all_bounds_apply_together(
    client: Client, callers: Callers, history: dict[str, str]
) -> None:
    assert await _tids(client, callers, history, **{"stoppedAt[gte]": DAY.format(2)}) == "BCD"
    both = {"stoppedAt[gte]": DAY.format(2), "startedAt[lte]": DAY.format(3)}
    assert await _tids(client, callers, history, **both) == "B"
    # Bounds are inclusive, to the microsecond.
    exact = {"stoppedAt[lte]": "2030-03-01T10:31:00.5Z"}
    assert await _tids(client, callers, history, **exact) == "A"
    before = {"stoppedAt[lte]": "2030-03-01T10:31:00.499999Z"}
    assert await _tids(client, callers, history, **before) == ""
    window = {
        "startedAt[gte]": DAY.format(1),
        "startedAt[lte]": DAY.format(6),
        "stoppedAt[gte]": "2030-03-02T00:10:10Z",
        "stoppedAt[lte]": "2030-03-03T12:00:30Z",
    }
    assert await _tids(client, callers, history, **window) == "BC"
    # An empty intersection is an empty answer, not an error.
    empty = {"startedAt[gte]": DAY.format(5), "startedAt[lte]": DAY.format(4)}
    answer = await _get(client, callers, "/v1/analytics", **empty)
    assert (answer["buckets"], answer["instances"], answer["billedMinutes"]) == ([], 0, 0)


async def test_labels_filter(client: Client, callers: Callers, history: dict[str, str]) -> None:
    since = {"startedAt[gte]": DAY.format(1)}
    assert await _tids(client, callers, history, **since, labels="team=a") == "ACD"
    assert await _tids(client, callers, history, **since, labels="team=a,pr=7") == "C"
    assert await _tids(client, callers, history, **since, labels="team=b") == "B"  # E is live
    assert await _tids(client, callers, history, **since, labels="team=c") == ""
    answer = await _get(client, callers, "/v1/analytics", **since, labels="team=a")
    assert (answer["instances"], answer["billedMinutes"]) == (3, 1531)


async def test_from_and_to_intersect_count_as_bounded_and_are_echoed(
    client: Client, callers: Callers, history: dict[str, str]
) -> None:
    # start >= from (A at exactly 10:00 is in), start < to (C at exactly 12:00 is out).
    old = {"from": "2030-03-01T10:00:00Z", "to": "2030-03-03T12:00:00Z"}
    answer = await _get(client, callers, "/v1/analytics", **old)
    assert (answer["from"], answer["to"]) == (old["from"], old["to"])
    assert _buckets(answer) == [
        ("2030-03-01T00:00:00Z", 2, 41),
        ("2030-03-02T00:00:00Z", 0, 0),
        ("2030-03-03T00:00:00Z", 0, 0),  # a bounded range: the empty last day is listed
    ]
    assert await _tids(client, callers, history, **old) == "AB"
    # Intersected with the new bounds: the later lower bound and the earlier upper bound win.
    mixed = {**old, "startedAt[gte]": "2030-03-01T10:00:01Z", "startedAt[lte]": DAY.format(9)}
    assert await _tids(client, callers, history, **mixed) == "B"
    answer = await _get(client, callers, "/v1/analytics/instances", **mixed)
    assert (answer["from"], answer["to"]) == (old["from"], old["to"])
    assert answer["startedAt[gte]"] == "2030-03-01T10:00:01Z"
    # from with startedAt[lte] (no to) is bounded too; an offset is normalised to UTC.
    answer = await _get(
        client, callers, "/v1/analytics",
        **{"from": "2030-03-02T01:00:00+01:00", "startedAt[lte]": "2030-03-02T23:00:00Z"},
    )  # fmt: skip
    assert answer["from"] == "2030-03-02T00:00:00Z"
    assert _buckets(answer) == [("2030-03-02T00:00:00Z", 0, 0)]
    # to alone is one-sided: only populated buckets.
    answer = await _get(client, callers, "/v1/analytics", to=DAY.format(4))
    assert _buckets(answer) == [("2030-03-01T00:00:00Z", 2, 41), ("2030-03-03T00:00:00Z", 1, 0)]


async def test_hour_buckets(client: Client, callers: Callers, history: object) -> None:
    answer = await _get(
        client, callers, "/v1/analytics", bucket="hour",
        **{"startedAt[gte]": "2030-03-01T09:00:00Z", "startedAt[lte]": "2030-03-01T11:59:59Z"},
    )  # fmt: skip
    assert answer["bucket"] == "hour"
    assert _buckets(answer) == [
        ("2030-03-01T09:00:00Z", 0, 0),
        ("2030-03-01T10:00:00Z", 1, 31),  # A; E started then but is still running
        ("2030-03-01T11:00:00Z", 0, 0),  # F belongs to another organization
    ]


async def test_per_instance_details_and_pages(
    client: Client, callers: Callers, history: dict[str, str]
) -> None:
    since = {"startedAt[gte]": DAY.format(1)}
    answer = await _get(client, callers, "/v1/analytics/instances", **since)
    assert answer["hasMore"] is False
    first, _, third, fourth = answer["items"]
    assert first == {
        "instanceTid": history["A"],
        "platform": "ios",
        "region": "local",
        "labels": {"team": "a"},
        "startedAt": "2030-03-01T10:00:00Z",
        "readyAt": "2030-03-01T10:01:00Z",
        "stoppedAt": "2030-03-01T10:31:00.500000Z",
        "billedMinutes": 31,
        "terminationReason": "UserRequested",
        # the commercial service's SDKs' fields (docs/compatibility.md)
        "runtimeMinutes": 31.01,
        "cost": 0,
        "billedBreakdown": {"creditsBilledMinutes": 0, "onDemandBilledMinutes": 31},
        "costBreakdown": {"creditsCost": 0, "onDemandCost": 0},
    }
    assert "readyAt" not in third and third["billedMinutes"] == 0
    assert third["terminationReason"] == "Error"
    assert (fourth["platform"], fourth["billedMinutes"]) == ("xcode", 1500)

    page = await _get(client, callers, "/v1/analytics/instances", **since, limit="2")
    assert [i["instanceTid"] for i in page["items"]] == [history["A"], history["B"]]
    assert page["hasMore"] is True
    rest = await _get(
        client, callers, "/v1/analytics/instances", **since, limit="2", startingAfter=history["B"]
    )
    assert [i["instanceTid"] for i in rest["items"]] == [history["C"], history["D"]]
    assert rest["hasMore"] is False


async def test_other_organizations_see_only_their_own(
    client: Client, callers: Callers, history: dict[str, str]
) -> None:
    response = await client.get(
        "/v1/analytics/instances",
        query_string={"startedAt[gte]": DAY.format(1)},
        headers=callers.other_admin.headers,
    )
    items = (await response.get_json())["items"]
    assert [i["instanceTid"] for i in items] == [history["F"]]
    assert items[0]["billedMinutes"] == 5  # 11:00:01 to 11:05:00, rounded up


@pytest.mark.parametrize(
    ("query", "words"),
    [
        ({"startedAt[gte]": "yesterday"}, ["startedAt[gte]"]),
        ({"stoppedAt[lte]": "2030-03-01"}, ["stoppedAt[lte]"]),
        ({"from": "2030-03-01T10:00:00"}, ["from"]),  # no offset
        ({"to": "2030-03-01T23:59:60Z"}, ["to"]),  # a leap second RFC 3339 allows
        ({"startedAt[gte]": DAY.format(1), "bucket": "month"}, ["bucket"]),
        ({"startedAt[gte]": DAY.format(1), "labels": "team"}, ["labels"]),
        ({"startedAt[gte]": DAY.format(1), "limit": "0"}, ["limit"]),
    ],
)
async def test_bad_input_is_400_naming_the_parameter(
    client: Client, callers: Callers, query: dict[str, str], words: list[str]
) -> None:
    path = "/v1/analytics/instances" if "limit" in query else "/v1/analytics"
    response = await client.get(path, query_string=query, headers=callers.admin.headers)
    await assert_api_error(response, 400, *words)


async def test_a_range_of_too_many_buckets_is_400(client: Client, callers: Callers) -> None:
    two_years = {"startedAt[gte]": "2028-01-01T00:00:00Z", "startedAt[lte]": "2029-12-31T23:00:00Z"}
    response = await client.get(
        "/v1/analytics", query_string={**two_years, "bucket": "hour"}, headers=callers.admin.headers
    )
    await assert_api_error(response, 400, "buckets", "bucket=day")
    answer = await _get(client, callers, "/v1/analytics", **two_years)
    assert len(answer["buckets"]) == 731  # 2028 is a leap year
