"""`python -m bench forward`: what one replica-to-replica hop costs (docs/replicas.md).

    direct     client ══ replica 1's edge ══host link══▶ host
    forwarded  client ══ replica 2's edge ══replica link══▶ replica 1 ══host link══▶ host

Two real server stacks (`serve._serve`, one SQLite store, as replicas share PostgreSQL) and a
host made of the mux core alone run in this one process, so the figures are the edge's and the
forward's work rather than a device's: the host's streams are a sink (counts bytes, answers
how many at EOF) and an echo. The host and the replica link use the raw link port (``--link
ws``: WebSockets on the API port instead).

Figures, per path, medians of interleaved rounds (so load from elsewhere lands on both):
``mib_per_s`` (one stream of ``--mib`` MiB into the sink), ``cpu_s_per_gib`` (this process's
CPU seconds per GiB moved: client, both replicas and the host together, so the hop's share is
the difference of the two rows), ``rtt_ms`` (a 1-byte echo on an open stream) and ``open_ms``
(open the stream, preamble answered, and one echo). The last line printed is one JSON object
with the ratios forwarded/direct; compare ratios within one run, never across machines.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any, Final

import trio

from devyard.core import (
    ControlChannel,
    MuxStream,
    Session,
    accept_open,
    open_session,
    read_open,
)
from devyard.core.link import HOST_PATH, PROTO
from devyard.core.transports import link_url, open_transport
from devyard.server.config import ListenAddress, ServerConfig
from devyard.server.edge import HOST_TOKENS_FILE, Edge, create_host_token
from devyard.server.edge.forward import Holder, MemoryHolders
from devyard.server.edge.peers import PeerConfig
from devyard.server.hosts import EVENT_BUFFER, HostEvent
from devyard.server.serve import _serve, open_configured_store

PATHS: Final = ("direct", "forwarded")
METRICS: Final = ("mib_per_s", "cpu_s_per_gib", "rtt_ms", "open_ms")
_SECRET: Final = "bench-forward-cluster-secret-0123456789"
_CHUNK: Final = 256 * 1024
_ECHOES: Final = 50


async def _host_stream(stream: MuxStream) -> None:
    async with stream:
        request = await read_open(stream)
        await accept_open(stream)
        if request.get("instance_id") == "sink":
            total = 0
            while data := await stream.receive_some():
                total += len(data)
            await stream.send_all(str(total).encode())
        else:
            while data := await stream.receive_some():
                await stream.send_all(data)


async def _serve_host(session: Session) -> None:
    async with trio.open_nursery() as nursery:
        while True:
            nursery.start_soon(_host_stream, await session.accept_stream())


@asynccontextmanager
async def _host(url: str, token: str) -> AsyncIterator[None]:
    headers = [(b"authorization", f"Bearer {token}".encode())]
    hello = {
        "type": "hello",
        "proto": PROTO,
        "role": "host",
        "id": "bench",
        "version": "0.1.0",
        "hostname": "bench",
        "region": "local",
        "capacity": 1,
        "platforms": ["android"],
        "drivers": ["virtual"],
        "instances": [],
    }
    async with (
        open_transport(link_url(url, HOST_PATH), extra_headers=headers) as transport,
        open_session(transport, client=True) as session,
        trio.open_nursery() as nursery,
    ):
        control = ControlChannel(await session.open_stream())
        await control.send(hello)
        if (await control.receive()).get("type") != "registered":
            raise RuntimeError("the bench host was not registered")
        nursery.start_soon(_serve_host, session)
        yield
        nursery.cancel_scope.cancel()


async def _drain(events: trio.MemoryReceiveChannel[HostEvent]) -> None:
    async for _ in events:
        pass


@asynccontextmanager
async def _cluster(directory: Path, link: str) -> AsyncIterator[tuple[Edge, Edge, str]]:
    """Replicas r1 and r2 with a host linked to r1; yields their edges and the host id."""
    configs = [
        ServerConfig(
            data_dir=directory / name,
            listen=ListenAddress("127.0.0.1", 0),
            link_listen=ListenAddress("127.0.0.1", 0),
            peers=PeerConfig(cluster_secret=_SECRET, replica_id=name),
        )
        for name in ("r1", "r2")
    ]
    configs[1].data_dir.mkdir(mode=0o700, parents=True)
    holders = MemoryHolders()
    async with open_configured_store(configs[0]) as store, trio.open_nursery() as nursery:
        bound = []
        for config in configs:
            send, receive = trio.open_memory_channel[HostEvent](EVENT_BUFFER)
            nursery.start_soon(_drain, receive)
            bound.append(
                await nursery.start(
                    partial(_serve, store, config, None, host_events=send, holders=holders)
                )
            )
        urls = [f"tcp://127.0.0.1:{b.link_port}" if link == "raw" else b.local_url for b in bound]
        host_id, token = create_host_token(configs[0].data_dir / HOST_TOKENS_FILE)
        holders.holders[("host", host_id)] = Holder("r1", urls[0])
        edges = [b.hosts for b in bound]
        assert isinstance(edges[0], Edge) and isinstance(edges[1], Edge)
        async with _host(urls[0], token):
            yield edges[0], edges[1], host_id
        nursery.cancel_scope.cancel()


async def _bulk(open_stream: Callable[[str], Any], mib: int) -> tuple[float, float]:
    """One stream of *mib* MiB into the sink: (MiB/s, CPU s per GiB)."""
    payload = b"\0" * _CHUNK
    stream = await open_stream("sink")
    size = mib * 1024 * 1024
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(size // _CHUNK):
        await stream.send_all(payload)
    await stream.send_eof()
    answer = b""
    while data := await stream.receive_some():
        answer += data
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    await stream.aclose()
    if int(answer) != size:
        raise RuntimeError(f"the sink got {answer!r} bytes, not {size}")
    return mib / wall, cpu / (mib / 1024)


async def _latency(open_stream: Callable[[str], Any]) -> tuple[float, float]:
    """(median 1-byte echo round trip, median open + first echo), in ms."""
    opens, rtts = [], []
    for _ in range(_ECHOES // 5):
        start = time.perf_counter()
        stream = await open_stream("echo")
        await stream.send_all(b"x")
        await stream.receive_some()
        opens.append(time.perf_counter() - start)
        for _ in range(5):
            start = time.perf_counter()
            await stream.send_all(b"x")
            await stream.receive_some()
            rtts.append(time.perf_counter() - start)
        await stream.aclose()
    return statistics.median(rtts) * 1000, statistics.median(opens) * 1000


async def _run(settings: argparse.Namespace) -> dict[str, Any]:
    samples: dict[str, dict[str, list[float]]] = {p: {m: [] for m in METRICS} for p in PATHS}
    with tempfile.TemporaryDirectory(prefix="bench-forward-") as tmp:
        async with _cluster(Path(tmp), settings.link) as (r1, r2, host_id):
            openers = {
                "direct": partial(r1.open_instance_stream, host_id, "http", port=1),
                "forwarded": partial(r2.open_instance_stream, host_id, "http", port=1),
            }

            def opener(path: str) -> Callable[[str], Any]:
                return lambda instance: openers[path](instance_id=instance)

            for path in PATHS:  # warm up: the replica link is dialled on first need
                await _bulk(opener(path), 16)
            for _ in range(settings.rounds):
                for path in PATHS:
                    mib_s, cpu = await _bulk(opener(path), settings.mib)
                    rtt, open_ms = await _latency(opener(path))
                    for metric, value in zip(METRICS, (mib_s, cpu, rtt, open_ms), strict=True):
                        samples[path][metric].append(value)
    medians = {
        p: {m: round(statistics.median(v), 3) for m, v in s.items()} for p, s in samples.items()
    }
    d, f = medians["direct"], medians["forwarded"]
    return {
        "bench": "forward",
        "link": settings.link,
        "mib": settings.mib,
        "rounds": settings.rounds,
        "paths": medians,
        "ratios": {m: round(f[m] / d[m], 3) if d[m] else None for m in METRICS},
        "hop": {
            "extra_cpu_s_per_gib": round(f["cpu_s_per_gib"] - d["cpu_s_per_gib"], 3),
            "extra_rtt_ms": round(f["rtt_ms"] - d["rtt_ms"], 3),
            "extra_open_ms": round(f["open_ms"] - d["open_ms"], 3),
        },
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench forward", description=__doc__)
    parser.add_argument("--mib", type=int, default=256, help="MiB per bulk sample (256)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (3)")
    parser.add_argument("--link", choices=("raw", "ws"), default="raw")
    settings = parser.parse_args(argv)
    result = trio.run(_run, settings)
    for path in PATHS:
        row = result["paths"][path]
        print(
            f"{path:<10} {row['mib_per_s']:8.1f} MiB/s  {row['cpu_s_per_gib']:6.2f} CPU s/GiB"
            f"  rtt {row['rtt_ms']:6.3f} ms  open {row['open_ms']:6.3f} ms"
        )
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
