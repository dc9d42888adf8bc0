"""`python -m bench replicas`: create-to-ready latency and API throughput with 1, 2 and 3
server replicas on one PostgreSQL, and what one replica-to-replica forwarding hop costs
(issue 23, docs/scale-out.md, docs/replicas.md).

For each replica count N a fresh deployment (`bench/_replicas_stack.py`): a new database in one
throwaway PostgreSQL cluster, N real `devyard server` processes with ``[cluster]`` on and
``[peers]`` (one cluster secret, distinct replica ids and data dirs, raw link ports as peer
URLs), and ``--hosts`` real host daemons with virtual devices, host i linked to replica
i mod N. This process is the load client and spreads its requests round-robin over the
replicas, as a load balancer would (``--haproxy``: also through Debian's HAProxy, when
installed). The rate limiter is off. 60 terminated instances are in the store so that a list
page is a full page.

Figures per N:

- ``create_ready_ms`` p50/p95: ``--creates`` (K) concurrent ``POST /v1/android_instances
  ?wait=true`` until ``ready``, each deleted after; ``--rounds`` rounds. A 409 (no capacity
  yet) is retried, not sampled, and counted. A create that lands on a replica without the
  chosen host's link travels as an order over NOTIFY to the holder (docs/scale-out.md).
  ``cpu_ms_per_create``: CPU of the replicas, the hosts and PostgreSQL over the rounds.
  ``idle_cores``: their CPU seconds per second over ``--idle`` s of no requests before it
  (heartbeats, refreshes, sweeps: what the deployment costs with nothing to do).
- ``whoami`` and ``list`` (the first page of ``GET /v1/android_instances``): requests/s with
  ``--concurrency`` workers for ``--duration`` s after ``--warmup`` s, p50 latency, errors,
  and CPU per request of the replicas, of PostgreSQL and of this client, plus
  ``replica_cores`` (replica CPU seconds per second: 2.0 is all of a 2-core machine).
- ``ratios``: throughput and create p50 of N=2 and N=3 over N=1.

On a machine with few cores more replicas cannot raise CPU-bound throughput: the replicas,
PostgreSQL and the client share the same cores, so read the CPU per request and
``replica_cores`` beside the ratios. ``forward``: `bench/forward.py`'s own measurement (run in
this process after the deployments are gone), direct against forwarded, and its ``hop``:
the extra RTT, open time and CPU s per GiB of one hop. The last line printed is one JSON
object: ``{"bench": "replicas", "results": {"1": ..., "2": ..., "3": ...}, "ratios",
"forward", "config", "load_average"}``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Final

import httpx
import trio

from bench._replicas_stack import (
    HAPROXY,
    Stack,
    StackError,
    postgres_pids,
    process_tree_cpu,
    stack,
)
from bench.instances import _insert
from devyard.server.bootstrap import bootstrap_organization
from devyard.server.store import open_store
from devyard.server.store.pgcluster import ClusterUnavailable, temporary_cluster

LIST_ROWS: Final = 60
WARM_TIMEOUT: Final = 60.0
ROUND_TIMEOUT: Final = 300.0  # one round of K concurrent creates, 409 retries included
PATHS: Final = {"whoami": "/whoami", "list": "/v1/android_instances"}


def _ms(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, math.ceil(0.95 * len(ordered)) - 1)]
    return {"p50": round(statistics.median(ordered) * 1000, 1), "p95": round(p95 * 1000, 1)}


class _Cpu:
    """CPU seconds of the replicas, hosts, PostgreSQL and this process between two reads."""

    def __init__(self, deployment: Stack, postmaster: int | None) -> None:
        self._stack, self._postmaster = deployment, postmaster
        self._start = self._read()

    def _read(self) -> dict[str, float | None]:
        return {
            "replicas": self._stack.replica_cpu(),
            "hosts": self._stack.host_cpu(),
            "postgres": process_tree_cpu(self._postmaster),
            "client": time.process_time(),
        }

    def spent(self) -> dict[str, float | None]:
        end = self._read()
        return {
            # max: a PostgreSQL backend that exits takes its CPU time out of the tree's sum
            k: None if (a := self._start[k]) is None or (b := end[k]) is None else max(0.0, b - a)
            for k in end
        }


async def _create_once(http: httpx.AsyncClient, samples: list[float], retries: list[int]) -> None:
    while True:
        start = trio.current_time()
        made = await http.post("/v1/android_instances?wait=true", json={})
        elapsed = trio.current_time() - start
        if made.status_code != 409:
            break
        retries.append(1)  # no capacity yet (a slot frees when its host reports the stop)
        await trio.sleep(0.02)
    if made.status_code not in (200, 201) or made.json()["status"]["state"] != "ready":
        raise StackError(f"a create answered {made.status_code}: {made.text[:300]}")
    samples.append(elapsed)
    gone = await http.delete(f"/v1/android_instances/{made.json()['metadata']['id']}")
    if gone.status_code != 200:
        raise StackError(f"a delete answered {gone.status_code}: {gone.text[:300]}")


async def _warm(clients: list[httpx.AsyncClient]) -> None:
    """One create and delete through every replica: each has heard of every host."""
    with trio.fail_after(WARM_TIMEOUT):
        for http in clients:
            await _create_once(http, [], [])


async def _creates(
    clients: list[httpx.AsyncClient], cpu: _Cpu, k: int, rounds: int
) -> dict[str, Any]:
    samples: list[float] = []
    retries: list[int] = []
    turn = itertools.count()
    for _ in range(rounds):
        with trio.move_on_after(ROUND_TIMEOUT) as late:
            async with trio.open_nursery() as nursery:
                for _ in range(k):
                    nursery.start_soon(
                        _create_once, clients[next(turn) % len(clients)], samples, retries
                    )
        if late.cancelled_caught:
            raise StackError(f"{k} concurrent creates took longer than {ROUND_TIMEOUT:.0f} s")
    spent = cpu.spent()
    total = sum(v for v in (spent["replicas"], spent["hosts"], spent["postgres"]) if v)
    return {
        "create_ready_ms": _ms(samples),
        "creates": len(samples),
        "no_capacity_retries": len(retries),
        "cpu_ms_per_create": round(1000 * total / len(samples), 1),
    }


async def _rate(
    clients: list[httpx.AsyncClient],
    path: str,
    deployment: Stack,
    postmaster: int | None,
    args: argparse.Namespace,
) -> dict[str, Any]:
    """Requests/s of GET *path*, each request to the next client's server in turn."""
    counts = {"ok": 0, "errors": 0}
    latencies: list[float] = []
    turn = itertools.count()
    counting = False

    async def worker() -> None:
        while True:
            http = clients[next(turn) % len(clients)]
            sent = trio.current_time()
            try:
                ok = (await http.get(path)).status_code == 200
            except httpx.TransportError:  # counted, as a load balancer's client would see it
                ok = False
            if counting:
                counts["ok" if ok else "errors"] += 1
                latencies.append(trio.current_time() - sent)

    async with trio.open_nursery() as nursery:
        for _ in range(args.concurrency):
            nursery.start_soon(worker)
        await trio.sleep(args.warmup)
        cpu, start, counting = _Cpu(deployment, postmaster), trio.current_time(), True
        await trio.sleep(args.duration)
        counting, elapsed, spent = False, trio.current_time() - start, cpu.spent()
        nursery.cancel_scope.cancel()
    ok = counts["ok"]

    def per_request(seconds: float | None) -> float | None:
        return None if seconds is None or not ok else round(1000 * seconds / ok, 3)

    return {
        "rps": round(ok / elapsed, 1),
        "p50_ms": round(statistics.median(latencies) * 1000, 2) if latencies else None,
        "errors": counts["errors"],
        "cpu_ms_per_request": {
            k: per_request(spent[k]) for k in ("replicas", "postgres", "client")
        },
        "replica_cores": round((spent["replicas"] or 0.0) / elapsed, 2),
    }


async def _measure(n: int, url: str, datadir: Path, args: argparse.Namespace) -> dict[str, Any]:
    async with open_store(url) as store:  # migrates the fresh database
        made = await bootstrap_organization(store, org_name="bench")
    await _insert(url, made.organization.id, 0, LIST_ROWS)
    postmaster = postgres_pids(datadir)
    started = trio.current_time()
    with tempfile.TemporaryDirectory(prefix=f"bench-replicas-{n}-") as tmp:
        async with stack(
            Path(tmp),
            url,
            made.plaintext_key,
            replicas=n,
            hosts=args.hosts,
            capacity=args.creates,
            haproxy=args.haproxy,
        ) as deployment:
            headers = {"Authorization": f"Bearer {made.plaintext_key}"}
            limits = httpx.Limits(
                max_connections=args.concurrency + args.creates,
                max_keepalive_connections=args.concurrency + args.creates,
            )
            clients = [
                httpx.AsyncClient(base_url=u, headers=headers, timeout=120, limits=limits)
                for u in deployment.urls
            ]
            try:
                setup_s = trio.current_time() - started
                await _warm(clients)
                idle = _Cpu(deployment, postmaster)
                await trio.sleep(args.idle)
                spent = idle.spent()
                result = await _creates(
                    clients, _Cpu(deployment, postmaster), args.creates, args.rounds
                )
                result["setup_s"] = round(setup_s, 1)
                result["idle_cores"] = {
                    k: None if v is None else round(v / args.idle, 3)
                    for k, v in spent.items()
                    if k != "client"
                }
                for name, path in PATHS.items():
                    result[name] = await _rate(clients, path, deployment, postmaster, args)
                if deployment.lb_url is not None:
                    async with httpx.AsyncClient(
                        base_url=deployment.lb_url, headers=headers, timeout=120, limits=limits
                    ) as lb:
                        result["haproxy"] = {
                            name: await _rate([lb], path, deployment, postmaster, args)
                            for name, path in PATHS.items()
                        }
            finally:
                for client in clients:
                    await client.aclose()
    return result


def _ratios(results: dict[str, dict[str, Any]]) -> dict[str, float | None]:
    base = results.get("1")
    ratios: dict[str, float | None] = {}
    if base is None:
        return ratios

    def ratio(a: float | None, b: float | None) -> float | None:
        return round(a / b, 3) if a is not None and b else None

    for n, row in results.items():
        if n == "1":
            continue
        for name in PATHS:
            ratios[f"{name}_rps_{n}_over_1"] = ratio(row[name]["rps"], base[name]["rps"])
        ratios[f"create_p50_{n}_over_1"] = ratio(
            row["create_ready_ms"]["p50"], base["create_ready_ms"]["p50"]
        )
    return ratios


def _print_row(n: str, row: dict[str, Any]) -> None:
    create = row["create_ready_ms"]
    line = (
        f"N={n}  create->ready p50 {create['p50']:.0f} ms p95 {create['p95']:.0f} ms"
        f" ({row['creates']} creates, {row['no_capacity_retries']} 409 retries,"
        f" {row['cpu_ms_per_create']:.0f} CPU ms each)  idle cores {row['idle_cores']}"
    )
    for name in PATHS:
        r = row[name]
        cpu = r["cpu_ms_per_request"]
        line += (
            f"\n      {name:<7}{r['rps']:>8.1f} req/s  p50 {r['p50_ms']} ms  CPU ms/req"
            f" replicas {cpu['replicas']} postgres {cpu['postgres']} client {cpu['client']}"
            f"  replica cores {r['replica_cores']}  errors {r['errors']}"
        )
    for name, r in row.get("haproxy", {}).items():
        line += f"\n      haproxy {name:<7}{r['rps']:>8.1f} req/s  p50 {r['p50_ms']} ms"
    print(line, flush=True)


def _forward(args: argparse.Namespace) -> dict[str, Any]:
    from bench import forward  # noqa: PLC0415 - the in-process servers' imports, when wanted

    measured: dict[str, Any] = trio.run(
        forward._run,
        argparse.Namespace(mib=args.forward_mib, rounds=args.forward_rounds, link="raw"),
    )
    return {k: measured[k] for k in ("hop", "paths", "ratios", "mib", "rounds", "link")}


def _settings(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench replicas", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a smoke run: about a minute")
    parser.add_argument("--replicas", default="1,2,3", help="replica counts (1,2,3)")
    parser.add_argument("--hosts", type=int, default=2, help="host daemons (2)")
    parser.add_argument("--creates", type=int, help="K concurrent creates (8; quick 4)")
    parser.add_argument("--rounds", type=int, help="rounds of K creates (3; quick 1)")
    parser.add_argument("--concurrency", type=int, default=12, help="throughput workers (12)")
    parser.add_argument("--duration", type=float, help="seconds per throughput figure (5; 1)")
    parser.add_argument("--warmup", type=float, help="seconds before each window (1; 0.3)")
    parser.add_argument("--idle", type=float, help="seconds of idle CPU read (2; quick 0.5)")
    parser.add_argument("--forward-mib", type=int, help="MiB per forward sample (256; 16)")
    parser.add_argument("--forward-rounds", type=int, help="forward rounds (3; quick 1)")
    parser.add_argument("--no-forward", action="store_true", help="leave the hop out")
    parser.add_argument("--haproxy", action="store_true", help="also through HAProxy")
    args = parser.parse_args(argv)
    quick = args.quick
    for name, full, small in (
        ("creates", 8, 4),
        ("rounds", 3, 1),
        ("duration", 5.0, 1.0),
        ("warmup", 1.0, 0.3),
        ("idle", 2.0, 0.5),
        ("forward_mib", 256, 16),
        ("forward_rounds", 3, 1),
    ):
        if getattr(args, name) is None:
            setattr(args, name, small if quick else full)
    try:
        args.counts = sorted({int(x) for x in args.replicas.split(",") if x.strip()})
    except ValueError:
        parser.error("--replicas takes replica counts: 1,2,3")
    if not args.counts or min(args.counts) < 1 or args.hosts < 1 or args.creates < 1:
        parser.error("bad --replicas, --hosts or --creates")
    if args.rounds < 1 or args.duration <= 0 or args.warmup < 0 or args.concurrency < 1:
        parser.error("bad --rounds, --duration, --warmup or --concurrency")
    if args.idle <= 0:
        parser.error("bad --idle")
    if args.haproxy and HAPROXY is None:
        print("bench replicas: haproxy is not installed; --haproxy ignored", file=sys.stderr)
    return args


def main(argv: list[str]) -> int:
    args = _settings(argv)
    load = os.getloadavg()
    print(f"bench replicas: load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}", flush=True)
    if (os.cpu_count() or 1) < 2 * max(args.counts):
        print(
            f"bench replicas: {os.cpu_count()} cores for up to {max(args.counts)} replicas,"
            " their hosts, PostgreSQL and this client: more replicas cannot raise CPU-bound"
            " throughput here; read the CPU per request and replica cores beside the ratios",
            flush=True,
        )
    results: dict[str, dict[str, Any]] = {}
    try:
        with temporary_cluster() as cluster:
            for n in args.counts:
                url = cluster.create_database(f"bench_replicas_{n}")
                results[str(n)] = trio.run(_measure, n, url, cluster.datadir, args)
                _print_row(str(n), results[str(n)])
    except ClusterUnavailable as exc:
        print(f"bench replicas: no PostgreSQL: {exc}", file=sys.stderr)
        return 2
    except StackError as exc:
        print(f"bench replicas: {exc}", file=sys.stderr)
        return 1
    hop = None if args.no_forward else _forward(args)
    if hop is not None:
        h = hop["hop"]
        print(
            f"forward hop (raw link, {hop['mib']} MiB x {hop['rounds']}): +{h['extra_rtt_ms']} ms"
            f" RTT, +{h['extra_open_ms']} ms open, +{h['extra_cpu_s_per_gib']} CPU s/GiB",
            flush=True,
        )
    summary = {
        "bench": "replicas",
        "results": results,
        "ratios": _ratios(results),
        "forward": hop,
        "config": {
            "replicas": args.counts,
            "hosts": args.hosts,
            "creates": args.creates,
            "rounds": args.rounds,
            "concurrency": args.concurrency,
            "duration_s": args.duration,
            "warmup_s": args.warmup,
            "haproxy": args.haproxy and HAPROXY is not None,
            "list_rows": LIST_ROWS,
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
        },
        "load_average": [round(x, 2) for x in load],
        "load_average_end": [round(x, 2) for x in os.getloadavg()],
    }
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
