"""The usage page in-process: with billed instances in the store (run through the store's own
transitions, as the analytics tests do), the table and chart data carry them per platform and
region, the CSV has the rows; a bad range is a message; another organization sees none.
(The charts drawn in Chromium: test_tunnels_assets_usage_browser.)"""

from __future__ import annotations

import csv
import io
import itertools
from datetime import UTC, date, datetime

from devyard.server.console.pages.usage import read_query
from devyard.server.store import Store
from devyard.server.store.base import InstanceState, Platform, TerminationReason

from .conftest import Console, signed_in

_SERIAL = itertools.count()


async def ended_instance(store: Store, org_id: str, platform: Platform) -> str:
    """An instance created, ready and ended now: billed one minute (rounded up)."""
    instance = await store.create_instance(
        org_id=org_id, platform=platform, region="local", labels={"team": "web"}, spec={},
        display_name=None, token=f"dyi_{next(_SERIAL)}", stream_token=f"dys_{next(_SERIAL)}",
    )  # fmt: skip
    await store.transition_instance(
        instance.id, InstanceState.ASSIGNED, expected=frozenset({InstanceState.CREATING}),
        host_id="h1",
    )  # fmt: skip
    await store.transition_instance(
        instance.id, InstanceState.READY, expected=frozenset({InstanceState.ASSIGNED})
    )
    await store.transition_instance(
        instance.id, InstanceState.TERMINATED, expected=frozenset({InstanceState.READY}),
        termination_reason=TerminationReason.USER_REQUESTED,
    )  # fmt: skip
    return instance.id


async def test_signed_out_goes_to_sign_in(console: Console) -> None:
    response = await console.client().get("/console/usage/")
    assert response.headers["Location"] == "/console/sign-in?next=/console/usage/"


async def test_the_table_and_the_csv_carry_the_billed_instances(console: Console) -> None:
    for platform in (Platform.ANDROID, Platform.ANDROID, Platform.IOS):
        await ended_instance(console.store, console.alice.org_id, platform)
    await ended_instance(console.store, console.olga.org_id, Platform.ANDROID)
    client = console.client()
    await signed_in(client, console.carol.key)  # a viewer may read usage
    today = datetime.now(UTC).date().isoformat()
    response = await client.get("/console/usage/")
    page = await response.get_data(as_text=True)
    assert response.status_code == 200
    assert 'id="total-instances">3<' in page
    assert f'data-start="{today}T00:00:00Z" data-series="android · local"' in page
    assert 'data-instances="2" data-minutes="2"' in page
    assert 'data-series="ios · local" data-instances="1" data-minutes="1"' in page
    assert page.count("data-buckets=") == 1 and page.count(f"{today}T00:00:00Z") >= 2
    csv_response = await client.get(f"/console/usage/usage.csv?from={today}&to={today}&bucket=day")
    assert csv_response.headers["Content-Disposition"].startswith("attachment;")
    rows = list(csv.DictReader(io.StringIO(await csv_response.get_data(as_text=True))))
    assert [(r["platform"], r["region"], r["instances"], r["billedMinutes"]) for r in rows] == [
        ("android", "local", "2", "2"),
        ("ios", "local", "1", "1"),
    ]
    # a label filter and an hourly bucket go to the API
    hourly = await client.get("/console/usage/usage.csv?bucket=hour&labels=team%3Dnone")
    assert len((await hourly.get_data(as_text=True)).splitlines()) == 1  # the header only


async def test_a_bad_range_or_bucket_is_a_message(console: Console) -> None:
    client = console.client()
    await signed_in(client, console.alice.key)
    response = await client.get("/console/usage/?from=yesterday")
    assert response.status_code == 400 and 'role="alert"' in await response.get_data(True)
    # the API's own refusal: too many buckets of one minute
    response = await client.get("/console/usage/?from=2020-01-01&to=2030-01-01&bucket=minute")
    text = await response.get_data(as_text=True)
    assert response.status_code == 400 and "narrow it" in text and "Traceback" not in text


async def test_another_organization_sees_none_of_it(console: Console) -> None:
    await ended_instance(console.store, console.alice.org_id, Platform.ANDROID)
    olga = console.client()
    await signed_in(olga, console.olga.key)
    page = await (await olga.get("/console/usage/")).get_data(as_text=True)
    assert 'id="total-instances">0<' in page and "No billed instances" in page
    rows = (await (await olga.get("/console/usage/usage.csv")).get_data(as_text=True)).splitlines()
    assert len(rows) == 1


def test_the_default_range_is_the_last_seven_days() -> None:
    query = read_query({}, today=date(2030, 3, 8))
    assert (query.start, query.end, query.bucket) == (date(2030, 3, 2), date(2030, 3, 8), "day")
    assert query.params()["startedAt[lte]"] == "2030-03-08T23:59:59Z"
