"""The server's /metrics on its operator port, against `devyard up` as a subprocess: the
exposition parses with prometheus-client's parser and the numbers move with traffic."""

from __future__ import annotations

from pathlib import Path

import httpx
import trio

from ._prom import scrape, value
from ._up import open_up


async def test_server_metrics_move_when_traffic_flows(tmp_path: Path) -> None:
    # a small bucket: the test drives the key's rate limit to a refusal
    async with open_up(
        tmp_path, DEVYARD_RATE_LIMIT_RATE="0.1", DEVYARD_RATE_LIMIT_BURST="40"
    ) as up:
        with trio.fail_after(60):
            while value(await scrape(up.metrics_url), "devyard_hosts") < 1:  # noqa: ASYNC110
                await trio.sleep(0.1)  # the companion host daemon links
        before = await scrape(up.metrics_url)
        assert value(before, "devyard_links", kind="host") == 1
        assert value(before, "devyard_host_capacity") >= 1
        assert value(before, "devyard_server_build_info") == 1

        auth = {"Authorization": f"Bearer {up.key}"}
        async with httpx.AsyncClient(base_url=up.url, headers=auth, timeout=60) as http:
            created = await http.post("/v1/android_instances", params={"wait": "true"}, json={})
            assert created.status_code == 200, created.text
            after = await scrape(up.metrics_url)
            route = {"route": "/v1/android_instances", "method": "POST"}
            counted = "devyard_http_requests_total"
            assert value(after, counted, status="200", **route) == (
                value(before, counted, status="200", **route) + 1
            )
            timed = "devyard_http_request_duration_seconds_count"
            assert value(after, timed, **route) == value(before, timed, **route) + 1
            assert value(after, "devyard_instances", platform="android", state="ready") == 1
            store = "devyard_store_transaction_duration_seconds_count"
            assert value(after, store, backend="sqlite") > value(before, store, backend="sqlite")
            # a path with an id is counted under its template, never the raw path
            instance_id = created.json()["metadata"]["id"]
            assert (await http.get(f"/v1/android_instances/{instance_id}")).status_code == 200
            samples = await scrape(up.metrics_url)
            assert value(samples, counted, route="/v1/android_instances/{id}") >= 1
            assert not [k for k in samples if instance_id in str(k)]

            for _ in range(100):
                if (await http.get("/v1/android_instances")).status_code == 429:
                    break
            else:
                raise AssertionError("the rate limit never answered 429")
            refused = await scrape(up.metrics_url)
            assert value(refused, "devyard_rate_limit_refusals_total", limiter="key") >= 1
            assert value(refused, counted, status="429") >= 1
