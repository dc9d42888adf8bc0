"""`python -m bench instances`: create-to-ready latency and list latency of the instances API,
on SQLite and on PostgreSQL.

For each backend a real `devyard up` process (the server and one host daemon with virtual
devices; SQLite in a temporary data dir, or a database of a throwaway PostgreSQL cluster)
listens on 127.0.0.1, port 0, with the rate limiter off. This process is the client: one
keep-alive connection, one request at a time, so each figure is a latency, not a throughput.

Figures per backend (milliseconds, p50 and p95 over the samples):

- ``create_ready``: ``POST /v1/android_instances?wait=true`` until it answers ``ready``
  (placement, the order over the host link, the virtual device's boot, the ready event);
  ``create``: the same without ``wait`` (answers at once, ``creating``). Each instance is deleted
  before the next create (the host has room for 4); a 409 while the host has not yet reported
  a stop is retried, not sampled, and counted in ``no_capacity_retries``.
- ``list``: the first page (50) of ``GET /v1/android_instances``; ``list_selector``: the first
  page of ``labelSelector=tenant=t7`` (1 row in 20 matches); ``list_rare``: a selector that
  matches one row (the scan the index cannot shortcut); ``whoami``: ``GET /whoami``, the cost
  of authentication alone, as the baseline. Measured with ``--rows`` / 10 instances in the
  store, then again after bulk-inserting up to ``--rows`` (terminated instances with labels
  ``tenant`` and ``user``, written through the store's own transactions).

Ratios, not timed assertions: ``list_10x_rows`` (a page at ``--rows`` over a page at a tenth
of them; near 1 means a page costs the same however many rows there are), ``list_over_whoami``
and ``ready_over_create`` (what waiting for the device adds). The last line printed is one JSON
object: {"bench": "instances", "results": {"sqlite": {...}, "postgres": {...}}, ...}.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import sys
import tempfile
from collections.abc import Callable
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import httpx
import trio

from bench._devyard import START_TIMEOUT, postgres_url, start_devyard
from devyard.server.store import open_store
from devyard.server.store.database import Tx
from devyard.server.store.ids import new_ulid
from devyard.server.store.instances import labels_key
from devyard.server.store.sqlstore import SqlStore

TENANTS: Final = 20
INSERT_BATCH: Final = 2000
REGION: Final = "local"
SELECTOR: Final = "/v1/android_instances?labelSelector=tenant=t7"


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DEVYARD_")}
    env.update(DEVYARD_RATE_LIMIT_ENABLED="false")
    return env


async def _stop(process: trio.Process) -> None:
    process.send_signal(signal.SIGTERM)
    with trio.move_on_after(15):
        await process.wait()
    if process.returncode is None:
        process.kill()
        await process.wait()


async def _insert(target: str, org_id: str, start: int, stop: int) -> None:
    """Rows ``start..stop-1``: terminated Android instances, one write transaction per batch."""
    now = datetime.now(UTC)
    async with open_store(target) as store:
        assert isinstance(store, SqlStore)

        def batch(first: int, last: int) -> Callable[[Tx], None]:
            def write(tx: Tx) -> None:
                for i in range(first, last):
                    labels = {"tenant": f"t{i % TENANTS}", "user": f"u{i}"}
                    iid = f"android_{REGION}_{new_ulid()}"
                    tx.execute(
                        "INSERT INTO instances (id, org_id, platform, region, labels, labels_key,"
                        " spec, state, termination_reason, created_at, terminated_at) VALUES"
                        " (:id, :org_id, 'android', :region, :labels, :labels_key, :spec,"
                        " 'terminated', 'UserRequested', :now, :now)",
                        {
                            "id": iid,
                            "org_id": org_id,
                            "region": REGION,
                            "labels": json.dumps(labels),
                            "labels_key": labels_key(labels),
                            "spec": '{"inactivityTimeout":"10m","hardTimeout":"0"}',
                            "now": now,
                        },
                    )
                    for key, value in labels.items():
                        tx.execute(
                            "INSERT INTO instance_labels (instance_id, key, value)"
                            " VALUES (:id, :key, :value)",
                            {"id": iid, "key": key, "value": value},
                        )

            return write

        for first in range(start, stop, INSERT_BATCH):
            await store._db.write(batch(first, min(stop, first + INSERT_BATCH)))


async def _analyze(target: str) -> None:
    """PostgreSQL: fresh planner statistics, as autovacuum takes them within about a minute
    of a bulk load (the figure before is reported as ``list_selector_stale``)."""
    async with open_store(target) as store:
        assert isinstance(store, SqlStore)
        await store._db.write(lambda tx: tx.execute("ANALYZE instances, instance_labels"))


def _ms(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return {"p50": round(statistics.median(ordered) * 1000, 2), "p95": round(p95 * 1000, 2)}


async def _timed(http: httpx.AsyncClient, path: str, repeat: int) -> list[float]:
    samples = []
    for _ in range(repeat):
        start = trio.current_time()
        response = await http.get(path)
        samples.append(trio.current_time() - start)
        response.raise_for_status()
    return samples


async def _creates(http: httpx.AsyncClient, count: int) -> dict[str, list[float]]:
    """``count`` creates with and without ``wait``, alternating; each deleted before the next."""
    with trio.fail_after(START_TIMEOUT):  # until the host daemon registers, no capacity
        while True:
            if (await http.post("/v1/android_instances", json={})).status_code != 409:
                break
            await trio.sleep(0.05)
    live = await http.get("/v1/android_instances?state=creating,assigned,ready")
    for leftover in live.json()["items"]:
        await http.delete(f"/v1/android_instances/{leftover['id']}")
    found: dict[str, list[float]] = {"create_ready": [], "create": [], "no_capacity": []}
    for _ in range(count):
        for name, query in (("create_ready", "?wait=true"), ("create", "")):
            while True:
                start = trio.current_time()
                created = await http.post(f"/v1/android_instances{query}", json={})
                elapsed = trio.current_time() - start
                if created.status_code != 409:
                    break
                # The host frees a slot when it reports the last delete's stop; not a sample.
                found["no_capacity"].append(elapsed)
                await trio.sleep(0.01)
            found[name].append(elapsed)
            created.raise_for_status()
            body = created.json()
            # Without wait the answer comes at once, ``creating`` (spec 3.1): the order goes to
            # the host afterwards.
            expected = {"ready"} if query else {"creating"}
            if body["status"]["state"] not in expected:
                raise RuntimeError(f"create{query} answered {body['status']['state']}")
            (await http.delete(f"/v1/android_instances/{body['id']}")).raise_for_status()
    return found


async def _lists(http: httpx.AsyncClient, repeat: int, rare_user: str) -> dict[str, Any]:
    paths = {
        "whoami": "/whoami",
        "list": "/v1/android_instances",
        "list_selector": SELECTOR,
        "list_rare": f"/v1/android_instances?labelSelector=user={rare_user}",
    }
    for path in paths.values():  # warm caches and connections
        await _timed(http, path, 3)
    pages = {
        "list": len((await http.get(paths["list"])).json()["items"]),
        "list_selector": len((await http.get(paths["list_selector"])).json()["items"]),
        "list_rare": len((await http.get(paths["list_rare"])).json()["items"]),
    }
    if pages != {"list": 50, "list_selector": 50, "list_rare": 1}:
        raise RuntimeError(f"unexpected page sizes {pages}")
    return {name: _ms(await _timed(http, path, repeat)) for name, path in paths.items()}


async def _measure(flags: list[str], target: str, args: argparse.Namespace) -> dict[str, Any]:
    async with trio.open_nursery() as nursery:
        process, url = await start_devyard(
            nursery, ["up", *flags, "--port", "0", "--log-level", "warning"], _env()
        )
        try:
            key = (Path(flags[1]) / "admin-api-key").read_text().strip()
            headers = {"Authorization": f"Bearer {key}"}
            async with httpx.AsyncClient(base_url=url, headers=headers, timeout=300) as http:
                org_id = (await http.get("/whoami")).json()["organization"]["id"]
                created = await _creates(http, args.creates)
                small = args.rows // 10
                insert_s = 0.0
                phases: dict[int, dict[str, Any]] = {}
                for first, last in ((0, small), (small, args.rows)):
                    start = trio.current_time()
                    await _insert(target, org_id, first, last)
                    insert_s += trio.current_time() - start
                    stale = None
                    if "--database-url" in flags:
                        stale = _ms(await _timed(http, SELECTOR, 10))
                        await _analyze(target)
                    phases[last] = await _lists(http, args.repeat, f"u{last - 1}")
                    if stale is not None:
                        phases[last]["list_selector_stale"] = stale
                at_small, at_rows = phases[small], phases[args.rows]
        finally:
            await _stop(process)
            nursery.cancel_scope.cancel()
    result: dict[str, Any] = {
        "create_ready_ms": _ms(created["create_ready"]),
        "create_ms": _ms(created["create"]),
        "no_capacity_retries": len(created["no_capacity"]),
        f"at_{small}_rows_ms": at_small,
        f"at_{args.rows}_rows_ms": at_rows,
        "insert_s": round(insert_s, 2),
    }
    result["ratios"] = {
        f"list_10x_rows_{name}": round(at_rows[name]["p50"] / at_small[name]["p50"], 2)
        for name in ("list", "list_selector", "list_rare")
    } | {
        "list_over_whoami": round(at_rows["list"]["p50"] / at_rows["whoami"]["p50"], 2),
        "ready_over_create": round(
            result["create_ready_ms"]["p50"] / result["create_ms"]["p50"], 2
        ),
    }
    return result


def _row(backend: str, r: dict[str, Any], rows: int) -> str:
    at = r[f"at_{rows}_rows_ms"]
    return (
        f"{backend:>8}: create wait=true p50 {r['create_ready_ms']['p50']:.1f} ms"
        f" p95 {r['create_ready_ms']['p95']:.1f}  (no wait p50 {r['create_ms']['p50']:.1f})\n"
        f"{'':>10}{rows} rows: list p50 {at['list']['p50']:.2f} ms p95 {at['list']['p95']:.2f}"
        f"   selector p50 {at['list_selector']['p50']:.2f} p95 {at['list_selector']['p95']:.2f}"
        f"   rare p50 {at['list_rare']['p50']:.2f}   whoami p50 {at['whoami']['p50']:.2f}\n"
        f"{'':>10}ratios {r['ratios']}"
    )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench instances", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer samples: about a minute")
    parser.add_argument("--rows", type=int, default=10_000, help="instances in the store")
    parser.add_argument("--creates", type=int, help="creates of each kind (default 30; quick 8)")
    parser.add_argument("--repeat", type=int, help="requests per list figure (200; quick 40)")
    parser.add_argument(
        "--backends", default="sqlite,postgres", help="comma-separated: sqlite, postgres"
    )
    args = parser.parse_args(argv)
    args.creates = args.creates or (8 if args.quick else 30)
    args.repeat = args.repeat or (40 if args.quick else 200)
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    if not set(backends) <= {"sqlite", "postgres"} or args.rows < 1000 or args.creates < 1:
        parser.error("bad --backends, --rows (at least 1000) or --creates")

    results: dict[str, Any] = {}
    with ExitStack() as stack:
        for backend in backends:
            data_dir = stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-inst-"))
            flags = ["--data-dir", data_dir]
            target = str(Path(data_dir) / "devyard.sqlite3")
            if backend == "postgres":
                url = stack.enter_context(postgres_url("instances"))
                if url is None:
                    results[backend] = None
                    continue
                flags += ["--database-url", url]
                target = url
            results[backend] = trio.run(_measure, flags, target, args)
            print(_row(backend, results[backend], args.rows), flush=True)
    summary = {
        "bench": "instances",
        "results": results,
        "config": {
            "rows": args.rows,
            "creates": args.creates,
            "repeat": args.repeat,
            "cpus": os.cpu_count(),
            "load": os.getloadavg()[0],
            "python": platform.python_version(),
        },
    }
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
