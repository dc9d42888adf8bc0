"""`python -m bench links`: what an idle link costs, in memory and in keepalive CPU.

Two processes (bench/_links_peer.py): a server holding N idle links, as the edge holds
connector links, and a client dialling them, as N connectors would (one process for all N).
For each carrier (raw TCP, and a WebSocket with devyard's own framing) the bench reads the
resident memory (VmRSS) of both processes before the links and once all are registered, and
the CPU time both use over `--idle` seconds of nothing but keepalives (a PING after 10 s
without a frame, docs/protocol.md 5.2). The rows are measured one after the other, each with
fresh processes. Both processes raise their open-file limit to the hard limit
(`resource.setrlimit`, 10,000 links are 10,000 sockets per side); the bench says so.

The last line is one JSON object: `{"bench": "links", "results": {CARRIER: {...}}, "targets":
{...}, "config": {...}}`; see bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any, Final

import trio

from bench._links_rows import measure_hosts, measure_viewers
from bench._paths import REPO, START_TIMEOUT
from bench._procs import ChildError, spawn
from bench._results import cpu_seconds

TARGET_BYTES_PER_LINK: Final = 20 * 1024  # issue 21: memory per idle connector link
CONNECTOR_ROWS: Final = ("tcp", "ws")
HOST_ROWS: Final = ("host_ws", "host_tcp")
ROWS: Final = (*CONNECTOR_ROWS, *HOST_ROWS, "viewer")
_SETTLE: Final = 2.0  # seconds after the last link registered, before RSS is read


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise ChildError(f"no VmRSS for {pid}")


async def _wait_for(child: Any, prefix: str, budget: float) -> None:
    """Read the child's lines until one starts with *prefix*, within *budget* seconds."""
    with trio.fail_after(budget):
        while not (await child.readline()).startswith(prefix):
            pass


async def measure(
    carrier: str, links: int, idle: float, logdir: Path, freeze_every: int
) -> dict[str, Any]:
    py = sys.executable
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in [str(REPO), env.get("PYTHONPATH", "")] if p)
    peer = "bench._links_peer"
    async with AsyncExitStack() as stack:
        server = await stack.enter_async_context(
            spawn(
                f"links-server-{carrier}",
                [
                    py,
                    "-m",
                    peer,
                    "server",
                    "--links",
                    str(links),
                    "--freeze-every",
                    str(freeze_every),
                ],
                logdir=logdir,
                cwd=REPO,
                env=env,
            )
        )
        with trio.fail_after(START_TIMEOUT):
            address = await server.wait_listen()
        client = await stack.enter_async_context(
            spawn(
                f"links-client-{carrier}",
                [
                    *(py, "-m", peer, "client", "--links", str(links), "--carrier", carrier),
                    *("--connect", f"{address[0]}:{address[1]}"),
                    *("--freeze-every", str(freeze_every)),
                ],
                logdir=logdir,
                cwd=REPO,
                env=env,
            )
        )
        await trio.sleep(1.0)  # the client's imports: its baseline before any link
        base = {"server": rss_bytes(server.pid), "client": rss_bytes(client.pid)}
        started = trio.current_time()
        budget = 60 + links / 10  # about 30 links/s are set up on a loaded 2-core machine
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_wait_for, server, "LINKS", budget)
            nursery.start_soon(_wait_for, client, "READY", budget)
        setup_s = trio.current_time() - started
        await trio.sleep(_SETTLE)
        held = {"server": rss_bytes(server.pid), "client": rss_bytes(client.pid)}
        cpu0 = {"server": cpu_seconds(server.pid), "client": cpu_seconds(client.pid)}
        await trio.sleep(idle)
        cpu1 = {"server": cpu_seconds(server.pid), "client": cpu_seconds(client.pid)}
        for child in (server, client):
            if child.process.returncode is not None:
                raise ChildError(f"{child.name} died{child.tail_note()}")
        redials = client.log_path.read_text(errors="replace").count("dialling again")
    per_link = {side: (held[side] - base[side]) / links for side in base}
    # CPU-ms per second per 1,000 links = per mille of one core for 1,000 idle links
    cpu_ms = {side: 1000 * (cpu1[side] - cpu0[side]) / idle / (links / 1000) for side in cpu0}
    return {
        "links": links,
        "setup_s": round(setup_s, 2),
        "server_bytes_per_link": round(per_link["server"]),
        "client_bytes_per_link": round(per_link["client"]),
        "server_cpu_ms_per_s_per_1000": round(cpu_ms["server"], 2),
        "client_cpu_ms_per_s_per_1000": round(cpu_ms["client"], 2),
        "server_rss_mib": round(held["server"] / 2**20, 1),
        "redials": redials,  # links that ended (keepalive lost under load) and were redialled
    }


async def _main(carriers: list[str], counts: dict[str, int], idle: float, freeze_every: int) -> int:
    links = counts["links"]
    load_before = os.getloadavg()[0]
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="devyard-bench-links-") as tmp:
        for carrier in carriers:
            count = counts[_count_of(carrier)]
            print(f"# {carrier}: {count} links, {idle:g} s idle", file=sys.stderr)
            if carrier in HOST_ROWS:
                results[carrier] = await measure_hosts(carrier, count, idle, Path(tmp))
            elif carrier == "viewer":
                results[carrier] = await measure_viewers(count, idle, Path(tmp))
            else:
                results[carrier] = await measure(carrier, count, idle, Path(tmp), freeze_every)
            # at once, so a carrier measured is not lost if a later one fails
            print(f"# {carrier}: {json.dumps(results[carrier])}", file=sys.stderr, flush=True)
    load_after = os.getloadavg()[0]
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    print(
        f"\nbench links: {links} idle connector links per carrier between two processes, "
        f"{counts['hosts']} idle host links to a real server's edge, {counts['viewers']} "
        "idle viewers of a static screen through it (the rows run: "
        f"{', '.join(carriers)}), on loopback, "
        f"{idle:g} s of keepalives measured; open-file limit raised to {hard} in both "
        f"(resource.setrlimit); "
        + (
            f"gc thresholds raised, gc.freeze() every {freeze_every} links; "
            if freeze_every
            else ""
        )
        + f"load average {load_before:.1f} before, {load_after:.1f} after\n"
    )
    print(
        "row      links  setup s  server B/link  client B/link  server / client CPU-ms/s per 1000"
    )
    for carrier, r in results.items():
        print(
            f"{carrier:<8} {r['links']:>5} {r['setup_s']:>7}  {r['server_bytes_per_link']:>13}  "
            f"{r['client_bytes_per_link']:>13}  {r['server_cpu_ms_per_s_per_1000']:>8} / "
            f"{r['client_cpu_ms_per_s_per_1000']}"
        )
    if "viewer" in results:
        r = results["viewer"]
        print(
            f"viewer: the host (hostd) process {r['host_bytes_per_link']} B and "
            f"{r['host_cpu_ms_per_s_per_1000']} CPU-ms/s per 1000 viewers; "
            f"{r['frames_while_idle']} frames to all viewers while idle"
        )
    targets: dict[str, Any] = {}
    for carrier, r in results.items():
        if carrier not in CONNECTOR_ROWS:
            continue  # the target is the connector link's; the other rows are reported
        value = r["server_bytes_per_link"]
        met = value <= TARGET_BYTES_PER_LINK
        targets[f"{carrier}.server_bytes_per_link"] = {
            "value": value,
            "target": TARGET_BYTES_PER_LINK,
            "ratio": round(value / TARGET_BYTES_PER_LINK, 3),
            "met": met,
        }
        print(
            f"target of issue 21 (informational): {carrier} server bytes per idle link "
            f"<= {TARGET_BYTES_PER_LINK}: {value} ({value / TARGET_BYTES_PER_LINK:.2f}x) "
            f"{'met' if met else 'NOT met'}"
        )
    print(
        json.dumps(
            {
                "bench": "links",
                "results": results,
                "targets": targets,
                "config": {
                    "links": links,
                    "hosts": counts["hosts"],
                    "viewers": counts["viewers"],
                    "idle_s": idle,
                    "nofile": hard,
                    "freeze_every": freeze_every,
                },
                "load_average": [round(load_before, 2), round(load_after, 2)],
            },
            separators=(",", ":"),
        ),
        flush=True,
    )
    return 0


def _count_of(row: str) -> str:
    return "hosts" if row in HOST_ROWS else "viewers" if row == "viewer" else "links"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench links",
        description="Memory per idle link and keepalive CPU per 1,000 idle links.",
    )
    parser.add_argument(
        "--quick", action="store_true", help="1,000 links, 500 hosts, 100 viewers, 12 s idle"
    )
    parser.add_argument("--links", type=int, help="connector links per carrier (default 10,000)")
    parser.add_argument("--hosts", type=int, help="host links per host row (default 1,000)")
    parser.add_argument("--viewers", type=int, help="viewers (default 300)")
    parser.add_argument("--idle", type=float, help="seconds of keepalives measured (default 25)")
    parser.add_argument(
        "--carriers",
        default=",".join(ROWS),
        help="comma-separated rows: tcp, ws (connector links), host_ws, host_tcp (host links "
        "to a real edge), viewer (stream WebSockets through a real edge)",
    )
    parser.add_argument(
        "--freeze-every",
        type=int,
        default=1000,
        help="both processes raise the collector's thresholds and gc.freeze() each time this "
        "many more links are up (0: Python's default collector settings)",
    )
    args = parser.parse_args(argv)
    counts = {
        "links": args.links or (1000 if args.quick else 10_000),
        "hosts": args.hosts or (500 if args.quick else 1000),
        "viewers": args.viewers or (100 if args.quick else 300),
    }
    idle = args.idle or (12.0 if args.quick else 25.0)
    carriers = [c for c in args.carriers.split(",") if c]
    if any(c not in ROWS for c in carriers):
        parser.error(f"rows are {', '.join(ROWS)}")
    try:
        return trio.run(_main, carriers, counts, idle, args.freeze_every)
    except* KeyboardInterrupt:
        pass
    print("bench links: interrupted; helper processes ended", file=sys.stderr)
    return 130
