"""`python -m bench notify`: PostgreSQL LISTEN/NOTIFY's fan-out ceiling for the cluster bus
(issue 23, docs/scale-out.md): events per second to K listeners before the p99 lag from
send to dispatch exceeds 100 ms (or events go missing).

A throwaway cluster (`pgcluster.temporary_cluster`) on loopback. One publisher thread sends
events paced in 10 ms batches (one autocommit ``SELECT pg_notify(...) FROM unnest(...)`` per
batch, distinct payloads of ~120 bytes like the bus's ``instance`` event); K listeners are
real `cluster.bus.Bus` objects in this process, each with its own LISTEN connection. The rate
doubles from ``--start`` until the lag or loss bound breaks. Note that the K listeners share
this one Python process (and the machine's cores with PostgreSQL), so the dispatch work is
K times what one replica does: the number is a lower bound for K replicas on K machines.

Options: ``--listeners 1,2,4,8``, ``--seconds 1.5`` per step, ``--start 250``, ``--max
64000``. The last line printed is one JSON object ``{"bench": "notify", "results": [{"K",
"ceiling_events_per_s", "steps": [{rate, p50_ms, p99_ms, lost}]}]}``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Any, cast

import psycopg
import trio

from devyard.server.cluster.bus import Bus, Topic, channel_name
from devyard.server.store.pgcluster import ClusterUnavailable, temporary_cluster

_LAG_BOUND_S = 0.1
_BATCH_S = 0.01


def _publish(url: str, channel: str, rate: int, seconds: float, sent: list[int]) -> None:
    """Thread: send *rate* events/s for *seconds* in paced batches."""
    per_batch = max(1, round(rate * _BATCH_S))
    with psycopg.connect(url, autocommit=True) as conn:
        start = time.monotonic()
        n = 0
        while time.monotonic() - start < seconds:
            payloads = [
                json.dumps(
                    {
                        "t": Topic.INSTANCE,
                        "from": "bench",
                        "ts": time.time(),
                        "instance_id": f"android_{n + i:012d}",
                        "state": "ready",
                    }
                )
                for i in range(per_batch)
            ]
            conn.execute(
                "SELECT pg_notify(%s, p) FROM unnest(%s::text[]) AS p", (channel, payloads)
            )
            n += per_batch
            ahead = start + (n / rate) - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)
        sent.append(n)


async def _step(url: str, channel: str, k: int, rate: int, seconds: float) -> dict[str, Any]:
    lags: list[float] = []
    counts = [0] * k
    buses = [Bus(url, channel, f"listener{i}", cast(Any, None)) for i in range(k)]
    async with trio.open_nursery() as nursery:
        for bus in buses:
            await nursery.start(bus.run)

        async def listen(i: int, bus: Bus) -> None:
            async with bus.subscribe([Topic.INSTANCE], buffer=100_000) as subscription:
                async for event in subscription:
                    lags.append(time.time() - event.sent_at)
                    counts[i] += 1

        for i, bus in enumerate(buses):
            nursery.start_soon(listen, i, bus)
        await trio.sleep(0.2)  # the subscriptions are in place
        sent: list[int] = []
        await trio.to_thread.run_sync(_publish, url, channel, rate, seconds, sent)
        with trio.move_on_after(2.0):  # let the listeners drain
            while sum(counts) < sent[0] * k:  # noqa: ASYNC110 - polling counters
                await trio.sleep(0.05)
        nursery.cancel_scope.cancel()
    lags.sort()
    expected = sent[0] * k
    return {
        "rate": rate,
        "p50_ms": round(1000 * statistics.median(lags), 2) if lags else None,
        "p99_ms": round(1000 * lags[int(0.99 * (len(lags) - 1))], 2) if lags else None,
        "lost": expected - sum(counts),
    }


async def _run(url: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    results = []
    channel = channel_name("bench")
    for k in [int(x) for x in args.listeners.split(",")]:
        steps = []
        ceiling = 0
        rate = args.start
        while rate <= args.max:
            step = await _step(url, channel, k, rate, args.seconds)
            steps.append(step)
            p50, p99, lost = step["p50_ms"], step["p99_ms"], step["lost"]
            print(f"K={k} rate={rate}/s p50={p50} ms p99={p99} ms lost={lost}")
            if step["lost"] or step["p99_ms"] is None or step["p99_ms"] > 1000 * _LAG_BOUND_S:
                break
            ceiling = rate
            rate *= 2
        results.append({"K": k, "ceiling_events_per_s": ceiling, "steps": steps})
    return results


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench notify")
    parser.add_argument("--listeners", default="1,2,4,8")
    parser.add_argument("--seconds", type=float, default=1.5)
    parser.add_argument("--start", type=int, default=250)
    parser.add_argument("--max", type=int, default=64000)
    args = parser.parse_args(argv)
    try:
        with temporary_cluster() as cluster:
            results = trio.run(_run, cluster.url(), args)
    except ClusterUnavailable as exc:
        print(f"bench notify: no PostgreSQL: {exc}", file=sys.stderr)
        return 2
    print(json.dumps({"bench": "notify", "results": results}))
    return 0
